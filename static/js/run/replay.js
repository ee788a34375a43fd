// Replays on the run page: the lineage strip (the run's source, its replays, its family, the
// compare view), the edits a replay made, "Replay unchanged" / "Replay fresh", and the "Edit and
// replay" form in a step's panel. Offered to project admins once the run has finished (the server
// checks again). A replay is made with POST /api/runs/{id}/replays/, then its page is opened: it
// runs live there like any run, its reused steps drawn as reused.

import { errorText } from "../form_errors.js";
import { sendJSON } from "../http.js";
import { element, formatScore, shortInstruction, stepName } from "./format.js";
import { RUN_FINISHED } from "./statuses.js";

const MAX_LISTED_REPLAYS = 8;

export class ReplayControls {
  constructor({ strip, context, csrfToken, store, runId, apiRoot }) {
    this.strip = strip;
    this.context = context || { can_replay: false, workers: [], family: { root: runId, runs: [] } };
    this.csrfToken = csrfToken;
    this.store = store;
    this.runId = runId;
    this.apiRoot = apiRoot;
    this.busy = false;
  }

  get canReplay() {
    return this.context.can_replay && RUN_FINISHED.has(this.store.run.status);
  }

  get isConductorRun() {
    return this.store.run.strategy === "conductor";
  }

  // The header strip: where this run comes from, what came of it, and the replay buttons.
  renderStrip() {
    if (!this.strip) return;
    const runs = this.context.family.runs || [];
    const me = runs.find((run) => run.id === this.runId);
    const parts = [];
    const source = this.store.run.replay_of;
    if (source != null) {
      parts.push(
        element(
          "span",
          { class: "lineage-item" },
          "Replay of ",
          element("a", { href: `/runs/${source}/`, id: "lineage-source" }, `run ${source}`),
          " · ",
          element("a", { href: compareUrl(source, this.runId), class: "lineage-compare" }, "compare with it"),
        ),
      );
    }
    const replays = runs.filter((run) => run.replay_of === this.runId);
    if (replays.length) {
      const links = replays.slice(-MAX_LISTED_REPLAYS).map((run) =>
        element(
          "li",
          {},
          element("a", { href: `/runs/${run.id}/`, class: "lineage-replay", dataset: { runId: run.id } }, `run ${run.id}`),
          ` (${run.status}${run.score != null ? `, score ${formatScore(run.score)}` : ""}) `,
          element("a", { href: compareUrl(this.runId, run.id), class: "lineage-compare" }, "compare"),
        ),
      );
      const more = replays.length > MAX_LISTED_REPLAYS ? `, the last ${MAX_LISTED_REPLAYS} of ${replays.length}` : "";
      parts.push(element("span", { class: "lineage-item" }, `Replays${more}: `, element("ul", { class: "lineage-replays" }, ...links)));
    }
    if (runs.length > 1) {
      parts.push(element("a", { href: `/runs/${this.runId}/family/`, id: "lineage-family", class: "lineage-item" }, `Family (${runs.length} runs)`));
    }
    const edits = me ? me.edits : [];
    if (edits.length) parts.push(editsSummary(edits));
    if (this.canReplay) {
      const unchanged = element("button", { type: "button", id: "replay-unchanged" }, "Replay unchanged");
      const fresh = element("button", { type: "button", id: "replay-fresh" }, "Replay fresh");
      unchanged.addEventListener("click", () => this.create({ edits: [] }, this.stripStatus));
      fresh.addEventListener("click", () => this.create({ edits: [], fresh: true }, this.stripStatus));
      this.stripStatus = element("span", { class: "hint", role: "status", "aria-live": "polite" });
      parts.push(element("span", { class: "lineage-item lineage-actions" }, unchanged, " ", fresh, " ", this.stripStatus));
    }
    this.strip.replaceChildren(...parts);
    this.strip.hidden = parts.length === 0;
  }

  update(changes) {
    if (changes.run) this.renderStrip();
  }

  // The panel of a step: for admins of a finished run, a section to edit the step and replay.
  // The panel draws a step more than once (at once, then with its details): the same section,
  // with whatever was typed in it, is put back each time.
  decorateStep(step, body) {
    if (!this.canReplay || !step || step.id == null) return;
    if (this.section && this.sectionStep === step.id) {
      body.append(this.section);
      return;
    }
    const toggle = element("button", { type: "button", id: "replay-edit-open", "aria-expanded": "false" }, "Edit and replay");
    const container = element("div", { class: "replay-edit", hidden: true });
    toggle.addEventListener("click", () => {
      const opening = container.hidden;
      if (opening && !container.firstChild) container.append(this.editForm(step));
      container.hidden = !opening;
      toggle.setAttribute("aria-expanded", String(opening));
    });
    this.section = element("section", { class: "panel-section replay-section" }, element("h3", {}, "Replay"), toggle, container);
    this.sectionStep = step.id;
    body.append(this.section);
  }

  editForm(step) {
    const form = element("form", { class: "replay-form", id: "replay-form" });
    const instruction = element("textarea", { name: "instruction", id: "replay-instruction", rows: "5", required: true });
    instruction.value = step.instruction;
    const worker = element("select", { name: "worker", id: "replay-worker" });
    if (!this.context.workers.some((option) => option.name === step.worker)) {
      // Its worker is no longer enabled: the replay needs another one, chosen on purpose.
      worker.append(element("option", { value: "", selected: true }, `${step.worker} (no longer enabled)`));
    }
    for (const option of this.context.workers) {
      const item = element("option", { value: option.id }, option.name);
      if (option.name === step.worker) item.selected = true;
      worker.append(item);
    }
    const earlier = this.store.roundSteps(step.round).filter((other) => other.index < step.index);
    const all = element("input", { type: "checkbox", name: "access-all", id: "replay-access-all" });
    all.checked = step.access === "all";
    const boxes = earlier.map((other) => {
      const box = element("input", { type: "checkbox", name: "access", value: other.index, dataset: { index: other.index } });
      box.checked = step.access === "all" || (Array.isArray(step.access) && step.access.includes(other.index));
      box.disabled = all.checked;
      return element("label", { class: "replay-access-step" }, box, ` ${stepName(other)} · ${other.worker} · ${shortInstruction(other.instruction)}`);
    });
    all.addEventListener("change", () => {
      for (const label of boxes) {
        const box = label.querySelector("input");
        box.disabled = all.checked;
        if (all.checked) box.checked = true;
      }
    });
    const status = element("p", { class: "hint", role: "status", "aria-live": "polite", id: "replay-status" });
    const submit = element("button", { type: "submit", id: "replay-submit" }, "Replay with this edit");
    const actions = [submit];
    if (this.isConductorRun) {
      const replan = element("button", { type: "button", id: "replay-replan" }, "Re-plan the rest of the round from here");
      // What is typed in the form goes with it: the step is kept as edited, the rest written after it.
      replan.addEventListener("click", () => {
        const edit = editOf();
        this.create({ edits: Object.keys(edit).length > 1 ? [edit] : [], replan_from: step.id }, status);
      });
      actions.push(" ", replan);
    }
    form.append(
      element("label", { for: "replay-instruction" }, "Instruction"),
      instruction,
      element("label", { for: "replay-worker" }, "Worker"),
      worker,
      element(
        "fieldset",
        { class: "replay-access" },
        element("legend", {}, "May read (earlier steps of this round)"),
        element("label", {}, all, " all earlier steps"),
        ...boxes,
        earlier.length ? null : element("p", { class: "hint" }, "The first step of a round reads nothing."),
      ),
      element("p", { class: "replay-actions" }, ...actions),
      status,
    );
    // The earlier indices an access list reads: "all" and every earlier step ticked are the same.
    const reads = (access) => (access === "all" ? earlier.map((other) => other.index) : [...access].sort((a, b) => a - b));
    const editOf = () => {
      const edit = { step: step.id };
      const text = instruction.value.trim();
      if (text !== step.instruction) edit.instruction = instruction.value;
      const chosen = this.context.workers.find((option) => String(option.id) === worker.value);
      if (chosen && chosen.name !== step.worker) edit.worker = chosen.id;
      const access = all.checked ? "all" : boxes.map((label) => label.querySelector("input")).filter((box) => box.checked).map((box) => Number(box.dataset.index));
      if (JSON.stringify(reads(access)) !== JSON.stringify(reads(step.access))) edit.access = access;
      return edit;
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const edit = editOf();
      if (Object.keys(edit).length === 1) {
        status.textContent = "Change the instruction, the worker or what it reads first (or use Replay unchanged).";
        return;
      }
      this.create({ edits: [edit] }, status);
    });
    return form;
  }

  async create(body, status) {
    if (this.busy) return;
    this.busy = true;
    if (status) status.textContent = "Creating the replay…";
    try {
      const response = await sendJSON(`${this.apiRoot}runs/${this.runId}/replays/`, { csrf: this.csrfToken, body });
      if (!response.ok) throw new Error(errorText(response.body) || `${response.status} ${response.statusText}`);
      window.location.assign(`/runs/${response.body.id}/`);
    } catch (error) {
      if (status) status.textContent = `Could not replay: ${error.message}`;
      this.busy = false;
    }
  }
}

export function compareUrl(first, second) {
  return `/compare/?runs=${first},${second}`;
}

function editsSummary(edits) {
  const items = edits.map((edit) => {
    const where = edit.round != null ? `Step ${edit.round}.${edit.index}` : "Every step";
    let what;
    if (edit.field === "fresh") what = "ran again (fresh)";
    else if (edit.field === "replan_from") what = "and the rest of its round written again by the conductor";
    else what = [`${edit.field}: `, element("del", {}, valueText(edit.before)), " → ", element("ins", {}, valueText(edit.after))];
    return element("li", {}, `${where} `, ...[].concat(what), element("span", { class: "hint" }, ` (${edit.who || "someone"}, ${new Date(edit.when).toLocaleString()})`));
  });
  return element(
    "details",
    { class: "lineage-item lineage-edits", id: "replay-edits" },
    element("summary", {}, `${edits.length} edit${edits.length === 1 ? "" : "s"}`),
    element("ul", {}, ...items),
  );
}

function valueText(value) {
  if (value == null) return "—";
  if (typeof value === "string") return value;
  if (value.name) return value.name;
  return JSON.stringify(value);
}
