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

local _M = { _VERSION = "1.1.0" }

-- ---- status codes ----------------------------------------------------------

-- The C names without their "RLC_" prefix: errors.E_LOST == -6,
-- errors.NOT_ACQUIRED == 1. resty.redlockc has the same table.
local NAMES = {
  "NOT_ACQUIRED", "E_INVAL", "E_NOMEM", "E_CONNECT", "E_TIMEOUT", "E_NOT_OWNER",
  "E_LOST", "E_NO_QUORUM", "E_SERVER", "E_PROTOCOL", "E_CLOSED", "E_AUTH", "E_CANCELED",
}
local errors, name_of = {}, {}
for _, name in ipairs(NAMES) do
  local code = core["RLC_" .. name]
  errors[name], name_of[code] = code, name
end
_M.errors = errors

local OK, NOT_ACQUIRED, E_INVAL, E_CLOSED = core.RLC_OK, errors.NOT_ACQUIRED, errors.E_INVAL, errors.E_CLOSED
local E_NOT_OWNER, E_LOST, E_NOMEM = errors.E_NOT_OWNER, errors.E_LOST, errors.E_NOMEM

-- errname(-6) -> "E_LOST"; nil for a number that is no status (or 0).
function _M.errname(code)
  return name_of[code]
end

-- The C library's version string, e.g. "1.1.0".
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
-- lock:owned() -> boolean: held by this lock's owner now: false once its
-- validity has run out (a fixed lease that ended, a watchdog hold not renewed
-- in time), whether or not another owner took it since.
function Lock:owned() return query(self, core.rlc_lock_is_held) end
-- lock:hold_count() -> integer: the owner's reentrancy count (0: not held, or
-- its validity has run out).
function Lock:hold_count() return query(self, core.rlc_lock_hold_count) end
-- lock:ttl() -> integer ms, as Redis's PTTL: -2 no such lock, -1 no expiry.
function Lock:ttl() return query(self, core.rlc_lock_ttl_ms) end
-- lock:validity() -> integer ms this handle's hold is certainly still held,
-- at this call (0: not held, lost, or run out). A healthy watchdog hold stays
-- above about 2/3 of watchdog_timeout_ms. No network I/O.
function Lock:validity() return query(self, core.rlc_lock_validity_ms) end
-- lock:fencing_token() -> integer, the token of the current hold, with the
-- client option fencing = 1 (E_INVAL without it: no hold takes a token);
-- E_NOT_OWNER when this handle does not hold it, E_LOST when it lost it or
-- its validity has run out. No network I/O.
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
    -- Only now: once rlc_client_free returned, nothing pushes to the queue.
    core.rlclua_log_free(self._logq)
    self._logq = nil
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

-- client:fenced_set(key, value, token) -> true (written) | false (refused:
-- a larger token is stored, nothing was written) | nil, err, code
--   Writes value (any string) at key only if token (lock:fencing_token(),
--   >= 1) is at least the fence stored with it, in "redlockc_fence:{key}".
--   The key is used as given (no key_prefix). The client must have one node:
--   the Redis of the resource. A paused holder whose lock expired has a
--   smaller token than the holder after it, so its late write is refused.
function Client:fenced_set(key, value, token)
  local h = client_self(self)
  string_arg(key, "key")
  string_arg(value, "value")
  token = integer_arg(token, "token")
  if token < 1 then error("redlockc: token must be >= 1 (a lock's fencing_token)", 2) end
  if has_nul(key) then return nil, "key contains a NUL byte", E_INVAL end
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail, applied = core.rlc_fenced_set(h, key, value, token)
  if rc ~= OK then return failed(rc, detail) end
  return applied
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

local LOG_LEVELS = { "error", "warn", "info", "debug" }

-- client:logs() -> { {level = "warn" | "info" | ..., message = text}, ... },
-- dropped: the client's log lines since the last call, oldest first (lost
-- holds at "warn"; reconnects and script reloads at "info"), and how many
-- were dropped because 256 were already waiting. The library hands lines
-- over on its own threads too, where no Lua state may be entered, so they
-- wait in a queue until this call takes them. After close(): {}, 0.
function Client:logs()
  client_self(self)
  local out = {}
  if not self._logq then return out, 0 end
  local lines, dropped = core.rlclua_log_take(self._logq)
  for i, line in ipairs(lines) do
    out[i] = { level = LOG_LEVELS[line[1]] or tostring(line[1]), message = line[2] }
  end
  return out, dropped
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
--          pool_size =, key_prefix =, fencing = 0 | 1, ... } (redlockc.h),
--          or the C string form.
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
  local self = setmetatable({ _h = h }, Client)
  -- The queue client:logs() drains, fed from the start (info and above).
  local q = core.rlclua_log_new()
  if q == nil then
    free_client(self)
    return nil, "out of memory", E_NOMEM
  end
  self._logq = q
  rc, detail = core.rlclua_log_attach(h, 3, q)
  if rc ~= OK then
    free_client(self)
    return failed(rc, detail)
  end
  return self
end

-- ---- the lock family (REDLOCKC_1.1; docs/FAMILY.md) ------------------------
--
--   local rw <close> = assert(client:rwlock("cfg"))
--   assert(rw:read():acquire{ wait_ms = 1000 }) ... rw:read():release()
--   local fair <close> = assert(client:fair_lock("jobs"))
--   local sem <close> = assert(client:semaphore("pool", 3))   -- sets 3 if unset
--   local ps <close> = assert(client:permit_semaphore("slots", 2))
--   local id = assert(ps:acquire{ lease_ms = 10000 }) ... ps:release(id)
--   local m <close> = assert(client:multi_lock{ "a", "b" })
--
-- Same conventions as lock: nil, err, code for expected failures ("busy" and
-- NOT_ACQUIRED when the wait ran out), errors only for programming errors.
-- Levels are counted per handle: close() gives back what this handle took
-- (a permit id is the caller's to release), then frees it.

local FamilyOps = {}  -- per metatable: free, acquire, release (C functions)

local function fam_self(self, mt)
  if getmetatable(self) ~= mt then
    error("redlockc: call " .. mt.__name .. " methods as x:method()", 3)
  end
  return self._h
end

-- acquire options -> wait_ms, lease_ms, permits (defaults -1, -1, 1).
local function acquire_opts(opts, allowed)
  local o = { wait_ms = -1, lease_ms = -1, permits = 1 }
  if opts ~= nil then
    if type(opts) ~= "table" then
      error("redlockc: acquire takes a table of options, got " .. type(opts), 3)
    end
    for k, v in pairs(opts) do
      if not allowed[k] then error("redlockc: unknown acquire option " .. tostring(k), 3) end
      o[k] = integer_arg(v, k, 4)
    end
  end
  return o
end
local LOCK_OPTS = { wait_ms = true, lease_ms = true }

local function fam_free(self)
  local h = self._h
  if h then
    self._h = nil
    FamilyOps[getmetatable(self)].free(h)
  end
end

local function fam_class(name)
  local mt = { __name = name }
  mt.__index = mt
  mt.__gc = fam_free
  mt.__close = function(self) self:close() end
  mt.__tostring = function(self)
    return format("%s(%q)%s", name, self._name, self._h and "" or " closed")
  end
  return mt
end

-- An owner-bound lock (fair, multi, one side of a read-write lock):
-- acquire{wait_ms, lease_ms}, release(), with its levels counted in
-- holder._levels[key] so that close() can give them back.
local function owner_lock_methods(mt, get_h, acq, rel, key)
  function mt:acquire(opts)
    local h, holder = get_h(self)
    local o = acquire_opts(opts, LOCK_OPTS)
    if not h then return nil, "closed", E_CLOSED end
    local rc, detail = acq(h, o.wait_ms, o.lease_ms)
    if rc ~= OK then return failed(rc, detail) end
    holder._levels[key] = holder._levels[key] + 1
    return true
  end
  function mt:release()
    local h, holder = get_h(self)
    if not h then return nil, "closed", E_CLOSED end
    local rc, detail = rel(h)
    if rc == E_NOT_OWNER or rc == E_LOST or rc == E_CLOSED then
      holder._levels[key] = 0
    elseif holder._levels[key] > 0 then
      holder._levels[key] = holder._levels[key] - 1
    end
    if rc ~= OK then return failed(rc, detail) end
    return true
  end
end

-- Gives back every level the handle took (a failure ends it: the lease
-- does the rest), then frees it.
local function close_levels(self, rels)
  local h = self._h
  for key, rel in pairs(rels) do
    while h and self._levels[key] > 0 do
      self._levels[key] = self._levels[key] - 1
      if rel(h) ~= OK then break end
    end
  end
  fam_free(self)
end

local function fam_query(h, fn, ...)
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail, value = fn(h, ...)
  if rc ~= OK then return failed(rc, detail) end
  return value
end

-- Makes a handle: new(client_h, ...) -> status, detail, handle.
local function fam_new(client, mt, fields, new, ...)
  local h = client_self(client)
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail, fh = new(h, ...)
  if rc ~= OK then return failed(rc, detail) end
  fields._h, fields._client = fh, client
  return setmetatable(fields, mt)
end

local function name_arg(name, what)
  string_arg(name, what)
  if has_nul(name) then return nil, what .. " contains a NUL byte", E_INVAL end
  return name
end

local function owner_arg(owner)
  return owner == nil and 0 or integer_arg(owner, "owner", 4)
end

-- Read-write lock. rw:read() and rw:write() are its two sides, each with
-- acquire{ wait_ms =, lease_ms = }, release(), hold_count(), validity().
local RWLock = fam_class("redlockc.rwlock")
local RWSide = { __name = "redlockc.rwlock side" }
RWSide.__index = RWSide
FamilyOps[RWLock] = { free = core.rlc_rwlock_free }

local function side_h(self)
  if getmetatable(self) ~= RWSide then
    error("redlockc: call rwlock side methods as side:method()", 3)
  end
  return self._rw._h, self._rw
end

local ReadSide = setmetatable({}, { __index = RWSide })
local WriteSide = setmetatable({}, { __index = RWSide })
owner_lock_methods(ReadSide, side_h, core.rlc_rwlock_read_acquire, core.rlc_rwlock_read_release, "read")
owner_lock_methods(WriteSide, side_h, core.rlc_rwlock_write_acquire, core.rlc_rwlock_write_release, "write")
function RWSide:acquire(opts) return (self._write and WriteSide or ReadSide).acquire(self, opts) end
function RWSide:release() return (self._write and WriteSide or ReadSide).release(self) end
-- side:hold_count() -> integer levels held through this handle (no I/O).
function RWSide:hold_count() return fam_query(side_h(self), core.rlc_rwlock_hold_count, self._write and 1 or 0) end
-- side:validity() -> integer ms the hold is certainly valid (no I/O).
function RWSide:validity() return fam_query(side_h(self), core.rlc_rwlock_validity_ms, self._write and 1 or 0) end
function RWSide:__tostring() return (self._write and "write" or "read") .. " side of " .. tostring(self._rw) end

function RWLock:read() fam_self(self, RWLock); return self._sides[1] end
function RWLock:write() fam_self(self, RWLock); return self._sides[2] end
-- rw:mode() -> "free" | "read" | "write" (the server's mode field).
local MODES = { [0] = "free", [1] = "read", [2] = "write" }
function RWLock:mode()
  local m, err, code = fam_query(fam_self(self, RWLock), core.rlcswig_rwlock_mode)
  if m == nil then return nil, err, code end
  return MODES[m]
end
-- rw:close(): gives back the read levels, then the write levels, taken
-- through this handle (a writer's own read levels go first), then frees it.
function RWLock:close()
  local h = fam_self(self, RWLock)
  for _, side in ipairs{ { "read", core.rlc_rwlock_read_release }, { "write", core.rlc_rwlock_write_release } } do
    while h and self._levels[side[1]] > 0 do
      self._levels[side[1]] = self._levels[side[1]] - 1
      if side[2](h) ~= OK then break end
    end
  end
  fam_free(self)
end

-- client:rwlock(name [, owner]) -> rwlock | nil, err, code (no network I/O).
function Client:rwlock(name, owner)
  local n, err, code = name_arg(name, "lock name")
  if not n then return nil, err, code end
  local rw, e2, c2 = fam_new(self, RWLock, { _name = name, _levels = { read = 0, write = 0 } },
                             core.rlc_rwlock_new, name, owner_arg(owner))
  if not rw then return nil, e2, c2 end
  rw._sides = { setmetatable({ _rw = rw, _write = false }, RWSide),
                setmetatable({ _rw = rw, _write = true }, RWSide) }
  return rw
end

-- Fair lock: acquire{ wait_ms =, lease_ms = }, release(), hold_count(),
-- validity(), close(). One node only.
local FairLock = fam_class("redlockc.fair_lock")
FamilyOps[FairLock] = { free = core.rlc_fairlock_free }
local function fair_h(self) return fam_self(self, FairLock), self end
owner_lock_methods(FairLock, fair_h, core.rlc_fairlock_acquire, core.rlc_fairlock_release, "lock")
function FairLock:hold_count() return fam_query(fam_self(self, FairLock), core.rlc_fairlock_hold_count) end
function FairLock:validity() return fam_query(fam_self(self, FairLock), core.rlc_fairlock_validity_ms) end
function FairLock:close()
  fam_self(self, FairLock)
  close_levels(self, { lock = core.rlc_fairlock_release })
end

-- client:fair_lock(name [, owner [, thread_wait_ms]]) -> fair_lock | nil, err, code
function Client:fair_lock(name, owner, thread_wait_ms)
  local n, err, code = name_arg(name, "lock name")
  if not n then return nil, err, code end
  local tw = thread_wait_ms == nil and 0 or integer_arg(thread_wait_ms, "thread_wait_ms")
  return fam_new(self, FairLock, { _name = name, _levels = { lock = 0 } },
                 core.rlc_fairlock_new, name, owner_arg(owner), tw)
end

-- Multi-name lock: all names or none. acquire{ wait_ms =, lease_ms = },
-- release() (one level of every name), size(), close().
local MultiLock = fam_class("redlockc.multi_lock")
FamilyOps[MultiLock] = { free = core.rlc_multilock_free }
local function multi_h(self) return fam_self(self, MultiLock), self end
owner_lock_methods(MultiLock, multi_h, core.rlc_multilock_acquire, core.rlc_multilock_release, "lock")
function MultiLock:size() return fam_query(fam_self(self, MultiLock), core.rlcswig_multilock_size) end
function MultiLock:close()
  fam_self(self, MultiLock)
  close_levels(self, { lock = core.rlc_multilock_release })
end

-- client:multi_lock(names [, owner]) -> multi_lock | nil, err, code
--   names: a list of strings (sorted and de-duplicated by the library).
function Client:multi_lock(names, owner)
  if type(names) ~= "table" then
    error("redlockc: multi_lock names must be a list of strings, got " .. type(names), 2)
  end
  for i = 1, #names do
    string_arg(names[i], "name " .. i)
    if has_nul(names[i]) then return nil, "name " .. i .. " contains a NUL byte", E_INVAL end
  end
  return fam_new(self, MultiLock, { _name = concat(names, ","), _levels = { lock = 0 } },
                 core.rlc_multilock_new, names, owner_arg(owner))
end

-- Semaphore: a count of free permits, not bound to an owner.
--   sem:acquire{ permits = 1, wait_ms = -1 } -> true | nil, "busy", NOT_ACQUIRED
--   sem:release([n]), sem:available(), sem:try_set_permits(n) -> boolean
local Semaphore = fam_class("redlockc.semaphore")
FamilyOps[Semaphore] = { free = core.rlc_semaphore_free }
local SEM_OPTS = { wait_ms = true, permits = true }
function Semaphore:acquire(opts)
  local h = fam_self(self, Semaphore)
  local o = acquire_opts(opts, SEM_OPTS)
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail = core.rlc_semaphore_acquire(h, o.permits, o.wait_ms)
  if rc ~= OK then return failed(rc, detail) end
  return true
end
function Semaphore:release(n)
  local h = fam_self(self, Semaphore)
  n = n == nil and 1 or integer_arg(n, "permits")
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail = core.rlc_semaphore_release(h, n)
  if rc ~= OK then return failed(rc, detail) end
  return true
end
function Semaphore:available() return fam_query(fam_self(self, Semaphore), core.rlc_semaphore_available) end
function Semaphore:try_set_permits(n)
  return fam_query(fam_self(self, Semaphore), core.rlc_semaphore_try_set_permits,
                   integer_arg(n, "permits"))
end
function Semaphore:close() fam_self(self, Semaphore); fam_free(self) end

-- Permit-expirable semaphore: permits with a lease, under one id.
--   ps:acquire{ permits = 1, wait_ms = -1, lease_ms = (required) } -> id | nil, err, code
--   ps:release(id) -> true | nil, err, code (E_LOST: the lease had run out)
local PSemaphore = fam_class("redlockc.permit_semaphore")
FamilyOps[PSemaphore] = { free = core.rlc_psemaphore_free }
local PSEM_OPTS = { wait_ms = true, permits = true, lease_ms = true }
function PSemaphore:acquire(opts)
  local h = fam_self(self, PSemaphore)
  local o = acquire_opts(opts, PSEM_OPTS)
  if o.lease_ms <= 0 then
    error("redlockc: a permit needs lease_ms > 0 (expirable permits have no watchdog)", 2)
  end
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail, id = core.rlc_psemaphore_acquire(h, o.permits, o.wait_ms, o.lease_ms)
  if rc ~= OK then return failed(rc, detail) end
  return id
end
function PSemaphore:release(id)
  local h = fam_self(self, PSemaphore)
  string_arg(id, "permit id")
  if has_nul(id) then return nil, "permit id contains a NUL byte", E_INVAL end
  if not h then return nil, "closed", E_CLOSED end
  local rc, detail = core.rlc_psemaphore_release(h, id)
  if rc ~= OK then return failed(rc, detail) end
  return true
end
function PSemaphore:available() return fam_query(fam_self(self, PSemaphore), core.rlc_psemaphore_available) end
function PSemaphore:try_set_permits(n)
  return fam_query(fam_self(self, PSemaphore), core.rlc_psemaphore_try_set_permits,
                   integer_arg(n, "permits"))
end
function PSemaphore:close() fam_self(self, PSemaphore); fam_free(self) end

-- client:semaphore(name [, permits]) and client:permit_semaphore(name [, permits])
-- -> handle | nil, err, code. With permits, the count is set if the
-- semaphore has none (one round trip); without, no network I/O.
local function semaphore_of(client, mt, new, set, name, permits)
  local n, err, code = name_arg(name, "semaphore name")
  if not n then return nil, err, code end
  if permits ~= nil then permits = integer_arg(permits, "permits", 4) end
  local s, e2, c2 = fam_new(client, mt, { _name = name }, new, name)
  if not s then return nil, e2, c2 end
  if permits ~= nil then
    local rc, detail = set(s._h, permits)
    if rc ~= OK then
      s:close()
      return failed(rc, detail)
    end
  end
  return s
end
function Client:semaphore(name, permits)
  return semaphore_of(self, Semaphore, core.rlc_semaphore_new,
                      core.rlc_semaphore_try_set_permits, name, permits)
end
function Client:permit_semaphore(name, permits)
  return semaphore_of(self, PSemaphore, core.rlc_psemaphore_new,
                      core.rlc_psemaphore_try_set_permits, name, permits)
end

return _M
