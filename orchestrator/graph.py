"""A run as a graph with positions: what the run page draws.

Plain dicts in (``wire.Plan`` and ``wire.GraphStep``), one ``wire.Graph`` out. The layout
is computed here, on the server, so the page only draws (Cytoscape's ``preset`` layout):

- each round is laid out as a layered DAG, left to right: a step's layer is one more than the
  last layer it reads (networkx's ``topological_generations``; one pass in order for a valid
  workflow, networkx itself for anything else), a layer's steps in rows centred on the round's
  middle (networkx's ``multipartite_layout``, computed directly);
- the conductor's plan call of a round sits in the column before its steps (a fixed strategy's
  rounds have no plan node: no conductor ran);
- rounds follow one another down the page, each inside its own group box (a wide canvas then
  fits a run of a few rounds at a size where labels can be read).

Above ``COLLAPSE_ABOVE`` steps the whole-run graph sends each round as one collapsed group
(its box, counts by status, no step nodes; no step is placed); ``build_graph(..., round=N)``
then returns that round's nodes and edges in the same coordinates, so opening a group moves
nothing else.

Everything is linear in steps plus access edges.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the shapes only: the layout itself needs no Django
    from orchestrator.wire import Graph, GraphStep, Plan

COLUMN_WIDTH: Final = 280.0
"""Horizontal distance between two layers, in pixels of the page's graph."""
ROW_HEIGHT: Final = 118.0
"""Vertical distance between two steps of one layer."""
ROUND_GAP: Final = 60.0
"""Extra space between the boxes of two rounds."""
GROUP_PADDING: Final = 34.0
"""Space between a round's box and the nodes inside it."""
NODE_WIDTH: Final = 230.0
NODE_HEIGHT: Final = 98.0
LABEL_CHARS: Final = 58
"""The short form of an instruction shown on a node (wrapped on two lines)."""
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
    top = 0.0
    previous_round: int | None = None
    previous_last_step: Any = None
    for number in rounds:
        round_steps = sorted(steps_by_round.get(number, ()), key=lambda s: s["index"])
        plan = plans_by_round.get(number)
        # Only the conductor plans: a fixed strategy's workflow is drawn without a plan node.
        if plan is not None and plan.get("strategy") != "conductor":
            plan = None
        wanted = round is None or round == number
        layout = _layout_round(
            round_steps, top=top, has_plan=plan is not None, positions=wanted and not collapsed
        )
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
        top = layout["bottom"] + ROUND_GAP
    return graph


def _layout_round(
    steps: Sequence[Mapping[str, Any]], *, top: float, has_plan: bool, positions: bool = True
) -> dict[str, Any]:
    """Positions of one round's plan node and steps, and the round's box (the box alone without
    ``positions``: a folded round draws no step)."""
    ids = [step["id"] for step in steps]
    generations = _generations(steps, ids)
    left = 0.0
    first_column = left + GROUP_PADDING + NODE_WIDTH / 2
    step_columns_start = first_column + (COLUMN_WIDTH if has_plan else 0.0)
    tallest = max((len(layer) for layer in generations), default=1) if ids else 1
    half_height = (tallest - 1) / 2 * ROW_HEIGHT + NODE_HEIGHT / 2 + GROUP_PADDING
    middle = top + half_height
    placed: dict[Any, tuple[float, float]] = {}
    if positions and ids:
        # Layers are columns left to right; a layer's steps are rows in order, centred on the
        # round's middle (what networkx's multipartite layout gives, without its arrays).
        for layer, layer_ids in enumerate(generations):
            x = _pixels(step_columns_start + layer * COLUMN_WIDTH)
            offset = (len(layer_ids) - 1) / 2
            for row, step_id in enumerate(layer_ids):
                placed[step_id] = (x, _pixels(middle + (row - offset) * ROW_HEIGHT))
    layer_count = len(generations) if ids else 0
    last_column = step_columns_start + max(layer_count - 1, 0) * COLUMN_WIDTH
    if not ids:
        last_column = first_column
    right = last_column + NODE_WIDTH / 2 + GROUP_PADDING
    return {
        "positions": placed,
        "layers": {step_id: i for i, layer in enumerate(generations) for step_id in layer},
        "plan_position": (_pixels(first_column), _pixels(middle)),
        "box": {
            "x": _pixels((left + right) / 2),
            "y": _pixels(middle),
            "width": _pixels(right - left),
            "height": _pixels(2 * half_height),
        },
        "bottom": top + 2 * half_height,
    }


def _generations(steps: Sequence[Mapping[str, Any]], ids: list[Any]) -> list[list[Any]]:
    """A round's steps in layers (networkx's ``topological_generations``: each step one layer
    right of the last step of its round it reads), each layer in the steps' order.

    A valid workflow's steps read earlier steps only, so one pass in order gives each step its
    layer; anything else (a read of a later step, a cycle) goes through networkx."""
    layer_of: dict[Any, int] = {}
    in_round = set(ids)
    for step in steps:
        layer = 0
        for read in step.get("reads") or ():
            if read not in in_round:
                continue
            before = layer_of.get(read)
            if before is None:
                return _generations_by_networkx(steps, ids)
            layer = max(layer, before + 1)
        layer_of[step["id"]] = layer
    generations: list[list[Any]] = [[] for _ in range(max(layer_of.values(), default=-1) + 1)]
    for step_id in ids:
        generations[layer_of[step_id]].append(step_id)
    return generations


def _generations_by_networkx(steps: Sequence[Mapping[str, Any]], ids: list[Any]) -> list[list[Any]]:
    # Loaded here, for the rare round no valid workflow gives: networkx scans the installed
    # packages' entry points as it loads, which holds the interpreter for most of a second.
    import networkx as nx

    in_round = set(ids)
    dag = nx.DiGraph()
    dag.add_nodes_from(ids)
    dag.add_edges_from(
        (read, step["id"]) for step in steps for read in step.get("reads") or () if read in in_round
    )
    order = {step_id: position for position, step_id in enumerate(ids)}
    try:
        return [sorted(layer, key=order.__getitem__) for layer in nx.topological_generations(dag)]
    except nx.NetworkXUnfeasible:
        # A cycle cannot come from a valid workflow; draw the steps in one column rather than fail.
        return [ids]


def _pixels(value: float) -> float | int:
    """Whole pixels when the value is one (it nearly always is): shorter JSON."""
    rounded = round(value, 1)
    return int(rounded) if rounded.is_integer() else rounded


def _plan_status(plan: Mapping[str, Any]) -> str:
    if plan.get("fallback"):
        return "fallback"
    if plan.get("error"):
        return "failed"
    return "accepted" if plan.get("accepts") else "succeeded"


def plan_label(number: int, status: str, step_count: int) -> str:
    """What a plan node says: the conductor's call of a round, and what came of it."""
    if status == "accepted":
        return f"Round {number}: the conductor\naccepts the answer"
    if status == "failed":
        return f"Round {number}: the conductor\nwrote no usable plan"
    if status == "fallback":
        return f"Round {number}: no usable plan;\nfallback, not the conductor's"
    steps = "1 step" if step_count == 1 else f"{step_count} steps"
    return f"Round {number}: conductor\nplans {steps}"


def _group(
    number: int,
    steps: Sequence[Mapping[str, Any]],
    plan: Mapping[str, Any] | None,
    layout: Mapping[str, Any],
    *,
    collapsed: bool,
) -> dict[str, Any]:
    statuses = Counter(step["status"] for step in steps)
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
                "label": plan_label(number, _plan_status(plan), plan.get("step_count", 0)),
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
        # "all" and an explicit list are drawn apart: one reads whatever came before.
        kind = "reads_all" if step.get("access") == "all" else "reads"
        for read in dict.fromkeys(step.get("reads") or ()):
            if read in known_step_ids:
                edges.append(_edge(step_node_id(read), target, kind))
        if plan is not None and layers.get(step["id"]) == 0:
            edges.append(_edge(plan_node_id(number), target, "plan"))


def _edge(source: str, target: str, kind: str) -> dict[str, str]:
    return {"id": f"{source}-{target}", "source": source, "target": target, "kind": kind}
