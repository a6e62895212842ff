"""The Redis job store on a Redis Cluster whose queue slot (hash tag `{jobs}`) moves to
another node between calls: jobs claimed before the move are finished after it, jobs
queued before it are claimed during and after it, and nothing stays on the old node."""

from __future__ import annotations

import time

from adapters.state.redis_jobs import RedisJobStore
from gateway.jobs.records import JobResult, JobState, NewJob
from tests.metering.redis_cluster import Cluster


def job(job_id: str) -> NewJob:
    now = time.time()
    return NewJob(job_id, "alpha", b'{"p": 1}', now, now + 3600)


def done() -> JobResult:
    return JobResult(JobState.SUCCEEDED, 200, b'{"ok": true}', 600.0)


async def test_the_queue_follows_its_slot_to_another_node(cluster: Cluster, jobs_prefix: str) -> None:
    store = RedisJobStore(cluster.url, jobs_prefix, cluster=True)
    try:
        await store.submit([job("j1"), job("j2"), job("j3")])
        [first] = await store.claim("w1", 1, 60)
        source = cluster.owner("jobs")
        target = next(port for port in cluster.ports if port != source)

        # Migrating, every key already moved: the source answers ASK, the target serves.
        cluster.start_migration("jobs", source, target)
        [second] = await store.claim("w1", 1, 60)
        assert await store.finish(first, done())

        # Moved: the source answers MOVED, the client follows the slot to its new node.
        cluster.finish_migration("jobs", target)
        [third] = await store.claim("w2", 1, 60)
        assert {first.id, second.id, third.id} == {"j1", "j2", "j3"}
        assert await store.finish(second, done()) and await store.finish(third, done())
        assert not await store.finish(third, done())  # once only, wherever the slot is
        for job_id in ("j1", "j2", "j3"):
            view = await store.job("alpha", job_id)
            assert view is not None and view.state is JobState.SUCCEEDED
        assert await store.claim("w3", 10, 0.001) == []  # nothing left pending to take over
        assert cluster.owner("jobs") == target
        assert cluster.keys(source, f"{jobs_prefix}:*") == []
    finally:
        await store.aclose()
