-- tokenmeter: settle one finished request (src/tenant/budget/redis.rs).
-- KEYS: tokens of the minute it was charged to, tokens of its UTC day, the set of streams in
--       flight, the request's settled-marker (used only when it was let through unchecked).
-- ARGV: tokens it used, tokens it reserved, its member in the set of streams, 1 when the store
--       admitted it (0: let through unchecked when the store did not answer), 1 when its minute
--       still counts (the current or the previous one).
-- Exactly once, whatever the retries: a reserved request is settled by removing it from the set
-- (a second attempt finds it gone); one let through unchecked is found there too if its admission
-- did reach Redis (the reply was lost), else it is charged its whole usage under a marker that a
-- second attempt finds. A negative difference is taken only from a count that still exists, and
-- no count goes below 0.
-- Returns the tokens of its UTC day after it (for the used-ratio gauge), whether it was charged
-- now or found already settled.
local used, reserved = tonumber(ARGV[1]), tonumber(ARGV[2])
local function day()
  return tonumber(redis.call('GET', KEYS[2]) or 0)
end
local delta
if redis.call('ZREM', KEYS[3], ARGV[3]) == 1 then
  delta = used - reserved
elseif ARGV[4] == '1' then
  return day()
elseif redis.call('SET', KEYS[4], 1, 'NX', 'EX', 86400) then
  delta = used
else
  return day()
end
local function charge(key, ttl)
  if delta > 0 or redis.call('EXISTS', key) == 1 then
    if redis.call('INCRBY', key, delta) < 0 then
      redis.call('SET', key, 0)
    end
    redis.call('EXPIRE', key, ttl)
  end
end
if delta ~= 0 then
  if ARGV[5] == '1' then
    charge(KEYS[1], 180)
  end
  charge(KEYS[2], 172800)
end
return day()
