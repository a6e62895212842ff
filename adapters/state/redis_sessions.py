"""The Redis store's session records, in the tenant's hash slot like its budgets.

Keys: `s:<session>` hash {f first seen us, l last seen us, t turns, i/c/o input, cached and
output tokens, u cost micros, fi/li first and last turn's input, g last growth, m/up/r last
model alias, upstream, replica, w workflow, dd decision ids dropped, due, dt due turn};
`sd:<session>` list of decision ids (newest last); `sc:<session>` list of checkpoints (JSON);
`sx` zset of the tenant's sessions by last seen (ms), for the operators' listing. All expire
after the session's idle time.

The update rides on the settle script (`settle_with_session`): the session's keys and
arguments are appended to the settle's and taken off again before the settle's own body
runs, which therefore stays exactly `redis_scripts.SETTLE`; the record is updated only when
the settle applied (a settle repeated by a retry counts its turn once). A lease's settle
batch carries the updates of its requests the same way (`redis_lease.py`, `batch_call`),
applied in order with the batch, only when the batch is.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.sessions.records import Checkpoint, SessionRecord, SessionUpdate

SESSION_KEYS = 4  # s, sd, sc, sx
SESSION_ARGC = 16  # the arguments of one update (`args`)

# K: {s, sd, sc, sx}; A: {session, turn, input, cached, output, cost, model, upstream, replica,
# workflow, decision ids (space-separated), max decisions, idle ms, due, checkpoint JSON, max checkpoints}
APPLY = """
local function apply_session(K, A)
  local s = K[1]
  local before = redis.call('HMGET', s, 'f', 't', 'li')
  if not before[1] then
    redis.call('DEL', K[2], K[3])
    redis.call('HSET', s, 'f', n(now), 't', 0, 'i', 0, 'c', 0, 'o', 0, 'u', 0, 'fi', 0, 'li', 0, 'g', 0,
      'm', '', 'up', '', 'r', 0, 'w', '', 'dd', 0, 'due', '', 'dt', 0)
  end
  local turns = tonumber(before[2] or '0')
  local turn = tonumber(A[2])
  redis.call('HSET', s, 'l', n(now))
  if turn > 0 then redis.call('HINCRBY', s, 't', turn) end
  redis.call('HINCRBY', s, 'i', A[3])
  redis.call('HINCRBY', s, 'c', A[4])
  redis.call('HINCRBY', s, 'o', A[5])
  redis.call('HINCRBY', s, 'u', A[6])
  if turn > 0 then
    if turns == 0 then
      redis.call('HSET', s, 'fi', A[3], 'g', 0)
    else
      redis.call('HSET', s, 'g', n(tonumber(A[3]) - tonumber(before[3] or '0')))
    end
    redis.call('HSET', s, 'li', A[3])
  end
  if A[7] ~= '' then redis.call('HSET', s, 'm', A[7], 'up', A[8], 'r', A[9]) end
  if A[10] ~= '' then redis.call('HSET', s, 'w', A[10]) end
  if A[11] ~= '' then
    local len = 0
    for id in string.gmatch(A[11], '%S+') do len = redis.call('RPUSH', K[2], id) end
    local keep = tonumber(A[12])
    if len > keep then
      redis.call('LTRIM', K[2], -keep, -1)
      redis.call('HINCRBY', s, 'dd', len - keep)
    end
  end
  if A[14] ~= '' then redis.call('HSET', s, 'due', A[14], 'dt', turns + turn) end
  if A[15] ~= '' then
    redis.call('RPUSH', K[3], A[15])
    redis.call('LTRIM', K[3], -tonumber(A[16]), -1)
  end
  local idle = tonumber(A[13])
  for i = 1, 4 do redis.call('PEXPIRE', K[i], A[13]) end
  local ms = math.floor(now / 1000)
  redis.call('ZADD', K[4], n(ms), A[1])
  redis.call('ZREMRANGEBYSCORE', K[4], '-inf', '(' .. n(ms - idle))
end
"""

# The settle script's tail: the last ARGV is how many session arguments precede it.
_TAKE_SESSION = """
local session_argc = tonumber(table.remove(ARGV))
local session_args, session_keys = {}, {}
for i = session_argc, 1, -1 do session_args[i] = table.remove(ARGV) end
for i = 4, 1, -1 do session_keys[i] = table.remove(KEYS) end
"""


def settle_with_session(settle: str, prelude: str) -> str:
    """The settle script `settle` (which starts with `prelude`), updating a session record
    whenever it applies."""
    body = settle.removeprefix(prelude)
    return (
        prelude
        + APPLY
        + _TAKE_SESSION
        + "local function settle_main()\n"
        + body
        + "\nend\nlocal applied = settle_main()\n"
        + "if applied == 1 then apply_session(session_keys, session_args) end\nreturn applied\n"
    )


def update_script(prelude: str) -> str:
    return prelude + APPLY + "apply_session(KEYS, ARGV)\nreturn 1\n"


# KEYS: s, sd, sc. Returns {} or {hash fields, decision ids, checkpoints}.
GET = """
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return {} end
return {fields, redis.call('LRANGE', KEYS[2], 0, -1), redis.call('LRANGE', KEYS[3], 0, -1)}
"""

# KEYS: sx. ARGV: key base, most. Returns {session, fields, decision ids, checkpoints, ...}
# for the `most` sessions seen last, forgetting index entries whose record has expired.
LIST = """
local members = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local out = {}
for _, m in ipairs(members) do
  local s = ARGV[1] .. 's:' .. m
  local fields = redis.call('HGETALL', s)
  if #fields == 0 then
    redis.call('ZREM', KEYS[1], m)
  else
    out[#out + 1] = m
    out[#out + 1] = fields
    out[#out + 1] = redis.call('LRANGE', ARGV[1] .. 'sd:' .. m, 0, -1)
    out[#out + 1] = redis.call('LRANGE', ARGV[1] .. 'sc:' .. m, 0, -1)
  end
end
return out
"""


def keys(base: str, session: str) -> tuple[str, str, str, str]:
    return (base + "s:" + session, base + "sd:" + session, base + "sc:" + session, base + "sx")


def args(update: SessionUpdate) -> list[str | int]:
    checkpoint = update.checkpoint
    return [
        update.session,
        update.turn,
        update.input_tokens,
        update.cached_tokens,
        update.output_tokens,
        update.cost_micros,
        update.model,
        update.upstream,
        update.replica,
        update.workflow,
        " ".join(update.decision_ids),
        max(1, update.max_decisions),
        max(1, update.idle_s * 1000),
        update.due,
        orjson.dumps(_row(checkpoint)).decode() if checkpoint is not None else "",
        max(1, update.max_checkpoints),
    ]


def record(
    tenant: str, session: str, fields: list[bytes], decisions: list[bytes], checkpoints: list[bytes]
) -> SessionRecord:
    f = {k.decode(): v.decode() for k, v in zip(fields[::2], fields[1::2], strict=True)}

    def num(name: str) -> int:
        return int(f.get(name, "0") or "0")

    return SessionRecord(
        tenant,
        session,
        num("f"),
        num("l"),
        num("t"),
        num("i"),
        num("c"),
        num("o"),
        num("u"),
        num("fi"),
        num("li"),
        num("g"),
        f.get("m", ""),
        f.get("up", ""),
        num("r"),
        f.get("w", ""),
        tuple(d.decode() for d in decisions),
        num("dd"),
        f.get("due", ""),
        num("dt"),
        tuple(Checkpoint(*orjson.loads(c)) for c in checkpoints),
    )


def listed(tenant: str, reply: list[Any]) -> list[SessionRecord]:
    return [
        record(tenant, reply[i].decode(), reply[i + 1], reply[i + 2], reply[i + 3])
        for i in range(0, len(reply), 4)
    ]


def _row(c: Checkpoint) -> list[Any]:
    return [c.turn, c.messages, c.digest, c.summary, c.tokens_before, c.tokens_after]
