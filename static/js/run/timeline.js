// The timeline (waterfall): one row per conductor call (a round's planning) and per step, in
// order, a bar from its start to its end (to now while running). Drawn on a canvas, so thousands
// of steps cost one pass per frame, and only while the section is open. A click on a row opens
// that step (or plan); hovering a row shows its full label, times, attempts and last error.
// A retried step (one with an ``attempt_log``) is drawn call by call: each failed attempt a
// striped red segment, the backoff after it a dashed, labelled wait, then the last attempt. Each
// of those segments also gets a transparent element over the canvas with its own tooltip and
// accessible label (the attempt's error, as text), for the first MAX_MARKED_STEPS retried steps.
// A call that waited for a slot of its worker's (or the conductor's) concurrency bound starts
// with a dotted, labelled "queue" line: the wait is drawn apart from the call's own time.

import { formatSeconds, stepName } from "./format.js";
import { STEP_STATUSES } from "./statuses.js";

const AXIS_HEIGHT = 22;
const LABEL_WIDTH = 230;
const MAX_CANVAS_HEIGHT = 16000; // browsers refuse larger canvases
// A redraw costs one pass over the steps: at most this often while events stream in.
const REDRAW_EVERY_MS = 250;
// Retried steps whose attempts get an element each over the canvas (the canvas draws them all).
const MAX_MARKED_STEPS = 200;

export class Timeline {
  // ``loadSteps()``: fetches the steps the page does not hold (a folded run's); the timeline is
  // drawn once they have come (the store's change then redraws it).
  constructor({ details, canvas, marks, store, onOpenStep, onOpenPlan, loadSteps = () => Promise.resolve() }) {
    this.details = details;
    this.loadSteps = loadSteps;
    this.canvas = canvas;
    this.marks = marks; // the layer over the canvas holding the attempts' elements
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
    this.stripes = null; // the failed attempts' fill, made on first use
    details.addEventListener("toggle", () => this.draw());
    marks?.addEventListener("click", (event) => {
      const mark = event.target.closest("[data-step]");
      if (mark) onOpenStep(Number(mark.dataset.step));
    });
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
    if (!this.store.complete) {
      this.loadSteps().catch(() => {});
      return;
    }
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
    const marks = [];
    let marked = 0;
    steps.forEach((step, row) => {
      const y = AXIS_HEIGHT + row * this.rowHeight;
      if (labels) {
        context.fillStyle = step.plan ? this.planning : this.ink;
        context.fillText(fitText(context, rowLabel(step), left - 10), 4, y + this.rowHeight / 2);
      }
      const { start, end } = this.timesOf(step);
      if (start == null) return;
      const top = y + (this.rowHeight - barHeight) / 2;
      if (!step.plan && step.attempt_log && step.attempt_log.length) {
        const segments = attemptSegments(step, start);
        const mark = labels && marked < MAX_MARKED_STEPS;
        if (mark) marked += 1;
        for (const segment of segments) {
          const x = left + (segment.start - first) * scale;
          const width = Math.max(2, (segment.end - segment.start) * scale);
          this.drawSegment(context, step, segment, x, top, width, barHeight);
          if (mark) marks.push(markElement(step, segment, x, top, width, barHeight));
        }
        return;
      }
      const stop = end ?? (step.status === "running" ? now : start);
      const queued = queueSeconds(step);
      let callStart = start;
      if (queued > 0) {
        callStart = Math.min(stop, start + queued * 1000);
        const x = left + (start - first) * scale;
        this.drawQueue(context, x, top, Math.max(1, (callStart - start) * scale), barHeight, queued);
        if (stop <= callStart) return;
      }
      context.fillStyle = step.plan ? this.planning : this.colours[step.status] || this.ink;
      context.fillRect(left + (callStart - first) * scale, top, Math.max(2, (stop - callStart) * scale), barHeight);
    });
    this.marks?.replaceChildren(...marks);
  }

  // A wait for a slot: a dotted line across the row, labelled with its length where it fits.
  drawQueue(context, x, top, width, height, seconds) {
    const middle = top + height / 2;
    context.strokeStyle = this.ink;
    context.setLineDash([1, 2]);
    context.beginPath();
    context.moveTo(x, middle);
    context.lineTo(x + width, middle);
    context.stroke();
    context.setLineDash([]);
    const text = `queue ${formatSeconds(seconds)}`;
    const textWidth = context.measureText(text).width;
    if (height >= 10 && textWidth + 8 <= width) {
      context.clearRect(x + (width - textWidth) / 2 - 3, top, textWidth + 6, height);
      context.fillStyle = this.ink;
      context.textAlign = "center";
      context.fillText(text, x + width / 2, middle);
      context.textAlign = "left";
    }
  }

  // One attempt of a retried step (red and striped when it failed), the wait after it (a
  // dashed line across the row, labelled with its length where it fits), or its wait for a slot.
  drawSegment(context, step, segment, x, top, width, height) {
    if (segment.kind === "queue") {
      this.drawQueue(context, x, top, width, height, (segment.end - segment.start) / 1000);
      return;
    }
    if (segment.kind === "wait") {
      const middle = top + height / 2;
      context.strokeStyle = this.ink;
      context.setLineDash([3, 3]);
      context.beginPath();
      context.moveTo(x, middle);
      context.lineTo(x + width, middle);
      context.stroke();
      context.setLineDash([]);
      const text = `wait ${formatSeconds(segment.attempt.backoff)}`;
      const textWidth = context.measureText(text).width;
      if (height >= 10 && textWidth + 8 <= width) {
        context.clearRect(x + (width - textWidth) / 2 - 3, top, textWidth + 6, height);
        context.fillStyle = this.ink;
        context.textAlign = "center";
        context.fillText(text, x + width / 2, middle);
        context.textAlign = "left";
      }
      return;
    }
    const failed = Boolean(segment.attempt.error);
    context.fillStyle = failed ? this.colours.failed || "#b42318" : this.colours[step.status] || this.ink;
    context.fillRect(x, top, width, height);
    if (failed) {
      context.fillStyle = this.stripePattern(context);
      context.fillRect(x, top, width, height);
    }
  }

  stripePattern(context) {
    if (!this.stripes) {
      const tile = document.createElement("canvas");
      tile.width = tile.height = 6;
      const ink = tile.getContext("2d");
      ink.strokeStyle = "rgba(255, 255, 255, 0.55)";
      ink.lineWidth = 2;
      ink.beginPath();
      ink.moveTo(-1, 7);
      ink.lineTo(7, -1);
      ink.stroke();
      this.stripes = context.createPattern(tile, "repeat");
    }
    return this.stripes;
  }
}

// A retried step's segments, in order: each attempt (from its offset after the step's start)
// and, after one that failed, the backoff waited before the next.
function attemptSegments(step, start) {
  const segments = [];
  const count = step.attempt_log.length;
  let free = start; // where the previous attempt's backoff ended
  for (const attempt of step.attempt_log) {
    const begin = start + (attempt.offset || 0) * 1000;
    // A call starts after its wait for a slot: the gap since the backoff before it.
    if (begin - free > 1) segments.push({ kind: "queue", attempt, count, start: free, end: begin });
    free = begin + ((attempt.seconds || 0) + (attempt.backoff || 0)) * 1000;
    const end = begin + (attempt.seconds || 0) * 1000;
    segments.push({ kind: "attempt", attempt, count, start: begin, end });
    if (attempt.backoff > 0) segments.push({ kind: "wait", attempt, count, start: end, end: end + attempt.backoff * 1000 });
  }
  return segments;
}

// What one segment says: which attempt, how it ended and its error, or how long the wait was.
export function segmentText(step, segment) {
  const name = `${stepName(step)} · ${step.worker}`;
  const { attempt, count } = segment;
  if (segment.kind === "queue") return `${name}: attempt ${attempt.attempt} waited ${formatSeconds((segment.end - segment.start) / 1000)} in the queue for a free slot`;
  if (segment.kind === "wait") return `${name}: waited ${formatSeconds(attempt.backoff)} after attempt ${attempt.attempt} before retrying`;
  const outcome = attempt.error ? `failed after ${formatSeconds(attempt.seconds)}: ${attempt.error}` : `succeeded after ${formatSeconds(attempt.seconds)}`;
  return `${name}: attempt ${attempt.attempt} of ${count} ${outcome}`;
}

// The element over a segment: its tooltip and accessible label (set as text, never as HTML).
function markElement(step, segment, x, top, width, height) {
  const mark = document.createElement("span");
  const failed = segment.kind === "attempt" && segment.attempt.error;
  mark.className = `timeline-mark timeline-${segment.kind}${failed ? " timeline-attempt-failed" : ""}`;
  mark.dataset.step = String(step.id);
  mark.dataset.attempt = String(segment.attempt.attempt);
  mark.setAttribute("role", "img");
  const text = segmentText(step, segment);
  mark.setAttribute("aria-label", text);
  mark.title = text;
  mark.style.left = `${x}px`;
  mark.style.top = `${top}px`;
  mark.style.width = `${width}px`;
  mark.style.height = `${height}px`;
  return mark;
}

// Seconds a row's call waited for a slot before it (a step retried draws its own waits).
function queueSeconds(row) {
  if (row.plan) return row.plan.queued || 0;
  return row.attempt_log && row.attempt_log.length ? 0 : row.queued || 0;
}

// A round's planning as a timeline row: the conductor's calls (after their waits for a slot)
// ended when the plan was stored.
function planRow(plan) {
  const end = Date.parse(plan.finished_at);
  const start = end - ((plan.latency || 0) + (plan.queued || 0)) * 1000;
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
    if (row.plan.queued > 0) parts.push(`waited ${formatSeconds(row.plan.queued)} in the queue for a free slot`);
    if (row.plan.error) parts.push(`error: ${row.plan.error}`);
    return parts.join("\n");
  }
  parts.push(row.instruction.split("\n", 1)[0].slice(0, 200));
  parts.push(`${row.status}${row.latency != null ? ` · ${formatSeconds(row.latency)}` : ""}`);
  if (row.queued > 0) parts.push(`waited ${formatSeconds(row.queued)} in the queue for a free slot (not in its latency)`);
  if (row.attempts > 1) parts.push(`${row.attempts} attempts (retried with backoff)`);
  if (row.attempt_log && row.attempt_log.length) {
    for (const attempt of row.attempt_log) {
      if (attempt.error) parts.push(`attempt ${attempt.attempt}: ${attempt.error.slice(0, 200)}${attempt.backoff > 0 ? ` (then waited ${formatSeconds(attempt.backoff)})` : ""}`);
    }
  }
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
