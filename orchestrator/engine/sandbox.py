"""Running untrusted Python inside an OS-level sandbox (bubblewrap), or not at all.

Code a user or a model wrote runs only here. Each sandbox takes a *slot* of its own for as long as
it runs (``SLOT_COUNT`` slots per machine, held by a lock file, so every process on the machine
agrees): the slot gives it a host uid of its own (``UID_BASE`` + slot) and a cgroup of its own
(``pids`` and ``memory``; cgroup v1 controllers, or v2 where that is what is mounted). So no limit
is shared between two sandboxes: a fork bomb fills its own process limit, not another's, and the
memory limit holds over all of a sandbox's processes together. Inside, ``bwrap`` gives it:

- every namespace of its own (user, pid, network, ipc, uts, mount, cgroup): no network at all,
  no other process visible, no way to make further user namespaces; it sees itself as the
  unprivileged user 65534;
- an empty environment;
- a file system of only what the system Python needs (its binary, its standard library, the shared
  libraries and the dynamic loader, all read-only) plus a fresh, size-limited ``/tmp`` that is the
  only writable place and the working directory; nothing of ``/usr/local``, the project, its
  database, ``/work``, ``/root``, ``/home`` or ``/etc``;
- limits on CPU time, address space, processes and memory (the cgroup, over all its processes),
  file size (``prlimit``), wall time (the whole sandbox is killed) and output (read with a cap; the
  sandbox is killed past it).

The cgroup is joined before bubblewrap starts (a shell as root writes its own pid into the
cgroup, then ``setpriv`` drops to the slot's uid and execs ``prlimit`` and ``bwrap``), so every
process of the sandbox is in it from the first. When the sandbox ends, whatever is left in its
cgroup is killed and the cgroup removed.

There is no fallback: when bwrap is missing or cannot start, ``SandboxUnavailable`` is raised with
a message that says how to enable it. Pure Python and stdlib only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import random
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BWRAP = "/usr/bin/bwrap"
PRLIMIT = "/usr/bin/prlimit"
SETPRIV = "/usr/bin/setpriv"
SHELL = "/bin/sh"
PYTHON = "/usr/bin/python3"
# What the program sees itself as, inside its user namespace.
INSIDE_UID = 65534
INSIDE_GID = 65534
# Host uids: one per slot, none of them a user of this machine.
UID_BASE = 610000
SLOT_COUNT = 64
# How long a sandbox waits for a free slot before the run is left ungraded with the reason.
SLOT_WAIT_SECONDS = 60.0
LOCK_DIR = "/run/conductor-sandbox"
CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_NAME = "conductor-sandbox"
WORKDIR = "/tmp"
ENABLE_HINT = (
    "Install bubblewrap (apt-get install bubblewrap) and start the server as root (each sandbox "
    "runs code as an unprivileged uid of its own, in a cgroup of its own), or set "
    "CONDUCTOR_CODE_GRADING=off."
)
# The shell that joins the sandbox's cgroups before anything of the sandbox exists: its
# arguments are the cgroup files to write its pid into, then "--", then the command to exec.
_JOIN_CGROUPS = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run on this machine; the code was not run (nor will be without it)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one sandboxed program may use.

    ``memory_bytes`` bounds the sandbox's processes together (its cgroup) and each one's address
    space; ``processes`` bounds the sandbox's processes (its cgroup, and its uid's own limit)."""

    cpu_seconds: int = 10
    wall_seconds: float = 15.0
    memory_bytes: int = 512 * 2**20
    processes: int = 64
    output_bytes: int = 64 * 2**10
    disk_bytes: int = 16 * 2**20


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a sandboxed program ended.

    ``exit_code`` is None when the sandbox was killed (wall time or output past the limit);
    ``stdout``/``stderr`` hold at most ``Limits.output_bytes`` each, decoded leniently. ``uid`` is
    the host uid the sandbox ran as (its slot's), ``peak_memory_bytes`` the most its processes held
    together (its cgroup's high-water mark; None where the kernel does not tell)."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    output_exceeded: bool
    wall_time: float
    uid: int = 0
    peak_memory_bytes: int | None = None

    @property
    def ok(self) -> bool:
        """Ended by itself with exit status 0."""
        return self.exit_code == 0


_probe_passed = False


def sandbox_problem() -> str | None:
    """Why the sandbox cannot run here, said with how to fix it; None when it works.

    A trial run is made the first time (and again after a failure); a success is remembered.
    """
    global _probe_passed
    if _probe_passed:
        return None
    try:
        outcome = run_python(script="print('ready')", limits=Limits(wall_seconds=20.0))
    except SandboxUnavailable as error:
        return str(error)
    if outcome.stdout.strip() != "ready":
        detail = (outcome.stderr or outcome.stdout).strip()[:300] or "no output"
        return f"The code sandbox started but could not run Python ({detail}). {ENABLE_HINT}"
    _probe_passed = True
    return None


def forget_probe() -> None:
    """Make the next ``sandbox_problem`` try again (after bwrap was installed, or in tests)."""
    global _probe_passed
    _probe_passed = False


# Slots: a uid and a cgroup per sandbox -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Cgroups:
    """Where the sandbox cgroups live: v1 (one directory per controller) or v2 (one tree)."""

    version: int
    parents: tuple[Path, ...]


@dataclass(slots=True)
class Slot:
    """One sandbox's place on the machine, held (by a lock file) while the sandbox runs."""

    index: int
    lock_fd: int
    cgroups: _Cgroups

    @property
    def uid(self) -> int:
        return UID_BASE + self.index

    @property
    def directories(self) -> tuple[Path, ...]:
        return tuple(parent / f"slot-{self.index}" for parent in self.cgroups.parents)


def _find_cgroups() -> _Cgroups:
    root = Path(CGROUP_ROOT)
    v1 = (root / "pids", root / "memory")
    if all((path / "cgroup.procs").exists() and os.access(path, os.W_OK) for path in v1):
        return _Cgroups(version=1, parents=tuple(path / CGROUP_NAME for path in v1))
    controllers = root / "cgroup.controllers"
    if controllers.exists() and os.access(root, os.W_OK):
        available = controllers.read_text().split()
        if "pids" in available and "memory" in available:
            return _Cgroups(version=2, parents=(root / CGROUP_NAME,))
    raise SandboxUnavailable(
        "Code grading needs writable cgroups (the pids and memory controllers of cgroup v1, or "
        f"cgroup v2 with both) under {CGROUP_ROOT}, so that each sandbox has limits of its own. "
        + ENABLE_HINT
    )


def _prepare_parents(cgroups: _Cgroups) -> None:
    for parent in cgroups.parents:
        parent.mkdir(exist_ok=True)
    if cgroups.version == 2:
        with contextlib.suppress(OSError):
            (Path(CGROUP_ROOT) / "cgroup.subtree_control").write_text("+pids +memory")
        (cgroups.parents[0] / "cgroup.subtree_control").write_text("+pids +memory")


def acquire_slots(count: int, *, wait_seconds: float = SLOT_WAIT_SECONDS) -> list[Slot]:
    """``count`` free slots, taken all at once (a caller never holds some while waiting for the
    rest, so callers that need two cannot block each other); SandboxUnavailable if none come
    free within ``wait_seconds``. Release each with ``release_slot``."""
    _check_prerequisites()
    cgroups = _find_cgroups()
    _prepare_parents(cgroups)
    os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    deadline = time.monotonic() + wait_seconds
    while True:
        taken: list[Slot] = []
        start = random.randrange(SLOT_COUNT)  # noqa: S311 - spreads callers, not a secret
        for offset in range(SLOT_COUNT):
            index = (start + offset) % SLOT_COUNT
            fd = os.open(f"{LOCK_DIR}/slot-{index}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                os.close(fd)
                if error.errno in (errno.EAGAIN, errno.EACCES):
                    continue
                raise
            taken.append(Slot(index=index, lock_fd=fd, cgroups=cgroups))
            if len(taken) == count:
                break
        if len(taken) == count:
            try:
                for slot in taken:
                    _fresh_cgroup(slot)
            except BaseException:
                for slot in taken:
                    release_slot(slot)
                raise
            return taken
        for slot in taken:
            release_slot(slot)
        if time.monotonic() > deadline:
            raise SandboxUnavailable(
                f"All {SLOT_COUNT} code sandboxes of this machine stayed busy for "
                f"{wait_seconds:.0f} s; try again later."
            )
        time.sleep(0.01 + random.random() * 0.04)  # noqa: S311


def release_slot(slot: Slot) -> None:
    """Kill whatever is left in the slot's cgroup, remove the cgroup, and free the slot."""
    try:
        empty_slot(slot)
        for directory in slot.directories:
            with contextlib.suppress(FileNotFoundError):
                directory.rmdir()
    finally:
        os.close(slot.lock_fd)


def _fresh_cgroup(slot: Slot) -> None:
    """The slot's cgroup, emptied of anything a crashed predecessor left, its counters reset."""
    for directory in slot.directories:
        if directory.exists():
            empty_slot(slot)
            directory.rmdir()
        directory.mkdir()


def _cgroup_pids(slot: Slot) -> set[int]:
    pids: set[int] = set()
    for directory in slot.directories:
        with contextlib.suppress(FileNotFoundError):
            pids.update(int(line) for line in (directory / "cgroup.procs").read_text().split())
    return pids


def empty_slot(slot: Slot) -> None:
    """Kill every process in the slot's cgroup, and return once none is left."""
    deadline = time.monotonic() + 5
    while pids := _cgroup_pids(slot):
        if slot.cgroups.version == 2:
            with contextlib.suppress(OSError):
                (slot.directories[0] / "cgroup.kill").write_text("1")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"sandbox cgroup slot-{slot.index} would not empty: {pids}")
        time.sleep(0.005)


def _limit_cgroup(slot: Slot, limits: Limits) -> list[str]:
    """Write the slot's limits; the files the starting shell joins."""
    if slot.cgroups.version == 1:
        pids_dir, memory_dir = slot.directories
        (pids_dir / "pids.max").write_text(str(limits.processes))
        (memory_dir / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
        swap = memory_dir / "memory.memsw.limit_in_bytes"
        if swap.exists():
            swap.write_text(str(limits.memory_bytes))
        return [str(pids_dir / "cgroup.procs"), str(memory_dir / "cgroup.procs")]
    (directory,) = slot.directories
    (directory / "pids.max").write_text(str(limits.processes))
    (directory / "memory.max").write_text(str(limits.memory_bytes))
    with contextlib.suppress(FileNotFoundError):
        (directory / "memory.swap.max").write_text("0")
    return [str(directory / "cgroup.procs")]


def _peak_memory(slot: Slot) -> int | None:
    name = "memory.max_usage_in_bytes" if slot.cgroups.version == 1 else "memory.peak"
    try:
        return int((slot.directories[-1] / name).read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def slots(count: int) -> Iterator[list[Slot]]:
    """``count`` slots for the duration of a ``with`` block."""
    taken = acquire_slots(count)
    try:
        yield taken
    finally:
        for slot in taken:
            release_slot(slot)


# Running a program -------------------------------------------------------------------------------


def run_python(
    *,
    script: str,
    files: Mapping[str, str] | None = None,
    stdin: str = "",
    limits: Limits = Limits(),
    argv: Sequence[str] = (),
    handover_fds: Sequence[int] = (),
    slot: Slot | None = None,
) -> Outcome:
    """Run ``script`` with the system Python inside the sandbox and return how it ended.

    ``files`` (name -> text) are placed read-only in the working directory; ``stdin`` is the
    program's standard input; ``argv`` its arguments. ``handover_fds`` are open descriptors the
    program inherits under the same numbers (pipes to a peer), closed here once it has started.
    ``slot`` is one taken with ``slots``/``acquire_slots``; without one, a slot is taken and freed
    here. Raises SandboxUnavailable when the sandbox is missing or cannot start; never runs
    anything outside it.
    """
    if slot is None:
        try:
            with slots(1) as (own,):
                return run_python(
                    script=script, files=files, stdin=stdin, limits=limits, argv=argv,
                    handover_fds=handover_fds, slot=own,
                )  # fmt: skip
        finally:
            _close_all(handover_fds)
    data_fds: list[int] = []
    info_read, info_write = os.pipe()
    try:
        mounts: list[str] = []
        for name, content in {"main.py": script, **(files or {})}.items():
            if "/" in name or name in ("", ".", ".."):
                raise ValueError(f"sandbox file names are plain names, not {name!r}")
            fd = _memory_file(f"sandbox-{name}", content)
            data_fds.append(fd)
            mounts += ["--ro-bind-data", str(fd), f"{WORKDIR}/{name}"]
        # Standard input is a file in memory, not a pipe: a program that never reads it cannot
        # block the writer.
        stdin_fd = _memory_file("sandbox-stdin", stdin)
        data_fds.append(stdin_fd)
        join = _limit_cgroup(slot, limits)
        command = [
            SHELL, "-c", _JOIN_CGROUPS, "sh", *join, "--",
            SETPRIV, f"--reuid={slot.uid}", f"--regid={slot.uid}", "--clear-groups", "--",
            *_prlimit_args(limits),
            BWRAP,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            # The program is the first process of its pid namespace, a child of bwrap, which
            # reaps it; a separate init would be reaped by the machine's init, and its zombies
            # would count against the process limit until then.
            "--as-pid-1",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--hostname", "sandbox",
            "--uid", str(INSIDE_UID),
            "--gid", str(INSIDE_GID),
            *python_mounts(),
            "--proc", "/proc",
            "--dev", "/dev",
            "--remount-ro", "/dev",
            "--size", str(limits.disk_bytes),
            "--tmpfs", WORKDIR,
            *mounts,
            "--remount-ro", "/",
            "--info-fd", str(info_write),
            "--chdir", WORKDIR,
            "--",
            PYTHON, "-I", "-S", "-B", f"{WORKDIR}/main.py", *argv,
        ]  # fmt: skip
        try:
            process = subprocess.Popen(
                command,
                stdin=stdin_fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={},
                cwd="/",
                start_new_session=True,
                pass_fds=[*data_fds, info_write, *handover_fds],
            )
        except OSError as error:
            raise SandboxUnavailable(
                f"The code sandbox could not be started ({error}). {ENABLE_HINT}"
            ) from error
        finally:
            _close_all(handover_fds)
        os.close(info_write)
        info_write = -1
        outcome, started = _supervise(process, info_fd=info_read, limits=limits)
    finally:
        for fd in (*data_fds, info_read, info_write):
            if fd >= 0:
                os.close(fd)
    if not _sandbox_started(started):
        detail = outcome.stderr.strip()[:300] or f"exit status {outcome.exit_code}"
        raise SandboxUnavailable(f"The code sandbox could not start ({detail}). {ENABLE_HINT}")
    empty_slot(slot)
    return Outcome(
        exit_code=outcome.exit_code,
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        timed_out=outcome.timed_out,
        output_exceeded=outcome.output_exceeded,
        wall_time=outcome.wall_time,
        uid=slot.uid,
        peak_memory_bytes=_peak_memory(slot),
    )


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _check_prerequisites() -> None:
    needed = (
        (BWRAP, "bubblewrap"),
        (PRLIMIT, "prlimit (util-linux)"),
        (SETPRIV, "setpriv (util-linux)"),
        (SHELL, "a POSIX shell"),
        (PYTHON, "python3"),
    )
    for path, what in needed:
        if not os.access(path, os.X_OK):
            raise SandboxUnavailable(f"Code grading needs {what} at {path}. {ENABLE_HINT}")
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "Code grading needs a server started as root, so that each sandbox can run code as "
            "an unprivileged uid of its own, in a cgroup of its own, instead of the server's "
            f"own user. {ENABLE_HINT}"
        )


def _prlimit_args(limits: Limits) -> list[str]:
    """Limits set on the sandbox from outside before it starts; everything inside inherits them."""
    return [
        PRLIMIT,
        f"--cpu={limits.cpu_seconds}",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.disk_bytes}",
        "--core=0",
        "--",
    ]


_mounts: list[str] | None = None


def python_mounts() -> list[str]:
    """bwrap arguments that show the sandbox only what the system Python needs, read-only: its
    binary (as ``PYTHON``), its standard library, the shared libraries and the dynamic loader,
    with /bin, /lib and /lib64 as the links into /usr they are on a merged-/usr system."""
    global _mounts
    if _mounts is None:
        binary = os.path.realpath(PYTHON)
        version = os.path.basename(binary)  # python3.11
        places = [f"/usr/lib/{version}"]
        places += [
            str(path) for path in sorted(Path("/usr/lib").glob("*-linux-*")) if path.is_dir()
        ]
        places += [
            path for path in ("/usr/lib64", "/usr/lib32", "/usr/libx32") if os.path.isdir(path)
        ]
        mounts = ["--ro-bind", binary, PYTHON]
        for place in places:
            mounts += ["--ro-bind", place, place]
        for name in ("lib", "lib64", "lib32", "libx32"):
            if os.path.isdir(f"/usr/{name}"):
                mounts += ["--symlink", f"usr/{name}", f"/{name}"]
        _mounts = mounts
    return list(_mounts)


def _memory_file(name: str, content: str) -> int:
    """A file descriptor of an anonymous in-memory file holding ``content``, read from the start."""
    fd = os.memfd_create(name)
    data = memoryview(content.encode("utf-8"))
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _supervise(
    process: subprocess.Popen[bytes], *, info_fd: int, limits: Limits
) -> tuple[Outcome, bytes]:
    """Read both outputs up to the cap, and kill the whole sandbox at the wall limit or past the
    output cap. Memory held here is bounded by the cap whatever the program prints. Returns how
    the program ended and what bwrap reported on ``info_fd`` (the program's pid, once started)."""
    started = time.monotonic()
    deadline = started + limits.wall_seconds
    assert process.stdout and process.stderr
    out, err = process.stdout.fileno(), process.stderr.fileno()
    buffers = {out: bytearray(), err: bytearray(), info_fd: bytearray()}
    caps = {out: limits.output_bytes, err: limits.output_bytes, info_fd: 4096}
    timed_out = exceeded = False
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(timeout=remaining):
                fd = key.fd
                chunk = os.read(fd, 65536)
                if not chunk:
                    selector.unregister(fd)
                    continue
                room = caps[fd] - len(buffers[fd])
                buffers[fd] += chunk[:room]
                exceeded = exceeded or (fd != info_fd and len(chunk) > room)
            if exceeded:
                break
    if not (timed_out or exceeded):
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out or exceeded:
        buffers[info_fd] += _read_available(info_fd)
        _kill(process, program_pid=_program_pid(bytes(buffers[info_fd])))
    process.stdout.close()
    process.stderr.close()
    outcome = Outcome(
        exit_code=None if timed_out or exceeded else process.returncode,
        stdout=buffers[out].decode("utf-8", errors="replace"),
        stderr=buffers[err].decode("utf-8", errors="replace"),
        timed_out=timed_out,
        output_exceeded=exceeded,
        wall_time=time.monotonic() - started,
    )
    return outcome, bytes(buffers[info_fd])


def _kill(process: subprocess.Popen[bytes], *, program_pid: int | None) -> None:
    """Kill the sandbox and reap it before returning.

    The program is the first process of the sandbox's pid namespace: killing it makes the kernel
    kill every other process in there, and bwrap, its parent, reaps it and exits. Should bwrap
    not exit, its process group is killed too (the program then dies by --die-with-parent); the
    cgroup is emptied after in any case."""
    if program_pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(program_pid, signal.SIGKILL)
        try:
            process.wait(timeout=2)
            return
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _read_available(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


def _info(info: bytes) -> dict[str, Any]:
    try:
        data = json.loads(info.decode("utf-8") or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _program_pid(info: bytes) -> int | None:
    pid = _info(info).get("child-pid")
    return pid if isinstance(pid, int) and pid > 1 else None


def _sandbox_started(info: bytes) -> bool:
    """Whether bwrap got as far as starting the program (it reports the child's pid when so)."""
    return _program_pid(info) is not None
