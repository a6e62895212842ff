"""What the core and a job store exchange (the `JobStore` port in gateway/jobs/store.py).

Plain frozen values. Times are unix seconds (floats) from the gateway's clock, so every
process sharing a store agrees on them as well as their clocks agree. A job's `payload` is
the request as the request-side stages left it (gateway/jobs/snapshot.py): redacted, decided,
metered and routed; the store keeps it opaque.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

import orjson


class JobState(enum.Enum):
    QUEUED = "queued"  # waiting to be claimed (perhaps after a backoff: `visible_at`)
    RUNNING = "running"  # claimed by a worker whose claim has not lapsed
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True, slots=True)
class NewJob:
    id: str
    tenant: str
    payload: bytes
    created_at: float
    expires_at: float  # the completion window's end: past it the job fails, never runs
    batch_id: str | None = None
    line: int = 0  # the job's line in its batch's input file (0-based)
    custom_id: str | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """A job claimed by one worker: `token` names this claim, so a worker whose claim lapsed
    (and was taken over) cannot finish or re-queue the job."""

    id: str
    tenant: str
    payload: bytes
    token: str
    attempt: int  # 1 for the first claim
    created_at: float
    expires_at: float
    batch_id: str | None = None
    custom_id: str | None = None


@dataclass(frozen=True, slots=True)
class JobResult:
    """A job's end: the body the client gets (the answer, or an error, in the format of the
    API the request came through)."""

    state: JobState  # SUCCEEDED, FAILED or CANCELLED
    status: int  # the HTTP status the synchronous call would have had
    body: bytes  # JSON
    keep_s: float  # the result is deleted this long after it was stored
    code: str | None = None  # a failure's error code, for the records (not stored with the result)


@dataclass(frozen=True, slots=True)
class JobView:
    id: str
    tenant: str
    state: JobState
    created_at: float
    expires_at: float
    attempts: int
    started: bool  # some worker has begun on it (claimed once, or handed to an upstream's queue)
    finished_at: float | None = None
    status: int | None = None
    body: bytes | None = None
    batch_id: str | None = None
    custom_id: str | None = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class StoredFile:
    id: str
    tenant: str
    purpose: str
    filename: str
    bytes: int
    created_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class NewBatch:
    id: str
    tenant: str
    endpoint: str  # "/v1/chat/completions" or "/v1/embeddings"
    input_file_id: str
    completion_window: str
    created_at: float
    expires_at: float  # the completion window's end
    keep_until: float  # the batch and its results are deleted after this
    metadata: dict[str, str] | None = None

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> NewBatch:
        data: dict[str, Any] = orjson.loads(raw)
        return cls(**data)


@dataclass(frozen=True, slots=True)
class BatchView:
    batch: NewBatch
    total: int
    succeeded: int
    failed: int  # failed or cancelled lines, those refused at submission included
    cancel_requested_at: float | None
    last_finished_at: float | None

    @property
    def done(self) -> int:
        return self.succeeded + self.failed


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """One tenant's jobs not yet finished, for metrics."""

    tenant: str
    queued: int
    running: int
    oldest_created_at: float | None


@dataclass(frozen=True, slots=True)
class Webhook:
    """A URL a tenant registered for its completion events, and the secret that signs them."""

    id: str
    tenant: str
    url: str
    secret: str  # "whsec_" + base64 of the signing key (Standard Webhooks)
    created_at: float
