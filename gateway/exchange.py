"""The Exchange: one object per request, carrying what the stages need and produce.

Stages read and write it; they never call each other. Later stages add their own
fields here (the policy decision, the budget reservation, ...), so that the whole
life of a request can be read off one object in logs, spans and tests.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.tracing import NO_TRACE, RequestTrace

if TYPE_CHECKING:
    from gateway.doors.base import Door
    from gateway.keystore.records import KeyLimits
    from gateway.metering.idempotency import IdempotencyHold
    from gateway.metering.ticket import MeterTicket
    from gateway.policy.decision import Decision
    from gateway.redaction.state import RedactionState
    from gateway.sessions.ticket import SessionTicket
    from gateway.tools.stream import ToolCallStream


class Endpoint(enum.Enum):
    CHAT = "chat.completions"
    EMBEDDINGS = "embeddings"

    @property
    def operation(self) -> str:
        """The GenAI semantic-convention operation name."""
        return "chat" if self is Endpoint.CHAT else "embeddings"


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    # Client-facing model aliases the tenant may use; None means every alias.
    models: frozenset[str] | None = None

    def may_use(self, alias: str) -> bool:
        return self.models is None or alias in self.models


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant and which of its keys."""

    tenant: Tenant
    key_id: str  # short, non-secret fingerprint of the key's hash
    key_label: str = ""
    # What a request of this key is when it does not say (x-workflow, x-priority); from the
    # config file's keys or from live keys in the state store alike.
    default_workflow: str | None = None
    default_priority: str | None = None
    limits: KeyLimits | None = None  # a live key's own budgets and rate limits (config keys: in MeterPlans)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One place a model alias can be served from, in order of preference."""

    upstream: str  # name of a configured upstream
    model: str  # the model id that upstream knows
    model_class: str | None = None  # e.g. "frontier", for a policy's route.model_class
    weight: float | None = None  # a split's share (sticky per session); None: not in the split

    @property
    def arm(self) -> str:
        """The candidate's name in side-by-side reports: upstream and model."""
        return f"{self.upstream}/{self.model}"


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # subset of prompt_tokens served from a prefix cache
    reasoning_tokens: int = 0  # subset of completion_tokens
    reported: bool = False  # True once an upstream reported usage
    counted: bool = False  # True when the upstream reported none and the gateway counted it itself

    @property
    def source(self) -> str | None:
        """Where the counts come from: "reported" (the upstream), "counted" (the gateway), or None."""
        if self.reported:
            return "reported"
        return "counted" if self.counted else None

    @classmethod
    def from_openai(cls, usage: Mapping[str, Any]) -> Usage:
        prompt_details = usage.get("prompt_tokens_details") or {}
        completion_details = usage.get("completion_tokens_details") or {}
        return cls(
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            cached_tokens=_count(prompt_details.get("cached_tokens"))
            if isinstance(prompt_details, Mapping)
            else 0,
            reasoning_tokens=_count(completion_details.get("reasoning_tokens"))
            if isinstance(completion_details, Mapping)
            else 0,
            reported=True,
        )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


@dataclass(slots=True)
class Attempt:
    upstream: str
    model: str
    started_at: float
    replica: int = 0  # index into the upstream's replicas (0 for a single endpoint)
    ended_at: float | None = None
    status: int | None = None
    error: str | None = None  # low-cardinality error code, None on success


@dataclass(slots=True)
class Exchange:
    request_id: str  # the client's X-Request-ID (client text), or one the gateway minted
    endpoint: Endpoint
    received_at: float  # time.monotonic()
    deadline: float  # time.monotonic() by which the response must be complete
    headers: Mapping[str, str]  # request headers, names lower-cased
    raw_body: bytes
    body: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    client_wants_usage: bool = False  # stream_options.include_usage as the client sent it
    principal: Principal | None = None
    session_key: str | None = None  # affinity key, scoped to the tenant and hashed
    session: SessionTicket | None = None  # the request's session, when it names one (gateway/sessions)
    model_alias: str = ""
    workflow: str = "default"  # a configured workflow name, "other" or "default" (the label stage)
    priority: str = "normal"  # critical, normal or background (the label stage)
    routed_alias: str | None = None  # the alias that serves the request when a policy moved it (route)
    decision: Decision | None = None  # set by the decide stage
    decision_id: str | None = None  # the decision record's id, set by the decide stage
    policy_revision: str | None = None  # the policy revision that decided, set by the decide stage
    redaction: RedactionState | None = None  # set by the redact stage when redaction is on
    candidates: list[Candidate] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    produced_chars: int = 0  # generated text relayed (content, reasoning, tool-call arguments)
    # The streamed chunk being guarded has others of the same upstream read after it: its
    # events go out with theirs (Pipeline.relay), so a guard may hold its text until the last.
    more_in_hand: bool = False
    response_model: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    status: int = 0
    error_code: str | None = None
    first_byte_at: float | None = None
    completed_at: float | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    tool_calls_blocked: int = 0  # model-emitted tool calls the tool-call guard kept from the client
    tool_stream: ToolCallStream | None = None  # the tool-call guard's state for a streamed response
    meter: MeterTicket | None = None  # set by the meter stage: the reservation the settle finisher closes
    idempotency: IdempotencyHold | None = None  # the Idempotency-Key this request claimed, closed after it
    replay_body: bytes | None = None  # a stored response to send rather than call upstream (Idempotency-Key)
    response_body: bytes | None = None  # the non-streamed response as sent, set by the HTTP edge
    trace: RequestTrace = NO_TRACE  # set by the HTTP edge: spans, and the traceparent sent upstream
    upstream_request_id: str = ""  # set by the HTTP edge: the UUID upstreams get (request_ids.py)
    job_id: str | None = None  # an async job's id (gateway/jobs/): its submission, or one of its attempts
    door: Door | None = None  # set by the HTTP edge: the client API the request came through (doors/)
    door_state: Any = None  # what the door keeps between translating the request and the answer

    @property
    def api(self) -> str:
        """The client API the request came through: "chat.completions", "responses", "messages", ..."""
        return self.door.api if self.door is not None else self.endpoint.value

    @property
    def tenant(self) -> Tenant | None:
        return self.principal.tenant if self.principal else None
