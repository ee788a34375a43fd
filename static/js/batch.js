// The batch page: progress, the aggregate before and after, and every item, drawn from the state
// embedded in the page and then from GET /api/batches/<id>/, polled until every replay finished.
// Every text from a run goes in as textContent, never as HTML.

import { getJSON } from "./http.js";

const config = JSON.parse(document.getElementById("batch-config").textContent);
let state = JSON.parse(document.getElementById("batch-state").textContent);

const OUTCOME_TEXT = {
  right: "right",
  wrong: "wrong",
  failed: "failed",
  cancelled: "cancelled",
  unscored: "unscored",
  pending: "running…",
};

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function runLink(run) {
  const td = cell("", "num");
  const link = document.createElement("a");
  link.href = `/runs/${run.id}/`;
  link.textContent = `#${run.id}`;
  td.append(link);
  return td;
}

function outcomeCell(run) {
  const td = cell(OUTCOME_TEXT[run.outcome] || run.outcome, `outcome-${run.outcome}`);
  td.dataset.outcome = run.outcome;
  return td;
}

function overrideText(override) {
  if (override.kind === "worker") return `Worker “${override.from}” → “${override.to}”`;
  const how = override.match === "regex" ? "matching the expression" : "containing";
  return `Instruction: each part ${how} “${override.pattern}” → “${override.replacement}”`;
}

function formatted(key, value) {
  if (key === "cost") return `$${value.toFixed(4)}`;
  if (key === "wall_time") return value.toFixed(1);
  return String(value);
}

function drawTotals(aggregate) {
  for (const row of document.querySelectorAll("#batch-totals tr[data-total]")) {
    const key = row.dataset.total;
    const before = aggregate[`${key}_before`];
    const after = aggregate[`${key}_after`];
    const change = after - before;
    const [beforeCell, afterCell, changeCell] = row.querySelectorAll("td");
    beforeCell.textContent = formatted(key, before);
    afterCell.textContent = formatted(key, after);
    changeCell.textContent = (change > 0 ? "+" : "") + formatted(key, change);
    changeCell.className = `num ${change < 0 ? "change-better" : change > 0 ? "change-worse" : ""}`;
  }
}

function drawItems(items) {
  const body = document.querySelector("#batch-items tbody");
  const rows = items.map((item) => {
    const tr = document.createElement("tr");
    tr.dataset.position = String(item.position);
    tr.append(runLink(item.source), cell(item.input, "clip"), outcomeCell(item.source));
    if (item.replay) {
      tr.append(runLink(item.replay), outcomeCell(item.replay));
      const compare = cell("");
      const link = document.createElement("a");
      link.href = item.compare_url;
      link.textContent = "Compare";
      link.className = "compare-link";
      compare.append(link);
      tr.append(compare);
    } else {
      const why = cell(item.error || "waiting to be replayed…", item.error ? "run-error" : "muted");
      why.colSpan = 3;
      tr.append(why);
    }
    return tr;
  });
  body.replaceChildren(...rows);
}

function draw() {
  const { progress, aggregate } = state;
  const status = document.getElementById("batch-status");
  status.textContent = state.status;
  status.className = `status status-${state.status === "finished" ? "succeeded" : "running"}`;
  document.getElementById("batch-override").textContent = overrideText(state.override);
  const bar = document.getElementById("batch-progress");
  bar.max = Math.max(1, progress.total);
  bar.value = progress.done;
  bar.dataset.done = String(progress.done);
  document.getElementById("batch-progress-text").textContent =
    `${progress.done} of ${progress.total} done: ${progress.finished} replays finished, ` +
    `${progress.replayed - progress.finished} running, ${progress.not_replayed} not replayed`;
  document.getElementById("batch-compared").textContent = String(aggregate.compared);
  for (const figure of document.querySelectorAll("#batch-aggregate [data-figure]")) {
    figure.textContent = String(aggregate[figure.dataset.figure]);
  }
  drawTotals(aggregate);
  drawItems(state.items);
}

async function poll() {
  try {
    state = await getJSON(config.api);
    draw();
  } catch {
    // Offline for a moment (or an error answer): the next poll tries again.
  }
  if (state.status !== "finished") window.setTimeout(poll, config.poll_ms);
}

draw();
if (state.status !== "finished") window.setTimeout(poll, config.poll_ms);
