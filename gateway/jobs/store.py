"""The `JobStore` port: the durable queue of async jobs, with the batches and files of
OpenAI's Batch API, shared by every gateway process (and, with Redis, every replica).

Adapters: `adapters/state/sqlite_jobs.py` (the embedded default) and
`adapters/state/redis_jobs.py` (Redis Streams with a consumer group). One contract test
module (tests/jobs/test_job_store_contract.py) runs against both. Any failure to reach the
store raises StateStoreUnavailable.

- Every read is scoped to a tenant: another tenant's id is None, as an unknown one.
- `claim` hands out jobs that are queued and visible now, and jobs whose claim has lapsed
  (a worker that died: its claim was not extended for `visibility_s`), each under a fresh
  token. A job is held by at most one live claim.
- `extend`, `retry_later` and `finish` act only for the claim's current token and return
  False, changing nothing, for a claim that lapsed and was taken over (or a job already
  finished): whoever holds the job now decides its end.
- `finish` records a final result once; it is kept `keep_s`, then deleted.
- `cancel_job` / `cancel_batch` cancel what has not started yet and return those jobs, so
  the caller releases what they reserved; a job already running finishes.
"""

from __future__ import annotations

from typing import Protocol

from gateway.jobs.records import (
    BatchView,
    Claim,
    JobResult,
    JobView,
    NewBatch,
    NewJob,
    QueueDepth,
    StoredFile,
    Webhook,
)


class JobStore(Protocol):
    name: str  # "sqlite" or "redis"

    async def submit(self, jobs: list[NewJob]) -> None:
        """Queue these jobs, visible at once."""
        ...

    async def claim(self, worker: str, limit: int, visibility_s: float) -> list[Claim]: ...

    async def extend(self, claim: Claim, visibility_s: float) -> bool: ...

    async def retry_later(
        self, claim: Claim, delay_s: float, cause: str, payload: bytes | None = None
    ) -> bool:
        """Back to the queue, visible again after `delay_s`; `payload` replaces the stored one
        when given (e.g. with the upstream's own queue id). `cause` is counted per job."""
        ...

    async def finish(self, claim: Claim, result: JobResult) -> bool: ...

    async def job(self, tenant: str, job_id: str) -> JobView | None: ...

    async def cancel_job(self, tenant: str, job_id: str, result: JobResult) -> NewJob | None:
        """Cancel a job not started yet (its result becomes `result`); None otherwise."""
        ...

    async def put_file(self, file: StoredFile, content: bytes) -> None: ...

    async def file(self, tenant: str, file_id: str) -> StoredFile | None: ...

    async def file_content(self, tenant: str, file_id: str) -> bytes | None: ...

    async def files(self, tenant: str, limit: int) -> list[StoredFile]:
        """The tenant's stored files, newest first."""
        ...

    async def delete_file(self, tenant: str, file_id: str) -> bool: ...

    async def create_batch(
        self, batch: NewBatch, jobs: list[NewJob], refused: list[tuple[NewJob, JobResult]]
    ) -> None:
        """The batch, its queued jobs and the lines refused at submission, all at once."""
        ...

    async def batch(self, tenant: str, batch_id: str) -> BatchView | None: ...

    async def batches(self, tenant: str, after: str | None, limit: int) -> list[BatchView]:
        """The tenant's batches, newest first, those after `after` (a batch id) only."""
        ...

    async def batch_jobs(self, tenant: str, batch_id: str) -> list[JobView]:
        """The batch's jobs in line order."""
        ...

    async def cancel_batch(self, tenant: str, batch_id: str, result: JobResult) -> list[NewJob] | None:
        """Mark the batch cancelled and cancel its jobs not started; None for an unknown batch."""
        ...

    async def put_webhook(self, hook: Webhook) -> None: ...

    async def webhooks(self, tenant: str) -> list[Webhook]:
        """The tenant's webhooks, oldest first."""
        ...

    async def delete_webhook(self, tenant: str, hook_id: str) -> bool: ...

    async def depth(self) -> list[QueueDepth]: ...

    async def purge(self) -> int:
        """Delete what is past its keeping time; how many records went."""
        ...

    async def aclose(self) -> None: ...
