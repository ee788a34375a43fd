// The runs list: keyboard navigation (j/k move, Enter opens), the new-run form, and the list
// kept live (new runs and status changes drawn without a reload). A plain ES module; the page
// works without it except for these things.

import { clearFormErrors, showFormErrors } from "./form_errors.js";
import { getJSON, sendJSON } from "./http.js";

const table = document.getElementById("runs-table");
let rows = table ? Array.from(table.querySelectorAll("tbody tr[data-href]")) : [];
let selected = -1;

// The selected row is marked with aria-current; moving the selection also moves focus to the
// row's link, so screen readers announce it and Enter follows it.
function select(index, { focus = true } = {}) {
  if (!rows.length) return;
  const next = Math.max(0, Math.min(rows.length - 1, index));
  if (selected >= 0) rows[selected].removeAttribute("aria-current");
  selected = next;
  const row = rows[selected];
  row.setAttribute("aria-current", "true");
  if (focus) {
    row.querySelector("a.row-link")?.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }
}

function typingInField(event) {
  const target = event.target;
  return (
    target instanceof HTMLElement &&
    (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))
  );
}

// Enter on a button or link outside the table keeps its own meaning.
function onOtherControl(event) {
  const target = event.target;
  return target instanceof Element && target !== document.body && !target.closest("#runs-table tbody");
}

function pageLink(id, hash) {
  const link = document.getElementById(id);
  if (link) window.location.assign(link.href.split("#")[0] + hash);
}

document.addEventListener("keydown", (event) => {
  if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
  if (typingInField(event)) return;
  if (event.key === "j") {
    // Past the last row, the next page (same filters) opens with its first row selected.
    if (selected === rows.length - 1) pageLink("page-next", "#first");
    else select(selected + 1);
  } else if (event.key === "k") {
    if (selected <= 0 && rows.length) pageLink("page-prev", "#last");
    else select(selected - 1);
  } else if (event.key === "Enter" && selected >= 0 && !onOtherControl(event)) {
    // A row link focused with Tab wins over the j/k selection.
    const focusedRow = event.target instanceof Element ? event.target.closest("tr[data-href]") : null;
    window.location.assign((focusedRow || rows[selected]).dataset.href);
  } else {
    return;
  }
  event.preventDefault();
});

if (table) {
  table.tBodies[0].addEventListener("click", (event) => {
    const row = event.target instanceof Element ? event.target.closest("tr[data-href]") : null;
    if (row && !(event.target instanceof HTMLAnchorElement) && !event.target.closest("details")) {
      select(rows.indexOf(row), { focus: false });
    }
  });
}

// Arriving from the previous or next page by keyboard keeps the keyboard going.
const arrivedByKeyboard = ["#first", "#last"].includes(window.location.hash);
if (rows.length) {
  select(window.location.hash === "#last" ? rows.length - 1 : 0, { focus: arrivedByKeyboard });
}

// New run: POST /api/runs/ with the session's CSRF token, then open the run's live page.
const form = document.getElementById("new-run");
if (form) {
  const poolSelect = form.querySelector("[name=pool]");
  const simBadge = document.getElementById("new-run-pool-sim");
  const submit = document.getElementById("new-run-submit");

  const showSimulated = () => {
    const option = poolSelect.selectedOptions[0];
    simBadge.hidden = !(option && option.dataset.simulated);
    if (option && option.dataset.simulated) simBadge.textContent = option.dataset.simulated;
  };
  poolSelect.addEventListener("change", showSimulated);
  showSimulated();

  const summary = document.getElementById("new-run-error");
  const showErrors = (errors) => {
    // A field folded under "Grading" is opened first, so its error is seen and its input focused.
    if (errors.reference || errors.grader) document.getElementById("new-run-grading").open = true;
    showFormErrors(form, errors, summary);
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFormErrors(form, summary);
    const question = form.elements.input.value.trim();
    if (!question) {
      showErrors({ input: ["Write a question first."] });
      return;
    }
    const payload = {
      input: question,
      pool: Number(poolSelect.value),
      strategy: form.elements.strategy.value,
    };
    const reference = form.elements.reference.value.trim();
    if (reference) payload.reference = reference;
    if (form.elements.grader.value) payload.grader = form.elements.grader.value;
    submit.disabled = true;
    try {
      const response = await sendJSON("/api/runs/", { csrf: form, body: payload });
      const body = response.body;
      if (response.status === 201 && body.id) {
        window.location.assign(`/runs/${body.id}/`);
        return;
      }
      if (response.status === 400 && body && typeof body === "object") showErrors(body);
      else showErrors({ __all__: [body.detail || `The server answered ${response.status}.`] });
    } catch (error) {
      showErrors({ __all__: [`Could not reach the server: ${error.message}`] });
    }
    submit.disabled = false;
  });
}

// Compare: the ticked rows' runs (2 to the form's data-max-runs) open /compare/?runs=A,B.
const compareForm = document.getElementById("compare-form");
if (compareForm) {
  const button = document.getElementById("compare-selected");
  const maxRuns = Number(compareForm.dataset.maxRuns);
  const picked = () => [...document.querySelectorAll("input.compare-pick:checked")].map((box) => box.value);
  const update = () => {
    const count = picked().length;
    button.disabled = count < 2 || count > maxRuns;
    button.textContent = count ? `Compare ${count} selected` : "Compare selected";
    button.title = count > maxRuns ? `Compare at most ${maxRuns} runs at once.` : "Tick two or more runs to compare them.";
  };
  document.addEventListener("change", (event) => {
    if (event.target instanceof Element && event.target.matches("input.compare-pick")) update();
  });
  compareForm.addEventListener("submit", (event) => {
    event.preventDefault();
    window.location.assign(`${compareForm.action}?runs=${picked().join(",")}`);
  });
  update();
}

// The live list: every few seconds (while the tab is visible) ask what changed since the last
// event seen, with the page's own filters; redraw changed rows in place, add new runs on top
// (first page only) and drop rows that no longer match the filters.
const listState = JSON.parse(document.getElementById("list-state")?.textContent || "null");
const POLL_EVERY_MS = 2000;

function replaceRows(html, changed, gone) {
  const body = table.tBodies[0];
  const template = document.createElement("template");
  template.innerHTML = html; // rendered by the server from runs/_rows.html, text escaped
  const fresh = new Map([...template.content.querySelectorAll("tr[data-run-id]")].map((row) => [Number(row.dataset.runId), row]));
  const shownIds = rows.map((row) => Number(row.dataset.runId));
  const newest = shownIds.length ? Math.max(...shownIds) : 0;
  const current = selected >= 0 ? rows[selected] : null;
  let added = 0;
  // Oldest first, each new one on top: the newest ends first.
  for (const id of [...changed].reverse()) {
    const row = fresh.get(id);
    const existing = body.querySelector(`tr[data-run-id="${id}"]`);
    if (existing) {
      if (existing.querySelector("details[open]")) row.querySelector("details")?.setAttribute("open", "");
      if (existing === current) row.setAttribute("aria-current", "true");
      if (existing.querySelector("input.compare-pick:checked")) row.querySelector("input.compare-pick")?.setAttribute("checked", "");
      existing.replaceWith(row);
    } else if (listState.first_page && id > newest) {
      body.prepend(row);
      added += 1;
    }
  }
  for (const id of gone) body.querySelector(`tr[data-run-id="${id}"]`)?.remove();
  const selectedId = current ? current.dataset.runId : null;
  rows = Array.from(body.querySelectorAll("tr[data-href]"));
  selected = selectedId ? rows.findIndex((row) => row.dataset.runId === selectedId) : -1;
  document.querySelector(".table-wrap .empty")?.toggleAttribute("hidden", rows.length > 0);
  if (added) {
    const status = document.getElementById("list-live");
    if (status) status.textContent = added === 1 ? "1 new run." : `${added} new runs.`;
  }
}

async function pollChanges() {
  if (!document.hidden) {
    const params = new URLSearchParams(window.location.search);
    params.delete("page");
    params.set("after", listState.cursor);
    try {
      const changes = await getJSON(`${listState.changes_url}?${params}`);
      if (changes.changed.length || changes.gone.length) replaceRows(changes.rows, changes.changed, changes.gone);
      listState.cursor = changes.cursor;
    } catch {
      // The server is away for a moment (or answered an error): try again at the next tick.
    }
  }
  setTimeout(pollChanges, POLL_EVERY_MS);
}

if (table && listState) setTimeout(pollChanges, POLL_EVERY_MS);
