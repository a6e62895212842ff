"""The Exchange: one object per request, carrying what the stages need and produce.

Stages read and write it; they never call each other. Later stages add their own
fields here (the policy decision, the budget reservation, ...), so that the whole
life of a request can be read off one object in logs, spans and tests.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
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


@dataclass(slots=True, init=False)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int  # subset of prompt_tokens served from a prefix cache
    reasoning_tokens: int  # subset of completion_tokens
    reported: bool  # True once an upstream reported usage
    counted: bool  # True when the upstream reported none and the gateway counted it itself

    # The per-request classes here write their __init__ out: under mypyc (setup.py) a
    # dataclass's generated one runs as interpreted Python, four to eight times slower.
    def __init__(
        self,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cached_tokens: int = 0,
        reasoning_tokens: int = 0,
        reported: bool = False,
        counted: bool = False,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.cached_tokens = cached_tokens
        self.reasoning_tokens = reasoning_tokens
        self.reported = reported
        self.counted = counted

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


@dataclass(slots=True, init=False)
class Attempt:
    upstream: str
    model: str
    started_at: float
    replica: int  # index into the upstream's replicas (0 for a single endpoint)
    ended_at: float | None
    status: int | None
    error: str | None  # low-cardinality error code, None on success

    def __init__(
        self,
        upstream: str,
        model: str,
        started_at: float,
        replica: int = 0,
        ended_at: float | None = None,
        status: int | None = None,
        error: str | None = None,
    ) -> None:
        self.upstream = upstream
        self.model = model
        self.started_at = started_at
        self.replica = replica
        self.ended_at = ended_at
        self.status = status
        self.error = error


@dataclass(slots=True, init=False)
class Exchange:
    request_id: str  # the client's X-Request-ID (client text), or one the gateway minted
    endpoint: Endpoint
    received_at: float  # time.monotonic()
    deadline: float  # time.monotonic() by which the response must be complete
    headers: Mapping[str, str]  # request headers, names lower-cased
    raw_body: bytes
    body: dict[str, Any]
    stream: bool
    client_wants_usage: bool  # stream_options.include_usage as the client sent it
    principal: Principal | None
    session_key: str | None  # affinity key, scoped to the tenant and hashed
    session: SessionTicket | None  # the request's session, when it names one (gateway/sessions)
    model_alias: str
    workflow: str  # a configured workflow name, "other" or "default" (the label stage)
    priority: str  # critical, normal or background (the label stage)
    routed_alias: str | None  # the alias that serves the request when a policy moved it (route)
    decision: Decision | None  # set by the decide stage
    decision_id: str | None  # the decision record's id, set by the decide stage
    policy_revision: str | None  # the policy revision that decided, set by the decide stage
    redaction: RedactionState | None  # set by the redact stage when redaction is on
    candidates: list[Candidate]
    attempts: list[Attempt]
    usage: Usage
    produced_chars: int  # generated text relayed (content, reasoning, tool-call arguments)
    # The streamed chunk being guarded has others of the same upstream read after it: its
    # events go out with theirs (Pipeline.relay), so a guard may hold its text until the last.
    more_in_hand: bool
    response_model: str | None
    finish_reasons: list[str]
    status: int
    error_code: str | None
    first_byte_at: float | None
    completed_at: float | None
    response_headers: dict[str, str]
    tool_calls_blocked: int  # model-emitted tool calls the tool-call guard kept from the client
    tool_stream: ToolCallStream | None  # the tool-call guard's state for a streamed response
    meter: MeterTicket | None  # set by the meter stage: the reservation the settle finisher closes
    idempotency: IdempotencyHold | None  # the Idempotency-Key this request claimed, closed after it
    replay_body: bytes | None  # a stored response to send rather than call upstream (Idempotency-Key)
    response_body: bytes | None  # the non-streamed response as sent, set by the HTTP edge
    trace: RequestTrace  # set by the HTTP edge: spans, and the traceparent sent upstream
    upstream_request_id: str  # set by the HTTP edge: the UUID upstreams get (request_ids.py)
    job_id: str | None  # an async job's id (gateway/jobs/): its submission, or one of its attempts
    door: Door | None  # set by the HTTP edge: the client API the request came through (doors/)
    door_state: Any  # what the door keeps between translating the request and the answer

    # Written out (see Usage): about 2 us a request generated. The keyword arguments are what
    # the request's makers know (the edge, jobs, the summarizer); the stages set the rest.
    def __init__(
        self,
        request_id: str,
        endpoint: Endpoint,
        received_at: float,
        deadline: float,
        headers: Mapping[str, str],
        raw_body: bytes,
        body: dict[str, Any] | None = None,
        *,
        stream: bool = False,
        principal: Principal | None = None,
        session_key: str | None = None,
        model_alias: str = "",
        workflow: str = "default",
        priority: str = "normal",
        routed_alias: str | None = None,
        decision: Decision | None = None,
        decision_id: str | None = None,
        policy_revision: str | None = None,
        candidates: list[Candidate] | None = None,
        upstream_request_id: str = "",
        job_id: str | None = None,
        door: Door | None = None,
    ) -> None:
        self.request_id = request_id
        self.endpoint = endpoint
        self.received_at = received_at
        self.deadline = deadline
        self.headers = headers
        self.raw_body = raw_body
        self.body = {} if body is None else body
        self.stream = stream
        self.client_wants_usage = False
        self.principal = principal
        self.session_key = session_key
        self.session = None
        self.model_alias = model_alias
        self.workflow = workflow
        self.priority = priority
        self.routed_alias = routed_alias
        self.decision = decision
        self.decision_id = decision_id
        self.policy_revision = policy_revision
        self.redaction = None
        self.candidates = [] if candidates is None else candidates
        self.attempts = []
        self.usage = Usage()
        self.produced_chars = 0
        self.more_in_hand = False
        self.response_model = None
        self.finish_reasons = []
        self.status = 0
        self.error_code = None
        self.first_byte_at = None
        self.completed_at = None
        self.response_headers = {}
        self.tool_calls_blocked = 0
        self.tool_stream = None
        self.meter = None
        self.idempotency = None
        self.replay_body = None
        self.response_body = None
        self.trace = NO_TRACE
        self.upstream_request_id = upstream_request_id
        self.job_id = job_id
        self.door = door
        self.door_state = None

    @property
    def api(self) -> str:
        """The client API the request came through: "chat.completions", "responses", "messages", ..."""
        return self.door.api if self.door is not None else self.endpoint.value

    @property
    def tenant(self) -> Tenant | None:
        return self.principal.tenant if self.principal else None
