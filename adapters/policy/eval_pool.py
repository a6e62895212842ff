"""The embedded engine's evaluation threads, which a stuck evaluation cannot take over.

regopy cannot cancel an evaluation once it runs, and a thread cannot be stopped from
outside. So when the caller of an evaluation gives up (the policy timeout cancels it), its
thread is abandoned: it finishes the evaluation on its own and is then retired or, when the
pool is short, taken back; a fresh thread takes its place at once. One slow evaluation
thus costs one thread's CPU while it lasts, never the other requests' turn. At most
`max_abandoned` threads may run abandoned at once: past that no replacement is started
(the pool runs short until one finishes), which bounds the threads a policy that never
finishes can pin.

Admission control: when `max_waiting` evaluations already wait for a thread, the next is
refused at once (PolicyUnavailable) rather than left to time out in the queue. Each wait
for a thread, whether it got one or its caller gave up, is reported to the observer
(metrics: the queue's wait-time histogram).

Every bookkeeping step runs on the event loop; the threads only run the evaluation and
hand the outcome back with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gateway.errors import PolicyUnavailable
from gateway.ports import EvaluationQueueStats

T = TypeVar("T")


@dataclass(slots=True)
class _Job(Generic[T]):
    call: Callable[[], T]
    done: asyncio.Future[T]


class _Worker:
    def __init__(self, pool: EvaluationPool, name: str) -> None:
        self.abandoned = False
        self.jobs: queue.SimpleQueue[_Job[Any] | None] = queue.SimpleQueue()
        # Daemon: a thread stuck in an evaluation that never ends must not hold up the exit.
        self._thread = threading.Thread(target=self._run, args=(pool,), name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.jobs.put(None)

    def _run(self, pool: EvaluationPool) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                outcome: tuple[Any, BaseException | None] = (job.call(), None)
            except BaseException as exc:  # handed to the caller, whatever it is
                outcome = (None, exc)
            try:
                pool.loop.call_soon_threadsafe(pool.finished, self, job, *outcome)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return


class EvaluationPool:
    def __init__(self, threads: int, *, max_abandoned: int, max_waiting: int, name: str) -> None:
        self._size = threads
        self._max_abandoned = max_abandoned
        self._max_waiting = max_waiting
        self._name = name
        self._numbers = itertools.count(1)
        self._idle: list[_Worker] = []
        self._waiters: deque[asyncio.Future[_Worker]] = deque()
        self._live = 0  # threads started and not abandoned
        self._running = 0
        self._abandoned = 0
        self._started = 0
        self._refused = 0
        self._observe_wait: Callable[[float], None] | None = None
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    def stats(self) -> EvaluationQueueStats:
        return EvaluationQueueStats(
            self._size,
            self._running,
            len(self._waiters),
            self._abandoned,
            self._started,
            self._refused,
        )

    def observe_waits(self, observe: Callable[[float], None]) -> None:
        self._observe_wait = observe

    @property
    def stuck(self) -> bool:
        """No thread can take an evaluation, nor can one be added, until an abandoned one finishes."""
        return self._live == 0 and not self._spawn_allowed()

    async def run(self, call: Callable[[], T]) -> T:
        """`call` in one of the pool's threads. Cancelling the caller abandons that thread."""
        if self._closed:
            raise PolicyUnavailable("The policy engine is shutting down; the request was refused.")
        self._loop = asyncio.get_running_loop()
        worker = self._take()
        if worker is None:
            worker = await self._wait_for_worker()
        elif self._observe_wait is not None:
            self._observe_wait(0.0)
        self._started += 1
        self._running += 1
        job: _Job[T] = _Job(call, self.loop.create_future())
        worker.jobs.put(job)
        try:
            return await job.done
        except asyncio.CancelledError:
            if not job.done.done() or job.done.cancelled():
                self._abandon(worker)
            raise

    def finished(self, worker: _Worker, job: _Job[Any], value: Any, error: BaseException | None) -> None:
        """On the loop: a thread is done with its job."""
        if not job.done.done():
            if error is None:
                job.done.set_result(value)
            else:
                job.done.set_exception(error)
        if worker.abandoned:
            self._abandoned -= 1
            if self._closed or self._live >= self._size:
                worker.stop()
                return
            worker.abandoned = False
            self._live += 1
        else:
            self._running -= 1
        self._release(worker)

    def close(self) -> None:
        self._closed = True
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()
        for worker in self._idle:
            worker.stop()
        self._idle.clear()

    async def _wait_for_worker(self) -> _Worker:
        if len(self._waiters) >= self._max_waiting:
            self._refused += 1
            raise PolicyUnavailable(
                f"{self._max_waiting} policy evaluations are already waiting; the request was refused."
            )
        waiter: asyncio.Future[_Worker] = self.loop.create_future()
        self._waiters.append(waiter)
        queued_at = time.perf_counter()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release(waiter.result())  # handed a thread just as the caller gave up
            else:
                self._waiters.remove(waiter)
            raise
        finally:
            if self._observe_wait is not None:
                self._observe_wait(time.perf_counter() - queued_at)

    def _take(self) -> _Worker | None:
        if self._idle:
            return self._idle.pop()
        return self._spawn()

    def _spawn_allowed(self) -> bool:
        return self._live < self._size and self._live + self._abandoned < self._size + self._max_abandoned

    def _spawn(self) -> _Worker | None:
        if not self._spawn_allowed():
            return None
        self._live += 1
        return _Worker(self, f"{self._name}-{next(self._numbers)}")

    def _abandon(self, worker: _Worker) -> None:
        worker.abandoned = True
        self._running -= 1
        self._live -= 1
        self._abandoned += 1
        while self._waiters:  # a replacement, if allowed, serves the next in line at once
            replacement = self._spawn()
            if replacement is None:
                return
            self._release(replacement)

    def _release(self, worker: _Worker) -> None:
        if self._closed:
            self._live -= 1
            worker.stop()
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(worker)
                return
        self._idle.append(worker)
