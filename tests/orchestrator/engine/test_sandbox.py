"""The code sandbox, attacked with real processes: each escape a grader's code could try, blocked.

Every test starts real bubblewrap sandboxes (skipped with the reason where bwrap cannot run,
failed instead under CONDUCTOR_REQUIRE_SANDBOX=1). Small limits keep the hostile programs short.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import secrets
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.engine import sandbox
from orchestrator.engine.sandbox import Limits, SandboxUnavailable, run_python

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.usefixtures("code_sandbox")


def sandbox_pids() -> list[int]:
    """Processes on this machine (outside any namespace) whose real uid is the sandbox's."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        if int(uid_line.split()[1]) == sandbox.SANDBOX_UID:
            pids.append(int(entry.name))
    return pids


def assert_nothing_left_running() -> None:
    deadline = time.monotonic() + 0.5
    while sandbox_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_pids() == [], "sandbox processes outlived the sandbox"


def test_code_runs_as_the_unprivileged_user_with_an_empty_environment(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_TEST_API_KEY", "sk-should-never-be-seen")
    script = (
        "import os, time\n"
        "print(os.getuid(), os.getgid(), os.getgroups(), sorted(os.environ), flush=True)\n"
        "time.sleep(1.5)\n"
    )
    outcome = None

    def run() -> None:
        nonlocal outcome
        outcome = run_python(script=script, limits=Limits(wall_seconds=10))

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.7)
    seen_from_outside = sandbox_pids()
    thread.join()

    assert outcome is not None and outcome.ok, outcome
    uid, gid, groups, names = outcome.stdout.split(" ", 3)
    assert (uid, gid, groups) == ("65534", "65534", "[]")
    # Only what Python itself sets: nothing of the server's environment.
    assert set(ast.literal_eval(names)) <= {"PWD", "LC_CTYPE"}
    assert "sk-should-never-be-seen" not in outcome.stdout
    # Seen from the host, every process of the sandbox is the unprivileged user, not root.
    assert seen_from_outside, "the sandbox's processes were not found"
    for pid in seen_from_outside:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        assert set(uids) == {"65534"}
    assert os.getuid() != sandbox.SANDBOX_UID


def test_the_parents_environment_cannot_be_read_through_proc():
    secret = "sk-" + secrets.token_hex(16)
    script = (
        "import os, sys\n"
        "parent = sys.stdin.read().strip()\n"
        "paths = [f'/proc/{parent}/environ', f'/proc/{os.getppid()}/environ']\n"
        "paths += [f'/proc/{p}/environ' for p in os.listdir('/proc') if p.isdigit()]\n"
        "for path in paths:\n"
        "    try:\n"
        "        print('READ', path, open(path, 'rb').read())\n"
        "    except OSError as error:\n"
        "        print('BLOCKED', path, type(error).__name__)\n"
        "print('PIDS', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    # A stand-in for the server: a process started with a provider key in its environment, which
    # runs the hostile program in the sandbox and hands back what it saw.
    server = (
        "import json, os, sys\n"
        "from orchestrator.engine.sandbox import Limits, run_python\n"
        "own = open(f'/proc/{os.getpid()}/environ', 'rb').read().decode()\n"
        "outcome = run_python(script=sys.stdin.read(), stdin=str(os.getpid()),\n"
        "                     limits=Limits(wall_seconds=10))\n"
        "print(json.dumps({'pid': os.getpid(), 'own': own, 'ok': outcome.ok,\n"
        "                  'seen': outcome.stdout + outcome.stderr}))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", server],
        input=script,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "CONDUCTOR_FAKE_PROVIDER_KEY": secret},
        timeout=60,
        check=True,
    )
    report = json.loads(completed.stdout)

    assert secret in report["own"]  # there for the taking, outside the sandbox
    assert report["ok"], report
    assert secret not in report["seen"]
    assert f"BLOCKED /proc/{report['pid']}/environ FileNotFoundError" in report["seen"]
    # Only the sandbox's own processes exist in its /proc: the server is not there to read.
    pids = ast.literal_eval(report["seen"].split("PIDS ", 1)[1])
    assert report["pid"] not in pids and max(pids) < 10


def test_the_database_and_project_files_cannot_be_read():
    secret = "secret-" + secrets.token_hex(16)
    database = ROOT / f".sandbox-probe-{secrets.token_hex(4)}.sqlite3"
    connection = sqlite3.connect(database)
    connection.execute("CREATE TABLE keys (value TEXT)")
    connection.execute("INSERT INTO keys VALUES (?)", (secret,))
    connection.commit()
    connection.close()
    paths = [database, ROOT / "pyproject.toml", ROOT / "orchestrator" / "engine" / "sandbox.py"]
    paths += [Path("/etc/passwd"), Path("/root"), Path("/home"), Path("/work")]
    script = (
        "import os, sys\n"
        "for path in sys.stdin.read().split():\n"
        "    try:\n"
        "        data = open(path, 'rb').read() if not os.path.isdir(path) else os.listdir(path)\n"
        "        print('READ', path, data)\n"
        "    except OSError as error:\n"
        "        print('BLOCKED', path, type(error).__name__)\n"
        "print('ROOT', sorted(os.listdir('/')))\n"
    )
    try:
        outcome = run_python(
            script=script, stdin=" ".join(map(str, paths)), limits=Limits(wall_seconds=10)
        )
    finally:
        database.unlink()

    assert outcome.ok, outcome
    assert secret not in outcome.stdout
    for path in paths:
        assert f"BLOCKED {path} " in outcome.stdout, (path, outcome.stdout)
    visible = ast.literal_eval(outcome.stdout.split("ROOT ", 1)[1])
    system = {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "proc", "dev", "tmp"}
    assert set(visible) <= system


def test_no_connection_reaches_a_server_on_this_machine():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    # The listener is real: a connection from here is accepted.
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        accepted, _ = listener.accept()
        accepted.close()
    script = (
        "import socket, _socket, sys\n"
        "port = int(sys.stdin.read())\n"
        "for family, address in [(socket.AF_INET, ('127.0.0.1', port)),\n"
        "                        (socket.AF_INET6, ('::1', port)),\n"
        "                        (socket.AF_INET, ('1.1.1.1', 53))]:\n"
        "    raw = _socket.socket(family, socket.SOCK_STREAM)\n"
        "    raw.settimeout(2)\n"
        "    try:\n"
        "        raw.connect(address)\n"
        "        print('CONNECTED', address)\n"
        "    except OSError as error:\n"
        "        print('BLOCKED', address, error)\n"
        "print('INTERFACES', [name for _, name in socket.if_nameindex()])\n"
    )
    try:
        outcome = run_python(script=script, stdin=str(port), limits=Limits(wall_seconds=10))
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()

    assert outcome.ok, outcome
    assert "CONNECTED" not in outcome.stdout
    assert outcome.stdout.count("BLOCKED") == 3
    assert "INTERFACES ['lo']" in outcome.stdout  # a network namespace of its own, loopback only


def test_nothing_can_be_written_outside_the_working_directory(tmp_path):
    limits = Limits(wall_seconds=10, disk_bytes=4 * 2**20)
    targets = ["/", "/usr", "/usr/lib", "/dev", "/dev/shm", "/proc", "/bin", str(tmp_path)]
    script = (
        "import sys\n"
        "for directory in sys.stdin.read().split():\n"
        "    try:\n"
        "        open(directory.rstrip('/') + '/escaped', 'w').write('x')\n"
        "        print('WROTE', directory)\n"
        "    except OSError as error:\n"
        "        print('BLOCKED', directory, type(error).__name__)\n"
        "open('inside.txt', 'w').write('fine')\n"
        "print('INSIDE', open('inside.txt').read())\n"
        "try:\n"
        f"    open('big', 'wb').write(b'x' * {2 * limits.disk_bytes})\n"
        "    print('FILLED')\n"
        "except OSError as error:\n"
        "    print('FULL', type(error).__name__)\n"
    )
    outcome = run_python(script=script, stdin=" ".join(targets), limits=limits)

    assert "WROTE" not in outcome.stdout, outcome
    for target in targets:
        assert f"BLOCKED {target} " in outcome.stdout
    assert "INSIDE fine" in outcome.stdout
    # The writable directory is small: filling it fails (or the file-size limit kills the writer).
    assert "FILLED" not in outcome.stdout
    assert not (tmp_path / "escaped").exists()
    assert not Path("/escaped").exists() and not Path("/usr/escaped").exists()


def test_a_fork_bomb_is_held_to_the_process_limit_and_killed_with_the_sandbox():
    limits = Limits(wall_seconds=3, processes=16, cpu_seconds=5)
    counting = (
        "import os, time\n"
        "children = 0\n"
        "try:\n"
        "    for _ in range(1000):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        children += 1\n"
        "except OSError as error:\n"
        "    print('REFUSED', type(error).__name__)\n"
        "print('CHILDREN', children, flush=True)\n"
    )
    outcome = run_python(script=counting, limits=limits)
    assert "REFUSED" in outcome.stdout, outcome
    assert int(outcome.stdout.split("CHILDREN ")[1]) < limits.processes
    assert_nothing_left_running()  # the sleeping children died with the sandbox

    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    started = time.monotonic()
    outcome = run_python(script=bomb, limits=limits)
    assert outcome.timed_out and outcome.exit_code is None
    assert time.monotonic() - started < limits.wall_seconds + 2
    assert_nothing_left_running()
    # The machine is fine afterwards: the next sandbox runs normally.
    assert run_python(script="print('after')", limits=Limits(wall_seconds=10)).stdout == "after\n"


def test_allocating_past_the_memory_limit_fails():
    limits = Limits(wall_seconds=10, memory_bytes=256 * 2**20)
    script = (
        "small = bytearray(64 * 2**20)\n"
        "print('SMALL ok', flush=True)\n"
        "try:\n"
        f"    big = bytearray({2 * limits.memory_bytes})\n"
        "    print('BIG allocated')\n"
        "except MemoryError:\n"
        "    print('BIG refused')\n"
    )
    outcome = run_python(script=script, limits=limits)
    assert outcome.ok, outcome
    assert outcome.stdout.split("\n")[:2] == ["SMALL ok", "BIG refused"]


@pytest.mark.parametrize(
    "script",
    [
        "while True:\n    pass\n",
        "import time\ntime.sleep(3600)\n",
        "import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass\n",
    ],
    ids=["spin", "sleep", "spin-with-outputs-closed"],
)
def test_a_program_that_never_ends_is_killed_at_the_wall_limit(script):
    limits = Limits(wall_seconds=1.5, cpu_seconds=60)
    started = time.monotonic()
    outcome = run_python(script=script, limits=limits)
    assert outcome.timed_out and outcome.exit_code is None
    assert time.monotonic() - started < limits.wall_seconds + 1.5
    assert_nothing_left_running()


def test_a_busy_loop_is_killed_at_the_cpu_limit():
    limits = Limits(wall_seconds=30, cpu_seconds=1)
    started = time.monotonic()
    outcome = run_python(script="while True:\n    pass\n", limits=limits)
    assert not outcome.ok and not outcome.timed_out
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_printing_gigabytes_is_cut_at_the_output_limit_without_filling_memory(stream):
    limits = Limits(wall_seconds=15, output_bytes=64 * 2**10)
    script = (
        "import sys\n"
        "chunk = 'x' * 2**20\n"
        "for _ in range(10 * 2**10):  # 10 GiB\n"
        f"    sys.{stream}.write(chunk)\n"
    )
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    started = time.monotonic()
    outcome = run_python(script=script, limits=limits)
    elapsed = time.monotonic() - started
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    assert outcome.output_exceeded and outcome.exit_code is None
    assert len(getattr(outcome, stream)) == limits.output_bytes
    assert elapsed < 5, "the sandbox was not stopped at the output limit"
    assert peak_after - peak_before < 20 * 2**10, "the parent's memory grew with the output"
    assert_nothing_left_running()


def test_a_large_input_the_program_never_reads_does_not_block_the_caller():
    outcome = run_python(script="print('done')", stdin="x" * 8 * 2**20, limits=Limits())
    assert outcome.ok and outcome.stdout == "done\n" and outcome.wall_time < 5


def test_a_missing_bwrap_refuses_and_says_how_to_enable_it(monkeypatch, tmp_path):
    marker = tmp_path / "ran"
    monkeypatch.setattr(sandbox, "BWRAP", str(tmp_path / "bwrap"))
    with pytest.raises(SandboxUnavailable, match=r"apt-get install bubblewrap"):
        run_python(script=f"open({str(marker)!r}, 'w').write('ran')")
    assert not marker.exists()


def test_a_bwrap_that_cannot_start_refuses_instead_of_running_the_code(monkeypatch, tmp_path):
    marker = tmp_path / "ran"
    monkeypatch.setattr(sandbox, "BWRAP", "/bin/false")
    with pytest.raises(SandboxUnavailable, match=r"could not start.*apt-get install bubblewrap"):
        run_python(script=f"open({str(marker)!r}, 'w').write('ran')")
    assert not marker.exists()
    monkeypatch.setattr(sandbox, "BWRAP", "/bin/false")
    sandbox.forget_probe()
    try:
        assert "could not start" in (sandbox.sandbox_problem() or "")
    finally:
        monkeypatch.undo()
        sandbox.forget_probe()
    assert sandbox.sandbox_problem() is None
