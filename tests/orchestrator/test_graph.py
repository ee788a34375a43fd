"""The run graph: server-side positions the page draws as they are."""

from __future__ import annotations

import itertools

import pytest

from orchestrator.graph import (
    COLLAPSE_ABOVE,
    LABEL_CHARS,
    NODE_HEIGHT,
    NODE_WIDTH,
    build_graph,
    short_instruction,
    step_node_id,
)


def make_run(rounds: list[list[list[int]]], *, status: str = "succeeded"):
    """Plans and steps (as wire.plan_data/step_data give them) from, per round, each step's
    reads as indices of earlier steps of that round."""
    plans, steps, next_id = [], [], 100
    for number, round_reads in enumerate(rounds):
        plans.append(
            {
                "id": number + 1,
                "round": number,
                "strategy": "conductor",
                "attempts": 1,
                "error": "",
                "accepts": not round_reads,
                "step_count": len(round_reads),
            }
        )
        ids: list[int] = []
        for index, reads in enumerate(round_reads):
            steps.append(
                {
                    "id": next_id,
                    "round": number,
                    "index": index,
                    "worker": f"w{index % 3}",
                    "instruction": f"Step {index} of round {number}\nsecond line",
                    "access": reads,
                    "reads": [ids[i] for i in reads],
                    "status": status,
                    "tokens_in": 10,
                    "tokens_out": 5,
                    "latency": 0.5,
                }
            )
            ids.append(next_id)
            next_id += 1
    return plans, steps


def wide_round(width: int) -> list[list[int]]:
    """One step, ``width`` steps reading it, one step reading them all, one reading that."""
    return [[]] + [[0]] * width + [list(range(1, width + 1))] + [[width + 1]]


def by_id(graph):
    return {node["id"]: node for node in graph["nodes"]}


def test_every_step_is_right_of_the_steps_it_reads():
    plans, steps = make_run([[[], [0], [0], [1, 2], []], wide_round(20)])
    graph = build_graph(plans=plans, steps=steps)
    nodes = by_id(graph)
    read_edges = [e for e in graph["edges"] if e["kind"] == "reads"]
    assert len(read_edges) == sum(len(s["reads"]) for s in steps)
    for edge in read_edges:
        assert nodes[edge["source"]]["x"] + NODE_WIDTH <= nodes[edge["target"]]["x"]


def test_steps_of_one_layer_do_not_overlap():
    plans, steps = make_run([wide_round(30)])
    graph = build_graph(plans=plans, steps=steps)
    places = [(n["x"], n["y"]) for n in graph["nodes"]]
    assert len(set(places)) == len(places)
    fan = sorted(n["y"] for n in graph["nodes"] if n["kind"] == "step" and 1 <= n["index"] <= 30)
    assert all(b - a >= NODE_HEIGHT for a, b in itertools.pairwise(fan))


def test_rounds_follow_one_another_down_the_page_without_overlap():
    plans, steps = make_run([[[], [0], [1]], wide_round(5), [[], []], []])
    graph = build_graph(plans=plans, steps=steps)
    groups = graph["groups"]
    assert [g["round"] for g in groups] == [0, 1, 2, 3]
    for above, below in itertools.pairwise(groups):
        assert above["y"] + above["height"] / 2 < below["y"] - below["height"] / 2
    for node in graph["nodes"]:
        box = next(g for g in groups if g["id"] == node["group"])
        assert abs(node["x"] - box["x"]) + NODE_WIDTH / 2 <= box["width"] / 2
        assert abs(node["y"] - box["y"]) + NODE_HEIGHT / 2 <= box["height"] / 2


def test_the_plan_call_opens_its_round_and_leads_to_its_first_layer():
    plans, steps = make_run([[[], [], [0, 1]], [[]]])
    graph = build_graph(plans=plans, steps=steps)
    nodes = by_id(graph)
    plan = nodes["p0"]
    assert plan["kind"] == "plan" and plan["plan"] == 1
    assert all(
        plan["x"] < n["x"] for n in graph["nodes"] if n["kind"] == "step" and n["round"] == 0
    )
    plan_edges = {(e["source"], e["target"]) for e in graph["edges"] if e["kind"] == "plan"}
    assert plan_edges == {("p0", "s100"), ("p0", "s101"), ("p1", "s103")}
    # The next round's conductor call reads the previous round's final step.
    assert {"id": "s102-p1", "source": "s102", "target": "p1", "kind": "next"} in graph["edges"]


def test_step_nodes_carry_what_the_page_labels():
    plans, steps = make_run([[[]]])
    steps[0]["instruction"] = "Work out " + "a very long instruction " * 10
    node = by_id(build_graph(plans=plans, steps=steps))["s100"]
    assert node["worker"] == "w0" and node["status"] == "succeeded"
    assert node["tokens"] == 15 and node["latency"] == 0.5
    assert node["label"].startswith("Work out a very") and node["label"].endswith("…")
    assert LABEL_CHARS - 2 <= len(node["label"]) <= LABEL_CHARS


def test_plan_status_shows_failure_and_acceptance():
    plans, steps = make_run([[[]], []])
    plans.append(
        {
            "id": 9,
            "round": 2,
            "strategy": "conductor",
            "attempts": 3,
            "error": "could not parse",
            "accepts": False,
            "step_count": 0,
        }
    )
    nodes = by_id(build_graph(plans=plans, steps=steps))
    assert (nodes["p0"]["status"], nodes["p1"]["status"], nodes["p2"]["status"]) == (
        "succeeded",
        "accepted",
        "failed",
    )


def test_plan_nodes_say_what_the_conductor_did():
    plans, steps = make_run([[[], [0]], []])
    nodes = by_id(build_graph(plans=plans, steps=steps))
    assert nodes["p0"]["label"] == "Round 0: conductor\nplans 2 steps"
    assert nodes["p1"]["label"] == "Round 1: the conductor\naccepts the answer"


def test_a_fixed_strategy_has_no_conductor_node():
    plans, steps = make_run([[[], [0]]])
    plans[0]["strategy"] = "reflection"
    graph = build_graph(plans=plans, steps=steps)
    assert [n["kind"] for n in graph["nodes"]] == ["step", "step"]
    assert {e["kind"] for e in graph["edges"]} == {"reads"}


def test_reads_of_all_earlier_steps_are_their_own_kind_of_edge():
    plans, steps = make_run([[[], [], [0, 1], [0]]])
    steps[2]["access"] = "all"
    kinds = {
        (e["source"], e["target"]): e["kind"]
        for e in build_graph(plans=plans, steps=steps)["edges"]
    }
    assert kinds[("s100", "s102")] == kinds[("s101", "s102")] == "reads_all"
    assert kinds[("s100", "s103")] == "reads"


def test_reads_of_unknown_steps_are_not_drawn():
    plans, steps = make_run([[[], [0]]])
    steps[1]["reads"].append(999)
    graph = build_graph(plans=plans, steps=steps)
    assert all(e["source"] != "s999" for e in graph["edges"])


def test_short_instruction_keeps_the_first_line():
    assert short_instruction("Add 2 and 3\nthen explain") == "Add 2 and 3"
    assert short_instruction("x" * 100, limit=10) == "x" * 9 + "…"


def test_large_runs_collapse_rounds_and_open_one_on_demand():
    rounds = [wide_round(40) for _ in range(4)]
    plans, steps = make_run(rounds)
    full = build_graph(plans=plans, steps=steps)
    collapsed = build_graph(plans=plans, steps=steps, collapse_above=100)
    assert collapsed["collapsed"] and not full["collapsed"]
    assert collapsed["nodes"] == []
    assert [g["step_count"] for g in collapsed["groups"]] == [43] * 4
    assert collapsed["groups"][2]["statuses"] == {"succeeded": 43}
    assert {(e["source"], e["target"]) for e in collapsed["edges"]} == {
        ("r0", "r1"),
        ("r1", "r2"),
        ("r2", "r3"),
    }
    opened = build_graph(plans=plans, steps=steps, round=2, collapse_above=100)
    assert not opened["collapsed"]
    assert {n["round"] for n in opened["nodes"]} == {2}
    # Same coordinates as the whole graph: opening a group moves nothing else.
    full_nodes = by_id(full)
    assert all(n == full_nodes[n["id"]] for n in opened["nodes"])
    assert opened["groups"] == [dict(g, collapsed=False) for g in collapsed["groups"][2:3]]


def test_collapse_threshold_is_a_few_thousand_steps():
    plans, steps = make_run([wide_round(COLLAPSE_ABOVE - 3)])
    assert not build_graph(plans=plans, steps=steps)["collapsed"]
    plans, steps = make_run([wide_round(COLLAPSE_ABOVE - 2)])
    assert build_graph(plans=plans, steps=steps)["collapsed"]


@pytest.mark.parametrize("shape", ["wide", "chain"])
def test_five_thousand_steps_lay_out(shape):
    # How fast is measured by bench/graph_render.py, not here.
    if shape == "wide":
        rounds = [wide_round(997) for _ in range(5)]
    else:
        rounds = [[[]] + [[i] for i in range(999)] for _ in range(5)]
    plans, steps = make_run(rounds)
    assert len(steps) == 5000
    graph = build_graph(plans=plans, steps=steps)
    assert len([n for n in graph["nodes"] if n["kind"] == "step"]) == 5000


def test_a_round_no_valid_workflow_gives_is_still_drawn():
    """A read of a later step (layered through networkx) and a cycle (one column): every step
    gets a place of its own, and no read edge is lost."""
    plans, steps = make_run([[[], [], [0]], [[], [0], [1]]])
    steps[1]["reads"] = [steps[2]["id"]]  # round 0: the second step reads the third
    steps[3]["reads"] = [steps[5]["id"]]  # round 1: a cycle through all three
    graph = build_graph(plans=plans, steps=steps)
    nodes = by_id(graph)
    node = [nodes[step_node_id(step["id"])] for step in steps]
    assert len({(n["x"], n["y"]) for n in node}) == len(steps)
    read_edges = [e for e in graph["edges"] if e["kind"] == "reads"]
    assert len(read_edges) == sum(len(s["reads"]) for s in steps)
    assert node[0]["x"] < node[2]["x"] < node[1]["x"]  # layered by what each reads
    assert len({n["x"] for n in node[3:]}) == 1  # a cycle: one column
