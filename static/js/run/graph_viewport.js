// What part of a run's graph is on screen, and at what detail: fitting the graph (and the canvas's
// height to it), zooming by the buttons or the wheel, whether the user moved the view, the detail
// levels that follow the zoom (compact labels; a large graph's labels and edges only around the
// view), a large graph's hit test and its mark of the open step, and where a node is drawn on the
// page. One per Cytoscape instance; the view (graph.js) owns it.

import { canvasHeight, fitViewport, graphBounds } from "./graph_layout.js";

// A large graph's labels from this zoom on, its edges from this one (around the view only).
const LABEL_ZOOM = 0.6;
const EDGE_ZOOM = 0.3;
// Below this zoom a step's instruction cannot be read: nodes show their number, worker and
// facts in a larger type instead (a detail level that follows the zoom).
const COMPACT_ZOOM = 0.72;
const FIT_PADDING = 30;

export class GraphViewport {
  // ``large``: a large graph's ways (see graph_style.largeGraphStyle); ``onCompact(compact)``: the
  // small graph's detail level changed.
  constructor({ cy, container, geometry, large, onCompact }) {
    this.cy = cy;
    this.container = container;
    this.geometry = geometry;
    this.large = large;
    this.onCompact = onCompact;
    this.userMoved = false;
    this.compact = false;
    this.anyLabelled = false;
    this.marker = null;
    cy.on("dragpan scrollzoom pinchzoom", () => {
      this.userMoved = true;
    });
    container.addEventListener("wheel", (event) => this.zoomOnWheel(event), { passive: false });
    if (!large) {
      let compactTimer = null;
      cy.on("zoom", () => {
        clearTimeout(compactTimer);
        compactTimer = setTimeout(() => this.followZoom(), 60);
      });
    } else {
      // The open step's mark on a large graph: a frame over the canvas, not a style of the node
      // (a node's change of style has Cytoscape draw every node again).
      this.marker = document.createElement("div");
      this.marker.className = "graph-current-marker";
      this.marker.hidden = true;
      this.marker.setAttribute("aria-hidden", "true");
      container.appendChild(this.marker);
    }
  }

  // Fit the whole graph from the server's group boxes (cheaper than measuring every element);
  // the canvas first takes the height the graph needs, unless full screen or fixed.
  fit(boxes) {
    const cy = this.cy;
    // Steps drawn before the server placed them may lie outside every box.
    const points = [];
    cy.nodes(".step").forEach((node) => {
      points.push(node.position());
    });
    const bounds = graphBounds(boxes, points);
    if (!bounds) {
      cy.fit(undefined, FIT_PADDING);
      return;
    }
    this.fitCanvasHeight(bounds);
    cy.viewport(fitViewport(bounds, { width: cy.width(), height: cy.height(), padding: FIT_PADDING }));
  }

  fitCanvasHeight(bounds) {
    if (this.container.closest(":fullscreen") || this.container.dataset.fixedHeight) return;
    const wanted = canvasHeight(bounds, { width: this.cy.width(), padding: FIT_PADDING, windowHeight: window.innerHeight });
    if (Math.abs(wanted - this.container.clientHeight) < 4) return;
    this.container.style.height = `${Math.round(wanted)}px`;
    this.cy.resize();
  }

  zoomBy(factor) {
    this.userMoved = true;
    this.cy.zoom({
      level: this.cy.zoom() * factor,
      renderedPosition: { x: this.cy.width() / 2, y: this.cy.height() / 2 },
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

  // Centre a node at reading size.
  zoomTo(node) {
    this.userMoved = true;
    this.cy.zoom(1);
    this.cy.center(node);
  }

  // Centre a node if none of it is in view.
  reveal(node) {
    const box = node.renderedBoundingBox();
    const outside = box.x2 < 0 || box.y2 < 0 || box.x1 > this.cy.width() || box.y1 > this.cy.height();
    if (outside) this.cy.center(node);
  }

  // The small graph's detail level follows the zoom: compact labels where the full ones could
  // not be read.
  followZoom() {
    if (this.large) return;
    const compact = this.cy.zoom() < COMPACT_ZOOM;
    if (compact === this.compact) return;
    this.compact = compact;
    this.onCompact(compact);
    this.container.dataset.detail = compact ? "compact" : "full";
  }

  // Large graphs: labels (``labelOf(node)`` makes a step's text when first labelled) and edges
  // (from ``edgeSets``, every edge the server sent) for what is in view, once zoomed in enough to
  // see them.
  showDetail({ edgeSets, labelOf }) {
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
          if (labelled && node.data("label") == null) node.data("label", labelOf(node));
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
        for (const edges of edgeSets.values()) {
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
  placeMarker(stepId) {
    if (!this.marker) return;
    const node = stepId == null ? null : this.cy.getElementById(`s${stepId}`);
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

  // Where an element (by id) is drawn on the page, to click it as a user would; null if absent.
  clientPosition(id) {
    const element = this.cy.getElementById(id);
    if (element.empty()) return null;
    const rendered = element.renderedPosition();
    const box = this.container.getBoundingClientRect();
    return { x: box.left + rendered.x, y: box.top + rendered.y };
  }
}
