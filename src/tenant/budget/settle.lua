-- tokenmeter: settle one finished request, or withdraw one refused (src/tenant/budget/redis.rs).
-- KEYS: tokens of the minute it was charged to, tokens of its UTC day, the set of streams in
--       flight, the request's marker (admit.lua), requests of the minute it was charged to.
-- ARGV: tokens it used, tokens it reserved, its member in the set of streams, 1 when the store
--       admitted it (0: let through unchecked when the store did not answer), 1 when its minute
--       still counts (the current or the previous one), 1 for a withdrawal (a request refused
--       because its admission went unanswered: nothing used, and its request not counted),
--       the marker's lifetime (ms, the lease).
-- Exactly once, in any order: the marker says what already happened to the request.
--   "s" (settled or withdrawn before) or "x<limit>" (refused): nothing to do.
--   "a" (its admission ran, even one whose answer was lost or came late): its reservation is
--       replaced by its usage (a withdrawal: by nothing, and its request is taken back too).
--   none: its admission has not run. One let through unchecked is charged its whole usage and
--       counted as a request; a withdrawal charges nothing; either way the marker now says "s", so an admission that
--       arrives later does nothing. One the store admitted whose marker is gone outlived its lease:
--       its reservation stays charged as it was (docs/tenants.md).
-- A negative difference is taken only from a count that still exists, and no count goes below 0.
-- Returns the tokens of its UTC day after it (for the used-ratio gauge), whether it was charged
-- now or found already settled.
local used, reserved = tonumber(ARGV[1]), tonumber(ARGV[2])
local withdraw = ARGV[6] == '1'
local function day()
  return tonumber(redis.call('GET', KEYS[2]) or 0)
end
local marker = redis.call('GET', KEYS[4])
if marker and marker ~= 'a' then
  return day()
end
local admitted = redis.call('ZREM', KEYS[3], ARGV[3]) == 1 or marker == 'a'
local delta, requests = 0, 0
if admitted then
  delta = used - reserved
  if withdraw then
    requests = -1
  end
elseif ARGV[4] == '1' and not withdraw then
  return day()
else
  delta = used
  if not withdraw then
    requests = 1
  end
end
redis.call('SET', KEYS[4], 's', 'PX', tonumber(ARGV[7]))
local function charge(key, by, ttl)
  if by > 0 or redis.call('EXISTS', key) == 1 then
    if redis.call('INCRBY', key, by) < 0 then
      redis.call('SET', key, 0)
    end
    redis.call('EXPIRE', key, ttl)
  end
end
if ARGV[5] == '1' then
  if delta ~= 0 then
    charge(KEYS[1], delta, 180)
  end
  if requests ~= 0 then
    charge(KEYS[5], requests, 180)
  end
end
if delta ~= 0 then
  charge(KEYS[2], delta, 172800)
end
return day()
