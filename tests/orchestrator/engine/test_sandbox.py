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


@pytest.fixture
def own_slot():
    """A sandbox slot held by the test: while it is held, its uid and cgroup are this test's
    sandbox's alone, whatever else grades on the machine."""
    with sandbox.slots(1) as (slot,):
        yield slot


def sandbox_pids(uid: int) -> list[int]:
    """Processes on this machine (outside any namespace) whose real uid is ``uid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        if int(uid_line.split()[1]) == uid:
            pids.append(int(entry.name))
    return pids


def assert_nothing_left_running(slot: sandbox.Slot) -> None:
    """Nothing of this test's own sandbox outlived it: no process of its uid, none in its
    cgroup."""
    assert sandbox_pids(slot.uid) == [], "sandbox processes outlived the sandbox"
    for directory in slot.directories:
        procs = directory / "cgroup.procs"
        assert not procs.exists() or procs.read_text().split() == []


def test_code_runs_as_the_unprivileged_user_with_an_empty_environment(monkeypatch, own_slot):
    monkeypatch.setenv("CONDUCTOR_TEST_API_KEY", "sk-should-never-be-seen")
    script = (
        "import os, time\n"
        "print(os.getuid(), os.getgid(), os.getgroups(), sorted(os.environ), flush=True)\n"
        "time.sleep(1.5)\n"
    )
    outcome = None

    def run() -> None:
        nonlocal outcome
        outcome = run_python(script=script, limits=Limits(wall_seconds=10), slot=own_slot)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.7)
    seen_from_outside = sandbox_pids(own_slot.uid)
    thread.join()

    assert outcome is not None and outcome.ok, outcome
    uid, gid, groups, names = outcome.stdout.split(" ", 3)
    assert (uid, gid, groups) == ("65534", "65534", "[]")
    # Only what Python itself sets: nothing of the server's environment.
    assert set(ast.literal_eval(names)) <= {"PWD", "LC_CTYPE"}
    assert "sk-should-never-be-seen" not in outcome.stdout
    # Seen from the host, every process of the sandbox is its slot's unprivileged uid, not root.
    assert outcome.uid == own_slot.uid >= sandbox.UID_BASE
    assert seen_from_outside, "the sandbox's processes were not found"
    for pid in seen_from_outside:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        assert set(uids) == {str(own_slot.uid)}
    assert os.getuid() != own_slot.uid


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
    system = {"usr", "lib", "lib32", "lib64", "libx32", "proc", "dev", "tmp"}
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


def test_a_fork_bomb_is_held_to_the_process_limit_and_killed_with_the_sandbox(own_slot):
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
    outcome = run_python(script=counting, limits=limits, slot=own_slot)
    assert "REFUSED" in outcome.stdout, outcome
    assert int(outcome.stdout.split("CHILDREN ")[1]) < limits.processes
    assert_nothing_left_running(own_slot)  # the sleeping children died with the sandbox

    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    started = time.monotonic()
    outcome = run_python(script=bomb, limits=limits, slot=own_slot)
    assert outcome.timed_out and outcome.exit_code is None
    assert time.monotonic() - started < limits.wall_seconds + 2
    assert_nothing_left_running(own_slot)
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
def test_a_program_that_never_ends_is_killed_at_the_wall_limit(script, own_slot):
    limits = Limits(wall_seconds=1.5, cpu_seconds=60)
    started = time.monotonic()
    outcome = run_python(script=script, limits=limits, slot=own_slot)
    assert outcome.timed_out and outcome.exit_code is None
    assert time.monotonic() - started < limits.wall_seconds + 1.5
    assert_nothing_left_running(own_slot)


def test_a_busy_loop_is_killed_at_the_cpu_limit():
    limits = Limits(wall_seconds=30, cpu_seconds=1)
    started = time.monotonic()
    outcome = run_python(script="while True:\n    pass\n", limits=limits)
    assert not outcome.ok and not outcome.timed_out
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_printing_gigabytes_is_cut_at_the_output_limit_without_filling_memory(stream, own_slot):
    limits = Limits(wall_seconds=15, output_bytes=64 * 2**10)
    script = (
        "import sys\n"
        "chunk = 'x' * 2**20\n"
        "for _ in range(10 * 2**10):  # 10 GiB\n"
        f"    sys.{stream}.write(chunk)\n"
    )
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    started = time.monotonic()
    outcome = run_python(script=script, limits=limits, slot=own_slot)
    elapsed = time.monotonic() - started
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    assert outcome.output_exceeded and outcome.exit_code is None
    assert len(getattr(outcome, stream)) == limits.output_bytes
    assert elapsed < 5, "the sandbox was not stopped at the output limit"
    assert peak_after - peak_before < 20 * 2**10, "the parent's memory grew with the output"
    assert_nothing_left_running(own_slot)


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


def test_only_what_python_needs_is_visible():
    """Not /usr/local (another Python, its packages), not the system's other programs or
    packages: the Python binary, its standard library, shared libraries and the loader."""
    script = (
        "import os, sys\n"
        "for path in ['/usr/local', '/usr/lib/python3/dist-packages', '/usr/share', '/usr/sbin',\n"
        "             '/usr/bin/bwrap', '/usr/bin/sh', '/bin/sh', '/etc']:\n"
        "    print('SEEN' if os.path.exists(path) else 'ABSENT', path)\n"
        "print('USR', sorted(os.listdir('/usr')))\n"
        "print('BIN', sorted(os.listdir('/usr/bin')))\n"
        "import json, sqlite3, unittest, doctest, decimal\n"
        "print('STDLIB ok')\n"
    )
    outcome = run_python(script=script, limits=Limits(wall_seconds=10))
    assert outcome.ok, outcome
    assert "SEEN" not in outcome.stdout, outcome.stdout
    assert "USR ['bin', 'lib', 'lib64']" in outcome.stdout or "USR ['bin', 'lib']" in outcome.stdout
    assert "BIN ['python3']" in outcome.stdout
    assert "STDLIB ok" in outcome.stdout


def test_memory_is_bounded_over_all_of_a_sandboxs_processes(own_slot):
    """Six children of 200 MB each, every one under the per-process limit, are more than the
    sandbox's 384 MB together: the cgroup holds them to it, whatever they do."""
    limits = Limits(wall_seconds=20, memory_bytes=384 * 2**20, cpu_seconds=20)
    script = (
        "import os, time\n"
        "children = []\n"
        "for _ in range(6):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        try:\n"
        "            block = bytearray(b'x' * (200 * 2**20))\n"
        "            time.sleep(3)\n"
        "        finally:\n"
        "            os._exit(0)\n"
        "    children.append(pid)\n"
        "survived = 0\n"
        "for pid in children:\n"
        "    _, status = os.waitpid(pid, 0)\n"
        "    survived += os.WIFEXITED(status)\n"
        "print('SURVIVED', survived, flush=True)\n"
    )
    outcome = run_python(script=script, limits=limits, slot=own_slot)
    assert outcome.peak_memory_bytes is not None
    assert outcome.peak_memory_bytes <= limits.memory_bytes
    # At most one child's 200 MB fit beside another's: the rest were killed by the cgroup.
    survived = int(outcome.stdout.split("SURVIVED ")[1]) if "SURVIVED" in outcome.stdout else 0
    assert survived < 6
    assert_nothing_left_running(own_slot)


def test_two_sandboxes_share_no_limit():
    """A fork bomb and a memory hog, each in its own sandbox, at the same time as a third that
    forks a few children and allocates: the third runs as if alone."""
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    hog = (
        "import os\nblocks = []\nfor _ in range(4):\n    os.fork()\n"
        "while True:\n    blocks.append(bytearray(b'x' * 2**24))\n"
    )
    polite = (
        "import os, time\n"
        "time.sleep(1)\n"  # while the others are at their worst
        "pids = [os.fork() or os._exit(0) for _ in range(8)]\n"
        "for pid in pids:\n    os.waitpid(pid, 0)\n"
        "data = bytearray(b'y' * (100 * 2**20))\n"
        "print('FINE', len(pids), len(data) // 2**20, flush=True)\n"
    )
    results: dict[str, object] = {}

    def run(name: str, script: str, limits: Limits) -> None:
        results[name] = run_python(script=script, limits=limits)

    hostile = Limits(wall_seconds=4, processes=64, memory_bytes=256 * 2**20, cpu_seconds=8)
    threads = [
        threading.Thread(target=run, args=("bomb", bomb, hostile)),
        threading.Thread(target=run, args=("hog", hog, hostile)),
        threading.Thread(
            target=run, args=("polite", polite, Limits(wall_seconds=15, processes=16))
        ),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    polite_outcome = results["polite"]
    assert isinstance(polite_outcome, sandbox.Outcome)
    assert polite_outcome.ok, polite_outcome
    assert polite_outcome.stdout == "FINE 8 100\n"
    uids = {outcome.uid for outcome in results.values()}  # type: ignore[attr-defined]
    assert len(uids) == 3, "each sandbox had a uid of its own"


def test_no_new_user_namespace_and_no_way_back_to_root():
    """The two ways out of the sandbox's own namespaces: a user namespace of its own (where it
    would be root again) and a setuid program or call. Both are refused, and it holds no
    capability."""
    script = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "CLONE_NEWUSER = 0x10000000\n"
        "result = libc.unshare(CLONE_NEWUSER)\n"
        "print('UNSHARE', result, os.strerror(ctypes.get_errno()) if result else 'done')\n"
        "for call, arg in ((os.setuid, 0), (os.setgid, 0), (os.seteuid, 0)):\n"
        "    try:\n"
        "        call(arg)\n"
        "        print('BECAME', call.__name__)\n"
        "    except OSError:  # EPERM, or EINVAL: root is not even mapped here\n"
        "        print('REFUSED', call.__name__)\n"
        "status = dict(line.split(':\\t', 1) for line in open('/proc/self/status').read().splitlines()\n"
        "              if ':\\t' in line)\n"
        "print('CAPS', status['CapEff'].strip(), status['CapPrm'].strip())\n"
        "print('NONEWPRIVS', status['NoNewPrivs'].strip())\n"
        "mounts = [line.split()[4:6] for line in open('/proc/self/mountinfo')]\n"
        "print('SUID MOUNTS', [point for point, options in mounts if 'nosuid' not in options])\n"
    )
    outcome = run_python(script=script, limits=Limits(wall_seconds=15))
    assert outcome.ok, outcome
    assert "UNSHARE -1" in outcome.stdout
    assert "BECAME" not in outcome.stdout and outcome.stdout.count("REFUSED") == 3
    assert "CAPS 0000000000000000 0000000000000000" in outcome.stdout
    assert "NONEWPRIVS 1" in outcome.stdout
    # A setuid file (a system helper among the shared libraries) gains nothing: no mount honours
    # the bit.
    assert "SUID MOUNTS []" in outcome.stdout
