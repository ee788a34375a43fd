// Where a run's graph puts things, as pure functions of the steps and the server's layout measures
// (orchestrator/graph.py's geometry): a round's layers, its nodes' positions and box, its edges,
// a folded round's label, a graph's bounds and the zoom and pan that fit them. Nothing here reads
// the page or keeps state; the view (graph.js) applies what these return.

import cytoscape from "../../vendor/cytoscape.esm.js";
import { formatCount } from "./format.js";

// The canvas's height follows the graph's shape, within these bounds (pixels).
const MIN_CANVAS_HEIGHT = 240;
const MAX_CANVAS_SHARE = 0.72; // of the window's height
// A small graph is shown at a reading size rather than blown up to fill the view.
const MAX_FIT_ZOOM = 1.1;
// Height fitted beyond the bounds (model units), so that the last round's box is not flush with
// the canvas's bottom edge.
const BOTTOM_ROOM = 40;

export function planStatus(plan) {
  if (plan.fallback) return "fallback";
  if (plan.error) return "failed";
  return plan.accepts ? "accepted" : "succeeded";
}

// A round box's label: its number, and once folded its steps' counts by status.
export function groupLabel(round, counts, stepCount, collapsed) {
  if (!collapsed) return `Round ${round}`;
  const parts = Object.entries(counts || {})
    .filter(([, count]) => count > 0)
    .map(([status, count]) => `${formatCount(count)} ${status}`);
  return `Round ${round}: ${formatCount(stepCount)} steps\n${parts.join(" · ")}\nClick to open`;
}

// The server's edges (wire.PageGraph sends [source, target, kind] triples) as Cytoscape data.
export function edgeData(edges) {
  return edges.map((edge) => (Array.isArray(edge) ? { id: `${edge[0]}-${edge[1]}`, source: edge[0], target: edge[1], kind: edge[2] } : edge));
}

// Step id -> layer (0: reads no step of its round), from Cytoscape's breadthfirst layout, run
// headless from one root above the round's first layer; the layout's depths are its rows.
export function stepLayers(steps) {
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

// One round's layout on the server's grid (orchestrator/graph.py): each step in its layer
// (stepLayers: every step one layer right of the last step it reads); layers are columns left to
// right, a layer's steps rows by index centred on the round's middle (rounds stack down the page).
// ``top``: where the round's box starts; ``hasPlan``: a conductor's plan node comes first.
export function roundLayout(steps, geometry, { top, hasPlan }) {
  const g = geometry;
  const positions = new Map();
  const layers = stepLayers(steps);
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

// A round's edges as the server draws them: reads (of steps ``known`` says are drawn), the plan to
// the first layer, and ``previousLast`` (the previous round's last step, if drawn) to the plan.
export function roundEdges({ round, steps, plan, firstLayer, known, previousLast }) {
  const edges = [];
  const edge = (source, target, kind) => ({ id: `${source}-${target}`, source, target, kind });
  for (const step of steps) {
    const kind = step.access === "all" ? "reads_all" : "reads";
    for (const read of new Set(step.reads || [])) {
      if (known(read)) edges.push(edge(`s${read}`, `s${step.id}`, kind));
    }
    if (plan && firstLayer.has(step.id)) edges.push(edge(`p${round}`, `s${step.id}`, "plan"));
  }
  if (plan && previousLast) edges.push(edge(`s${previousLast.id}`, `p${round}`, "next"));
  return edges;
}

// The box around the server's group boxes, widened to the steps (``points``, model positions)
// drawn before the server placed them, which may lie outside every box; null without boxes.
export function graphBounds(boxes, points) {
  if (!boxes.length) return null;
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
  for (const { x, y } of points) {
    if (x > x2) x2 = x + 100;
    if (y < y1) y1 = y - 30;
    if (y > y2) y2 = y + 30;
  }
  return { x1, y1, x2, y2 };
}

// The zoom and pan that show ``bounds`` whole in a ``width`` × ``height`` canvas.
export function fitViewport(bounds, { width, height, padding }) {
  const { x1, y1, x2, y2 } = bounds;
  const zoom = Math.min(MAX_FIT_ZOOM, (width - 2 * padding) / (x2 - x1), (height - 2 * padding) / (y2 - y1 + BOTTOM_ROOM));
  return { zoom, pan: { x: (width - zoom * (x1 + x2)) / 2, y: (height - zoom * (y1 + y2)) / 2 } };
}

// The canvas height a graph of ``bounds`` wants at the width it has (no tall empty canvas for a
// short run, more room for a run of many rounds), within bounds of the window's height.
export function canvasHeight(bounds, { width, padding, windowHeight }) {
  const zoom = Math.min(MAX_FIT_ZOOM, (width - 2 * padding) / Math.max(bounds.x2 - bounds.x1, 1));
  return Math.max(MIN_CANVAS_HEIGHT, Math.min(windowHeight * MAX_CANVAS_SHARE, zoom * (bounds.y2 - bounds.y1 + BOTTOM_ROOM) + 2 * padding));
}
