// The graph of a run, drawn with Cytoscape at the positions the server computed
// (orchestrator/graph.py), as embedded in the page. Status changes recolour nodes in place; a
// round that gains a step or a plan is laid out again here, alone and in place (graph_layout.js:
// Cytoscape's breadthfirst layout finds its layers, placed on the server's grid, whose measures
// come with the page), and the rounds after it move along if it grew. The layout is never fetched
// again. How it looks is graph_style.js; what part is in view, and at what detail, graph_viewport.js.

import cytoscape from "../../vendor/cytoscape.esm.js";
import { formatCount, planLabel, shortInstruction, stepCompactLabel, stepGraphLabel } from "./format.js";
import { edgeData, groupLabel, planStatus, roundEdges, roundLayout } from "./graph_layout.js";
import { VERDICT_MARKS, graphStyle, largeNodeColours, palette } from "./graph_style.js";
import { GraphViewport } from "./graph_viewport.js";

export { planStatus };

// Runs with more steps than this are drawn the cheap way (see graph_style.js), whether or not the
// server folds their rounds: an opened round can hold thousands of steps.
const LARGE_GRAPH = 300;

export class GraphView {
  // ``geometry``: the server's layout measures (orchestrator.graph.geometry);
  // ``fetchRound(round)``: one folded round's nodes and edges (the API's graph, or the page's form
  // of it once the store has the round's steps), when a user opens it.
  // ``extraStyle`` (Cytoscape style entries, after the graph's own) and ``stepClasses(stepId)``
  // (classes a step's node also gets) let another page mark steps (the compare page).
  constructor({ container, store, geometry, fetchRound, onOpenStep, onOpenPlan, onNotice, extraStyle = [], stepClasses = () => "" }) {
    this.container = container;
    this.store = store;
    this.geometry = geometry;
    this.fetchRound = fetchRound;
    this.onOpenStep = onOpenStep;
    this.onOpenPlan = onOpenPlan;
    this.onNotice = onNotice;
    this.extraStyle = extraStyle;
    this.stepClasses = stepClasses;
    this.cy = null;
    this.collapsed = false;
    this.groups = new Map(); // round -> group box from the server
    this.expanded = new Set(); // rounds opened on demand while the graph is collapsed
    this.viewport = null; // made with the Cytoscape instance
    this.currentStep = null;
    this.large = false;
    // Large graphs: every edge the server sent (by "all" for the whole graph, or by round for a
    // round opened on demand); only those around the view are in Cytoscape.
    this.edgeSets = new Map();
    this.drawnCallbacks = [];
  }

  // The graph embedded in the page, laid out by the server.
  load(graph) {
    try {
      this.apply(graph);
      performance.mark("run-page:graph-created");
    } catch (error) {
      this.container.dataset.state = "error";
      for (const callback of this.drawnCallbacks.splice(0)) callback();
      this.onNotice(`The graph could not be loaded (${error.message}). The step list below is complete.`);
    }
  }

  create(elements, stepCount) {
    const large = stepCount > LARGE_GRAPH;
    this.large = large;
    this.cy = cytoscape({
      container: this.container,
      // Added below, not here: elements given here go through a layout run that sets every
      // node's position again (and dirties its bounds), which the server's positions make moot.
      elements: [],
      style: [...graphStyle(palette(), { large, geometry: this.geometry }), ...this.extraStyle],
      minZoom: 0.0005,
      maxZoom: 4,
      // The wheel scrolls the page; it zooms only with a modifier key or when the graph has
      // focus (see zoomOnWheel).
      userZoomingEnabled: false,
      autoungrabify: true, // positions are the server's layered layout
      boxSelectionEnabled: false,
      selectionType: "single",
      textureOnViewport: large,
      hideEdgesOnViewport: large,
      motionBlur: false,
      autounselectify: large,
      pixelRatio: large ? 1 : "auto",
    });
    const cy = this.cy;
    this.viewport = new GraphViewport({
      cy,
      container: this.container,
      geometry: this.geometry,
      large,
      onCompact: (compact) => cy.batch(() => cy.nodes(".step, .plan").toggleClass("compact", compact)),
    });
    cy.add(elements);
    this.fitToGroups();
    // The details panel takes room from the graph when it opens: follow the container's size.
    let size = `${this.container.clientWidth}x${this.container.clientHeight}`;
    new ResizeObserver(() => {
      const now = `${this.container.clientWidth}x${this.container.clientHeight}`;
      if (now === size) return; // the first call reports the size Cytoscape started with
      size = now;
      cy.resize();
      if (!this.viewport.userMoved) this.fitToGroups();
      this.placeMarker();
    }).observe(this.container);
    cy.on("tap", "node.step", (event) => this.onOpenStep(event.target.data("step")));
    cy.on("tap", "node.plan", (event) => this.onOpenPlan(event.target.data("round")));
    cy.on("tap", "node.group.collapsed", (event) => this.expandRound(event.target.data("round")));
    if (large) {
      // Steps and plans of a large graph take no events in Cytoscape (see largeGraphStyle): a tap on
      // the background is matched to the node under it here.
      cy.on("tap", (event) => {
        if (event.target !== cy) return;
        const node = this.viewport.nodeAt(event.position);
        if (!node) return;
        if (node.data("kind") === "plan") this.onOpenPlan(node.data("round"));
        else this.onOpenStep(node.data("step"));
      });
      cy.on("viewport resize", () => this.placeMarker());
      let timer = null;
      cy.on("viewport", () => {
        clearTimeout(timer);
        timer = setTimeout(() => this.showDetailInView(), 120);
      });
    } else {
      this.viewport.followZoom();
    }
    const markReady = () => {
      performance.mark("run-page:graph-drawn");
      this.container.dataset.state = "ready";
      for (const callback of this.drawnCallbacks.splice(0)) callback();
    };
    // Ready once the first frame with the elements is on screen (an empty graph draws nothing).
    if (elements.length) cy.one("render", () => requestAnimationFrame(markReady));
    else requestAnimationFrame(markReady);
  }

  // Run ``callback`` once the graph's first frame is on screen (or its loading failed).
  whenDrawn(callback) {
    if (this.container.dataset.state === "loading") this.drawnCallbacks.push(callback);
    else callback();
  }

  get compact() {
    return this.viewport ? this.viewport.compact : false;
  }

  get userMoved() {
    return this.viewport ? this.viewport.userMoved : false;
  }

  // Put a large graph's mark of the open step over its node.
  placeMarker() {
    if (this.viewport) this.viewport.placeMarker(this.currentStep);
  }

  // Large graphs: labels and edges for what is in view, once zoomed in enough to see them.
  showDetailInView() {
    // A large graph's step gets its label's text when first labelled (see stepElement).
    if (this.viewport) this.viewport.showDetail({ edgeSets: this.edgeSets, labelOf: (node) => this.stepLabel(this.store.steps.get(node.data("step"))) });
  }

  // Fit the whole graph from the server's group boxes.
  fitToGroups() {
    this.viewport.fit([...this.groups.values()]);
  }

  // Draw the server's graph (or, with ``round``, a folded round opened on demand); nodes keep the
  // store's newer status.
  apply(graph, { round = null } = {}) {
    if (round == null) {
      this.collapsed = graph.collapsed;
      if (graph.collapsed) {
        this.onNotice(
          `This run has ${formatCount(graph.step_count)} steps, so its rounds are folded: ` +
            "click a round (or its button above) to open it. The step list below has every step.",
        );
      }
    }
    for (const group of graph.groups) this.groups.set(group.round, group);
    // Known before the elements are made: a large graph's nodes carry their colours as data.
    if (!this.cy) this.large = graph.step_count > LARGE_GRAPH;
    const elements = [];
    for (const group of graph.groups) elements.push(this.groupElement(group));
    for (const node of graph.nodes) elements.push(node.kind === "plan" ? this.planElement(node) : this.stepElement(node));
    // The page's own graph names its steps by id and position (wire.PageGraph); the steps are
    // in the store.
    const positions = graph.steps || [];
    for (let i = 0; i < positions.length; i += 3) {
      const id = positions[i];
      const step = this.store.steps.get(id);
      if (step) elements.push(this.stepElement({ id: `s${id}`, step: id, round: step.round, x: positions[i + 1], y: positions[i + 2] }));
    }
    const edges = edgeData(graph.edges);
    const large = this.large;
    if (large) this.edgeSets.set(round == null ? "all" : round, edges);
    else for (const edge of edges) elements.push({ group: "edges", data: edge });

    if (!this.cy) {
      this.create(elements, graph.step_count);
      this.showDetailInView();
      return;
    }
    const cy = this.cy;
    cy.batch(() => {
      const additions = [];
      for (const element of elements) {
        const id = element.data.id;
        const existing = cy.getElementById(id);
        if (existing.empty()) {
          additions.push(element);
          continue;
        }
        existing.data(element.data);
        if (element.position) existing.position(element.position);
        if (element.classes !== undefined) existing.classes(element.classes);
      }
      cy.add(additions);
    });
    this.showDetailInView();
  }

  groupElement(group) {
    const collapsed = group.collapsed && !this.expanded.has(group.round);
    const counts = this.store.roundCounts.get(group.round) || group.statuses;
    return {
      group: "nodes",
      data: {
        id: group.id,
        kind: "group",
        round: group.round,
        w: group.width,
        h: group.height,
        fontSize: Math.max(16, Math.min(group.width, group.height) / 10),
        label: groupLabel(group.round, counts, group.step_count, collapsed),
      },
      position: { x: group.x, y: group.y },
      classes: collapsed ? "group collapsed" : "group",
      selectable: false,
    };
  }

  planElement(node) {
    const plan = this.store.plans.get(node.round);
    const attempts = plan ? plan.attempts : node.attempts;
    const status = plan ? planStatus(plan) : node.status;
    const retries = attempts > 1 ? ` · ${attempts} attempts` : "";
    const label = plan ? planLabel(node.round, status, plan.step_count) : node.label;
    return {
      group: "nodes",
      data: { id: node.id, kind: "plan", round: node.round, status, label: `${label}${retries}`, ...this.colourData("plan", status) },
      position: { x: node.x, y: node.y },
      classes: this.compact ? "plan compact" : "plan",
    };
  }

  stepElement(node) {
    const step = this.store.steps.get(node.step);
    return {
      group: "nodes",
      data: {
        id: node.id,
        kind: "step",
        step: node.step,
        round: node.round,
        status: step ? step.status : node.status,
        // A large graph labels only the nodes in view once zoomed in, and never compactly: their
        // text is made then (showDetailInView), not for thousands of nodes up front.
        ...(this.large && step ? {} : {
          label: step ? this.stepLabel(step) : `${node.round}.${node.index} · ${node.worker}\n${node.label}\n${node.status}`,
          compact: step ? stepCompactLabel(step) : `${node.round}.${node.index} · ${node.worker}`,
        }),
        verdict: step && step.id === this.finalStepId() ? this.store.run.verdict : "",
        reused: Boolean(step && step.reused_from), // a replay's step taken from its source
        ...this.colourData("step", step ? step.status : node.status),
        ...this.ringData(step && step.id === this.finalStepId() ? this.store.run.verdict : ""),
      },
      position: { x: node.x, y: node.y },
      classes: [
        "step",
        node.step === this.currentStep && !this.large ? "current" : "",
        this.compact ? "compact" : "",
        step && step.id === this.finalStepId() ? "final" : "",
        this.stepClasses(node.step),
      ].join(" ").trim(),
    };
  }

  // A large graph's node colours for a status, as data (see largeGraphStyle); none on small graphs.
  colourData(kind, status) {
    if (!this.large) return {};
    this.colours ||= palette();
    return largeNodeColours(this.colours, kind, status);
  }

  // A large graph's ring colour of the final step, for its verdict.
  ringData(verdict) {
    if (!this.large) return {};
    this.colours ||= palette();
    return { ring: this.colours.verdicts[verdict] || this.colours.inkSoft };
  }

  // The step whose response is the run's answer (the last step of the last round), once the
  // run has finished with one; null otherwise.
  finalStepId() {
    if (!this.store.finished || !this.store.run.answer) return null;
    const last = this.store.lastStep();
    return last ? last.id : null;
  }

  stepLabel(step) {
    const label = stepGraphLabel(step);
    if (step.id !== this.finalStepId()) return label;
    const run = this.store.run;
    return `${label}\n${VERDICT_MARKS[run.verdict] || ""} ${run.verdict}: ${shortInstruction(run.answer_shown || "", 28)}`;
  }

  // Ring the final step in the run's verdict colour and say the verdict on it.
  markFinal() {
    if (!this.cy) return;
    const finalId = this.finalStepId();
    this.cy.batch(() => {
      this.cy.nodes(".final").forEach((node) => {
        node.removeClass("final");
        node.data({ verdict: "", label: this.stepLabel(this.store.steps.get(node.data("step"))), ...this.ringData("") });
      });
      if (finalId == null) return;
      const node = this.cy.getElementById(`s${finalId}`);
      if (node.empty()) return;
      node.addClass("final");
      node.data({ verdict: this.store.run.verdict, label: this.stepLabel(this.store.steps.get(finalId)), ...this.ringData(this.store.run.verdict) });
    });
  }

  // The verdict drawn on the final step, or null (for tests that read the graph as a user would).
  finalVerdict() {
    if (!this.cy) return null;
    const node = this.cy.nodes("node.step.final");
    return node.nonempty() ? node.data("verdict") : null;
  }

  // Apply one frame's changes from the store.
  update(changes) {
    if (!this.cy) return;
    const cy = this.cy;
    cy.batch(() => {
      for (const id of changes.changedSteps) {
        const step = this.store.steps.get(id);
        const node = cy.getElementById(`s${id}`);
        if (node.nonempty()) {
          node.data({
            status: step.status,
            label: this.stepLabel(step),
            compact: stepCompactLabel(step),
            reused: Boolean(step.reused_from),
            ...this.colourData("step", step.status),
          });
        }
      }
      if (changes.run) this.markFinal();
      for (const round of changes.plans) {
        const plan = this.store.plans.get(round);
        const node = cy.getElementById(`p${round}`);
        if (node.nonempty() && plan) node.data({ status: planStatus(plan), label: this.planElement({ id: `p${round}`, round }).data.label, ...this.colourData("plan", planStatus(plan)) });
      }
      if (this.collapsed) {
        for (const round of changes.rounds) {
          const group = this.groups.get(round);
          const node = cy.getElementById(`r${round}`);
          if (!group || node.empty() || !node.hasClass("collapsed")) continue;
          const counts = this.store.roundCounts.get(round);
          const stepCount = Object.values(counts).reduce((sum, count) => sum + count, 0);
          node.data("label", groupLabel(round, counts, stepCount, true));
        }
      }
    });
    if (changes.shapedRounds.size) this.layOutRounds(changes.shapedRounds);
  }

  // The rounds that gained a step or a plan (or whose reads changed), laid out again one by one in
  // increasing order, then the rounds after each moved along if its box changed width.
  layOutRounds(rounds) {
    const cy = this.cy;
    cy.batch(() => {
      for (const round of [...rounds].sort((a, b) => a - b)) this.layOutRound(round);
    });
    this.showDetailInView();
    if (!this.userMoved) this.fitToGroups();
    this.placeMarker();
  }

  layOutRound(round) {
    const cy = this.cy;
    const steps = this.store.roundSteps(round);
    const plan = this.store.plans.get(round);
    const before = [...this.groups.keys()].filter((r) => r < round);
    const previous = before.length ? this.groups.get(Math.max(...before)) : null;
    const top = previous ? previous.y + previous.height / 2 + this.geometry.round_gap : 0;
    const drawnPlan = plan && plan.strategy === "conductor" ? plan : null;
    const { positions, planPosition, box, firstLayer } = roundLayout(steps, this.geometry, { top, hasPlan: !!drawnPlan });
    const old = this.groups.get(round);
    const group = {
      ...(old || { collapsed: this.collapsed, statuses: {} }),
      id: `r${round}`,
      round,
      step_count: steps.length,
      ...box,
    };
    this.groups.set(round, group);
    const groupNode = cy.getElementById(group.id);
    const element = this.groupElement(group);
    if (groupNode.empty()) {
      cy.add(element);
      // A folded graph links its rounds' boxes.
      if (this.collapsed && previous) this.setRoundEdges(round, [{ id: `${previous.id}-${group.id}`, source: previous.id, target: group.id, kind: "next" }]);
    } else {
      groupNode.data(element.data);
      groupNode.position(element.position);
    }
    // The round's nodes and edges, when it is drawn open.
    if (!this.collapsed || this.expanded.has(round)) {
      const elements = [];
      if (drawnPlan) elements.push(this.planElement({ id: `p${round}`, round, attempts: drawnPlan.attempts, x: planPosition.x, y: planPosition.y }));
      for (const step of steps) {
        const { x, y } = positions.get(step.id);
        elements.push(this.stepElement({ id: `s${step.id}`, step: step.id, round, x, y }));
      }
      for (const element of elements) {
        const node = cy.getElementById(element.data.id);
        if (node.empty()) cy.add(element);
        else node.position(element.position);
      }
      const previousLast = this.previousLastStep(round);
      this.setRoundEdges(round, roundEdges({ round, steps, plan: drawnPlan, firstLayer, known: (id) => this.store.steps.has(id), previousLast }));
    }
    // The rounds after this one move by as much as its bottom edge did.
    const shift = old ? box.y + box.height / 2 - (old.y + old.height / 2) : 0;
    if (shift) {
      for (const [later, laterGroup] of this.groups) {
        if (later <= round) continue;
        laterGroup.y += shift;
        cy.elements("node").filter((node) => node.data("round") === later).shift({ x: 0, y: shift });
      }
    }
  }

  // The last step of the round before ``round``, when that round's steps are in the page (a
  // folded round's are not): the source of the edge to ``round``'s plan.
  previousLastStep(round) {
    const earlier = [...this.store.roundStepIds.keys(), ...this.store.folded.keys()].filter((r) => r < round);
    if (!earlier.length || this.store.folded.has(Math.max(...earlier))) return null;
    return this.store.roundSteps(Math.max(...earlier)).at(-1) || null;
  }

  // Replace the edges that end in a round (large graphs keep them aside, drawn when in view).
  setRoundEdges(round, edges) {
    const cy = this.cy;
    const inRound = (target) => cy.getElementById(target).data("round") === round;
    if (this.large) {
      for (const [key, set] of this.edgeSets) this.edgeSets.set(key, set.filter((edge) => !inRound(edge.target)));
      this.edgeSets.set(`round ${round}`, edges);
      cy.edges().filter((edge) => edge.target().data("round") === round).remove();
      return;
    }
    cy.edges().filter((edge) => edge.target().data("round") === round).remove();
    cy.add(edges.map((data) => ({ group: "edges", data })));
  }

  async expandRound(round) {
    if (!this.cy) return;
    const node = this.cy.getElementById(`r${round}`);
    if (!this.collapsed || this.expanded.has(round)) {
      if (node.nonempty()) this.cy.fit(node, 30);
      return;
    }
    this.onNotice(`Opening round ${round}…`);
    try {
      const graph = await this.fetchRound(round);
      if (graph.collapsed || !graph.groups.some((group) => group.round === round)) {
        this.onNotice(`Round ${round} could not be opened: the server sent it folded.`);
        return;
      }
      this.expanded.add(round);
      this.apply(graph, { round });
      this.viewport.userMoved = true;
      this.cy.fit(this.cy.getElementById(`r${round}`), 30);
      this.onNotice(`Round ${round} is open.`);
    } catch (error) {
      this.onNotice(`Round ${round} could not be opened (${error.message}).`);
    }
  }

  // Mark the step whose details are open, bringing it into view if it is not.
  select(stepId) {
    if (!this.cy) return;
    this.currentStep = stepId;
    if (!this.large) {
      this.cy.batch(() => {
        this.cy.nodes(".current").removeClass("current");
        if (stepId != null) this.cy.getElementById(`s${stepId}`).addClass("current");
      });
    }
    const node = stepId == null ? null : this.cy.getElementById(`s${stepId}`);
    if (node && node.nonempty()) this.viewport.reveal(node);
    this.placeMarker();
  }

  fit() {
    if (!this.cy) return;
    this.viewport.userMoved = false;
    this.fitToGroups();
  }

  zoomBy(factor) {
    if (this.cy) this.viewport.zoomBy(factor);
  }

  // Where a step's node (or a round's group) is drawn on the page, to click it as a user would.
  clientPositionOf(stepId) {
    return this.clientPosition(`s${stepId}`);
  }

  clientPositionOfGroup(round) {
    return this.clientPosition(`r${round}`);
  }

  clientPosition(id) {
    return this.cy ? this.viewport.clientPosition(id) : null;
  }

  // Centre a step at reading size.
  zoomToStep(stepId) {
    const node = this.cy && this.cy.getElementById(`s${stepId}`);
    if (!node || node.empty()) return;
    this.viewport.zoomTo(node);
  }
}
