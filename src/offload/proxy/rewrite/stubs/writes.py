"""The store writes a rewrite starts and does not wait for.

A stub names what it replaces by the hash of its content, which is known before anything
is written, so storing that content need not sit between the client's request and the
upstream: the rewrite hands each write to one writer thread and the request goes upstream
at once, while the write runs beside the model's prefill. What the client is told stays
true: the answer's completion (the last chunk of a stream, the body of a whole answer) is
held until every write submitted before its rewrite ended is durable (:class:`Held`), so
no acknowledged answer names content that is not stored, and a read of a reference after
the answer always finds it. A write that fails fails the answers held behind it (their
clients get an error, never a silently dangling stub) and is reported to ``on_failed``,
so the rewrite stores that content again the next time it needs it.

One writer thread, first in first out: the store takes one write transaction at a time
anyway, and a single order means "every write up to ticket N is done" is one number. The
same content asked for twice while its write is pending is written once. The thread
exits when the queue is empty and starts again with the next write; :meth:`Writes.flush`
(at a clean stop, and after each turn of ``offload replay``) waits for all of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from offload.errors import StoreBusy, StoreError

log = logging.getLogger("offload.proxy")

#: Failed writes remembered to fail the answers held behind them (older ones have no
#: answer left waiting: an answer waits at most its timeout).
FAILURES_KEPT = 64


@dataclass
class _Job:
    ticket: int
    key: str  # what it writes (a content's hash): one write per key at a time
    run: Callable[[], object]


@dataclass
class Figures:
    """What the writer did so far: for ``/api/stats`` and ``offload replay``."""

    writes: int = 0
    failed: int = 0
    cpu_s: float = 0.0  # the writer thread's CPU time spent in writes
    pending: int = 0
    waited: int = 0  # answers whose completion found writes still pending


@dataclass
class Writes:
    """The writer: :meth:`submit` a write, :meth:`held` what an answer must wait for."""

    on_failed: Callable[[str, BaseException], None] | None = None
    _cond: threading.Condition = field(init=False, default_factory=threading.Condition)
    _queue: deque[_Job] = field(init=False, default_factory=deque)
    _keys: dict[str, int] = field(init=False, default_factory=dict)  # pending key: ticket
    _submitted: int = field(init=False, default=0)
    _done: int = field(init=False, default=0)
    _failures: deque[tuple[int, BaseException]] = field(init=False, default_factory=deque)
    _running: bool = field(init=False, default=False)
    _figures: Figures = field(init=False, default_factory=Figures)

    def submit(self, key: str, run: Callable[[], object]) -> None:
        """Write later: ``run`` in the writer thread, unless a write of ``key`` is pending
        (the same content from two requests at once is written once)."""
        with self._cond:
            if key in self._keys:
                return
            self._submitted += 1
            self._keys[key] = self._submitted
            self._queue.append(_Job(self._submitted, key, run))
            if not self._running:
                self._start()

    def _start(self) -> None:
        """Start the writer thread (holding the condition). A thread that cannot start
        (the system's limit reached) leaves the writes queued for the next submit, and the
        answers held behind them get their timeout's error."""
        self._running = True
        try:
            threading.Thread(target=self._work, name="offload-writes", daemon=True).start()
        except RuntimeError as exc:
            self._running = False
            log.warning("the store writer thread could not start: %s", exc)

    def pending(self, key: str) -> bool:
        """Whether a write of ``key`` is submitted and not done."""
        with self._cond:
            return key in self._keys

    def held(self, since: int | None = None) -> Held:
        """What an answer whose rewrite ends now must wait for: every write submitted so
        far, and the failure of any done after ticket ``since`` (:meth:`done` when its
        rewrite started: a write of its own that failed before the rewrite ended is still
        its failure); without ``since``, those not done yet."""
        with self._cond:
            return Held(
                self, self._done if since is None else min(since, self._done), self._submitted
            )

    def wait(self, after: int, upto: int, timeout: float | None = None) -> None:
        """Block until every write up to ticket ``upto`` is done; raise the error of one
        that failed among those after ticket ``after`` (:class:`StoreBusy` on timeout)."""
        with self._cond:
            self._until(upto, timeout)
            for ticket, exc in self._failures:
                if after < ticket <= upto:
                    raise exc

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every write submitted so far is done (their errors are not raised
        here: the answers held behind them got them)."""
        with self._cond:
            self._until(self._submitted, timeout)

    def done(self) -> int:
        """The ticket up to which every write is done."""
        with self._cond:
            return self._done

    def _until(self, upto: int, timeout: float | None) -> None:
        """Wait (holding the condition) until the writes up to ``upto`` are done."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._done < upto:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise StoreBusy(
                    f"the store did not take this answer's writes within {timeout:g} s;"
                    " retry the request"
                )
            self._cond.wait(left)

    def figures(self) -> Figures:
        """A copy of the writer's figures."""
        with self._cond:
            f = self._figures
            return Figures(f.writes, f.failed, f.cpu_s, len(self._keys), f.waited)

    def note_wait(self) -> None:
        """Count an answer that had to wait for its writes."""
        with self._cond:
            self._figures.waited += 1

    def _work(self) -> None:
        """The writer thread: run the queue's writes in order, then exit. Whatever a write
        or the failure report raises is that write's failure: the thread never ends with
        writes queued and itself still counted as running (then no write ran again, and
        every answer after waited for its timeout)."""
        ended = False
        try:
            while True:
                with self._cond:
                    if not self._queue:
                        self._running = False
                        ended = True
                        return
                    job = self._queue.popleft()
                self._run(job)
        finally:
            if not ended:  # left by an error of its own: the next writer takes the queue
                with self._cond:
                    self._running = False
                    if self._queue:
                        self._start()

    def _run(self, job: _Job) -> None:
        started = time.thread_time()
        failed: BaseException | None = None
        try:
            job.run()
        except Exception as exc:  # noqa: BLE001 - handed to the answers held behind it
            failed = exc
        except BaseException as exc:  # noqa: BLE001 - as an error the answers can report
            failed = StoreError(f"store write failed: {type(exc).__name__}: {exc}")
        spent = time.thread_time() - started
        with self._cond:
            self._figures.writes += 1
            self._figures.cpu_s += spent
            self._keys.pop(job.key, None)
            if failed is not None:
                self._figures.failed += 1
                self._failures.append((job.ticket, failed))
                while len(self._failures) > FAILURES_KEPT:
                    self._failures.popleft()
            self._done = job.ticket
            self._cond.notify_all()
        if failed is not None and self.on_failed is not None:
            try:
                self.on_failed(job.key, failed)
            except Exception:  # a report that fails must not stop the writer
                log.exception("reporting the failed write of %s failed", job.key[:12])


@dataclass(frozen=True)
class Held:
    """What one answer waits for before it completes: the writes submitted up to ticket
    ``upto``, of which those after ``after`` were still pending when its rewrite ended."""

    writes: Writes | None = None
    after: int = 0
    upto: int = 0

    def pending(self) -> bool:
        """Whether the answer would have to wait now (cheap: no thread hop needed when
        not)."""
        if self.writes is None or self.upto <= self.after:
            return False
        return self.writes.done() < self.upto

    def wait(self, timeout: float | None = None) -> None:
        """Block until the writes are durable; raise the error of one that failed."""
        if self.writes is not None and self.upto > self.after:
            self.writes.wait(self.after, self.upto, timeout)


#: An answer with nothing to wait for.
NOTHING = Held()


async def settled(held: Held, timeout: float | None) -> None:
    """Wait (off the event loop) until ``held``'s writes are durable; raise the error of
    one that failed (:class:`StoreBusy` when they take longer than ``timeout``). No thread
    hop when nothing is pending, as on nearly every answer: the writes run beside the
    upstream's prefill, which takes longer."""
    if held.pending() and held.writes is not None:
        held.writes.note_wait()
        await anyio.to_thread.run_sync(held.wait, timeout)
    else:
        held.wait(timeout)
