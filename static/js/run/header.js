// The run's header: status, final answer, score, error, totals and the live indicator.

import { renderMarkdown } from "./markdown.js";
import { formatCost, formatCount, formatScore, formatSeconds, setStatusBadge, setVerdictBadge } from "./format.js";

const LIVE_TEXT = {
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting…",
  finished: "Finished",
  refused: "Not live: the server refused the connection (reload to log in again)",
};

export class RunHeader {
  constructor(root, store) {
    this.store = store;
    this.find = (id) => root.querySelector(`#${id}`);
    this.status = this.find("run-status");
    this.answer = this.find("run-answer");
    this.verdict = this.find("run-verdict");
    this.response = this.find("run-response");
    this.responseBody = this.find("run-response-body");
    this.score = this.find("run-score");
    this.error = this.find("run-error");
    this.indicator = this.find("live-indicator");
    this.renderedAnswer = null;
    this.clock = null;
  }

  render() {
    const run = this.store.run;
    setStatusBadge(this.status, run.status);
    setVerdictBadge(this.verdict, run.verdict);
    // Keyed on the status too: a run that fails keeps its empty answer but must stop saying "Not yet.".
    const answerKey = `${run.status}\n${run.answer}`;
    if (answerKey !== this.renderedAnswer) {
      this.renderedAnswer = answerKey;
      // The answer itself as the grader reads it; the full response (a model's output: safe
      // Markdown like every response) one click away.
      this.answer.classList.toggle("run-answer-missing", !run.answer);
      this.answer.textContent = run.answer ? run.answer_shown || run.answer : missingAnswer(run.status, this.store.finished);
      this.response.hidden = !run.answer;
      this.responseBody.classList.remove("plain-text");
      if (run.answer) renderMarkdown(this.responseBody, run.answer);
      else this.responseBody.replaceChildren();
    }
    this.score.textContent = formatScore(run.score);
    this.error.hidden = !run.error;
    this.error.textContent = run.error || "";
    this.renderTotals();
    this.tickWhileRunning();
  }

  renderTotals() {
    const totals = this.store.run.totals || {};
    this.find("total-tokens-in").textContent = formatCount(totals.tokens_in);
    this.find("total-tokens-out").textContent = formatCount(totals.tokens_out);
    this.find("total-cost").textContent = formatCost(totals.cost);
    this.find("total-model-calls").textContent = formatCount(totals.model_calls);
    this.find("total-steps").textContent = formatCount(Math.max(totals.step_count || 0, this.store.steps.size));
    this.find("total-wall-time").textContent = formatSeconds(this.wallTime());
  }

  wallTime() {
    const run = this.store.run;
    const stored = run.totals && run.totals.wall_time;
    if (stored != null || this.store.finished || !run.started_at) return stored;
    return (Date.now() - Date.parse(run.started_at)) / 1000;
  }

  // While the run is going, the wall time counts up once a second.
  tickWhileRunning() {
    const running = !this.store.finished && this.store.run.started_at;
    if (running && !this.clock) {
      this.clock = setInterval(() => {
        this.find("total-wall-time").textContent = formatSeconds(this.wallTime());
      }, 1000);
    } else if (!running && this.clock) {
      clearInterval(this.clock);
      this.clock = null;
    }
  }

  setLiveState(state) {
    this.indicator.dataset.state = state;
    this.indicator.textContent = LIVE_TEXT[state] || state;
  }
}

// What the answer box says when there is no answer: why, once the run has ended.
function missingAnswer(status, finished) {
  if (!finished) return "Not yet.";
  if (status === "failed") return "No answer: the run failed (the error below says why).";
  if (status === "cancelled") return "No answer: the run was cancelled.";
  return "—";
}
