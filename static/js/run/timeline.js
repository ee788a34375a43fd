// The timeline (waterfall): one row per step in order, a bar from started_at to finished_at
// (to now while running). Drawn on a canvas, so thousands of steps cost one pass per frame, and
// only while the section is open. A click on a row opens that step.

import { formatSeconds, stepName } from "./format.js";
import { STEP_STATUSES } from "./statuses.js";

const AXIS_HEIGHT = 22;
const LABEL_WIDTH = 170;
const MAX_CANVAS_HEIGHT = 16000; // browsers refuse larger canvases
// A redraw costs one pass over the steps: at most this often while events stream in.
const REDRAW_EVERY_MS = 250;

export class Timeline {
  constructor({ details, canvas, store, onOpenStep }) {
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
    this.line = style.getPropertyValue("--line").trim() || "#ddd";
    details.addEventListener("toggle", () => this.draw());
    canvas.addEventListener("click", (event) => {
      const box = canvas.getBoundingClientRect();
      const row = Math.floor((event.clientY - box.top - AXIS_HEIGHT) / this.rowHeight);
      const step = this.rows[row];
      if (step) onOpenStep(step.id);
    });
  }

  update(changes) {
    if (!this.details.open || !(changes.changedSteps.size || changes.run) || this.redrawTimer) return;
    const wait = Math.max(0, this.lastDrawn + REDRAW_EVERY_MS - performance.now());
    this.redrawTimer = setTimeout(() => {
      this.redrawTimer = null;
      this.draw();
    }, wait);
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
    const steps = this.store.orderedSteps();
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
    // The axis: five ticks over the run's span.
    context.strokeStyle = this.line;
    for (let tick = 0; tick <= 4; tick += 1) {
      const x = left + (tick / 4) * (width - left - 12);
      context.beginPath();
      context.moveTo(x, AXIS_HEIGHT - 4);
      context.lineTo(x, height);
      context.stroke();
      context.textAlign = tick === 4 ? "right" : tick === 0 ? "left" : "center";
      context.fillText(formatSeconds((tick / 4) * (span / 1000)), x, AXIS_HEIGHT / 2);
    }
    context.textAlign = "left";
    const barHeight = Math.max(1, this.rowHeight - (labels ? 5 : 0.5));
    steps.forEach((step, row) => {
      const y = AXIS_HEIGHT + row * this.rowHeight;
      if (labels) {
        context.fillStyle = this.ink;
        context.fillText(`${stepName(step)} ${step.worker}`.slice(0, 26), 4, y + this.rowHeight / 2);
      }
      const { start, end } = this.timesOf(step);
      if (start == null) return;
      const stop = end ?? (step.status === "running" ? now : start);
      context.fillStyle = this.colours[step.status] || this.ink;
      context.fillRect(left + (start - first) * scale, y + (this.rowHeight - barHeight) / 2, Math.max(2, (stop - start) * scale), barHeight);
    });
  }
}
