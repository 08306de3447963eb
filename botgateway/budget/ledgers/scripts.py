"""The Lua scripts of the shared rate ledger: each operation on one rate key is one atomic script.

Keys of one rate key (``K`` = ``<prefix>budget:{<rate key>}``; the rate key is
the ``{hash tag}``, so a Redis Cluster keeps them in one slot and can run the
scripts):

- ``K:state`` — HASH: ``clock`` (the latest time any process passed: time
  never runs backwards for a key), ``paused`` (no call before this time),
  ``tokens``/``ts`` (a token bucket), ``ls``/``lt``/``thr`` (the learned share
  of the configured limit, the time quiet periods count from, the throttles
  heard: :class:`~botgateway.budget.learned.Learned`, the fleet's);
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

from botgateway.budget.ledgers.base import PACED_SHARE, SLICES
from botgateway.budget.rate_limit import LIVE_TRICKLE

__all__ = ["CLAIM", "GIVE_BACK", "LANDED", "PAUSE", "PUBLISH", "TAKE"]

_PLAN = f"""
local SLICES, PACED_SHARE, LIVE_TRICKLE = {SLICES}, {PACED_SHARE}, {LIVE_TRICKLE}
"""

_LEARNED = """
-- The learned share of the configured limit at ``now`` (botgateway.budget.learned.Learned.share_at): the share set by
-- the last throttle that taught something, plus ``step`` per quiet ``period`` since ``lt``.
local function learned_share(ls, lt, now, step, period)
  local share = tonumber(ls) or 1
  if share >= 1 then
    return 1
  end
  local since = tonumber(lt) or now
  return math.min(1, share + math.floor(math.max(now - since, 0) / period) * step)
end

-- How long a key's accounts must outlive its last use so that what it learned is kept until all of it is given back.
local function relearn_ms(share, step, period)
  if share >= 1 then
    return 0
  end
  return math.ceil((1 - share) / step) * period * 1000
end

-- Whole calls at ``share`` of ``calls``, one at least (botgateway.budget.learned.learned_limit).
local function learned_calls(calls, share)
  return math.max(math.floor(calls * share + 1e-9), 1)
end
"""

_RESERVED = """
-- The calls every live process but ``instance`` holds reserved in the hash ``key``, and those ``instance`` holds as
-- Redis last heard; a field past its expiry is removed (its process stopped refreshing it: it is gone).
local function reserved_by_others(key, instance, now)
  local total, own = 0, 0
  local held = redis.call('HGETALL', key)
  for i = 1, #held, 2 do
    local calls, expiry = string.match(held[i + 1], '^(%d+) (%S+)$')
    local live = calls and tonumber(expiry) > now
    if held[i] == instance then
      own = live and tonumber(calls) or 0
    elseif live then
      total = total + tonumber(calls)
    else
      redis.call('HDEL', key, held[i])
    end
  end
  return total, own
end
"""

# KEYS: state, grants, paced, reserved, arriving.
# ARGV: now, rate_per_s, size, window_s, mode ('take' | 'peek'), live ('1'/'0'), later ('1'/'0'),
#       instance, calls reserved by that instance now, ticket, keep_ms, calls wanted (a bucket grants up to that many),
#       arrivals per second (0: no limit on arrivals; then one call is granted at most), longest flight in seconds,
#       learning step (share given back per quiet period), quiet period in seconds.
# rate_per_s, size and arrivals are the configured limit's: the accounts are kept by them at the learned share.
# Returns {calls granted (0/1; a bucket up to the calls wanted), retry_in, tokens left, calls reserved fleet-wide,
#          paused until, learned share, throttles heard}.
TAKE = _PLAN + _LEARNED + _RESERVED + """
local now = tonumber(ARGV[1])
local rate = math.max(tonumber(ARGV[2]), 1e-9)
local size = math.max(tonumber(ARGV[3]), 1)
local window = tonumber(ARGV[4])
local take = ARGV[5] == 'take'
local live = ARGV[6] == '1'
local later = ARGV[7] == '1'
local keep = tonumber(ARGV[11])
local step, period = tonumber(ARGV[15]), tonumber(ARGV[16])
local st = redis.call('HMGET', KEYS[1], 'clock', 'paused', 'tokens', 'ts', 'ls', 'lt', 'thr')
now = math.max(now, tonumber(st[1]) or 0)
local paused = tonumber(st[2]) or 0
local share = learned_share(st[5], st[6], now, step, period)
local throttles = tonumber(st[7]) or 0

-- Reservations of every live process: the others' as last refreshed; the caller's own as it counts them now, or as
-- Redis holds them when that is more: a claim of the caller's that landed after it counted (the two on their way at
-- once) promised a call this take must leave alone.
local others, own = reserved_by_others(KEYS[4], ARGV[8], now)
local reserved = math.max(tonumber(ARGV[9]), own) + others

local function reply(granted, retry, tokens)
  redis.call('HSET', KEYS[1], 'clock', tostring(now))
  local ttl = keep + math.max(paused - now, 0) * 1000 + relearn_ms(share, step, period)
  for i = 1, 3 do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('PEXPIRE', KEYS[i], math.ceil(ttl))
    end
  end
  return {granted, tostring(retry), tostring(tokens), reserved, tostring(paused), tostring(share), throttles}
end

if window > 0 then
  -- The window's allowance as learned (fractional, like the in-memory ledger's).
  local cap = math.max(1, size * share)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
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

-- A token bucket, kept by its rate, burst and limit on arrivals at the learned share; tokens do not accrue while paused,
-- and accrue at the rate learned when they were last counted (a quiet period's step applies from now on).
size = learned_calls(size, share)
local tokens = math.min(tonumber(st[3]) or size, size)
local ts = tonumber(st[4]) or now
local start = math.max(ts, paused)
if now > start then
  tokens = math.min(size, tokens + (now - start) * rate * learned_share(st[5], st[6], ts, step, period))
end
rate = rate * share
ts = math.max(now, ts)
-- A limit on arrivals: the calls on their way or answered within the last window, whichever process made them.
-- A live update counts against what the fleet's reserved finals leave of it, a tenth of it at least
-- (botgateway.budget.rate_limit.live_room).
local arrivals = tonumber(ARGV[13]) or 0
local arriving = 0
if arrivals > 0 then
  arrivals = learned_calls(arrivals, share)
  if live then
    local trickle = math.max(math.floor(arrivals / LIVE_TRICKLE), 1)
    arrivals = math.max(arrivals - math.min(reserved, arrivals - trickle), trickle)
  end
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
  return reply(0, math.min(math.max(tonumber(first[2]) - now, 0.001), 0.1), tokens)
end
return reply(0, (1 - tokens) / rate, tokens)
"""

# KEYS: state, grants. ARGV: now, seconds, size, window_s, keep_ms, decrease (the share's factor), floor (the lowest
# share), learning step, quiet period in seconds. Returns {the pause's end, the learned share, throttles heard}.
# A throttle answer: the key is paused, counted, and learned lower (botgateway.budget.learned.Learned.throttled) unless
# an earlier throttle's pause still runs (this one answers a call sent before that one was heard). A window is lowered
# towards the calls it holds now, the platform's real allowance, one step at a time.
PAUSE = _LEARNED + """
local now = tonumber(ARGV[1])
local size = math.max(tonumber(ARGV[3]), 1)
local window = tonumber(ARGV[4])
local step, period = tonumber(ARGV[8]), tonumber(ARGV[9])
local st = redis.call('HMGET', KEYS[1], 'clock', 'paused', 'ls', 'lt', 'thr')
now = math.max(now, tonumber(st[1]) or 0)
local paused = tonumber(st[2]) or 0
local untl = now + math.max(tonumber(ARGV[2]), 0)
local share = learned_share(st[3], st[4], now, step, period)
local throttles = (tonumber(st[5]) or 0) + 1
redis.call('HSET', KEYS[1], 'clock', tostring(now), 'thr', throttles)
if now >= paused then
  local lowered = share * tonumber(ARGV[6])
  if window > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
    lowered = math.max(lowered, redis.call('ZCARD', KEYS[2]) / size)
  end
  share = math.max(tonumber(ARGV[7]), math.min(share, lowered))
  redis.call('HSET', KEYS[1], 'ls', tostring(share), 'lt', tostring(untl))
end
if untl > paused then
  paused = untl
  redis.call('HSET', KEYS[1], 'paused', tostring(paused))
  if window <= 0 then
    redis.call('HSET', KEYS[1], 'tokens', '0', 'ts', tostring(now))
  end
end
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[5]) + (paused - now) * 1000 + relearn_ms(share, step, period)))
return {tostring(paused), tostring(share), throttles}
"""

# KEYS: grants, arriving. ARGV: ticket, now, the span arrivals are counted over. A granted call got its answer: a
# window's grant counts from now (the platform counted it on arrival, by now at the latest), and with a limit on
# arrivals it counts for one span more (if it still counts: a call answered after its longest flight was already
# let go; a grant that left the window stays out).
LANDED = """
redis.call('ZADD', KEYS[1], 'XX', tonumber(ARGV[2]), ARGV[1])
redis.call('ZADD', KEYS[2], 'XX', tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
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
# one claimed), expiry, keep_ms, learning step, quiet period in seconds. A window's call promised to a card's final only
# while the window, as learned, still has one beyond every live process's reservations (and is not paused): checked and
# written in one step, so two processes planning at once cannot promise the same call. Returns {1 claimed / 0 not,
# calls left, others' reservations}.
CLAIM = _LEARNED + _RESERVED + """
local now = tonumber(ARGV[1])
local size = math.max(tonumber(ARGV[2]), 1)
local window = tonumber(ARGV[3])
local st = redis.call('HMGET', KEYS[1], 'clock', 'paused', 'ls', 'lt')
now = math.max(now, tonumber(st[1]) or 0)
local cap = math.max(1, size * learned_share(st[3], st[4], now, tonumber(ARGV[8]), tonumber(ARGV[9])))
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
