"""Stored responses in Redis: one string per record, expiring with it (`SET ... EX`), so
every gateway replica sharing the Redis continues the others' conversations."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.errors import StateStoreUnavailable


class RedisResponseStore:
    def __init__(self, url: str, prefix: str, timeout_s: float) -> None:
        self._client = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._prefix = f"{prefix}:responses:"

    async def put(self, key: str, record: bytes, ttl_s: int) -> None:
        try:
            await self._client.set(self._prefix + key, record, ex=ttl_s)
        except RedisError as exc:
            raise _unavailable(exc) from exc

    async def get(self, key: str) -> bytes | None:
        try:
            found = await self._client.get(self._prefix + key)
        except RedisError as exc:
            raise _unavailable(exc) from exc
        return found if isinstance(found, bytes) else None

    async def delete(self, key: str) -> bool:
        try:
            deleted: int = await self._client.delete(self._prefix + key)
        except RedisError as exc:
            raise _unavailable(exc) from exc
        return deleted > 0

    async def aclose(self) -> None:
        await self._client.aclose()


def _unavailable(exc: RedisError) -> StateStoreUnavailable:
    return StateStoreUnavailable(f"The stored responses cannot be reached: {type(exc).__name__}.")
