"""The observer the engine calls as a run executes: an async adapter over ``RunRecorder``.

Callbacks are stored by the sync methods of ``RunRecorder`` (``services/recorder.py``), called
through ``sync_to_async`` (thread-sensitive: a run's writes never race each other in a process).
No model call ever happens inside these transactions: the engine calls models between callbacks.

With ``write_behind`` (how ``run_execute_async`` executes a run when nothing else listens to
it), a callback is taken, not waited for: one writer task stores the callbacks in the order they
came. A callback taken while nothing is being stored waits ``WRITE_WINDOW_SECONDS`` for those
that follow it, and whatever has come meanwhile is stored together in one hop to the database
thread (``RunRecorder.record``: one transaction, all or none; on PostgreSQL one round trip). A
model call takes far longer than storing, so a live run's callbacks are each stored within
milliseconds of coming; only callbacks that come faster than they can be stored wait for one
another, and then they cost one hop and one commit between them instead of one each. A step's
start is waited for (with what came before it), as its model is called when it returns: a step
whose model was called is never recorded as not run, and no model is called for a step once
storing found the run cancelled or taken over.

What storing raised (the run was cancelled or finished elsewhere, taken over, a database error)
is raised by the next callback, and the execution is stopped at once through ``stop`` (its task
is cancelled, a model call in flight with it, such as the conductor's); the run's last callback
waits until everything is stored. Without ``write_behind`` each callback waits for its own
transaction (an observer that must hear a callback only once it is stored, as the CLI's, runs
that way).

Events are stored in the same transaction as the change they announce; once it commits they are
queued, and the observer sends them from the event loop in seq order (one sender at a time, so a
slow channel layer never reorders them). The sender runs beside the execution: storing the next
callbacks does not wait for the channel layer to take the previous ones' events (a send that
failed is raised at the next callback); the run's last callback waits until all are sent.

Events stored while nobody has subscribed to the run's channel group (``Run.watched``, which
a subscriber sets before it reads what is stored; PostgreSQL's storing statements read it) go
to this process's local listeners only: most runs are never watched live, and the channel
layer's check for members cost each batch a Redis round trip.

The sender starts as soon as a callback has committed, and takes whatever has committed by then
in one channel-layer message. ``SEND_WINDOW_SECONDS`` can hold it back for the events of the
callbacks that follow (one message for several: a group send costs several Redis round trips
whatever it carries), but it is 0: a cancel commits its ``run.finished`` on another thread and
sends it at once, and events held back meanwhile would reach clients after it (the page then
resyncs). Measured at load 6-11, a 3 ms window halved the sends per run on SQLite and merged
few on PostgreSQL, with no measurable change in the time per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from asgiref.sync import sync_to_async

from orchestrator import delivery, events
from orchestrator.engine.grading import GradingUnavailable
from orchestrator.engine.types import PlanRecord, RunResult, StepRecord
from orchestrator.models import Step
from orchestrator.services.grading import grade_answer
from orchestrator.services.recorder import RunRecorder

# How long a callback taken while nothing is being stored waits for the callbacks that follow
# it, to be stored with them in one hop (a wait for a step's start, or for the run's end, starts
# storing at once): the engine, between two model calls, makes its next callbacks in far less.
WRITE_WINDOW_SECONDS = 0.002
# How long committed events wait for those of the next callbacks before they are sent together
# (0: not at all; see the module's docstring).
SEND_WINDOW_SECONDS = 0.0


class RecordingObserver:
    """A RunObserver that persists every callback of one run and publishes its events.

    Built by ``run_execute_async`` from what it loaded: the run's worker row ids (the engine's
    worker indices map onto them), its stored steps, plan rounds, totals and last seq, the plan
    and step ids taken ahead for it, and the reference and grader that score the final answer.
    """

    def __init__(
        self,
        *,
        run_id: int,
        worker_ids: Sequence[int],
        reference: str = "",
        grader: str = "",
        steps: Iterable[Step] = (),
        plan_rounds: Iterable[int] = (),
        totals: dict[str, Any] | None = None,
        status: str | None = None,
        fence: int | None = None,
        last_seq: int | None = None,
        ids_ahead: tuple[Sequence[int], Sequence[int]] = ((), ()),
        write_behind: bool = False,
    ) -> None:
        self.reference = reference
        self.grader = grader
        self.write_behind = write_behind
        # Called (on the loop) when storing a callback raised: the owner stops the execution.
        self.stop: Callable[[], None] | None = None
        # What storing raised, raised again by every callback after it (nothing more is stored).
        self.stopped_by: BaseException | None = None
        # Callbacks taken and not stored yet, in order; how many were taken and stored so far.
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        self._taken = 0
        self._stored = 0
        self._writer: asyncio.Task[None] | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._stored_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # Filled in commit order by the recorder's thread, drained in order on the loop: each
        # event, and whether it goes to the channel layer (not if nobody watched the run).
        self._outbox: deque[tuple[dict[str, Any], bool]] = deque()
        self._sender: asyncio.Task[None] | None = None
        self._send_timer: asyncio.TimerHandle | None = None
        self._send_error: BaseException | None = None
        # The loop the execution runs on: events committed elsewhere are handed to it.
        self._loop: asyncio.AbstractEventLoop | None = None
        self.recorder = RunRecorder(
            run_id=run_id,
            worker_ids=worker_ids,
            steps=steps,
            plan_rounds=plan_rounds,
            totals=totals,
            status=status,
            deliver=lambda event: self._outbox.append((event, True)),
            deliver_unwatched=lambda event: self._outbox.append((event, False)),
            fence=fence,
            last_seq=last_seq,
            ids_ahead=ids_ahead,
        )
        # Built once: each hop to the database thread costs less without it.
        self._record = sync_to_async(self.recorder.record)

    async def _call(self, name: str, *args: Any) -> None:
        if self.stopped_by is not None:
            raise self.stopped_by
        self._raise_send_error()
        if not self.write_behind:
            try:
                await self._record([(name, args)])
            finally:
                self._start_sending(at_once=False)
            return
        self._pending.append((name, args))
        self._taken += 1
        if self._write_timer is None and (self._writer is None or self._writer.done()):
            self._write_timer = asyncio.get_running_loop().call_later(
                WRITE_WINDOW_SECONDS, self._start_writing
            )

    def _start_writing(self) -> None:
        """Have the writer task store what was taken, now (a writer already running stores it
        when it is done with its batch)."""
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        if self._pending and (self._writer is None or self._writer.done()):
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        """Store the callbacks taken, in order, whatever has come meanwhile in one hop; on an
        error, keep it, drop the rest (nothing more is stored) and have the execution stopped."""
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await self._record(batch)
            except BaseException as error:  # noqa: BLE001 (raised by the next callback)
                self.stopped_by = error
                self._pending.clear()
                if self.stop is not None:
                    self.stop()
                return
            finally:
                self._start_sending(at_once=False)
                self._wake_stored(len(batch))

    def _wake_stored(self, count: int) -> None:
        self._stored = min(self._taken, self._stored + count)
        waiting = []
        for through, future in self._stored_waiters:
            if through <= self._stored or self.stopped_by is not None:
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((through, future))
        self._stored_waiters = waiting

    async def stored_through(self, count: int) -> None:
        """Wait until the first ``count`` callbacks taken are stored (or storing stopped)."""
        if count <= self._stored or self.stopped_by is not None:
            return
        self._start_writing()
        future = asyncio.get_running_loop().create_future()
        self._stored_waiters.append((count, future))
        await future

    @property
    def taken(self) -> int:
        """How many callbacks this observer has taken (stored, or to be stored in order)."""
        return self._taken

    async def _writer_done(self) -> None:
        """Have what was taken stored now, and wait until the writer is done with it."""
        self._start_writing()
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def written(self) -> None:
        """Wait until every callback taken is stored; raise what storing raised."""
        await self._writer_done()
        if self.stopped_by is not None:
            raise self.stopped_by

    def _start_sending(self, *, at_once: bool = True) -> None:
        """Have the committed events sent, in order, by the one sender task (on this loop):
        ``SEND_WINDOW_SECONDS`` from now unless ``at_once`` (a sender already running sends
        whatever has committed when it is done with its batch)."""
        if at_once and self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None
        if not self._outbox or (self._sender is not None and not self._sender.done()):
            return
        if not at_once and SEND_WINDOW_SECONDS > 0:
            if self._send_timer is None:
                self._send_timer = asyncio.get_running_loop().call_later(
                    SEND_WINDOW_SECONDS, self._start_sending
                )
            return
        self._sender = asyncio.get_running_loop().create_task(self._send_outbox())

    async def _send_outbox(self) -> None:
        while self._outbox:
            batch = list(self._outbox)  # what has committed so far, in seq order
            try:
                await events.send_many_async(
                    [event for event, _ in batch], to_layer=[to_layer for _, to_layer in batch]
                )
            except Exception as error:  # noqa: BLE001 (raised on the next callback)
                self._send_error = error
                return
            for _ in batch:
                self._outbox.popleft()

    def take_committed(self, events: list[dict[str, Any]]) -> None:
        """Events of the run that another thread has just committed (``delivery.send_through``):
        sent by this observer's sender, after the committed events it has not sent yet (their
        seqs are lower: the run row's lock orders the commits). Callable from any thread, once
        ``listen_for_committed`` has run on the loop."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._take_committed, events)

    def listen_for_committed(self) -> None:
        """Take the events that others commit for the run (``take_committed``) while this
        execution runs; call it on the execution's loop, and ``stop_listening`` at its end."""
        self._loop = asyncio.get_running_loop()
        delivery.send_through(self.recorder.run_id, self.take_committed)

    def stop_listening(self) -> None:
        delivery.send_through(self.recorder.run_id, None)

    def _take_committed(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            # In seq order: the recorder's thread may append an earlier commit a moment later.
            at = len(self._outbox)
            while at > 0 and self._outbox[at - 1][0]["seq"] > event["seq"]:
                at -= 1
            self._outbox.insert(at, (event, True))
        self._start_sending()

    def _raise_send_error(self) -> None:
        error, self._send_error = self._send_error, None
        if error is not None:
            raise error

    async def flush(self) -> None:
        """Wait until the callbacks taken are stored (what storing raised is not raised here),
        then send every committed event not sent yet, in seq order; raise if a send failed."""
        await self._writer_done()
        self._start_sending()
        while self._sender is not None and not self._sender.done():
            await asyncio.shield(self._sender)
            self._start_sending()
        self._raise_send_error()

    # The engine's records are changed by the engine after a callback returns (a step's status,
    # response, attempts): a callback stored later stores them as they were when it came.

    async def planning(self, round: int) -> None:
        await self._call("planning", round)

    async def plan_created(self, plan: PlanRecord, steps: Sequence[StepRecord]) -> None:
        await self._call("plan_created", plan, [copy.copy(step) for step in steps])

    async def step_started(self, step: StepRecord) -> None:
        await self._call("step_started", copy.copy(step))
        if self.write_behind:
            # A step's start is stored before its model is called (the engine calls it when
            # this returns): a step sent to its model is never recorded as never run, and an
            # execution cancelled or taken over meanwhile makes no call.
            await self.stored_through(self._taken)
            if self.stopped_by is not None:
                raise self.stopped_by

    async def step_finished(self, step: StepRecord) -> None:
        await self._call("step_result", copy.copy(step))

    async def step_failed(self, step: StepRecord) -> None:
        await self._call("step_result", copy.copy(step))

    async def run_finished(self, result: RunResult) -> None:
        score, grading_error = None, ""
        if self.reference and result.status == "succeeded":
            # Grading code answers runs a sandbox process: keep it off the database thread.
            try:
                score = await sync_to_async(grade_answer, thread_sensitive=False)(
                    answer=result.answer, reference=self.reference, grader=self.grader
                )
            except GradingUnavailable as error:
                grading_error = f"Not graded: {error}"
        try:
            await self._call("run_finished", result, score, grading_error, self.grader)
            await self.written()
        except BaseException:
            # What is stored goes out; a failed send never hides what stopped the run.
            with contextlib.suppress(Exception):
                await self.flush()
            raise
        await self.flush()
