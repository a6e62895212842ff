"""The decision log for many replicas: a Redis stream, one entry per sealed record.

Each entry has the fields `seq`, `hash` and `record` (the record's canonical JSON). Redis
cannot compute SHA-256 in a script, so appending is optimistic: the writer seals a batch
onto the head it believes current, and a Lua script appends it only if the stream's last
entry still has that seq and hash; otherwise it returns the real head, and the writer
seals again. Every replica can write to the same stream and the chain stays whole.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from gateway.audit.chain import GENESIS, ChainHead, sealed_line
from gateway.audit.verify import Report, verify_chain

_APPEND = """
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local seq, hash = 0, ARGV[1]
if #last > 0 then
  local fields = last[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'seq' then seq = tonumber(fields[i + 1]) end
    if fields[i] == 'hash' then hash = fields[i + 1] end
  end
end
if seq ~= tonumber(ARGV[2]) or hash ~= ARGV[3] then
  return {0, tostring(seq), hash}
end
for i = 4, #ARGV, 3 do
  redis.call('XADD', KEYS[1], '*', 'seq', ARGV[i], 'hash', ARGV[i + 1], 'record', ARGV[i + 2])
end
return {1, '', ''}
"""
_MAX_RACES = 100  # other writers won this many times in a row: give up on this batch
_PAGE = 1000


class ChainContention(Exception):
    """Other writers kept appending first; the batch was not written."""


class RedisStreamWriter:
    def __init__(self, url: str, stream: str) -> None:
        self._client: Redis = Redis.from_url(url)
        self._stream = stream
        self._append = self._client.register_script(_APPEND)
        self._head = ChainHead()  # a guess; the script corrects it

    async def write(self, records: list[dict[str, Any]]) -> None:
        for _ in range(_MAX_RACES):
            head = self._head
            args: list[str | bytes | int] = [GENESIS, head.seq, head.hash]
            for record in records:
                line, head = sealed_line(record, head)
                args.extend((head.seq, head.hash, line))
            appended, seq, digest = await self._append(keys=[self._stream], args=args)
            if appended == 1:
                self._head = head
                return
            self._head = ChainHead(int(seq), digest.decode() if isinstance(digest, bytes) else str(digest))
        raise ChainContention(f"stream {self._stream}: lost the race to append {_MAX_RACES} times")

    async def aclose(self) -> None:
        await self._client.aclose()


async def read_stream(url: str, stream: str) -> list[bytes]:
    """Every record of the stream, in order."""
    client: Redis = Redis.from_url(url)
    try:
        records: list[bytes] = []
        start = "-"
        while True:
            page = await client.xrange(stream, min=start, count=_PAGE) or []
            for _, fields in page:
                record = (fields or {}).get(b"record")
                # A missing field reads as an unreadable record, never as a skipped one.
                records.append(record if isinstance(record, bytes) else b"null")
            if len(page) < _PAGE:
                return records
            last_id = page[-1][0]
            start = "(" + (last_id.decode() if isinstance(last_id, bytes) else str(last_id))
    finally:
        await client.aclose()


async def verify_stream(url: str, stream: str) -> Report:
    return verify_chain(await read_stream(url, stream))
