// How a run's graph looks: the Cytoscape style of a graph (graphStyle), and the cheaper one of a
// large graph (largeGraphStyle), from the page's CSS colours (palette). No state: the view
// (graph.js) asks for a style when it makes its Cytoscape instance.

import { STEP_STATUSES, VERDICTS } from "./statuses.js";

// The marks beside a verdict's word (the page's CSS draws the same ones).
export const VERDICT_MARKS = { right: "✓", wrong: "✗", unscored: "–", failed: "!", cancelled: "⊘", pending: "…" };

function cssColour(style, name, fallback) {
  return style.getPropertyValue(name).trim() || fallback;
}

export function palette() {
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

export function graphStyle(c, { large, geometry }) {
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
// (``text``: the large graph's label style, which also leaves taps to GraphViewport.nodeAt).
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
export function largeNodeColours(c, kind, status) {
  if (kind === "plan" && (status === "accepted" || status === "succeeded")) return { fill: c.planningSoft, soft: c.planningSoft, line: c.planning };
  const colours = c.steps[status];
  return colours ? { fill: colours.line, soft: colours.soft, line: colours.line } : { fill: c.pendingSoft, soft: c.pendingSoft, line: c.pending };
}

// A large graph's own style, with less detail where none could be seen: plain rectangles filled
// with the strong status colour, labels only for nodes in view at a readable zoom (class
// "labelled", with the light fill and border), edges (haystack lines) only around the nodes in
// view once zoomed in (GraphViewport.showDetail). Drawing thousands of wrapped labels, rounded
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
      // Taps are found by GraphViewport.nodeAt, not Cytoscape: an element it hit-tests is activated on
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
    // Edges are drawn only around the nodes in view once zoomed in (GraphViewport.showDetail).
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
