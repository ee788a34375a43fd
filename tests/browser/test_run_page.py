"""The run page in a real browser: live updates, the details panel, safe Markdown, reconnects.

Live tests use a server of their own whose simulated workers take about a second per step, so a
run is still going while the page watches it (the shared server's workers answer in
milliseconds). The step list (``#step-list li[data-step-id][data-status]``) is the graph's
accessible twin: what a screen reader walks is what these tests read.
"""

from __future__ import annotations

import json
import re

import pytest

from harness.server import RunMaker, wait_for_js
from tests.browser.pages import record_frames, step_states

pytestmark = pytest.mark.browser

PAYLOAD = '<script>window.__pwned=1</script> and <img src=x onerror="window.__pwned=1"> **bold**'


def wait_until_finished(page, timeout: float = 60_000) -> None:
    page.wait_for_selector("#live-indicator[data-state=finished]", timeout=timeout)


def api_steps(page, base_url: str, run_id: int) -> list[dict]:
    response = page.request.get(f"{base_url}/api/runs/{run_id}/")
    assert response.ok, response.text()
    return response.json()["steps"]


def test_a_run_started_from_the_form_unfolds_live(slow_page, slow_server):
    page = slow_page
    frames = record_frames(page)
    page.goto("/")
    page.fill("#new-run-input", "What is 17 * 23 + 4?")
    with page.expect_navigation(url=re.compile(r"/runs/\d+/$")):
        page.click("#new-run-submit")
    run_id = int(re.search(r"/runs/(\d+)/", page.url).group(1))
    page.wait_for_selector("#live-indicator[data-state=live]")
    # Seen while the run goes on: at least one step not finished yet.
    page.wait_for_selector("#step-list li[data-status=pending], #step-list li[data-status=running]")

    wait_until_finished(page)
    steps = api_steps(page, slow_server.url, run_id)
    states = step_states(page)
    assert [int(step_id) for step_id, _ in states] == [s["id"] for s in steps]
    assert {status for _, status in states} == {"succeeded"}
    assert page.text_content("#run-status") == "succeeded"
    # The page learnt of it over the websocket, not by reloading.
    assert any(frame["type"] == "step.finished" for frame in frames)
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    # The graph drew one node per step, in the finished colour.
    node_states = page.evaluate(
        "window.runPage.graph.cy.nodes('.step').map((n) => [n.data('step'), n.data('status')])"
    )
    assert sorted(node_states) == sorted([s["id"], "succeeded"] for s in steps)
    assert page.text_content("#total-model-calls") != "0"


def test_clicking_a_node_shows_the_exact_messages(browser_page, make_run, live_server_url):
    page = browser_page
    question = "What is 12 * 12 - 4?"
    run_id = make_run(question)
    make_run.wait(run_id)
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#run-graph[data-state=ready]")
    first = api_steps(page, live_server_url, run_id)[0]

    point = page.evaluate(f"window.runPage.graph.clientPositionOf({first['id']})")
    page.mouse.click(point["x"], point["y"])

    panel = page.locator("#run-panel")
    panel.locator(".messages").wait_for()
    assert page.text_content("#run-panel-title").startswith("Step 0.0")
    user_messages = panel.locator(".message-user .message-content").all_text_contents()
    assert any(question in text for text in user_messages)
    assert first["instruction"] in panel.inner_text()
    assert panel.locator(".response").inner_text().strip()
    assert (
        page.get_attribute(f"#step-list li[data-step-id='{first['id']}']", "aria-current") == "true"
    )


def test_the_step_list_is_walked_with_the_keyboard(browser_page, make_run):
    page = browser_page
    run_id = make_run("What is 9 + 10?")
    make_run.wait(run_id)
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#run-graph[data-state=ready]")
    items = step_states(page)
    assert len(items) >= 2, "the demo conductor writes at least two steps for arithmetic"

    page.focus("#step-list li:first-child button")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.locator("#run-panel .messages").wait_for()
    assert page.text_content("#run-panel-title").startswith("Step 0.1")
    page.keyboard.press("Escape")
    assert page.is_hidden("#run-panel")
    # Focus went back to where it was.
    assert page.evaluate("document.activeElement.closest('li').dataset.stepId") == str(items[1][0])


def store_hostile_run(server) -> tuple[int, int]:
    """A finished run whose answer, step response and plan output try to run script."""
    output = server.shell(
        "from django.utils import timezone\n"
        "from orchestrator.models import Plan, Pool, Run, Step\n"
        f"payload = {PAYLOAD!r}\n"
        "pool = Pool.objects.order_by('pk').first()\n"
        "now = timezone.now()\n"
        "run = Run.objects.create(project=pool.project, pool=pool, input='Say hello',"
        " status='succeeded', answer=payload, step_count=1, started_at=now, finished_at=now)\n"
        "plan = Plan.objects.create(run=run, round=0, strategy='conductor',"
        " attempts=[{'raw': payload, 'error': payload, 'tokens_in': 10, 'tokens_out': 5,"
        " 'cost': 0.0, 'latency': 0.1}],"
        " workflow=[{'worker': 0, 'instruction': 'Say hello', 'access': []}])\n"
        "step = Step.objects.create(run=run, plan=plan, round=0, index=0, instruction='Say hello',"
        " worker_index=0, worker_name='Hostile', model='sim/hostile', status='succeeded',"
        " messages=[{'role': 'user', 'content': payload}], response=payload,"
        " started_at=now, finished_at=now)\n"
        "print(run.pk, step.pk)\n"
    )
    run_id, step_id = output.split()[-2:]
    return int(run_id), int(step_id)


def test_model_output_cannot_run_script(browser_page, live_server):
    page = browser_page
    run_id, step_id = store_hostile_run(live_server)
    page.goto(f"/runs/{run_id}/#step-{step_id}")
    response = page.locator("#run-panel .response")
    response.wait_for()

    # The tags show as text; Markdown around them still renders.
    assert "<script>window.__pwned=1</script>" in response.inner_text()
    assert '<img src=x onerror="window.__pwned=1">' in response.inner_text()
    assert response.locator("strong").inner_text() == "bold"
    for where in ("#run-panel", "#run-answer"):
        assert page.locator(f"{where} script, {where} img").count() == 0
    assert "<script>" in page.inner_text("#run-answer")
    assert "<script>" in page.inner_text("#run-panel .message-content")

    page.click("#round-plans button")
    page.locator("#run-panel .raw-output").wait_for()
    assert "<script>" in page.inner_text("#run-panel .raw-output")
    assert page.locator("#run-panel script, #run-panel img").count() == 0
    page.wait_for_timeout(200)  # an onerror would have fired by now
    assert page.evaluate("window.__pwned") is None


def test_a_dropped_socket_resumes_from_the_last_seq(slow_page, slow_server):
    page = slow_page
    connections: list[dict] = []

    lost: list[dict] = []

    def route(socket):
        # The network between page and server. It drops once, just as the first step finishes:
        # that event never reaches the page.
        server = socket.connect_to_server()
        connection = {"url": socket.url, "events": []}
        connections.append(connection)

        def from_server(message):
            event = json.loads(message)
            if len(connections) == 1 and event["type"] == "step.finished":
                lost.append(event)
                socket.close()
                server.close()
                return
            connection["events"].append(event)
            socket.send(message)

        server.on_message(from_server)

    page.route_web_socket(re.compile(r"/ws/runs/\d+/"), route)
    run_id = RunMaker(page, slow_server)("What is 101 * 3 - 7?")
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#live-indicator[data-state=reconnecting]")
    wait_until_finished(page)

    assert len(connections) >= 2
    lost_seq = lost[0]["seq"]
    assert f"after={lost_seq - 1}" in connections[1]["url"]
    replayed = connections[1]["events"]
    assert replayed and replayed[0]["seq"] == lost_seq, "the event lost in the drop is sent again"
    assert replayed[0]["type"] == "step.finished"
    assert (
        page.get_attribute(f"#step-list li[data-step-id='{lost[0]['step']['id']}']", "data-status")
        == "succeeded"
    )

    steps = api_steps(page, slow_server.url, run_id)
    states = step_states(page)
    ids = [int(step_id) for step_id, _ in states]
    assert len(ids) == len(set(ids)), "no step is listed twice"
    assert ids == [s["id"] for s in steps]
    assert {status for _, status in states} == {"succeeded"}
    assert page.evaluate("window.runPage.graph.cy.nodes('.step').length") == len(steps)


def store_large_run(server, *, rounds: int, per_round: int) -> int:
    """A finished run big enough for the graph to fold its rounds (steps read nothing)."""
    output = server.shell(
        "from django.utils import timezone\n"
        "from orchestrator.models import Plan, Pool, Run, Step\n"
        "pool = Pool.objects.order_by('pk').first()\n"
        "now = timezone.now()\n"
        f"run = Run.objects.create(project=pool.project, pool=pool, input='Many steps',"
        f" status='succeeded', step_count={rounds * per_round}, started_at=now, finished_at=now)\n"
        f"for number in range({rounds}):\n"
        "    plan = Plan.objects.create(run=run, round=number, strategy='conductor', workflow=[])\n"
        "    Step.objects.bulk_create([Step(run=run, plan=plan, round=number, index=i,"
        " instruction=f'Part {i}', worker_index=0, worker_name='Many', model='sim/many',"
        " status='succeeded', response=f'Result {i}', started_at=now, finished_at=now)"
        f" for i in range({per_round})], batch_size=2000)\n"
        "print(run.pk)\n"
    )
    return int(output.split()[-1])


def test_a_huge_run_folds_its_rounds_and_opens_one_on_demand(browser_page, live_server):
    from orchestrator.graph import COLLAPSE_ABOVE

    page = browser_page
    per_round = COLLAPSE_ABOVE // 2 + 1
    run_id = store_large_run(live_server, rounds=2, per_round=per_round)
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#run-graph[data-state=ready]", timeout=30_000)
    assert "folded" in page.inner_text("#graph-notice")
    assert page.evaluate("window.runPage.graph.cy.nodes('.step').length") == 0

    point = page.evaluate("window.runPage.graph.clientPositionOfGroup(1)")
    page.mouse.click(point["x"], point["y"])
    wait_for_js(page, "window.runPage.graph.expanded.has(1)", timeout=30_000)
    rounds = page.evaluate(
        "[...new Set(window.runPage.graph.cy.nodes('.step').map((n) => n.data('round')))]"
    )
    assert rounds == [1]
    assert page.evaluate("window.runPage.graph.cy.nodes('.step').length") == per_round

    step_id = page.evaluate(
        "window.runPage.store.orderedSteps().find((s) => s.round === 1 && s.index === 0).id"
    )
    # A round of thousands of steps in one layer is a tall column: zoom in on the step first.
    page.evaluate(f"window.runPage.graph.zoomToStep({step_id})")
    point = page.evaluate(f"window.runPage.graph.clientPositionOf({step_id})")
    page.mouse.click(point["x"], point["y"])
    page.locator("#run-panel .response").wait_for()
    assert page.text_content("#run-panel-title").startswith("Step 1.0")

    # Every step is still in the accessible list (folded for a run this long; built when opened),
    # the open step marked in it.
    assert not page.evaluate("document.getElementById('steps-section').open")
    page.click("#steps-section summary")
    page.wait_for_selector("#step-list li")
    assert page.locator("#step-list li").count() == 2 * per_round
    current = page.get_attribute("#step-list li[aria-current=true]", "data-step-id")
    assert current == str(step_id)


# The API's steps are a table (columns, then a row per step): one step of it as an object.
STEP_AT = (
    "((i) => (body) =>"
    " Object.fromEntries(body.steps.columns.map((key, k) => [key, body.steps.rows[i][k]])))"
)


def test_a_folded_rounds_steps_come_when_it_opens_after_its_live_changes(browser_page, live_server):
    from orchestrator.graph import COLLAPSE_ABOVE

    page = browser_page
    per_round = COLLAPSE_ABOVE // 2 + 1
    run_id = store_large_run(live_server, rounds=2, per_round=per_round)
    sockets = []

    def route(socket):
        socket.connect_to_server()  # the server's events pass through as they are
        sockets.append(socket)

    page.route_web_socket(re.compile(r"/ws/runs/\d+/"), route)
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#run-graph[data-state=ready]", timeout=30_000)
    # The page holds the rounds' boxes and counts, not the steps of a finished folded run.
    assert page.evaluate("window.runPage.store.steps.size") == 0
    wait_for_js(page, "document.getElementById('live-indicator').dataset.state === 'finished'")
    step = page.evaluate(
        f"fetch('/api/runs/{run_id}/steps/?round=0').then((r) => r.json()).then({STEP_AT}(3))"
    )
    seq = page.evaluate("window.runPage.live.lastSeq")
    # A live event on a step of the folded round 0 (as a resumed run would send): its box counts it.
    failed = {**step, "status": "failed", "error": "The worker stopped."}
    sockets[0].send(
        json.dumps({"type": "step.failed", "run": run_id, "seq": seq + 1, "step": failed})
    )
    wait_for_js(
        page, "window.runPage.graph.cy.getElementById('r0').data('label').includes('1 failed')"
    )
    label = page.evaluate("window.runPage.graph.cy.getElementById('r0').data('label')")
    assert f"{per_round - 1:,} succeeded" in label

    # Opened, the round's steps are fetched (current to an older seq): the live change stays.
    point = page.evaluate("window.runPage.graph.clientPositionOfGroup(0)")
    page.mouse.click(point["x"], point["y"])
    wait_for_js(page, "window.runPage.graph.expanded.has(0)", timeout=30_000)
    assert page.evaluate(f"window.runPage.store.steps.get({step['id']}).status") == "failed"
    assert page.evaluate(
        f"window.runPage.graph.cy.getElementById('s{step['id']}').data('status')"
    ) == ("failed")
    assert page.evaluate("window.runPage.store.steps.size") == per_round
    # A link to a step of the round still folded opens it (its round's steps fetched first).
    other = page.evaluate(
        f"fetch('/api/runs/{run_id}/steps/?round=1').then((r) => r.json()).then({STEP_AT}(2))"
    )
    page.evaluate(f"window.location.hash = '#step-{other['id']}'")
    page.locator("#run-panel .response").wait_for()
    assert page.text_content("#run-panel-title").startswith("Step 1.2")
    # The list has every step, the live change in it.
    page.click("#steps-section summary")
    page.wait_for_selector("#step-list li")
    assert page.locator("#step-list li").count() == 2 * per_round
    assert page.get_attribute(f"#step-list li[data-step-id='{step['id']}']", "data-status") == (
        "failed"
    )


STATUS_CYCLE = ("succeeded", "failed", "cancelled")


def drawn_colours(page, round_: int) -> dict[str, list[str]]:
    """Status -> the distinct fill colours drawn for the steps of a round, as rgb() text."""
    return page.evaluate(
        "(round) => { const out = {}; window.runPage.graph.cy.nodes('.step')"
        ".filter((n) => n.data('round') === round).forEach((n) => {"
        " const colours = (out[n.data('status')] ||= []);"
        " const colour = n.style('background-color').replace(/ /g, '');"
        " if (!colours.includes(colour)) colours.push(colour); }); return out; }",
        round_,
    )


def legend_colour(page, status: str) -> str:
    """The page's colour for a status (the one its badges and legend use), as rgb() text."""
    return page.evaluate(
        "(status) => { const probe = document.createElement('span');"
        " probe.style.color = `var(--status-${status})`; document.body.append(probe);"
        " const colour = getComputedStyle(probe).color.replace(/ /g, ''); probe.remove();"
        " return colour; }",
        status,
    )


def test_a_large_graph_colours_each_step_by_its_status_and_follows_changes(
    browser_page, live_server
):
    page = browser_page
    output = live_server.shell(
        "from django.utils import timezone\n"
        "from orchestrator.models import Plan, Pool, Run, Step\n"
        "pool = Pool.objects.order_by('pk').first()\n"
        "now = timezone.now()\n"
        "run = Run.objects.create(project=pool.project, pool=pool, input='Many steps',"
        " status='failed', step_count=400, started_at=now, finished_at=now)\n"
        "for number in range(2):\n"
        "    plan = Plan.objects.create(run=run, round=number, strategy='conductor', workflow=[])\n"
        "    Step.objects.bulk_create([Step(run=run, plan=plan, round=number, index=i,"
        " instruction=f'Part {i}', worker_index=0, worker_name='Many', model='sim/many',"
        f" status={STATUS_CYCLE!r}[i % 3], response=f'Result {{i}}', started_at=now,"
        " finished_at=now) for i in range(200)])\n"
        "print(run.pk)\n"
    )
    run_id = int(output.split()[-1])
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#run-graph[data-state=ready]", timeout=30_000)
    colours = drawn_colours(page, 0)
    assert set(colours) == set(STATUS_CYCLE)
    for status in STATUS_CYCLE:
        # Every step of a status in the status's own colour, the one the legend and badges use.
        assert colours[status] == [legend_colour(page, status)], status
    assert len({colours[status][0] for status in STATUS_CYCLE}) == 3

    # A step that changes status is drawn in its new colour.
    step = page.evaluate(
        "window.runPage.store.orderedSteps().find((x) => x.round === 0 && x.status === 'failed')"
    )
    page.evaluate(
        "(step) => { const { store, graph } = window.runPage;"
        " const changes = { run: false, totals: false, shapedRounds: new Set(),"
        " addedSteps: new Set(), changedSteps: new Set(), rounds: new Set(), plans: new Set() };"
        " store.putStep({ ...step, status: 'succeeded' }, changes); graph.update(changes); }",
        step,
    )
    drawn = page.evaluate(
        f"window.runPage.graph.cy.getElementById('s{step['id']}')"
        ".style('background-color').replace(/ /g, '')"
    )
    assert drawn == legend_colour(page, "succeeded")


def record_state_loads(page) -> dict[str, list]:
    """What the page loads of its run's state after the document: requests to the graph and run
    APIs, websocket URLs, and snapshots the socket sends."""
    loads: dict[str, list] = {"requests": [], "sockets": [], "snapshots": []}
    state_api = re.compile(r"/api/runs/\d+/(graph/)?(\?.*)?$")

    def on_request(request):
        if state_api.search(request.url):
            loads["requests"].append(request.url)

    def on_socket(socket):
        loads["sockets"].append(socket.url)

        def on_frame(payload):
            if isinstance(payload, str) and json.loads(payload).get("type") == "snapshot":
                loads["snapshots"].append(payload)

        socket.on("framereceived", on_frame)

    page.on("request", on_request)
    page.on("websocket", on_socket)
    return loads


def set_conductor_params(server, params: dict) -> dict:
    """Replace the demo pool's conductor parameters; returns the ones it had."""
    output = server.shell(
        "import json\n"
        "from orchestrator.models import Pool\n"
        "pool = Pool.objects.order_by('pk').first()\n"
        "print(json.dumps(pool.conductor_params))\n"
        f"pool.conductor_params = json.loads({json.dumps(params)!r})\n"
        "pool.save(update_fields=['conductor_params'])\n"
    )
    return json.loads(output.strip().splitlines()[-1])


def embedded_state(page) -> dict:
    return page.evaluate("JSON.parse(document.getElementById('run-state').textContent)")


def drawn_layout(page) -> dict[str, list[float]]:
    """Each drawn node's position (steps, plans, round boxes), rounded to a pixel."""
    return page.evaluate(
        "Object.fromEntries(window.runPage.graph.cy.nodes().map((n) =>"
        " [n.id(), [Math.round(n.position('x')), Math.round(n.position('y'))]]))"
    )


def test_a_live_run_page_loads_its_state_once_and_grows_its_graph_in_place(slow_page, slow_server):
    page = slow_page
    loads = record_state_loads(page)
    # The conductor takes a while to plan here, so the page is open before any step exists.
    before = set_conductor_params(slow_server, {"latency": 2.0})
    try:
        run_id = RunMaker(page, slow_server)("What is 31 * 7 - 5?")
        page.goto(f"/runs/{run_id}/")
        page.wait_for_selector("#run-graph[data-state=ready]")
        first = embedded_state(page)
        wait_until_finished(page)
    finally:
        set_conductor_params(slow_server, before)
    seen = {name: list(urls) for name, urls in loads.items()}

    steps = api_steps(page, slow_server.url, run_id)
    # (The page embeds its steps as a table: one row each.)
    assert len(first["state"]["steps"]["rows"]) < len(steps), (
        "steps were created while the page watched"
    )
    # One state load: the page's own; no graph or run request, no snapshot over the socket,
    # which asked only for what came after the page's seq.
    assert seen["requests"] == []
    assert seen["snapshots"] == []
    socket_url = (
        slow_server.url.replace("http", "ws", 1) + f"/ws/runs/{run_id}/?after={first['seq']}"
    )
    assert seen["sockets"] == [socket_url]
    # Every step is drawn, where the server lays the finished run out (the API's graph, asked
    # for here by the test, not by the page).
    response = page.request.get(f"{slow_server.url}/api/runs/{run_id}/graph/")
    assert response.ok
    server = {n["id"]: [round(n["x"]), round(n["y"])] for n in response.json()["nodes"]}
    server |= {g["id"]: [round(g["x"]), round(g["y"])] for g in response.json()["groups"]}
    assert drawn_layout(page) == server
    drawn_edges = page.evaluate("window.runPage.graph.cy.edges().map((e) => e.id()).sort()")
    assert drawn_edges == sorted(e["id"] for e in response.json()["edges"])


def test_a_finished_run_page_loads_nothing_after_the_document(
    browser_page, make_run, live_server_url
):
    page = browser_page
    run_id = make_run("What is 6 * 7?")
    make_run.wait(run_id)
    loads = record_state_loads(page)
    page.goto(f"/runs/{run_id}/")
    page.wait_for_selector("#run-graph[data-state=ready]")
    page.wait_for_selector("#live-indicator[data-state=finished]")
    steps = embedded_state(page)["state"]["steps"]["rows"]  # one row per step
    assert steps
    assert page.evaluate("window.runPage.graph.cy.nodes('.step').length") == len(steps)
    # No state request and no snapshot: the socket, kept open for review events (comments,
    # labels), asks only for what comes after the embedded state.
    wait_for_js(page, "window.runPage.live.socket && window.runPage.live.socket.readyState === 1")
    socket_url = live_server_url.replace("http", "ws", 1) + (
        f"/ws/runs/{run_id}/?after={embedded_state(page)['seq']}"
    )
    assert loads == {"requests": [], "sockets": [socket_url], "snapshots": []}
