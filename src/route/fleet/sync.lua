-- One round of a replica with the fleet's shared load: writes this replica's figures and reads
-- the others', in one round trip, on the server's clock (so replicas whose clocks differ agree on
-- what has expired).
--
-- KEYS[1]: the fleet's hash, replica id -> "<expires at, ms on the server's clock> <payload>"
-- ARGV[1]: this replica's id
-- ARGV[2]: its payload (see payload.rs), stored led by a line "written\t<ms on the server's
--          clock>" (a replica of an earlier version skips a line of a kind it does not know)
-- ARGV[3]: how long it stays, in ms (two publish intervals)
--
-- Returns the others' ids, ages (ms since they wrote, on the server's clock; 0 for an entry
-- with no written line) and payloads, in threes. An entry past its time is deleted here: the
-- replica that wrote it stopped publishing (killed, or cut off from the store).
if redis.replicate_commands then
  redis.replicate_commands()
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], (now + ttl) .. ' written\t' .. now .. '\n' .. ARGV[2])
-- The hash outlives its last writer by a little, then goes (a fleet taken down leaves nothing).
redis.call('PEXPIRE', KEYS[1], ttl * 4)
local all = redis.call('HGETALL', KEYS[1])
local others = {}
for i = 1, #all, 2 do
  local id, entry = all[i], all[i + 1]
  if id ~= ARGV[1] then
    local space = string.find(entry, ' ', 1, true)
    local expires = space and tonumber(string.sub(entry, 1, space - 1))
    if not expires or expires < now then
      redis.call('HDEL', KEYS[1], id)
    else
      local payload = string.sub(entry, space + 1)
      local written = tonumber(string.match(payload, '^written\t(%d+)\n'))
      others[#others + 1] = id
      others[#others + 1] = tostring(written and math.max(now - written, 0) or 0)
      others[#others + 1] = payload
    end
  end
end
return others
