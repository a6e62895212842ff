"""Automatic pipelining: every script call made during one event-loop turn goes to Redis in
one pipeline, so under load many requests share one round trip (measured in
docs/benchmarks.md, Metering). A lone call still goes at once, on the next turn.

Redis failures become StateStoreUnavailable for every caller of the batch. A script Redis
no longer knows (it restarted) is loaded again and the calls it refused are sent again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.exceptions import NoScriptError, RedisError

from gateway.errors import StateStoreUnavailable

_Call = tuple["Script", tuple[str, ...], tuple[str | int | bytes, ...], "asyncio.Future[Any]"]


class Script:
    """A Lua script known by its SHA-1; loaded on first use and after a Redis restart."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha: str | None = None


class Batcher:
    def __init__(self, client: Redis, describe: str) -> None:
        self._client = client
        self._describe = describe  # where the store is, for error messages; never credentials
        self._queue: list[_Call] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def call(self, script: Script, keys: tuple[str, ...], args: tuple[str | int | bytes, ...]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queue:
            loop.call_soon(self._flush)
        self._queue.append((script, keys, args, future))
        return await future

    def _flush(self) -> None:
        batch, self._queue = self._queue, []
        task = asyncio.ensure_future(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            for script in {id(call[0]): call[0] for call in batch}.values():
                if script.sha is None:
                    script.sha = await self._client.script_load(script.source)
            if len(batch) == 1:  # a pipeline of one costs more than the command alone
                await self._send_one(*batch[0])
                return
            pipe = self._client.pipeline(transaction=False)
            for script, keys, args, _ in batch:
                pipe.evalsha(script.sha or "", len(keys), *keys, *args)
            results = await pipe.execute(raise_on_error=False)
            retry = [call for call, result in zip(batch, results, strict=True) if _unknown_script(result)]
            for call, result in zip(batch, results, strict=True):
                if not _unknown_script(result):
                    _resolve(call[3], result, self._describe)
            for script, keys, args, future in retry:
                script.sha = await self._client.script_load(script.source)
                result = await self._client.evalsha(script.sha, len(keys), *keys, *args)
                _resolve(future, result, self._describe)
        except (TimeoutError, RedisError, OSError) as exc:
            for _, _, _, future in batch:
                if not future.done():
                    future.set_exception(unavailable(self._describe, exc))

    async def _send_one(
        self,
        script: Script,
        keys: tuple[str, ...],
        args: tuple[str | int | bytes, ...],
        future: asyncio.Future[Any],
    ) -> None:
        try:
            result = await self._client.evalsha(script.sha or "", len(keys), *keys, *args)
        except NoScriptError:
            script.sha = await self._client.script_load(script.source)
            result = await self._client.evalsha(script.sha, len(keys), *keys, *args)
        except RedisError as exc:
            if isinstance(exc, redis_errors.ConnectionError | redis_errors.TimeoutError):
                raise
            result = exc
        _resolve(future, result, self._describe)

    async def aclose(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _unknown_script(result: Any) -> bool:
    return isinstance(result, NoScriptError)


def _resolve(future: asyncio.Future[Any], result: Any, describe: str) -> None:
    if future.done():  # the caller went away
        return
    if isinstance(result, Exception):
        future.set_exception(unavailable(describe, result))
    else:
        future.set_result(result)


def unavailable(describe: str, exc: BaseException) -> StateStoreUnavailable:
    error = StateStoreUnavailable(
        f"The state store (Redis at {describe}) is unreachable or failed ({type(exc).__name__}); "
        "budgets and rate limits cannot be checked, so the request was not processed."
    )
    error.__cause__ = exc  # for the log; clients see only the message above
    return error
