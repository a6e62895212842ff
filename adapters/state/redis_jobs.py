"""The job store for many replicas: Redis Streams with one consumer group, implementing the
`JobStore` port (gateway/jobs/store.py); the scripts are in `redis_jobs_scripts.py`.

Each gateway process is a consumer of the group `workers`. `claim` first moves jobs whose
backoff is over from the `delayed` sorted set into the stream, then takes over entries that
sat unacknowledged in another consumer's pending list for `visibility_s` (XAUTOCLAIM: that
worker died or stalled; a live one extends its claims well before), then reads new entries
(XREADGROUP). An entry is acknowledged and deleted once its job finishes or goes back to
wait out a backoff, so the stream holds only what is queued or running.

On a Redis Cluster (`jobs.redis_cluster: true`) every key carries the one hash tag `{jobs}`,
so the whole queue is one slot: its scripts and transactions never cross slots, and the
cluster's value to it is failover to a replica, not spreading its load (docs/async.md).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson
from redis.asyncio import Redis, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError

from adapters.state import redis_jobs_scripts as scripts
from adapters.state.redis_jobs_records import batch_view_of, claim_of, fields_of, new_job_of, view_of
from gateway.errors import StateStoreUnavailable
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

_GROUP = "workers"
_PROMOTE_LIMIT = 500


class RedisJobStore:
    name = "redis"

    def __init__(
        self,
        url: str,
        prefix: str = "tollgate",
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.time,
        cluster: bool = False,
    ) -> None:
        # Any: redis-py's annotations mix bytes and str replies; this module decodes them itself.
        client = RedisCluster if cluster else Redis
        self._redis: Any = client.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._cluster = cluster
        self._base = f"{prefix}:{{jobs}}:"
        self._stream = [self._base + "stream"]  # every script's KEYS: it routes them to the queue's slot
        self._clock = clock
        self._group_ready = False
        self._submit = self._redis.register_script(scripts.SUBMIT)
        self._promote = self._redis.register_script(scripts.PROMOTE)
        self._take = self._redis.register_script(scripts.TAKE)
        self._extend = self._redis.register_script(scripts.EXTEND)
        self._retry = self._redis.register_script(scripts.RETRY_LATER)
        self._finish = self._redis.register_script(scripts.FINISH)
        self._cancel_job = self._redis.register_script(scripts.CANCEL_JOB)
        self._cancel_batch = self._redis.register_script(scripts.CANCEL_BATCH)

    async def _call(self, make: Callable[[], Any], read: bool = False) -> Any:
        """`read`: the call changes nothing, so it is made once more on a fresh connection when
        its connection turns out closed (Redis restarted); a write is never sent twice."""
        try:
            return await make()
        except RedisError as exc:
            failure: RedisError = exc
            if isinstance(exc, RedisConnectionError) and not self._cluster:
                # Redis restarted or dropped this process: the pool's idle connections are as
                # dead as this one. (The cluster client reconnects and retries by itself.)
                await self._redis.connection_pool.disconnect(inuse_connections=False)
                if read:
                    try:
                        return await make()
                    except RedisError as again:
                        failure = again
            raise StateStoreUnavailable(f"The job store (Redis) failed: {failure}.") from failure

    async def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            await self._redis.xgroup_create(self._base + "stream", _GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    async def _load_submit(self) -> None:
        """Before a transaction that runs SUBMIT: redis-py loads a transaction's scripts first
        on one server but not on a cluster, where an unknown script inside MULTI would fail
        alone and leave the transaction's other commands applied."""
        if self._cluster:
            await self._redis.script_load(scripts.SUBMIT)

    async def _queue_submit(self, pipe: Any, job: NewJob) -> None:
        if self._cluster:
            # redis-py refuses `evalsha` in a cluster pipeline, since a script's keys could
            # be anywhere; this one's are the queue's one slot, and `_load_submit` loaded it.
            pipe.execute_command("EVALSHA", self._submit.sha, 1, *self._stream, *self._submit_args(job))
        else:
            await self._submit(keys=self._stream, args=self._submit_args(job), client=pipe)

    def _submit_args(self, job: NewJob) -> list[Any]:
        args: list[Any] = [self._base, _GROUP, job.id, job.tenant, repr(job.created_at), repr(job.expires_at)]
        args += ["payload", job.payload, "line", job.line]
        if job.batch_id is not None:
            args += ["batch_id", job.batch_id]
        if job.custom_id is not None:
            args += ["custom_id", job.custom_id]
        return args

    async def submit(self, jobs: list[NewJob]) -> None:
        async def run() -> None:
            await self._ensure_group()
            await self._load_submit()
            async with self._redis.pipeline(transaction=True) as pipe:
                for job in jobs:
                    await self._queue_submit(pipe, job)
                await pipe.execute()

        await self._call(run)

    async def claim(self, worker: str, limit: int, visibility_s: float) -> list[Claim]:
        async def run() -> list[Claim]:
            await self._ensure_group()
            now = self._clock()
            stream = self._base + "stream"
            await self._promote(keys=self._stream, args=[self._base, repr(now), _PROMOTE_LIMIT])
            entries: list[tuple[bytes, dict[bytes, bytes]]] = []
            reclaimed = await self._redis.xautoclaim(
                stream, _GROUP, worker, min_idle_time=max(1, int(visibility_s * 1000)), count=limit
            )
            entries += [e for e in reclaimed[1] if e and e[1]]
            if len(entries) < limit:
                read = await self._redis.xreadgroup(_GROUP, worker, {stream: ">"}, count=limit - len(entries))
                for _, found in read or ():
                    entries += found
            claims = []
            for entry, fields in entries:
                token = f"{worker}:{uuid.uuid4().hex}"
                job_id = fields[b"job"].decode()
                take: list[Any] = [self._base, _GROUP, entry, job_id, token, repr(now)]
                raw = await self._take(keys=self._stream, args=take)
                if raw:
                    claims.append(claim_of(fields_of(raw), token))
            return claims

        claims: list[Claim] = await self._call(run)
        return claims

    async def extend(self, claim: Claim, visibility_s: float) -> bool:
        consumer = claim.token.rsplit(":", 1)[0]
        args = [self._base, _GROUP, claim.id, claim.token, consumer]
        done = await self._call(lambda: self._extend(keys=self._stream, args=args))
        return bool(done)

    async def retry_later(
        self, claim: Claim, delay_s: float, cause: str, payload: bytes | None = None
    ) -> bool:
        visible_at = repr(self._clock() + delay_s)
        args: list[Any] = [self._base, _GROUP, claim.id, claim.token, visible_at, cause, payload or b""]
        return bool(await self._call(lambda: self._retry(keys=self._stream, args=args)))

    async def finish(self, claim: Claim, result: JobResult) -> bool:
        args = [
            self._base,
            _GROUP,
            claim.id,
            claim.token,
            result.state.value,
            result.status,
            result.body,
            repr(self._clock()),
            max(1, int(result.keep_s * 1000)),
        ]
        return bool(await self._call(lambda: self._finish(keys=self._stream, args=args)))

    async def job(self, tenant: str, job_id: str) -> JobView | None:
        raw = await self._call(lambda: self._redis.hgetall(self._base + "job:" + job_id), read=True)
        fields = {k.decode(): v for k, v in raw.items()}
        if not fields or fields.get("tenant") != tenant.encode():
            return None
        return view_of(fields)

    async def cancel_job(self, tenant: str, job_id: str, result: JobResult) -> NewJob | None:
        args = self._cancel_args(job_id, tenant, result)
        raw = await self._call(lambda: self._cancel_job(keys=self._stream, args=args))
        return new_job_of(fields_of(raw)) if raw else None

    def _cancel_args(self, target: str, tenant: str, result: JobResult) -> list[Any]:
        now = self._clock()
        keep = max(1, int(result.keep_s * 1000))
        return [self._base, _GROUP, target, tenant, result.status, result.body, repr(now), keep]

    async def put_file(self, file: StoredFile, content: bytes) -> None:
        key = self._base + "file:" + file.id

        async def run() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(
                    key,
                    mapping={
                        "tenant": file.tenant,
                        "purpose": file.purpose,
                        "filename": file.filename,
                        "bytes": file.bytes,
                        "created_at": repr(file.created_at),
                        "expires_at": repr(file.expires_at),
                        "content": content,
                    },
                )
                pipe.expireat(key, int(file.expires_at) + 1)
                pipe.zadd(self._base + "files:" + file.tenant, {file.id: file.created_at})
                await pipe.execute()

        await self._call(run)

    async def file(self, tenant: str, file_id: str) -> StoredFile | None:
        key = self._base + "file:" + file_id
        names = ("tenant", "purpose", "filename", "bytes", "created_at", "expires_at")
        values = await self._call(lambda: self._redis.hmget(key, names), read=True)
        if values[0] is None or values[0].decode() != tenant:
            return None
        return StoredFile(
            file_id,
            tenant,
            values[1].decode(),
            values[2].decode(),
            int(values[3]),
            float(values[4]),
            float(values[5]),
        )

    async def file_content(self, tenant: str, file_id: str) -> bytes | None:
        key = self._base + "file:" + file_id
        values = await self._call(lambda: self._redis.hmget(key, ("tenant", "content")), read=True)
        if values[0] is None or values[0].decode() != tenant:
            return None
        content: bytes = values[1]
        return content

    async def files(self, tenant: str, limit: int) -> list[StoredFile]:
        index = self._base + "files:" + tenant
        found: list[StoredFile] = []
        for file_id in await self._call(lambda: self._redis.zrevrange(index, 0, limit * 2), read=True):
            stored = await self.file(tenant, file_id.decode())
            if stored is None:  # expired: drop it from the index
                await self._call(partial(self._redis.zrem, index, file_id))
                continue
            found.append(stored)
            if len(found) == limit:
                break
        return found

    async def delete_file(self, tenant: str, file_id: str) -> bool:
        if await self.file(tenant, file_id) is None:
            return False

        async def run() -> None:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(self._base + "file:" + file_id)
                pipe.zrem(self._base + "files:" + tenant, file_id)
                await pipe.execute()

        await self._call(run)
        return True

    async def create_batch(
        self, batch: NewBatch, jobs: list[NewJob], refused: list[tuple[NewJob, JobResult]]
    ) -> None:
        key = self._base + "batch:" + batch.id
        lines = sorted([*jobs, *(job for job, _ in refused)], key=lambda j: j.line)
        now = self._clock()

        async def run() -> None:
            await self._ensure_group()
            await self._load_submit()
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(
                    key,
                    mapping={
                        "tenant": batch.tenant,
                        "record": batch.to_json(),
                        "total": len(lines),
                        "succeeded": 0,
                        "failed": len(refused),
                    },
                )
                pipe.expireat(key, int(batch.keep_until) + 1)
                pipe.zadd(self._base + "batches:" + batch.tenant, {batch.id: batch.created_at})
                if lines:
                    pipe.rpush(self._base + "batchjobs:" + batch.id, *(j.id for j in lines))
                    pipe.expireat(self._base + "batchjobs:" + batch.id, int(batch.keep_until) + 1)
                for job in jobs:
                    await self._queue_submit(pipe, job)
                for job, result in refused:
                    job_key = self._base + "job:" + job.id
                    fields: dict[str, Any] = {
                        "id": job.id,
                        "tenant": job.tenant,
                        "created_at": repr(job.created_at),
                        "expires_at": repr(job.expires_at),
                        "state": result.state.value,
                        "attempts": 0,
                        "started": 0,
                        "status": result.status,
                        "body": result.body,
                        "finished_at": repr(now),
                        "line": job.line,
                        "batch_id": batch.id,
                    }
                    if job.custom_id is not None:
                        fields["custom_id"] = job.custom_id
                    pipe.hset(job_key, mapping=fields)
                    pipe.pexpire(job_key, max(1, int(result.keep_s * 1000)))
                await pipe.execute()

        await self._call(run)

    async def batch(self, tenant: str, batch_id: str) -> BatchView | None:
        raw = await self._call(lambda: self._redis.hgetall(self._base + "batch:" + batch_id), read=True)
        fields = {k.decode(): v for k, v in raw.items()}
        if not fields or fields.get("tenant") != tenant.encode():
            return None
        return batch_view_of(fields)

    async def batches(self, tenant: str, after: str | None, limit: int) -> list[BatchView]:
        index = self._base + "batches:" + tenant

        async def ids() -> list[bytes]:
            start = 0
            if after is not None:
                rank = await self._redis.zrevrank(index, after)
                if rank is None:
                    return []
                start = rank + 1
            found: list[bytes] = await self._redis.zrevrange(index, start, start + limit * 2)
            return found

        views = []
        for batch_id in await self._call(ids, read=True):
            view = await self.batch(tenant, batch_id.decode())
            if view is None:  # expired: drop it from the index
                await self._call(partial(self._redis.zrem, index, batch_id))
                continue
            views.append(view)
            if len(views) == limit:
                break
        return views

    async def batch_jobs(self, tenant: str, batch_id: str) -> list[JobView]:
        async def run() -> list[JobView]:
            ids = await self._redis.lrange(self._base + "batchjobs:" + batch_id, 0, -1)
            async with self._redis.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hgetall(self._base + "job:" + job_id.decode())
                rows = await pipe.execute()
            views = []
            for raw in rows:
                fields = {k.decode(): v for k, v in raw.items()}
                if fields and fields.get("tenant") == tenant.encode():
                    views.append(view_of(fields))
            return views

        jobs: list[JobView] = await self._call(run, read=True)
        return jobs

    async def cancel_batch(self, tenant: str, batch_id: str, result: JobResult) -> list[NewJob] | None:
        args = self._cancel_args(batch_id, tenant, result)
        raw = await self._call(lambda: self._cancel_batch(keys=self._stream, args=args))
        if raw is None:
            return None
        return [new_job_of(fields_of(item)) for item in raw]

    async def put_webhook(self, hook: Webhook) -> None:
        document = orjson.dumps(
            {
                "id": hook.id,
                "tenant": hook.tenant,
                "url": hook.url,
                "secret": hook.secret,
                "created_at": hook.created_at,
            }
        )
        await self._call(lambda: self._redis.hset(self._base + "webhooks:" + hook.tenant, hook.id, document))

    async def webhooks(self, tenant: str) -> list[Webhook]:
        raw = await self._call(lambda: self._redis.hgetall(self._base + "webhooks:" + tenant), read=True)
        hooks = [Webhook(**orjson.loads(value)) for value in raw.values()]
        return sorted(hooks, key=lambda hook: (hook.created_at, hook.id))

    async def delete_webhook(self, tenant: str, hook_id: str) -> bool:
        gone = await self._call(lambda: self._redis.hdel(self._base + "webhooks:" + tenant, hook_id))
        return bool(gone)

    async def depth(self) -> list[QueueDepth]:
        async def run() -> list[QueueDepth]:
            tenants = sorted(t.decode() for t in await self._redis.smembers(self._base + "tenants"))
            depths = []
            for tenant in tenants:
                open_jobs = await self._redis.zcard(self._base + "open:" + tenant)
                running = await self._redis.scard(self._base + "running:" + tenant)
                if not open_jobs:
                    continue
                oldest = await self._redis.zrange(self._base + "open:" + tenant, 0, 0, withscores=True)
                depths.append(
                    QueueDepth(tenant, max(0, open_jobs - running), running, oldest[0][1] if oldest else None)
                )
            return depths

        found: list[QueueDepth] = await self._call(run, read=True)
        return found

    async def purge(self) -> int:
        """Redis expires finished jobs, batches and files by itself; what is left is an
        index entry (a finished job's place in `open:`) whose record is gone."""

        async def run() -> int:
            gone = 0
            for tenant in await self._redis.smembers(self._base + "tenants"):
                index = self._base + "open:" + tenant.decode()
                for job_id in await self._redis.zrange(index, 0, 200):
                    if not await self._redis.exists(self._base + "job:" + job_id.decode()):
                        gone += await self._redis.zrem(index, job_id)
            return gone

        purged: int = await self._call(run)
        return purged

    async def aclose(self) -> None:
        await self._redis.aclose()
