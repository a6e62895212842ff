"""What the core asks of the outside world. Adapters implement these; the core never imports them."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

# A stream's chunk, which adapters make: defined with its shapes, compiled; named here for them.
from gateway.chunk_shapes import Chunk as Chunk  # noqa: PLC0414 (mypy's explicit re-export)
from gateway.exchange import Endpoint
from gateway.keystore.records import KeyChanges, LiveKey
from gateway.metering.lease_records import LeaseGrant, LeaseSync
from gateway.metering.records import (
    IdempotencyClaim,
    ReserveOutcome,
    ReserveRequest,
    Settlement,
    SpendRow,
    StoredResponse,
)
from gateway.sessions.records import SessionRecord, SessionUpdate


@dataclass(slots=True, init=False)
class UpstreamRequest:
    endpoint: Endpoint
    model: str  # the upstream's model id; the adapter writes it into the body
    body: dict[str, Any]  # the client's body after the request stages, passed through untouched otherwise
    stream: bool
    request_id: str  # the id for the upstream: a UUID the gateway derived, never the client's text
    deadline: float  # time.monotonic() by which the whole answer must be in
    first_byte_timeout: float  # seconds allowed until the first byte of the answer (a stream's first event)
    headers_timeout: float  # seconds allowed until the response head, streamed or not
    session_key: str | None  # affinity key, already scoped per tenant and hashed
    replica: int  # which of the upstream's `replicas` to send to, chosen by the forwarder
    trace_headers: Mapping[str, str] | None  # traceparent (and tracestate) for this attempt

    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        body: dict[str, Any],
        stream: bool,
        request_id: str,
        deadline: float,
        first_byte_timeout: float,
        headers_timeout: float,
        session_key: str | None = None,
        replica: int = 0,
        trace_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.model = model
        self.body = body
        self.stream = stream
        self.request_id = request_id
        self.deadline = deadline
        self.first_byte_timeout = first_byte_timeout
        self.headers_timeout = headers_timeout
        self.session_key = session_key
        self.replica = replica
        self.trace_headers = trace_headers


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    body: dict[str, Any]  # OpenAI-shaped, envelope removed


class ChunkStream(Protocol):
    """An upstream stream that has started (status 200 received). Iterating may raise UpstreamError."""

    def __aiter__(self) -> AsyncIterator[Chunk]: ...

    async def aclose(self) -> None: ...


class Health(enum.Enum):
    """One health check's answer. Only UNREACHABLE says for sure that a server is down: one
    that serves a request at a time may leave its health route waiting (SILENT) or answer
    that it is busy (DOWN) while it works."""

    UP = "up"
    DOWN = "down"  # answered, not healthy
    SILENT = "silent"  # no answer in the time allowed
    UNREACHABLE = "unreachable"  # no connection


class Upstream(Protocol):
    name: str
    provider: str  # GenAI semantic-convention provider name, e.g. "openai"
    address: str  # host:port for telemetry, never credentials
    # Base URLs of the servers behind this upstream (one for a single endpoint); the
    # forwarder's pool picks one per attempt and names it by index in UpstreamRequest.replica.
    replicas: tuple[str, ...]

    async def complete(self, request: UpstreamRequest) -> UpstreamResponse:
        """Send a non-streamed request. Raises UpstreamError subclasses on failure."""
        ...

    async def stream(self, request: UpstreamRequest) -> ChunkStream:
        """Start a streamed request; returns once the upstream accepted it."""
        ...

    async def check_health(self, replica: int, timeout_s: float) -> Health:
        """One replica's answer to its health check, within `timeout_s`."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class QueueingUpstream(Protocol):
    """An upstream with a queue of its own for work that need not be answered now (Workers
    AI's `queueRequest`): an adapter capability the job runner uses when it has it."""

    def queues(self, model: str) -> bool:
        """Whether jobs for this model go through the upstream's queue."""
        ...

    async def enqueue(self, request: UpstreamRequest, reference: str) -> str:
        """Queue the request (tagged with `reference`, the job id); the upstream's id for it."""
        ...

    async def poll(self, request: UpstreamRequest, queued_id: str, reference: str) -> UpstreamResponse | None:
        """The answer once there is one; None while it is pending. Raises UpstreamError."""
        ...


class WebhookSender(Protocol):
    """Posts one webhook delivery, following no redirect; the receiver's HTTP status, or None
    when it gave none (no connection, a timeout)."""

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> int | None: ...

    async def aclose(self) -> None: ...


class AuditSink(Protocol):
    """An append-only log of policy decisions and request completions.

    `append` must not block the request path: a sink queues the record and writes it in
    the background, counting what it drops when its queue is full. Only a sink configured
    as mandatory waits for the write and raises AuditWriteFailed when it fails.
    """

    async def append(self, record: dict[str, Any]) -> None: ...

    async def aclose(self) -> None: ...


class AuditWriter(Protocol):
    """Where audit records are stored (a JSONL file, a Redis stream), behind the core's
    queued AuditSink (`gateway.audit.queued_sink`).

    `write` attaches a batch to the stored hash chain (`gateway.audit.chain.seal`) and
    persists it, atomically with respect to every other writer of the same chain, in this
    process or another. It raises when the batch may not have been stored.
    """

    async def write(self, records: list[dict[str, Any]]) -> None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class EngineResult:
    """What a policy engine answered for one input document."""

    value: Any  # the raw decision as the policy wrote it; None when the policy left it undefined
    revision: str  # the policy revision that produced it
    decision_id: str | None = None  # the engine's own id for the decision, when it has one
    error: str | None = None  # why there is no value (an evaluation error), for the log


@dataclass(frozen=True, slots=True)
class EngineReadiness:
    """Whether a policy engine can answer now, for /readyz; `detail` says why (or what serves)."""

    ready: bool
    detail: str


@dataclass(frozen=True, slots=True)
class EvaluationQueueStats:
    """An evaluation queue now, for metrics and readiness."""

    threads: int  # the configured number of evaluation threads
    running: int  # evaluations running in a live (not abandoned) thread
    waiting: int  # evaluations waiting for a thread
    abandoned: int  # threads still running an evaluation whose caller gave up
    started: int  # running total: evaluations that got a thread
    refused: int  # running total: evaluations refused because the queue was full


class EvaluationQueue(Protocol):
    """An engine's own queue of evaluations waiting for a thread (the embedded engine's)."""

    def stats(self) -> EvaluationQueueStats: ...

    def observe_waits(self, observe: Callable[[float], None]) -> None:
        """`observe(seconds)` for each evaluation's wait for a thread, given up on or not."""
        ...


class PolicyEngine(Protocol):
    """Evaluates the policy for an input document (docs/policies.md).

    `evaluate` raises PolicyUnavailable when no answer can be had (a server down or too
    slow); a policy that answers with something that is not a decision is the caller's to
    deny. `revision` names the policy now serving; `cacheable` says whether the same input
    always gets the same decision from it (no time, randomness or network in the policy).
    `readiness` answers within about a second, without evaluating the policy.
    """

    name: str  # "rego" or "opa", for logs and the decision record

    @property
    def revision(self) -> str: ...

    @property
    def cacheable(self) -> bool: ...

    async def evaluate(self, input_doc: dict[str, Any]) -> EngineResult: ...

    async def readiness(self) -> EngineReadiness: ...

    def evaluation_queue(self) -> EvaluationQueue | None:
        """The queue to measure, when the engine has one of its own."""
        ...

    async def aclose(self) -> None: ...


class StateStore(Protocol):
    """Budgets, rate limits, idempotency keys and the spend ledger, shared by every process
    (and, with Redis, every replica) that uses the same store. Records: gateway/metering/records.py.

    Each method is one atomic step, with the same semantics in every adapter (one contract
    test module runs against all of them). Any failure to reach the store raises
    StateStoreUnavailable.

    - `reserve`: first releases reservations whose lease has passed; then, if every rate
      charge fits its limit and every hard budget counter can take its amount, takes them
      all and records the reservation; otherwise changes nothing. An id already settled
      (a reserve that timed out is released by a settle of its id, which may reach the store
      first) is refused, taking nothing.
    - `settle`: releases the reservation still open under that id (if any), adds the actual
      amounts and the ledger entry, gives back the rate refunds (and, with `release`, all the
      open reservation took from the rate limits). Idempotent: returns False, changing
      nothing, for an id already settled.
    - `claim_idempotency` / `complete_idempotency` / `release_idempotency`: an
      Idempotency-Key is claimed by one request (for `lease_s`), then either holds its
      response (for `ttl_s`) or is released for a retry.
    - sessions (gateway/sessions/records.py): `settle` applies a settlement's session update
      in the same atomic step, `lease` the session updates of its batch, in order, only when
      it applies the batch (`SettleBatch.session_updates`: those the worker held back when it
      holds them, else its settlements' own); `update_session` applies one alone.
    """

    name: str  # "sqlite" or "redis"

    async def reserve(self, request: ReserveRequest) -> ReserveOutcome: ...

    async def settle(self, settlement: Settlement) -> bool: ...

    async def lease(self, sync: LeaseSync) -> LeaseGrant:
        """One atomic step: apply `sync.batch` unless its id was applied before, then set the
        lease's holds as asked (`gateway/metering/lease_records.py`). The lease is an open
        reservation like any other: `open_reservations` counts it, and it is released when
        its lease passes."""
        ...

    async def counters(self, tenant: str, counters: tuple[str, ...]) -> tuple[int, ...]:
        """spent + reserved of each counter (0 for one never used)."""
        ...

    async def open_reservations(self, tenant: str) -> int:
        """Reservations of the tenant neither settled nor past their lease."""
        ...

    async def claim_idempotency(
        self, tenant: str, key: str, fingerprint: str, lease_s: float
    ) -> IdempotencyClaim: ...

    async def complete_idempotency(
        self, tenant: str, key: str, fingerprint: str, response: StoredResponse, ttl_s: float
    ) -> None: ...

    async def release_idempotency(self, tenant: str, key: str) -> None: ...

    async def spend(self, tenants: tuple[str, ...], since: str, until: str) -> list[SpendRow]:
        """Ledger rows of these tenants for days since..until (YYYY-MM-DD, both included)."""
        ...

    async def session(self, tenant: str, session: str, decisions: bool = True) -> SessionRecord | None:
        """The session's record, or None when there is none (or it expired). Without
        `decisions`, its decision ids are left out (`decision_ids` empty, and
        `decisions_dropped` may count only the ids the store has trimmed so far, not those it
        still holds past the bound): admission, which reads a record for every turn whose
        cached copy is stale, has no use for them."""
        ...

    async def sessions(self, tenants: tuple[str, ...], sort: str, limit: int) -> list[SessionRecord]:
        """Up to `limit` live records of these tenants, by `sort` (SESSION_SORTS), largest first.
        Redis ranks the 1,000 sessions of each tenant seen last."""
        ...

    async def update_session(self, update: SessionUpdate) -> None:
        """Apply a session update on its own (a settle applies `Settlement.session` itself)."""
        ...

    async def ping(self) -> None: ...

    async def aclose(self) -> None: ...


class KeyStore(Protocol):
    """Live keys (gateway/keystore/records.py), shared by every process and replica that uses
    the same store. Each method is one atomic step; any failure to reach the store raises
    StateStoreUnavailable. Every change takes the store's next version number.

    - `insert`: a new key; KeyConflict when its id is taken.
    - `update`: revoke (the first revocation's time is kept) and/or move the expiry earlier
      (never later); KeyNotFound for an unknown id. Returns the key as stored.
    - `rotate`: in one step, `new` is inserted and the old key's expiry moved to at most
      `old_expires_at_ms`; KeyNotFound, KeyNotUsable (revoked or expired at `now_ms`) or
      KeyConflict, changing nothing. Returns (old, new) as stored.
    """

    name: str  # "sqlite" or "redis"

    async def version(self) -> int:
        """The version of the store's last key change (0: none yet)."""
        ...

    async def changes(self, since: int) -> KeyChanges: ...

    async def get(self, key_id: str) -> LiveKey | None: ...

    async def insert(self, key: LiveKey) -> LiveKey: ...

    async def update(
        self, key_id: str, *, revoked_at_ms: int | None = None, expires_at_ms: int | None = None
    ) -> LiveKey: ...

    async def rotate(
        self, old_id: str, new: LiveKey, old_expires_at_ms: int, now_ms: int
    ) -> tuple[LiveKey, LiveKey]: ...

    async def aclose(self) -> None: ...
