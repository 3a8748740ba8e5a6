--[[
redlockc - distributed locks on Redis for Lua 5.4, over libredlockc.

  local redlockc = require "redlockc"
  local client = assert(redlockc.client("redis://127.0.0.1:6379"))
  do
    local lock <close> = assert(client:lock("orders"))
    local ok, err, code = lock:acquire{ wait_ms = 5000 }
    if not ok then return nil, err end
    -- critical section (the watchdog keeps the lock alive)
  end -- <close> released it and freed the handle

Conventions (bindings/lua/README.md has the whole story):
  * An expected failure returns nil, err, code: code is the C status (an
    integer, see _M.errors), err is the C library's detail (rlc_errmsg()),
    except for a busy lock, whose err is always "busy".
  * Only programming errors raise: an argument of the wrong type, a
    fraction where milliseconds go, an unknown acquire option.
  * Counts, tokens and milliseconds are Lua integers.
  * Every method except validity() and fencing_token() is one blocking round
    trip to Redis (acquire: until it has the lock or its wait ran out).

This file is a thin layer over the SWIG-generated redlockc_core, whose
functions all return status, detail, value (see the SWIGLUA part of
bindings/swig/redlockc.i).
]]

-- SWIG's Lua runtime writes two globals, swig_type and swig_equals, when a
-- SWIG module loads. Put back what was there: this module sets no global.
local core
do
  local saved_type, saved_equals = rawget(_G, "swig_type"), rawget(_G, "swig_equals")
  core = require "redlockc_core"
  rawset(_G, "swig_type", saved_type)
  rawset(_G, "swig_equals", saved_equals)
end

local type, error, pairs, ipairs, tostring = type, error, pairs, ipairs, tostring
local setmetatable, getmetatable = setmetatable, getmetatable
local math_type, math_tointeger = math.type, math.tointeger
local concat, sort, format, find = table.concat, table.sort, string.format, string.find

local _M = { _VERSION = "1.0.0" }

-- ---- status codes ----------------------------------------------------------

-- The C names without their "RLC_" prefix: errors.E_LOST == -6,
-- errors.NOT_ACQUIRED == 1. resty.redlockc has the same table.
local NAMES = {
  "NOT_ACQUIRED", "E_INVAL", "E_NOMEM", "E_CONNECT", "E_TIMEOUT", "E_NOT_OWNER",
  "E_LOST", "E_NO_QUORUM", "E_SERVER", "E_PROTOCOL", "E_CLOSED", "E_AUTH",
}
local errors, name_of = {}, {}
for _, name in ipairs(NAMES) do
  local code = core["RLC_" .. name]
  errors[name], name_of[code] = code, name
end
_M.errors = errors

local OK, NOT_ACQUIRED, E_INVAL, E_CLOSED = core.RLC_OK, errors.NOT_ACQUIRED, errors.E_INVAL, errors.E_CLOSED
local E_NOT_OWNER, E_LOST = errors.E_NOT_OWNER, errors.E_LOST

-- errname(-6) -> "E_LOST"; nil for a number that is no status (or 0).
function _M.errname(code)
  return name_of[code]
end

-- The C library's version string, e.g. "1.0.0".
function _M.version()
  return core.rlc_version()
end

-- nil, err, code for a status other than RLC_OK.
local function failed(rc, detail)
  if rc == NOT_ACQUIRED then
    return nil, "busy", rc
  end
  return nil, detail or core.rlc_strerror(rc), rc
end

-- ---- argument checks (programming errors raise, at the caller's level) -----

-- level: where the error points, 3 (the default) being the caller of the
-- function that called integer_arg.
local function integer_arg(v, what, level)
  local i = type(v) == "number" and math_tointeger(v)
  if not i then
    error(format("redlockc: %s must be an integer, got %s", what,
                 type(v) == "number" and tostring(v) or type(v)), level or 3)
  end
  return i
end

local function string_arg(v, what)
  if type(v) ~= "string" then
    error(format("redlockc: %s must be a string, got %s", what, type(v)), 3)
  end
  return v
end

-- C strings end at the first NUL: "a\0b" would silently become "a".
local function has_nul(s)
  return find(s, "\0", 1, true) ~= nil
end

-- ---- lock ------------------------------------------------------------------

local Lock = { __name = "redlockc.lock" }
Lock.__index = Lock

-- Lock fields: _h the rlc_lock pointer (nil once freed), _client keeps the
-- client alive while the lock lives, _name for tostring, _levels the holds
-- taken through this handle and not yet released (what close() gives back).

local function lock_self(self)
  if getmetatable(self) ~= Lock then
    error("redlockc: call lock methods as lock:method()", 3)
  end
  return self._h
end

local function free_lock(self)
  local h = self._h
  if h then
    self._h = nil
    self._levels = 0
    core.rlc_lock_free(h)
  end
end

-- Collected without close(): the handle is freed, the hold (if any) is not
-- released. It stops being renewed and expires with its lease.
Lock.__gc = free_lock

-- lock:acquire{ wait_ms = -1, lease_ms = -1 } -> true | nil, err, code
--   wait_ms   0 try once; > 0 wait at most that long; < 0 (default) forever.
--   lease_ms  <= 0 (default) the watchdog renews it until release;
--             > 0 a fixed lease of that many ms, no watchdog.
-- Reentrant: the owner that holds it gets one more level. Busy until the
-- wait ran out: nil, "busy", errors.NOT_ACQUIRED.
function Lock:acquire(opts)
  local h = lock_self(self)
  local wait_ms, lease_ms = -1, -1
  if opts ~= nil then
    if type(opts) ~= "table" then
      error("redlockc: acquire takes a table {wait_ms=, lease_ms=}, got " .. type(opts), 2)
    end
    for k, v in pairs(opts) do
      if k == "wait_ms" then
        wait_ms = integer_arg(v, "wait_ms")
      elseif k == "lease_ms" then
        lease_ms = integer_arg(v, "lease_ms")
      else
        error("redlockc: unknown acquire option " .. tostring(k), 2)
      end
    end
  end
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail = core.rlc_lock_acquire(h, wait_ms, lease_ms)
  if rc ~= OK then return failed(rc, detail) end
  self._levels = self._levels + 1
  return true
end

-- lock:release() -> true | nil, err, code
-- One level; at zero the key is deleted and a waiter is woken.
-- E_NOT_OWNER: not held by this owner; E_LOST: it was, and expired or was
-- taken (for a watchdog hold: the watchdog could not renew it).
function Lock:release()
  local h = lock_self(self)
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail = core.rlc_lock_release(h)
  if rc == E_NOT_OWNER or rc == E_LOST or rc == E_CLOSED then
    self._levels = 0 -- nothing of ours left to give back
  elseif self._levels > 0 then
    -- RLC_OK, or an I/O failure, after which the library has dropped the
    -- level too (it then expires with its lease).
    self._levels = self._levels - 1
  end
  if rc ~= OK then return failed(rc, detail) end
  return true
end

-- lock:extend(ms) -> true | nil, err, code
-- ms > 0: a fixed lease of ms from now (the watchdog stops);
-- ms <= 0: the watchdog takes the hold over.
function Lock:extend(ms)
  local h = lock_self(self)
  ms = integer_arg(ms, "extend's lease (ms)")
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail = core.rlc_lock_extend(h, ms)
  if rc ~= OK then return failed(rc, detail) end
  return true
end

-- lock:force_release() -> true | nil, err, code
-- Deletes the lock whoever holds it, and wakes waiters. true also when it
-- was not held.
function Lock:force_release()
  local h = lock_self(self)
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail = core.rlc_lock_force_release(h)
  if rc ~= OK then return failed(rc, detail) end
  self._levels = 0
  return true
end

-- A query: fn(h) -> status, detail, value. Returns value | nil, err, code.
local function query(self, fn)
  local h = lock_self(self)
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail, value = fn(h)
  if rc ~= OK then return failed(rc, detail) end
  return value
end

-- lock:locked() -> boolean: held by anyone (on a quorum of nodes).
function Lock:locked() return query(self, core.rlc_lock_is_locked) end
-- lock:owned() -> boolean: held by this lock's owner, and not lost.
function Lock:owned() return query(self, core.rlc_lock_is_held) end
-- lock:hold_count() -> integer: the owner's reentrancy count (0: not held).
function Lock:hold_count() return query(self, core.rlc_lock_hold_count) end
-- lock:ttl() -> integer ms, as Redis's PTTL: -2 no such lock, -1 no expiry.
function Lock:ttl() return query(self, core.rlc_lock_ttl_ms) end
-- lock:validity() -> integer ms this handle's hold is certainly still valid
-- (0: not held, or lost). No network I/O.
function Lock:validity() return query(self, core.rlc_lock_validity_ms) end
-- lock:fencing_token() -> integer, the token of the current hold; E_NOT_OWNER
-- when this handle does not hold it, E_LOST when it lost it. No network I/O.
function Lock:fencing_token() return query(self, core.rlc_lock_fencing_token) end

-- lock:close(): gives back every level taken through this handle (a failed
-- release is not retried: the lease ends it), then frees the handle; later
-- calls return nil, "closed", E_CLOSED. `local l <close> = ...` does this at
-- the end of the block, also when the block raised.
function Lock:close()
  local h = lock_self(self)
  while h and self._levels > 0 do
    self._levels = self._levels - 1
    if core.rlc_lock_release(h) ~= OK then break end
  end
  free_lock(self)
end

function Lock:__close()
  self:close()
end

function Lock:__tostring()
  return format("redlockc.lock(%q)%s", self._name, self._h and "" or " closed")
end

-- ---- client ----------------------------------------------------------------

local Client = { __name = "redlockc.client" }
Client.__index = Client

local function client_self(self)
  if getmetatable(self) ~= Client then
    error("redlockc: call client methods as client:method()", 3)
  end
  return self._h
end

local function free_client(self)
  local h = self._h
  if h then
    self._h = nil
    core.rlc_client_free(h)
  end
end

-- Runs once no lock of this client is reachable either (locks refer to
-- their client), or when the Lua state closes. Held locks expire.
Client.__gc = free_client

-- client:lock(name [, owner]) -> lock | nil, err, code
--   owner nil or 0: the calling OS thread (in Lua 5.4 usually one thread per
--   process: all its coroutines are one owner); 1 .. 2^62-1: an explicit
--   owner id (locks of different ids exclude each other, even in one
--   process). No network I/O.
function Client:lock(name, owner)
  local h = client_self(self)
  string_arg(name, "lock name")
  owner = owner == nil and 0 or integer_arg(owner, "owner")
  if has_nul(name) then return nil, "lock name contains a NUL byte", E_INVAL end
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail, lh = core.rlc_lock_new(h, name, owner)
  if rc ~= OK then return failed(rc, detail) end
  return setmetatable({ _h = lh, _client = self, _name = name, _levels = 0 }, Lock)
end

-- client:uuid() -> the client's random UUID, the first half of the hash
-- field "<uuid>:<owner>" its holds write.
function Client:uuid()
  local h = client_self(self)
  if not h then return nil, "closed", E_CLOSED end
  return core.rlc_client_uuid(h)
end

-- client:metrics() -> a table of the client's counters (no network I/O):
-- acquires, busy, waits, renewals, lost, reconnects, script_reloads,
-- wait_ms_sum, and wait_buckets = { {le = ms or math.huge, count = n}, ... }
-- (cumulative). nil, "closed", E_CLOSED after close().
function Client:metrics()
  local h = client_self(self)
  if not h then return nil, "closed", E_CLOSED end
  local out, buckets, total = { wait_buckets = {} }, 0, 0
  for i = 0, 63 do
    local name = core.rlc_metric_name(i)
    if name == nil then break end
    local rc, detail, value = core.rlclua_metric(h, i)
    if rc ~= OK then return failed(rc, detail) end
    if name == "wait_bucket" then
      local _, _, le = core.rlclua_bucket_ms(buckets)
      buckets = buckets + 1
      total = total + value
      out.wait_buckets[buckets] = { le = le == math.maxinteger and math.huge or le, count = total }
    else
      out[name] = value
    end
  end
  return out
end

-- client:close(): stops the watchdog and closes the connections now. Holds
-- are not released (they expire); this client's locks then return E_CLOSED.
function Client:close()
  client_self(self)
  free_client(self)
end

function Client:__close()
  self:close()
end

function Client:__tostring()
  return "redlockc.client" .. (self._h and "" or " closed")
end

-- Options whose value is a whole number (ms, or a count): a fraction there
-- is a programming error, as in acquire{ wait_ms = }.
local INTEGER_OPTIONS = {
  watchdog_timeout_ms = true, io_timeout_ms = true, node_timeout_ms = true,
  connect_timeout_ms = true, retry_jitter_ms = true, pool_size = true,
}

-- A float in plain decimals ("0.00001", not "1e-05": the C option parser
-- takes digits and a '.', never an exponent), to 12 places as the Python
-- binding writes it, without trailing zeros.
local function decimal(v)
  local s = format("%.12f", v)
  if find(s, ".", 1, true) then
    s = s:gsub("0+$", ""):gsub("%.$", "")
  end
  return s
end

-- An options table as the C library's "name=value;..." (sorted, so the same
-- table always gives the same string). nil, err for a value the syntax
-- cannot carry.
local function options_string(opts)
  if opts == nil or type(opts) == "string" then return opts end
  if type(opts) ~= "table" then
    error("redlockc: client options must be a table, got " .. type(opts), 3)
  end
  local parts = {}
  for k, v in pairs(opts) do
    if type(k) ~= "string" then
      error("redlockc: option names must be strings, got " .. type(k), 3)
    end
    local s
    if INTEGER_OPTIONS[k] then
      s = tostring(integer_arg(v, "option " .. k, 4))
    elseif math_type(v) == "integer" then
      s = tostring(v)
    elseif math_type(v) == "float" then
      s = decimal(v)
    elseif type(v) == "string" then
      s = v
    else
      error(format("redlockc: option %s must be a number or a string, got %s", k, type(v)), 3)
    end
    if find(k, "[=;]") or find(s, ";", 1, true) or has_nul(k) or has_nul(s) then
      return nil, format("option %q: '=', ';' and NUL cannot be written in an option", k)
    end
    parts[#parts + 1] = k .. "=" .. s
  end
  sort(parts)
  return concat(parts, ";")
end

-- redlockc.client(nodes [, opts]) -> client | nil, err, code
--   nodes  "redis://[[user]:password@]host[:port][/db]" or
--          "unix://[[user]:password@]/path.sock[?db=N]", comma-separated, or
--          a list of such strings. N >= 2 nodes: Redlock.
--   opts   { watchdog_timeout_ms =, io_timeout_ms =, node_timeout_ms =,
--          connect_timeout_ms =, retry_jitter_ms =, drift_factor =,
--          pool_size =, key_prefix = } (redlockc.h), or the C string form.
-- No network I/O: connections are made on first use.
function _M.client(nodes, opts)
  if type(nodes) == "table" then
    for i = 1, #nodes do string_arg(nodes[i], "node " .. i) end
    nodes = concat(nodes, ",")
  elseif type(nodes) ~= "string" then
    error("redlockc: nodes must be a string or a list of strings, got " .. type(nodes), 2)
  end
  local options, oerr = options_string(opts)
  if oerr then return nil, oerr, E_INVAL end
  if has_nul(nodes) or (options and has_nul(options)) then
    return nil, "nodes or options contain a NUL byte", E_INVAL
  end
  local rc, detail, h = core.rlc_client_new(nodes, options)
  if rc ~= OK then return failed(rc, detail) end
  return setmetatable({ _h = h }, Client)
end

return _M
