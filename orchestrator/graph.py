"""A run as a graph with positions: what the run page draws.

Plain dicts in (``wire.Plan`` and ``wire.GraphStep``), one ``wire.Graph`` out. The layout
is computed here, on the server, so the page only draws (Cytoscape's ``preset`` layout):

- each round is laid out as a layered DAG with networkx (``topological_generations`` for the
  layers, ``multipartite_layout`` for the placement), left to right, a step always to the right
  of every step it reads;
- the conductor's plan call of a round sits in the column before its steps;
- rounds follow one another along x, each inside its own group box.

Above ``COLLAPSE_ABOVE`` steps the whole-run graph sends each round as one collapsed group
(its box, counts by status, no step nodes); ``build_graph(..., round=N)`` then returns that
round's nodes and edges in the same coordinates, so opening a group moves nothing else.

Everything is linear in steps plus access edges (apart from networkx stacking one array per layer
inside ``multipartite_layout``, which only matters for rounds of many thousands of layers).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import networkx as nx

if TYPE_CHECKING:  # the shapes only: the layout itself needs no Django
    from orchestrator.wire import Graph, GraphStep, Plan

COLUMN_WIDTH: Final = 240.0
"""Horizontal distance between two layers, in pixels of the page's graph."""
ROW_HEIGHT: Final = 64.0
"""Vertical distance between two steps of one layer."""
ROUND_GAP: Final = 80.0
"""Extra space between the boxes of two rounds."""
GROUP_PADDING: Final = 40.0
"""Space between a round's box and the nodes inside it."""
NODE_WIDTH: Final = 180.0
NODE_HEIGHT: Final = 50.0
LABEL_CHARS: Final = 32
"""The short form of an instruction shown on a node."""
COLLAPSE_ABOVE: Final = 6000
"""Whole-run graphs with more steps than this send their rounds collapsed."""


def geometry() -> dict[str, float]:
    """The layout's measures, for a page that lays out a growing round the same way."""
    return {
        "column_width": COLUMN_WIDTH,
        "row_height": ROW_HEIGHT,
        "round_gap": ROUND_GAP,
        "group_padding": GROUP_PADDING,
        "node_width": NODE_WIDTH,
        "node_height": NODE_HEIGHT,
        "label_chars": LABEL_CHARS,
    }


def short_instruction(text: str, limit: int = LABEL_CHARS) -> str:
    """The first line of an instruction, cut to ``limit`` characters."""
    line = " ".join(text.split("\n", 1)[0].split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def step_node_id(step_id: int) -> str:
    return f"s{step_id}"


def plan_node_id(round: int) -> str:
    return f"p{round}"


def group_id(round: int) -> str:
    return f"r{round}"


def build_graph(
    *,
    plans: Sequence[Plan],
    steps: Sequence[GraphStep],
    round: int | None = None,
    collapse_above: int = COLLAPSE_ABOVE,
) -> Graph:
    """The graph of a run: ``{"nodes", "edges", "groups", "collapsed", "step_count"}``.

    With ``round`` None: the whole run, rounds collapsed when there are more than
    ``collapse_above`` steps. With ``round=N``: round N alone, expanded, in the same coordinates
    (what the page asks for when a collapsed group is opened).
    """
    steps_by_round: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for step in steps:
        steps_by_round[step["round"]].append(step)
    plans_by_round = {plan["round"]: plan for plan in plans}
    rounds = sorted(set(steps_by_round) | set(plans_by_round))

    collapsed = round is None and len(steps) > collapse_above
    graph: Graph = {
        "nodes": [],
        "edges": [],
        "groups": [],
        "collapsed": collapsed,
        "step_count": len(steps),
    }
    known_step_ids = {step["id"] for step in steps}
    left = 0.0
    previous_round: int | None = None
    previous_last_step: Any = None
    for number in rounds:
        round_steps = sorted(steps_by_round.get(number, ()), key=lambda s: s["index"])
        plan = plans_by_round.get(number)
        layout = _layout_round(round_steps, left=left, has_plan=plan is not None)
        wanted = round is None or round == number
        if wanted:
            graph["groups"].append(_group(number, round_steps, plan, layout, collapsed=collapsed))
        if wanted and not collapsed:
            _add_round(graph, number, round_steps, plan, layout, known_step_ids)
        # The conductor reads the previous round's final response before planning the next.
        if round is None and previous_round is not None:
            if collapsed:
                graph["edges"].append(_edge(group_id(previous_round), group_id(number), "next"))
            elif plan is not None and previous_last_step is not None:
                graph["edges"].append(
                    _edge(step_node_id(previous_last_step), plan_node_id(number), "next")
                )
        previous_round = number
        previous_last_step = round_steps[-1]["id"] if round_steps else previous_last_step
        left = layout["right"] + ROUND_GAP
    return graph


def _layout_round(
    steps: Sequence[Mapping[str, Any]], *, left: float, has_plan: bool
) -> dict[str, Any]:
    """Positions of one round's plan node and steps, and the round's box."""
    ids = [step["id"] for step in steps]
    in_round = set(ids)
    dag = nx.DiGraph()
    dag.add_nodes_from(ids)
    dag.add_edges_from(
        (read, step["id"]) for step in steps for read in step.get("reads") or () if read in in_round
    )
    order = {step_id: position for position, step_id in enumerate(ids)}
    try:
        generations = [
            sorted(layer, key=order.__getitem__) for layer in nx.topological_generations(dag)
        ]
    except nx.NetworkXUnfeasible:
        # A cycle cannot come from a valid workflow; draw the steps in one column rather than fail.
        generations = [ids]

    first_column = left + GROUP_PADDING + NODE_WIDTH / 2
    step_columns_start = first_column + (COLUMN_WIDTH if has_plan else 0.0)
    positions: dict[Any, tuple[float, float]] = {}
    if generations and ids:
        layers = dict(enumerate(generations))
        raw = nx.multipartite_layout(
            dag, subset_key=layers, align="vertical", scale=1, center=(0, 0)
        )
        unit = _layout_unit(raw, generations)
        # multipartite_layout scales uniformly and centres each layer on y = 0; undo the scaling
        # and give columns and rows their own spacing in pixels.
        min_x = min(float(x) for x, _ in raw.values())
        for step_id, (x, y) in raw.items():
            layer = round((float(x) - min_x) / unit)
            positions[step_id] = (
                _pixels(step_columns_start + layer * COLUMN_WIDTH),
                _pixels(float(y) / unit * ROW_HEIGHT),
            )
    layer_count = len(generations) if ids else 0
    tallest = max((len(layer) for layer in generations), default=1) if ids else 1
    last_column = step_columns_start + max(layer_count - 1, 0) * COLUMN_WIDTH
    if not ids:
        last_column = first_column
    half_height = (tallest - 1) / 2 * ROW_HEIGHT + NODE_HEIGHT / 2 + GROUP_PADDING
    right = last_column + NODE_WIDTH / 2 + GROUP_PADDING
    return {
        "positions": positions,
        "layers": {step_id: i for i, layer in enumerate(generations) for step_id in layer},
        "plan_position": (_pixels(first_column), 0),
        "box": {
            "x": _pixels((left + right) / 2),
            "y": 0,
            "width": _pixels(right - left),
            "height": _pixels(2 * half_height),
        },
        "right": right,
    }


def _pixels(value: float) -> float | int:
    """Whole pixels when the value is one (it nearly always is): shorter JSON."""
    rounded = round(value, 1)
    return int(rounded) if rounded.is_integer() else rounded


def _layout_unit(raw: Mapping[Any, Any], generations: Sequence[Sequence[Any]]) -> float:
    """The length multipartite_layout gave to one step between layers (or rows)."""
    if len(generations) > 1:
        return float(raw[generations[1][0]][0] - raw[generations[0][0]][0])
    if len(generations[0]) > 1:
        return float(raw[generations[0][1]][1] - raw[generations[0][0]][1])
    return 1.0


def _plan_status(plan: Mapping[str, Any]) -> str:
    if plan.get("error"):
        return "failed"
    return "accepted" if plan.get("accepts") else "succeeded"


def _group(
    number: int,
    steps: Sequence[Mapping[str, Any]],
    plan: Mapping[str, Any] | None,
    layout: Mapping[str, Any],
    *,
    collapsed: bool,
) -> dict[str, Any]:
    statuses: dict[str, int] = defaultdict(int)
    for step in steps:
        statuses[step["status"]] += 1
    return {
        "id": group_id(number),
        "round": number,
        "plan": plan["id"] if plan else None,
        "step_count": len(steps),
        "statuses": dict(statuses),
        "collapsed": collapsed,
        **layout["box"],
    }


def _add_round(
    graph: Graph,
    number: int,
    steps: Sequence[Mapping[str, Any]],
    plan: Mapping[str, Any] | None,
    layout: Mapping[str, Any],
    known_step_ids: set[Any],
) -> None:
    nodes, edges = graph["nodes"], graph["edges"]
    group = group_id(number)
    if plan is not None:
        x, y = layout["plan_position"]
        nodes.append(
            {
                "id": plan_node_id(number),
                "kind": "plan",
                "plan": plan["id"],
                "round": number,
                "label": f"Plan, round {number}",
                "status": _plan_status(plan),
                "attempts": plan.get("attempts", 0),
                "x": x,
                "y": y,
                "group": group,
            }
        )
    positions, layers = layout["positions"], layout["layers"]
    for step in steps:
        x, y = positions[step["id"]]
        nodes.append(
            {
                "id": step_node_id(step["id"]),
                "kind": "step",
                "step": step["id"],
                "round": number,
                "index": step["index"],
                "worker": step.get("worker", ""),
                "label": short_instruction(step.get("instruction", "")),
                "status": step["status"],
                "tokens": (step.get("tokens_in") or 0) + (step.get("tokens_out") or 0),
                "latency": step.get("latency"),
                "x": x,
                "y": y,
                "group": group,
            }
        )
        target = step_node_id(step["id"])
        for read in dict.fromkeys(step.get("reads") or ()):
            if read in known_step_ids:
                edges.append(_edge(step_node_id(read), target, "reads"))
        if plan is not None and layers.get(step["id"]) == 0:
            edges.append(_edge(plan_node_id(number), target, "plan"))


def _edge(source: str, target: str, kind: str) -> dict[str, str]:
    return {"id": f"{source}-{target}", "source": source, "target": target, "kind": kind}
