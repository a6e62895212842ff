"""Live keys in Redis (or Redis Cluster), next to the budgets of the same `state` block.

    <prefix>:{#keys}:version   the store's version: INCR on every change
    <prefix>:{#keys}:changes   sorted set: key id -> version of its last change
    <prefix>:{#keys}:k:<id>    hash: tenant, hash, doc (the fixed parts, JSON), exp, rev
                               (unix ms, "" when unset), ver

The hash tag `{#keys}` keeps them in one cluster slot (no tenant's tag can be `#keys`), so
each change is one atomic script. Readers ask for the version (one GET) every
`poll_interval_ms`, and for the keys changed since theirs only when it moved.
"""

from __future__ import annotations

from typing import Any

from adapters.state.redis_cluster import open_wire
from adapters.state.redis_wire import ReplyError, Script, unavailable
from gateway.keystore.records import KeyChanges, KeyConflict, KeyNotFound, KeyNotUsable, LiveKey

INSERT = """
if redis.call('EXISTS', KEYS[3]) == 1 then return {0} end
local v = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[3], 'tenant', ARGV[2], 'hash', ARGV[3], 'doc', ARGV[4],
           'exp', ARGV[5], 'rev', ARGV[6], 'ver', v)
redis.call('ZADD', KEYS[2], v, ARGV[1])
return {1, redis.call('HGETALL', KEYS[3])}
"""

UPDATE = """
if redis.call('EXISTS', KEYS[3]) == 0 then return {0} end
local cur = redis.call('HMGET', KEYS[3], 'rev', 'exp')
local rev, exp = cur[1], cur[2]
if rev == '' and ARGV[2] ~= '' then rev = ARGV[2] end
if ARGV[3] ~= '' and (exp == '' or tonumber(ARGV[3]) < tonumber(exp)) then exp = ARGV[3] end
if rev ~= cur[1] or exp ~= cur[2] then
  local v = redis.call('INCR', KEYS[1])
  redis.call('HSET', KEYS[3], 'rev', rev, 'exp', exp, 'ver', v)
  redis.call('ZADD', KEYS[2], v, ARGV[1])
end
return {1, redis.call('HGETALL', KEYS[3])}
"""

ROTATE = """
if redis.call('EXISTS', KEYS[3]) == 0 then return {0} end
local cur = redis.call('HMGET', KEYS[3], 'rev', 'exp')
if cur[1] ~= '' or (cur[2] ~= '' and tonumber(cur[2]) <= tonumber(ARGV[8])) then return {2} end
if redis.call('EXISTS', KEYS[4]) == 1 then return {3} end
local v = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[4], 'tenant', ARGV[3], 'hash', ARGV[4], 'doc', ARGV[5],
           'exp', ARGV[6], 'rev', '', 'ver', v)
redis.call('ZADD', KEYS[2], v, ARGV[2])
local exp = cur[2]
if exp == '' or tonumber(ARGV[7]) < tonumber(exp) then exp = ARGV[7] end
if exp ~= cur[2] then
  v = redis.call('INCR', KEYS[1])
  redis.call('HSET', KEYS[3], 'exp', exp, 'ver', v)
  redis.call('ZADD', KEYS[2], v, ARGV[1])
end
return {1, redis.call('HGETALL', KEYS[3]), redis.call('HGETALL', KEYS[4])}
"""

CHANGES = """
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], v)
local out = {v}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGETALL', ARGV[2] .. id)
end
return out
"""


class RedisKeyStore:
    name = "redis"

    def __init__(
        self, url: str, prefix: str = "tollgate", timeout_s: float = 1.0, cluster: bool = False
    ) -> None:
        self._wire = open_wire(url, timeout_s, cluster)
        base = f"{prefix}:{{#keys}}:"
        self._version_key = base + "version"
        self._changes_key = base + "changes"
        self._record_prefix = base + "k:"
        self._insert = Script(INSERT)
        self._update = Script(UPDATE)
        self._rotate = Script(ROTATE)
        self._changes = Script(CHANGES)

    def _keys(self, *ids: str) -> tuple[str, ...]:
        return (self._version_key, self._changes_key, *(self._record_prefix + i for i in ids))

    async def version(self) -> int:
        reply = await self._wire.call("GET", self._version_key)
        if isinstance(reply, ReplyError):
            raise unavailable(self._wire.describe, reply)
        return int(reply) if reply is not None else 0

    async def changes(self, since: int) -> KeyChanges:
        reply = await self._wire.script(self._changes, self._keys(), (since, self._record_prefix))
        keys = tuple(_key(reply[i].decode(), reply[i + 1]) for i in range(1, len(reply), 2))
        return KeyChanges(int(reply[0]), keys)

    async def get(self, key_id: str) -> LiveKey | None:
        reply = await self._wire.call("HGETALL", self._record_prefix + key_id)
        if isinstance(reply, ReplyError):
            raise unavailable(self._wire.describe, reply)
        return _key(key_id, reply) if reply else None

    async def insert(self, key: LiveKey) -> LiveKey:
        args = (key.id, key.tenant, key.hash, key.fixed_doc(), _ms(key.expires_at_ms), _ms(key.revoked_at_ms))
        reply = await self._wire.script(self._insert, self._keys(key.id), args)
        if reply[0] == 0:
            raise KeyConflict(key.id)
        return _key(key.id, reply[1])

    async def update(
        self, key_id: str, *, revoked_at_ms: int | None = None, expires_at_ms: int | None = None
    ) -> LiveKey:
        args = (key_id, _ms(revoked_at_ms), _ms(expires_at_ms))
        reply = await self._wire.script(self._update, self._keys(key_id), args)
        if reply[0] == 0:
            raise KeyNotFound(key_id)
        return _key(key_id, reply[1])

    async def rotate(
        self, old_id: str, new: LiveKey, old_expires_at_ms: int, now_ms: int
    ) -> tuple[LiveKey, LiveKey]:
        args = (
            old_id,
            new.id,
            new.tenant,
            new.hash,
            new.fixed_doc(),
            _ms(new.expires_at_ms),
            old_expires_at_ms,
            now_ms,
        )
        reply = await self._wire.script(self._rotate, self._keys(old_id, new.id), args)
        status = reply[0]
        if status == 0:
            raise KeyNotFound(old_id)
        if status == 2:
            raise KeyNotUsable(old_id)
        if status == 3:
            raise KeyConflict(new.id)
        return _key(old_id, reply[1]), _key(new.id, reply[2])

    async def aclose(self) -> None:
        await self._wire.aclose()


def _ms(value: int | None) -> str | int:
    return "" if value is None else value


def _optional_int(value: bytes | None) -> int | None:
    return int(value) if value else None


def _key(key_id: str, flat: list[Any]) -> LiveKey:
    fields: dict[bytes, bytes] = dict(zip(flat[::2], flat[1::2], strict=True))
    return LiveKey.from_stored(
        key_id,
        fields[b"tenant"].decode(),
        fields[b"hash"].decode(),
        fields[b"doc"],
        _optional_int(fields.get(b"exp")),
        _optional_int(fields.get(b"rev")),
        int(fields[b"ver"]),
    )
