// The timeline (waterfall): one row per conductor call (a round's planning) and per step, in
// order, a bar from its start to its end (to now while running). Drawn on a canvas, so thousands
// of steps cost one pass per frame, and only while the section is open. A click on a row opens
// that step (or plan); hovering a row shows its full label, times, attempts and last error.

import { formatSeconds, stepName } from "./format.js";
import { STEP_STATUSES } from "./statuses.js";

const AXIS_HEIGHT = 22;
const LABEL_WIDTH = 230;
const MAX_CANVAS_HEIGHT = 16000; // browsers refuse larger canvases
// A redraw costs one pass over the steps: at most this often while events stream in.
const REDRAW_EVERY_MS = 250;

export class Timeline {
  constructor({ details, canvas, store, onOpenStep, onOpenPlan }) {
    this.details = details;
    this.canvas = canvas;
    this.store = store;
    this.times = new WeakMap(); // step object -> parsed start and end
    this.rows = [];
    this.rowHeight = 18;
    this.lastDrawn = 0;
    this.redrawTimer = null;
    const style = getComputedStyle(document.documentElement);
    this.colours = Object.fromEntries(STEP_STATUSES.map((status) => [status, style.getPropertyValue(`--status-${status}`).trim() || "#888"]));
    this.ink = style.getPropertyValue("--ink-soft").trim() || "#444";
    this.planning = style.getPropertyValue("--status-planning").trim() || "#7a4fbf";
    this.line = style.getPropertyValue("--line").trim() || "#ddd";
    details.addEventListener("toggle", () => this.draw());
    const rowAt = (event) => {
      const box = canvas.getBoundingClientRect();
      return this.rows[Math.floor((event.clientY - box.top - AXIS_HEIGHT) / this.rowHeight)];
    };
    canvas.addEventListener("click", (event) => {
      const row = rowAt(event);
      if (row && row.plan) onOpenPlan?.(row.plan.round);
      else if (row) onOpenStep(row.id);
    });
    // The full label of the row under the pointer, with what the bar cannot say.
    canvas.addEventListener("mousemove", (event) => {
      const row = rowAt(event);
      const text = row ? rowTooltip(row) : "";
      if (canvas.title !== text) canvas.title = text;
    });
  }

  update(changes) {
    if (!this.details.open || !(changes.changedSteps.size || changes.run || changes.plans.size) || this.redrawTimer) return;
    const wait = Math.max(0, this.lastDrawn + REDRAW_EVERY_MS - performance.now());
    this.redrawTimer = setTimeout(() => {
      this.redrawTimer = null;
      this.draw();
    }, wait);
  }

  // Each round's conductor calls (when a conductor planned it), then its steps.
  rowsInOrder() {
    const steps = this.store.orderedSteps();
    const plans = [...this.store.plans.values()].filter((plan) => plan.strategy === "conductor" && plan.finished_at);
    if (!plans.length) return steps;
    plans.sort((a, b) => a.round - b.round);
    const rows = [];
    let next = 0;
    for (const step of steps) {
      while (next < plans.length && plans[next].round <= step.round) rows.push(planRow(plans[next++]));
      rows.push(step);
    }
    while (next < plans.length) rows.push(planRow(plans[next++]));
    return rows;
  }

  timesOf(step) {
    let times = this.times.get(step);
    if (!times) {
      times = {
        start: step.started_at ? Date.parse(step.started_at) : null,
        end: step.finished_at ? Date.parse(step.finished_at) : null,
      };
      this.times.set(step, times);
    }
    return times;
  }

  draw() {
    if (!this.details.open) return;
    this.lastDrawn = performance.now();
    const steps = this.rowsInOrder();
    this.rows = steps;
    const now = Date.now();
    let first = Infinity;
    let last = -Infinity;
    for (const step of steps) {
      const { start, end } = this.timesOf(step);
      if (start == null) continue;
      first = Math.min(first, start);
      last = Math.max(last, end ?? (step.status === "running" ? now : start));
    }
    // Rows shrink (below a pixel for tens of thousands of steps) so the canvas stays drawable.
    this.rowHeight = Math.min(18, (MAX_CANVAS_HEIGHT - AXIS_HEIGHT) / Math.max(steps.length, 1));
    const width = Math.max(300, this.canvas.parentElement.clientWidth);
    const height = AXIS_HEIGHT + Math.max(1, steps.length) * this.rowHeight;
    const ratio = height * (window.devicePixelRatio || 1) <= MAX_CANVAS_HEIGHT ? window.devicePixelRatio || 1 : 1;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(height * ratio);
    this.canvas.style.width = `${width}px`;
    this.canvas.style.height = `${height}px`;
    const context = this.canvas.getContext("2d");
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.clearRect(0, 0, width, height);
    context.font = "11px system-ui, sans-serif";
    context.textBaseline = "middle";
    context.fillStyle = this.ink;
    if (first === Infinity) {
      context.fillText("No step has started yet.", 8, AXIS_HEIGHT / 2);
      return;
    }
    const labels = this.rowHeight >= 12;
    const left = labels ? LABEL_WIDTH : 8;
    const span = Math.max(last - first, 1);
    const scale = (width - left - 12) / span;
    // The axis: five ticks over the run's span (three on a narrow screen, where five overlap).
    context.strokeStyle = this.line;
    const ticks = width - left < 360 ? 2 : 4;
    for (let tick = 0; tick <= ticks; tick += 1) {
      const x = left + (tick / ticks) * (width - left - 12);
      context.beginPath();
      context.moveTo(x, AXIS_HEIGHT - 4);
      context.lineTo(x, height);
      context.stroke();
      context.textAlign = tick === ticks ? "right" : tick === 0 ? "left" : "center";
      context.fillText(formatSeconds((tick / ticks) * (span / 1000)), x, AXIS_HEIGHT / 2);
    }
    context.textAlign = "left";
    const barHeight = Math.max(1, this.rowHeight - (labels ? 5 : 0.5));
    steps.forEach((step, row) => {
      const y = AXIS_HEIGHT + row * this.rowHeight;
      if (labels) {
        context.fillStyle = step.plan ? this.planning : this.ink;
        context.fillText(fitText(context, rowLabel(step), left - 10), 4, y + this.rowHeight / 2);
      }
      const { start, end } = this.timesOf(step);
      if (start == null) return;
      const stop = end ?? (step.status === "running" ? now : start);
      context.fillStyle = step.plan ? this.planning : this.colours[step.status] || this.ink;
      context.fillRect(left + (start - first) * scale, y + (this.rowHeight - barHeight) / 2, Math.max(2, (stop - start) * scale), barHeight);
    });
  }
}

// A round's planning as a timeline row: the conductor's calls ended when the plan was stored.
function planRow(plan) {
  const end = Date.parse(plan.finished_at);
  const start = end - (plan.latency || 0) * 1000;
  return {
    plan,
    id: `plan-${plan.round}`,
    status: plan.error ? "failed" : "succeeded",
    started_at: new Date(start).toISOString(),
    finished_at: plan.finished_at,
  };
}

function rowLabel(row) {
  if (row.plan) return `Round ${row.plan.round}: conductor plans`;
  return `${stepName(row)} · ${row.worker}`;
}

function rowTooltip(row) {
  const parts = [rowLabel(row)];
  if (row.plan) {
    if (row.plan.latency != null) parts.push(`${formatSeconds(row.plan.latency)} over ${row.plan.attempts} call${row.plan.attempts === 1 ? "" : "s"}`);
    if (row.plan.error) parts.push(`error: ${row.plan.error}`);
    return parts.join("\n");
  }
  parts.push(row.instruction.split("\n", 1)[0].slice(0, 200));
  parts.push(`${row.status}${row.latency != null ? ` · ${formatSeconds(row.latency)}` : ""}`);
  if (row.attempts > 1) parts.push(`${row.attempts} attempts (retried with backoff)`);
  if (row.error) parts.push(`last error: ${row.error.slice(0, 300)}`);
  return parts.join("\n");
}

// ``text`` cut with an ellipsis to fit ``width`` pixels (the tooltip has it all).
function fitText(context, text, width) {
  if (context.measureText(text).width <= width) return text;
  let low = 0;
  let high = text.length;
  while (low < high) {
    const middle = (low + high + 1) >> 1;
    if (context.measureText(`${text.slice(0, middle)}…`).width <= width) low = middle;
    else high = middle - 1;
  }
  return `${text.slice(0, low)}…`;
}
