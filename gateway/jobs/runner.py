"""The life of a job, after its submission: claimed, attempted, retried, finished.

    claim (when the pull gate allows) -> thaw -> forward (or the upstream's own queue)
        -> response guards -> finishers (settle, audit, metrics) -> store the result -> notify

The request-side stages ran at submission (gateway/jobs/submit.py); each worker process runs
one `JobRunner`, which claims jobs while synchronous load allows and runs the rest of the same
pipeline for each. A capacity error (3040, 429, 503, a timeout: any error another attempt may
cure) sends the job back to the queue with a backoff until its completion window ends; only
then does it fail, with the last error as its reason. The finishers run once, for the final
attempt, so a job is charged once: settle is idempotent by reservation id, so even a job
whose worker died between settling and storing its result, and which another worker then
ran again, is charged once.

A job whose first candidate queues natively (a `QueueingUpstream`, e.g. Workers AI with
`queueRequest`) is handed to that queue and polled with backoff, each poll a claim of its
own: no connection, no task is held while the upstream works.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import orjson

from gateway.errors import GatewayError, InternalError, StateStoreUnavailable, UpstreamError, UpstreamTimeout
from gateway.exchange import Attempt, Exchange
from gateway.jobs import results, snapshot, webhooks
from gateway.jobs.counters import JobCounters
from gateway.jobs.pull_gate import THROTTLE_CODES, PullGate
from gateway.jobs.records import Claim, JobResult, JobState, NewJob
from gateway.jobs.snapshot import NativeRef, Thawing
from gateway.jobs.store import JobStore
from gateway.jobs.webhooks import Webhooks
from gateway.pipeline import Pipeline
from gateway.ports import QueueingUpstream, UpstreamRequest
from gateway.tracing import NO_TRACER, Tracer

if TYPE_CHECKING:
    from gateway.doors.base import Door

logger = logging.getLogger("tollgate.jobs")

_PURGE_EVERY_S = 60.0
_CANCEL_CHECK_S = 0.5
_CLOSE_GRACE_S = 10.0  # on shutdown, jobs under way get this long to finish


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    concurrency: int
    upstream_concurrency: int  # of those, waiting on the upstream at once
    claim_batch: int
    idle_poll_s: float
    visibility_s: float
    attempt_s: float  # one attempt's deadline
    retry_base_s: float
    retry_max_s: float
    native_poll_s: float
    native_poll_max_s: float
    results_keep_s: float
    webhook_attempts: int = 8


class JobRunner:
    def __init__(
        self,
        store: JobStore,
        pipeline: Callable[[], Pipeline],
        thawing: Thawing,
        gate: PullGate,
        settings: RunnerSettings,
        tracer: Tracer = NO_TRACER,
        webhooks: Webhooks | None = None,
        counters: JobCounters | None = None,
        clock: Callable[[], float] = time.time,
        doors: Callable[[str], Door | None] | None = None,
    ) -> None:
        self._store = store
        self._doors = doors  # a door by its API's name: the one a job came through renders its answer
        self._pipeline = pipeline  # the one in force: a config edit swaps it
        self._thawing = thawing
        self._gate = gate
        self._settings = settings
        self._tracer = tracer
        self._webhooks = webhooks
        self._clock = clock
        self.worker = f"{os.uname().nodename}:{os.getpid()}:{os.urandom(3).hex()}"
        self.counters = counters if counters is not None else JobCounters()
        self._running: set[asyncio.Task[None]] = set()
        self._upstream_slots = asyncio.Semaphore(settings.upstream_concurrency)
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False
        self._cancel_checks: dict[str, tuple[float, bool]] = {}  # batch id -> (when read, cancelled)
        self._webhook_attempts = settings.webhook_attempts

    @property
    def running(self) -> int:
        return len(self._running)

    def start(self) -> None:
        self._loop_task = asyncio.ensure_future(self._pull())

    def wake(self) -> None:
        """A job was just submitted in this process: look now rather than at the next poll."""
        self._wake.set()

    def batch_cancelled(self, batch_id: str) -> None:
        """A batch was cancelled through this process: its lines held here stop at once, not
        when this process's reused answer to "cancelled?" runs out."""
        self._cancel_checks[batch_id] = (time.monotonic(), True)

    async def aclose(self, grace_s: float = _CLOSE_GRACE_S) -> None:
        """Stop pulling; jobs under way get `grace_s` to finish, then go back to the queue
        (a job cut short runs again elsewhere: nothing was settled or stored for it)."""
        self._closing = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop_task
        running = list(self._running)
        if running:
            await asyncio.wait(running, timeout=grace_s)
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def release(self, job: NewJob) -> None:
        """A cancelled job's reservation given back: its finishers run, with nothing spent."""
        if not job.payload:
            return
        exchange = snapshot.thaw(snapshot.decode(job.payload), job.id, 1.0, self._thawing)
        exchange.status, exchange.error_code = 499, results.CANCELLED
        await self._pipeline().finish(exchange)

    async def _pull(self) -> None:
        settings = self._settings
        next_purge = time.monotonic() + _PURGE_EVERY_S
        while not self._closing:
            free = settings.concurrency - len(self._running)
            claimed: list[Claim] = []
            if free > 0 and self._gate.allows():
                try:
                    claimed = await self._store.claim(
                        self.worker, min(free, settings.claim_batch), settings.visibility_s
                    )
                except StateStoreUnavailable as exc:
                    logger.warning("job store unavailable: %s", exc)
                except Exception:
                    logger.exception("claiming jobs failed")
            for claim in claimed:
                task = asyncio.ensure_future(self._run(claim))
                self._running.add(task)
                task.add_done_callback(self._ran)
            if time.monotonic() >= next_purge:
                next_purge = time.monotonic() + _PURGE_EVERY_S
                with contextlib.suppress(Exception):
                    await self._store.purge()
            if claimed and len(claimed) == min(free, settings.claim_batch):
                await asyncio.sleep(0)  # more may be waiting: look again at once, after yielding
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(settings.idle_poll_s):
                    await self._wake.wait()

    def _ran(self, task: asyncio.Task[None]) -> None:
        """A slot is free: the pull loop looks for the next job now, not at its next poll."""
        self._running.discard(task)
        self._wake.set()

    async def _run(self, claim: Claim) -> None:
        heartbeat = asyncio.ensure_future(self._extend(claim))
        try:
            await self._gate.step()  # a claimed batch starts paced, and not while a sync call is in flight
            document = snapshot.decode(claim.payload)
            if document.get("kind") == webhooks.KIND:
                await self._deliver(claim, document)
            else:
                await self._attempt(claim, document)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # the worker is stopping: the job goes back now
                await self._store.retry_later(claim, 0, "shutdown")
            raise
        except Exception:
            logger.exception("job attempt failed", extra={"request_id": claim.id})
            with contextlib.suppress(Exception):
                await self._store.retry_later(claim, self._backoff(claim.attempt), "internal_error")
        finally:
            heartbeat.cancel()

    async def _extend(self, claim: Claim) -> None:
        every = self._settings.visibility_s / 3
        while True:
            await asyncio.sleep(every)
            with contextlib.suppress(StateStoreUnavailable):
                if not await self._store.extend(claim, self._settings.visibility_s):
                    return

    async def _attempt(self, claim: Claim, document: dict[str, Any]) -> None:
        window_left = claim.expires_at - self._clock()
        exchange = snapshot.thaw(
            document, claim.id, max(0.001, min(self._settings.attempt_s, window_left)), self._thawing
        )
        door = self._door(exchange, document)
        render = door.error if door is not None else results.openai_render
        exchange.trace = trace = self._tracer.begin(exchange)
        keep_s = self._settings.results_keep_s
        try:
            if await self._batch_cancelled(claim):
                raise results.JobCancelled("cancelled")
            if window_left <= 0:
                raise results.JobExpired("expired")
            async with self._upstream_slots:
                await self._gate.step()  # holding a slot: nothing is sent while it waits
                if await self._batch_cancelled(claim):  # cancelled while it waited
                    raise results.JobCancelled("cancelled")
                body = await self._answer(exchange, claim, document)
            if body is None:  # handed to, or still pending in, the upstream's own queue
                exchange.status = 202
                trace.end(exchange)
                return
            exchange.status = 200
            exchange.first_byte_at = time.monotonic()
            answer = await door.response(exchange, body) if door is not None else orjson.dumps(body)
            result = results.succeeded(answer, keep_s)
        except results.JobExpired:
            result = results.expired(document.get("last_error"), keep_s, render)
            exchange.status, exchange.error_code = 408, results.EXPIRED
        except results.JobCancelled:
            result = results.cancelled(keep_s, render)
            exchange.status, exchange.error_code = 499, results.CANCELLED
        except GatewayError as exc:
            failure = await self._failure(exc, claim, document, window_left, render)
            if failure is None:  # back to the queue: nothing settles, nothing is stored
                trace.end(exchange)
                return
            result = failure
            exchange.status, exchange.error_code = failure.status, failure.code
        except Exception:
            logger.exception("job failed", extra={"request_id": claim.id})
            error = InternalError(claim.id)
            exchange.status, exchange.error_code = error.status, error.code
            result = results.failed(error, keep_s, render)
        exchange.response_body = result.body
        await self._gate.step()
        try:
            await self._pipeline().finish(exchange)  # settle first: a result stored is a request charged
        finally:
            trace.end(exchange)
        await self._end(claim, result)

    def _door(self, exchange: Exchange, document: dict[str, Any]) -> Door | None:
        """The translating door the job came through, its state restored (None: an OpenAI
        door, or one no longer open, whose answer is then the internal one)."""
        held = snapshot.door_of(document)
        door = self._doors(held[0]) if held is not None and self._doors is not None else None
        if door is None or held is None:
            return None
        exchange.door = door
        door.resume(exchange, held[1])
        return door

    async def _answer(
        self, exchange: Exchange, claim: Claim, document: dict[str, Any]
    ) -> dict[str, Any] | None:
        native = snapshot.native_of(document)
        if native is None and exchange.candidates:
            first = exchange.candidates[0]
            upstream = self._pipeline().forwarder.upstream(first.upstream)
            if _queueing(upstream) and upstream.queues(first.model):
                native = NativeRef(first.upstream, first.model, "")
        if native is None:
            return await self._pipeline().respond(exchange)
        return await self._native(exchange, claim, document, native)

    async def _native(
        self, exchange: Exchange, claim: Claim, document: dict[str, Any], native: NativeRef
    ) -> dict[str, Any] | None:
        upstream = self._pipeline().forwarder.upstream(native.upstream)
        assert isinstance(upstream, QueueingUpstream)
        now = time.monotonic()
        attempt = Attempt(native.upstream, native.model, now)
        exchange.attempts.append(attempt)
        remaining = exchange.deadline - now
        request = UpstreamRequest(
            endpoint=exchange.endpoint,
            model=native.model,
            body=exchange.body,
            stream=False,
            request_id=exchange.upstream_request_id,
            deadline=exchange.deadline,
            first_byte_timeout=remaining,
            headers_timeout=remaining,
            session_key=exchange.session_key,
            trace_headers=exchange.trace.upstream_headers(attempt, upstream),
        )
        try:
            if not native.request_id:
                queued_id = await upstream.enqueue(request, claim.id)
                ref = NativeRef(native.upstream, native.model, queued_id)
                await self._later(claim, document, ref, "upstream_queued")
                return None
            response = await upstream.poll(request, native.request_id, claim.id)
        except UpstreamError as exc:
            attempt.ended_at, attempt.status, attempt.error = time.monotonic(), exc.status, exc.code
            self._pipeline().guard_error(exchange, exc)
            raise
        attempt.ended_at = time.monotonic()
        if response is None:
            polled = NativeRef(native.upstream, native.model, native.request_id, native.polls + 1)
            await self._later(claim, document, polled, "upstream_pending")
            return None
        attempt.status = 200
        return self._pipeline().guard_response(exchange, response.body)

    async def _later(self, claim: Claim, document: dict[str, Any], ref: NativeRef, cause: str) -> None:
        delay = min(self._settings.native_poll_max_s, self._settings.native_poll_s * 2 ** min(ref.polls, 16))
        payload = snapshot.encode(snapshot.with_native(document, ref))
        await self._store.retry_later(claim, delay, cause, payload)

    async def _batch_cancelled(self, claim: Claim, fresh: bool = False) -> bool:
        """A line of a batch being cancelled does not start, nor go back to the queue. Before
        a start the answer is reused for `_CANCEL_CHECK_S` (a cancel stops new starts within
        that long); before going back to the queue it is read `fresh`."""
        if claim.batch_id is None:
            return False
        now = time.monotonic()
        known = self._cancel_checks.get(claim.batch_id)
        if not fresh and known is not None and now - known[0] < _CANCEL_CHECK_S:
            return known[1]
        view = await self._store.batch(claim.tenant, claim.batch_id)
        cancelled = view is not None and view.cancel_requested_at is not None
        if len(self._cancel_checks) > 1024:
            self._cancel_checks.clear()
        self._cancel_checks[claim.batch_id] = (now, cancelled)
        return cancelled

    async def _failure(
        self,
        error: GatewayError,
        claim: Claim,
        document: dict[str, Any],
        window_left: float,
        render: results.Render,
    ) -> JobResult | None:
        """The job's result after a failed attempt, or None when it went back to the queue."""
        keep_s = self._settings.results_keep_s
        if not (isinstance(error, UpstreamError) and error.retryable):
            return results.failed(error, keep_s, render)
        if await self._batch_cancelled(claim, fresh=True):
            return results.cancelled(keep_s, render)
        if self._clock() + self._backoff(claim.attempt) < claim.expires_at:
            await self._retry(claim, document, error)
            return None
        # Another try would come after the window: the job ends. Its reason is this error,
        # unless this attempt was only cut short by the window's end (then the one before it).
        cut_short = isinstance(error, UpstreamTimeout) and window_left < self._settings.attempt_s
        reason = document.get("last_error") if cut_short and document.get("last_error") else _cause(error)
        return results.expired(reason, keep_s, render)

    async def _retry(self, claim: Claim, document: dict[str, Any], error: GatewayError) -> None:
        cause = error.code or "upstream_error"
        self.counters.retries[cause] += 1
        if cause in THROTTLE_CODES:
            self._gate.throttled()
        delay = self._backoff(claim.attempt)
        if isinstance(error, UpstreamError) and error.retry_after:
            delay = max(delay, error.retry_after)
        # A job handed to an upstream's queue whose poll failed goes on polling the same id.
        payload = snapshot.encode({**document, "last_error": _cause(error)})
        await self._store.retry_later(claim, delay, cause, payload)

    def _backoff(self, attempt: int) -> float:
        settings = self._settings
        ceiling = min(settings.retry_max_s, settings.retry_base_s * float(2 ** min(attempt - 1, 20)))
        return ceiling * random.uniform(0.5, 1)

    async def _deliver(self, claim: Claim, document: dict[str, Any]) -> None:
        """A webhook delivery: posted, then finished, or retried after a backoff while attempts remain."""
        hooks = self._webhooks
        delivered = await hooks.deliver(claim, document) if hooks is not None else None
        if delivered is False and hooks is not None and claim.attempt < self._webhook_attempts:
            self.counters.retries["webhook_failed"] += 1
            await self._store.retry_later(claim, hooks.retry_in(claim.attempt), "webhook_failed")
            return
        state = (
            JobState.SUCCEEDED if delivered else JobState.FAILED if delivered is False else JobState.CANCELLED
        )
        await self._store.finish(claim, JobResult(state, 200 if delivered else 502, b"{}", webhooks.KEEP_S))

    async def _end(self, claim: Claim, result: JobResult) -> None:
        if not await self._store.finish(claim, result):
            return  # the claim lapsed and another worker holds the job: its end is theirs
        self.counters.finished(result.state.value, max(0.0, self._clock() - claim.created_at))
        if self._webhooks is not None:
            try:
                await self._webhooks.notify(claim, result)
            except Exception:
                logger.exception("job notification failed", extra={"request_id": claim.id})


_QUEUEING: dict[type, bool] = {}


def _queueing(upstream: object) -> TypeGuard[QueueingUpstream]:
    """isinstance() against a runtime-checkable Protocol walks its members at every call: per
    job, about a tenth of its event loop CPU (py-spy, `python -m bench.jobs`). The protocol's
    members are methods, so an upstream's class decides, once."""
    kind = type(upstream)
    known = _QUEUEING.get(kind)
    if known is None:
        known = _QUEUEING[kind] = isinstance(upstream, QueueingUpstream)
    return known


def _cause(error: GatewayError) -> str:
    return f"{error.code or 'upstream_error'}: {error.message[:200]}"
