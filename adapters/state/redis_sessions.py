"""The Redis store's session records, in the tenant's hash slot like its budgets.

Keys: `sr:<session>` the record, one string: a MessagePack array of 20 values (`_values`: first
and last seen us, turns, input, cached and output tokens, cost micros, first and last turn's
input, last growth, last model alias, upstream, replica, workflow, decision ids dropped, due,
due turn, 1 once `sc` holds a checkpoint, when the keys expire (ms), how many decision ids are
listed); `sd:<session>` list of decision ids (newest last: the newest of the record's count
are listed, older ones counted as dropped); `sc:<session>` list of checkpoints (JSON); `sx`
zset of the tenant's sessions by when their expiries were last renewed (ms; within 1/64 of the
idle time of their last turn), for the operators' listing. All expire together, between the
session's idle time and 1/64 more after its last turn: the record is written with its expiry
every turn; renewing a list's expiry (and the session's place in `sx`) is a call of its own,
so it is renewed once per 1/64 of the idle time, not every turn.

A record written by an earlier version is a hash of the same values (`s:<session>`, fields
f, l, t, i, c, o, u, fi, li, g, m, up, r, w, dd, due, dt, k, x, dk): readers read it while
there is no `sr`, and the next update goes on from it in `sr`. The hash is left to expire
(an earlier version's replica, during a rolling upgrade, would take its removal for an
expired record and empty the session's lists); turns such a replica serves once `sr` exists
are not counted in it.

The update rides on the settle script (`settle_with_session`): the tenant's index key, its
key base and the update (one MessagePack argument, `encoded`) are appended to the settle's
keys and arguments and taken off again before the settle's own body runs, which therefore
stays exactly `redis_scripts.SETTLE`; the record is updated only when the settle applied (a
settle repeated by a retry counts its turn once). A lease's settle batch carries the updates
of its requests the same way (`redis_lease.py`, `lease_call`), one per session (its turns in
the batch folded into one: `folded`), all in one MessagePack argument, applied with the
batch, only when the batch is. The records' keys are named in the script from the key base,
in the tenant's hash slot like every key of its scripts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgpack
import orjson

from gateway.sessions.records import Checkpoint, SessionRecord, SessionUpdate

# K: {sr, sd, sc, s (a record an earlier version kept as a hash)}; A: the update of one
# session, one turn or several folded into one (`folded`), unpacked from MessagePack (its
# numbers Lua numbers): {session, turns, input, cached, output, cost (sums), first, previous
# and last served turn's input, model, upstream, replica (the last served turn's), workflow
# (the last given), decision ids (space-separated, in order), max decisions, idle ms, due (the
# last given), the turns up to and with the one that gave it, checkpoints (JSON,
# newline-separated, in order), max checkpoints}.
# `apply_session` reads the record (one GET, one unpack), updates it in place and writes it
# back with its expiry (one SET), and pushes its decision ids; the other calls are made only
# once in many turns (trimming the ids, renewing the lists' expiries), and the checkpoints'
# list is touched only when the record says it has one (its k). `index_sessions` then puts the
# sessions of one call whose expiries were renewed in the tenant's index `sx` at once (one
# ZADD, one trim; in most calls there are none, and no call is made). A hash of 20 fields cost
# Redis a field's work twenty times on every read and write; one packed value is one string
# (`python -m bench.session_script`).
APPLY = """
local fmt = string.format
-- A record an earlier version kept as a hash (key `s`), as the array. The hash is left to
-- expire: a replica of that version, still serving during a rolling upgrade, would take its
-- removal for an expired record and empty the session's lists.
local function from_hash(s)
  local f = redis.call('HGETALL', s)
  if #f == 0 then return nil end
  local h = {}
  for i = 1, #f, 2 do h[f[i]] = f[i + 1] end
  local function num(name) return tonumber(h[name]) or 0 end
  return {num('f'), num('l'), num('t'), num('i'), num('c'), num('o'), num('u'), num('fi'),
    num('li'), num('g'), h.m or '', h.up or '', num('r'), h.w or '', num('dd'), h.due or '',
    num('dt'), num('k'), num('x'), num('dk')}
end
local function apply_session(K, A)
  local s = K[1]
  local raw = redis.call('GET', s)
  local R
  if raw then
    R = cmsgpack.unpack(raw)
  else
    R = from_hash(K[4])
    if not R then
      redis.call('DEL', K[2], K[3])  -- an expired record's lists, should any outlive it
      R = {now, 0, 0, 0, 0, 0, 0, 0, 0, 0, '', '', 0, '', 0, '', 0, 0, 0, 0}
    end
  end
  local turn = A[2]
  local turns = R[3]
  -- Counters are sums of integers, exact in Lua's doubles below 2^53; cmsgpack packs an
  -- integral number as an integer.
  R[2] = now; R[3] = turns + turn
  R[4] = R[4] + A[3]; R[5] = R[5] + A[4]; R[6] = R[6] + A[5]; R[7] = R[7] + A[6]
  if turn > 0 then
    if turns == 0 then R[8] = A[7] end
    if turn > 1 then
      R[10] = A[9] - A[8]
    elseif turns == 0 then
      R[10] = 0
    else
      R[10] = A[9] - R[9]
    end
    R[9] = A[9]
  end
  if A[10] ~= '' then R[11] = A[10]; R[12] = A[11]; R[13] = A[12] end
  if A[13] ~= '' then R[14] = A[13] end
  -- The keys live until R[19] (ms): renewed to idle + idle/64 whenever what is left falls
  -- below the idle time (or exceeds the longest it may be, after a reload shortened it), so a
  -- record expires between idle and idle * 65/64 after its last turn. The record itself is
  -- written with its expiry every turn (SET ... PX); its lists' expiries are renewed once per
  -- idle/64.
  local ms = math.floor(now / 1000)
  local idle = A[16]
  local slack = math.floor(idle / 64)
  local left = R[19] - ms
  local renew = left < idle or left > idle + slack
  if renew then left = idle + slack; R[19] = ms + left end
  if A[14] ~= '' then
    local ids = {}
    for id in string.gmatch(A[14], '%S+') do ids[#ids + 1] = id end
    local len = #ids > 0 and redis.call('RPUSH', K[2], unpack(ids)) or 0
    if len == #ids and len > 0 and not renew then redis.call('PEXPIRE', K[2], fmt('%d', left)) end
    -- The list keeps up to a quarter more than the ids listed (R[20], the newest): trimmed
    -- once per that many turns; readers list the newest R[20] and count the rest as dropped.
    local keep = A[15]
    R[20] = keep
    if len > keep + math.max(8, math.floor(keep / 4)) then
      redis.call('LTRIM', K[2], fmt('%d', -keep), -1)
      R[15] = R[15] + len - keep
    end
  end
  if A[17] ~= '' then R[16] = A[17]; R[17] = turns + A[18] end
  local checkpoints = R[18] ~= 0
  if A[19] ~= '' then
    local rows = {}
    for row in string.gmatch(A[19], '[^\\n]+') do rows[#rows + 1] = row end
    redis.call('RPUSH', K[3], unpack(rows))
    redis.call('LTRIM', K[3], fmt('%d', -A[20]), -1)
    if not checkpoints then
      R[18] = 1
      if not renew then redis.call('PEXPIRE', K[3], fmt('%d', left)) end
    end
    checkpoints = true
  end
  left = fmt('%d', left)
  redis.call('SET', s, cmsgpack.pack(R), 'PX', left)
  if renew then
    redis.call('PEXPIRE', K[2], left)
    if checkpoints then redis.call('PEXPIRE', K[3], left) end
  end
  return renew
end
-- sx: the tenant's index; renewed: the sessions whose keys' expiries this call renewed (new
-- ones among them), each scored with now: a record lives `life` past its score, so what
-- scores older than that has expired. Indexed only when renewed (once per idle/64 of a
-- session's turns), the index ranks sessions within idle/64 of their last turn: a ZADD into
-- the tenant's index on every turn was a quarter of Redis's time per update
-- (`python -m bench.session_script`).
local function index_sessions(sx, renewed, idle)
  if #renewed == 0 then return end
  local ms = math.floor(now / 1000)
  local score = n(ms)
  local z = {}
  for _, id in ipairs(renewed) do
    z[#z + 1] = score; z[#z + 1] = id
  end
  redis.call('ZADD', sx, unpack(z))
  local life = idle + math.floor(idle / 64)  -- the longest a record lives (`apply_session`)
  redis.call('ZREMRANGEBYSCORE', sx, '-inf', '(' .. n(ms - life))
  redis.call('PEXPIRE', sx, n(life))
end
-- The updates of one call (`encoded`: a MessagePack array of argument arrays) applied, under
-- the tenant's key base, then the renewed ones indexed in `sx`. The records' keys are named
-- here from the base, in the tenant's slot like every key of its scripts, rather than passed
-- three per session.
local function apply_sessions(base, sx, encoded)
  local updates = cmsgpack.unpack(encoded)
  local renewed, idle = {}, 0
  for _, A in ipairs(updates) do
    local id = A[1]
    local K = {base .. 'sr:' .. id, base .. 'sd:' .. id, base .. 'sc:' .. id, base .. 's:' .. id}
    if apply_session(K, A) then
      renewed[#renewed + 1] = id
      idle = math.max(idle, A[16])
    end
  end
  index_sessions(sx, renewed, idle)
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


# The record as a reader finds it: its packed value, else (a record an earlier version kept as a
# hash) the hash's fields; and how many decision ids it lists (the newest; its list keeps a
# few more: `apply_session`), with its list's ids: the listed ones when asked for, and how
# many older ones the list still holds (dropped, for the record: added to its dropped count).
LISTED_IDS = """
local function found(sr, s)
  local raw = redis.call('GET', sr)
  if raw then
    local keep = cmsgpack.unpack(raw)[20]
    return raw, keep ~= 0 and keep or nil
  end
  local fields = redis.call('HGETALL', s)
  if #fields == 0 then return nil, nil end
  for i = 1, #fields, 2 do
    if fields[i] == 'dk' then return fields, tonumber(fields[i + 1]) end
  end
  return fields, nil
end
local function listed_ids(keep, sd, listed)
  local len = redis.call('LLEN', sd)
  local over = (keep ~= nil and len > keep) and len - keep or 0
  if not listed then return {}, over end
  if over == 0 then return redis.call('LRANGE', sd, 0, -1), 0 end
  return redis.call('LRANGE', sd, -keep, -1), over
end
"""

# KEYS: sr, sd, sc, s; ARGV: 1 to list the decision ids, 0 not to (they are counted either way).
# Returns {} or {the record (packed, or a hash's fields), decision ids (none when not asked
# for), checkpoints, ids dropped beyond the record's count}.
GET = (
    LISTED_IDS
    + """
local data, keep = found(KEYS[1], KEYS[4])
if not data then return {} end
local ids, over = listed_ids(keep, KEYS[2], ARGV[1] == '1')
return {data, ids, redis.call('LRANGE', KEYS[3], 0, -1), over}
"""
)

# KEYS: sx. ARGV: key base, most. Returns {session, record, decision ids, checkpoints, ids
# dropped beyond the record's count, ...} for the `most` sessions seen last, forgetting index
# entries whose record has expired.
LIST = (
    LISTED_IDS
    + """
local members = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local out = {}
for _, m in ipairs(members) do
  local data, keep = found(ARGV[1] .. 'sr:' .. m, ARGV[1] .. 's:' .. m)
  if not data then
    redis.call('ZREM', KEYS[1], m)
  else
    local ids, over = listed_ids(keep, ARGV[1] .. 'sd:' .. m, true)
    out[#out + 1] = m
    out[#out + 1] = data
    out[#out + 1] = ids
    out[#out + 1] = redis.call('LRANGE', ARGV[1] .. 'sc:' .. m, 0, -1)
    out[#out + 1] = over
  end
end
return out
"""
)


def light_read(keys: tuple[str, str, str, str]) -> tuple[tuple[str, ...], ...]:
    """The commands of a record's read without its decision ids when `GET sr` found no
    packed record (a new session, or one an earlier version kept as a hash), as plain
    commands in one transaction: the record (it may have been written since), the hash
    (taken only when there is no packed record), how many ids its list holds, the
    checkpoints. A script reading as much costs Redis more: what it returns goes through Lua
    and back."""
    sr, sd, sc, s = keys
    return (("GET", sr), ("HGETALL", s), ("LLEN", sd), ("LRANGE", sc, "0", "-1"))


def unpacked(packed: bytes) -> list[Any]:
    """A packed record's 20 values (`GET sr`, admission's read of a record that has one)."""
    return msgpack.unpackb(packed)  # type: ignore[no-any-return]


def holds_checkpoints(values: list[Any]) -> bool:
    """Whether the record's checkpoints' list has any (its `k`): only then is it read."""
    return bool(values[_K])


def packed_record(tenant: str, session: str, values: list[Any], checkpoints: list[bytes]) -> SessionRecord:
    """The record admission read as its packed value (and its checkpoints, when it holds
    any), without its decision ids: their count is the ids trimmed so far (`dd`), not those
    still listed past the newest `dk`, which only the decision ids' own read counts."""
    return _record(tenant, session, values, [], checkpoints, 0)


def light_record(tenant: str, session: str, reply: list[Any]) -> SessionRecord | None:
    """The record `light_read` read (None when there is none): the ids its list holds past
    the newest it lists are counted as dropped, as `listed_ids` counts them."""
    packed, fields, held, checkpoints = reply
    data = packed if packed is not None else fields
    if not data:
        return None
    values = _values(data)
    listed = values[_DK]
    over = held - listed if listed and held > listed else 0
    return _record(tenant, session, values, [], checkpoints, over)


def keys(base: str, session: str) -> tuple[str, str, str, str]:
    """A record's keys: the record, its decision ids, its checkpoints, and the hash an earlier
    version kept the record in (the scripts that write name them the same way, from the key
    base: `apply_sessions`)."""
    return (base + "sr:" + session, base + "sd:" + session, base + "sc:" + session, base + "s:" + session)


def encoded(updates: Iterable[SessionUpdate]) -> bytes:
    """The scripts' argument for `updates` (one request's, or a settle batch's): their fold
    (`folded`) as one MessagePack array of argument arrays, which the script unpacks in one
    call (`cmsgpack`), rather than 20 arguments a session, each converted and packed on its
    own. MessagePack rather than JSON: Redis unpacks it in about two thirds of the time (its
    numbers are not parsed from text)."""
    return msgpack.packb(folded(updates))  # type: ignore[no-any-return]


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


# The record's 20 values, in the order of the packed array (`apply_session`'s R) and named as
# an earlier version's hash fields were (the module's docstring says what each is)
_HASH_FIELDS = tuple(b"f l t i c o u fi li g m up r w dd due dt k x dk".split())
_K = 17  # `k`, whether the record's checkpoints' list holds any
_DK = 19  # `dk`, how many decision ids the record lists
_TEXTS = frozenset((10, 11, 13, 15))  # m, up, w, due


def _values(data: bytes | list[bytes]) -> list[Any]:
    """The record's 20 values, from its packed form or an earlier version's hash fields."""
    if isinstance(data, bytes):
        return unpacked(data)
    fields = dict(zip(data[::2], data[1::2], strict=True))
    values: list[Any] = []
    for index, name in enumerate(_HASH_FIELDS):
        value = fields.get(name)
        if index in _TEXTS:
            values.append(value.decode() if value else "")
        else:
            values.append(int(value) if value else 0)
    return values


def record(
    tenant: str,
    session: str,
    data: bytes | list[bytes],
    decisions: list[bytes],
    checkpoints: list[bytes],
    over: int = 0,
) -> SessionRecord:
    """The record a script returned (`GET`, `LIST`): packed, or an earlier version's hash."""
    return _record(tenant, session, _values(data), decisions, checkpoints, over)


def _record(
    tenant: str,
    session: str,
    values: list[Any],
    decisions: list[bytes],
    checkpoints: list[bytes],
    over: int,
) -> SessionRecord:
    (first, last, turns, input_, cached, output, cost, first_input, last_input, growth) = values[:10]
    (model, upstream, replica, workflow, dropped, due, due_turn) = values[10:17]
    return SessionRecord(
        tenant,
        session,
        first,
        last,
        turns,
        input_,
        cached,
        output,
        cost,
        first_input,
        last_input,
        growth,
        model,
        upstream,
        replica,
        workflow,
        tuple(d.decode() for d in decisions),
        dropped + over,
        due,
        due_turn,
        tuple(Checkpoint(*orjson.loads(c)) for c in checkpoints),
    )


def listed(tenant: str, reply: list[Any]) -> list[SessionRecord]:
    return [
        record(tenant, reply[i].decode(), reply[i + 1], reply[i + 2], reply[i + 3], reply[i + 4])
        for i in range(0, len(reply), 5)
    ]


def _row(c: Checkpoint) -> list[Any]:
    return [c.turn, c.messages, c.digest, c.summary, c.tokens_before, c.tokens_after]
