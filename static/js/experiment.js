// The experiment page: a progress bar kept current by polling the progress endpoint (one small
// read a second while the experiment runs; the same with the inline and Celery backends), the
// scoreboard drawn from the API (redrawn as runs finish), a chart of accuracy against cost per
// item (Chart.js), the runs behind a clicked cell, and two arms head to head.
// Everything users or models wrote is set as text, never as HTML.

import { getJSON, sendJSON } from "./http.js";

const page = document.getElementById("experiment-page");
const experimentId = page.dataset.experimentId;
const api = `${page.dataset.apiRoot}experiments/${experimentId}/`;
const constants = JSON.parse(document.getElementById("experiment-constants").textContent);
const UNFINISHED = new Set(constants.unfinished);
const POLL_MS = 1000;
const SCOREBOARD_EVERY_MS = 2000;

const statusBadge = document.getElementById("experiment-status");
const progressBar = document.getElementById("experiment-progress");
const progressText = document.getElementById("experiment-progress-text");
const errorBox = document.getElementById("experiment-error");
const table = document.getElementById("scoreboard");
const cellRuns = document.getElementById("cell-runs");
const cellCaption = document.getElementById("cell-runs-caption");

let chart = null;
let lastDone = -1;
let lastScoreboardAt = 0;
let status = statusBadge.textContent.trim();

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function fixed(value, digits) {
  return value === null || value === undefined ? "—" : Number(value).toFixed(digits);
}

function money(value) {
  if (value === null || value === undefined) return "—";
  return value >= 0.01 ? `$${value.toFixed(3)}` : `$${value.toFixed(6)}`;
}

function percent(value) {
  return value === null || value === undefined ? "—" : `${(value * 100).toFixed(1)}%`;
}

function showProgress(progress) {
  status = progress.status;
  statusBadge.textContent = progress.status;
  statusBadge.className = `status status-${progress.status}`;
  progressBar.max = Math.max(1, progress.total);
  progressBar.value = progress.done;
  progressText.textContent = `${progress.done} / ${progress.total} runs`;
  errorBox.hidden = !progress.error;
  errorBox.textContent = progress.error;
  page.dataset.status = progress.status;
  const cancel = document.getElementById("experiment-cancel");
  const resume = document.getElementById("experiment-resume");
  if (cancel) cancel.hidden = !UNFINISHED.has(progress.status);
  if (resume) resume.hidden = progress.status === "finished" || UNFINISHED.has(progress.status);
}

// Scoreboard ---------------------------------------------------------------------------------

const NUMBER_COLUMNS = [
  ["tokens_per_item", "Tokens / item", (v) => fixed(v, 0)],
  ["conductor_tokens_per_item", "of conductor", (v) => fixed(v, 0)],
  ["worker_tokens_per_item", "of workers", (v) => fixed(v, 0)],
  ["calls_per_item", "Calls / item", (v) => fixed(v, 2)],
  ["cost_per_item", "Cost / item", money],
  ["wall_p50", "Wall p50 s", (v) => fixed(v, 2)],
  ["wall_p95", "Wall p95 s", (v) => fixed(v, 2)],
];

function cellButton(text, { arm, tag, label, best }) {
  const button = el("button", best ? `★ ${text}` : text, "cell-link");
  button.type = "button";
  button.dataset.arm = arm;
  if (tag) button.dataset.tag = tag;
  button.dataset.label = label;
  if (best) button.title = "best of this column";
  return button;
}

function drawScoreboard(board) {
  document.getElementById("scoreboard-interval").textContent = board.interval;
  table.replaceChildren();
  const head = el("thead");
  const headRow = el("tr");
  headRow.append(el("th", "Arm"), el("th", "Runs", "num"), el("th", "Failed", "num"), el("th", "Accuracy (95% CI)", "num"));
  for (const tag of board.tags) headRow.append(el("th", tag, "num"));
  for (const [, title] of NUMBER_COLUMNS) headRow.append(el("th", title, "num"));
  head.append(headRow);
  const body = el("tbody");
  for (const row of board.arms) {
    const tr = el("tr");
    tr.dataset.arm = row.arm;
    const name = el("th", row.label);
    name.scope = "row";
    name.append(el("span", ` ${row.pool_name}`, "hint"));
    tr.append(name);
    const runs = el("td", null, "num");
    runs.append(cellButton(String(row.runs), { arm: row.arm, label: `${row.label}: all runs` }));
    tr.append(runs, el("td", String(row.failed), "num"));
    const accuracy = el("td", null, "num accuracy");
    const bestAccuracy = (board.best.accuracy || []).includes(row.arm);
    const ci = row.accuracy === null ? "" : ` [${percent(row.accuracy_low)}, ${percent(row.accuracy_high)}]`;
    accuracy.append(cellButton(`${percent(row.accuracy)}${ci}`, { arm: row.arm, label: `${row.label}: all runs`, best: bestAccuracy }));
    if (bestAccuracy) accuracy.classList.add("best");
    tr.append(accuracy);
    for (const tag of board.tags) {
      const score = row.tags[tag];
      const td = el("td", null, "num");
      if (score) td.append(cellButton(percent(score.accuracy), { arm: row.arm, tag, label: `${row.label}, ${tag}` }));
      else td.textContent = "—";
      td.title = score ? `${score.runs} runs, 95% CI [${percent(score.low)}, ${percent(score.high)}]` : "";
      tr.append(td);
    }
    for (const [key, , format] of NUMBER_COLUMNS) {
      const best = (board.best[key] || []).includes(row.arm);
      const td = el("td", null, best ? "num best" : "num");
      td.dataset.column = key;
      td.append(cellButton(format(row[key]), { arm: row.arm, label: `${row.label}: all runs`, best }));
      tr.append(td);
    }
    body.append(tr);
  }
  table.append(head, body);
  drawChart(board);
}

function drawChart(board) {
  if (!window.Chart) return;
  const points = board.arms
    .filter((row) => row.accuracy !== null && row.cost_per_item !== null)
    .map((row) => ({ label: row.label, data: [{ x: row.cost_per_item, y: row.accuracy * 100 }] }));
  const canvas = document.getElementById("accuracy-cost-chart");
  if (chart) {
    chart.data.datasets = points;
    chart.update("none");
    return;
  }
  chart = new window.Chart(canvas, {
    type: "scatter",
    data: { datasets: points },
    options: {
      animation: false,
      elements: { point: { radius: 6, hoverRadius: 8 } },
      scales: {
        x: { title: { display: true, text: "cost per item ($)" }, beginAtZero: true },
        y: { title: { display: true, text: "accuracy (%)" }, min: 0, max: 100 },
      },
      plugins: { legend: { position: "bottom" } },
    },
  });
}

async function refreshScoreboard() {
  lastScoreboardAt = Date.now();
  const detail = await getJSON(api);
  drawScoreboard(detail.scoreboard);
  page.dataset.scoreboardDone = String(detail.progress.done);
}

// Cell runs ----------------------------------------------------------------------------------

async function showCellRuns(button) {
  const params = new URLSearchParams({ arm: button.dataset.arm, page_size: "200" });
  if (button.dataset.tag) params.set("tag", button.dataset.tag);
  cellCaption.textContent = `Loading the runs of ${button.dataset.label}…`;
  const body = await getJSON(`${api}runs/?${params}`);
  cellRuns.replaceChildren();
  for (const run of body.results) {
    const item = el("li");
    const link = el("a", `Run ${run.id}`);
    link.href = `/runs/${run.id}/`;
    item.append(link, el("span", ` ${run.status} · score ${run.score === null ? "—" : run.score} · `, "hint"));
    item.append(el("span", run.input.split("\n")[0].slice(0, 140), "plain-text"));
    cellRuns.append(item);
  }
  const more = body.next ? " (the first ones)" : "";
  cellCaption.textContent = `${button.dataset.label}: ${body.results.length} runs${more}`;
  page.dataset.cellRuns = String(body.results.length);
}

table.addEventListener("click", (event) => {
  const button = event.target.closest("button.cell-link");
  if (button) showCellRuns(button).catch((error) => { cellCaption.textContent = `Could not load the runs: ${error.message}`; });
});

// Head to head -------------------------------------------------------------------------------

async function headToHead() {
  const a = document.getElementById("h2h-a").value;
  const b = document.getElementById("h2h-b").value;
  const counts = document.getElementById("h2h-counts");
  const list = document.getElementById("h2h-items");
  if (a === b) {
    counts.textContent = "Pick two different arms.";
    return;
  }
  const result = await getJSON(`${api}head-to-head/?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`);
  const names = (id) => document.querySelector(`#h2h-a option[value="${id}"]`).textContent;
  const c = result.counts;
  counts.textContent = `Both right ${c.both_right} · only ${names(a)} ${c.only_a} · only ${names(b)} ${c.only_b} · both wrong ${c.both_wrong}`;
  list.replaceChildren();
  for (const item of result.items) {
    const li = el("li");
    const winner = item.winner === "a" ? names(a) : names(b);
    li.append(el("span", `#${item.position} `, "hint"), el("span", item.input, "plain-text"), el("span", ` — ${winner} right `, "hint"));
    const compare = el("a", "compare");
    compare.href = item.compare_url;
    compare.className = "h2h-compare";
    const runA = el("a", `run ${item.a_run}`);
    runA.href = `/runs/${item.a_run}/`;
    const runB = el("a", `run ${item.b_run}`);
    runB.href = `/runs/${item.b_run}/`;
    li.append(compare, el("span", " · "), runA, el("span", " · "), runB);
    list.append(li);
  }
  page.dataset.h2hItems = String(result.items.length);
}

document.getElementById("h2h-form").addEventListener("submit", (event) => {
  event.preventDefault();
  headToHead().catch((error) => { document.getElementById("h2h-counts").textContent = `Could not compare: ${error.message}`; });
});

// Cancel and resume --------------------------------------------------------------------------

for (const id of ["experiment-cancel", "experiment-resume"]) {
  const form = document.getElementById(id);
  if (!form) continue;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const { ok, status, body } = await sendJSON(form.action, { csrf: form });
    if (ok) {
      showProgress(body);
    } else {
      errorBox.hidden = false;
      errorBox.textContent = body.detail || `${status}`;
    }
    if (UNFINISHED.has(body.status)) poll();
  });
}

// Polling ------------------------------------------------------------------------------------

let polling = false;

async function poll() {
  if (polling) return;
  polling = true;
  try {
    for (;;) {
      let progress;
      try {
        progress = await getJSON(`${api}progress/`);
      } catch {
        await new Promise((resolve) => setTimeout(resolve, POLL_MS * 3));
        continue;
      }
      showProgress(progress);
      const finished = !UNFINISHED.has(progress.status);
      if (progress.done !== lastDone && (finished || Date.now() - lastScoreboardAt >= SCOREBOARD_EVERY_MS)) {
        lastDone = progress.done;
        await refreshScoreboard().catch(() => {});
      }
      if (finished) {
        if (progress.done !== lastDone) await refreshScoreboard().catch(() => {});
        lastDone = progress.done;
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  } finally {
    polling = false;
  }
}

refreshScoreboard()
  .catch(() => {})
  .finally(() => {
    if (UNFINISHED.has(status)) poll();
    else showProgress({ status, done: progressBar.value, total: progressBar.max, error: errorBox.textContent.trim() });
  });
