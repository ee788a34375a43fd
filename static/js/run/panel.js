// The details panel: a step (instruction, worker, access list as links, the exact messages sent,
// the response as safe Markdown, tokens, cost, latency, attempts, error, and each call of a
// retried step with its error and the wait after it) or a round's plan (the
// conductor's raw output of every attempt and why an attempt could not be used).

import { renderMarkdown } from "./markdown.js";
import { element, formatCost, formatCount, formatSeconds, statusBadge, stepName } from "./format.js";
import { planStatus } from "./graph.js";
import { STEP_FINISHED } from "./statuses.js";

export class DetailsPanel {
  // ``onStepRendered(step, body)``: replay.js adds "Edit and replay" there; ``stepSection(step)``,
  // optional: one more section at the end of a step's panel (review.js).
  constructor({
    panel, title, body, closeButton, store, api, runId, onClose,
    onStepRendered = () => {}, stepSection = null, loadSteps = () => Promise.resolve(),
  }) {
    // ``loadSteps(round)``: fetches a folded round's steps (a folded run's page holds none).
    this.loadSteps = loadSteps;
    this.onStepRendered = onStepRendered;
    this.stepSection = stepSection;
    this.panel = panel;
    this.title = title;
    this.body = body;
    this.store = store;
    this.api = api;
    this.runId = runId;
    this.onClose = onClose;
    this.showing = null; // {kind: "step", id} | {kind: "plan", round}
    this.renderedStatus = null;
    this.request = 0;
    this.returnFocus = null;
    closeButton.addEventListener("click", () => this.close());
    panel.addEventListener("keydown", (event) => {
      if (event.key === "Escape") this.close();
    });
  }

  open() {
    if (this.panel.hidden) this.returnFocus = document.activeElement;
    this.panel.hidden = false;
    this.title.focus({ preventScroll: true });
  }

  close() {
    if (this.panel.hidden) return;
    this.panel.hidden = true;
    this.showing = null;
    this.onClose();
    if (this.returnFocus && this.returnFocus.isConnected) this.returnFocus.focus();
    this.returnFocus = null;
  }

  async showStep(id) {
    let step = this.store.steps.get(id);
    this.showing = { kind: "step", id };
    this.open();
    if (!step && !this.store.complete) {
      // A step of a folded round: its round's steps come first.
      const request = ++this.request;
      this.title.textContent = `Step ${id}`;
      this.body.replaceChildren(element("p", { class: "hint" }, "Loading…"));
      try {
        const detail = await this.api(`steps/${id}/`);
        if (detail.run === this.runId) await this.loadSteps(detail.round);
      } catch {
        // Not a step this page can show: said below.
      }
      if (request !== this.request) return;
      step = this.store.steps.get(id);
    }
    if (!step) {
      this.title.textContent = `Step ${id}`;
      this.body.replaceChildren(element("p", { class: "hint" }, "This step is not part of this run."));
      return;
    }
    this.renderStep(step, null);
    await this.fetchStep(id);
  }

  async fetchStep(id) {
    const request = ++this.request;
    try {
      const detail = await this.api(`steps/${id}/`);
      if (request !== this.request) return;
      this.renderStep({ ...this.store.steps.get(id), ...detail }, detail);
    } catch (error) {
      if (request !== this.request) return;
      for (const slot of this.body.querySelectorAll("[data-loading]")) {
        slot.replaceChildren(element("p", { class: "form-error" }, `Could not load: ${error.message}`));
      }
    }
  }

  renderStep(step, detail) {
    this.renderedStatus = step.status;
    this.title.textContent = `${stepName(step)} · ${step.worker}`;
    const facts = element(
      "dl",
      { class: "panel-facts" },
      ...fact("Status", statusBadge(step.status)),
      ...fact("Worker", `${step.worker} (${step.model})`),
      ...fact("Tokens in / out", `${formatCount(step.tokens_in)} / ${formatCount(step.tokens_out)}`),
      ...(step.queued > 0 ? fact("Queued", `${formatSeconds(step.queued)} waiting for a free slot of the worker (before its calls; not in its latency)`) : []),
      ...fact("Cost", formatCost(step.cost)),
      ...fact("Latency", formatSeconds(step.latency)),
      ...fact("Attempts", formatCount(step.attempts)),
      ...fact("Started", step.started_at ? new Date(step.started_at).toLocaleString() : "—"),
      ...fact("Finished", step.finished_at ? new Date(step.finished_at).toLocaleString() : "—"),
      ...(step.reused_from ? fact("Reused from", `step ${step.reused_from} of another run: not called again, not counted again`) : []),
      ...nestedRunsFact(step.nested_runs),
    );
    const sections = [
      facts,
      section("Instruction", element("div", { class: "plain-text" }, step.instruction)),
      section("Access list", this.accessList(step)),
    ];
    if (step.error) sections.push(section("Error", element("pre", { class: "error-text" }, step.error)));
    const attempts = attemptList(step);
    if (attempts) sections.push(section("Attempts", attempts));
    sections.push(section("Response", this.responseSlot(step, detail)));
    sections.push(section("Messages sent", this.messagesSlot(detail)));
    if (this.stepSection) sections.push(this.stepSection(step));
    this.body.replaceChildren(...sections);
    this.onStepRendered(step, this.body);
  }

  accessList(step) {
    const given = step.access === "all" ? "all earlier steps" : Array.isArray(step.access) && step.access.length ? step.access.map((index) => `Step ${step.round}.${index}`).join(", ") : "no earlier step";
    const reads = step.reads || [];
    const links = reads.map((id) => {
      const read = this.store.steps.get(id);
      const name = read ? `${stepName(read)} · ${read.worker}` : `Step ${id}`;
      return element("li", {}, element("a", { href: `#step-${id}`, dataset: { stepLink: id } }, name));
    });
    return element(
      "div",
      {},
      element("p", { class: "hint" }, `As written: ${given}.`),
      links.length ? element("ul", { class: "access-links" }, ...links) : element("p", {}, "Reads nothing."),
    );
  }

  responseSlot(step, detail) {
    if (!detail) return element("p", { class: "hint", dataset: { loading: "" } }, "Loading…");
    if (!detail.response) {
      return element("p", { class: "hint" }, STEP_FINISHED.has(step.status) ? "No response." : "No response yet.");
    }
    const container = element("div", { class: "markdown response" });
    renderMarkdown(container, detail.response);
    return container;
  }

  messagesSlot(detail) {
    if (!detail) return element("p", { class: "hint", dataset: { loading: "" } }, "Loading…");
    return messageList(detail.messages);
  }

  async showPlan(round, { refresh = false } = {}) {
    this.showing = { kind: "plan", round };
    if (!refresh) {
      this.open();
      this.title.textContent = `Conductor plan, round ${round}`;
      this.body.replaceChildren(element("p", { class: "hint" }, "Loading…"));
    }
    const request = ++this.request;
    try {
      // The plan names its round's steps: a folded round's are fetched with it.
      const [run] = await Promise.all([this.api(`runs/${this.runId}/`), this.loadSteps(round)]);
      if (request !== this.request) return;
      const plan = (run.plans || []).find((p) => p.round === round);
      if (!plan) {
        this.body.replaceChildren(element("p", { class: "hint" }, "This round has no plan yet."));
        return;
      }
      this.renderPlan(plan);
    } catch (error) {
      if (request !== this.request) return;
      this.body.replaceChildren(element("p", { class: "form-error" }, `Could not load the plan: ${error.message}`));
    }
  }

  renderPlan(plan) {
    this.title.textContent = plan.strategy === "conductor" ? `Conductor plan, round ${plan.round}` : `Workflow (${plan.strategy}), round ${plan.round}`;
    const attempts = Array.isArray(plan.attempts) ? plan.attempts : [];
    const status = planStatus({ ...plan, accepts: Array.isArray(plan.workflow) && plan.workflow.length === 0 });
    const outcome = {
      failed: "No usable workflow: the run failed.",
      accepted: "Accepted the previous answer (empty lists).",
      succeeded: `A workflow of ${(plan.workflow || []).length} steps.`,
      fallback:
        plan.fallback === "kept"
          ? "No usable workflow: the pool's fallback kept the answer of the round before."
          : "No usable workflow: the pool's fallback had its first worker answer alone. The workflow below is the fallback's, not the conductor's.",
    }[status];
    const form = { lists: "Python lists", json: "JSON" }[plan.form];
    const written = form ? `${form}${plan.constrained ? ` (output constrained to the plan's schema: ${plan.constrained})` : ""}` : "";
    const sections = [
      element(
        "dl",
        { class: "panel-facts" },
        ...fact("Strategy", plan.strategy),
        ...fact("Outcome", outcome),
        ...(written ? fact("Written as", written) : []),
        ...fact("Attempts", formatCount(attempts.length)),
      ),
    ];
    if (plan.error) sections.push(section("Error", element("pre", { class: "error-text" }, plan.error)));
    if (plan.workflow && plan.workflow.length) {
      // The names the graph and the step list use: "Step r.i" and the worker's name.
      const steps = new Map(this.store.roundSteps(plan.round).map((step) => [step.index, step]));
      const rows = plan.workflow.map((spec, index) => {
        const step = steps.get(index);
        const worker = step ? step.worker : typeof spec.worker === "number" ? `worker ${spec.worker} of the pool` : String(spec.worker);
        const name = `Step ${plan.round}.${index}`;
        const title = step ? element("a", { href: `#step-${step.id}` }, name) : name;
        return element(
          "li",
          {},
          title,
          " · ",
          element("span", { class: "step-item-worker" }, worker),
          " ",
          element("span", {}, spec.instruction),
          " ",
          element("span", { class: "hint" }, `(${accessText(spec.access, plan.round)})`),
        );
      });
      sections.push(section("Workflow", element("ul", { class: "plan-workflow" }, ...rows)));
    }
    const attemptItems = attempts.map((attempt, index) => {
      const details = element(
        "details",
        { class: "plan-attempt", open: attempt.error || index === attempts.length - 1 },
        element(
          "summary",
          {},
          `Attempt ${index + 1}: ${attempt.error ? "could not be used" : "used"}`,
          attempt.tokens_in != null ? ` · ${formatCount(attempt.tokens_in)} in / ${formatCount(attempt.tokens_out)} out` : "",
          attempt.latency != null ? ` · ${formatSeconds(attempt.latency)}` : "",
        ),
        element("pre", { class: "raw-output" }, attempt.raw || "(empty output)"),
      );
      if (attempt.error) details.append(element("pre", { class: "error-text" }, attempt.error));
      return details;
    });
    sections.push(
      section(
        "Conductor output",
        attemptItems.length ? element("div", {}, ...attemptItems) : element("p", { class: "hint" }, "A fixed strategy: no conductor call."),
      ),
    );
    if (plan.messages && plan.messages.length) {
      sections.push(
        section("Messages sent to the conductor", element("details", {}, element("summary", {}, `${plan.messages.length} messages`), messageList(plan.messages))),
      );
    }
    this.body.replaceChildren(...sections);
  }

  // A frame's live changes: refresh what is showing if it changed.
  update(changes) {
    if (!this.showing || this.panel.hidden) return;
    if (this.showing.kind === "step" && changes.changedSteps.has(this.showing.id)) {
      const step = this.store.steps.get(this.showing.id);
      if (step.status !== this.renderedStatus) {
        this.renderStep(step, null);
        this.fetchStep(step.id);
      }
    } else if (this.showing.kind === "plan" && changes.plans.has(this.showing.round)) {
      this.showPlan(this.showing.round, { refresh: true });
    }
  }
}

// Runs this step's worker started through /v1 (a pool of this server used as a worker).
function nestedRunsFact(runs) {
  if (!Array.isArray(runs) || !runs.length) return [];
  const links = runs.map((run) =>
    element("li", {}, element("a", { href: run.url, class: "nested-run-link" }, `Run ${run.id} (${run.status})`)),
  );
  return fact("Nested run", element("ul", { class: "nested-runs" }, ...links));
}

// An access list as written, in the step names the page uses.
function accessText(access, round) {
  if (access === "all") return "reads all earlier steps";
  if (!Array.isArray(access) || !access.length) return "reads nothing";
  return `reads ${access.map((index) => `Step ${round}.${index}`).join(", ")}`;
}

function fact(label, value) {
  return [element("dt", {}, label), element("dd", {}, value)];
}

function section(heading, content) {
  return element("section", { class: "panel-section" }, element("h3", {}, heading), content);
}

function messageList(messages) {
  if (!messages || !messages.length) return element("p", { class: "hint" }, "None recorded.");
  return element(
    "ol",
    { class: "messages" },
    ...messages.map((message) =>
      element(
        "li",
        { class: `message message-${message.role}` },
        element("span", { class: "message-role" }, message.role),
        element("pre", { class: "message-content" }, message.content),
      ),
    ),
  );
}

// Each call of a retried step (``attempt_log``): how long it took, its error as plain text, and
// the backoff waited before the next call; null when the first call succeeded.
export function attemptList(step) {
  const log = Array.isArray(step.attempt_log) ? step.attempt_log : [];
  if (!log.length) return null;
  const items = log.map((attempt) => {
    const item = element(
      "li",
      { class: attempt.error ? "step-attempt step-attempt-failed" : "step-attempt" },
      element("span", { class: "step-attempt-head" }, `Attempt ${attempt.attempt}: ${attempt.error ? "failed" : "succeeded"} after ${formatSeconds(attempt.seconds)}`),
    );
    if (attempt.error) item.append(element("pre", { class: "error-text" }, attempt.error));
    if (attempt.backoff > 0) item.append(element("p", { class: "hint step-attempt-wait" }, `Waited ${formatSeconds(attempt.backoff)} before retrying.`));
    return item;
  });
  return element("ol", { class: "step-attempts" }, ...items);
}
