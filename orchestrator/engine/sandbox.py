"""Running untrusted Python inside an OS-level sandbox (bubblewrap), or not at all.

Code a user or a model wrote runs only here. The sandbox is Debian's ``bwrap`` started as the
unprivileged user 65534 (never root, never the server's user) with:

- every namespace of its own (user, pid, network, ipc, uts, mount, cgroup): no network at all,
  no other process visible, no way to make further user namespaces;
- an empty environment;
- a file system of ``/usr`` (read-only, for the system Python) plus a fresh, size-limited
  ``/tmp`` that is the only writable place and the working directory; nothing of the project,
  its database, ``/work``, ``/root``, ``/home`` or ``/etc``;
- limits on CPU time, address space (memory), processes, file size (``prlimit``), wall time
  (the whole sandbox is killed) and output (read with a cap; the sandbox is killed past it).

There is no fallback: when bwrap is missing or cannot start, ``SandboxUnavailable`` is raised with
a message that says how to enable it. Pure Python and stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BWRAP = "/usr/bin/bwrap"
PRLIMIT = "/usr/bin/prlimit"
PYTHON = "/usr/bin/python3"
SANDBOX_UID = 65534
SANDBOX_GID = 65534
WORKDIR = "/tmp"
ENABLE_HINT = (
    "Install bubblewrap (apt-get install bubblewrap) and start the server as root (the sandbox "
    "runs code as the unprivileged user 65534), or set CONDUCTOR_CODE_GRADING=off."
)


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run on this machine; the code was not run (nor will be without it)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What one sandboxed program may use. Memory is address space per process."""

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
    ``stdout``/``stderr`` hold at most ``Limits.output_bytes`` each, decoded leniently.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    output_exceeded: bool
    wall_time: float

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


def run_python(
    *,
    script: str,
    files: Mapping[str, str] | None = None,
    stdin: str = "",
    limits: Limits = Limits(),
) -> Outcome:
    """Run ``script`` with the system Python inside the sandbox and return how it ended.

    ``files`` (name -> text) are placed read-only in the working directory; ``stdin`` is the
    program's standard input. Raises SandboxUnavailable when the sandbox is missing or cannot
    start; never runs anything outside it.
    """
    _check_prerequisites()
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
        command = [
            *_prlimit_args(limits),
            BWRAP,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            # The program is the first process of its pid namespace, a child of bwrap, which
            # reaps it; a separate init would be reaped by the machine's init, and its zombies
            # would count against the process limit of the sandbox user until then.
            "--as-pid-1",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--hostname", "sandbox",
            "--uid", str(SANDBOX_UID),
            "--gid", str(SANDBOX_GID),
            "--ro-bind", "/usr", "/usr",
            *_usr_merged_links(),
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
            PYTHON, "-I", "-B", f"{WORKDIR}/main.py",
        ]  # fmt: skip
        try:
            process = subprocess.Popen(
                command,
                stdin=stdin_fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={},
                cwd="/",
                user=SANDBOX_UID,
                group=SANDBOX_GID,
                extra_groups=[],
                start_new_session=True,
                pass_fds=[*data_fds, info_write],
            )
        except OSError as error:
            raise SandboxUnavailable(
                f"The code sandbox could not be started ({error}). {ENABLE_HINT}"
            ) from error
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
    return outcome


def _check_prerequisites() -> None:
    needed = ((BWRAP, "bubblewrap"), (PRLIMIT, "prlimit (util-linux)"), (PYTHON, "python3"))
    for path, what in needed:
        if not os.access(path, os.X_OK):
            raise SandboxUnavailable(f"Code grading needs {what} at {path}. {ENABLE_HINT}")
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "Code grading needs a server started as root, so that the sandbox can run code as "
            f"the unprivileged user {SANDBOX_UID} instead of the server's own user. {ENABLE_HINT}"
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


def _usr_merged_links() -> list[str]:
    """/bin, /lib, /lib64 as the links into /usr they are on a merged-/usr system."""
    links: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        if os.path.isdir(f"/usr/{name}"):
            links += ["--symlink", f"usr/{name}", f"/{name}"]
    return links


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
    not exit, its process group is killed too (the program then dies by --die-with-parent)."""
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
