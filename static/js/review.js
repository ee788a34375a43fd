// The review queue: list.js moves the selection (j/k, Enter opens); here the label keys (1-9:
// the selected run's project's first failure kinds) toggle a label, and m assigns the run to
// you. Changes go through the API; the row shows the result.

import { send } from "./reviewapi.js";

const data = JSON.parse(document.getElementById("queue-data").textContent);
const canReview = new Set(data.can_review.map(String));
const message = document.getElementById("queue-message");

function say(text) {
  message.textContent = text;
}

function selectedRow() {
  return document.querySelector("#runs-table tbody tr[aria-current=true]");
}

function typingInField(event) {
  const target = event.target;
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

function showReview(row, review) {
  row.dataset.labels = review.labels.map((label) => label.id).join(",");
  const labels = row.querySelector(".queue-labels");
  labels.replaceChildren(
    ...review.labels.map((label) => {
      const chip = document.createElement("span");
      chip.className = "label-chip";
      chip.textContent = label.name;
      return chip;
    }),
  );
  row.querySelector(".queue-assignee").textContent = review.assignee || "—";
}

async function toggleLabel(row, kind) {
  const runId = row.dataset.runId;
  const labelled = row.dataset.labels.split(",").includes(String(kind.id));
  try {
    const review = labelled ? await send("DELETE", `runs/${runId}/labels/${kind.id}/`) : await send("POST", `runs/${runId}/labels/`, { kind: kind.id });
    showReview(row, review);
    say(`Run ${runId}: ${labelled ? "removed" : "added"} the label “${kind.name}”.`);
  } catch (error) {
    say(`Run ${runId}: ${error.message}`);
  }
}

async function assignToMe(row) {
  const runId = row.dataset.runId;
  try {
    showReview(row, await send("PUT", `runs/${runId}/assignee/`, { assignee: data.user }));
    say(`Run ${runId} is assigned to you.`);
  } catch (error) {
    say(`Run ${runId}: ${error.message}`);
  }
}

document.addEventListener("keydown", (event) => {
  if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey || typingInField(event)) return;
  const row = selectedRow();
  if (!row) return;
  if (!canReview.has(row.dataset.project)) {
    if (/^[1-9m]$/.test(event.key)) say("Only reviewers and admins may label or assign runs.");
    return;
  }
  if (/^[1-9]$/.test(event.key)) {
    const kind = (data.kinds[row.dataset.project] || [])[Number(event.key) - 1];
    if (!kind) return;
    event.preventDefault();
    toggleLabel(row, kind);
  } else if (event.key === "m") {
    event.preventDefault();
    assignToMe(row);
  }
});

// Failure kinds (admins): add, rename, delete; the page is drawn again after each change, as
// the kinds also decide the label keys.
for (const box of document.querySelectorAll(".kind-project")) {
  const error = box.querySelector(".kind-error");
  const act = async (request) => {
    error.textContent = "";
    try {
      await request;
      window.location.reload();
    } catch (failure) {
      error.textContent = failure.message;
    }
  };
  box.querySelector(".kind-add").addEventListener("submit", (event) => {
    event.preventDefault();
    act(send("POST", "failure-kinds/", { project: box.dataset.project, name: event.target.elements.name.value }));
  });
  box.addEventListener("click", (event) => {
    const item = event.target.closest("li[data-kind-id]");
    if (!item) return;
    const id = item.dataset.kindId;
    if (event.target.classList.contains("kind-rename")) act(send("PATCH", `failure-kinds/${id}/`, { name: item.querySelector("input").value }));
    else if (event.target.classList.contains("kind-delete")) act(send("DELETE", `failure-kinds/${id}/`));
  });
}
