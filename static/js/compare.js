// The compare page: several runs' graphs side by side, drawn by the run page's GraphView from
// each run's embedded page state (snapshot and server layout), their steps aligned by (round,
// index) and marked against the first run (orchestrator/comparing.py), a details panel with the
// word diff of a changed step, and the outcome table. Everything comes from the page's
// "compare-state" block; untrusted text is only ever set as text.

import { getJSON } from "./http.js";
import { GraphView } from "./run/graph.js";
import { RunStore, tableSteps } from "./run/store.js";
import { element, formatCost, formatCount, formatScore, formatSeconds, shortInstruction, statusBadge } from "./run/format.js";

const root = document.getElementById("compare-page");
const apiRoot = root.dataset.apiRoot;
const { comparison, pages } = JSON.parse(document.getElementById("compare-state").textContent);
const runs = comparison.runs.map((entry) => entry.run);
const rows = comparison.steps;
performance.mark("compare-page:state-read");

// The change kinds as the server names them, in its order (the legend is drawn from them).
const CHANGE_KINDS = [...document.querySelectorAll("#compare-legend [data-change]")].map((item) => item.dataset.change);
const DIFF_FIELDS = [
  ["instruction", "Instruction"],
  ["worker", "Worker"],
  ["access", "Access"],
  ["response", "Response"],
];

function api(path) {
  return getJSON(`${apiRoot}${path}`);
}

// The page names each row's steps by id: each step is once in the page, in its run's state.
const pageSteps = pages.map((page) => tableSteps(page.state.steps));
const stepsById = pageSteps.map((steps) => new Map(steps.map((step) => [step.id, step])));
for (const row of rows) row.steps = row.steps.map((id, runIndex) => (id == null ? null : stepsById[runIndex].get(id) || null));

// Which aligned row each step is in, and how a run's step there differs from the first run's
// (the first run's own step takes the row's kind: same, changed or removed).
const rowOfStep = new Map();
rows.forEach((row, index) => row.steps.forEach((step) => step && rowOfStep.set(step.id, index)));

function stepChange(row, runIndex) {
  return runIndex === 0 ? row.change : row.changes[runIndex];
}

function changeStyle() {
  const style = getComputedStyle(document.documentElement);
  const colour = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
  const marks = CHANGE_KINDS.map((kind) => ({
    selector: `node.step.change-${kind}`,
    style: {
      "border-color": colour(`--change-${kind}`, "#6b7480"),
      "background-color": colour(`--change-${kind}-soft`, "#eef0f2"),
      "border-width": kind === "same" ? 1 : 5,
      "border-style": "solid",
    },
  }));
  // The position whose details are open stays visible over its change colour.
  return [...marks, { selector: "node.step.current", style: { "border-color": colour("--focus", "#f0a000"), "border-width": 7, "border-style": "double" } }];
}

// Graphs ----------------------------------------------------------------------------------------

const graphs = pages.map((page, runIndex) => {
  const store = new RunStore({ ...page.state, steps: pageSteps[runIndex] });
  const notice = root.querySelector(`[data-notice="${runIndex}"]`);
  const view = new GraphView({
    container: root.querySelector(`[data-graph="${runIndex}"]`),
    store,
    geometry: page.geometry,
    fetchRound: (round) => api(`runs/${runs[runIndex].id}/graph/?round=${round}`),
    onOpenStep: (stepId) => openRow(rowOfStep.get(stepId)),
    onOpenPlan: () => {},
    onNotice: (text) => {
      notice.textContent = text;
      notice.hidden = !text;
    },
    extraStyle: changeStyle(),
    stepClasses: (stepId) => {
      const row = rows[rowOfStep.get(stepId)];
      return row ? `change-${stepChange(row, runIndex)}` : "";
    },
  });
  return { store, view };
});

// Outcome table ---------------------------------------------------------------------------------

function signed(value, format) {
  if (value == null || value === 0) return "";
  return `${value > 0 ? "+" : "−"}${format(Math.abs(value))}`;
}

const FORMATS = {
  score: formatScore,
  tokens: formatCount,
  cost: formatCost,
  model_calls: formatCount,
  wall_time: formatSeconds,
  step_count: formatCount,
};

function diffText(parts) {
  if (!parts.length) return element("p", { class: "diff-text hint" }, "(empty)");
  return element(
    "p",
    { class: "diff-text" },
    ...parts.map((part) => {
      if (part.op === "equal") return document.createTextNode(part.text);
      const tag = part.op === "insert" ? "ins" : "del";
      return element(tag, { class: `diff-${part.op}` }, part.text);
    }),
  );
}

function outcomeCell(line, runIndex) {
  const value = line.values[runIndex];
  const differs = line.differs[runIndex];
  const cell = element("td", { class: differs ? "differs" : null, dataset: { key: line.key } });
  if (line.key === "status") cell.append(statusBadge(value));
  else if (line.key === "answer") {
    const diff = line.diffs[runIndex];
    cell.append(diff && differs ? diffText(diff) : element("p", { class: "diff-text" }, value || "—"));
  } else {
    const format = FORMATS[line.key] || String;
    cell.append(element("span", { class: "num" }, format(value)));
    const delta = signed(line.deltas[runIndex], format);
    if (delta) cell.append(" ", element("span", { class: "delta" }, `(${delta})`));
  }
  return cell;
}

function renderOutcome() {
  const head = element(
    "tr",
    {},
    element("th", { scope: "col" }, ""),
    ...comparison.runs.map(({ run, pool_name: poolName }, index) =>
      element(
        "th",
        { scope: "col" },
        element("a", { href: `/runs/${run.id}/` }, `Run #${run.id}`),
        element("span", { class: "hint" }, ` ${run.strategy} · ${poolName}${index === 0 ? " · reference" : ""}`),
      ),
    ),
  );
  const body = comparison.outcome.map((line) =>
    element("tr", { dataset: { key: line.key } }, element("th", { scope: "row" }, line.label), ...runs.map((_, index) => outcomeCell(line, index))),
  );
  document.getElementById("compare-outcome").replaceChildren(element("thead", {}, head), element("tbody", {}, ...body));
}

// Aligned steps ---------------------------------------------------------------------------------

const stepsTable = document.getElementById("compare-steps");
const onlyDifferences = document.getElementById("compare-only-differences");
const moreButton = document.getElementById("compare-steps-more");
// Long comparisons show their first rows at once and the rest on demand: laying out thousands of
// table rows would hold up the graphs.
const FIRST_ROWS = 200;
let rowLimit = FIRST_ROWS;
let currentRow = null;

function changeBadge(kind) {
  return element("span", { class: `change-badge change-${kind}` }, kind);
}

function stepCell(row, runIndex) {
  const step = row.steps[runIndex];
  if (!step) return element("td", { class: "muted" }, "—");
  const kind = stepChange(row, runIndex);
  return element(
    "td",
    { class: `aligned-step change-${kind}` },
    element("strong", {}, shortInstruction(step.worker, 30)),
    " ",
    shortInstruction(step.instruction, 70),
    " ",
    element("span", { class: "hint" }, step.status),
  );
}

function renderSteps() {
  const head = element(
    "tr",
    {},
    element("th", { scope: "col" }, "Step"),
    element("th", { scope: "col" }, "Change"),
    ...runs.map((run) => element("th", { scope: "col" }, `Run #${run.id}`)),
  );
  const shown = [];
  let matching = 0;
  rows.forEach((row, index) => {
    if (onlyDifferences.checked && row.change === "same") return;
    matching += 1;
    if (shown.length >= rowLimit && index !== currentRow) return;
    const tr = element(
      "tr",
      { tabindex: 0, dataset: { row: index, change: row.change }, "aria-current": index === currentRow ? "true" : null },
      element("td", { class: "num" }, `${row.round}.${row.index}`),
      element("td", {}, changeBadge(row.change)),
      ...runs.map((_, runIndex) => stepCell(row, runIndex)),
    );
    shown.push(tr);
  });
  stepsTable.replaceChildren(element("thead", {}, head), element("tbody", {}, ...shown));
  document.getElementById("compare-steps-empty").hidden = shown.length > 0;
  moreButton.hidden = matching <= shown.length;
  moreButton.textContent = `Show all ${formatCount(matching)} rows`;
}

stepsTable.addEventListener("click", (event) => {
  const tr = event.target instanceof Element ? event.target.closest("tr[data-row]") : null;
  if (tr) openRow(Number(tr.dataset.row));
});
stepsTable.addEventListener("keydown", (event) => {
  const tr = event.target instanceof Element ? event.target.closest("tr[data-row]") : null;
  if (tr && (event.key === "Enter" || event.key === " ")) {
    event.preventDefault();
    openRow(Number(tr.dataset.row));
  }
});
onlyDifferences.addEventListener("change", () => {
  rowLimit = FIRST_ROWS;
  renderSteps();
});
moreButton.addEventListener("click", () => {
  rowLimit = Infinity;
  renderSteps();
});

// Details panel ---------------------------------------------------------------------------------

const panel = document.getElementById("compare-panel");
const panelTitle = document.getElementById("compare-panel-title");
const panelBody = document.getElementById("compare-panel-body");

function stepFacts(step, runId) {
  return element(
    "dl",
    { class: "panel-facts" },
    element("dt", {}, "Worker"),
    element("dd", {}, step.worker),
    element("dt", {}, "Instruction"),
    element("dd", { class: "plain-text" }, step.instruction),
    element("dt", {}, "Access"),
    element("dd", {}, step.access === "all" ? "all" : step.access.length ? step.access.join(", ") : "none"),
    element("dt", {}, "Status"),
    element("dd", {}, statusBadge(step.status)),
    element("dt", {}, "Run page"),
    element("dd", {}, element("a", { href: `/runs/${runId}/#step-${step.id}` }, `Open step ${step.round}.${step.index} of run #${runId}`)),
  );
}

function runSection(row, runIndex) {
  const run = runs[runIndex];
  const step = row.steps[runIndex];
  const kind = stepChange(row, runIndex);
  const section = element(
    "section",
    { class: "panel-section compare-run-section", dataset: { run: run.id, change: kind } },
    element("h3", {}, `Run #${run.id}${runIndex === 0 ? " (reference)" : ""} `, changeBadge(kind)),
  );
  if (!step) {
    section.append(element("p", { class: "hint" }, `Run #${run.id} has no step ${row.round}.${row.index}.`));
    return section;
  }
  const diff = runIndex === 0 ? null : row.diffs[runIndex];
  if (!diff) {
    if (kind === "same" && runIndex > 0) section.append(element("p", { class: "hint" }, `The same as in run #${runs[0].id}.`));
    section.append(stepFacts(step, run.id));
    return section;
  }
  const first = row.steps[0];
  for (const [field, label] of DIFF_FIELDS) {
    const changed = diff.changed.includes(field);
    section.append(element("h4", { class: changed ? "diff-field changed" : "diff-field" }, label, changed ? "" : " (unchanged)"), diffText(diff[field]));
  }
  if (diff.changed.includes("status")) {
    section.append(element("p", {}, "Status: ", statusBadge(first.status), " → ", statusBadge(step.status)));
  }
  if (diff.changed.includes("error")) {
    section.append(element("h4", {}, "Error"), element("p", { class: "plain-text" }, step.error || "(none)"));
  }
  section.append(element("p", {}, element("a", { href: `/runs/${run.id}/#step-${step.id}` }, `Open step ${step.round}.${step.index} of run #${run.id}`)));
  return section;
}

// The steps' word diffs are not in the page (orchestrator/selectors.compare_page_state): they
// come from the API once the graphs are drawn, or when a step is opened before that.
let diffsLoaded = null;
function loadDiffs() {
  if (!diffsLoaded) {
    diffsLoaded = api(`compare/?runs=${runs.map((run) => run.id).join(",")}`)
      .then((full) => {
        const byPosition = new Map(full.steps.map((row) => [`${row.round}.${row.index}`, row.diffs]));
        for (const row of rows) row.diffs = byPosition.get(`${row.round}.${row.index}`) || row.steps.map(() => null);
      })
      .catch(() => {
        for (const row of rows) row.diffs = row.steps.map(() => null);
        diffNotice = "The differences could not be loaded: each run's step is shown as it is.";
      });
  }
  return diffsLoaded;
}
let diffNotice = "";

function openRow(index) {
  const row = rows[index];
  if (!row) return;
  currentRow = index;
  for (const tr of stepsTable.querySelectorAll("tr[aria-current]")) tr.removeAttribute("aria-current");
  const tr = stepsTable.querySelector(`tr[data-row="${index}"]`);
  if (tr) tr.setAttribute("aria-current", "true");
  else renderSteps(); // a row past the first ones, opened from a graph
  graphs.forEach(({ view }, runIndex) => view.select(row.steps[runIndex] ? row.steps[runIndex].id : null));
  history.replaceState(null, "", `#step-${row.round}-${row.index}`);
  // The panel opens with the diffs (at once, unless they are still on their way).
  loadDiffs().then(() => {
    if (currentRow === index) showRow(row, index);
  });
}

function showRow(row, index) {
  panelTitle.textContent = `Step ${row.round}.${row.index}: ${row.change}`;
  panelBody.replaceChildren(...runs.map((_, runIndex) => runSection(row, runIndex)));
  if (diffNotice) panelBody.prepend(element("p", { class: "hint" }, diffNotice));
  panel.dataset.row = index;
  panel.dataset.change = row.change;
  panel.hidden = false;
  panelTitle.focus({ preventScroll: true });
}

function closePanel() {
  panel.hidden = true;
  currentRow = null;
  graphs.forEach(({ view }) => view.select(null));
  history.replaceState(null, "", window.location.pathname + window.location.search);
}

document.getElementById("compare-panel-close").addEventListener("click", closePanel);
panel.addEventListener("keydown", (event) => {
  if (event.key === "Escape") closePanel();
});

function openFromHash() {
  const match = /^#step-(\d+)-(\d+)$/.exec(window.location.hash);
  if (!match) return;
  const index = rows.findIndex((row) => row.round === Number(match[1]) && row.index === Number(match[2]));
  if (index >= 0) openRow(index);
}

// Drawing ---------------------------------------------------------------------------------------

for (const kind of CHANGE_KINDS) {
  const count = root.querySelector(`[data-count-for="${kind}"]`);
  if (count) count.textContent = `(${formatCount(comparison.counts[kind])})`;
}
renderOutcome();
// Long runs that mostly agree: the differences first.
onlyDifferences.checked = rows.length > 200 && comparison.counts.same > 0;
renderSteps();
performance.mark("compare-page:tables-drawn");
root.querySelectorAll("[data-fit]").forEach((button) => button.addEventListener("click", () => graphs[Number(button.dataset.fit)].view.fit()));

// The page is drawn when every graph has drawn its first frame (GraphView sets data-state).
const containers = [...root.querySelectorAll("[data-graph]")];
const whenDrawn = new MutationObserver(() => {
  if (containers.every((container) => container.dataset.state !== "loading")) {
    whenDrawn.disconnect();
    performance.mark("compare-page:graphs-drawn");
    root.dataset.state = "ready";
    loadDiffs();
  }
});
containers.forEach((container) => whenDrawn.observe(container, { attributes: true, attributeFilter: ["data-state"] }));
graphs.forEach(({ view }, runIndex) => view.load(pages[runIndex].graph));
openFromHash();

// For tests and benchmarks that drive the page like a user.
window.comparePage = { graphs, rows, openRow };
