"""A job's submission: the request-side stages of the same pipeline, then the job stored.

    admit -> decide (logged with the job id) -> redact -> ... -> meter -> route -> store

Governance happens here, before anything is persisted: a request the key may not make,
the policy denies, a budget cannot cover, is refused now, as the synchronous call would
be; what is stored is the request as those stages left it (redacted; its reservation open
for the whole completion window). The job's id is the exchange's request id, so the
decision record and the completion record both carry it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gateway.errors import GatewayError, InvalidRequest
from gateway.exchange import Endpoint, Exchange
from gateway.jobs import snapshot
from gateway.jobs.records import NewJob
from gateway.pipeline import Pipeline
from gateway.tracing import NO_TRACER, Tracer

if TYPE_CHECKING:
    from gateway.doors.base import Door

# Not carried into a job: an Idempotency-Key belongs to the submission, not to the job's attempts.
_DROPPED_HEADERS = frozenset({"idempotency-key", "content-length", "content-encoding", "prefer"})


def new_job_id(prefix: str = "job") -> str:
    return f"{prefix}_{os.urandom(12).hex()}"


class Submitter:
    def __init__(
        self,
        pipeline: Callable[[], Pipeline],
        upstream_ids: Callable[[str], str],
        tracer: Tracer = NO_TRACER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._pipeline = pipeline
        self._upstream_ids = upstream_ids
        self._tracer = tracer
        self._clock = clock

    async def prepare(
        self,
        job_id: str,
        endpoint: Endpoint,
        headers: Mapping[str, str],
        raw_body: bytes,
        http_request_id: str,
        expires_at: float,
        batch_id: str | None = None,
        line: int = 0,
        custom_id: str | None = None,
        door: Door | None = None,
    ) -> tuple[NewJob, Exchange]:
        """The job to store, and its exchange (for `abandon` should storing fail). A refusal
        raises its GatewayError, the finishers having run (what was reserved is released).
        `door`: the client API the request came through, which translates it (and its answer)."""
        created = self._clock()
        now = time.monotonic()
        exchange = Exchange(
            request_id=job_id,
            endpoint=endpoint,
            received_at=now,
            deadline=now + max(0.0, expires_at - created),  # the reservation's lease lasts the window
            headers={k: v for k, v in headers.items() if k not in _DROPPED_HEADERS},
            raw_body=raw_body,
            upstream_request_id=self._upstream_ids(job_id),
            job_id=job_id,
            door=door,
        )
        exchange.trace = trace = self._tracer.begin(exchange)
        try:
            await self._pipeline().prepare(exchange)
            if exchange.stream:
                raise InvalidRequest(
                    "An async request cannot be streamed: leave out 'stream' (its result is fetched whole).",
                    param="stream",
                    code="stream_not_supported",
                )
            assert exchange.principal is not None  # admit ran
            payload = snapshot.encode(snapshot.freeze(exchange, http_request_id))
            job = NewJob(
                job_id,
                exchange.principal.tenant.name,
                payload,
                created,
                expires_at,
                batch_id,
                line,
                custom_id,
            )
        except GatewayError as exc:
            exchange.status, exchange.error_code = exc.status, exc.code
            await self._end(exchange)
            raise
        except BaseException:
            exchange.status, exchange.error_code = 500, "internal_error"
            await self._end(exchange)
            raise
        trace.end(exchange)
        return job, exchange

    async def abandon(self, exchange: Exchange, error: GatewayError) -> None:
        """The job could not be stored: release what its submission reserved."""
        exchange.status, exchange.error_code = error.status, error.code
        await self._pipeline().finish(exchange)

    async def _end(self, exchange: Exchange) -> None:
        try:
            await self._pipeline().finish(exchange)
        finally:
            exchange.trace.end(exchange)
