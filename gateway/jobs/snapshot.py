"""A job's payload: the Exchange as the request-side stages left it, and back.

`freeze` keeps what the rest of the pipeline needs (forward, the response guards, the
finishers): the principal by key id, the body after the request stages (already redacted,
so the stored job never holds what the policy masks), the decision, the redaction rules,
the candidates, the meter ticket (its reservation lasts the completion window) and the
submission's trace context. A tokenised request's vault (placeholder -> original value) is
*not* kept: it holds the very values the policy masked, so a job's answer keeps the
placeholders (and masks any entity the model wrote itself, when the response mode asks).

`thaw` builds a fresh Exchange from it for one attempt, whose deadline is the attempt's own.
A job that came through a translating door (Responses, Messages) also keeps that door's
state (`Door.job_state`: nothing the redaction would not store), so its answer is rendered in
the door's format.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.exchange import Candidate, Endpoint, Exchange, Principal, Tenant
from gateway.metering.plan import MeterPlan, Periods
from gateway.metering.records import BudgetCharge, RateCharge
from gateway.metering.ticket import MeterTicket
from gateway.policy.decision import ArgConstraint, Decision, RedactRules, parse_decision
from gateway.redaction.settings import RedactionSettings
from gateway.redaction.state import RedactionState

VERSION = 1


@dataclass(frozen=True, slots=True)
class NativeRef:
    """A job handed to an upstream's own queue: where, under which id, and how often polled."""

    upstream: str
    model: str
    request_id: str
    polls: int = 0


@dataclass(frozen=True, slots=True)
class Thawing:
    """What `thaw` needs from the composition root."""

    plan_for: Callable[[Principal], MeterPlan] | None  # None: metering is off
    redaction: RedactionSettings


def freeze(exchange: Exchange, http_request_id: str, native: NativeRef | None = None) -> dict[str, Any]:
    principal = exchange.principal
    assert principal is not None  # admit ran
    trace = exchange.trace
    traceparent = f"00-{trace.trace_id}-{trace.span_id}-01" if trace.sampled and trace.span_id else None
    return {
        "v": VERSION,
        "endpoint": exchange.endpoint.value,
        "key_id": principal.key_id,
        "tenant": principal.tenant.name,
        # The principal as admitted: the job was authorised at submission, as a request in
        # flight is, whatever happens to its key (a live key revoked, a config edit) meanwhile.
        "principal": {
            "key_label": principal.key_label,
            "models": sorted(principal.tenant.models) if principal.tenant.models is not None else None,
            "workflow": principal.default_workflow,
            "priority": principal.default_priority,
        },
        "body": exchange.body,
        "model_alias": exchange.model_alias,
        "workflow": exchange.workflow,
        "priority": exchange.priority,
        "routed_alias": exchange.routed_alias,
        "session_key": exchange.session_key,
        "decision": _decision_doc(exchange.decision) if exchange.decision is not None else None,
        "decision_id": exchange.decision_id,
        "policy_revision": exchange.policy_revision,
        "redact": _rules_doc(exchange.redaction.rules) if exchange.redaction is not None else None,
        "candidates": [[c.upstream, c.model, c.model_class, c.weight] for c in exchange.candidates],
        "meter": _ticket_doc(exchange.meter) if exchange.meter is not None else None,
        "upstream_request_id": exchange.upstream_request_id,
        "http_request_id": http_request_id,
        "traceparent": traceparent,
        "native": _native_doc(native),
        "door": _door_doc(exchange),
    }


def _door_doc(exchange: Exchange) -> dict[str, Any] | None:
    """The client API the request came through and what it keeps (None: an OpenAI door,
    whose answer is the internal one)."""
    door = exchange.door
    state = door.job_state(exchange) if door is not None else None
    return {"api": door.api, "state": state} if door is not None and state is not None else None


def door_of(document: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The API a job came through and its door's state, when not an OpenAI door."""
    raw = document.get("door")
    return (raw["api"], raw["state"]) if isinstance(raw, dict) else None


def encode(document: dict[str, Any]) -> bytes:
    return orjson.dumps(document)


def decode(payload: bytes) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(payload)
    return document


def with_native(document: dict[str, Any], native: NativeRef | None) -> dict[str, Any]:
    return {**document, "native": _native_doc(native)}


def native_of(document: dict[str, Any]) -> NativeRef | None:
    raw = document.get("native")
    return NativeRef(**raw) if isinstance(raw, dict) else None


def thaw(document: dict[str, Any], job_id: str, attempt_s: float, thawing: Thawing) -> Exchange:
    """An Exchange for one attempt of the job, whose deadline is `attempt_s` from now."""
    held = document["principal"]
    models = held["models"]
    tenant = Tenant(document["tenant"], frozenset(models) if models is not None else None)
    principal = Principal(tenant, document["key_id"], held["key_label"], held["workflow"], held["priority"])
    now = time.monotonic()
    headers = {"traceparent": document["traceparent"]} if document.get("traceparent") else {}
    exchange = Exchange(
        request_id=job_id,
        endpoint=Endpoint(document["endpoint"]),
        received_at=now,
        deadline=now + attempt_s,
        headers=headers,
        raw_body=b"",
        body=document["body"],
        principal=principal,
        session_key=document.get("session_key"),
        model_alias=document["model_alias"],
        workflow=document.get("workflow", "default"),
        priority=document.get("priority", "normal"),
        routed_alias=document.get("routed_alias"),
        decision=parse_decision(document["decision"]) if document.get("decision") is not None else None,
        decision_id=document.get("decision_id"),
        policy_revision=document.get("policy_revision"),
        candidates=[Candidate(*candidate) for candidate in document["candidates"]],
        upstream_request_id=document["upstream_request_id"],
        job_id=job_id,
    )
    if document.get("redact") is not None:
        rules = _rules(document["redact"])
        settings = thawing.redaction.for_tenant(principal.tenant.name)
        exchange.redaction = RedactionState(rules, settings.detector(rules.entities), settings.fail_open)
    if document.get("meter") is not None and thawing.plan_for is not None:
        exchange.meter = _ticket(document["meter"], thawing.plan_for(principal))
    return exchange


def _decision_doc(decision: Decision) -> dict[str, Any]:
    """The decision in the policy's own shape, so `parse_decision` reads it back unchanged."""
    return {
        "allow": decision.allow,
        "reasons": list(decision.reasons),
        "tools": {"allowed": sorted(decision.tools.allowed), "on_violation": decision.tools.on_violation},
        "tool_args": {
            tool: {path: _constraint_doc(rule) for path, rule in paths.items()}
            for tool, paths in decision.tool_args.items()
        },
        "destinations": {
            "image_url": _constraint_doc(decision.destinations.image_url),
            "webhook_url": _constraint_doc(decision.destinations.webhook_url),
        },
        "redact": _rules_doc(decision.redact),
        "route": {
            **({"upstreams": list(decision.route.upstreams)} if decision.route.upstreams is not None else {}),
            **({"model_class": decision.route.model_class} if decision.route.model_class else {}),
        },
        "limits": {
            name: value
            for name, value in (
                ("max_tokens", decision.limits.max_tokens),
                ("tool_output_max_chars", decision.limits.tool_output_max_chars),
            )
            if value is not None
        },
    }


def _constraint_doc(rule: ArgConstraint) -> dict[str, Any]:
    return {
        "allowed_hosts": list(rule.allowed_hosts),
        "allowed_schemes": list(rule.allowed_schemes),
        "allowed_path_prefixes": list(rule.allowed_path_prefixes),
        "required": rule.required,
        "allow_private": rule.allow_private,
    }


def _rules_doc(rules: RedactRules) -> dict[str, Any]:
    return {"request": rules.request, "response": rules.response, "entities": list(rules.entities)}


def _rules(doc: dict[str, Any]) -> RedactRules:
    return RedactRules(doc["request"], doc["response"], tuple(doc["entities"]))


def _native_doc(native: NativeRef | None) -> dict[str, Any] | None:
    if native is None:
        return None
    return {
        "upstream": native.upstream,
        "model": native.model,
        "request_id": native.request_id,
        "polls": native.polls,
    }


def _ticket_doc(ticket: MeterTicket) -> dict[str, Any]:
    periods = ticket.periods
    return {
        "reservation_id": ticket.reservation_id,
        "periods": [periods.day, periods.month, periods.day_expires_at, periods.month_expires_at],
        "budgets": [[b.counter, b.amount, b.limit, b.hard, b.expires_at] for b in ticket.budgets],
        "rates": [[r.counter, r.cost, r.per_minute] for r in ticket.rates],
        "reserved": ticket.reserved,
        "reserve_unanswered": ticket.reserve_unanswered,
        "input_tokens": ticket.input_tokens,
        "output_tokens": ticket.output_tokens,
    }


def _ticket(doc: dict[str, Any], plan: MeterPlan) -> MeterTicket:
    budgets = tuple(BudgetCharge(*b) for b in doc["budgets"])
    if budgets and len(budgets) != len(plan.budgets):
        # The tenant's budgets changed since submission: settle on today's counters of the
        # plan now in force (the reservation is released by its id either way).
        budgets = ()
    return MeterTicket(
        reservation_id=doc["reservation_id"],
        plan=plan,
        periods=Periods(*doc["periods"]),
        budgets=budgets,
        rates=tuple(RateCharge(*r) for r in doc["rates"]),
        reserved=doc["reserved"],
        reserve_unanswered=doc["reserve_unanswered"],
        input_tokens=doc["input_tokens"],
        output_tokens=doc["output_tokens"],
    )
