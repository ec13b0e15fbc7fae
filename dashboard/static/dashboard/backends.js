// Backends view: per backend and verb, latency percentiles on a log axis against the backend's
// httpTimeout, a latency heatmap over time (calls per time slot and log latency bucket), and
// calls/s with error and timeout rates. uPlot (from npm, served as a static file) draws the
// line charts; the heatmap is a canvas. Data comes from a json_script block; text is set by
// uPlot or with textContent, never as markup.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("chart-data").textContent);
  const edges = data.edges;  // upper edge (ms) of each latency bucket
  const width = () => Math.min(520, Math.max(320, window.innerWidth / 3 - 40));
  const utc = (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC");  // axes say UTC: draw UTC
  // Times as the rest of the dashboard shows them: 24-hour UTC (the live feed's clock, the pages'
  // "Y-m-d H:i:s"). uPlot's own time labels are 12-hour ("1:45pm"), beside the heatmap's "13:45".
  const clock = (ts) => new Date(ts * 1000).toISOString().slice(11, 16);
  const MINUTE_STEPS = [60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];  // whole minutes: HH:MM is exact
  const timeAxis = { label: "time (UTC)", labelSize: 18, incrs: MINUTE_STEPS, values: (u, ticks) => ticks.map(clock) };
  const dots = { show: true, size: 5 };  // a lone slot with calls still shows
  const fmtMs = (v) => (v == null ? "" : v >= 1000 ? (v / 1000).toPrecision(3) + " s" : v >= 1 ? v.toPrecision(3) + " ms" : v.toPrecision(2) + " ms");

  // What was drawn, for the browser tests (uPlot draws axis labels on its canvas).
  // The charts themselves too: their time labels are the ones uPlot drew last (axes[0]._values).
  const drawn = window.__extproxyCharts = [];
  const plots = window.__extproxyPlots = [];
  function plot(opts, columns, target, title) {
    drawn.push({ title: title, axes: opts.axes.map((a) => a.label), logY: !!(opts.scales.y && opts.scales.y.distr === 3),
      series: opts.series.map((s) => s.label) });
    const chart = new uPlot(opts, columns, target);
    plots.push(chart);
    return chart;
  }

  function box(container, title) {
    const div = document.createElement("div");
    div.className = "chart";
    const h = document.createElement("h4");
    h.textContent = title;
    div.appendChild(h);
    container.appendChild(div);
    return div;
  }

  function latencyChart(container, s, timeout) {
    const t = s.points.map((p) => p.t);
    const columns = [t, s.points.map((p) => p.p50), s.points.map((p) => p.p90), s.points.map((p) => p.p99)];
    const series = [{ label: "time (UTC)" }, { label: "p50", stroke: "#2a7", width: 2, points: dots },
      { label: "p90", stroke: "#e90", width: 2, points: dots }, { label: "p99", stroke: "#d33", width: 2, points: dots }];
    if (timeout) {
      columns.push(t.map(() => timeout));
      series.push({ label: "httpTimeout", stroke: "#555", dash: [6, 4], points: { show: false } });
    }
    return plot({
      width: width(), height: 220, series: series, legend: { live: false }, tzDate: utc,
      scales: { x: { time: true }, y: { distr: 3, log: 10 } },
      axes: [timeAxis,
        { label: "latency (ms, log scale)", labelSize: 18, size: 60, values: (u, ticks) => ticks.map(fmtMs) }],
    }, columns, box(container, s.verb + ": latency percentiles"), s.verb + ": latency percentiles");
  }

  function rateChart(container, s) {
    const t = s.points.map((p) => p.t);
    const pct = (v) => (v == null ? null : v * 100);
    return plot({
      width: width(), height: 220, legend: { live: false }, tzDate: utc,
      series: [{ label: "time (UTC)" }, { label: "calls/s", stroke: "#37c", width: 2, scale: "rate" },
        { label: "errors %", stroke: "#d33", scale: "pct", points: dots },
        { label: "timeouts %", stroke: "#a3c", scale: "pct", points: dots }],
      scales: { x: { time: true }, pct: { range: [0, 100] } },
      axes: [timeAxis, { scale: "rate", label: "calls/s", labelSize: 18, size: 60 },
        { scale: "pct", side: 1, label: "% of calls", labelSize: 18, size: 50, grid: { show: false } }],
    }, [t, s.points.map((p) => p.rate), s.points.map((p) => pct(p.error_rate)), s.points.map((p) => pct(p.timeout_rate))],
    box(container, s.verb + ": calls/s, errors and timeouts"), s.verb + ": rates");
  }

  // Heatmap: x = time slots, y = latency buckets (log), colour = calls in the cell (log scale).
  function heatmap(container, s, timeout) {
    const div = box(container, s.verb + ": latency heatmap (calls per slot)");
    const W = width(), H = 220, left = 64, bottom = 34, top = 8, right = 8;
    const canvas = document.createElement("canvas");
    const ratio = window.devicePixelRatio || 1;
    canvas.width = W * ratio; canvas.height = H * ratio;
    canvas.style.width = W + "px"; canvas.style.height = H + "px";
    div.appendChild(canvas);
    const ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    const slots = s.points.length;
    const used = s.heat.map((c) => c[1]);
    const lo = Math.max(0, Math.min.apply(null, used.concat([edges.length])) - 1);
    const hi = Math.min(edges.length - 1, Math.max.apply(null, used.concat([0])) + 1);
    const rows = hi - lo + 1;
    const cw = (W - left - right) / slots, ch = (H - top - bottom) / rows;
    const max = Math.max.apply(null, s.heat.map((c) => c[2]).concat([1]));
    for (const [slot, bucket, count] of s.heat) {
      const shade = Math.log(1 + count) / Math.log(1 + max);
      ctx.fillStyle = "rgba(200, 40, 40, " + (0.15 + 0.85 * shade).toFixed(3) + ")";
      ctx.fillRect(left + slot * cw, top + (hi - bucket) * ch, Math.max(cw - 1, 1), Math.max(ch - 1, 1));
    }
    ctx.fillStyle = "#333"; ctx.strokeStyle = "#999"; ctx.font = "11px system-ui, sans-serif";
    ctx.beginPath(); ctx.moveTo(left, top); ctx.lineTo(left, H - bottom); ctx.lineTo(W - right, H - bottom); ctx.stroke();
    ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (let b = lo; b <= hi; b += 2) ctx.fillText(fmtMs(edges[b]), left - 4, top + (hi - b) * ch + ch / 2);
    if (timeout) {  // the httpTimeout as a dashed line at its bucket
      let tb = edges.findIndex((e) => e >= timeout);
      if (tb >= lo && tb <= hi) {
        ctx.setLineDash([5, 4]); ctx.strokeStyle = "#555"; ctx.beginPath();
        ctx.moveTo(left, top + (hi - tb) * ch); ctx.lineTo(W - right, top + (hi - tb) * ch); ctx.stroke(); ctx.setLineDash([]);
      }
    }
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    const times = [clock(s.points[0].t - s.slot_seconds), clock(s.points[slots - 1].t)];
    ctx.fillText(times[0], left + 14, H - bottom + 4);
    ctx.fillText(times[1], W - right - 16, H - bottom + 4);
    ctx.fillText("time (UTC), " + Math.round(s.slot_seconds / 60) + " min per column", (left + W) / 2, H - bottom + 18);
    ctx.save(); ctx.translate(12, (top + H - bottom) / 2); ctx.rotate(-Math.PI / 2);
    ctx.fillText("latency (ms, log)", 0, -6); ctx.restore();
    const legend = document.createElement("p");
    legend.className = "heat-legend";
    legend.textContent = "colour: calls per cell, log scale, from 1 (pale) to " + max + " (dark)" +
      (timeout ? "; dashed: httpTimeout " + fmtMs(timeout) : "");
    div.appendChild(legend);
    drawn.push({ title: s.verb + ": heatmap", axes: ["time (UTC)", "latency (ms, log)"], logY: true, series: [], times: times });
  }

  for (const container of document.querySelectorAll(".charts")) {
    const backend = container.dataset.backend;
    const timeout = data.timeouts[backend];
    for (const s of data.series.filter((x) => x.backend === backend)) {
      const group = document.createElement("div");
      group.className = "verb-charts";
      container.appendChild(group);
      latencyChart(group, s, timeout);
      heatmap(group, s, timeout);
      rateChart(group, s);
    }
  }
})();
