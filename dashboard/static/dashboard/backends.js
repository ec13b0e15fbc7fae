// Backends view: per backend and verb, latency percentiles against the backend's httpTimeout,
// and calls/s with error and timeout rates, drawn with uPlot (installed from npm, served as a
// static file). Data comes from a json_script block; labels are set as text by uPlot.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("chart-data").textContent);
  const width = () => Math.min(560, Math.max(320, window.innerWidth / 2 - 40));

  function chart(container, title, series, columns, axes) {
    const box = document.createElement("div");
    box.className = "chart";
    container.appendChild(box);
    return new uPlot({ title: title, width: width(), height: 220, series: series,
      axes: axes || [{}, { size: 60 }], scales: { x: { time: true } } }, columns, box);
  }

  for (const container of document.querySelectorAll(".charts")) {
    const backend = container.dataset.backend;
    const timeout = data.timeouts[backend];
    for (const s of data.series.filter((x) => x.backend === backend)) {
      const t = s.points.map((p) => p.t);
      const latency = [t, s.points.map((p) => p.p50), s.points.map((p) => p.p90), s.points.map((p) => p.p99)];
      const latencySeries = [{}, { label: "p50 ms", stroke: "#2a7" }, { label: "p90 ms", stroke: "#e90" },
        { label: "p99 ms", stroke: "#d33" }];
      if (timeout) {
        latency.push(t.map(() => timeout));
        latencySeries.push({ label: "httpTimeout ms", stroke: "#555", dash: [6, 4] });
      }
      chart(container, s.verb + ": latency", latencySeries, latency);
      chart(container, s.verb + ": calls/s, error and timeout rates",
        [{}, { label: "calls/s", stroke: "#37c", scale: "rate" },
          { label: "error rate", stroke: "#d33", scale: "ratio" },
          { label: "timeout rate", stroke: "#a3c", scale: "ratio" }],
        [t, s.points.map((p) => p.rate), s.points.map((p) => p.error_rate), s.points.map((p) => p.timeout_rate)],
        [{}, { scale: "rate", size: 60, label: "calls/s" }, { scale: "ratio", side: 1, size: 50, label: "rate" }]);
    }
  }
})();
