"""decide: one policy decision per request, before any upstream is called.

It builds the input document, takes the decision from the cache or the engine, records it
in the decision log, and refuses the request on deny. Anything but a well-formed decision
with allow == true is a deny; an engine that fails or does not answer in time refuses the
request (503) rather than letting it through unchecked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.errors import PermissionDenied, PolicyUnavailable, model_not_found
from gateway.exchange import Endpoint, Exchange, Principal
from gateway.in_flight import InFlight
from gateway.output_limit import note_output_limit
from gateway.policy.cache import DecisionCache
from gateway.policy.decision import Decision, MalformedDecision, parse_decision
from gateway.policy.defer import capacity_fact, deferred, defers
from gateway.policy.input import BUDGET_OK, PolicyInput, build_input, webhook_input
from gateway.ports import AuditSink, EngineResult, PolicyEngine
from gateway.random_ids import random_hex
from gateway.redaction.marks import Settled, Verbatim

logger = logging.getLogger("tollgate.policy")

RECORD_VERSION = 1
_NO_DECISION = "the policy did not produce a decision"


@dataclass(slots=True, init=False)
class _Outcome:
    decision: Decision
    raw: Any  # the engine's answer, as recorded in the decision log
    revision: str
    decision_id: str | None
    cached: bool

    def __init__(
        self, decision: Decision, raw: Any, revision: str, decision_id: str | None, cached: bool
    ) -> None:
        self.decision = decision
        self.raw = raw
        self.revision = revision
        self.decision_id = decision_id
        self.cached = cached


@dataclass(slots=True)
class DecideCounts:
    """Running totals, read by tests and (later) the metrics exporter."""

    decisions: int = 0
    cache_hits: int = 0
    shared: int = 0  # taken from an evaluation of the same input already under way
    denied: int = 0
    malformed: int = 0  # answers that were not a decision, denied
    unavailable: int = 0  # engine failures and timeouts, refused with 503
    deferred: int = 0  # synchronous background requests refused with 429 deferred


class Decide:
    name = "decide"

    def __init__(
        self,
        engine: PolicyEngine,
        upstreams: Mapping[str, Sequence[str]],
        *,
        cache: DecisionCache | None,
        audit: AuditSink | None,
        timeout_s: float,
        budget_band: Callable[[Principal], Awaitable[str]] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        throttled_for: Callable[[], float] | None = None,
    ) -> None:
        """`upstreams`: model alias -> names of the upstreams that serve it, preferred first;
        `budget_band`: the caller's budget band for the input (metering's), else always "ok";
        `throttled_for`: seconds left of the pause after an upstream throttled (the jobs' pull
        gate), the input's `capacity`; None: always "ok"."""
        self._engine = engine
        self._upstreams = {alias: tuple(names) for alias, names in upstreams.items()}
        self._cache = cache
        self._audit = audit
        self._timeout_s = timeout_s
        self._budget_band = budget_band
        self._clock = clock
        self._throttled_for = throttled_for
        self.counts = DecideCounts()
        # Evaluations under way, by (revision, cache key): a request whose input is being
        # evaluated for another waits for that answer rather than starting its own.
        self._evaluating: InFlight[tuple[str, bytes], _Outcome] = InFlight()

    async def __call__(self, exchange: Exchange) -> None:
        alias = exchange.model_alias
        upstreams = self._upstreams.get(alias)
        tenant = exchange.tenant
        if upstreams is None or tenant is None or not tenant.may_use(alias):
            raise model_not_found(alias)
        principal = exchange.principal
        band = BUDGET_OK
        if self._budget_band is not None and principal is not None:
            band = await self._budget_band(principal)
        throttled_for = self._throttled_for() if self._throttled_for is not None else 0.0
        policy_input = build_input(exchange, upstreams, band, capacity_fact(throttled_for))
        started = self._clock()
        outcome = self._from_cache(policy_input) or await self._decided(policy_input, exchange.request_id)
        self.counts.decisions += 1
        decision = outcome.decision
        exchange.decision = decision
        # Minted here: Verbatim, so the decision log (scrubbed) and spans show the same id.
        exchange.decision_id = outcome.decision_id or Verbatim(random_hex(16))
        exchange.policy_revision = outcome.revision
        defer = decision.allow and defers(exchange, decision.defer)
        if self._audit is not None:
            latency_ms = round((self._clock() - started) * 1000, 3)
            record = _record(
                exchange.decision_id,
                exchange.request_id,
                exchange.trace.trace_id,
                principal.tenant.name if principal else None,
                principal.key_id if principal else None,
                policy_input.document,
                outcome,
                latency_ms,
                self._engine.name,
            )
            # The client's session (hashed), or the summarized one.
            key = exchange.session_key  # the gateway's own hex hash: never taken for a card number
            record["session_key"] = Verbatim(key) if key is not None else None
            record["workflow"] = exchange.workflow
            record["deferred"] = defer
            await self._audit.append(record)
        if not decision.allow:
            self.counts.denied += 1
            reasons = "; ".join(decision.reasons) or "no reason given"
            raise PermissionDenied(f"Denied by policy: {reasons}.", code="policy_denied")
        if defer and exchange.job_id is None:  # a job is the deferred form: it goes on to be stored
            self.counts.deferred += 1
            raise deferred(decision.retry_after_s, throttled_for, jobs=self._throttled_for is not None)
        _cap_max_tokens(exchange, decision)

    async def for_webhooks(self, tenant: str, principal: Principal | None, request_id: str) -> Decision:
        """The decision on a tenant's webhook destinations (gateway/jobs/webhook_destinations.py):
        for registering a URL (`principal`: the caller) or delivering to it (None), recorded
        in the decision log like a request's. The caller enforces it (allow, then
        `destinations.webhook_url`)."""
        key = (principal.key_id, principal.key_label) if principal is not None else None
        policy_input = webhook_input(tenant, key, request_id)
        started = self._clock()
        outcome = self._from_cache(policy_input) or await self._decided(policy_input, request_id)
        self.counts.decisions += 1
        if not outcome.decision.allow:
            self.counts.denied += 1
        if self._audit is not None:
            latency_ms = round((self._clock() - started) * 1000, 3)
            decision_id = outcome.decision_id or Verbatim(random_hex(16))
            key_id = principal.key_id if principal is not None else None
            await self._audit.append(
                _record(
                    decision_id,
                    request_id,
                    None,
                    tenant,
                    key_id,
                    policy_input.document,
                    outcome,
                    latency_ms,
                    self._engine.name,
                )
            )
        return outcome.decision

    def _from_cache(self, policy_input: PolicyInput) -> _Outcome | None:
        engine, cache = self._engine, self._cache
        if cache is None or not engine.cacheable:
            return None
        revision = engine.revision
        hit = cache.get(revision, policy_input.cache_key)
        if hit is None:
            return None
        self.counts.cache_hits += 1
        return _Outcome(hit.decision, hit.raw, revision, None, cached=True)

    async def _decided(self, policy_input: PolicyInput, request_id: str) -> _Outcome:
        """The engine's decision on an input the cache does not hold. With a cache, one
        evaluation per input at a time: requests that arrive while the same input is being
        evaluated (a cold start, a reload, a new combination of session bands, under load)
        share that answer, as they would a cached one, instead of each queueing an evaluation
        of its own. Its failure is theirs too. Without a cache, each request is evaluated."""
        engine = self._engine
        if self._cache is None or not engine.cacheable:
            return await self._from_engine(policy_input, request_id)
        key = (engine.revision, policy_input.cache_key)
        outcome, evaluated = await self._evaluating.call(
            key, lambda: self._from_engine(policy_input, request_id)
        )
        if evaluated:
            return outcome
        self.counts.shared += 1
        return _Outcome(outcome.decision, outcome.raw, outcome.revision, None, cached=True)

    async def _from_engine(self, policy_input: PolicyInput, request_id: str) -> _Outcome:
        result = await self._evaluate(policy_input.document, request_id)
        decision = self._parse(result, request_id)
        engine, cache = self._engine, self._cache
        raw = result.value
        # Only an answer from the revision now serving is kept: one from before a reload is not.
        if (
            cache is not None
            and engine.cacheable
            and result.error is None
            and result.revision == engine.revision
        ):
            if type(raw) is dict:  # the same object for every request the cache answers
                raw = Settled(raw)
            cache.put(result.revision, policy_input.cache_key, decision, raw)
        return _Outcome(decision, raw, result.revision, result.decision_id, cached=False)

    async def _evaluate(self, document: dict[str, Any], request_id: str) -> EngineResult:
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self._engine.evaluate(document)
        except TimeoutError:
            self.counts.unavailable += 1
            logger.warning(
                "policy engine timed out",
                extra={"request_id": request_id, "engine": self._engine.name, "timeout_s": self._timeout_s},
            )
            raise PolicyUnavailable(
                f"The policy engine did not answer within {self._timeout_s * 1000:.0f} ms; "
                "the request was refused."
            ) from None
        except PolicyUnavailable:
            self.counts.unavailable += 1
            raise

    def _parse(self, result: EngineResult, request_id: str) -> Decision:
        why = result.error
        if why is None and result.value is None:
            why = "the decision is undefined"
        if why is None:
            try:
                return parse_decision(result.value)
            except MalformedDecision as exc:
                why = str(exc)
        self.counts.malformed += 1
        logger.error(
            "malformed policy decision, denied",
            extra={
                "request_id": request_id,
                "revision": result.revision,
                "engine": self._engine.name,
                "why": why,
            },
        )
        return Decision.deny(_NO_DECISION)


def _record(
    decision_id: str | None,
    request_id: str,
    trace_id: str | None,
    tenant: str | None,
    key_id: str | None,
    document: dict[str, Any],
    outcome: _Outcome,
    latency_ms: float,
    engine: str,
) -> dict[str, Any]:
    return {
        "v": RECORD_VERSION,
        "type": "decision",
        "decision_id": decision_id,
        "request_id": request_id,
        "trace_id": trace_id,
        "tenant": tenant,
        "key_id": key_id,
        "policy_revision": outcome.revision,
        "input": document,
        "decision": outcome.raw,
        "allow": outcome.decision.allow,
        "latency_ms": latency_ms,
        "cached": outcome.cached,
        "engine": engine,
        "session_key": None,  # a request's own are set by its caller
        "workflow": None,
    }


def _cap_max_tokens(exchange: Exchange, decision: Decision) -> None:
    """The decision's max_tokens bounds the request's: set when absent, lowered when larger."""
    cap = decision.limits.max_tokens
    if cap is None or exchange.endpoint is not Endpoint.CHAT:
        return
    body = exchange.body
    present = False
    lowered = False
    for name in ("max_tokens", "max_completion_tokens"):
        asked = body.get(name)
        if isinstance(asked, int):
            present = True
            if asked > cap:
                body[name] = cap
                lowered = True
    if not present:
        body["max_tokens"] = cap
    if lowered or not present:
        note_output_limit(exchange, cap, "policy")
