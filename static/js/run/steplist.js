// The graph's accessible twin: every step in order, one list item each, carrying data-step-id and
// data-status and kept live like the graph. Arrow keys (or j/k), Home and End walk it; Enter opens
// the same details panel as a click on the graph. One item has tabindex 0 (a roving tab stop), so
// the list is a single stop in the page's tab order however many steps it has.

import { element, formatCount, formatSeconds, setStatusBadge, shortInstruction, stepName, stepTokens } from "./format.js";

export class StepList {
  // ``loadSteps()``: fetches the steps the page does not hold (a folded run's), before the list is
  // built.
  constructor({ list, empty, count, store, onOpenStep, loadSteps = () => Promise.resolve() }) {
    this.list = list;
    this.loadSteps = loadSteps;
    this.empty = empty;
    this.count = count;
    this.store = store;
    this.onOpenStep = onOpenStep;
    this.items = new Map(); // step id -> <li>
    this.tabStop = null;
    this.current = null;
    this.currentId = null;
    this.pending = false;
    list.addEventListener("keydown", (event) => this.onKeydown(event));
    list.addEventListener("click", (event) => {
      const item = event.target.closest("li[data-step-id]");
      if (!item) return;
      this.setTabStop(item);
      this.onOpenStep(Number(item.dataset.stepId));
    });
  }

  // A long list (its section folded: the page draws it closed) is built when its section is
  // first opened (or a step is to be focused in it): tens of thousands of items cost seconds,
  // and nobody sees them folded.
  renderLater() {
    this.pending = true;
    this.list.closest("details")?.addEventListener(
      "toggle",
      () => {
        if (this.pending) this.renderAll();
      },
      { once: true },
    );
  }

  renderAll() {
    if (!this.store.complete) {
      this.list.setAttribute("aria-busy", "true");
      this.loading ||= this.loadSteps()
        .then(() => this.renderAll())
        .catch((error) => {
          this.empty.textContent = `The steps could not be loaded (${error.message}).`;
          this.empty.hidden = false;
        })
        .finally(() => {
          this.loading = null;
          this.list.removeAttribute("aria-busy");
        });
      return this.loading;
    }
    this.pending = false;
    const fragment = document.createDocumentFragment();
    for (const step of this.store.orderedSteps()) fragment.append(this.createItem(step));
    this.list.replaceChildren(fragment);
    const first = this.list.firstElementChild;
    if (first) this.setTabStop(first);
    this.showCount();
    if (this.currentId != null) this.markCurrent(this.currentId);
    return Promise.resolve();
  }

  showCount() {
    this.empty.hidden = this.items.size > 0;
    if (this.count) this.count.textContent = formatCount(this.items.size);
  }

  // Two spans per step, not more: a run can have tens of thousands of them.
  createItem(step) {
    const button = element(
      "button",
      { type: "button", class: "step-item", tabindex: "-1" },
      element("span", { class: `status status-${step.status}` }, step.status),
      element("span", { class: "step-item-text" }, stepText(step)),
    );
    const item = element("li", { dataset: { stepId: step.id, status: step.status, round: step.round } }, button);
    this.items.set(step.id, item);
    return item;
  }

  update(changes) {
    if (this.pending) return; // renderAll will draw the store as it is then
    const added = [];
    for (const id of changes.changedSteps) {
      const step = this.store.steps.get(id);
      const item = this.items.get(id);
      if (!item) {
        added.push(step);
        continue;
      }
      item.dataset.status = step.status;
      const [badge, text] = item.firstElementChild.children;
      setStatusBadge(badge, step.status);
      text.textContent = stepText(step);
    }
    // Last first: each new item then finds the item that follows it already in place.
    added.sort((a, b) => b.round - a.round || b.index - a.index || b.id - a.id);
    for (const step of added) this.insert(step);
    if (added.length) this.showCount();
  }

  insert(step) {
    const item = this.createItem(step);
    const nextId = this.store.nextStepAfter(step.id);
    const next = nextId == null ? null : this.items.get(nextId);
    this.list.insertBefore(item, next && next.parentNode === this.list ? next : null);
    if (!this.tabStop) this.setTabStop(item);
  }

  setTabStop(item) {
    if (this.tabStop === item) return;
    if (this.tabStop) this.tabStop.firstElementChild.tabIndex = -1;
    this.tabStop = item;
    item.firstElementChild.tabIndex = 0;
  }

  // The step whose details are open.
  markCurrent(stepId) {
    this.currentId = stepId;
    if (this.pending) return;
    if (this.current) this.current.removeAttribute("aria-current");
    this.current = stepId == null ? null : this.items.get(stepId) || null;
    if (this.current) {
      this.current.setAttribute("aria-current", "true");
      this.setTabStop(this.current);
    }
  }

  async focusStep(stepId) {
    if (this.pending) await this.renderAll();
    const item = this.items.get(stepId);
    if (!item) return;
    this.setTabStop(item);
    item.firstElementChild.focus();
  }

  onKeydown(event) {
    const item = event.target.closest("li[data-step-id]");
    if (!item || event.altKey || event.ctrlKey || event.metaKey) return;
    let target;
    if (event.key === "ArrowDown" || event.key === "j") target = item.nextElementSibling;
    else if (event.key === "ArrowUp" || event.key === "k") target = item.previousElementSibling;
    else if (event.key === "Home") target = this.list.firstElementChild;
    else if (event.key === "End") target = this.list.lastElementChild;
    else return;
    event.preventDefault();
    if (!target) return;
    this.setTabStop(target);
    target.firstElementChild.focus();
  }
}

function stepText(step) {
  const facts = [`${stepName(step)} · ${step.worker} · ${shortInstruction(step.instruction, 90)}`];
  if (stepTokens(step)) facts.push(`${formatCount(stepTokens(step))} tokens`);
  if (step.latency != null) facts.push(formatSeconds(step.latency));
  if (step.attempts > 1) facts.push(`${step.attempts} attempts`);
  if (step.reused_from) facts.push("reused");
  return facts.join(" · ");
}
