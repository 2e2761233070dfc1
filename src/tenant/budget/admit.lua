-- tokenmeter: admit one request against a tenant's budget, atomically (src/tenant/budget/redis.rs).
-- KEYS: tokens of the previous and current minute, requests of the previous and current minute,
--       tokens of the UTC day, the set of streams in flight (member "<request id>:<reserved>",
--       score = lease end), the request's marker (see below).
-- ARGV: ms into the minute, tokens_per_minute, tokens_per_day, requests_per_minute,
--       concurrent_streams (-1: no limit), tokens to reserve, the member, now (ms), lease (ms).
-- Returns {over, tokens previous, tokens current, requests previous, requests current, day tokens,
-- streams}: over is 0 (admitted and charged) or the limit passed (1 tokens_per_minute,
-- 2 tokens_per_day, 3 requests_per_minute, 4 concurrent_streams), in the order of
-- Counted::over in mod.rs, or 5: the request was settled or withdrawn before this admission
-- arrived, which does nothing. The counts are those before this request.
--
-- Exactly once, in any order (docs/tenants.md, "Exactly once"): each request has a marker,
-- written by whichever of its scripts runs first and kept for the lease. "a" = admitted and
-- charged, "x<limit>" = refused, "s" = settled or withdrawn. A second copy of this admission
-- answers what the first did and charges nothing; an admission that arrives after the
-- request's settlement or withdrawal (it waited in a paused Redis's queue) does nothing.
local elapsed = tonumber(ARGV[1])
local tpm, tpd, rpm, conc = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local reserve = tonumber(ARGV[6])
local now, lease = tonumber(ARGV[8]), tonumber(ARGV[9])
local tp = tonumber(redis.call('GET', KEYS[1]) or 0)
local tc = tonumber(redis.call('GET', KEYS[2]) or 0)
local rp = tonumber(redis.call('GET', KEYS[3]) or 0)
local rc = tonumber(redis.call('GET', KEYS[4]) or 0)
local day = tonumber(redis.call('GET', KEYS[5]) or 0)
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
local streams = redis.call('ZCARD', KEYS[6])
local marker = redis.call('GET', KEYS[7])
if marker == 'a' then
  return {0, tp, tc, rp, rc, day, streams}
elseif marker == 's' then
  return {5, tp, tc, rp, rc, day, streams}
elseif marker then
  return {tonumber(string.sub(marker, 2)) or 5, tp, tc, rp, rc, day, streams}
end
local function sliding(previous, current)
  return math.ceil(previous * (60000 - elapsed) / 60000) + current
end
local over = 0
if conc >= 0 and streams + 1 > conc then
  over = 4
elseif rpm >= 0 and sliding(rp, rc) + 1 > rpm then
  over = 3
elseif tpm >= 0 and sliding(tp, tc) + reserve > tpm then
  over = 1
elseif tpd >= 0 and day + reserve > tpd then
  over = 2
end
if over == 0 then
  redis.call('INCRBY', KEYS[2], reserve)
  redis.call('EXPIRE', KEYS[2], 180)
  redis.call('INCR', KEYS[4])
  redis.call('EXPIRE', KEYS[4], 180)
  redis.call('INCRBY', KEYS[5], reserve)
  redis.call('EXPIRE', KEYS[5], 172800)
  redis.call('ZADD', KEYS[6], now + lease, ARGV[7])
  redis.call('PEXPIRE', KEYS[6], lease)
  redis.call('SET', KEYS[7], 'a', 'PX', lease)
else
  redis.call('SET', KEYS[7], 'x' .. over, 'PX', lease)
end
return {over, tp, tc, rp, rc, day, streams}
