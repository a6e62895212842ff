"""The Redis store's lease call (`StateStore.lease`): one Lua script that applies a settle
batch once and sets a lease's holds, with the semantics of `sqlite_lease_tx.py`.

The lease is a reservation record like a request's (`r:<lease id>`, in the `leases` zset
by lease end), so the sweep of every other script releases its budget holds when it
expires, and `open_reservations` counts it. Its fields: `s` (o: open), `n` (the last
applied sequence number), `b:<counter key>` (the hold), `u:<rate key>` (units taken since
the lease began). A batch marks `r:<batch id>` settled, as a settle marks its id, and
updates the session records of its settlements in the same step (`redis_sessions.APPLY`,
one update per session, its turns in the batch folded into one, then the tenant's session
index once), so a leased request of a session costs no store call of its own.
"""

from __future__ import annotations

from typing import Any

from adapters.state import redis_sessions
from adapters.state.lease_batch import LEDGER_FIELDS, fold
from adapters.state.redis_scripts import _PRELUDE
from gateway.metering.lease_records import LeaseGrant, LeaseSync
from gateway.metering.records import RateState

_STATES: dict[int, Any] = {0: "held", 1: "stale", 2: "closed"}

# KEYS: leases, lease record, batch marker, budget counters (nc), rate keys (nq),
#       batch spent counters (ns), batch refund rate keys (nf), batch ledger keys (nl), then,
#       when the batch carries session updates, the sessions' index `sx`
# ARGV: seq, lease_us, keep_ms, close 0|1, has batch 0|1, reservation prefix, nc, nq, ns, nf,
#       nl, lease id; per budget (want, floor, limit, hard 0|1, expires_at); per rate (want,
#       floor, per_minute); per spent (amount, expires_at); per refund inc_us; per ledger key
#       (m, then m pairs of field, increment); last, the key base and the session updates
#       (`redis_sessions.encoded`; both "" when there are none)
# Returns {state 0 held|1 stale|2 closed, batch applied 0|1, per budget (hold, used),
#          per rate (taken, remaining, backlog_us)}
LEASE = (
    _PRELUDE
    + redis_sessions.APPLY
    + """
local A = ARGV
local seq, lease_us, keep = tonumber(A[1]), tonumber(A[2]), A[3]
local close, has_batch = A[4] == '1', A[5] == '1'
local nc, nq, ns, nf, nl = tonumber(A[7]), tonumber(A[8]), tonumber(A[9]), tonumber(A[10]), tonumber(A[11])
sweep(KEYS[1], A[6])
local applied = 0
local kb = 3 + nc + nq
local p = 13 + 5 * nc + 3 * nq
if has_batch and redis.call('EXISTS', KEYS[3]) == 0 then
  for j = 1, ns do
    local key = KEYS[kb + j]
    redis.call('HINCRBY', key, 'spent', A[p + 2 * j - 2])
    redis.call('EXPIREAT', key, A[p + 2 * j - 1])
  end
  local f = p + 2 * ns
  for i = 1, nf do give_back(KEYS[kb + ns + i], A[f + i - 1]) end
  local a = f + nf
  for l = 1, nl do
    local key, m = KEYS[kb + ns + nf + l], tonumber(A[a])
    for x = 1, m do redis.call('HINCRBY', key, A[a + 2 * x - 1], A[a + 2 * x]) end
    a = a + 1 + 2 * m
  end
  if A[#A] ~= '' then apply_sessions(A[#A - 1], KEYS[#KEYS], A[#A]) end
  redis.call('HSET', KEYS[3], 's', 's')
  redis.call('PEXPIRE', KEYS[3], keep)
  applied = 1
end
local rec = {}
local fields = redis.call('HGETALL', KEYS[2])
for i = 1, #fields, 2 do rec[fields[i]] = fields[i + 1] end
local st = rec['s']
local out = {0, applied}
if st == 's' or st == 'e' or (st == nil and close) then
  if st == nil then
    redis.call('HSET', KEYS[2], 's', 's')
    redis.call('PEXPIRE', KEYS[2], keep)
  end
  out[1] = 2
elseif st == 'o' and tonumber(rec['n']) >= seq then
  out[1] = 1
end
if out[1] ~= 0 then
  for j = 1, nc do
    out[#out + 1] = tonumber(rec['b:' .. KEYS[3 + j]] or '0')
    out[#out + 1] = used(KEYS[3 + j])
  end
  for i = 1, nq do
    out[#out + 1] = tonumber(rec['u:' .. KEYS[3 + nc + i]] or '0')
    out[#out + 1] = 0
    out[#out + 1] = 0
  end
  return out
end
local record = {'s', 'o', 'n', A[1]}
for j = 1, nc do
  local key, a = KEYS[3 + j], 13 + 5 * (j - 1)
  local old = tonumber(rec['b:' .. key] or '0')
  local v = redis.call('HMGET', key, 'spent', 'reserved')
  local others = tonumber(v[1] or '0') + tonumber(v[2] or '0') - old
  local new, floor = tonumber(A[a]), tonumber(A[a + 1])
  if A[a + 3] == '1' and new > tonumber(A[a + 2]) - others then new = tonumber(A[a + 2]) - others end
  if new < floor then new = floor end
  if new < 0 then new = 0 end
  if new ~= old then
    redis.call('HINCRBY', key, 'reserved', n(new - old))
    redis.call('EXPIREAT', key, A[a + 4])
  end
  record[#record + 1] = 'b:' .. key
  record[#record + 1] = n(new)
  out[#out + 1] = new
  out[#out + 1] = others + new
end
local rates = {}
for i = 1, nq do
  local key, a = KEYS[3 + nc + i], 13 + 5 * nc + 3 * (i - 1)
  local old = tonumber(rec['u:' .. key] or '0')
  local want, floor, pm = tonumber(A[a]), tonumber(A[a + 1]), tonumber(A[a + 2])
  local stored = redis.call('GET', key)
  local tat = tonumber(stored or '0')
  if tat < now then tat = now end
  local new = old
  if want > old then
    local fits = math.floor((W - (tat - now)) * pm / W)
    local grant = want - old
    if grant > fits then grant = fits end
    if grant > 0 then
      new = old + grant
      tat = tat + math.ceil(grant * W / pm)
    end
  elseif want < old then
    new = want
    tat = tat - math.floor((old - want) * W / pm)
    if tat < now then tat = now end
  end
  if new < floor then new = floor end
  if new ~= old then
    redis.call('SET', key, n(tat), 'PX', n(math.floor((tat - now) / 1000) + 1000))
  end
  record[#record + 1] = 'u:' .. key
  record[#record + 1] = n(new)
  local remaining = math.floor((W - (tat - now)) * pm / W)
  if remaining < 0 then remaining = 0 end
  out[#out + 1] = new
  out[#out + 1] = remaining
  out[#out + 1] = tat - now
end
if close then
  -- Nothing stays held, whatever was asked.
  for j = 1, nc do
    local hold = out[1 + 2 * j]
    if hold > 0 then redis.call('HINCRBY', KEYS[3 + j], 'reserved', n(-hold)) end
    out[1 + 2 * j] = 0
    out[2 + 2 * j] = out[2 + 2 * j] - hold
  end
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 's', 's')
  redis.call('PEXPIRE', KEYS[2], keep)
  redis.call('ZREM', KEYS[1], A[12])
  out[1] = 2
else
  redis.call('HSET', KEYS[2], unpack(record))
  redis.call('ZADD', KEYS[1], n(now + lease_us), A[12])
end
return out
"""
)


def lease_call(base: str, sync: LeaseSync) -> tuple[tuple[str, ...], tuple[str | int | bytes, ...]]:
    """The script's keys and arguments for a sync, under the tenant's key base."""
    folded = fold(sync.batch) if sync.batch is not None else None
    batch_id = sync.batch.batch_id if sync.batch is not None else sync.lease_id
    keys = [base + "leases", base + "r:" + sync.lease_id, base + "r:" + batch_id]
    keys += [base + "c:" + b.counter for b in sync.budgets]
    keys += [base + "q:" + r.counter for r in sync.rates]
    spent = folded.spent if folded else {}
    refunds = folded.refunds if folded else {}
    ledger = folded.ledger if folded else {}
    keys += [base + "c:" + counter for counter in spent]
    keys += [base + "q:" + counter for counter in refunds]
    keys += [base + "l:" + day for day in ledger]
    updates = sync.batch.session_updates() if sync.batch else []
    if updates:
        keys.append(base + "sx")
    keep_s = sync.batch.keep_s if sync.batch is not None else 900
    args: list[str | int | bytes] = [
        sync.seq,
        round(sync.lease_s * 1_000_000),
        keep_s * 1000,
        1 if sync.close else 0,
        1 if sync.batch is not None else 0,
        base + "r:",
        len(sync.budgets),
        len(sync.rates),
        len(spent),
        len(refunds),
        len(ledger),
        sync.lease_id,
    ]
    for b in sync.budgets:
        args += (b.want, b.floor, b.limit, 1 if b.hard else 0, b.expires_at)
    for r in sync.rates:
        args += (r.want, r.floor, r.per_minute)
    for amount, expires_at in spent.values():
        args += (amount, expires_at)
    args += list(refunds.values())
    for rows in ledger.values():
        args.append(len(rows) * 5)
        for (key_id, model, workflow), sums in rows.items():
            for name, value in zip(LEDGER_FIELDS, sums, strict=True):
                args += (f"{key_id}\t{model}\t{workflow}\t{name}", value)
    # The turns of one session in the batch: one update of its record (`redis_sessions.folded`).
    args += (base, redis_sessions.encoded(updates)) if updates else ("", "")
    return tuple(keys), tuple(args)


def lease_grant(sync: LeaseSync, reply: list[Any]) -> LeaseGrant:
    nb = len(sync.budgets)
    holds = tuple(int(reply[2 + 2 * j]) for j in range(nb))
    used = tuple(int(reply[3 + 2 * j]) for j in range(nb))
    base = 2 + 2 * nb
    taken, rates = [], []
    for i, rate in enumerate(sync.rates):
        units, remaining, backlog_us = reply[base + 3 * i : base + 3 * i + 3]
        taken.append(int(units))
        rates.append(RateState(rate.per_minute, int(remaining), int(backlog_us) / 1e6, 0.0))
    return LeaseGrant(_STATES[int(reply[0])], reply[1] == 1, holds, used, tuple(taken), tuple(rates))
