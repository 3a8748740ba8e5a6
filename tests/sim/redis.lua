-- redis.lua - a simulated Redis node for the simulation: the commands the
-- library's scripts use, with Redis' types, errors and key expiry on
-- simulated time, and Redis' conversions between Lua and replies.
-- Scripts run atomically (one call, nothing interleaves), and like Redis,
-- an error does not roll back what a script wrote before it.

local M = {}

M.NIL = setmetatable({}, { __tostring = function() return "(nil)" end })

local function fail(msg) error({ err = msg }, 0) end
local WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"

local Node = {}
Node.__index = Node

function M.new(id)
  return setmetatable({ id = id, db = {}, now = 0, published = 0, cache = {}, envs = {} }, Node)
end

function Node:entry(key)
  local e = self.db[key]
  if e and e.exp and e.exp <= self.now then
    self.db[key] = nil
    return nil
  end
  return e
end

function Node:hash(key, create)
  local e = self:entry(key)
  if not e then
    if not create then return nil end
    e = { t = "hash", h = {} }
    self.db[key] = e
  elseif e.t ~= "hash" then
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
  if type(s) == "string" and s:match("^%-?%d+$") and #s < 20 then
    return math.tointeger(tonumber(s))
  end
  return nil
end

local function sorted_fields(h)
  local ks = {}
  for k in pairs(h) do ks[#ks + 1] = k end
  table.sort(ks) -- Lua's own order is seeded at random: sort for replay
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
function C.hset(n, k, ...)
  local a = { ... }
  if #a == 0 or #a % 2 ~= 0 then fail("ERR wrong number of arguments for 'hset' command") end
  local h, new = n:hash(k, true), 0
  for i = 1, #a, 2 do
    if h.h[a[i]] == nil then new = new + 1 end
    h.h[a[i]] = a[i + 1]
  end
  return new
end
function C.hdel(n, k, ...)
  local h = n:hash(k)
  if not h then return 0 end
  local c = 0
  for _, f in ipairs({ ... }) do
    if h.h[f] ~= nil then
      h.h[f] = nil
      c = c + 1
    end
  end
  if next(h.h) == nil then n.db[k] = nil end -- an empty hash is no key
  return c
end
function C.hincrby(n, k, f, by)
  local h = n:hash(k, true)
  local cur = 0
  if h.h[f] ~= nil then
    cur = int_of(h.h[f])
    if not cur then fail("ERR hash value is not an integer") end
  end
  local b = int_of(by)
  if not b then fail("ERR value is not an integer or out of range") end
  h.h[f] = tostring(cur + b)
  return cur + b
end
function C.hlen(n, k)
  local h = n:hash(k)
  return h and #sorted_fields(h.h) or 0
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
  return 1
end
function C.pttl(n, k)
  local e = n:entry(k)
  if not e then return -2 end
  if not e.exp then return -1 end
  return e.exp - n.now
end
function C.incr(n, k)
  local e = n:string(k)
  local v = 0
  if e then
    v = int_of(e.v)
    if not v then fail("ERR value is not an integer or out of range") end
  end
  v = v + 1
  if e then e.v = tostring(v) else n.db[k] = { t = "str", v = tostring(v) } end
  return v
end
function C.get(n, k)
  local e = n:string(k)
  return e and e.v or false
end
function C.set(n, k, v)
  n.db[k] = { t = "str", v = v }
  return { ok = "OK" }
end
function C.publish(n, ch, msg)
  n.published = n.published + 1
  if n.on_publish then n.on_publish(ch, msg) end
  return 0
end

local function arg_string(a)
  if type(a) == "number" then
    return math.type(a) == "integer" and tostring(a) or string.format("%.17g", a)
  end
  return a
end

local function make_redis(node)
  local r = {}
  function r.call(cmd, ...)
    local f = C[string.lower(cmd)]
    if not f then fail("ERR unknown command '" .. cmd .. "'") end
    local a = table.pack(...)
    for i = 1, a.n do a[i] = arg_string(a[i]) end
    return f(node, table.unpack(a, 1, a.n))
  end
  function r.pcall(cmd, ...)
    local ok, v = pcall(r.call, cmd, ...)
    if ok then return v end
    if type(v) == "table" then return v end
    return { err = tostring(v) }
  end
  function r.error_reply(m) return { err = m } end
  function r.status_reply(m) return { ok = m } end
  return r
end

-- Redis' conversion of a script's result to a reply.
local function reply_of(v)
  local t = type(v)
  if t == "number" then
    return math.tointeger(v) or math.tointeger(v >= 0 and math.floor(v) or math.ceil(v))
  elseif t == "string" then
    return v
  elseif t == "boolean" then
    return v and 1 or M.NIL
  elseif t == "table" then
    if v.err then return { err = v.err } end
    if v.ok then return v.ok end
    local out, i = { n = 0 }, 1
    while v[i] ~= nil do
      out[i] = reply_of(v[i])
      out.n = i
      i = i + 1
    end
    return out
  end
  return M.NIL
end

-- Runs a script: name (for the script cache), source, keys, argv.
function Node:eval(name, source, keys, argv)
  local env = self.envs[name]
  if not env then
    env = {
      redis = make_redis(self), tonumber = tonumber, tostring = tostring, type = type,
      string = string, math = math, table = table, pcall = pcall, error = error,
      next = next, pairs = pairs, ipairs = ipairs,
    }
    env.chunk = assert(load(source, "=" .. name, "t", env))
    self.envs[name] = env
  end
  env.KEYS, env.ARGV = keys, argv
  local ok, res = pcall(env.chunk)
  if not ok then
    if type(res) == "table" and res.err then return { err = res.err } end
    return { err = "ERR " .. tostring(res) }
  end
  return reply_of(res)
end

-- A key's content as text, for logs.
function M.dump(node, key)
  local e, out = node:entry(key), {}
  if not e then return { "(none)" } end
  if e.t == "str" then return { e.v } end
  for _, f in ipairs(sorted_fields(e.h)) do out[#out + 1] = f .. "=" .. e.h[f] end
  out[#out + 1] = "pttl=" .. tostring(e.exp and e.exp - node.now or -1)
  return out
end

function Node:script_flush() self.cache = {} end
function Node:script_load(name) self.cache[name] = true end
function Node:has_script(name) return self.cache[name] == true end

return M
