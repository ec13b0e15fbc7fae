// The live feed: a snapshot (/feed/attempts/ or /feed/calls/, with the filter bar's filters),
// then the /ws/live/ stream on top of it. Messages that arrive while a snapshot loads are
// buffered and applied after it (calls already seen are skipped by id); a "reset" message
// (sent after any gap in the stream) refetches. Two views: one row per scheduling attempt
// (chain of backends, result, first rejection; a click shows its calls), or one row per call.
// Memory is bounded: rows, attempts, ids seen, calls held while paused, refreshes pending.
// Every piece of data goes into the DOM with textContent, never as markup.
(function () {
  "use strict";
  const MAX_ROWS = 500;       // rows kept per view; older ones are dropped
  const MAX_HELD = 5000;      // calls held while paused; past that, resume refetches
  const MAX_SEEN = 20000;     // call ids remembered to skip duplicates (snapshot + stream)
  const REFRESH_MS = 1000;    // how often attempts changed by the stream are re-told by the server
  const REFRESH_KEYS = 40;    // attempts re-told per refresh (the newest first)
  const SUMMARY_MS = 5000;
  // `verdict` goes with `node`: arriving calls are checked against both by the server (nodeMatches).
  const FILTERS = ["pod", "namespace", "verb", "backend", "outcome", "node", "verdict", "latency_above", "error"];

  const form = document.getElementById("filters");
  const el = (id) => document.getElementById(id);
  const view = el("feed").dataset.view === "calls" ? "calls" : "attempts";
  const tbody = el(view === "calls" ? "calls" : "attempts");

  // A set that forgets its oldest members past `max` (amortised O(1)).
  class BoundedSet {
    constructor(max) { this.max = max; this.clear(); }
    clear() { this.set = new Set(); this.order = []; }
    has(x) { return this.set.has(x); }
    add(x) {
      if (this.set.has(x)) return;
      this.set.add(x); this.order.push(x);
      if (this.order.length > 2 * this.max) { this.order = this.order.slice(-this.max); this.set = new Set(this.order); }
    }
    get size() { return this.set.size; }
  }

  const state = {
    loading: false, reloadAgain: false, buffer: [], seen: new BoundedSet(MAX_SEEN),
    paused: false, held: [], heldOverflow: false, socket: null, retry: 500,
    attempts: new Map(),   // key -> {key, pod, started_at, steps, told, row, detail}; insertion = age
    dirty: new Set(),      // attempt keys the stream changed since the server last told them
  };
  window.__extproxyFeed = state;  // for the browser tests: sizes stay bounded

  function filters() {
    const out = {};
    for (const name of FILTERS) {
      const value = (form.elements[name].value || "").trim();
      if (value) out[name] = value;
    }
    return out;
  }

  function query(extra) {
    return new URLSearchParams(Object.assign({}, filters(), extra || {})).toString();
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
    for (const key of ["verb", "outcome"]) {
      if (f[key] && call[key] !== f[key]) return false;
    }
    // A backend of the combined form takes part in `combined` calls (part_backends names them).
    if (f.backend && call.backend !== f.backend && !(call.part_backends || []).includes(f.backend)) return false;
    if (f.latency_above && !(call.duration_ms > parseFloat(f.latency_above))) return false;
    // As the server's `error`: the call's error, or one of its parts' (an ignorable backend's
    // failure in the combined form is its part's alone).
    if (f.error) {
      const words = f.error.toLowerCase();
      const texts = [call.error || ""].concat(call.part_errors || []);
      if (!texts.some((t) => t.toLowerCase().includes(words))) return false;
    }
    return true;
  }

  function td(text, cls) {
    const cell = document.createElement("td");
    cell.textContent = text === null || text === undefined ? "" : String(text);
    if (cls) cell.className = cls;
    return cell;
  }

  // As dashboard/urls.py (_segment, PodName, PodNamespace) and reverse() build them: "%" and "/"
  // escaped once more, a "." or ".." segment escaped (browsers resolve those), "-" for no
  // namespace, so that every pod's link opens that pod.
  function segment(value) {
    let escaped = value.replace(/%/g, "%25").replace(/\//g, "%2F");
    if (escaped === "." || escaped === "..") escaped = escaped.replace(/\./g, "%2E");
    return encodeURIComponent(escaped);
  }

  function namespaceSegment(namespace) {
    if (!namespace) return "-";
    return namespace === "-" ? encodeURIComponent("%2D") : segment(namespace);
  }

  function podHref(pod, attempt) {
    return "/pods/" + namespaceSegment(pod.namespace) + "/" + segment(pod.name) + "/" +
      (attempt ? "?attempt=" + encodeURIComponent(attempt) : "");
  }

  function podLink(pod, attempt) {
    const cell = document.createElement("td");
    if (!pod.name) { cell.textContent = "(no pod: undecodable request)"; cell.className = "muted"; return cell; }
    const a = document.createElement("a");
    a.href = podHref(pod, attempt);
    a.textContent = pod.namespace + "/" + pod.name;
    cell.appendChild(a);
    return cell;
  }

  const clock = (iso) => new Date(iso).toISOString().slice(11, 23);

  // --- calls view ---------------------------------------------------------------------------

  function callRow(call, batchSize) {
    const tr = document.createElement("tr");
    tr.dataset.id = String(call.id);
    tr.className = "outcome-" + call.outcome;
    tr.appendChild(td(clock(call.started_at)));
    tr.appendChild(td(call.verb));
    tr.appendChild(td(call.backend));
    tr.appendChild(podLink(call.pod, call.attempt));
    tr.appendChild(td(call.node_count, "num"));
    tr.appendChild(td(call.verb === "filter" ? call.passed_count : "", "num"));
    tr.appendChild(td(call.duration_ms.toFixed(1), "num"));
    tr.appendChild(td(call.outcome, "outcome"));
    tr.appendChild(td(call.error, "error"));
    tr.appendChild(td(batchSize ? batchSize : "", "num"));
    return tr;
  }

  function trimCalls() {
    while (tbody.rows.length > MAX_ROWS) tbody.deleteRow(-1);
    el("shown").textContent = String(tbody.rows.length);
  }

  function prependCalls(calls, batchSize) {
    const fragment = document.createDocumentFragment();
    for (let i = calls.length - 1; i >= 0; i--) fragment.appendChild(callRow(calls[i], batchSize));
    tbody.insertBefore(fragment, tbody.firstChild);
    trimCalls();
  }

  // --- attempts view ------------------------------------------------------------------------

  const keyOf = (call) => call.attempt || "call-" + call.id;

  function stepFromCall(call) {  // what a summary says; the server's telling replaces it
    const detail = call.verb === "filter" && call.outcome === "ok" ? call.passed_count + "/" + call.node_count + " passed" : "";
    return { verb: call.verb, backend: call.backend, call_id: call.id, duration_ms: call.duration_ms,
      outcome: call.outcome, counted: "", detail: detail, error: call.error || "", rejection: null };
  }

  function chainCell(steps) {
    const cell = document.createElement("td");
    cell.className = "chain";
    for (const s of steps) {
      const chip = document.createElement("span");
      chip.className = "step outcome-" + s.outcome + (s.counted ? " counted-" + s.counted.replace(/\s+/g, "-") : "");
      // A backend extproxy never called has no time: "not called", and why in the title.
      let text = s.backend + " " + s.verb + ": " + (s.not_called ? "not called" :
        Number(s.duration_ms).toFixed(1) + " ms " + (s.counted && s.counted !== s.outcome ? s.counted : s.outcome));
      if (s.detail) text += " (" + s.detail + ")";
      chip.textContent = text;
      chip.title = s.error || "";
      cell.appendChild(chip);
    }
    return cell;
  }

  function firstRejection(entry) {
    if (!entry.told) return "";
    for (const s of entry.told.steps) {
      if (s.rejection) return s.rejection[0] + ": " + s.rejection[1] + " (" + s.backend + ")";
      if (s.not_called) return s.backend + " " + s.verb + " not called: " + s.error;
      if (s.counted === "error") return s.backend + " " + s.verb + " error: " + s.error;
    }
    return "";
  }

  function resultText(entry) {
    if (entry.told) return entry.told.state + (entry.told.node ? " → " + entry.told.node : "");
    const last = entry.steps[entry.steps.length - 1];
    return last ? last.verb + " " + last.outcome : "";
  }

  function attemptRow(entry) {
    const tr = document.createElement("tr");
    tr.dataset.key = entry.key;
    tr.className = "attempt-row state-" + (entry.told ? entry.told.state.replace(/\s+/g, "-") : "streaming");
    tr.appendChild(td(clock(entry.started_at)));
    tr.appendChild(podLink(entry.pod, entry.key.startsWith("call-") ? "" : entry.key));
    tr.appendChild(chainCell(entry.told ? entry.told.steps : entry.steps));
    const result = td(resultText(entry), "result");
    if (entry.told) result.title = entry.told.sentence;
    tr.appendChild(result);
    tr.appendChild(td(firstRejection(entry), "reason"));
    tr.addEventListener("click", (event) => { if (event.target.tagName !== "A") toggleDetail(entry); });
    return tr;
  }

  function detailRow(entry) {
    const tr = document.createElement("tr");
    tr.className = "attempt-detail";
    const cell = document.createElement("td");
    cell.colSpan = 5;
    if (entry.told) {
      const sentence = document.createElement("p");
      sentence.textContent = entry.told.sentence;
      cell.appendChild(sentence);
    }
    const table = document.createElement("table");
    const head = table.createTHead().insertRow();
    for (const h of ["verb", "backend", "ms", "outcome", "counted", "detail", "first rejection", "call"]) {
      const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
    }
    const body = table.createTBody();
    for (const s of entry.told ? entry.told.steps : entry.steps) {
      const r = body.insertRow();
      r.appendChild(td(s.verb)); r.appendChild(td(s.backend));
      r.appendChild(td(s.not_called ? "—" : Number(s.duration_ms).toFixed(1), "num"));
      r.appendChild(td(s.not_called ? "not called" : s.outcome)); r.appendChild(td(s.counted)); r.appendChild(td(s.detail + (s.error ? " " + s.error : "")));
      r.appendChild(td(s.rejection ? s.rejection[0] + ": " + s.rejection[1] : ""));
      const link = document.createElement("td");
      const a = document.createElement("a");
      a.href = "/api/calls/" + encodeURIComponent(s.call_id) + "/";
      a.textContent = "#" + s.call_id;
      link.appendChild(a); r.appendChild(link);
    }
    cell.appendChild(table);
    tr.appendChild(cell);
    return tr;
  }

  function toggleDetail(entry) {
    if (entry.detail) { entry.detail.remove(); entry.detail = null; return; }
    entry.detail = detailRow(entry);
    entry.row.after(entry.detail);
  }

  function render(entry, onTop) {
    const row = attemptRow(entry);
    if (onTop || !entry.row || !entry.row.parentNode) {
      if (entry.row) entry.row.remove();
      tbody.insertBefore(row, tbody.firstChild);
    } else {
      entry.row.replaceWith(row);
    }
    entry.row = row;
    if (entry.detail) { entry.detail.remove(); entry.detail = detailRow(entry); row.after(entry.detail); }
  }

  function forget(entry) {
    if (entry.row) entry.row.remove();
    if (entry.detail) entry.detail.remove();
    state.attempts.delete(entry.key);
    state.dirty.delete(entry.key);
  }

  function trimAttempts() {
    for (const entry of state.attempts.values()) {  // oldest first
      if (state.attempts.size <= MAX_ROWS) break;
      forget(entry);
    }
    el("shown").textContent = String(state.attempts.size);
  }

  function addCalls(calls) {  // oldest first
    const touched = new Map();  // key -> entry, in the order of their newest call
    for (const call of calls) {
      const key = keyOf(call);
      let entry = state.attempts.get(key);
      if (!entry) entry = { key: key, pod: call.pod, started_at: call.started_at, steps: [], told: null, row: null, detail: null };
      state.attempts.delete(key); state.attempts.set(key, entry);  // newest activity last
      entry.steps.push(stepFromCall(call));
      entry.told = null;
      state.dirty.add(key);
      touched.delete(key); touched.set(key, entry);
    }
    // One insertion for the whole batch: each touched attempt rendered once, newest on top.
    const fragment = document.createDocumentFragment();
    for (const entry of Array.from(touched.values()).reverse()) {
      if (entry.row) entry.row.remove();
      if (entry.detail) entry.detail.remove();
      entry.row = attemptRow(entry);
      fragment.appendChild(entry.row);
      if (entry.detail) { entry.detail = detailRow(entry); fragment.appendChild(entry.detail); }
    }
    tbody.insertBefore(fragment, tbody.firstChild);
    trimAttempts();
  }

  function showAttempts(results) {  // newest first, from the server
    const fragment = document.createDocumentFragment();
    for (let i = results.length - 1; i >= 0; i--) {
      const told = results[i];
      const entry = { key: told.key, pod: told.pod, started_at: told.started_at, steps: told.steps, told: told,
        row: null, detail: null };
      state.attempts.set(told.key, entry);
      for (const id of told.calls) state.seen.add(id);
    }
    for (const entry of Array.from(state.attempts.values()).reverse()) {
      entry.row = attemptRow(entry);
      fragment.appendChild(entry.row);
    }
    tbody.appendChild(fragment);
    trimAttempts();
  }

  let refreshing = false;
  async function refreshAttempts() {
    if (refreshing || state.loading || !state.dirty.size) return;
    refreshing = true;
    try {
      const keys = Array.from(state.dirty).filter((k) => state.attempts.has(k)).slice(-REFRESH_KEYS);
      state.dirty = new Set(Array.from(state.dirty).filter((k) => state.attempts.has(k)).slice(-MAX_ROWS));
      for (const k of keys) state.dirty.delete(k);
      if (!keys.length) return;
      const response = await fetch("/feed/attempts/?" + new URLSearchParams({ keys: keys.join(","), limit: REFRESH_KEYS }),
        { credentials: "same-origin" });
      if (!response.ok) return;
      for (const told of (await response.json()).results) {
        const entry = state.attempts.get(told.key);
        if (!entry || state.dirty.has(told.key)) continue;  // changed again meanwhile: told next time
        entry.told = told;
        render(entry, false);
      }
    } catch (err) {
      // the next refresh tries again
    } finally {
      refreshing = false;
    }
  }

  // --- snapshot and stream ------------------------------------------------------------------

  function problem(text) {
    el("problem").hidden = !text;
    el("problem").textContent = text || "";
  }

  async function loadSnapshot() {
    if (state.loading) { state.reloadAgain = true; return; }
    state.loading = true;
    state.buffer = [];
    try {
      const path = view === "calls" ? "/feed/calls/?" + query({ limit: 200 }) : "/feed/attempts/?" + query({ limit: 100 });
      const response = await fetch(path, { credentials: "same-origin" });
      const data = await response.json();
      if (!response.ok) throw new Error(data.error || response.statusText);
      tbody.replaceChildren();
      state.seen.clear();
      state.attempts = new Map();
      state.dirty = new Set();
      if (view === "calls") {
        const fragment = document.createDocumentFragment();
        for (const call of data.results) { state.seen.add(call.id); fragment.appendChild(callRow(call, 0)); }
        tbody.appendChild(fragment);
        trimCalls();
      } else {
        showAttempts(data.results);
      }
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

  function show(calls, batchSize) {
    if (view === "calls") prependCalls(calls, batchSize); else addCalls(calls);
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
    show(fresh, calls.length);
  }

  function onMessage(event) {
    const message = JSON.parse(event.data);
    if (message.type === "reset") return loadSnapshot();
    let calls;
    if (message.type === "calls/add") calls = [message.payload];
    else if (message.type === "calls/batch") calls = message.payload;
    else return;
    if (state.loading) {
      if (state.buffer.length > MAX_HELD) { state.reloadAgain = true; state.buffer = []; }  // bounded: refetch instead
      else state.buffer.push(calls);
    } else apply(calls);
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
    let opened = false;
    socket.addEventListener("open", () => { opened = true; });
    socket.onclose = (event) => {
      if (event.code === 4401 || event.code === 4403) { setConn("refused", "not allowed (" + event.code + ")"); return; }
      if (event.code === 4503 || !opened) {
        // No stream (the server's channel layer away, or the server itself): the first message,
        // the reset that loads the snapshot, never comes; load what is recorded, at each retry.
        if (event.code === 4503) setConn("away", "live stream unavailable: showing recorded calls, retrying…");
        else setConn("reconnecting", "reconnecting…");
        loadSnapshot();
      } else setConn("reconnecting", "reconnecting…");
      setTimeout(connect, state.retry);
      state.retry = Math.min(state.retry * 2, 10000);
    };
  }

  // --- the summary band ---------------------------------------------------------------------

  async function loadSummary() {
    try {
      const response = await fetch("/feed/summary/", { credentials: "same-origin" });
      if (!response.ok) return;
      const s = await response.json();
      el("sum-rate").textContent = String(s.attempts_per_s);
      el("sum-pending").textContent = String(s.pending);
      el("sum-minutes").textContent = String(s.minutes);
      const box = el("sum-backends");
      box.replaceChildren();
      for (const b of s.backends) {
        const span = document.createElement("span");
        span.className = "sum-backend" + (b.errors || b.timeouts ? " bad" : "");
        span.textContent = b.backend + " " + b.calls + " · " + b.errors + " · " + b.timeouts;
        box.appendChild(span);
      }
      if (!s.backends.length) box.textContent = "no calls";
    } catch (err) {
      // shown again on the next tick
    }
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
      if (overflow) loadSnapshot(); else if (held.length) show(held, 0);
    }
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    history.replaceState(null, "", "?" + new URLSearchParams(Object.assign({ view: view }, filters())).toString());
    loadSnapshot();
  });

  for (const id of ["view-attempts", "view-calls"]) {  // switching views keeps the filters
    el(id).addEventListener("click", (event) => {
      event.preventDefault();
      location.search = "?" + new URLSearchParams(Object.assign(filters(), { view: id.slice(5) })).toString();
    });
  }

  if (view === "attempts") setInterval(refreshAttempts, REFRESH_MS);
  loadSummary();
  setInterval(loadSummary, SUMMARY_MS);
  connect();  // the server's first message is a reset, which loads the snapshot
})();
