// Review insight: the counts embedded in the page (insights-data) drawn as bar charts with
// Chart.js (static/vendor/chart.umd.js, from npm); clicking a bar opens the runs behind it (the
// review queue, filtered). The tables under the charts hold the same counts and links.

/* global Chart */

const data = JSON.parse(document.getElementById("insights-data").textContent);
const style = getComputedStyle(document.documentElement);
const colour = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
const SERIES = ["--accent", "--status-failed", "--status-succeeded", "--status-planning", "--status-running", "--status-pending"];
const FALLBACK = ["#1f5fbf", "#c0392b", "#2e7d32", "#7a4fbf", "#b7791f", "#6b7480"];

const charts = {};

// A bar chart whose bars open ``urls[datasetIndex][index]``.
function barChart(id, { labels, datasets, urls, stacked = false, horizontal = false }) {
  const canvas = document.getElementById(id);
  if (!canvas || !labels.length) return null;
  const chart = new Chart(canvas, {
    type: "bar",
    data: { labels, datasets },
    options: {
      indexAxis: horizontal ? "y" : "x",
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      scales: {
        x: { stacked, beginAtZero: true, ticks: { precision: 0 } },
        y: { stacked, beginAtZero: true, ticks: { precision: 0 } },
      },
      plugins: { legend: { display: datasets.length > 1 } },
      onHover: (event, elements) => {
        event.native.target.style.cursor = elements.length ? "pointer" : "default";
      },
      onClick: (event, elements) => {
        const [hit] = elements;
        if (!hit) return;
        const url = urls[hit.datasetIndex][hit.index];
        if (url) window.location.assign(url);
      },
    },
  });
  charts[id] = chart;
  return chart;
}

barChart("chart-by-kind", {
  labels: data.by_kind.map((row) => row.name),
  datasets: [{ label: "Runs", data: data.by_kind.map((row) => row.runs), backgroundColor: colour(SERIES[0], FALLBACK[0]) }],
  urls: [data.by_kind.map((row) => row.url)],
  horizontal: true,
});

barChart("chart-by-worker", {
  labels: data.by_worker.map((row) => row.worker),
  datasets: [{ label: "Runs", data: data.by_worker.map((row) => row.runs), backgroundColor: colour(SERIES[1], FALLBACK[1]) }],
  urls: [data.by_worker.map((row) => row.url)],
  horizontal: true,
});

// One stacked bar per day, one series per strategy.
const days = [...new Set(data.by_day.map((row) => row.day))].sort();
const strategies = [...new Set(data.by_day.map((row) => row.strategy))].sort();
const cell = new Map(data.by_day.map((row) => [`${row.day} ${row.strategy}`, row]));
barChart("chart-by-day", {
  labels: days,
  datasets: strategies.map((strategy, i) => ({
    label: strategy,
    data: days.map((day) => (cell.get(`${day} ${strategy}`) || { runs: 0 }).runs),
    backgroundColor: colour(SERIES[i % SERIES.length], FALLBACK[i % FALLBACK.length]),
  })),
  urls: strategies.map((strategy) => days.map((day) => (cell.get(`${day} ${strategy}`) || {}).url)),
  stacked: true,
});

// For tests that click a bar as a user would: where is bar ``index`` of series ``series`` drawn?
window.insights = {
  charts,
  barPosition(id, series, index) {
    const chart = charts[id];
    if (!chart) return null;
    const bar = chart.getDatasetMeta(series).data[index];
    const box = chart.canvas.getBoundingClientRect();
    const { x, y } = bar.tooltipPosition();
    return { x: box.left + x, y: box.top + y };
  },
};
