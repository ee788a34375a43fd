// The run as the page knows it: the snapshot, then every live event applied in seq order.
// Follows the schema in orchestrator/events.py. Every operation is O(1) per event (apart from the
// rare step that arrives out of order), so a run of many thousands of steps stays cheap.
// A folded run's page embeds no steps of its finished rounds (wire.FoldedRound): each such round
// is known by its counts until its steps are fetched (loadSteps), and a live event on one of its
// steps moves those counts (and is kept, to apply again over the fetched steps if it is newer).

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
  // ``folded``: the rounds whose steps the page did not embed (wire.FoldedRound); ``groups``: the
  // graph's round boxes, which hold their counts by status.
  constructor(state, { folded = [], groups = [] } = {}) {
    this.run = state.run;
    this.plans = new Map(); // round -> plan
    this.steps = new Map(); // step id -> step
    this.order = []; // steps sorted by (round, index)
    this.roundStepIds = new Map(); // round -> ids of its steps
    this.roundCounts = new Map(); // round -> {status: count}
    // Folded round -> {statuses: step id -> status for the steps not known to have succeeded,
    // events: the live events that touched its steps}.
    this.folded = new Map();
    this.loadedAt = new Map(); // round -> the seq its fetched steps are current to
    const counts = new Map(groups.map((group) => [group.round, group.statuses]));
    for (const { round, not_succeeded: others } of folded) {
      const statuses = new Map();
      for (const [status, ids] of Object.entries(others)) for (const id of ids) statuses.set(id, status);
      this.folded.set(round, { statuses, events: [] });
      this.roundCounts.set(round, { ...(counts.get(round) || {}) });
    }
    this.loadState(state, new Changes());
  }

  // The page's snapshot: the run as it was at the seq the page's socket resumes from.
  loadState(state, changes) {
    this.run = state.run;
    changes.run = changes.totals = true;
    for (const plan of state.plans || []) this.putPlan(plan, changes);
    for (const step of tableSteps(state.steps || [])) this.putStep(step, changes);
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
        this.applyToStep(event, changes);
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
        this.closeSteps(event, changes);
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

  // A step event's step: stored, or in a folded round counted (and kept for when it opens); an
  // event no newer than the fetched steps of its round is already in them.
  applyToStep(event, changes) {
    const step = event.step;
    const folded = this.folded.get(step.round);
    if (folded) {
      folded.events.push(event);
      this.countFolded(folded, step.round, step.id, step.status, event.type === EVENTS.step_created, changes);
      return;
    }
    if (event.seq != null && event.seq <= (this.loadedAt.get(step.round) ?? -Infinity)) return;
    this.putStep(step, changes);
  }

  // A folded round's step changed status: its round's counts follow (a step the page has not
  // seen change had succeeded, unless the page was told otherwise).
  countFolded(folded, round, id, status, created, changes) {
    const before = folded.statuses.has(id) ? folded.statuses.get(id) : created ? null : "succeeded";
    folded.statuses.set(id, status);
    if (before === status) return;
    this.countStatus(round, before, status);
    changes.rounds.add(round);
  }

  // The steps the run's end closed (still running: cancelled; never started: skipped).
  closeSteps(event, changes) {
    const finishedAt = event.finished_at;
    for (const [status, { ids, error }] of Object.entries(event.closed_steps || {})) {
      for (const id of ids) {
        const known = this.steps.get(id);
        if (known) {
          this.putStep({ ...known, status, error, finished_at: finishedAt ?? known.finished_at }, changes);
          continue;
        }
        for (const [round, folded] of this.folded) {
          if (!folded.statuses.has(id)) continue;
          if (folded.events.at(-1) !== event) folded.events.push(event);
          this.countFolded(folded, round, id, status, false, changes);
        }
      }
    }
  }

  // Steps fetched for folded rounds (wire.RoundSteps: one round's, or every step, as a table), current to at
  // least ``seq``: each folded round among them is loaded (``round``: that one only), then the
  // live events that touched it after that seq are applied again. The server laid these rounds
  // out already: they are not marked to be laid out again.
  loadSteps({ seq, steps }, changes, round = null) {
    const rounds = round == null ? [...this.folded.keys()] : this.folded.has(round) ? [round] : [];
    if (!rounds.length) return changes;
    const loading = new Set(rounds);
    const events = [];
    for (const number of rounds) {
      events.push(...this.folded.get(number).events);
      this.folded.delete(number);
      this.loadedAt.set(number, seq);
      this.roundCounts.set(number, {});
    }
    const size = this.order.length;
    for (const step of tableSteps(steps)) if (loading.has(step.round)) this.putStep(step, changes, { ordered: false });
    // One sort, not a splice per step (a round before the last one may open).
    if (this.order.length !== size) this.order.sort(compareSteps);
    for (const number of rounds) changes.shapedRounds.delete(number);
    for (const event of [...new Set(events)].sort((a, b) => a.seq - b.seq)) {
      if (event.type === EVENTS.run_finished) this.closeSteps(event, changes);
      else if (event.seq > seq) this.applyToStep(event, changes);
    }
    return changes;
  }

  // Whether every step is in the store (no folded round left to fetch).
  get complete() {
    return this.folded.size === 0;
  }

  // The run's last step in order, or null (none yet, or a later round is folded).
  lastStep() {
    const last = this.order.at(-1);
    if (!last) return null;
    for (const round of this.folded.keys()) if (round > last.round) return null;
    return this.steps.get(last.id);
  }

  putPlan(plan, changes) {
    const known = this.plans.get(plan.round);
    this.plans.set(plan.round, plan);
    changes.plans.add(plan.round);
    if (!known) changes.shapedRounds.add(plan.round);
  }

  putStep(step, changes, { ordered = true } = {}) {
    const known = this.steps.get(step.id);
    if (known && sameStep(known, step)) return;
    this.steps.set(step.id, step);
    this.countStatus(step.round, known ? known.status : null, step.status);
    changes.changedSteps.add(step.id);
    changes.rounds.add(step.round);
    if (!known) {
      if (ordered) this.insertInOrder(step);
      else this.order.push(step);
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

// Steps as pages embed them (wire.StepTable: columns, then one row of values per step), as objects;
// a list of objects (the API's, the socket's) as it is.
export function tableSteps(steps) {
  if (Array.isArray(steps)) return steps;
  const { columns, rows } = steps;
  return rows.map((row) => {
    const step = {};
    for (let i = 0; i < columns.length; i += 1) step[columns[i]] = row[i];
    return step;
  });
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
