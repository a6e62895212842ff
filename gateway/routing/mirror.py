"""Mirrors: a share of an alias's requests also sent to a shadow candidate.

A candidate with `mirror: <percent>` never answers the client. For that share of the
alias's chat requests (chosen by the request id's hash), once every request stage has run
(so the shadow gets the body as redacted, with its tools and limits enforced), a copy is
taken; it is sent to the shadow when the primary has finished (its response sent), in a
task of its own: the primary never waits for it, its own request never shares the event
loop with it, and nothing the shadow does (slow, failing, hanging) reaches the primary's
response. Each arm's time to first byte is measured from its own sending. At most
`max_in_flight` shadow calls run (or wait to be sent) per worker; a mirror beyond that is
skipped and counted, so a slow shadow cannot pile up work. A shadow on an upstream the
request's policy does not permit is never sent.

Each shadow call, and each primary answer of an alias run side by side (split or mirror),
becomes an `ArmRecord` for the listeners (metrics) and the decision log (`type: "arm"`). With
`routing.mirror.meter`, a shadow call's cost goes to the tenant's ledger as workflow
`shadow` (never to a budget).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gateway.errors import AuditWriteFailed, GatewayError
from gateway.exchange import Candidate, Endpoint, Exchange
from gateway.metering.prices import PriceBook
from gateway.metering.records import LedgerEntry, Settlement
from gateway.ports import AuditSink, StateStore, Upstream, UpstreamRequest
from gateway.routing.arms import ArmRecord, wall_clock_at
from gateway.routing.pool import ReplicaPool
from gateway.routing.rendezvous import stable_hash

logger = logging.getLogger("tollgate.routing")

SHADOW_WORKFLOW = "shadow"
_SHARES = 10_000  # the request-id hash picks one of this many slots: percent to 0.01


@dataclass(frozen=True, slots=True)
class Shadow:
    candidate: Candidate
    percent: float

    def takes(self, request_hash: int) -> bool:
        return request_hash % _SHARES < self.percent * (_SHARES // 100)


@dataclass(slots=True)
class MirrorCounts:
    """Shadow calls by what became of them, in this worker (also in the metrics)."""

    sent: int = 0
    answered: int = 0
    failed: int = 0
    skipped_busy: int = 0  # max_in_flight shadow calls were already running
    not_permitted: int = 0  # the request's policy does not permit the shadow's upstream


@dataclass(frozen=True, slots=True)
class ShadowTarget:
    """Where a shadow call goes: the upstream and its pool (the forwarder's, shared)."""

    upstream: Upstream
    pool: ReplicaPool


@dataclass(slots=True)
class _Result:
    ttft_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)


class Mirror:
    """A request stage (takes the shadow copies) and a finisher (sends them, and records the
    primary arm)."""

    name = "mirror"

    def __init__(
        self,
        shadows: Mapping[str, Sequence[Shadow]],
        side_by_side: frozenset[str],
        targets: Mapping[str, ShadowTarget],
        prices: PriceBook,
        *,
        max_in_flight: int,
        timeout_s: float,
        ledger: StateStore | None = None,
        keep_s: int = 900,
        audit: AuditSink | None = None,
    ) -> None:
        """`side_by_side`: the aliases whose primary answers are recorded (splits and mirrors)."""
        self._shadows = {alias: tuple(s) for alias, s in shadows.items()}
        self._side_by_side = side_by_side
        self._targets = dict(targets)
        self._prices = prices
        self._max = max_in_flight
        self._timeout_s = timeout_s
        self._ledger = ledger
        self._keep_s = keep_s
        self._audit = audit
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[int, list[tuple[Shadow, dict[str, Any]]]] = {}  # id(exchange): copies to send
        self.counts = MirrorCounts()
        self.listeners: list[Callable[[ArmRecord], None]] = []  # e.g. the arm metrics

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def __call__(self, exchange: Exchange) -> None:
        shadows = self._shadows.get(exchange.routed_alias or exchange.model_alias)
        if not shadows or exchange.endpoint is not Endpoint.CHAT or exchange.replay_body is not None:
            return
        if exchange.job_id is not None:
            return  # an async job's submission never finishes here: its copy would never be sent
        request_hash = stable_hash(exchange.request_id)
        decision = exchange.decision
        permitted = decision.route.upstreams if decision is not None else None
        for shadow in shadows:
            if not shadow.takes(request_hash):
                continue
            if permitted is not None and shadow.candidate.upstream not in permitted:
                self.counts.not_permitted += 1
                self._tell(self._skipped(exchange, shadow, "not_permitted"))
                continue
            if len(self._tasks) + len(self._pending) >= self._max:
                self.counts.skipped_busy += 1
                self._tell(self._skipped(exchange, shadow, "mirror_busy"))
                continue
            # The copy is taken now, as the stages left the body; it is sent when the primary
            # has finished, so not even its CPU competes with the primary's own request.
            self._pending.setdefault(id(exchange), []).append((shadow, _shadow_body(exchange.body)))

    async def finish(self, exchange: Exchange) -> None:
        """Sends the request's shadow copies, and records the primary arm of an alias run side
        by side: what answered, how fast, at what cost."""
        for shadow, body in self._pending.pop(id(exchange), ()):
            self.counts.sent += 1
            task = asyncio.create_task(self._shadow_call(exchange, shadow, body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        alias = exchange.routed_alias or exchange.model_alias
        if alias not in self._side_by_side or exchange.principal is None or not exchange.attempts:
            return
        served = next((a for a in reversed(exchange.attempts) if a.error is None and a.ended_at), None)
        last = served or exchange.attempts[-1]
        usage = exchange.usage
        price = self._prices.get(last.model)
        cost = (
            price.cost_micros(usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens)
            if price
            else 0
        )
        first = exchange.first_byte_at
        ended = exchange.completed_at or time.monotonic()
        await self._emit(
            ArmRecord(
                alias=alias,
                arm=f"{last.upstream}/{last.model}",
                role="primary",
                tenant=exchange.principal.tenant.name,
                request_id=exchange.request_id,
                ttft_s=first - last.started_at if served is not None and first is not None else None,
                duration_s=ended - last.started_at,
                prompt_tokens=usage.prompt_tokens if served else 0,
                completion_tokens=usage.completion_tokens if served else 0,
                cost_micros=cost if served else 0,
                finish_reason=exchange.finish_reasons[0] if exchange.finish_reasons else None,
                error=None if served is not None else (exchange.error_code or last.error or "failed"),
                at=wall_clock_at(last.started_at),
            )
        )

    async def _shadow_call(self, exchange: Exchange, shadow: Shadow, body: dict[str, Any]) -> None:
        candidate = shadow.candidate
        started = time.monotonic()
        result = _Result()
        target = self._targets.get(candidate.upstream)
        replica = target.pool.acquire(exchange.session_key) if target is not None else None
        try:
            if target is None or replica is None:
                result.error = "upstream_unavailable"
            else:
                async with asyncio.timeout(self._timeout_s):
                    await self._send(target.upstream, exchange, candidate, replica, body, started, result)
        except GatewayError as exc:
            result.error = exc.code or "upstream_error"
        except TimeoutError:
            result.error = "mirror_timeout"
        except asyncio.CancelledError:
            result.error = "cancelled"
            raise
        except Exception:
            logger.exception("shadow call failed", extra={"request_id": exchange.request_id})
            result.error = "internal_error"
        finally:
            if target is not None and replica is not None:
                target.pool.release(replica)
            await self._finished(exchange, shadow, result, started)

    async def _send(
        self,
        upstream: Upstream,
        exchange: Exchange,
        candidate: Candidate,
        replica: int,
        body: dict[str, Any],
        started: float,
        result: _Result,
    ) -> None:
        request = UpstreamRequest(
            endpoint=Endpoint.CHAT,
            model=candidate.model,
            body=body,
            stream=exchange.stream,
            request_id=exchange.upstream_request_id,
            deadline=started + self._timeout_s,
            first_byte_timeout=self._timeout_s,
            headers_timeout=self._timeout_s,
            session_key=exchange.session_key,
            replica=replica,
        )
        if not exchange.stream:
            response = await upstream.complete(request)
            result.ttft_s = time.monotonic() - started
            _read_answer(response.body, result)
            return
        stream = await upstream.stream(request)
        try:
            async for chunk in stream:
                if result.ttft_s is None:
                    result.ttft_s = time.monotonic() - started
                _read_answer(chunk.data, result)
        finally:
            await stream.aclose()

    async def _finished(self, exchange: Exchange, shadow: Shadow, result: _Result, started: float) -> None:
        candidate = shadow.candidate
        answered = result.error is None
        if answered:
            self.counts.answered += 1
        else:
            self.counts.failed += 1
        price = self._prices.get(candidate.model)
        cached = _cached(result.usage)
        cost = price.cost_micros(result.prompt_tokens, cached, result.completion_tokens) if price else 0
        principal = exchange.principal
        tenant = principal.tenant.name if principal is not None else ""
        await self._emit(
            ArmRecord(
                alias=exchange.routed_alias or exchange.model_alias,
                arm=candidate.arm,
                role="shadow",
                tenant=tenant,
                request_id=exchange.request_id,
                ttft_s=result.ttft_s,
                duration_s=time.monotonic() - started,
                prompt_tokens=result.prompt_tokens,
                completion_tokens=result.completion_tokens,
                cost_micros=cost,
                finish_reason=result.finish_reason,
                error=result.error,
                at=wall_clock_at(started),
            )
        )
        if (
            self._ledger is not None
            and principal is not None
            and (result.prompt_tokens or result.completion_tokens)
        ):
            day = datetime.now(UTC).strftime("%Y-%m-%d")
            entry = LedgerEntry(
                day,
                principal.key_id,
                candidate.model,
                result.prompt_tokens,
                cached,
                result.completion_tokens,
                cost,
                workflow=SHADOW_WORKFLOW,
            )
            settlement = Settlement(tenant, uuid.uuid4().hex, (), (), entry, self._keep_s)
            try:
                await self._ledger.settle(settlement)
            except GatewayError:
                logger.warning(
                    "shadow call not metered: the state store failed",
                    extra={"request_id": exchange.request_id},
                )

    def _skipped(self, exchange: Exchange, shadow: Shadow, error: str) -> ArmRecord:
        principal = exchange.principal
        return ArmRecord(
            alias=exchange.routed_alias or exchange.model_alias,
            arm=shadow.candidate.arm,
            role="shadow",
            tenant=principal.tenant.name if principal is not None else "",
            request_id=exchange.request_id,
            ttft_s=None,
            duration_s=0.0,
            prompt_tokens=0,
            completion_tokens=0,
            cost_micros=0,
            finish_reason=None,
            error=error,
            at=time.time(),
        )

    def _tell(self, record: ArmRecord) -> None:
        for listener in self.listeners:
            try:
                listener(record)
            except Exception:
                logger.exception("arm record listener failed", extra={"request_id": record.request_id})

    async def _emit(self, record: ArmRecord) -> None:
        """To the listeners (metrics) and the decision log."""
        self._tell(record)
        if self._audit is not None:
            try:
                await self._audit.append(record.record())
            except AuditWriteFailed:
                logger.warning("arm record not written", extra={"request_id": record.request_id})

    async def aclose(self) -> None:
        """Shadow calls still running are cancelled: they answer nobody."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _shadow_body(body: dict[str, Any]) -> dict[str, Any]:
    """The primary's body as the stages left it; a stream also asks for usage."""
    copy = dict(body)
    if copy.get("stream") is True:
        options = copy.get("stream_options")
        copy["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return copy


def _read_answer(data: dict[str, Any], result: _Result) -> None:
    usage = data.get("usage")
    if isinstance(usage, dict):
        result.usage = usage
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        result.prompt_tokens = prompt if isinstance(prompt, int) else result.prompt_tokens
        result.completion_tokens = completion if isinstance(completion, int) else result.completion_tokens
    choices = data.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        reason = choice.get("finish_reason") if isinstance(choice, dict) else None
        if isinstance(reason, str):
            result.finish_reason = reason


def _cached(usage: dict[str, Any]) -> int:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) else 0
