"""forward: attempts until one succeeds, the deadline passes, or every candidate has failed.

Candidates are tried in order. For each, the upstream's pool chooses the replica (session
affinity, load, health); a retryable failure gets up to `retries` more attempts on other
replicas of the same upstream (or on the same one after its Retry-After, when nothing else
is left), then the next candidate is tried. Each attempt gets what remains of the deadline.

A stream counts as answered at its first chunk. Until then a failure can be retried
elsewhere; after it nothing is, because bytes have reached the client.

Replicas whose circuits are open are skipped. When that leaves nothing at all to try, the
candidates are tried once more regardless, so no request is refused on health records alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gateway import cohorts
from gateway.errors import UpstreamError, UpstreamTimeout
from gateway.exchange import Attempt, Candidate, Exchange
from gateway.ports import Chunk, ChunkStream, Upstream, UpstreamRequest, UpstreamResponse
from gateway.routing.pool import ReplicaPool
from gateway.routing.retry import counts_against_replica, estimated_prompt_tokens
from gateway.routing.upstream_route import UpstreamRoute

T = TypeVar("T")

# A timeout this close to the request's deadline was the deadline's, not the replica's.
_DEADLINE_SLACK_S = 0.02


@dataclass(slots=True)
class OpenStream:
    stream: ChunkStream
    chunks: AsyncIterator[Chunk]
    first: Chunk | None  # None when the upstream ended the stream without a chunk
    upstream: Upstream


class _LeasedStream:
    """A started stream that gives its replica's in-flight slot back when it is closed."""

    __slots__ = ("_pool", "_ready", "_replica", "_stream")

    def __init__(self, stream: ChunkStream, pool: ReplicaPool, replica: int) -> None:
        self._stream = stream
        self._ready: Callable[[], int] | None = getattr(stream, "ready", None)
        self._pool: ReplicaPool | None = pool
        self._replica = replica

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return aiter(self._stream)

    def ready(self) -> int:
        """Chunks the stream hands out without waiting for the upstream (0 if it cannot tell)."""
        return self._ready() if self._ready is not None else 0

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            pool, self._pool = self._pool, None
            if pool is not None:
                pool.release(self._replica, answered=True)


class _Try:
    """What every attempt of one forwarded request shares."""

    __slots__ = ("body", "exchange", "prompt_tokens")

    def __init__(self, exchange: Exchange, body: dict[str, Any], prompt_tokens: int) -> None:
        self.exchange = exchange
        self.body = body
        self.prompt_tokens = prompt_tokens


Send = Callable[[_Try, UpstreamRoute, Candidate, int, float], Awaitable[T]]


class Forwarder:
    def __init__(
        self, routes: Mapping[str, UpstreamRoute], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._routes = dict(routes)
        self._clock = clock

    def upstream(self, name: str) -> Upstream:
        return self._routes[name].upstream

    def pool(self, name: str) -> ReplicaPool:
        return self._routes[name].pool

    async def complete(self, exchange: Exchange) -> UpstreamResponse:
        return await self._forward(exchange, self._complete_once)

    async def open_stream(self, exchange: Exchange) -> OpenStream:
        return await self._forward(exchange, self._open_once)

    async def _forward(self, exchange: Exchange, send: Send[T]) -> T:
        await cohorts.together()
        body: dict[str, Any] = exchange.body
        if exchange.stream:
            # Always ask for usage so it can be metered; the usage guard hides it from
            # clients that did not ask.
            options = body.get("stream_options")
            body = {**body, "stream_options": {**(options or {}), "include_usage": True}}
        shared = _Try(exchange, body, estimated_prompt_tokens(len(exchange.raw_body)))
        last: UpstreamError | None = None
        # First pass: replicas in good health only. Second, only if the first tried nothing: any.
        for respect_health in (True, False):
            attempted = False
            candidates = exchange.candidates
            for position, candidate in enumerate(candidates):
                route = self._routes[candidate.upstream]
                fallback_left = position + 1 < len(candidates)
                tried: set[int] = set()
                made = 0
                while True:
                    now = self._clock()
                    remaining = exchange.deadline - now
                    if remaining <= 0:
                        raise last or _deadline_passed()
                    replica = route.pool.acquire(exchange.session_key, tried, respect_health)
                    if replica is None:
                        wait = (
                            route.policy.retry_after_wait(last, remaining, fallback_left)
                            if made and last is not None
                            else None
                        )
                        if wait is None:
                            break
                        await asyncio.sleep(wait)
                        tried.clear()  # the upstream said when to come back, and it is now
                        continue
                    made += 1
                    attempted = True
                    try:
                        return await send(shared, route, candidate, replica, now)
                    except UpstreamError as exc:
                        last = exc
                        if not route.policy.may_retry(exc, made):
                            break
                        tried.add(replica)
            if attempted:
                break
        raise last or _deadline_passed()

    async def _complete_once(
        self, shared: _Try, route: UpstreamRoute, candidate: Candidate, replica: int, now: float
    ) -> UpstreamResponse:
        pool = route.pool
        attempt = self._begin(shared.exchange, candidate, replica, now)
        try:
            response = await route.upstream.complete(self._request(shared, route, candidate, replica, now))
        except UpstreamError as exc:
            self._fail(shared.exchange, attempt, pool, replica, exc)
            raise
        finally:
            pool.release(replica)
        self._succeed(attempt, pool, replica, response.status)
        return response

    async def _open_once(
        self, shared: _Try, route: UpstreamRoute, candidate: Candidate, replica: int, now: float
    ) -> OpenStream:
        pool = route.pool
        upstream = route.upstream
        attempt = self._begin(shared.exchange, candidate, replica, now)
        stream: ChunkStream | None = None
        try:
            stream = await upstream.stream(self._request(shared, route, candidate, replica, now))
            chunks = aiter(stream)
            first = await anext(chunks, None)
        except BaseException as exc:
            failure = exc
        else:
            self._succeed(attempt, pool, replica, 200)
            return OpenStream(_LeasedStream(stream, pool, replica), chunks, first, upstream)
        # Closed after the `except`, not in it: compiled, an await in an except block that then
        # re-raises can lose the exception (docs/architecture.md, Compiled request path).
        try:
            if stream is not None:
                await stream.aclose()
        finally:
            pool.release(replica)
        if isinstance(failure, UpstreamError):
            self._fail(shared.exchange, attempt, pool, replica, failure)
        raise failure

    def _request(
        self, shared: _Try, route: UpstreamRoute, candidate: Candidate, replica: int, now: float
    ) -> UpstreamRequest:
        exchange = shared.exchange
        remaining = exchange.deadline - now
        policy = route.policy
        headers_timeout = min(policy.response_headers_timeout(shared.prompt_tokens), remaining)
        return UpstreamRequest(
            endpoint=exchange.endpoint,
            model=candidate.model,
            body=shared.body,
            stream=exchange.stream,
            request_id=exchange.upstream_request_id,
            deadline=exchange.deadline,
            first_byte_timeout=min(policy.first_byte_timeout(shared.prompt_tokens), remaining),
            headers_timeout=headers_timeout,
            session_key=exchange.session_key,
            replica=replica,
            # _begin has just appended this attempt; its span starts here and is its traceparent's parent
            trace_headers=exchange.trace.upstream_headers(exchange.attempts[-1], route.upstream),
        )

    def _begin(self, exchange: Exchange, candidate: Candidate, replica: int, now: float) -> Attempt:
        attempt = Attempt(candidate.upstream, candidate.model, now, replica)
        exchange.attempts.append(attempt)
        return attempt

    def _succeed(self, attempt: Attempt, pool: ReplicaPool, replica: int, status: int) -> None:
        attempt.ended_at = now = self._clock()
        attempt.status = status
        pool.succeeded(replica, now - attempt.started_at)

    def _fail(
        self, exchange: Exchange, attempt: Attempt, pool: ReplicaPool, replica: int, exc: UpstreamError
    ) -> None:
        attempt.ended_at = now = self._clock()
        attempt.status = exc.status
        attempt.error = exc.code
        deadline_ran_out = now >= exchange.deadline - _DEADLINE_SLACK_S
        counts = counts_against_replica(exc, deadline_ran_out)
        pool.failed(replica, counts=counts)


def _deadline_passed() -> UpstreamTimeout:
    return UpstreamTimeout("The request deadline passed before the upstream answered.")
