"""The `JobStore` contract (gateway/jobs/store.py), the same for SQLite and Redis."""

from __future__ import annotations

import asyncio
import time

from gateway.jobs.records import JobResult, JobState, NewBatch, NewJob, StoredFile, Webhook
from gateway.jobs.store import JobStore
from tests.jobs.conftest import Clock

WINDOW_S = 3600.0


def job(job_id: str, tenant: str = "alpha", payload: bytes = b'{"p": 1}', **extra: object) -> NewJob:
    now = time.time()
    return NewJob(job_id, tenant, payload, now, now + WINDOW_S, **extra)  # type: ignore[arg-type]


def done(body: bytes = b'{"ok": true}', keep_s: float = 600.0) -> JobResult:
    return JobResult(JobState.SUCCEEDED, 200, body, keep_s)


def failed(body: bytes = b'{"error": {}}') -> JobResult:
    return JobResult(JobState.FAILED, 503, body, 600.0)


async def claim_until(store: JobStore, worker: str, visibility_s: float, seconds: float = 10.0) -> list:  # type: ignore[type-arg]
    """Claims, polled until some come (a lapse is the store's own clock for Redis)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        claims = await store.claim(worker, 10, visibility_s)
        if claims:
            return claims
        await asyncio.sleep(0.05)
    return []


async def test_a_submitted_job_is_claimed_once(job_store: JobStore) -> None:
    await job_store.submit([job("j1"), job("j2")])
    first = await job_store.claim("w1", 10, 60)
    assert sorted(c.id for c in first) == ["j1", "j2"]
    assert all(c.attempt == 1 and c.payload == b'{"p": 1}' for c in first)
    assert await job_store.claim("w2", 10, 60) == []
    view = await job_store.job("alpha", "j1")
    assert view is not None and view.state is JobState.RUNNING and view.started


async def test_claim_respects_the_limit(job_store: JobStore) -> None:
    await job_store.submit([job(f"j{i}") for i in range(5)])
    assert len(await job_store.claim("w1", 2, 60)) == 2
    assert len(await job_store.claim("w1", 10, 60)) == 3


async def test_submitting_the_same_id_twice_keeps_one_job(job_store: JobStore) -> None:
    await job_store.submit([job("j1")])
    await job_store.submit([job("j1", payload=b"other")])
    claims = await job_store.claim("w1", 10, 60)
    assert [(c.id, c.payload) for c in claims] == [("j1", b'{"p": 1}')]


async def test_a_lapsed_claim_is_taken_over_and_its_old_holder_cannot_finish(job_store: JobStore) -> None:
    await job_store.submit([job("j1")])
    [old] = await job_store.claim("w1", 10, 0.2)
    [new] = await claim_until(job_store, "w2", 0.2)
    assert new.id == "j1" and new.attempt == 2 and new.token != old.token
    assert not await job_store.finish(old, done(b'{"by": "old"}'))
    assert not await job_store.retry_later(old, 0, "upstream_overloaded")
    assert await job_store.finish(new, done(b'{"by": "new"}'))
    view = await job_store.job("alpha", "j1")
    assert view is not None and view.state is JobState.SUCCEEDED and view.body == b'{"by": "new"}'
    assert view.status == 200 and view.finished_at is not None


async def test_an_extended_claim_is_not_taken_over(job_store: JobStore) -> None:
    await job_store.submit([job("j1")])
    [held] = await job_store.claim("w1", 10, 1.0)
    for _ in range(6):
        await asyncio.sleep(0.3)
        assert await job_store.extend(held, 1.0)
        assert await job_store.claim("w2", 10, 1.0) == []
    assert await job_store.finish(held, done())


async def test_a_job_finishes_once(job_store: JobStore) -> None:
    await job_store.submit([job("j1")])
    [claim] = await job_store.claim("w1", 10, 60)
    assert await job_store.finish(claim, done())
    assert not await job_store.finish(claim, failed())
    assert not await job_store.extend(claim, 60)
    assert await job_store.claim("w1", 10, 0.01) == []
    view = await job_store.job("alpha", "j1")
    assert view is not None and view.state is JobState.SUCCEEDED


async def test_retry_later_waits_out_its_delay_with_a_new_payload(job_store: JobStore, clock: Clock) -> None:
    await job_store.submit([job("j1")])
    [claim] = await job_store.claim("w1", 10, 60)
    assert await job_store.retry_later(claim, 30, "upstream_overloaded", payload=b'{"p": 2}')
    view = await job_store.job("alpha", "j1")
    assert view is not None and view.state is JobState.QUEUED and view.started
    assert await job_store.claim("w1", 10, 60) == []
    clock.advance(31)
    [again] = await job_store.claim("w2", 10, 60)
    assert again.id == "j1" and again.attempt == 2 and again.payload == b'{"p": 2}'


async def test_reads_are_scoped_to_the_tenant(job_store: JobStore) -> None:
    await job_store.submit([job("j1", tenant="alpha")])
    assert await job_store.job("beta", "j1") is None
    assert await job_store.job("alpha", "nope") is None
    assert await job_store.cancel_job("beta", "j1", failed()) is None
    now = time.time()
    await job_store.put_file(StoredFile("file-1", "alpha", "batch", "in.jsonl", 3, now, now + 60), b"abc")
    assert await job_store.file("beta", "file-1") is None
    assert await job_store.file_content("beta", "file-1") is None
    stored = await job_store.file("alpha", "file-1")
    assert stored is not None and stored.bytes == 3 and stored.filename == "in.jsonl"
    assert await job_store.file_content("alpha", "file-1") == b"abc"
    batch = NewBatch("batch-1", "alpha", "/v1/chat/completions", "file-1", "24h", now, now + 60, now + 120)
    await job_store.create_batch(batch, [], [])
    assert await job_store.batch("beta", "batch-1") is None
    assert await job_store.batches("beta", None, 10) == []
    assert await job_store.batch_jobs("beta", "batch-1") == []
    assert await job_store.cancel_batch("beta", "batch-1", failed()) is None


async def test_cancel_returns_a_queued_job_and_leaves_a_running_one(job_store: JobStore) -> None:
    await job_store.submit([job("queued"), job("running")])
    claims = await job_store.claim("w1", 1, 60)
    running_id = claims[0].id
    queued_id = "queued" if running_id == "running" else "running"
    cancelled = await job_store.cancel_job("alpha", queued_id, JobResult(JobState.CANCELLED, 499, b"{}", 60))
    assert cancelled is not None and cancelled.id == queued_id and cancelled.payload == b'{"p": 1}'
    assert await job_store.cancel_job("alpha", running_id, failed()) is None
    assert await job_store.claim("w2", 10, 60) == []
    view = await job_store.job("alpha", queued_id)
    assert view is not None and view.state is JobState.CANCELLED


async def test_a_batch_counts_its_lines_and_keeps_their_order(job_store: JobStore) -> None:
    now = time.time()
    endpoint = "/v1/chat/completions"
    batch = NewBatch("b1", "alpha", endpoint, "file-1", "24h", now, now + 60, now + 120, {"k": "v"})
    lines = [job(f"b1-{i}", batch_id="b1", line=i, custom_id=f"c{i}") for i in (0, 2, 3)]
    refused = (job("b1-1", batch_id="b1", line=1, custom_id="c1"), failed(b'{"error": "bad"}'))
    await job_store.create_batch(batch, lines, [refused])
    view = await job_store.batch("alpha", "b1")
    assert view is not None and (view.total, view.succeeded, view.failed) == (4, 0, 1)
    assert view.batch == batch
    claims = {c.id: c for c in await job_store.claim("w1", 2, 60)}
    assert len(claims) == 2
    for index, claim in enumerate(claims.values()):
        assert claim.batch_id == "b1" and claim.custom_id is not None
        await job_store.finish(claim, done() if index == 0 else failed())
    view = await job_store.batch("alpha", "b1")
    assert view is not None and (view.succeeded, view.failed) == (1, 2) and view.last_finished_at is not None
    jobs = await job_store.batch_jobs("alpha", "b1")
    assert [(j.line, j.custom_id) for j in jobs] == [(0, "c0"), (1, "c1"), (2, "c2"), (3, "c3")]
    assert jobs[1].state is JobState.FAILED and jobs[1].body == b'{"error": "bad"}'
    left = await job_store.cancel_batch("alpha", "b1", JobResult(JobState.CANCELLED, 499, b"{}", 60))
    assert left is not None and len(left) == 1 and left[0].payload == b'{"p": 1}'
    view = await job_store.batch("alpha", "b1")
    assert view is not None and view.done == 4 and view.cancel_requested_at is not None


async def test_batches_are_listed_newest_first_with_a_cursor(job_store: JobStore) -> None:
    now = time.time()
    for i in range(5):
        batch = NewBatch(f"b{i}", "alpha", "/v1/embeddings", "f", "24h", now + i, now + 60, now + 120)
        await job_store.create_batch(batch, [], [])
    first = await job_store.batches("alpha", None, 2)
    assert [b.batch.id for b in first] == ["b4", "b3"]
    rest = await job_store.batches("alpha", "b3", 10)
    assert [b.batch.id for b in rest] == ["b2", "b1", "b0"]


async def test_depth_counts_each_tenants_open_jobs(job_store: JobStore) -> None:
    await job_store.submit([job("a1"), job("a2"), job("b1", tenant="beta")])
    claims = await job_store.claim("w1", 10, 60)
    a1 = next(c for c in claims if c.id == "a1")
    await job_store.finish(a1, done())
    b1 = next(c for c in claims if c.id == "b1")
    await job_store.retry_later(b1, 100, "upstream_rate_limited")
    depth = {d.tenant: d for d in await job_store.depth()}
    assert (depth["alpha"].queued, depth["alpha"].running) == (0, 1)
    assert (depth["beta"].queued, depth["beta"].running) == (1, 0)
    assert depth["beta"].oldest_created_at is not None


async def test_results_are_deleted_after_their_keeping_time(job_store: JobStore, clock: Clock) -> None:
    await job_store.submit([job("j1")])
    [claim] = await job_store.claim("w1", 10, 60)
    await job_store.finish(claim, done(keep_s=0.2))
    deadline = time.monotonic() + 10
    while await job_store.job("alpha", "j1") is not None:
        assert time.monotonic() < deadline, "the result was never deleted"
        clock.advance(1)
        await job_store.purge()
        await asyncio.sleep(0.05)


async def test_webhooks_are_the_tenants_own(job_store: JobStore) -> None:
    now = time.time()
    await job_store.put_webhook(Webhook("wh-1", "alpha", "https://a.example/hook", "whsec_a", now))
    await job_store.put_webhook(Webhook("wh-2", "alpha", "https://b.example/hook", "whsec_b", now + 1))
    await job_store.put_webhook(Webhook("wh-3", "beta", "https://c.example/hook", "whsec_c", now))
    assert [h.id for h in await job_store.webhooks("alpha")] == ["wh-1", "wh-2"]
    assert (await job_store.webhooks("alpha"))[0].secret == "whsec_a"
    assert not await job_store.delete_webhook("beta", "wh-1")
    assert await job_store.delete_webhook("alpha", "wh-1")
    assert [h.id for h in await job_store.webhooks("alpha")] == ["wh-2"]
    assert [h.url for h in await job_store.webhooks("beta")] == ["https://c.example/hook"]


async def test_files_are_listed_newest_first_and_deleted_by_their_tenant_only(job_store: JobStore) -> None:
    now = time.time()
    for i in range(3):
        await job_store.put_file(
            StoredFile(f"file-{i}", "alpha", "batch", f"{i}.jsonl", 1, now + i, now + 60), b"x"
        )
    await job_store.put_file(StoredFile("file-b", "beta", "batch", "b.jsonl", 1, now, now + 60), b"y")
    assert [f.id for f in await job_store.files("alpha", 10)] == ["file-2", "file-1", "file-0"]
    assert [f.id for f in await job_store.files("alpha", 2)] == ["file-2", "file-1"]
    assert not await job_store.delete_file("beta", "file-1")
    assert await job_store.delete_file("alpha", "file-1")
    assert not await job_store.delete_file("alpha", "file-1")
    assert await job_store.file("alpha", "file-1") is None
    assert [f.id for f in await job_store.files("alpha", 10)] == ["file-2", "file-0"]
    assert [f.id for f in await job_store.files("beta", 10)] == ["file-b"]
