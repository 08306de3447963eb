"""The Lua scripts of the shared rate ledger: each operation on one rate key is one atomic script.

Keys of one rate key (``K`` = ``<prefix>budget:{<rate key>}``; the rate key is
the ``{hash tag}``, so a Redis Cluster keeps them in one slot and can run the
scripts):

- ``K:state`` — HASH: ``clock`` (the latest time any process passed: time
  never runs backwards for a key), ``paused`` (no call before this time),
  ``tokens``/``ts`` (a token bucket), ``cap``/``adj`` (a window's allowance
  as learned from throttles, and when it last changed);
- ``K:grants`` — ZSET: a window's grants, scored by their time, trimmed to the window;
- ``K:paced`` — ZSET: a window's paced live updates, trimmed to one slice;
- ``K:reserved`` — HASH: process instance id → ``"<calls> <expiry>"``: the calls
  that process's open cards hold; a field past its expiry is ignored and
  removed (its process stopped refreshing it: it is gone);
- ``K:arriving`` — ZSET: with a limit on arrivals, the calls the platform may
  count now, scored by when they stop counting: a call on its way until its
  longest flight (its process may die before it lands), then, once answered,
  until a second after its answer.

Times are seconds on the clock the callers pass (see
:mod:`botgateway.budget.ledgers.redis`). Floats are returned as strings: Redis
truncates Lua numbers to integers in replies.
"""

from __future__ import annotations

from botgateway.budget.ledgers.base import ARRIVAL_WINDOW_S, LEARN_BACK, PACED_SHARE, SLICES

__all__ = ["CLAIM", "GIVE_BACK", "LANDED", "PAUSE", "PUBLISH", "TAKE"]

_PLAN = f"""
local SLICES, PACED_SHARE, LEARN_BACK, ARRIVAL_WINDOW = {SLICES}, {PACED_SHARE}, {LEARN_BACK}, {ARRIVAL_WINDOW_S}
"""

_RESERVED = """
-- The calls every live process but ``instance`` holds reserved in the hash ``key``; a field past its expiry is removed
-- (its process stopped refreshing it: it is gone).
local function reserved_by_others(key, instance, now)
  local total = 0
  local held = redis.call('HGETALL', key)
  for i = 1, #held, 2 do
    if held[i] ~= instance then
      local calls, expiry = string.match(held[i + 1], '^(%d+) (%S+)$')
      if calls and tonumber(expiry) > now then
        total = total + tonumber(calls)
      else
        redis.call('HDEL', key, held[i])
      end
    end
  end
  return total
end
"""

# KEYS: state, grants, paced, reserved, arriving.
# ARGV: now, rate_per_s, size, window_s, mode ('take' | 'peek'), live ('1'/'0'), later ('1'/'0'),
#       instance, calls reserved by that instance now, ticket, keep_ms, calls wanted (a bucket grants up to that many),
#       arrivals per second (0: no limit on arrivals; then one call is granted at most), longest flight in seconds.
# Returns {calls granted (0/1; a bucket up to the calls wanted), retry_in, tokens left, calls reserved fleet-wide,
#          paused until}.
TAKE = _PLAN + _RESERVED + """
local now = tonumber(ARGV[1])
local rate = math.max(tonumber(ARGV[2]), 1e-9)
local size = math.max(tonumber(ARGV[3]), 1)
local window = tonumber(ARGV[4])
local take = ARGV[5] == 'take'
local live = ARGV[6] == '1'
local later = ARGV[7] == '1'
local keep = tonumber(ARGV[11])
local st = redis.call('HMGET', KEYS[1], 'clock', 'paused', 'tokens', 'ts', 'cap', 'adj')
now = math.max(now, tonumber(st[1]) or 0)
local paused = tonumber(st[2]) or 0

-- Reservations of every live process: the caller's own as it counts them now, the others' as last refreshed.
local reserved = tonumber(ARGV[9]) + reserved_by_others(KEYS[4], ARGV[8], now)

local function reply(granted, retry, tokens)
  redis.call('HSET', KEYS[1], 'clock', tostring(now))
  local ttl = keep + math.max(paused - now, 0) * 1000
  for i = 1, 3 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('PEXPIRE', KEYS[i], math.ceil(ttl))
    end
  end
  return {granted, tostring(retry), tostring(tokens), reserved, tostring(paused)}
end

if window > 0 then
  local cap = math.min(tonumber(st[5]) or size, size)
  local adj = tonumber(st[6]) or now
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if cap < size and now - adj >= window then
    cap = math.min(size, cap + math.max(1, size * LEARN_BACK))
    adj = now
  end
  redis.call('HSET', KEYS[1], 'cap', tostring(cap), 'adj', tostring(adj))
  local tokens = cap - redis.call('ZCARD', KEYS[2])
  if not take then
    return reply(0, 0, tokens)
  end
  if now < paused then
    return reply(0, paused - now, tokens)
  end
  -- Until the oldest grant leaves the window; held back only by reservations: until a release (polled).
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  local slide = window
  if oldest[2] then
    slide = tonumber(oldest[2]) + window - now
  end
  local needed = 1
  if live then
    needed = 1 + reserved
  end
  if tokens < needed then
    return reply(0, slide, tokens)
  end
  if live and later and tokens - reserved < cap * PACED_SHARE then
    local slice = window / SLICES
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - slice)
    if redis.call('ZCARD', KEYS[3]) >= math.max(1, cap * PACED_SHARE / SLICES) then
      local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
      return reply(0, math.min(slide, tonumber(first[2]) + slice - now), tokens)
    end
    redis.call('ZADD', KEYS[3], now, ARGV[10])
  end
  redis.call('ZADD', KEYS[2], now, ARGV[10])
  return reply(1, 0, tokens - 1)
end

-- A token bucket: tokens do not accrue while paused.
local tokens = math.min(tonumber(st[3]) or size, size)
local ts = tonumber(st[4]) or now
local start = math.max(ts, paused)
if now > start then
  tokens = math.min(size, tokens + (now - start) * rate)
end
ts = math.max(now, ts)
-- A limit on arrivals: the calls on their way or answered within the last second, whichever process made them.
local arrivals = tonumber(ARGV[13]) or 0
local arriving = 0
if arrivals > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  arriving = redis.call('ZCARD', KEYS[5])
end
if take and now >= paused and tokens >= 1 and (arrivals <= 0 or arriving < arrivals) then
  local granted = math.max(math.min(tonumber(ARGV[12]) or 1, math.floor(tokens)), 1)
  if arrivals > 0 then
    granted = 1
    redis.call('ZADD', KEYS[5], now + tonumber(ARGV[14]), ARGV[10])
    redis.call('PEXPIRE', KEYS[5], math.ceil(keep + tonumber(ARGV[14]) * 1000))
  end
  tokens = tokens - granted
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
  return reply(granted, 0, tokens)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(ts))
if not take then
  return reply(0, 0, tokens)
end
if now < paused then
  return reply(0, paused - now, tokens)
end
if tokens >= 1 then
  -- Held back by calls the platform may still count: until the first of them stops counting, or a tenth of a
  -- second, as a call on its way may land any moment in another process, which does not wake this one's line.
  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
  return reply(0, math.min(math.max(tonumber(first[2]) - now, 0.001), ARRIVAL_WINDOW / 10), tokens)
end
return reply(0, (1 - tokens) / rate, tokens)
"""

# KEYS: state, grants. ARGV: now, seconds, size, window_s, keep_ms. Returns the pause's end.
# A window takes the calls it holds now as the platform's real allowance, one step at a time.
PAUSE = _PLAN + """
local now = tonumber(ARGV[1])
local size = math.max(tonumber(ARGV[3]), 1)
local window = tonumber(ARGV[4])
local st = redis.call('HMGET', KEYS[1], 'clock', 'paused', 'cap')
now = math.max(now, tonumber(st[1]) or 0)
local paused = tonumber(st[2]) or 0
local untl = now + math.max(tonumber(ARGV[2]), 0)
if untl > paused then
  paused = untl
  redis.call('HSET', KEYS[1], 'clock', tostring(now), 'paused', tostring(paused))
  if window > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
    local cap = math.min(tonumber(st[3]) or size, size)
    local learned = math.max(redis.call('ZCARD', KEYS[2]), cap * (1 - LEARN_BACK))
    cap = math.max(1, math.min(cap, learned))
    redis.call('HSET', KEYS[1], 'cap', tostring(cap), 'adj', tostring(paused))
  else
    redis.call('HSET', KEYS[1], 'tokens', '0', 'ts', tostring(now))
  end
  redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[5]) + (paused - now) * 1000))
end
return tostring(paused)
"""

# KEYS: arriving. ARGV: ticket, now. A granted call got its answer: it counts for one second more (if it still
# counts: a call answered after its longest flight was already let go).
LANDED = f"""
redis.call('ZADD', KEYS[1], 'XX', tonumber(ARGV[2]) + {ARRIVAL_WINDOW_S}, ARGV[1])
return 1
"""

# KEYS: state, grants, paced, arriving. ARGV: ticket, size, window_s. A granted call that was not made.
GIVE_BACK = """
redis.call('ZREM', KEYS[4], ARGV[1])
if tonumber(ARGV[3]) > 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or ARGV[2])
  redis.call('HSET', KEYS[1], 'tokens', tostring(math.min(tokens + 1, tonumber(ARGV[2]))))
end
return 1
"""

# KEYS: state, grants, reserved. ARGV: now, size, window_s, instance, calls (that instance's reservations with the
# one claimed), expiry, keep_ms. A window's call promised to a card's final only while the window, as learned, still
# has one beyond every live process's reservations (and is not paused): checked and written in one step, so two
# processes planning at once cannot promise the same call. Returns {1 claimed / 0 not, calls left, others' reservations}.
CLAIM = _RESERVED + """
local now = tonumber(ARGV[1])
local size = math.max(tonumber(ARGV[2]), 1)
local window = tonumber(ARGV[3])
local st = redis.call('HMGET', KEYS[1], 'clock', 'paused', 'cap')
now = math.max(now, tonumber(st[1]) or 0)
local cap = math.min(tonumber(st[3]) or size, size)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
local tokens = cap - redis.call('ZCARD', KEYS[2])
local others = reserved_by_others(KEYS[3], ARGV[4], now)
if now < (tonumber(st[2]) or 0) or tokens - others - tonumber(ARGV[5]) < 0 then
  return {0, tostring(tokens), others}
end
redis.call('HSET', KEYS[3], ARGV[4], ARGV[5] .. ' ' .. ARGV[6])
redis.call('PEXPIRE', KEYS[3], ARGV[7])
return {1, tostring(tokens), others}
"""

# KEYS: reserved. ARGV: instance, calls, expiry, keep_ms. One process's reservations of a key, refreshed.
PUBLISH = """
if tonumber(ARGV[2]) > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
"""
