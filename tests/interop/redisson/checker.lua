-- The shared checker: both sides run it on entering (+n) and leaving (-n) a
-- critical section. KEYS[1] = the name's counts (hash: w holders/writers,
-- r readers, p permits out), KEYS[2] = the name's log (list).
-- ARGV: field, delta, permit limit, who. Returns 1 if this entry breaks the
-- kind's rule (two holders, a writer beside readers, more permits than set).
redis.call('hincrby', KEYS[1], ARGV[1], ARGV[2])
local function count(f) return tonumber(redis.call('hget', KEYS[1], f) or '0') end
local w, r, p = count('w'), count('r'), count('p')
if r > count('rmax') then redis.call('hset', KEYS[1], 'rmax', r) end
if p > count('pmax') then redis.call('hset', KEYS[1], 'pmax', p) end
local bad = w > 1 or (w == 1 and r > 0) or p > tonumber(ARGV[3])
if bad then redis.call('hincrby', KEYS[1], 'bad', 1) end
redis.call('rpush', KEYS[2], ARGV[4] .. ' ' .. ARGV[1] .. ARGV[2] .. ' w=' .. w .. ' r=' .. r .. ' p=' .. p)
if bad then return 1 end
return 0
