// The live feed: a snapshot from /feed/calls/ (the filter bar's filters), then the /ws/live/
// stream on top of it. Messages that arrive while a snapshot loads are buffered and applied
// after it (calls already in the snapshot are skipped by id); a "reset" message refetches.
// Every piece of data goes into the DOM with textContent, never as markup.
(function () {
  "use strict";
  const MAX_ROWS = 500;      // rows kept in the table; older ones are dropped
  const MAX_HELD = 5000;     // calls held while paused; past that, resume refetches
  const FILTERS = ["pod", "namespace", "verb", "backend", "outcome", "node", "latency_above", "error"];

  const form = document.getElementById("filters");
  const tbody = document.getElementById("calls");
  const el = (id) => document.getElementById(id);

  const state = {
    loading: false, reloadAgain: false, buffer: [], seen: new Set(),
    paused: false, held: [], heldOverflow: false, socket: null, retry: 500,
  };

  function filters() {
    const out = {};
    for (const name of FILTERS) {
      const value = (form.elements[name].value || "").trim();
      if (value) out[name] = value;
    }
    return out;
  }

  function query(extra) {
    const params = new URLSearchParams(Object.assign({}, filters(), extra || {}));
    return params.toString();
  }

  // The same rules as the server's filters, for calls that arrive on the stream.
  function matches(call, f) {
    if (f.pod) {
      let pod = f.pod;
      if (pod.includes("/")) {
        const [ns, name] = [pod.slice(0, pod.indexOf("/")), pod.slice(pod.indexOf("/") + 1)];
        if (call.pod.namespace !== ns) return false;
        pod = name;
      }
      if (call.pod.name !== pod) return false;
    }
    if (f.namespace && call.pod.namespace !== f.namespace) return false;
    for (const key of ["verb", "backend", "outcome"]) {
      if (f[key] && call[key] !== f[key]) return false;
    }
    if (f.latency_above && !(call.duration_ms > parseFloat(f.latency_above))) return false;
    if (f.error && !(call.error || "").toLowerCase().includes(f.error.toLowerCase())) return false;
    return true;
  }

  function td(text, cls) {
    const cell = document.createElement("td");
    cell.textContent = text === null || text === undefined ? "" : String(text);
    if (cls) cell.className = cls;
    return cell;
  }

  function podLink(pod) {
    const cell = document.createElement("td");
    if (!pod.name) return cell;
    const a = document.createElement("a");
    a.href = "/pods/" + encodeURIComponent(pod.namespace || "-") + "/" + encodeURIComponent(pod.name) + "/";
    a.textContent = pod.namespace + "/" + pod.name;
    cell.appendChild(a);
    return cell;
  }

  function row(call, batchSize) {
    const tr = document.createElement("tr");
    tr.dataset.id = String(call.id);
    tr.className = "outcome-" + call.outcome;
    tr.appendChild(td(new Date(call.started_at).toISOString().slice(11, 23)));
    tr.appendChild(td(call.verb));
    tr.appendChild(td(call.backend));
    tr.appendChild(podLink(call.pod));
    tr.appendChild(td(call.node_count, "num"));
    tr.appendChild(td(call.verb === "filter" ? call.passed_count : "", "num"));
    tr.appendChild(td(call.duration_ms.toFixed(1), "num"));
    tr.appendChild(td(call.outcome, "outcome"));
    tr.appendChild(td(call.error, "error"));
    tr.appendChild(td(batchSize ? batchSize : "", "num"));
    return tr;
  }

  function trim() {
    while (tbody.rows.length > MAX_ROWS) tbody.deleteRow(-1);
    el("shown").textContent = String(tbody.rows.length);
  }

  // Newest first: `calls` comes oldest-first from the stream, so each one goes on top.
  function prepend(calls, batchSize) {
    const fragment = document.createDocumentFragment();
    for (let i = calls.length - 1; i >= 0; i--) fragment.appendChild(row(calls[i], batchSize));
    tbody.insertBefore(fragment, tbody.firstChild);
    trim();
  }

  function problem(text) {
    el("problem").hidden = !text;
    el("problem").textContent = text || "";
  }

  async function loadSnapshot() {
    if (state.loading) { state.reloadAgain = true; return; }
    state.loading = true;
    state.buffer = [];
    try {
      const response = await fetch("/feed/calls/?" + query({ limit: 200 }), { credentials: "same-origin" });
      const data = await response.json();
      if (!response.ok) throw new Error(data.error || response.statusText);
      tbody.replaceChildren();
      state.seen = new Set();
      const calls = data.results;  // newest first
      const fragment = document.createDocumentFragment();
      for (const call of calls) { state.seen.add(call.id); fragment.appendChild(row(call, 0)); }
      tbody.appendChild(fragment);
      trim();
      problem("");
    } catch (err) {
      problem("could not load history: " + err.message);
    } finally {
      state.loading = false;
    }
    if (state.reloadAgain) { state.reloadAgain = false; return loadSnapshot(); }
    const buffered = state.buffer;
    state.buffer = [];
    for (const calls of buffered) await apply(calls);
  }

  async function nodeMatches(calls, node) {
    // Summaries carry no decisions: ask the server which of these calls involve the node.
    const ids = calls.map((c) => c.id).join(",");
    const response = await fetch("/feed/calls/?" + query({ ids: ids, limit: 1000 }), { credentials: "same-origin" });
    if (!response.ok) return [];
    const keep = new Set((await response.json()).results.map((c) => c.id));
    return calls.filter((c) => keep.has(c.id));
  }

  async function apply(calls) {
    el("batch-size").textContent = String(calls.length);
    const f = filters();
    let fresh = calls.filter((c) => !state.seen.has(c.id) && matches(c, f));
    if (f.node && fresh.length) fresh = await nodeMatches(fresh, f.node);
    for (const c of fresh) state.seen.add(c.id);
    if (!fresh.length) return;
    if (state.paused) {
      if (state.held.length + fresh.length > MAX_HELD) { state.held = []; state.heldOverflow = true; }
      else state.held.push(...fresh);
      el("held-count").textContent = state.heldOverflow ? "too many (will reload)" : String(state.held.length);
      return;
    }
    prepend(fresh, calls.length);
  }

  function onMessage(event) {
    const message = JSON.parse(event.data);
    if (message.type === "reset") return loadSnapshot();
    let calls;
    if (message.type === "calls/add") calls = [message.payload];
    else if (message.type === "calls/batch") calls = message.payload;
    else return;
    if (state.loading) state.buffer.push(calls);
    else apply(calls);
  }

  function setConn(stateName, text) {
    const conn = el("conn");
    conn.dataset.state = stateName;
    conn.textContent = text;
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/live/");
    state.socket = socket;
    socket.onopen = () => { state.retry = 500; setConn("live", "live"); };
    socket.onmessage = onMessage;
    socket.onclose = (event) => {
      if (event.code === 4401 || event.code === 4403) { setConn("refused", "not allowed (" + event.code + ")"); return; }
      setConn("reconnecting", "reconnecting…");
      setTimeout(connect, state.retry);
      state.retry = Math.min(state.retry * 2, 10000);
    };
  }

  el("pause").addEventListener("click", () => {
    state.paused = !state.paused;
    const button = el("pause");
    button.textContent = state.paused ? "resume" : "pause";
    button.setAttribute("aria-pressed", String(state.paused));
    el("held").hidden = !state.paused;
    if (!state.paused) {
      const held = state.held, overflow = state.heldOverflow;
      state.held = []; state.heldOverflow = false;
      el("held-count").textContent = "0";
      if (overflow) loadSnapshot(); else if (held.length) prepend(held, 0);
    }
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    history.replaceState(null, "", "?" + query());
    loadSnapshot();
  });

  connect();  // the server's first message is a reset, which loads the snapshot
})();
