"""The Redis store's Lua scripts: each one atomic step, the same semantics as the SQLite
transactions in `sqlite_tx.py`.

Every key a script touches carries its tenant's hash tag (`prefix:{tenant}:...`), so one
tenant's keys share a Redis Cluster slot; the reservation records a sweep releases are
named from a prefix passed in ARGV, in the same slot. Time is Redis's own (TIME), so all
replicas agree on it. Integers stay below 2^53, exact in Lua's doubles.

Keys: `c:<counter>` hash {spent, reserved}; `q:<rate>` string (GCRA theoretical arrival
time, microseconds); `r:<id>` hash {s: o|e|s, b:<counter key>: amount reserved,
q:<rate key>: increment taken}; `leases`
zset of open reservation ids by lease end; `l:<day>` hash {key_id \\t model \\t field: n};
`i:<key>` hash {f: fingerprint, s: f|d, st: status, b: body}.
"""

from __future__ import annotations

_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local W = 60000000
-- Numbers go to redis.call as exact integer text (the default conversion may use an exponent):
-- rounded to the nearest, then '%d', which formats in half the time '%.0f' takes.
local function n(x) return string.format('%d', math.floor(x + 0.5)) end
local function sweep(leases, prefix)
  local ids = redis.call('ZRANGEBYSCORE', leases, '-inf', '(' .. n(now), 'LIMIT', 0, 100)
  for _, id in ipairs(ids) do
    local rk = prefix .. id
    local fields = redis.call('HGETALL', rk)
    for i = 1, #fields, 2 do
      if string.sub(fields[i], 1, 2) == 'b:' then
        redis.call('HINCRBY', string.sub(fields[i], 3), 'reserved', n(-tonumber(fields[i + 1])))
      end
    end
    if #fields > 0 then
      redis.call('HSET', rk, 's', 'e')
      redis.call('PEXPIRE', rk, 3600000)
    end
    redis.call('ZREM', leases, id)
  end
end
local function give_back(key, inc_us)
  local tat = redis.call('GET', key)
  if tat then
    local new = tonumber(tat) - tonumber(inc_us)
    if new < now then new = now end
    redis.call('SET', key, n(new), 'PX', n(math.floor((new - now) / 1000) + 1000))
  end
end
local function used(key)
  local v = redis.call('HMGET', key, 'spent', 'reserved')
  return tonumber(v[1] or '0') + tonumber(v[2] or '0')
end
"""

PRELUDE = _PRELUDE  # for scripts built on these (redis_sessions.py)

# KEYS: leases, reservation, rate keys (nr), budget counter keys (nb)
# ARGV: nr, nb, lease_us, reservation prefix, reservation id, then per rate (inc_us, per_minute),
#       then per budget (amount, limit, hard 0|1, expires_at unix s); integers as decimal text.
# Returns {admitted 0|1, used per budget..., per rate (remaining, backlog_us, retry_us)...}
# (Each redis.call costs a microsecond or two inside Redis: the scripts make as few as they can.)
RESERVE = (
    _PRELUDE
    + """
local A = ARGV
local nr, nb = tonumber(A[1]), tonumber(A[2])
sweep(KEYS[1], A[4])
-- A record under this id already: released (or settled) before this reserve arrived.
local ok = redis.call('EXISTS', KEYS[2]) == 0
local tats, new_tats = {}, {}
for i = 1, nr do
  local tat = tonumber(redis.call('GET', KEYS[2 + i]) or '0')
  if tat < now then tat = now end
  tats[i] = tat
  new_tats[i] = tat + tonumber(A[4 + 2 * i])
  if new_tats[i] - now > W then ok = false end
end
local base = 5 + 2 * nr
local used_now = {}
for j = 1, nb do
  local u = used(KEYS[2 + nr + j])
  used_now[j] = u
  local a = base + 4 * (j - 1)
  if A[a + 3] == '1' and u + tonumber(A[a + 1]) > tonumber(A[a + 2]) then ok = false end
end
if ok then
  for i = 1, nr do
    local ttl = math.floor((new_tats[i] - now) / 1000) + 1000
    redis.call('SET', KEYS[2 + i], n(new_tats[i]), 'PX', n(ttl))
  end
  local record = {'s', 'o'}
  for i = 1, nr do
    record[#record + 1] = 'q:' .. KEYS[2 + i]
    record[#record + 1] = A[4 + 2 * i]
  end
  for j = 1, nb do
    local a = base + 4 * (j - 1)
    local key, amount = KEYS[2 + nr + j], A[a + 1]
    redis.call('HINCRBY', key, 'reserved', amount)
    redis.call('EXPIREAT', key, A[a + 4])
    record[#record + 1] = 'b:' .. key
    record[#record + 1] = amount
    used_now[j] = used_now[j] + tonumber(amount)
  end
  redis.call('HSET', KEYS[2], unpack(record))
  redis.call('ZADD', KEYS[1], n(now + tonumber(A[3])), A[5])
end
local out = {ok and 1 or 0}
for j = 1, nb do out[#out + 1] = used_now[j] end
-- Each limit as it now stands: after this request if admitted, else without it.
for i = 1, nr do
  local backlog, retry = new_tats[i] - now, 0
  if not ok then
    backlog = tats[i] - now
    if new_tats[i] - now > W then retry = new_tats[i] - now - W end
  end
  local remaining = math.floor((W - backlog) * tonumber(A[5 + 2 * i]) / W)
  if remaining < 0 then remaining = 0 end
  out[#out + 1] = remaining
  out[#out + 1] = backlog
  out[#out + 1] = retry
end
return out
"""
)

# KEYS: leases, reservation, spent counter keys (ns), refunded rate keys (nr), ledger key (0 or 1)
# ARGV: ns, nr, keep_ms, reservation id, ledger field prefix (key, model, workflow, tab-separated),
#       then per spent (amount, expires_at),
#       then per refund inc_us, then (if a ledger key) requests, prompt, cached, completion, cost,
#       then release 0|1 (last): an open reservation's rate increments are given back too
# Returns 1 if applied, 0 if that id was already settled.
SETTLE = (
    _PRELUDE
    + """
local A = ARGV
local ns, nr = tonumber(A[1]), tonumber(A[2])
local rk = KEYS[2]
local fields = redis.call('HGETALL', rk)
local state = nil
for i = 1, #fields, 2 do
  if fields[i] == 's' then state = fields[i + 1] end
end
if state == 's' then return 0 end
if state == 'o' then
  local release = A[#A] == '1'
  for i = 1, #fields, 2 do
    local kind = string.sub(fields[i], 1, 2)
    if kind == 'b:' then
      redis.call('HINCRBY', string.sub(fields[i], 3), 'reserved', n(-tonumber(fields[i + 1])))
    elseif kind == 'q:' and release then
      give_back(string.sub(fields[i], 3), fields[i + 1])
    end
  end
  redis.call('ZREM', KEYS[1], A[4])
end
for j = 1, ns do
  local key = KEYS[2 + j]
  redis.call('HINCRBY', key, 'spent', A[4 + 2 * j])
  redis.call('EXPIREAT', key, A[5 + 2 * j])
end
for i = 1, nr do give_back(KEYS[2 + ns + i], A[5 + 2 * ns + i]) end
local lk = KEYS[3 + ns + nr]
if lk then
  local p, a = A[5], 5 + 2 * ns + nr
  redis.call('HINCRBY', lk, p .. 'requests', A[a + 1])
  redis.call('HINCRBY', lk, p .. 'prompt_tokens', A[a + 2])
  redis.call('HINCRBY', lk, p .. 'cached_tokens', A[a + 3])
  redis.call('HINCRBY', lk, p .. 'completion_tokens', A[a + 4])
  redis.call('HINCRBY', lk, p .. 'cost_micros', A[a + 5])
end
if #fields > 0 then redis.call('DEL', rk) end
redis.call('HSET', rk, 's', 's')
redis.call('PEXPIRE', rk, A[3])
return 1
"""
)

# KEYS: leases, then counter keys. ARGV: reservation prefix. Returns used per counter.
COUNTERS = (
    _PRELUDE
    + """
sweep(KEYS[1], ARGV[1])
local out = {}
for j = 2, #KEYS do out[#out + 1] = used(KEYS[j]) end
return out
"""
)

# KEYS: leases. ARGV: reservation prefix. Returns the number of open reservations.
OPEN_RESERVATIONS = (
    _PRELUDE
    + """
sweep(KEYS[1], ARGV[1])
return redis.call('ZCARD', KEYS[1])
"""
)

# KEYS: idempotency key. ARGV: fingerprint, lease_ms.
CLAIM_IDEMPOTENCY = """
local v = redis.call('HMGET', KEYS[1], 'f', 's', 'st', 'b')
if v[1] then
  if v[1] ~= ARGV[1] then return {'mismatch'} end
  if v[2] == 'd' then return {'done', v[3], v[4]} end
  return {'in_flight'}
end
redis.call('HSET', KEYS[1], 'f', ARGV[1], 's', 'f')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {'claimed'}
"""

# KEYS: idempotency key. ARGV: fingerprint, status, body, ttl_ms.
COMPLETE_IDEMPOTENCY = """
if redis.call('HGET', KEYS[1], 'f') == ARGV[1] then
  redis.call('HSET', KEYS[1], 's', 'd', 'st', ARGV[2], 'b', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return 1
"""

# KEYS: idempotency key.
RELEASE_IDEMPOTENCY = """
if redis.call('HGET', KEYS[1], 's') == 'f' then redis.call('DEL', KEYS[1]) end
return 1
"""
