-- The shared checker: every critical section of every side, peer or this
-- library, runs this on the first server on entry (ARGV[1] = 1) and exit
-- (ARGV[1] = -1). Two holders of one name at once are an overlap; it is
-- written to the list KEYS[3] with who entered beside whom.
-- KEYS: chk:<name> (holders now), chk:<name>:who (the last to enter),
--       chk:bad (overlaps found), chk:sections (hash: side -> sections)
-- ARGV: 1 | -1, side, name
local d = tonumber(ARGV[1])
local n = redis.call('INCRBY', KEYS[1], d)
if d > 0 then
  redis.call('HINCRBY', KEYS[4], ARGV[2], 1)
  if n > 1 then
    local other = redis.call('GET', KEYS[2]) or '?'
    redis.call('RPUSH', KEYS[3], ARGV[2] .. ' entered ' .. ARGV[3] .. ' held by ' .. other)
  end
  redis.call('SET', KEYS[2], ARGV[2])
elseif n < 0 then
  redis.call('RPUSH', KEYS[3], ARGV[2] .. ' left ' .. ARGV[3] .. ' it did not hold')
end
return n
