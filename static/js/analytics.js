// Analytics: the usage embedded in the page (analytics-data, what GET /api/analytics/ answers)
// drawn as line charts with Chart.js (static/vendor/chart.umd.js, from npm), a line per series;
// clicking a point opens the runs behind it (the runs list, filtered). The table under the
// charts holds the same figures and links.

/* global Chart */

const data = JSON.parse(document.getElementById("analytics-data").textContent);
const style = getComputedStyle(document.documentElement);
const colour = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
const SERIES = ["--accent", "--status-failed", "--status-succeeded", "--status-planning", "--status-running", "--status-pending"];
const FALLBACK = ["#1f5fbf", "#c0392b", "#2e7d32", "#7a4fbf", "#b7791f", "#6b7480"];
const DASHES = [[], [6, 3], [2, 2]];

const labels = data.buckets.map((bucket) => (data.interval === "day" ? bucket.slice(0, 10) : bucket.slice(0, 16).replace("T", " ")));
const charts = {};

// A line chart of ``value(point)`` per series; a click on a point opens its runs.
function lineChart(id, value, { percent = false } = {}) {
  const canvas = document.getElementById(id);
  if (!canvas) return;
  charts[id] = new Chart(canvas, {
    type: "line",
    data: {
      labels,
      datasets: data.series.map((series, i) => ({
        label: series.label,
        data: series.points.map(value),
        borderColor: colour(SERIES[i % SERIES.length], FALLBACK[i % FALLBACK.length]),
        backgroundColor: colour(SERIES[i % SERIES.length], FALLBACK[i % FALLBACK.length]),
        borderDash: DASHES[Math.floor(i / SERIES.length) % DASHES.length],
        spanGaps: true,
        pointRadius: 3,
      })),
    },
    options: {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      interaction: { mode: "nearest", intersect: true },
      scales: {
        y: { beginAtZero: true, ticks: percent ? { callback: (v) => `${Math.round(v * 100)}%` } : {} },
      },
      plugins: { legend: { display: data.series.length > 1 } },
      onHover: (event, elements) => {
        event.native.target.style.cursor = elements.length ? "pointer" : "default";
      },
      onClick: (event, elements) => {
        const [hit] = elements;
        if (!hit) return;
        const url = data.series[hit.datasetIndex].points[hit.index].runs_url;
        if (url) window.location.assign(url);
      },
    },
  });
}

lineChart("chart-calls", (p) => p.calls);
lineChart("chart-tokens", (p) => p.tokens_in + p.tokens_out);
lineChart("chart-cost", (p) => p.cost);
lineChart("chart-latency", (p) => p.latency_p95);
lineChart("chart-errors", (p) => p.error_rate, { percent: true });

// For tests that click a point as a user would: where is point ``index`` of series ``series``?
window.analytics = {
  charts,
  pointPosition(id, series, index) {
    const chart = charts[id];
    const element = chart.getDatasetMeta(series).data[index];
    const box = chart.canvas.getBoundingClientRect();
    return { x: box.left + element.x, y: box.top + element.y };
  },
};
