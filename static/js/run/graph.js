// The graph of a run, drawn with Cytoscape at the positions the server computed
// (orchestrator/graph.py), as embedded in the page. Status changes recolour nodes in place; a
// round that gains a step or a plan is laid out again here, alone and in place: Cytoscape's
// breadthfirst layout finds its layers, placed on the server's grid (its measures come with the
// page), and the rounds after it move along if it grew. The layout is never fetched again.

import cytoscape from "../../vendor/cytoscape.esm.js";
import { formatCount, planLabel, shortInstruction, stepCompactLabel, stepGraphLabel } from "./format.js";

// The marks beside a verdict's word (the page's CSS draws the same ones).
const VERDICT_MARKS = { right: "✓", wrong: "✗", unscored: "–", failed: "!", cancelled: "⊘", pending: "…" };
import { STEP_STATUSES, VERDICTS } from "./statuses.js";

// Runs with more steps than this are drawn the cheap way (see graphStyle), whether or not the
// server folds their rounds: an opened round can hold thousands of steps.
const LARGE_GRAPH = 300;
const LABEL_ZOOM = 0.6;
const EDGE_ZOOM = 0.3;
// Below this zoom a step's instruction cannot be read: nodes show their number, worker and
// facts in a larger type instead (a detail level that follows the zoom).
const COMPACT_ZOOM = 0.72;
// The canvas's height follows the graph's shape, within these bounds (pixels).
const MIN_CANVAS_HEIGHT = 240;
const MAX_CANVAS_SHARE = 0.72; // of the window's height

function cssColour(style, name, fallback) {
  return style.getPropertyValue(name).trim() || fallback;
}

function palette() {
  const style = getComputedStyle(document.documentElement);
  const colour = (name, fallback) => cssColour(style, name, fallback);
  return {
    ink: colour("--ink", "#1b1f24"),
    readsAll: colour("--edge-reads-all", "#0f6b66"),
    inkSoft: colour("--ink-soft", "#4a5360"),
    ground: colour("--ground", "#ffffff"),
    groundSoft: colour("--ground-soft", "#f5f7f9"),
    line: colour("--line", "#d5dae0"),
    lineStrong: colour("--line-strong", "#aeb6bf"),
    accentSoft: colour("--accent-soft", "#e3ecfa"),
    focus: colour("--focus", "#f0a000"),
    pending: colour("--status-pending", "#6b7480"),
    pendingSoft: colour("--status-pending-soft", "#eef0f2"),
    // Every step status the server knows: --status-<name> and --status-<name>-soft (base.css).
    steps: Object.fromEntries(
      STEP_STATUSES.map((status) => [status, { line: colour(`--status-${status}`, "#6b7480"), soft: colour(`--status-${status}-soft`, "#eef0f2") }]),
    ),
    planning: colour("--status-planning", "#7a4fbf"),
    planningSoft: colour("--status-planning-soft", "#f1ebfa"),
    font: cssColour(style, "--font", "system-ui, sans-serif"),
    verdicts: Object.fromEntries(VERDICTS.map((verdict) => [verdict, colour(`--verdict-${verdict}`, "#58616c")])),
  };
}

// The labels' text: every node of a graph up to LARGE_GRAPH steps, a large graph's once in view.
function textStyle(c) {
  return {
    "font-family": c.font,
    color: c.ink,
    "text-wrap": "wrap",
    "text-valign": "center",
    "text-halign": "center",
    "min-zoomed-font-size": 7,
  };
}

function graphStyle(c, { large, geometry }) {
  if (large) return largeGraphStyle(c, geometry);
  const nodeWidth = geometry.node_width || 230;
  const nodeHeight = geometry.node_height || 98;
  const statusStyle = (status, border, ground) => ({
    selector: `node.step[status = "${status}"], node.plan[status = "${status}"]`,
    style: { "border-color": border, "background-color": ground },
  });
  return [
    {
      selector: "node",
      style: {
        // Round boxes (0) under edges (1) under steps and plans (2): a box's tint would
        // otherwise wash out the edges inside it.
        "z-index-compare": "manual",
        "z-index": 2,
        ...textStyle(c),
      },
    },
    {
      selector: "node.step, node.plan",
      style: {
        shape: "round-rectangle",
        width: nodeWidth,
        height: nodeHeight,
        "border-width": 2,
        label: "data(label)",
        "font-size": 13,
        "line-height": 1.25,
        "text-max-width": nodeWidth - 16,
        "background-color": c.pendingSoft,
        "border-color": c.pending,
      },
    },
    ...Object.entries(c.steps).map(([status, { line, soft }]) => statusStyle(status, line, soft)),
    { selector: 'node.step[status = "running"]', style: { "border-width": 3, "border-style": "dashed" } },
    // The run ended before these steps could end on their own: the border says so too.
    { selector: 'node.step[status = "skipped"]', style: { "border-style": "dotted", "background-opacity": 0.6 } },
    { selector: 'node.step[status = "cancelled"]', style: { "border-width": 3, "border-style": "double" } },
    {
      selector: "node.plan",
      style: { shape: "cut-rectangle", "border-style": "double", "border-width": 4, "font-weight": "bold" },
    },
    // A round where the conductor accepted the answer: no workflow, a different shape.
    { selector: 'node.plan[status = "accepted"]', style: { shape: "round-tag", "border-style": "solid", "border-width": 3 } },
    { selector: 'node.plan[status = "accepted"]', style: { "border-color": c.planning, "background-color": c.planningSoft } },
    { selector: 'node.plan[status = "succeeded"]', style: { "border-color": c.planning, "background-color": c.planningSoft } },
    // The pool's fallback stood in for a plan the conductor could not write.
    { selector: 'node.plan[status = "fallback"]', style: { "border-style": "dashed", "border-width": 3, "border-color": c.steps.failed.line, "background-color": c.planningSoft } },
    ...roundBoxRules(c, {}),
    {
      selector: "edge",
      style: {
        "z-index-compare": "manual",
        "z-index": 1,
        width: 2,
        "curve-style": "bezier",
        "line-color": c.inkSoft,
        "target-arrow-shape": "triangle",
        "target-arrow-color": c.inkSoft,
        "arrow-scale": 1.1,
      },
    },
    // A step whose access list is "all" reads every earlier step: its edges are teal and dashed
    // finely, apart from an explicit list's.
    {
      selector: 'edge[kind = "reads_all"]',
      style: { "line-color": c.readsAll, "target-arrow-color": c.readsAll, "line-style": "dashed", "line-dash-pattern": [4, 3], width: 2.5 },
    },
    { selector: 'edge[kind = "plan"]', style: { "line-style": "dashed", "line-dash-pattern": [9, 5], width: 2.5, "line-color": c.planning, "target-arrow-color": c.planning } },
    { selector: 'edge[kind = "next"]', style: { "line-style": "dotted", width: 3, "line-color": c.inkSoft, "target-arrow-color": c.inkSoft } },
    { selector: "node.step.compact", style: { label: "data(compact)", "font-size": 22, "font-weight": "bold", "text-max-width": nodeWidth - 10 } },
    { selector: "node.plan.compact", style: { "font-size": 20 } },
    // The step whose response is the run's answer: ringed in its verdict's colour.
    ...Object.entries(c.verdicts).map(([verdict, colour]) => ({
      selector: `node.step.final[verdict = "${verdict}"]`,
      style: { "outline-width": 5, "outline-color": colour, "outline-offset": 3, "outline-opacity": 1 },
    })),
    { selector: "node.step[?reused]", style: { "border-style": "dotted", "border-width": 3, "background-opacity": 0.45, "font-style": "italic" } },
    { selector: "node.current", style: { "border-color": c.focus, "border-width": 5, "border-style": "solid" } },
  ];
}

// A round's box, and the same box folded: the same on every graph but for how its label is set
// (``text``: the large graph's label style, which also leaves taps to GraphView.nodeAt).
function roundBoxRules(c, text) {
  return [
    {
      selector: "node.group",
      style: {
        shape: "round-rectangle",
        width: "data(w)",
        height: "data(h)",
        "z-index": 0, // under the nodes of its round, whenever they were added
        "background-color": c.groundSoft,
        "background-opacity": 0.7,
        "border-width": 1,
        "border-style": "dashed",
        "border-color": c.lineStrong,
        label: "data(label)",
        ...text,
        "text-valign": "top",
        "text-margin-y": -6,
        "font-size": 14,
        "font-weight": "bold",
        color: c.inkSoft,
        "min-zoomed-font-size": 4,
      },
    },
    {
      selector: "node.group.collapsed",
      style: {
        "background-color": c.accentSoft,
        "background-opacity": 1,
        "border-style": "solid",
        "border-width": 2,
        "text-valign": "center",
        "text-margin-y": 0,
        "font-size": "data(fontSize)",
        "text-max-width": "data(w)",
        "min-zoomed-font-size": 0,
        events: "yes", // a folded round opens on a tap
      },
    },
  ];
}

// The colours of a large graph's step or plan node, kept in its data (see largeGraphStyle):
// ``fill`` at the overview, ``soft`` and ``line`` (fill and border) once labelled.
function largeNodeColours(c, kind, status) {
  if (kind === "plan" && (status === "accepted" || status === "succeeded")) return { fill: c.planningSoft, soft: c.planningSoft, line: c.planning };
  const colours = c.steps[status];
  return colours ? { fill: colours.line, soft: colours.soft, line: colours.line } : { fill: c.pendingSoft, soft: c.pendingSoft, line: c.pending };
}

// A large graph's own style, with less detail where none could be seen: plain rectangles filled
// with the strong status colour, labels only for nodes in view at a readable zoom (class
// "labelled", with the light fill and border), edges (haystack lines) only around the nodes in
// view once zoomed in (GraphView.showDetailInView). Drawing thousands of wrapped labels, rounded
// corners and edges is what makes a big graph slow, and at a zoom that shows the whole graph none
// of it is readable. Cytoscape matches every rule's selector against every element when the graph
// is first drawn, so the status colours come from each node's data (largeNodeColours) in one rule
// instead of a rule per status, and the rules of compact labels and the open step's class (small
// graphs only) are left out.
function largeGraphStyle(c, geometry) {
  const nodeWidth = geometry.node_width || 230;
  const nodeHeight = geometry.node_height || 98;
  const text = textStyle(c);
  return [
    {
      selector: "node",
      // Round boxes (0) under edges (1) under steps and plans (2).
      style: { "z-index-compare": "manual", "z-index": 2 },
    },
    {
      selector: "node.step, node.plan",
      // Taps are found by GraphView.nodeAt, not Cytoscape: an element it hit-tests is activated on
      // press and released on click, each a change of style that makes it draw every node again.
      style: { shape: "rectangle", width: nodeWidth, height: nodeHeight, "border-width": 0, "background-color": "data(fill)", events: "no" },
    },
    { selector: 'node.step[status = "running"]', style: { "border-width": 3, "border-style": "dashed" } },
    { selector: 'node.step[status = "skipped"]', style: { "border-style": "dotted", "background-opacity": 0.6 } },
    { selector: 'node.step[status = "cancelled"]', style: { "border-width": 3, "border-style": "double" } },
    {
      selector: "node.plan",
      style: { shape: "cut-rectangle", "border-style": "double", "border-width": 4, "font-weight": "bold", "border-color": "data(line)" },
    },
    { selector: 'node.plan[status = "accepted"]', style: { shape: "round-tag", "border-style": "solid", "border-width": 3 } },
    ...roundBoxRules(c, { ...text, events: "no" }),
    // Edges are drawn only around the nodes in view once zoomed in (showDetailInView).
    { selector: "edge", style: { "z-index-compare": "manual", "z-index": 1, width: 1, "curve-style": "haystack", "haystack-radius": 0, "line-color": c.lineStrong } },
    { selector: 'edge[kind = "reads_all"]', style: { "line-color": c.readsAll, "line-style": "dashed", "line-dash-pattern": [4, 3], width: 2.5 } },
    { selector: 'edge[kind = "plan"]', style: { "line-style": "dashed", "line-dash-pattern": [9, 5], width: 2.5, "line-color": c.planning } },
    { selector: 'edge[kind = "next"]', style: { "line-style": "dotted", width: 3, "line-color": c.inkSoft } },
    {
      selector: "node.labelled",
      style: { label: "data(label)", ...text, "font-size": 13, "line-height": 1.25, "text-max-width": nodeWidth - 16 },
    },
    { selector: "node.step.labelled", style: { "border-width": 2, "background-color": "data(soft)", "border-color": "data(line)" } },
    // The step whose response is the run's answer: ringed in its verdict's colour.
    { selector: "node.step.final", style: { "outline-width": 5, "outline-color": "data(ring)", "outline-offset": 3, "outline-opacity": 1 } },
    { selector: "node.step[?reused]", style: { "border-style": "dotted", "border-width": 3, "background-opacity": 0.45, "font-style": "italic" } },
  ];
}

function groupLabel(round, counts, stepCount, collapsed) {
  if (!collapsed) return `Round ${round}`;
  const parts = Object.entries(counts || {})
    .filter(([, count]) => count > 0)
    .map(([status, count]) => `${formatCount(count)} ${status}`);
  return `Round ${round}: ${formatCount(stepCount)} steps\n${parts.join(" · ")}\nClick to open`;
}

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
    this.compact = false;
    this.collapsed = false;
    this.groups = new Map(); // round -> group box from the server
    this.expanded = new Set(); // rounds opened on demand while the graph is collapsed
    this.userMoved = false;
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
    cy.add(elements);
    this.fitToGroups();
    // The details panel takes room from the graph when it opens: follow the container's size.
    let size = `${this.container.clientWidth}x${this.container.clientHeight}`;
    new ResizeObserver(() => {
      const now = `${this.container.clientWidth}x${this.container.clientHeight}`;
      if (now === size) return; // the first call reports the size Cytoscape started with
      size = now;
      cy.resize();
      if (!this.userMoved) this.fitToGroups();
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
        const node = this.nodeAt(event.position);
        if (!node) return;
        if (node.data("kind") === "plan") this.onOpenPlan(node.data("round"));
        else this.onOpenStep(node.data("step"));
      });
      // The open step's mark on a large graph: a frame over the canvas, not a style of the node
      // (a node's change of style has Cytoscape draw every node again).
      this.marker = document.createElement("div");
      this.marker.className = "graph-current-marker";
      this.marker.hidden = true;
      this.marker.setAttribute("aria-hidden", "true");
      this.container.appendChild(this.marker);
      cy.on("viewport resize", () => this.placeMarker());
    }
    cy.on("dragpan scrollzoom pinchzoom", () => {
      this.userMoved = true;
    });
    this.container.addEventListener("wheel", (event) => this.zoomOnWheel(event), { passive: false });
    if (!large) {
      let compactTimer = null;
      cy.on("zoom", () => {
        clearTimeout(compactTimer);
        compactTimer = setTimeout(() => this.followZoom(), 60);
      });
      this.followZoom();
    }
    if (large) {
      let timer = null;
      cy.on("viewport", () => {
        clearTimeout(timer);
        timer = setTimeout(() => this.showDetailInView(), 120);
      });
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

  // The step or plan node drawn at a model position (a large graph's taps), or null; zoomed far
  // out, where a node is a few pixels, the nearest within a few pixels of the pointer.
  nodeAt({ x, y }) {
    const slack = 4 / this.cy.zoom();
    const halfWidth = (this.geometry.node_width || 230) / 2 + slack;
    const halfHeight = (this.geometry.node_height || 98) / 2 + slack;
    let found = null;
    let nearest = Infinity;
    this.cy.nodes().forEach((node) => {
      const kind = node.data("kind");
      if (kind !== "step" && kind !== "plan") return;
      const position = node.position();
      const dx = Math.abs(position.x - x);
      const dy = Math.abs(position.y - y);
      if (dx > halfWidth || dy > halfHeight) return;
      const distance = dx * dx + dy * dy;
      if (distance < nearest) {
        nearest = distance;
        found = node;
      }
    });
    return found;
  }

  // Put a large graph's mark of the open step over its node (hidden when there is none).
  placeMarker() {
    if (!this.marker) return;
    const node = this.currentStep == null ? null : this.cy.getElementById(`s${this.currentStep}`);
    if (!node || node.empty()) {
      this.marker.hidden = true;
      return;
    }
    const zoom = this.cy.zoom();
    const { x, y } = node.renderedPosition();
    // At least a visible square, however far the graph is zoomed out.
    const width = Math.max(14, (this.geometry.node_width || 230) * zoom + 8);
    const height = Math.max(14, (this.geometry.node_height || 98) * zoom + 8);
    Object.assign(this.marker.style, { left: `${x - width / 2}px`, top: `${y - height / 2}px`, width: `${width}px`, height: `${height}px` });
    this.marker.hidden = false;
  }

  // Large graphs: labels and edges for what is in view, once zoomed in enough to see them.
  showDetailInView() {
    if (!this.large) return;
    const cy = this.cy;
    const zoom = cy.zoom();
    const extent = cy.extent();
    const inView = (x, y) => x > extent.x1 - 120 && x < extent.x2 + 120 && y > extent.y1 - 40 && y < extent.y2 + 40;
    cy.batch(() => {
      if (zoom >= LABEL_ZOOM) {
        cy.nodes(".step, .plan").forEach((node) => {
          const { x, y } = node.position();
          const labelled = inView(x, y);
          if (labelled === node.hasClass("labelled")) return;
          // A large graph's step gets its label's text when first labelled (see stepElement).
          if (labelled && node.data("label") == null) node.data("label", this.stepLabel(this.store.steps.get(node.data("step"))));
          node.toggleClass("labelled", labelled);
        });
        this.anyLabelled = true;
      } else if (this.anyLabelled) {
        // Zoomed out: no label anywhere (and nothing to check node by node when none was).
        cy.nodes(".labelled").removeClass("labelled");
        this.anyLabelled = false;
      }
      const wanted = new Map();
      if (zoom >= EDGE_ZOOM) {
        for (const edges of this.edgeSets.values()) {
          for (const edge of edges) {
            const source = cy.getElementById(edge.source);
            const target = cy.getElementById(edge.target);
            if (source.empty() || target.empty()) continue;
            const a = source.position();
            const b = target.position();
            if (inView(a.x, a.y) || inView(b.x, b.y)) wanted.set(edge.id, edge);
          }
        }
      }
      cy.edges().forEach((edge) => {
        if (!wanted.delete(edge.id())) edge.remove();
      });
      cy.add([...wanted.values()].map((data) => ({ group: "edges", data })));
    });
  }

  // The wheel zooms the graph only when asked to (Ctrl, Alt or Meta held, or the graph focused);
  // otherwise it scrolls the page, as everywhere else on it.
  zoomOnWheel(event) {
    const focused = document.activeElement === this.container;
    if (!(event.ctrlKey || event.metaKey || event.altKey || focused)) return;
    event.preventDefault();
    this.userMoved = true;
    const box = this.container.getBoundingClientRect();
    const factor = Math.exp(-event.deltaY * (event.deltaMode === 1 ? 0.05 : 0.002));
    this.cy.zoom({ level: this.cy.zoom() * factor, renderedPosition: { x: event.clientX - box.left, y: event.clientY - box.top } });
  }

  // The detail level follows the zoom: compact labels where the full ones could not be read.
  followZoom() {
    if (!this.cy || this.large) return;
    const compact = this.cy.zoom() < COMPACT_ZOOM;
    if (compact === this.compact) return;
    this.compact = compact;
    this.cy.batch(() => this.cy.nodes(".step, .plan").toggleClass("compact", compact));
    this.container.dataset.detail = compact ? "compact" : "full";
  }

  // Fit the whole graph from the server's group boxes: cheaper than measuring every element.
  fitToGroups() {
    const boxes = [...this.groups.values()];
    if (!boxes.length) {
      this.cy.fit(undefined, 30);
      return;
    }
    let x1 = Infinity;
    let y1 = Infinity;
    let x2 = -Infinity;
    let y2 = -Infinity;
    for (const box of boxes) {
      x1 = Math.min(x1, box.x - box.width / 2);
      x2 = Math.max(x2, box.x + box.width / 2);
      y1 = Math.min(y1, box.y - box.height / 2);
      y2 = Math.max(y2, box.y + box.height / 2);
    }
    this.cy.nodes(".step").forEach((node) => {
      // Steps drawn before the server placed them may lie outside every box.
      const { x, y } = node.position();
      if (x > x2) x2 = x + 100;
      if (y < y1) y1 = y - 30;
      if (y > y2) y2 = y + 30;
    });
    const padding = 30;
    const width = this.cy.width();
    this.fitCanvasHeight(width, x2 - x1, y2 - y1 + 40, padding);
    const height = this.cy.height();
    // A small graph is shown at a reading size rather than blown up to fill the view.
    const zoom = Math.min(1.1, (width - 2 * padding) / (x2 - x1), (height - 2 * padding) / (y2 - y1 + 40));
    this.cy.viewport({
      zoom,
      pan: { x: (width - zoom * (x1 + x2)) / 2, y: (height - zoom * (y1 + y2)) / 2 },
    });
  }

  // The canvas takes the height the graph needs at the width it has (no tall empty canvas for a
  // short run, more room for a run of many rounds), within bounds; a full-screen graph keeps all.
  fitCanvasHeight(width, graphWidth, graphHeight, padding) {
    if (this.container.closest(":fullscreen") || this.container.dataset.fixedHeight) return;
    const zoom = Math.min(1.1, (width - 2 * padding) / Math.max(graphWidth, 1));
    const wanted = Math.max(MIN_CANVAS_HEIGHT, Math.min(window.innerHeight * MAX_CANVAS_SHARE, zoom * graphHeight + 2 * padding));
    if (Math.abs(wanted - this.container.clientHeight) < 4) return;
    this.container.style.height = `${Math.round(wanted)}px`;
    this.cy.resize();
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
    const edges = graph.edges.map((edge) => (Array.isArray(edge) ? { id: `${edge[0]}-${edge[1]}`, source: edge[0], target: edge[1], kind: edge[2] } : edge));
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
    const { positions, planPosition, box, firstLayer } = this.roundLayout(steps, { top, hasPlan: !!drawnPlan });
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
      this.setRoundEdges(round, this.roundEdges(round, steps, drawnPlan, firstLayer));
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

  // One round's layout on the server's grid (orchestrator/graph.py): Cytoscape's breadthfirst
  // layout (directed, maximal: every step one layer right of the last step it reads) gives each
  // step its layer; layers are columns left to right, a layer's steps rows by index centred on the round's middle (rounds stack down the page).
  roundLayout(steps, { top, hasPlan }) {
    const g = this.geometry;
    const positions = new Map();
    const layers = this.stepLayers(steps);
    const byLayer = [];
    for (const step of steps) {
      const layer = layers.get(step.id);
      (byLayer[layer] ||= []).push(step.id);
    }
    const left = 0;
    const firstColumn = left + g.group_padding + g.node_width / 2;
    const tallest = Math.max(1, ...byLayer.map((ids) => ids.length));
    const halfHeight = ((tallest - 1) / 2) * g.row_height + g.node_height / 2 + g.group_padding;
    const middle = top + halfHeight;
    const stepsStart = firstColumn + (hasPlan ? g.column_width : 0);
    byLayer.forEach((ids, layer) => {
      ids.forEach((id, row) => {
        positions.set(id, { x: stepsStart + layer * g.column_width, y: middle + (row - (ids.length - 1) / 2) * g.row_height });
      });
    });
    const lastColumn = steps.length ? stepsStart + (byLayer.length - 1) * g.column_width : firstColumn;
    const right = lastColumn + g.node_width / 2 + g.group_padding;
    return {
      positions,
      planPosition: { x: firstColumn, y: middle },
      box: { x: (left + right) / 2, y: middle, width: right - left, height: 2 * halfHeight },
      firstLayer: new Set(byLayer[0] || []),
    };
  }

  // Step id -> layer (0: reads no step of its round), from Cytoscape's breadthfirst layout, run
  // headless from one root above the round's first layer; the layout's depths are its rows.
  stepLayers(steps) {
    const layers = new Map();
    if (!steps.length) return layers;
    const index = new Map(steps.map((step) => [step.id, step.index]));
    const elements = [{ group: "nodes", data: { id: "root" } }];
    for (const step of steps) elements.push({ group: "nodes", data: { id: `s${step.id}` } });
    for (const step of steps) {
      // Reads point at earlier steps of a valid workflow; anything else is left out (no cycle).
      const reads = [...new Set(step.reads || [])].filter((read) => index.has(read) && index.get(read) < step.index);
      if (!reads.length) elements.push({ group: "edges", data: { source: "root", target: `s${step.id}` } });
      for (const read of reads) elements.push({ group: "edges", data: { source: `s${read}`, target: `s${step.id}` } });
    }
    const headless = cytoscape({ headless: true, styleEnabled: false, elements });
    const layout = headless.layout({
      name: "breadthfirst",
      directed: true,
      acyclic: true, // maximal, and a step may move down more than once
      roots: headless.getElementById("root"),
      avoidOverlap: false,
      fit: false,
      animate: false,
      boundingBox: { x1: 0, y1: 0, w: 1000, h: 1000 },
    });
    layout.run();
    const depthOf = new Map();
    headless.nodes().forEach((node) => depthOf.set(node.id(), Math.round(node.position("y") * 1000)));
    const depths = [...new Set(depthOf.values())].sort((a, b) => a - b);
    const rank = new Map(depths.map((depth, i) => [depth, i]));
    for (const step of steps) layers.set(step.id, rank.get(depthOf.get(`s${step.id}`)) - 1);
    headless.destroy();
    return layers;
  }

  // A round's edges as the server draws them: reads, the plan to the first layer, and the
  // previous round's last step to this round's plan.
  roundEdges(round, steps, plan, firstLayer) {
    const edges = [];
    const edge = (source, target, kind) => ({ id: `${source}-${target}`, source, target, kind });
    for (const step of steps) {
      const kind = step.access === "all" ? "reads_all" : "reads";
      for (const read of new Set(step.reads || [])) {
        if (this.store.steps.has(read)) edges.push(edge(`s${read}`, `s${step.id}`, kind));
      }
      if (plan && firstLayer.has(step.id)) edges.push(edge(`p${round}`, `s${step.id}`, "plan"));
    }
    const earlier = [...this.store.roundStepIds.keys(), ...this.store.folded.keys()].filter((r) => r < round);
    // (A folded round's steps are not in the page: no edge from its last step.)
    if (plan && earlier.length && !this.store.folded.has(Math.max(...earlier))) {
      const last = this.store.roundSteps(Math.max(...earlier)).at(-1);
      if (last) edges.push(edge(`s${last.id}`, `p${round}`, "next"));
    }
    return edges;
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
      this.userMoved = true;
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
    if (node && node.nonempty()) {
      const box = node.renderedBoundingBox();
      const outside = box.x2 < 0 || box.y2 < 0 || box.x1 > this.cy.width() || box.y1 > this.cy.height();
      if (outside) this.cy.center(node);
    }
    this.placeMarker();
  }

  fit() {
    if (!this.cy) return;
    this.userMoved = false;
    this.fitToGroups();
  }

  zoomBy(factor) {
    if (!this.cy) return;
    this.userMoved = true;
    this.cy.zoom({
      level: this.cy.zoom() * factor,
      renderedPosition: { x: this.cy.width() / 2, y: this.cy.height() / 2 },
    });
  }

  // Where a step's node (or a round's group) is drawn on the page, to click it as a user would.
  clientPositionOf(stepId) {
    return this.clientPosition(`s${stepId}`);
  }

  clientPositionOfGroup(round) {
    return this.clientPosition(`r${round}`);
  }

  clientPosition(id) {
    if (!this.cy) return null;
    const element = this.cy.getElementById(id);
    if (element.empty()) return null;
    const rendered = element.renderedPosition();
    const box = this.container.getBoundingClientRect();
    return { x: box.left + rendered.x, y: box.top + rendered.y };
  }

  // Centre a step at reading size.
  zoomToStep(stepId) {
    const node = this.cy && this.cy.getElementById(`s${stepId}`);
    if (!node || node.empty()) return;
    this.userMoved = true;
    this.cy.zoom(1);
    this.cy.center(node);
  }
}

export function planStatus(plan) {
  if (plan.fallback) return "fallback";
  if (plan.error) return "failed";
  return plan.accepts ? "accepted" : "succeeded";
}
