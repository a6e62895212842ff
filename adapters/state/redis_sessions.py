"""The Redis store's session records, in the tenant's hash slot like its budgets.

Keys: `s:<session>` hash {f first seen us, l last seen us, t turns, i/c/o input, cached and
output tokens, u cost micros, fi/li first and last turn's input, g last growth, m/up/r last
model alias, upstream, replica, w workflow, dd decision ids dropped, due, dt due turn, k 1 once
`sc` holds a checkpoint, x when the keys expire (ms), dk how many decision ids are listed};
`sd:<session>` list of decision ids (newest last: the newest `dk` are listed, older ones
counted with `dd`); `sc:<session>` list of checkpoints (JSON); `sx` zset of the tenant's
sessions by last seen (ms), for the operators' listing. All expire together, between the
session's idle time and 1/64 more after its last turn: renewing an expiry is a call of its
own, so it is renewed once per 1/64 of the idle time, not every turn.

The update rides on the settle script (`settle_with_session`): the tenant's index key, its
key base and the update (one JSON argument, `encoded`) are appended to the settle's keys and
arguments and taken off again before the settle's own body runs, which therefore stays
exactly `redis_scripts.SETTLE`; the record is updated only when the settle applied (a settle
repeated by a retry counts its turn once). A lease's settle batch carries the updates of its
requests the same way (`redis_lease.py`, `lease_call`), one per session (its turns in the
batch folded into one: `folded`), all in one JSON argument, applied with the batch, only
when the batch is. The records' keys are named in the script from the key base, in the
tenant's hash slot like every key of its scripts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from gateway.sessions.records import Checkpoint, SessionRecord, SessionUpdate

# K: {s, sd, sc}; A: the update of one session, one turn or several folded into one (`folded`),
# decoded from JSON (its numbers Lua numbers, written back with '%d'):
# {session, turns, input, cached, output, cost (sums), first, previous and last served turn's
# input, model, upstream, replica (the last served turn's), workflow (the last given), decision
# ids (space-separated, in order), max decisions, idle ms, due (the last given), the turns up
# to and with the one that gave it, checkpoints (JSON, newline-separated, in order), max
# checkpoints}.
# `apply_session` updates the record with one read and one write of its hash (the counters
# are summed here: they stay below 2^53, exact in Lua's doubles) and one push of its decision
# ids, the other calls made only once in many turns (trimming the ids, renewing expiries);
# the checkpoints' list is touched only when the record has one (its hash's `k`), then
# `index_sessions` puts the sessions of one call in the tenant's index `sx` at once (one ZADD,
# one trim). Redis's time goes as much to the Lua around the calls as to the calls, so the
# script does little else: the counters written in one table, text turned to numbers by
# arithmetic, `now` formatted once a call.
APPLY = """
local now_text, fmt = n(now), string.format
local function put(h, field, value) local k = #h; h[k + 1] = field; h[k + 2] = value end
local function apply_session(K, A)
  local s = K[1]
  local r = redis.call('HMGET', s, 'f', 't', 'i', 'c', 'o', 'u', 'li', 'dd', 'k', 'x', 'dk')
  local turn = A[2]
  local turns = tonumber(r[2]) or 0
  -- The counters are sums of integers (the strings coerced), exact in doubles; '%d' writes
  -- them without an exponent.
  local h = {'l', now_text, 't', fmt('%d', turns + turn),
    'i', fmt('%d', (r[3] or 0) + A[3]), 'c', fmt('%d', (r[4] or 0) + A[4]),
    'o', fmt('%d', (r[5] or 0) + A[5]), 'u', fmt('%d', (r[6] or 0) + A[6])}
  if not r[1] then
    redis.call('DEL', K[2], K[3])
    r = {false, '0', '0', '0', '0', '0', '0', '0', '0', false, false}
    for _, v in ipairs({'f', now_text, 'fi', 0, 'li', 0, 'g', 0, 'm', '', 'up', '', 'r', 0, 'w', '',
      'dd', 0, 'due', '', 'dt', 0, 'k', 0}) do h[#h + 1] = v end
  end
  if turn > 0 then
    if turns == 0 then put(h, 'fi', fmt('%d', A[7])) end
    if turn > 1 then
      put(h, 'g', fmt('%d', A[9] - A[8]))
    elseif turns == 0 then
      put(h, 'g', 0)
    else
      put(h, 'g', fmt('%d', A[9] - r[7]))
    end
    put(h, 'li', fmt('%d', A[9]))
  end
  if A[10] ~= '' then
    put(h, 'm', A[10]); put(h, 'up', A[11]); put(h, 'r', fmt('%d', A[12]))
  end
  if A[13] ~= '' then put(h, 'w', A[13]) end
  -- The keys live until `x` (ms): renewed to idle + idle/64 whenever what is left falls below
  -- the idle time (or exceeds the longest it may be, after a reload shortened it), so a record
  -- expires between idle and idle * 65/64 after its last turn, renewed once per idle/64.
  local ms = math.floor(now / 1000)
  local idle = A[16]
  local slack = math.floor(idle / 64)
  local left = tonumber(r[10] or '0') - ms
  local renew = left < idle or left > idle + slack
  if renew then left = idle + slack; put(h, 'x', fmt('%d', ms + left)) end
  if A[14] ~= '' then
    local ids = {}
    for id in string.gmatch(A[14], '%S+') do ids[#ids + 1] = id end
    local len = #ids > 0 and redis.call('RPUSH', K[2], unpack(ids)) or 0
    if len == #ids and len > 0 and not renew then redis.call('PEXPIRE', K[2], fmt('%d', left)) end
    -- The list keeps up to a quarter more than the ids listed (`dk`, the newest): trimmed
    -- once per that many turns; readers list the newest `dk` and count the rest as dropped.
    local keep = A[15]
    if tonumber(r[11]) ~= keep then put(h, 'dk', fmt('%d', keep)) end
    if len > keep + math.max(8, math.floor(keep / 4)) then
      redis.call('LTRIM', K[2], fmt('%d', -keep), -1)
      put(h, 'dd', fmt('%d', r[8] + len - keep))
    end
  end
  if A[17] ~= '' then put(h, 'due', A[17]); put(h, 'dt', fmt('%d', turns + A[18])) end
  local checkpoints = r[9] ~= '0'
  if A[19] ~= '' then
    local rows = {}
    for row in string.gmatch(A[19], '[^\\n]+') do rows[#rows + 1] = row end
    redis.call('RPUSH', K[3], unpack(rows))
    redis.call('LTRIM', K[3], fmt('%d', -A[20]), -1)
    if not checkpoints then
      put(h, 'k', 1)
      if not renew then redis.call('PEXPIRE', K[3], fmt('%d', left)) end
    end
    checkpoints = true
  end
  redis.call('HSET', s, unpack(h))
  if renew then
    left = fmt('%d', left)
    redis.call('PEXPIRE', s, left)
    redis.call('PEXPIRE', K[2], left)
    if checkpoints then redis.call('PEXPIRE', K[3], left) end
  end
end
-- sx: the tenant's index; updates: the argument lists of the sessions updated, in order.
local function index_sessions(sx, updates)
  if #updates == 0 then return end
  local ms = math.floor(now / 1000)
  local z, idle = {}, 0
  for _, A in ipairs(updates) do
    z[#z + 1] = n(ms); z[#z + 1] = A[1]
    idle = math.max(idle, A[16])
  end
  redis.call('ZADD', sx, unpack(z))
  local life = idle + math.floor(idle / 64)  -- the longest a record lives (`apply_session`)
  redis.call('ZREMRANGEBYSCORE', sx, '-inf', '(' .. n(ms - life))
  redis.call('PEXPIRE', sx, n(life))
end
-- The updates of one call (`encoded`: a JSON array of argument arrays) applied, under the
-- tenant's key base, then indexed in `sx`. The records' keys are named here from the base,
-- in the tenant's slot like every key of its scripts, rather than passed three per session.
local function apply_sessions(base, sx, encoded)
  local updates = cjson.decode(encoded)
  for _, A in ipairs(updates) do
    local id = A[1]
    apply_session({base .. 's:' .. id, base .. 'sd:' .. id, base .. 'sc:' .. id}, A)
  end
  index_sessions(sx, updates)
end
"""

# The settle script's tail: its last key is the tenant's index `sx`, its last two arguments
# the key base and the update (`encoded`).
_TAKE_SESSION = """
local session_update = table.remove(ARGV)
local session_base = table.remove(ARGV)
local session_index = table.remove(KEYS)
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
        + "if applied == 1 then\n"
        + "  apply_sessions(session_base, session_index, session_update)\n"
        + "end\nreturn applied\n"
    )


def update_script(prelude: str) -> str:
    """KEYS: sx; ARGV: the key base, the update (`encoded`)."""
    return prelude + APPLY + "apply_sessions(ARGV[1], KEYS[1], ARGV[2])\nreturn 1\n"


# The newest `dk` decision ids of a record (its list keeps a few more: `apply_session`), and
# how many older ones the list still holds (dropped, for the record: added to its `dd`).
LISTED_IDS = """
local function listed_ids(fields, sd, listed)
  local keep
  for i = 1, #fields, 2 do
    if fields[i] == 'dk' then keep = tonumber(fields[i + 1]) end
  end
  local len = redis.call('LLEN', sd)
  local over = (keep ~= nil and len > keep) and len - keep or 0
  if not listed then return {}, over end
  if over == 0 then return redis.call('LRANGE', sd, 0, -1), 0 end
  return redis.call('LRANGE', sd, -keep, -1), over
end
"""

# KEYS: s, sd, sc; ARGV: 1 to list the decision ids, 0 not to (they are counted either way).
# Returns {} or {hash fields, decision ids (none when not asked for), checkpoints, ids
# dropped beyond `dd`}.
GET = (
    LISTED_IDS
    + """
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return {} end
local ids, over = listed_ids(fields, KEYS[2], ARGV[1] == '1')
return {fields, ids, redis.call('LRANGE', KEYS[3], 0, -1), over}
"""
)

# KEYS: sx. ARGV: key base, most. Returns {session, fields, decision ids, checkpoints, ids
# dropped beyond `dd`, ...} for the `most` sessions seen last, forgetting index entries whose
# record has expired.
LIST = (
    LISTED_IDS
    + """
local members = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local out = {}
for _, m in ipairs(members) do
  local s = ARGV[1] .. 's:' .. m
  local fields = redis.call('HGETALL', s)
  if #fields == 0 then
    redis.call('ZREM', KEYS[1], m)
  else
    local ids, over = listed_ids(fields, ARGV[1] .. 'sd:' .. m, true)
    out[#out + 1] = m
    out[#out + 1] = fields
    out[#out + 1] = ids
    out[#out + 1] = redis.call('LRANGE', ARGV[1] .. 'sc:' .. m, 0, -1)
    out[#out + 1] = over
  end
end
return out
"""
)


def light_read(keys: tuple[str, str, str]) -> tuple[tuple[str, ...], ...]:
    """The commands of a record's read without its decision ids (`GET` with 0, as plain
    commands in one transaction: the hash, how many ids its list holds, the checkpoints).
    A script reading as much costs Redis about three times as much: every field of the
    hash goes through Lua and back."""
    s, sd, sc = keys
    return (("HGETALL", s), ("LLEN", sd), ("LRANGE", sc, "0", "-1"))


def light_record(tenant: str, session: str, reply: list[Any]) -> SessionRecord | None:
    """The record `light_read` read (None when there is none): the ids its list holds past
    the newest `dk` are counted as dropped, as `listed_ids` counts them."""
    fields, held, checkpoints = reply
    if not fields:
        return None
    listed = None
    for name, value in zip(fields[::2], fields[1::2], strict=True):
        if name == b"dk":
            listed = int(value)
            break
    over = held - listed if listed is not None and held > listed else 0
    return record(tenant, session, fields, [], checkpoints, over)


def keys(base: str, session: str) -> tuple[str, str, str]:
    """A record's keys: its hash, its decision ids, its checkpoints (the scripts that write
    name them the same way, from the key base: `apply_sessions`)."""
    return (base + "s:" + session, base + "sd:" + session, base + "sc:" + session)


def encoded(updates: Iterable[SessionUpdate]) -> bytes:
    """The scripts' argument for `updates` (one request's, or a settle batch's): their fold
    (`folded`) as one JSON array of argument arrays, which the script decodes in one call
    (`cjson`), rather than 20 arguments a session, each converted and packed on its own."""
    return orjson.dumps(folded(updates))


def folded(updates: Iterable[SessionUpdate]) -> list[list[str | int]]:
    """The script's arguments for `updates` (a settle batch's, in order), the turns of each
    session folded into one update that leaves its record exactly as the turns applied one
    after another would: counters summed, decision ids and checkpoints appended in order
    (then trimmed once: the same list, the same count of dropped ids), the first, previous
    and last served turn's input (for the record's first input and last growth), the last
    model, workflow and due reason given. A session whose bounds or idle time change within
    the batch (a config reload) starts a new fold there."""
    by_session: dict[str, list[SessionUpdate]] = {}
    for update in updates:
        by_session.setdefault(update.session, []).append(update)
    out: list[list[str | int]] = []
    for turns in by_session.values():
        fold = _Fold(turns[0])
        for update in turns:
            if fold.bounds != (update.max_decisions, update.max_checkpoints, update.idle_s):
                out.append(fold.args())
                fold = _Fold(update)
            fold.add(update)
        out.append(fold.args())
    return out


class _Fold:
    __slots__ = (
        "bounds",
        "cached",
        "checkpoints",
        "cost",
        "decisions",
        "due",
        "due_turns",
        "first",
        "input",
        "last",
        "output",
        "previous",
        "served",
        "session",
        "turns",
        "workflow",
    )

    def __init__(self, update: SessionUpdate) -> None:
        self.session = update.session
        self.bounds = (update.max_decisions, update.max_checkpoints, update.idle_s)
        self.turns = self.input = self.cached = self.output = self.cost = 0
        self.first = self.previous = self.last = self.due_turns = 0
        self.served: SessionUpdate | None = None  # the last update that named a model
        self.workflow = self.due = ""
        self.decisions: list[str] = []
        self.checkpoints: list[str] = []

    def add(self, u: SessionUpdate) -> None:
        if u.turn:
            if not self.turns:
                self.first = u.input_tokens
            self.previous, self.last = self.last, u.input_tokens
            self.turns += u.turn
        self.input += u.input_tokens
        self.cached += u.cached_tokens
        self.output += u.output_tokens
        self.cost += u.cost_micros
        if u.model:
            self.served = u
        if u.workflow:
            self.workflow = u.workflow
        self.decisions += u.decision_ids
        if u.due:
            self.due, self.due_turns = u.due, self.turns
        if u.checkpoint is not None:
            self.checkpoints.append(orjson.dumps(_row(u.checkpoint)).decode())

    def args(self) -> list[str | int]:
        served = self.served
        max_decisions, max_checkpoints, idle_s = self.bounds
        return [
            self.session,
            self.turns,
            self.input,
            self.cached,
            self.output,
            self.cost,
            self.first,
            self.previous,
            self.last,
            served.model if served is not None else "",
            served.upstream if served is not None else "",
            served.replica if served is not None else 0,
            self.workflow,
            " ".join(self.decisions),
            max(1, max_decisions),
            max(1, idle_s * 1000),
            self.due,
            self.due_turns,
            "\n".join(self.checkpoints),
            max(1, max_checkpoints),
        ]


def record(
    tenant: str,
    session: str,
    fields: list[bytes],
    decisions: list[bytes],
    checkpoints: list[bytes],
    over: int = 0,
) -> SessionRecord:
    # Read for nearly every turn of a session whose cached copy is stale: the numbers are
    # parsed from their bytes as they come, only the texts decoded.
    f = dict(zip(fields[::2], fields[1::2], strict=True))
    get = f.get

    def num(name: bytes) -> int:
        value = get(name)
        return int(value) if value else 0

    def text(name: bytes) -> str:
        value = get(name)
        return value.decode() if value else ""

    return SessionRecord(
        tenant,
        session,
        num(b"f"),
        num(b"l"),
        num(b"t"),
        num(b"i"),
        num(b"c"),
        num(b"o"),
        num(b"u"),
        num(b"fi"),
        num(b"li"),
        num(b"g"),
        text(b"m"),
        text(b"up"),
        num(b"r"),
        text(b"w"),
        tuple(d.decode() for d in decisions),
        num(b"dd") + over,
        text(b"due"),
        num(b"dt"),
        tuple(Checkpoint(*orjson.loads(c)) for c in checkpoints),
    )


def listed(tenant: str, reply: list[Any]) -> list[SessionRecord]:
    return [
        record(tenant, reply[i].decode(), reply[i + 1], reply[i + 2], reply[i + 3], reply[i + 4])
        for i in range(0, len(reply), 5)
    ]


def _row(c: Checkpoint) -> list[Any]:
    return [c.turn, c.messages, c.digest, c.summary, c.tokens_before, c.tokens_after]
