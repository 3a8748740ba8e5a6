-- node.lua - the simulated Redis nodes of sim_engine.c: the commands the
-- library's scripts call, with Redis' types, errors, key expiry on simulated
-- time and its conversions between Lua values and replies.
--
-- sim_engine.c keeps the network, the connections, the script cache and
-- pub/sub; it calls in here only to run a script on one node. Every script is
-- compiled once per process (its environment's `redis` acts on whichever node
-- runs it), so a schedule with fresh nodes costs a few empty tables. Scripts
-- run atomically (one call, nothing interleaves), and like Redis an error does
-- not roll back what a script wrote before it.
--
-- Globals used from C: reset(n), compile(source) -> runner or nil, err;
-- runner(node, now, keys, argv) -> the script's raw result; exists(node, key,
-- now); dump(node, key, now); peek(node, key, now) (the FIFO check's look);
-- keys_of(node, now) and move_key(from, to, key, now) (a cluster's slot
-- migration). sim_publish(channel), sim_spublish(channel) and sim_touch(node,
-- key) (a key was written, deleted or expired: CLIENT TRACKING's
-- invalidation) are provided by C.

local NODES = {}
local cur -- the node the running script acts on

local function fail(msg) error({ err = msg }, 0) end
local WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"

local Node = {}
Node.__index = Node

function reset(n)
  NODES = {}
  for i = 1, n do NODES[i] = setmetatable({ id = i, db = {}, now = 0 }, Node) end
end

-- Redis expires lazily on access as well as actively: to a client the two look
-- the same, a key past its time is not there.
function Node:entry(key)
  local e = self.db[key]
  if e and e.exp and e.exp <= self.now then
    self.db[key] = nil
    sim_touch(self.id, key)
    return nil
  end
  return e
end

-- Every write of a key goes through here (as Redis' signalModifiedKey).
local function touch(n, k) sim_touch(n.id, k) end

function Node:hash(key, create)
  local e = self:entry(key)
  if not e then
    if not create then return nil end
    e = { t = "hash", h = {}, n = 0 }
    self.db[key] = e
  elseif e.t ~= "hash" then
    fail(WRONGTYPE)
  end
  return e
end

function Node:zset(key, create)
  local e = self:entry(key)
  if not e then
    if not create then return nil end
    e = { t = "zset", z = {} }
    self.db[key] = e
  elseif e.t ~= "zset" then
    fail(WRONGTYPE)
  end
  return e
end

function Node:string(key)
  local e = self:entry(key)
  if e and e.t ~= "str" then fail(WRONGTYPE) end
  return e
end

local function int_of(s)
  if type(s) == "number" then return math.tointeger(s) end
  if type(s) == "string" and #s < 20 and s:match("^%-?%d+$") then
    return math.tointeger(tonumber(s))
  end
  return nil
end

-- Lua's own table order is seeded at random: sort, so a seed replays.
local function sorted_fields(h)
  local ks = {}
  for k in pairs(h) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

local C = {}
function C.exists(n, ...)
  local c = 0
  for _, k in ipairs({ ... }) do if n:entry(k) then c = c + 1 end end
  return c
end
function C.hexists(n, k, f)
  local h = n:hash(k)
  return (h and h.h[f]) and 1 or 0
end
function C.hget(n, k, f)
  local h = n:hash(k)
  local v = h and h.h[f]
  if v == nil then return false end
  return v
end
function C.hmget(n, k, ...)
  local h, out = n:hash(k), {}
  for i, f in ipairs({ ... }) do
    local v = h and h.h[f]
    if v == nil then v = false end
    out[i] = v
  end
  return out
end
function C.hset(n, k, ...)
  local a = { ... }
  if #a == 0 or #a % 2 ~= 0 then fail("ERR wrong number of arguments for 'hset' command") end
  local h, new = n:hash(k, true), 0
  for i = 1, #a, 2 do
    if h.h[a[i]] == nil then
      new = new + 1
      h.n = h.n + 1
    end
    h.h[a[i]] = a[i + 1]
  end
  touch(n, k)
  return new
end
function C.hdel(n, k, ...)
  local h = n:hash(k)
  if not h then return 0 end
  local c = 0
  for _, f in ipairs({ ... }) do
    if h.h[f] ~= nil then
      h.h[f] = nil
      h.n = h.n - 1
      c = c + 1
    end
  end
  if h.n == 0 then n.db[k] = nil end -- an empty hash is no key
  if c > 0 then touch(n, k) end
  return c
end
function C.hincrby(n, k, f, by)
  local h = n:hash(k, true)
  local cur_v = 0
  if h.h[f] ~= nil then
    cur_v = int_of(h.h[f])
    if not cur_v then fail("ERR hash value is not an integer") end
  else
    h.n = h.n + 1
  end
  local b = int_of(by)
  if not b then fail("ERR value is not an integer or out of range") end
  h.h[f] = tostring(cur_v + b)
  touch(n, k)
  return cur_v + b
end
function C.hlen(n, k)
  local h = n:hash(k)
  return h and h.n or 0
end
function C.hkeys(n, k)
  local h = n:hash(k)
  return h and sorted_fields(h.h) or {}
end
function C.hgetall(n, k)
  local h, out = n:hash(k), {}
  if h then
    for _, f in ipairs(sorted_fields(h.h)) do
      out[#out + 1] = f
      out[#out + 1] = h.h[f]
    end
  end
  return out
end
function C.del(n, ...)
  local c = 0
  for _, k in ipairs({ ... }) do
    if n:entry(k) then
      n.db[k] = nil
      touch(n, k)
      c = c + 1
    end
  end
  return c
end
function C.pexpire(n, k, ms)
  local e = n:entry(k)
  if not e then return 0 end
  ms = int_of(ms)
  if not ms then fail("ERR value is not an integer or out of range") end
  if ms <= 0 then n.db[k] = nil else e.exp = n.now + ms end
  touch(n, k)
  return 1
end
function C.pttl(n, k)
  local e = n:entry(k)
  if not e then return -2 end
  if not e.exp then return -1 end
  return e.exp - n.now
end
function C.incrby(n, k, by)
  local d = int_of(by)
  if not d then fail("ERR value is not an integer or out of range") end
  local e = n:string(k)
  local v = 0
  if e then
    v = int_of(e.v)
    if not v then fail("ERR value is not an integer or out of range") end
  end
  v = v + d
  if e then e.v = tostring(v) else n.db[k] = { t = "str", v = tostring(v) } end
  touch(n, k)
  return v
end
function C.incr(n, k) return C.incrby(n, k, 1) end
-- DECRBY: a semaphore's acquire takes its permits from the count.
function C.decrby(n, k, by)
  local d = int_of(by)
  if not d then fail("ERR value is not an integer or out of range") end
  return C.incrby(n, k, -d)
end
-- SETNX: a semaphore's count is set once (rlc_engine_set_permits).
function C.setnx(n, k, v)
  if n:entry(k) then return 0 end
  n.db[k] = { t = "str", v = v }
  touch(n, k)
  return 1
end
-- TIME: every node's clock is the simulated time from a fixed epoch (the
-- nodes' clocks agree; the engines' own clocks drift, sim_engine.c).
local EPOCH_S = 1700000000
function C.time(n)
  return { tostring(EPOCH_S + n.now // 1000), tostring((n.now % 1000) * 1000) }
end
function C.get(n, k)
  local e = n:string(k)
  return e and e.v or false
end
-- SET key value [NX | XX] [PX ms]: the classic format's acquire (NX PX) and
-- a peer's overwrite; a plain SET (the token floor) keeps no TTL.
function C.set(n, k, v, ...)
  local nx, xx, px = false, false, nil
  local opts = { ... }
  local i = 1
  while i <= #opts do
    local o = string.upper(tostring(opts[i]))
    if o == "NX" then nx = true
    elseif o == "XX" then xx = true
    elseif o == "PX" then
      px = int_of(opts[i + 1])
      if not px or px <= 0 then fail("ERR invalid expire time in 'set' command") end
      i = i + 1
    else fail("ERR syntax error") end
    i = i + 1
  end
  if nx and xx then fail("ERR syntax error") end
  local there = n:entry(k) ~= nil
  if (nx and there) or (xx and not there) then return false end
  n.db[k] = { t = "str", v = v, exp = px and n.now + px or nil }
  touch(n, k)
  return { ok = "OK" }
end
-- A script's argument as Redis reads it: a Lua number becomes its digits.
local function arg_string(a)
  if type(a) == "number" then
    return math.type(a) == "integer" and tostring(a) or string.format("%.17g", a)
  end
  return a
end

-- Sorted sets (the write lock's waiting writers): members by score, then
-- by member, as Redis orders them.
local function score_of(s)
  if s == "-inf" then return -math.huge end
  if s == "+inf" or s == "inf" then return math.huge end
  local v = tonumber(s)
  if not v then fail("ERR min or max is not a float") end
  return v
end
local function zsorted(z)
  local ms = {}
  for m in pairs(z) do ms[#ms + 1] = m end
  table.sort(ms, function(a, b)
    if z[a] ~= z[b] then return z[a] < z[b] end
    return a < b
  end)
  return ms
end
local function zdrop_if_empty(n, k, e)
  if next(e.z) == nil then n.db[k] = nil end
end
function C.zadd(n, k, ...)
  local a = { ... }
  local xx = false
  if a[1] and string.upper(tostring(a[1])) == "XX" then
    xx = true
    table.remove(a, 1)
  end
  if #a == 0 or #a % 2 ~= 0 then fail("ERR syntax error") end
  local e = n:zset(k, not xx)
  if not e then return 0 end
  local new = 0
  for i = 1, #a, 2 do
    local sc = tonumber(a[i])
    if not sc then fail("ERR value is not a valid float") end
    local m = arg_string(a[i + 1])
    if e.z[m] == nil then
      if not xx then
        new = new + 1
        e.z[m] = sc
      end
    else
      e.z[m] = sc
    end
  end
  zdrop_if_empty(n, k, e)
  touch(n, k)
  return new
end
function C.zrem(n, k, ...)
  local e = n:zset(k)
  if not e then return 0 end
  local c = 0
  for _, m in ipairs({ ... }) do
    if e.z[m] ~= nil then
      e.z[m] = nil
      c = c + 1
    end
  end
  zdrop_if_empty(n, k, e)
  if c > 0 then touch(n, k) end
  return c
end
function C.zremrangebyscore(n, k, lo, hi)
  local e = n:zset(k)
  if not e then return 0 end
  local a, b, c = score_of(arg_string(lo)), score_of(arg_string(hi)), 0
  for _, m in ipairs(zsorted(e.z)) do
    if e.z[m] >= a and e.z[m] <= b then
      e.z[m] = nil
      c = c + 1
    end
  end
  zdrop_if_empty(n, k, e)
  if c > 0 then touch(n, k) end
  return c
end
-- ZRANGEBYSCORE key min max [LIMIT offset count]: an expirable semaphore's
-- permits whose lease ran out.
function C.zrangebyscore(n, k, lo, hi, ...)
  local e = n:zset(k)
  local opts = { ... }
  local off, cnt = 0, -1
  if #opts > 0 then
    if #opts ~= 3 or string.upper(tostring(opts[1])) ~= "LIMIT" then fail("ERR syntax error") end
    off, cnt = int_of(opts[2]), int_of(opts[3])
    if not off or not cnt then fail("ERR value is not an integer or out of range") end
  end
  if not e then return {} end
  local a, b, out, seen = score_of(arg_string(lo)), score_of(arg_string(hi)), {}, 0
  for _, m in ipairs(zsorted(e.z)) do
    if e.z[m] >= a and e.z[m] <= b then
      seen = seen + 1
      if seen > off and (cnt < 0 or #out < cnt) then out[#out + 1] = m end
    end
  end
  return out
end
function C.zcard(n, k)
  local e = n:zset(k)
  if not e then return 0 end
  local c = 0
  for _ in pairs(e.z) do c = c + 1 end
  return c
end
function C.zscore(n, k, m)
  local e = n:zset(k)
  local v = e and e.z[m]
  if v == nil then return false end
  return string.format("%.17g", v)
end
function C.zrange(n, k, from, to, ...)
  local e = n:zset(k)
  if not e then return {} end
  local ms = zsorted(e.z)
  local i, j = int_of(from), int_of(to)
  if not i or not j then fail("ERR value is not an integer or out of range") end
  if i < 0 then i = #ms + i end
  if j < 0 then j = #ms + j end
  local scores = ({ ... })[1] and string.upper(tostring(({ ... })[1])) == "WITHSCORES"
  local out = {}
  for x = i + 1, math.min(j + 1, #ms) do
    out[#out + 1] = ms[x]
    if scores then out[#out + 1] = string.format("%.17g", e.z[ms[x]]) end
  end
  return out
end
-- Lists (the fair lock's queue).
function Node:list(key, create)
  local e = self:entry(key)
  if not e then
    if not create then return nil end
    e = { t = "list", l = {} }
    self.db[key] = e
  elseif e.t ~= "list" then
    fail(WRONGTYPE)
  end
  return e
end
local function ldrop_if_empty(n, k, e)
  if #e.l == 0 then n.db[k] = nil end
end
function C.rpush(n, k, ...)
  local e = n:list(k, true)
  for _, v in ipairs({ ... }) do e.l[#e.l + 1] = v end
  touch(n, k)
  return #e.l
end
function C.lpush(n, k, ...)
  local e = n:list(k, true)
  for _, v in ipairs({ ... }) do table.insert(e.l, 1, v) end
  touch(n, k)
  return #e.l
end
function C.lpop(n, k)
  local e = n:list(k)
  if not e then return false end
  local v = table.remove(e.l, 1)
  ldrop_if_empty(n, k, e)
  touch(n, k)
  return v
end
function C.lindex(n, k, i)
  local e = n:list(k)
  i = int_of(i)
  if not i then fail("ERR value is not an integer or out of range") end
  if not e then return false end
  if i < 0 then i = #e.l + i end
  local v = e.l[i + 1]
  if v == nil then return false end
  return v
end
function C.lrem(n, k, count, v)
  local e = n:list(k)
  count = int_of(count)
  if not count then fail("ERR value is not an integer or out of range") end
  if not e then return 0 end
  local kept, c = {}, 0
  for _, x in ipairs(e.l) do
    if x == v and (count == 0 or c < math.abs(count)) then c = c + 1 else kept[#kept + 1] = x end
  end
  e.l = kept
  ldrop_if_empty(n, k, e)
  if c > 0 then touch(n, k) end
  return c
end
function C.publish(_, ch, msg)
  return sim_publish(ch, msg)
end
-- A sharded cluster's release scripts (scripts.c's twins).
function C.spublish(_, ch, msg)
  return sim_spublish(ch, msg)
end


-- The `redis` of every script: acts on the node running the script.
local R = {}
function R.call(cmd, ...)
  local f = C[string.lower(cmd)]
  if not f then fail("ERR unknown command '" .. cmd .. "' called from script") end
  local a = table.pack(...)
  for i = 1, a.n do a[i] = arg_string(a[i]) end
  return f(cur, table.unpack(a, 1, a.n))
end
function R.pcall(cmd, ...)
  local ok, v = pcall(R.call, cmd, ...)
  if ok then return v end
  if type(v) == "table" then return v end
  return { err = tostring(v) }
end
function R.error_reply(m) return { err = m } end
function R.status_reply(m) return { ok = m } end

-- Compiles a script once; the runner runs it on one node at one time.
function compile(source)
  local env = {
    redis = R, tonumber = tonumber, tostring = tostring, type = type, string = string,
    math = math, table = table, pcall = pcall, error = error, next = next, pairs = pairs,
    ipairs = ipairs, unpack = table.unpack,
  }
  local chunk, err = load(source, "=script", "t", env)
  if not chunk then return nil, "ERR Error compiling script: " .. tostring(err) end
  return function(node, now, keys, argv)
    cur = NODES[node]
    cur.now = now
    env.KEYS, env.ARGV = keys, argv
    local ok, res = pcall(chunk)
    if ok then return res end
    if type(res) == "table" and res.err then return { err = res.err } end
    return { err = "ERR " .. tostring(res) }
  end
end

-- A command sent on its own (a query's HEXISTS, HGET or PTTL), on one node.
function command(node, now, cmd, ...)
  cur = NODES[node]
  cur.now = now
  return R.pcall(cmd, ...)
end

-- A restart without persistence of what the scripts never give a lease to:
-- the node's fencing counters are gone (the locks stay: the simulation's
-- restarts keep their data, as with AOF, so that exclusion can be checked).
function forget_counters(node)
  local n, ks = NODES[node], {}
  for k in pairs(n.db) do
    if k:find("^redisson_lock_token:") then ks[#ks + 1] = k end
  end
  table.sort(ks) -- in a fixed order, so a seed replays
  for _, k in ipairs(ks) do
    n.db[k] = nil
    touch(n, k)
  end
  return #ks
end

function exists(node, key, now)
  local n = NODES[node]
  n.now = now
  return n:entry(key) ~= nil
end

-- A cluster's live keys on one node, sorted (so a seed replays): the slot
-- migration picks those of its slot.
function keys_of(node, now)
  local n, ks = NODES[node], {}
  n.now = now
  for k in pairs(n.db) do ks[#ks + 1] = k end
  table.sort(ks)
  local live = {}
  for _, k in ipairs(ks) do if n:entry(k) then live[#live + 1] = k end end
  return live
end

-- MIGRATE of one key: a copy with its TTL on `to`, then gone from `from`,
-- in one step (as Redis' MIGRATE, which blocks the source meanwhile).
function move_key(from, to, key, now)
  local a, b = NODES[from], NODES[to]
  a.now, b.now = now, now
  local e = a:entry(key)
  if not e then return false end
  local c = { t = e.t, v = e.v, n = e.n, exp = e.exp }
  if e.h then
    c.h = {}
    for f, v in pairs(e.h) do c.h[f] = v end
  end
  if e.z then
    c.z = {}
    for m, v in pairs(e.z) do c.z[m] = v end
  end
  if e.l then
    c.l = {}
    for i, v in ipairs(e.l) do c.l[i] = v end
  end
  b.db[key] = c
  a.db[key] = nil
  touch(a, key)
  touch(b, key)
  return true
end

-- A list's items in order, or a hash's fields sorted, as the key is at
-- `now`, for the FIFO check: it only looks, so a key past its time is
-- left for the next command to expire (no write, no invalidation).
function peek(node, key, now)
  local e = NODES[node].db[key]
  if not e or (e.exp and e.exp <= now) then return {} end
  if e.t == "list" then return { table.unpack(e.l) } end
  if e.t == "hash" then return sorted_fields(e.h) end
  return {}
end

-- A semaphore's state for the residue check (sim_engine.c): its count (-1
-- when there is no key), the expirable kind's zset size and its latest
-- lease end (ms of simulated time, 0 when empty), the keys under the try
-- records' prefix with no TTL (and the first of them, for the trace).
function sem_state(node, key, zkey, prefix, now)
  local n = NODES[node]
  n.now = now
  local e = n:entry(key)
  local count = -1
  if e and e.t == "str" then count = int_of(e.v) or -2 end
  local z = zkey ~= "" and n:entry(zkey) or nil
  local zc, zmax = 0, 0
  if z and z.t == "zset" then
    for _, sc in pairs(z.z) do
      zc = zc + 1
      local t = math.tointeger(sc - EPOCH_S * 1000) or 0
      if t > zmax then zmax = t end
    end
  end
  local bare, first = 0, ""
  for _, k in ipairs(keys_of(node, now)) do
    if k:sub(1, #prefix) == prefix and not n.db[k].exp then
      bare = bare + 1
      if first == "" then first = k .. "=" .. tostring(n.db[k].v) end
    end
  end
  return count, zc, zmax, bare, first
end

-- A key's content as one line, for traces.
function dump(node, key, now)
  local n = NODES[node]
  n.now = now
  local e = n:entry(key)
  if not e then return "(none)" end
  if e.t == "str" then return e.v end
  local out = {}
  if e.t == "list" then
    out[#out + 1] = table.concat(e.l, ",")
    out[#out + 1] = "pttl=" .. tostring(e.exp and e.exp - n.now or -1)
    return table.concat(out, " ")
  end
  if e.t == "zset" then
    for _, m in ipairs(zsorted(e.z)) do out[#out + 1] = m .. "@" .. tostring(e.z[m]) end
    out[#out + 1] = "pttl=" .. tostring(e.exp and e.exp - n.now or -1)
    return table.concat(out, " ")
  end
  for _, f in ipairs(sorted_fields(e.h)) do out[#out + 1] = f .. "=" .. e.h[f] end
  out[#out + 1] = "pttl=" .. tostring(e.exp and e.exp - n.now or -1)
  return table.concat(out, " ")
end
