// The run as the page knows it: the snapshot, then every live event applied in seq order.
// Follows the schema in orchestrator/events.py. Every operation is O(1) per event (apart from the
// rare step that arrives out of order), so a run of many thousands of steps stays cheap.

import { EVENTS, RUN_FINISHED } from "./statuses.js";

// What changed since the page last drew; filled by the store, consumed once per frame.
export class Changes {
  constructor() {
    this.run = false;
    this.totals = false;
    this.shapedRounds = new Set(); // rounds that gained a step or a plan, or whose reads changed: laid out again
    this.addedSteps = new Set();
    this.changedSteps = new Set();
    this.rounds = new Set(); // rounds whose counts by status changed
    this.plans = new Set(); // rounds whose plan arrived or changed
  }

  get empty() {
    return !(this.run || this.totals || this.shapedRounds.size || this.changedSteps.size || this.plans.size);
  }
}

export class RunStore {
  constructor(state) {
    this.run = state.run;
    this.plans = new Map(); // round -> plan
    this.steps = new Map(); // step id -> step
    this.order = []; // steps sorted by (round, index)
    this.roundStepIds = new Map(); // round -> ids of its steps
    this.roundCounts = new Map(); // round -> {status: count}
    this.loadState(state, new Changes());
  }

  // The page's snapshot: the run as it was at the seq the page's socket resumes from.
  loadState(state, changes) {
    this.run = state.run;
    changes.run = changes.totals = true;
    for (const plan of state.plans || []) this.putPlan(plan, changes);
    for (const step of state.steps || []) this.putStep(step, changes);
    return changes;
  }

  // One event of orchestrator/events.py. The caller has already dropped events seen before.
  apply(event, changes) {
    switch (event.type) {
      case EVENTS.run_status:
        this.run = { ...this.run, status: event.status };
        changes.run = true;
        break;
      case EVENTS.plan_created:
        this.putPlan(event.plan, changes);
        break;
      case EVENTS.step_created:
      case EVENTS.step_started:
      case EVENTS.step_finished:
      case EVENTS.step_failed:
        this.putStep(event.step, changes);
        if (event.totals) this.setTotals(event.totals, changes);
        break;
      case EVENTS.run_finished:
        this.run = {
          ...this.run,
          status: event.status,
          answer: event.answer ?? this.run.answer,
          answer_shown: event.answer_shown ?? this.run.answer_shown,
          score: event.score ?? this.run.score,
          verdict: event.verdict ?? this.run.verdict,
          error: event.error ?? this.run.error,
          finished_at: event.finished_at ?? this.run.finished_at,
        };
        changes.run = true;
        if (event.totals) this.setTotals(event.totals, changes);
        this.closeSteps(event.closed_steps, event.finished_at, changes);
        break;
      default:
        // An event type this page does not know yet: nothing to draw.
        break;
    }
  }

  setTotals(totals, changes) {
    this.run = { ...this.run, totals };
    changes.totals = true;
  }

  // The steps the run's end closed (still running: cancelled; never started: skipped).
  closeSteps(closed, finishedAt, changes) {
    for (const [status, { ids, error }] of Object.entries(closed || {})) {
      for (const id of ids) {
        const known = this.steps.get(id);
        if (known) this.putStep({ ...known, status, error, finished_at: finishedAt ?? known.finished_at }, changes);
      }
    }
  }

  putPlan(plan, changes) {
    const known = this.plans.get(plan.round);
    this.plans.set(plan.round, plan);
    changes.plans.add(plan.round);
    if (!known) changes.shapedRounds.add(plan.round);
  }

  putStep(step, changes) {
    const known = this.steps.get(step.id);
    if (known && sameStep(known, step)) return;
    this.steps.set(step.id, step);
    this.countStatus(step.round, known ? known.status : null, step.status);
    changes.changedSteps.add(step.id);
    changes.rounds.add(step.round);
    if (!known) {
      this.insertInOrder(step);
      let ids = this.roundStepIds.get(step.round);
      if (!ids) this.roundStepIds.set(step.round, (ids = []));
      ids.push(step.id);
      changes.addedSteps.add(step.id);
      changes.shapedRounds.add(step.round);
    } else if (!sameReads(known.reads, step.reads)) {
      changes.shapedRounds.add(step.round);
    }
  }

  countStatus(round, before, after) {
    let counts = this.roundCounts.get(round);
    if (!counts) this.roundCounts.set(round, (counts = {}));
    if (before) counts[before] -= 1;
    counts[after] = (counts[after] || 0) + 1;
  }

  insertInOrder(step) {
    const order = this.order;
    const last = order[order.length - 1];
    if (!last || compareSteps(last, step) < 0) {
      order.push(step);
      return order.length - 1;
    }
    // Out of order (rare): binary search, then one splice.
    let low = 0;
    let high = order.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (compareSteps(order[middle], step) < 0) low = middle + 1;
      else high = middle;
    }
    order.splice(low, 0, step);
    return low;
  }

  // One round's steps, current data, by index.
  roundSteps(round) {
    return (this.roundStepIds.get(round) || []).map((id) => this.steps.get(id)).sort((a, b) => a.index - b.index || a.id - b.id);
  }

  // Steps in order, current data (order keeps the first object seen; look the id up again).
  orderedSteps() {
    return this.order.map((step) => this.steps.get(step.id));
  }

  // The step that follows this one in order (for inserting its list item), or null.
  nextStepAfter(id) {
    const step = this.steps.get(id);
    let low = 0;
    let high = this.order.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (compareSteps(this.order[middle], step) <= 0) low = middle + 1;
      else high = middle;
    }
    return low < this.order.length ? this.order[low].id : null;
  }

  get finished() {
    return RUN_FINISHED.has(this.run.status);
  }
}

function compareSteps(a, b) {
  return a.round - b.round || a.index - b.index || a.id - b.id;
}

function sameReads(a, b) {
  if (a === b) return true;
  if (!a || !b || a.length !== b.length) return false;
  return a.every((value, i) => value === b[i]);
}

function sameStep(a, b) {
  return (
    a.status === b.status &&
    a.tokens_in === b.tokens_in &&
    a.tokens_out === b.tokens_out &&
    a.latency === b.latency &&
    a.attempts === b.attempts &&
    a.error === b.error &&
    (a.attempt_log || []).length === (b.attempt_log || []).length &&
    a.started_at === b.started_at &&
    a.finished_at === b.finished_at &&
    a.cost === b.cost &&
    a.instruction === b.instruction &&
    sameReads(a.reads, b.reads)
  );
}
