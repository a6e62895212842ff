"""The Redis job store's Lua scripts: each is one atomic step of `redis_jobs.py`.

Every key shares one hash tag (`<prefix>:{jobs}:...`), so the scripts that build key names
from the base they are given stay in one cluster slot. Each script declares the stream as
KEYS[1] (every script touches it): a Redis Cluster client routes a script by its keys, and
one declaring none would be sent to a random node. A job is a hash `job:<id>`; the
stream `stream` holds one entry per queued job (`entry` in the hash names the live one),
read by the consumer group `workers`; a job waiting out a backoff sits in the sorted set
`delayed` instead. `open:<tenant>` (by creation time) and `running:<tenant>` serve metrics.
"""

from __future__ import annotations

# KEYS: stream (all scripts). ARGV: base, group, id, tenant, created_at, expires_at, then field/value pairs.
SUBMIT = """
local base, group, id, tenant = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local key = base .. 'job:' .. id
if redis.call('EXISTS', key) == 1 then return 0 end
local entry = redis.call('XADD', base .. 'stream', '*', 'job', id)
redis.call('HSET', key, 'id', id, 'tenant', tenant, 'created_at', ARGV[5], 'expires_at', ARGV[6],
  'state', 'queued', 'attempts', 0, 'started', 0, 'entry', entry)
for i = 7, #ARGV, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
redis.call('ZADD', base .. 'open:' .. tenant, ARGV[5], id)
redis.call('SADD', base .. 'tenants', tenant)
return 1
"""

# Due delayed jobs back into the stream. ARGV: base, now, limit.
PROMOTE = """
local base = ARGV[1]
local due = redis.call('ZRANGEBYSCORE', base .. 'delayed', '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do
  redis.call('ZREM', base .. 'delayed', id)
  local key = base .. 'job:' .. id
  if redis.call('HGET', key, 'state') == 'queued' then
    local entry = redis.call('XADD', base .. 'stream', '*', 'job', id)
    redis.call('HSET', key, 'entry', entry)
  end
end
return #due
"""

# Take one stream entry read or reclaimed by a worker. ARGV: base, group, entry, job id, token, now.
# Returns the job's fields, or an empty array when the entry is stale (acknowledged and dropped).
TAKE = """
local base, group, entry, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local key = base .. 'job:' .. id
local state = redis.call('HGET', key, 'state')
if (state ~= 'queued' and state ~= 'running') or redis.call('HGET', key, 'entry') ~= entry then
  redis.call('XACK', base .. 'stream', group, entry)
  redis.call('XDEL', base .. 'stream', entry)
  return {}
end
redis.call('HSET', key, 'state', 'running', 'token', ARGV[5], 'started', 1, 'claimed_at', ARGV[6])
redis.call('HINCRBY', key, 'attempts', 1)
redis.call('SADD', base .. 'running:' .. redis.call('HGET', key, 'tenant'), id)
return redis.call('HGETALL', key)
"""

# The opening of every script on one claimed job (ARGV: base, group, id, token, ...): nothing
# is done (0 is returned) unless the job is still running under that claim's token.
_CLAIMED = """
local base, group, id = ARGV[1], ARGV[2], ARGV[3]
local key = base .. 'job:' .. id
if redis.call('HGET', key, 'state') ~= 'running' or redis.call('HGET', key, 'token') ~= ARGV[4] then
  return 0
end
"""

# ARGV: base, group, id, token, consumer. Resets the entry's idle time (the claim's lease).
EXTEND = (
    _CLAIMED
    + """
redis.call('XCLAIM', base .. 'stream', group, ARGV[5], 0, redis.call('HGET', key, 'entry'), 'JUSTID')
return 1
"""
)

# ARGV: base, group, id, token, visible_at, cause, payload or ''.
RETRY_LATER = (
    _CLAIMED
    + """
local entry = redis.call('HGET', key, 'entry')
redis.call('XACK', base .. 'stream', group, entry)
redis.call('XDEL', base .. 'stream', entry)
redis.call('HSET', key, 'state', 'queued', 'entry', '')
redis.call('HDEL', key, 'token')
redis.call('HINCRBY', key, 'cause:' .. ARGV[6], 1)
if ARGV[7] ~= '' then redis.call('HSET', key, 'payload', ARGV[7]) end
redis.call('SREM', base .. 'running:' .. redis.call('HGET', key, 'tenant'), id)
redis.call('ZADD', base .. 'delayed', ARGV[5], id)
return 1
"""
)

# ARGV: base, group, id, token, state, status, body, now, keep_ms.
FINISH = (
    _CLAIMED
    + """
local entry = redis.call('HGET', key, 'entry')
redis.call('XACK', base .. 'stream', group, entry)
redis.call('XDEL', base .. 'stream', entry)
redis.call('HSET', key, 'state', ARGV[5], 'status', ARGV[6], 'body', ARGV[7], 'finished_at', ARGV[8])
redis.call('HDEL', key, 'token', 'payload')
local tenant = redis.call('HGET', key, 'tenant')
redis.call('SREM', base .. 'running:' .. tenant, id)
redis.call('ZREM', base .. 'open:' .. tenant, id)
redis.call('PEXPIRE', key, ARGV[9])
local batch = redis.call('HGET', key, 'batch_id')
if batch then
  redis.call('HINCRBY', base .. 'batch:' .. batch, ARGV[5] == 'succeeded' and 'succeeded' or 'failed', 1)
  redis.call('HSET', base .. 'batch:' .. batch, 'last_finished_at', ARGV[8])
end
return 1
"""
)

# Cancel one queued job. ARGV: base, group, id, tenant, status, body, now, keep_ms.
# Returns the job's fields before cancelling, or an empty array.
CANCEL = """
local function cancel(base, group, id, tenant, status, body, now, keep_ms)
  local key = base .. 'job:' .. id
  if redis.call('HGET', key, 'tenant') ~= tenant or redis.call('HGET', key, 'state') ~= 'queued' then
    return {}
  end
  local before = redis.call('HGETALL', key)
  local entry = redis.call('HGET', key, 'entry')
  if entry and entry ~= '' then
    redis.call('XACK', base .. 'stream', group, entry)
    redis.call('XDEL', base .. 'stream', entry)
  end
  redis.call('ZREM', base .. 'delayed', id)
  redis.call('HSET', key, 'state', 'cancelled', 'status', status, 'body', body, 'finished_at', now)
  redis.call('HDEL', key, 'payload', 'token')
  redis.call('ZREM', base .. 'open:' .. tenant, id)
  redis.call('PEXPIRE', key, keep_ms)
  local batch = redis.call('HGET', key, 'batch_id')
  if batch then
    redis.call('HINCRBY', base .. 'batch:' .. batch, 'failed', 1)
    redis.call('HSET', base .. 'batch:' .. batch, 'last_finished_at', now)
  end
  return before
end
"""

CANCEL_JOB = (
    CANCEL
    + """
return cancel(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8])
"""
)

# ARGV: base, group, batch id, tenant, status, body, now, keep_ms. Returns a list of field arrays.
CANCEL_BATCH = (
    CANCEL
    + """
local base, batch = ARGV[1], ARGV[3]
local bkey = base .. 'batch:' .. batch
if redis.call('HGET', bkey, 'tenant') ~= ARGV[4] then return false end
redis.call('HSETNX', bkey, 'cancel_requested_at', ARGV[7])
local out = {}
for _, id in ipairs(redis.call('LRANGE', base .. 'batchjobs:' .. batch, 0, -1)) do
  local before = cancel(base, ARGV[2], id, ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8])
  if #before > 0 then table.insert(out, before) end
end
return out
"""
)
