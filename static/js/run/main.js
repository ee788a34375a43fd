// The run page: draws the run from the state embedded in the page (its snapshot, the seq it is
// current to and its laid-out graph: the page's one state load), then keeps it live over the run's
// websocket, which sends only the events after that seq. Events are queued as they arrive and applied once per animation frame, so a
// burst of events costs one DOM and graph update, not one each.

import { getJSON } from "../http.js";
import { GraphView } from "./graph.js";
import { RunHeader } from "./header.js";
import { LiveConnection } from "./live.js";
import { CancelButton } from "./cancel.js";
import { DetailsPanel } from "./panel.js";
import { RunReview } from "./review.js";
import { StepList } from "./steplist.js";
import { Changes, RunStore } from "./store.js";
import { Timeline } from "./timeline.js";
import { ReplayControls } from "./replay.js";
import { element } from "./format.js";

const root = document.getElementById("run-page");
const runId = Number(root.dataset.runId);
const apiRoot = root.dataset.apiRoot;

// Plain same-origin GETs (session cookie, JSON by default): a step's details, a folded round.
function api(path) {
  return getJSON(`${apiRoot}${path}`);
}

const pageState = JSON.parse(document.getElementById("run-state").textContent);
const store = new RunStore(pageState.state, { folded: pageState.folded, groups: pageState.graph.groups });
performance.mark("run-page:state-read");

// A folded run's page holds no steps of its finished rounds: one round's steps are fetched when
// it is opened (on the graph, or a step or plan of it in the panel), every step when the list or
// the timeline is. One request per round (or for all) at a time.
const stepLoads = new Map();
function loadSteps(round = null) {
  if (round == null ? store.complete : !store.folded.has(round)) return Promise.resolve();
  const key = round == null ? "all" : round;
  if (!stepLoads.has(key)) {
    const query = round == null ? "" : `?round=${round}`;
    const load = api(`runs/${runId}/steps/${query}`)
      .then((steps) => draw(store.loadSteps(steps, new Changes(), round)))
      .finally(() => stepLoads.delete(key));
    stepLoads.set(key, load);
  }
  return stepLoads.get(key);
}

// A folded round opened on the graph: its steps and its layout (wire.RoundSteps) in one request.
async function fetchRound(round) {
  const opened = await api(`runs/${runId}/steps/?round=${round}&graph=true`);
  draw(store.loadSteps(opened, new Changes(), round));
  return opened.graph;
}

const notice = document.getElementById("graph-notice");
function showNotice(text) {
  notice.textContent = text;
  notice.hidden = !text;
}

const header = new RunHeader(root, store);
const review = new RunReview({
  section: document.getElementById("review-section"),
  state: JSON.parse(document.getElementById("review-state").textContent),
  runId,
  onOpenStep: openStep,
});
const cancelButton = new CancelButton({ form: document.getElementById("run-cancel-form"), store });
const stepList = new StepList({
  list: document.getElementById("step-list"),
  empty: document.getElementById("step-list-empty"),
  count: document.getElementById("steps-count"),
  store,
  loadSteps: () => loadSteps(),
  onOpenStep: openStep,
});
const graph = new GraphView({
  container: document.getElementById("run-graph"),
  store,
  geometry: pageState.geometry,
  fetchRound,
  onOpenStep: openStep,
  onOpenPlan: openPlan,
  onNotice: showNotice,
});
const replay = new ReplayControls({
  strip: document.getElementById("run-lineage"),
  context: JSON.parse(document.getElementById("replay-context").textContent),
  csrfToken: document.querySelector("#replay-csrf [name=csrfmiddlewaretoken]")?.value || "",
  store,
  runId,
  apiRoot,
});
const panel = new DetailsPanel({
  panel: document.getElementById("run-panel"),
  title: document.getElementById("run-panel-title"),
  body: document.getElementById("run-panel-body"),
  closeButton: document.getElementById("run-panel-close"),
  store,
  api,
  runId,
  loadSteps,
  onStepRendered: (step, body) => replay.decorateStep(step, body),
  stepSection: (step) => review.stepSection(step),
  onClose: () => {
    stepList.markCurrent(null);
    graph.select(null);
    history.replaceState(null, "", window.location.pathname + window.location.search);
  },
});
const timeline = new Timeline({
  details: document.getElementById("timeline-section"),
  canvas: document.getElementById("run-timeline"),
  marks: document.getElementById("run-timeline-marks"),
  store,
  loadSteps: () => loadSteps(),
  onOpenStep: openStep,
  onOpenPlan: openPlan,
});

function openStep(id) {
  stepList.markCurrent(id);
  graph.select(id);
  history.replaceState(null, "", `#step-${id}`);
  panel.showStep(id);
}

function openPlan(round) {
  stepList.markCurrent(null);
  graph.select(null);
  history.replaceState(null, "", `#plan-${round}`);
  panel.showPlan(round);
}

function openFromHash() {
  const match = /^#(step|plan)-(\d+)$/.exec(window.location.hash);
  if (!match) return;
  if (match[1] === "step") openStep(Number(match[2]));
  else openPlan(Number(match[2]));
}

// One button per round: the conductor's plan (raw output, parse errors) is one click away.
const roundPlans = document.getElementById("round-plans");
function renderRoundPlans() {
  const buttons = [...store.plans.values()]
    .sort((a, b) => a.round - b.round)
    .map((plan) => {
      const trouble = plan.error ? " (failed)" : plan.attempts > 1 ? ` (${plan.attempts} attempts)` : "";
      const name = plan.strategy === "conductor" ? `Conductor plan, round ${plan.round}` : `Workflow (${plan.strategy})`;
      const button = element("button", { type: "button", class: plan.error ? "plan-button plan-failed" : "plan-button" }, `${name}${trouble}`);
      button.addEventListener("click", () => openPlan(plan.round));
      return button;
    });
  roundPlans.replaceChildren(...buttons);
}

// Live events: queued on arrival, applied together once per frame (or after 100 ms in a
// background tab, where frames do not come).
let queue = [];
let flushScheduled = false;

function receive(event) {
  queue.push(event);
  if (flushScheduled) return;
  flushScheduled = true;
  const timer = setTimeout(flush, 100);
  requestAnimationFrame(() => {
    clearTimeout(timer);
    flush();
  });
}

function flush() {
  if (!flushScheduled) return;
  flushScheduled = false;
  const events = queue;
  queue = [];
  const changes = new Changes();
  for (const event of events) {
    store.apply(event, changes);
    review.apply(event);
  }
  draw(changes);
  // Review events (comments, labels...) still come once the run has finished.
  if (store.finished) live.finish({ listen: true });
}

function draw(changes) {
  if (changes.run || changes.totals) header.render();
  if (changes.run) cancelButton.render();
  replay.update(changes);
  stepList.update(changes);
  graph.update(changes);
  panel.update(changes);
  timeline.update(changes);
  if (changes.plans.size) renderRoundPlans();
}

const live = new LiveConnection({
  path: root.dataset.wsPath,
  after: pageState.seq,
  onEvent: receive,
  onState: (state) => header.setLiveState(state),
});

header.render();
cancelButton.render();
replay.renderStrip();
// The page folds the list of a long run (see the template): it is built when opened.
if (document.getElementById("steps-section").open) stepList.renderAll();
else stepList.renderLater();
renderRoundPlans();
performance.mark("run-page:list-drawn");
document.getElementById("graph-fit").addEventListener("click", () => graph.fit());
document.getElementById("graph-zoom-in").addEventListener("click", () => graph.zoomBy(1.25));
document.getElementById("graph-zoom-out").addEventListener("click", () => graph.zoomBy(0.8));
// The graph alone on the screen (a phone's way to read it); Escape or the button again leaves.
const graphSection = document.querySelector(".run-graph-section");
const fullscreenButton = document.getElementById("graph-fullscreen");
fullscreenButton.hidden = !document.fullscreenEnabled;
fullscreenButton.addEventListener("click", () => {
  if (document.fullscreenElement) document.exitFullscreen();
  else graphSection.requestFullscreen().catch(() => {});
});
document.addEventListener("fullscreenchange", () => {
  fullscreenButton.textContent = document.fullscreenElement ? "Leave full screen" : "Full screen";
  requestAnimationFrame(() => graph.fit());
});
window.addEventListener("hashchange", openFromHash);
graph.load(pageState.graph);
review.attachGraph(graph);
openFromHash();
// A finished run's execution changes no more; its socket brings only review events.
if (store.finished) live.finish({ listen: true });
else live.start();
// The timeline (below the graph) is opened, and so drawn, once the graph has its first frame.
graph.whenDrawn(() => {
  if (Math.max(store.steps.size, pageState.graph.step_count) <= 2000) document.getElementById("timeline-section").open = true;
});

// For tests and benchmarks that drive the page like a user: where is a step drawn?
window.runPage = { store, graph, live, review };
