--[[
resty.redlockc.blocking - distributed locks on Redis for OpenResty (LuaJIT FFI
over libredlockc.so.1's blocking API). The same methods as the Lua 5.4 module
"redlockc". This was resty.redlockc 1.0; resty.redlockc (1.1) is now the
non-blocking driver on the engine, and it uses this module for the calls it
does not drive itself (the lock family, metrics, fenced_set).

  local redlockc = require "resty.redlockc.blocking"
  -- one client per worker (init_worker_by_lua*, or lazily on first use)
  local client = assert(redlockc.client("redis://127.0.0.1:6379",
                                        { io_timeout_ms = 200, connect_timeout_ms = 200 }))
  -- in a request: a new lock object, owned by this request
  local lock = assert(client:lock("orders"))
  local ok, err, code = lock:acquire{ wait_ms = 5000 }
  if not ok then return ngx.exit(503) end
  -- critical section
  lock:release()

Every call is ONE BLOCKING ROUND TRIP to Redis on the worker's thread (the
C library does its own socket I/O; it is not a cosocket). On a local network
that is a fraction of a millisecond; bound it with io_timeout_ms and
connect_timeout_ms. acquire never blocks longer than one round trip at a
time: it tries once, then sleeps with ngx.sleep (backoff with jitter) and
tries again until its wait runs out, so the worker serves other requests
meanwhile. validity() and fencing_token() do no I/O.

Owners: a lock object made without an owner belongs to the current request
(one id per request, kept in ngx.ctx), so two requests of one worker exclude
each other, and the same request reenters. Do not share a lock object
between requests. See bindings/luajit/README.md.
]]

local ffi = require "ffi"

local C = ffi.C
local ffi_new, ffi_gc, ffi_string, ffi_cast = ffi.new, ffi.gc, ffi.string, ffi.cast
local type, error, pairs, ipairs, tostring, tonumber = type, error, pairs, ipairs, tostring, tonumber
local setmetatable, getmetatable, pcall = setmetatable, getmetatable, pcall
local floor, min, random = math.floor, math.min, math.random
local concat, sort, format, find = table.concat, table.sort, string.format, string.find
local ngx = ngx -- nil outside OpenResty (plain LuaJIT: waits block in C)

-- The public ABI of c/include/redlockc.h (REDLOCKC_1.0), on_lost left out:
-- it runs on the library's watchdog thread, where LuaJIT must not run.
-- Declared once per LuaJIT state, even if this module is loaded again.
if not pcall(ffi.typeof, "rlc_lock") then
  ffi.cdef [[
    enum {
      RLC_OK = 0, RLC_NOT_ACQUIRED = 1,
      RLC_E_INVAL = -1, RLC_E_NOMEM = -2, RLC_E_CONNECT = -3, RLC_E_TIMEOUT = -4,
      RLC_E_NOT_OWNER = -5, RLC_E_LOST = -6, RLC_E_NO_QUORUM = -7, RLC_E_SERVER = -8,
      RLC_E_PROTOCOL = -9, RLC_E_CLOSED = -10, RLC_E_AUTH = -11
    };
    typedef struct rlc_client rlc_client;
    typedef struct rlc_lock rlc_lock;
    const char *rlc_version(void);
    const char *rlc_strerror(int status);
    const char *rlc_errmsg(void);
    int rlc_client_new(rlc_client **out, const char *nodes, const char *options);
    void rlc_client_free(rlc_client *c);
    const char *rlc_client_uuid(const rlc_client *c);
    int rlc_lock_new(rlc_client *c, const char *name, uint64_t owner, rlc_lock **out);
    void rlc_lock_free(rlc_lock *l);
    int rlc_lock_acquire(rlc_lock *l, int64_t wait_ms, int64_t lease_ms);
    int rlc_lock_release(rlc_lock *l);
    int rlc_lock_extend(rlc_lock *l, int64_t lease_ms);
    int rlc_lock_force_release(rlc_lock *l);
    int rlc_lock_is_locked(rlc_lock *l, int *out);
    int rlc_lock_is_held(rlc_lock *l, int *out);
    int rlc_lock_hold_count(rlc_lock *l, int64_t *out);
    int rlc_lock_ttl_ms(rlc_lock *l, int64_t *out);
    int rlc_lock_validity_ms(rlc_lock *l, int64_t *out);
    int rlc_lock_fencing_token(rlc_lock *l, uint64_t *out);
  ]]
end
-- 1.1's status (alone: a state may have declared the enum above without it).
pcall(ffi.cdef, "enum { RLC_E_CANCELED = -12 };")
-- REDLOCKC_1.1; alone, so that a state that declared 1.0 above gets it too.
pcall(ffi.cdef, [[
  int rlc_fenced_set(rlc_client *c, const char *key, const char *value, size_t value_len,
                     uint64_t token, int *applied);
]])
-- For owner ids outside nginx; another module may have declared it already.
pcall(ffi.cdef, "int getpid(void);")

local _M = { _VERSION = "1.1.0" }

-- ---- status codes (the same table as the Lua 5.4 module's) ------------------

local NAMES = {
  "NOT_ACQUIRED", "E_INVAL", "E_NOMEM", "E_CONNECT", "E_TIMEOUT", "E_NOT_OWNER",
  "E_LOST", "E_NO_QUORUM", "E_SERVER", "E_PROTOCOL", "E_CLOSED", "E_AUTH", "E_CANCELED",
}
local errors, name_of = {}, {}
for _, name in ipairs(NAMES) do
  local code = tonumber(C["RLC_" .. name])
  errors[name], name_of[code] = code, name
end
_M.errors = errors

local OK, NOT_ACQUIRED, E_INVAL, E_CLOSED = tonumber(C.RLC_OK), errors.NOT_ACQUIRED, errors.E_INVAL, errors.E_CLOSED
local E_NOT_OWNER, E_LOST = errors.E_NOT_OWNER, errors.E_LOST

-- errname(-6) -> "E_LOST"; nil for a number that is no status (or 0).
function _M.errname(code)
  return name_of[code]
end

-- ---- the library -----------------------------------------------------------

local lib -- the ffi.load()ed libredlockc

-- _M.load([path]) -> true | nil, err. Loads libredlockc once per worker:
-- path, else $REDLOCKC_LIB (nginx passes it only with `env REDLOCKC_LIB;`),
-- else "libredlockc.so.1" from the system's library path. client() calls it.
function _M.load(path)
  if lib then return true end
  path = path or os.getenv("REDLOCKC_LIB") or "libredlockc.so.1"
  local ok, l = pcall(ffi.load, path)
  if not ok then return nil, "cannot load " .. path .. ": " .. tostring(l) end
  lib = l
  return true
end

local function need_lib()
  if not lib then
    local ok, err = _M.load()
    if not ok then error("resty.redlockc: " .. err, 3) end
  end
  return lib
end

function _M.version()
  return ffi_string(need_lib().rlc_version())
end

-- The ffi.load()ed library (loaded on first use; raises if it cannot be):
-- resty.redlockc drives the engine through it.
function _M.lib()
  return need_lib()
end

-- nil, err, code for a status other than RLC_OK. rlc_errmsg() belongs to
-- the OS thread and lasts until its next failing call: read it now.
local function failed(rc)
  if rc == NOT_ACQUIRED then return nil, "busy", rc end
  return nil, ffi_string(lib.rlc_errmsg()), rc
end

-- Out-parameter buffers, shared: each is read right after its call, and no
-- other call can come between on the worker's one Lua thread.
local client_out = ffi_new("rlc_client *[1]")
local lock_out = ffi_new("rlc_lock *[1]")
local int_out = ffi_new("int[1]")
local i64_out = ffi_new("int64_t[1]")
local u64_out = ffi_new("uint64_t[1]")

-- ---- argument checks (programming errors raise) ----------------------------

-- Numbers are doubles: beyond 2^53 they are no longer every integer, and
-- beyond int64's range (1e300, 2^63) the FFI turns them into INT64_MIN in
-- an int64_t argument, which the library reads as "watchdog" or "forever".
local MAX_EXACT = 2 ^ 53

-- level: where the error points, 3 (the default) being the caller of the
-- function that called integer_arg. NaN fails v == floor(v); inf the bound.
local function integer_arg(v, what, level)
  if type(v) ~= "number" or v ~= floor(v) or v > MAX_EXACT or v < -MAX_EXACT then
    error(format("resty.redlockc: %s must be an integer from -2^53 to 2^53, got %s", what,
                 type(v) == "number" and tostring(v) or type(v)), level or 3)
  end
  return v
end

local function has_nul(s)
  return find(s, "\0", 1, true) ~= nil
end

-- ---- owners: one id per request ---------------------------------------------

-- id = worker pid * 2^32 + a per-worker counter (1 .. 2^32-1): nonzero,
-- below 2^54 (Linux pids are below 2^22), so inside the library's explicit
-- range 1 .. 2^62-1; and the pid in it tells which worker holds a lock when
-- one looks at the hash field "<uuid>:<owner>" in Redis.
local owner_seq = 0
local owner_pid

local function new_owner()
  if not owner_pid then
    -- the worker's pid (not the master's: ids are made in workers)
    owner_pid = ngx and ngx.worker and ngx.worker.pid() or C.getpid()
  end
  owner_seq = owner_seq + 1
  if owner_seq >= 4294967296 then owner_seq = 1 end
  return ffi_cast("uint64_t", owner_pid) * 4294967296ULL + owner_seq
end

local OWNER_KEY = {} -- private key in ngx.ctx

-- The current request's owner id (made on first use in the request). ngx.ctx
-- is per request (and per timer); outside any (init phase, plain LuaJIT)
-- every call gets a new owner.
local function request_owner()
  if ngx then
    local ok, ctx = pcall(function() return ngx.ctx end)
    if ok and ctx then
      local id = ctx[OWNER_KEY]
      if not id then
        id = new_owner()
        ctx[OWNER_KEY] = id
      end
      return id
    end
  end
  return new_owner()
end

-- Phases where ngx.sleep yields (elsewhere it raises).
local CAN_SLEEP = {
  rewrite = true, access = true, content = true, timer = true, preread = true,
  ssl_cert = true, ssl_session_fetch = true, ssl_client_hello = true,
}

-- ---- lock ------------------------------------------------------------------

local Lock = {}
Lock.__index = Lock

-- Lock fields: h the rlc_lock cdata (nil once freed; ffi.gc frees it when
-- collected), client keeps the client alive, name, owner, levels = holds
-- taken through this object and not yet released (what close() gives back).

local function lock_self(self)
  if getmetatable(self) ~= Lock then
    error("resty.redlockc: call lock methods as lock:method()", 3)
  end
  return self.h
end

local function closed() return nil, "closed", E_CLOSED end

-- The backoff between tries (ms): starts at step_ms, doubles up to
-- max_step_ms; each sleep is that times a random factor in [0.5, 1.5), so
-- that waiters of one lock do not come back in step.
local STEP_MS, MAX_STEP_MS = 2, 100

local function now_ms()
  ngx.update_time()
  return ngx.now() * 1000
end

-- Tries again every backoff step until OK, a failure, or the deadline (ms
-- on ngx.now()'s clock; false: none).
local function wait_loop(self, h, deadline, lease_ms, step, max_step)
  while true do
    local delay = step * (0.5 + random())
    if deadline then
      local left = deadline - now_ms()
      if left <= 0 then return nil, "busy", NOT_ACQUIRED end
      delay = min(delay, left)
    end
    ngx.sleep(delay / 1000)
    if not self.h then return closed() end -- closed by another coroutine
    local rc = lib.rlc_lock_acquire(h, 0, lease_ms)
    if rc == OK then
      self.levels = self.levels + 1
      return true
    end
    if rc ~= NOT_ACQUIRED then return failed(rc) end
    step = min(step * 2, max_step)
  end
end

-- lock:acquire{ wait_ms = -1, lease_ms = -1, step_ms = 2, max_step_ms = 100 }
--   -> true | nil, err, code
--   wait_ms   0 try once; > 0 wait at most that long; < 0 (default) forever.
--   lease_ms  <= 0 (default) the watchdog renews it until release;
--             > 0 a fixed lease, no watchdog.
--   step_ms, max_step_ms  the backoff between tries (see above).
-- Busy until the wait ran out: nil, "busy", errors.NOT_ACQUIRED.
-- Waiting needs ngx.sleep: in a phase without it (init_worker, set, log,
-- header/body filter, balancer) only wait_ms = 0 is allowed. Outside
-- OpenResty (plain LuaJIT) the C library waits, blocking.
function Lock:acquire(opts)
  local h = lock_self(self)
  local wait_ms, lease_ms, step, max_step = -1, -1, STEP_MS, MAX_STEP_MS
  if opts ~= nil then
    if type(opts) ~= "table" then
      error("resty.redlockc: acquire takes a table {wait_ms=, lease_ms=}, got " .. type(opts), 2)
    end
    for k, v in pairs(opts) do
      if k == "wait_ms" then wait_ms = integer_arg(v, "wait_ms")
      elseif k == "lease_ms" then lease_ms = integer_arg(v, "lease_ms")
      elseif k == "step_ms" then step = integer_arg(v, "step_ms")
      elseif k == "max_step_ms" then max_step = integer_arg(v, "max_step_ms")
      else error("resty.redlockc: unknown acquire option " .. tostring(k), 2) end
    end
    if step < 1 or max_step < step then
      error("resty.redlockc: need 1 <= step_ms <= max_step_ms", 2)
    end
  end
  local phase = ngx and ngx.get_phase()
  if wait_ms ~= 0 and ngx and not CAN_SLEEP[phase] then
    error("resty.redlockc: cannot wait in the " .. tostring(phase) .. " phase (ngx.sleep is"
          .. " not allowed there): use wait_ms = 0", 2)
  end
  if not h then return closed() end
  local deadline = ngx and wait_ms > 0 and now_ms() + wait_ms

  -- Plain LuaJIT: no event loop to keep free; let the library wait (it
  -- sleeps on the unlock message).
  local rc = lib.rlc_lock_acquire(h, ngx and 0 or wait_ms, lease_ms)
  if rc == OK then
    self.levels = self.levels + 1
    return true
  end
  if rc ~= NOT_ACQUIRED or wait_ms == 0 or not ngx then return failed(rc) end
  return wait_loop(self, h, deadline, lease_ms, step, max_step)
end

-- lock:release() -> true | nil, err, code. One level; at zero the key is
-- deleted and a waiter is woken. E_NOT_OWNER: not held by this owner;
-- E_LOST: it was, and expired or was taken.
function Lock:release()
  local h = lock_self(self)
  if not h then return closed() end
  local rc = lib.rlc_lock_release(h)
  if rc == E_NOT_OWNER or rc == E_LOST or rc == E_CLOSED then
    self.levels = 0
  elseif self.levels > 0 then
    -- OK, or an I/O failure after which the library dropped the level too.
    self.levels = self.levels - 1
  end
  if rc ~= OK then return failed(rc) end
  return true
end

-- lock:extend(ms) -> true | nil, err, code. ms > 0: a fixed lease of ms from
-- now; ms <= 0: the watchdog takes the hold over.
function Lock:extend(ms)
  local h = lock_self(self)
  integer_arg(ms, "extend's lease (ms)")
  if not h then return closed() end
  local rc = lib.rlc_lock_extend(h, ms)
  if rc ~= OK then return failed(rc) end
  return true
end

-- lock:force_release() -> true | nil, err, code: deletes it whoever holds
-- it (true also when nobody did) and wakes waiters.
function Lock:force_release()
  local h = lock_self(self)
  if not h then return closed() end
  local rc = lib.rlc_lock_force_release(h)
  if rc ~= OK then return failed(rc) end
  self.levels = 0
  return true
end

-- Queries: value | nil, err, code.
local function bool_query(self, fn)
  local h = lock_self(self)
  if not h then return closed() end
  local rc = fn(h, int_out)
  if rc ~= OK then return failed(rc) end
  return int_out[0] ~= 0
end

local function i64_query(self, fn)
  local h = lock_self(self)
  if not h then return closed() end
  local rc = fn(h, i64_out)
  if rc ~= OK then return failed(rc) end
  return tonumber(i64_out[0])
end

-- lock:locked() -> boolean: held by anyone.
function Lock:locked() return bool_query(self, lib.rlc_lock_is_locked) end
-- lock:owned() -> boolean: held by this owner, and not lost.
function Lock:owned() return bool_query(self, lib.rlc_lock_is_held) end
-- lock:hold_count() -> number: the owner's reentrancy count (0: not held).
function Lock:hold_count() return i64_query(self, lib.rlc_lock_hold_count) end
-- lock:ttl() -> ms, as Redis's PTTL: -2 no such lock, -1 no expiry.
function Lock:ttl() return i64_query(self, lib.rlc_lock_ttl_ms) end
-- lock:validity() -> ms the hold is certainly still valid (0: not held or
-- lost). No I/O.
function Lock:validity() return i64_query(self, lib.rlc_lock_validity_ms) end

-- lock:fencing_token() -> number (exact below 2^53), with the client option
-- fencing = 1 (E_INVAL without it: no hold takes a token). E_NOT_OWNER when
-- not held, E_LOST when lost. No I/O.
function Lock:fencing_token()
  local h = lock_self(self)
  if not h then return closed() end
  local rc = lib.rlc_lock_fencing_token(h, u64_out)
  if rc ~= OK then return failed(rc) end
  return tonumber(u64_out[0])
end

-- lock:close(): gives back every level taken through this object (a failed
-- release is not retried: the lease ends it) and frees the handle now.
-- Later calls return nil, "closed", E_CLOSED.
function Lock:close()
  local h = lock_self(self)
  if not h then return end
  while self.levels > 0 do
    self.levels = self.levels - 1
    if lib.rlc_lock_release(h) ~= OK then break end
  end
  self.h, self.levels = nil, 0
  lib.rlc_lock_free(ffi_gc(h, nil))
end

function Lock:__tostring()
  return format("resty.redlockc.lock(%q)%s", self.name, self.h and "" or " closed")
end

-- ---- client ----------------------------------------------------------------

local Client = {}
Client.__index = Client

local function client_self(self)
  if getmetatable(self) ~= Client then
    error("resty.redlockc: call client methods as client:method()", 3)
  end
  return self.h
end

local MAX_OWNER = 4611686018427387903ULL -- 2^62-1; thread owners come after

-- An explicit owner: true if it is 1 .. 2^62-1, whatever its type (0ULL
-- must not pass where 0 does not); a number only up to 2^53, where doubles
-- stop being exact. Raises for a fraction, NaN or another type.
local function owner_in_range(owner)
  if type(owner) == "number" then
    if owner ~= floor(owner) then
      error("resty.redlockc: owner must be an integer, got " .. tostring(owner), 3)
    end
    return owner >= 1 and owner <= MAX_EXACT
  end
  if not (ffi.istype("int64_t", owner) or ffi.istype("uint64_t", owner)) then
    error("resty.redlockc: owner must be an integer (a number, or an int64_t or uint64_t"
          .. " cdata), got " .. (type(owner) == "cdata" and tostring(ffi.typeof(owner))
          or type(owner)), 3)
  end
  -- Compared with a uint64_t, a negative int64_t is huge: out of range too.
  return owner >= 1 and owner <= MAX_OWNER
end

-- client:lock(name [, owner]) -> lock | nil, err, code. No I/O.
--   owner nil: the current request (see request_owner); a number
--   1 .. 2^53 or an int64_t/uint64_t cdata 1 .. 2^62-1: that explicit owner.
function Client:lock(name, owner)
  local h = client_self(self)
  if type(name) ~= "string" then
    error("resty.redlockc: lock name must be a string, got " .. type(name), 2)
  end
  if owner == nil then
    owner = request_owner()
  elseif not owner_in_range(owner) then
    return nil, "owner must be 1 .. 2^62-1", E_INVAL
  end
  if has_nul(name) then return nil, "lock name contains a NUL byte", E_INVAL end
  if not h then return closed() end
  local rc = lib.rlc_lock_new(h, name, owner, lock_out)
  if rc ~= OK then return failed(rc) end
  local lh = ffi_gc(lock_out[0], lib.rlc_lock_free)
  return setmetatable({ h = lh, client = self, name = name, owner = owner, levels = 0 }, Lock)
end

-- client:uuid() -> the client's random UUID (the "<uuid>" of "<uuid>:<owner>").
function Client:uuid()
  local h = client_self(self)
  if not h then return closed() end
  return ffi_string(lib.rlc_client_uuid(h))
end

-- client:metrics() -> a table of the client's counters (no network I/O), as
-- the Lua 5.4 module gives them: acquires, busy, waits, renewals, lost,
-- reconnects, script_reloads, wait_ms_sum (numbers), and wait_buckets =
-- { {le = ms or math.huge, count = n}, ... } (cumulative counts).
pcall(ffi.cdef, [[
  int rlc_client_metrics(rlc_client *c, uint64_t *out, int n);
  const char *rlc_metric_name(int i);
  int64_t rlc_metric_bucket_ms(int i);
]])
-- Counters by index (rlc_client_metrics, rlc_engine_metrics: the same
-- layout) as the table metrics() gives; n of them in values.
local function metrics_table(values, n)
  local out, bucket, total = { wait_buckets = {} }, 0, 0
  for i = 0, n - 1 do
    local name = lib.rlc_metric_name(i)
    if name == nil then break end
    name = ffi_string(name)
    local value = tonumber(values[i])
    if name == "wait_bucket" then
      local le = lib.rlc_metric_bucket_ms(bucket)
      bucket = bucket + 1
      total = total + value
      out.wait_buckets[bucket] = { le = le >= 2^62 and math.huge or tonumber(le), count = total }
    else
      out[name] = value
    end
  end
  return out
end

local metrics_out = ffi_new("uint64_t[64]")
function Client:metrics()
  local h = client_self(self)
  if not h then return closed() end
  local n = lib.rlc_client_metrics(h, metrics_out, 64)
  if n < 0 then return failed(n) end
  return metrics_table(metrics_out, math.min(n, 64))
end

-- client:fenced_set(key, value, token) -> true (written) | false (refused:
-- a larger token is stored; nothing written) | nil, err, code.
--   Writes value at key only if token (lock:fencing_token(), a number
--   1 .. 2^53 or a uint64_t cdata) is at least the fence stored with it in
--   "redlockc_fence:{key}". The client must have one node: the resource's
--   Redis. One blocking round trip, like every call.
function Client:fenced_set(key, value, token)
  local h = client_self(self)
  if type(key) ~= "string" or type(value) ~= "string" then
    error("resty.redlockc: key and value must be strings", 2)
  end
  if type(token) == "number" then
    integer_arg(token, "token")
  elseif not ffi.istype("uint64_t", token) then
    error("resty.redlockc: token must be a number or a uint64_t cdata", 2)
  end
  if token < 1 then return nil, "token must be >= 1 (a lock's fencing_token)", E_INVAL end
  if has_nul(key) then return nil, "key contains a NUL byte", E_INVAL end
  if not h then return closed() end
  local ok, fn = pcall(function() return lib.rlc_fenced_set end)
  if not ok then return nil, "libredlockc is older than 1.1 (no rlc_fenced_set)", E_INVAL end
  local rc = fn(h, key, value, #value, token, int_out)
  if rc ~= OK then return failed(rc) end
  return int_out[0] ~= 0
end

-- client:close(): stops the watchdog and closes the connections now (it
-- waits for a renewal round in progress). Holds are not released (they
-- expire); this client's locks then return E_CLOSED.
function Client:close()
  local h = client_self(self)
  if not h then return end
  self.h = nil
  lib.rlc_client_free(ffi_gc(h, nil))
end

function Client:__tostring()
  return "resty.redlockc.client" .. (self.h and "" or " closed")
end

-- Options whose value is a whole number (ms, or a count): a fraction there
-- is a programming error, as in acquire{ wait_ms = }.
local INTEGER_OPTIONS = {
  watchdog_timeout_ms = true, io_timeout_ms = true, node_timeout_ms = true,
  connect_timeout_ms = true, retry_jitter_ms = true, pool_size = true,
}

-- A number in plain decimals ("0.00001", not "1e-05": the C option parser
-- takes digits and a '.', never an exponent), to 12 places as the Python
-- binding writes it, without trailing zeros.
local function decimal(v)
  local s = format("%.12f", v)
  if find(s, ".", 1, true) then
    s = s:gsub("0+$", ""):gsub("%.$", "")
  end
  return s
end

-- An options table as the C library's "name=value;..." (sorted).
local function options_string(opts)
  if opts == nil or type(opts) == "string" then return opts end
  if type(opts) ~= "table" then
    error("resty.redlockc: client options must be a table, got " .. type(opts), 3)
  end
  local parts = {}
  for k, v in pairs(opts) do
    if type(k) ~= "string" then
      error("resty.redlockc: option names must be strings, got " .. type(k), 3)
    end
    local s
    if INTEGER_OPTIONS[k] then
      s = format("%d", integer_arg(v, "option " .. k, 4))
    elseif type(v) == "number" then
      s = decimal(v)
    elseif type(v) == "string" then
      s = v
    else
      error(format("resty.redlockc: option %s must be a number or a string, got %s", k, type(v)), 3)
    end
    if find(k, "[=;]") or find(s, ";", 1, true) or has_nul(k) or has_nul(s) then
      return nil, format("option %q: '=', ';' and NUL cannot be written in an option", k)
    end
    parts[#parts + 1] = k .. "=" .. s
  end
  sort(parts)
  return concat(parts, ";")
end

-- redlockc.client(nodes [, opts]) -> client | nil, err, code. No I/O.
-- nodes and opts as in the Lua 5.4 module (redis:// or unix:// URIs, a
-- comma-separated string or a list; N >= 2 nodes is Redlock). Make one
-- client per worker, in the worker (not in init_by_lua: a client made before
-- nginx forks its workers answers E_CLOSED in them). Prefer IP addresses:
-- a host name is resolved by the C library, blocking.
function _M.client(nodes, opts)
  local l = need_lib()
  if type(nodes) == "table" then
    for i = 1, #nodes do
      if type(nodes[i]) ~= "string" then
        error("resty.redlockc: node " .. i .. " must be a string, got " .. type(nodes[i]), 2)
      end
    end
    nodes = concat(nodes, ",")
  elseif type(nodes) ~= "string" then
    error("resty.redlockc: nodes must be a string or a list of strings, got " .. type(nodes), 2)
  end
  local options, oerr = options_string(opts)
  if oerr then return nil, oerr, E_INVAL end
  if has_nul(nodes) or (options and has_nul(options)) then
    return nil, "nodes or options contain a NUL byte", E_INVAL
  end
  local rc = l.rlc_client_new(client_out, nodes, options)
  if rc ~= OK then return failed(rc) end
  return setmetatable({ h = ffi_gc(client_out[0], l.rlc_client_free) }, Client)
end

-- The owner id the current request would get (for logs and tests).
_M.request_owner = request_owner

-- ---- the lock family (REDLOCKC_1.1; docs/FAMILY.md) ------------------------
--
-- The same methods as the Lua 5.4 module's family (client:rwlock, fair_lock,
-- semaphore, permit_semaphore, multi_lock); owners as for client:lock (the
-- current request unless given). Waiting is as for lock:acquire: one try
-- per round trip, ngx.sleep with backoff in between (plain LuaJIT: the
-- library waits, blocking).
-- LIMIT: the C library joins the fair queue, and registers a waiting writer
-- (writer preference), only inside a call with wait_ms != 0, and leaves when
-- that call gives up. The tries here have wait_ms = 0, so in OpenResty a
-- waiting fair lock keeps no place in the queue (hand-off is first-come
-- among C-side waiters only, and a resty waiter gets it when it finds it
-- free and the queue empty), and a waiting writer does not hold back new
-- readers. Fixing it needs a C call that tries and keeps the place.

pcall(ffi.cdef, [[
  typedef struct rlc_rwlock rlc_rwlock;
  int rlc_rwlock_new(rlc_client *c, const char *name, uint64_t owner, rlc_rwlock **out);
  void rlc_rwlock_free(rlc_rwlock *l);
  int rlc_rwlock_read_acquire(rlc_rwlock *l, int64_t wait_ms, int64_t lease_ms);
  int rlc_rwlock_read_release(rlc_rwlock *l);
  int rlc_rwlock_write_acquire(rlc_rwlock *l, int64_t wait_ms, int64_t lease_ms);
  int rlc_rwlock_write_release(rlc_rwlock *l);
  int rlc_rwlock_mode(rlc_rwlock *l, int *out);
  int rlc_rwlock_hold_count(rlc_rwlock *l, int write, int64_t *out);
  int rlc_rwlock_validity_ms(rlc_rwlock *l, int write, int64_t *out);
  typedef struct rlc_fairlock rlc_fairlock;
  int rlc_fairlock_new(rlc_client *c, const char *name, uint64_t owner,
                       int64_t thread_wait_ms, rlc_fairlock **out);
  void rlc_fairlock_free(rlc_fairlock *l);
  int rlc_fairlock_acquire(rlc_fairlock *l, int64_t wait_ms, int64_t lease_ms);
  int rlc_fairlock_release(rlc_fairlock *l);
  int rlc_fairlock_hold_count(rlc_fairlock *l, int64_t *out);
  int rlc_fairlock_validity_ms(rlc_fairlock *l, int64_t *out);
  typedef struct rlc_semaphore rlc_semaphore;
  int rlc_semaphore_new(rlc_client *c, const char *name, rlc_semaphore **out);
  void rlc_semaphore_free(rlc_semaphore *s);
  int rlc_semaphore_try_set_permits(rlc_semaphore *s, int64_t permits, int *set);
  int rlc_semaphore_available(rlc_semaphore *s, int64_t *out);
  int rlc_semaphore_acquire(rlc_semaphore *s, int64_t n, int64_t wait_ms);
  int rlc_semaphore_release(rlc_semaphore *s, int64_t n);
  typedef struct rlc_psemaphore rlc_psemaphore;
  int rlc_psemaphore_new(rlc_client *c, const char *name, rlc_psemaphore **out);
  void rlc_psemaphore_free(rlc_psemaphore *s);
  int rlc_psemaphore_try_set_permits(rlc_psemaphore *s, int64_t permits, int *set);
  int rlc_psemaphore_available(rlc_psemaphore *s, int64_t *out);
  int rlc_psemaphore_acquire(rlc_psemaphore *s, int64_t n, int64_t wait_ms,
                             int64_t lease_ms, char *id_out);
  int rlc_psemaphore_release(rlc_psemaphore *s, const char *id);
  typedef struct rlc_multilock rlc_multilock;
  int rlc_multilock_new(rlc_client *c, const char *const *names, int n, uint64_t owner,
                        rlc_multilock **out);
  void rlc_multilock_free(rlc_multilock *m);
  int rlc_multilock_acquire(rlc_multilock *m, int64_t wait_ms, int64_t lease_ms);
  int rlc_multilock_release(rlc_multilock *m);
  int rlc_multilock_size(rlc_multilock *m, int *out);
]])

local unpack, select = unpack, select
local handle_out = ffi_new("void *[1]")
local id_buf = ffi_new("char[33]")

-- Each family class: its free function and a metatable.
local function fam_class(name, free_name)
  local mt = { __name = name, free_name = free_name }
  mt.__index = mt
  mt.__tostring = function(self)
    return format("%s(%q)%s", name, self.name, self.h and "" or " closed")
  end
  return mt
end

local function fam_self(self, mt)
  if getmetatable(self) ~= mt then
    error("resty.redlockc: call " .. mt.__name .. " methods as x:method()", 3)
  end
  return self.h
end

-- Options of an acquire -> o.wait_ms, o.lease_ms, o.permits, o.step, o.max_step.
local function fam_opts(opts, allowed)
  local o = { wait_ms = -1, lease_ms = -1, permits = 1, step_ms = STEP_MS,
              max_step_ms = MAX_STEP_MS }
  if opts ~= nil then
    if type(opts) ~= "table" then
      error("resty.redlockc: acquire takes a table of options, got " .. type(opts), 3)
    end
    for k, v in pairs(opts) do
      if not allowed[k] and k ~= "step_ms" and k ~= "max_step_ms" then
        error("resty.redlockc: unknown acquire option " .. tostring(k), 3)
      end
      o[k] = integer_arg(v, k, 4)
    end
    if o.step_ms < 1 or o.max_step_ms < o.step_ms then
      error("resty.redlockc: need 1 <= step_ms <= max_step_ms", 3)
    end
  end
  local phase = ngx and ngx.get_phase()
  if o.wait_ms ~= 0 and ngx and not CAN_SLEEP[phase] then
    error("resty.redlockc: cannot wait in the " .. tostring(phase) .. " phase (ngx.sleep is"
          .. " not allowed there): use wait_ms = 0", 3)
  end
  return o
end

-- try(wait_ms) -> status, tried until OK, a failure or the wait's end;
-- alive() false stops it (the handle was closed by another coroutine).
local function fam_wait(o, try, alive)
  if not ngx then return try(o.wait_ms) end
  local rc = try(0)
  if rc ~= NOT_ACQUIRED or o.wait_ms == 0 then return rc end
  local deadline = o.wait_ms > 0 and now_ms() + o.wait_ms
  local step = o.step_ms
  while true do
    local delay = step * (0.5 + random())
    if deadline then
      local left = deadline - now_ms()
      if left <= 0 then return NOT_ACQUIRED end
      delay = min(delay, left)
    end
    ngx.sleep(delay / 1000)
    if not alive() then return E_CLOSED end
    rc = try(0)
    if rc ~= NOT_ACQUIRED then return rc end
    step = min(step * 2, o.max_step_ms)
  end
end

local function fam_failed(rc)
  if rc == E_CLOSED then return closed() end
  return failed(rc)
end

local LOCK_OPTS = { wait_ms = true, lease_ms = true }

-- Owner-bound acquire/release with levels counted in holder.levels[key].
local function owner_methods(mt, get, acq, rel, key)
  function mt:acquire(opts)
    local h, holder, extra = get(self)
    local o = fam_opts(opts, LOCK_OPTS)
    if not h then return closed() end
    local rc = fam_wait(o, function(w) return lib[acq](h, w, o.lease_ms) end,
                        function() return holder.h ~= nil end)
    if rc ~= OK then return fam_failed(rc) end
    holder.levels[key] = holder.levels[key] + 1
    return true
  end
  function mt:release()
    local h, holder = get(self)
    if not h then return closed() end
    local rc = lib[rel](h)
    if rc == E_NOT_OWNER or rc == E_LOST or rc == E_CLOSED then
      holder.levels[key] = 0
    elseif holder.levels[key] > 0 then
      holder.levels[key] = holder.levels[key] - 1
    end
    if rc ~= OK then return failed(rc) end
    return true
  end
end

local function fam_close(self, mt, order)
  local h = fam_self(self, mt)
  if not h then return end
  for _, kr in ipairs(order) do
    while self.levels[kr[1]] > 0 do
      self.levels[kr[1]] = self.levels[kr[1]] - 1
      if lib[kr[2]](h) ~= OK then break end
    end
  end
  self.h = nil
  lib[mt.free_name](ffi_gc(h, nil))
end

local function fam_i64(h, fn, ...)
  if not h then return closed() end
  local rc
  if select("#", ...) > 0 then rc = lib[fn](h, ..., i64_out) else rc = lib[fn](h, i64_out) end
  if rc ~= OK then return failed(rc) end
  return tonumber(i64_out[0])
end

-- Makes a handle of class mt with lib[new](client_h, ...args, out).
local function fam_new(client, mt, fields, new, ctype, ...)
  local h = client_self(client)
  if not h then return closed() end
  local out = ffi_cast(ctype .. " **", handle_out)
  local args = { ... }
  args[#args + 1] = out
  local rc = lib[new](h, unpack(args))
  if rc ~= OK then return failed(rc) end
  fields.h = ffi_gc(out[0], lib[mt.free_name])
  fields.client = client
  fields.levels = fields.levels or {}
  return setmetatable(fields, mt)
end

local function fam_name(name, what)
  if type(name) ~= "string" then
    error("resty.redlockc: " .. what .. " must be a string, got " .. type(name), 3)
  end
  return not has_nul(name)
end

local function fam_owner(owner)
  if owner == nil then return request_owner() end
  if not owner_in_range(owner) then return nil end
  return owner
end

-- Read-write lock: rw:read() and rw:write() are its sides, each with
-- acquire{ wait_ms, lease_ms }, release(), hold_count(), validity().
local RWLock = fam_class("resty.redlockc.rwlock", "rlc_rwlock_free")
local RWSide = { __name = "resty.redlockc.rwlock side" }
RWSide.__index = RWSide
local function side_get(self)
  if getmetatable(self) ~= RWSide then
    error("resty.redlockc: call side methods as side:method()", 3)
  end
  return self.rw.h, self.rw
end
local ReadOps, WriteOps = {}, {}
owner_methods(ReadOps, side_get, "rlc_rwlock_read_acquire", "rlc_rwlock_read_release", "read")
owner_methods(WriteOps, side_get, "rlc_rwlock_write_acquire", "rlc_rwlock_write_release", "write")
function RWSide:acquire(opts) return (self.write and WriteOps or ReadOps).acquire(self, opts) end
function RWSide:release() return (self.write and WriteOps or ReadOps).release(self) end
function RWSide:hold_count()
  return fam_i64(side_get(self), "rlc_rwlock_hold_count", self.write and 1 or 0)
end
function RWSide:validity()
  return fam_i64(side_get(self), "rlc_rwlock_validity_ms", self.write and 1 or 0)
end
function RWLock:read() fam_self(self, RWLock); return self.sides[1] end
function RWLock:write() fam_self(self, RWLock); return self.sides[2] end
local MODES = { [0] = "free", [1] = "read", [2] = "write" }
-- rw:mode() -> "free" | "read" | "write" (the server's mode field).
function RWLock:mode()
  local h = fam_self(self, RWLock)
  if not h then return closed() end
  local rc = lib.rlc_rwlock_mode(h, int_out)
  if rc ~= OK then return failed(rc) end
  return MODES[int_out[0]]
end
-- rw:close(): gives back this object's read, then write levels; frees it.
function RWLock:close()
  fam_close(self, RWLock, { { "read", "rlc_rwlock_read_release" },
                            { "write", "rlc_rwlock_write_release" } })
end

function Client:rwlock(name, owner)
  if not fam_name(name, "lock name") then return nil, "lock name contains a NUL byte", E_INVAL end
  local o = fam_owner(owner)
  if not o then return nil, "owner must be 1 .. 2^62-1", E_INVAL end
  local rw, err, code = fam_new(self, RWLock, { name = name, owner = o,
                                                levels = { read = 0, write = 0 } },
                                "rlc_rwlock_new", "rlc_rwlock", name, o)
  if not rw then return nil, err, code end
  rw.sides = { setmetatable({ rw = rw, write = false }, RWSide),
               setmetatable({ rw = rw, write = true }, RWSide) }
  return rw
end

-- Fair lock: acquire{ wait_ms, lease_ms }, release(), hold_count(), validity().
local FairLock = fam_class("resty.redlockc.fair_lock", "rlc_fairlock_free")
owner_methods(FairLock, function(self) return fam_self(self, FairLock), self end,
              "rlc_fairlock_acquire", "rlc_fairlock_release", "lock")
function FairLock:hold_count() return fam_i64(fam_self(self, FairLock), "rlc_fairlock_hold_count") end
function FairLock:validity() return fam_i64(fam_self(self, FairLock), "rlc_fairlock_validity_ms") end
function FairLock:close() fam_close(self, FairLock, { { "lock", "rlc_fairlock_release" } }) end

function Client:fair_lock(name, owner, thread_wait_ms)
  if not fam_name(name, "lock name") then return nil, "lock name contains a NUL byte", E_INVAL end
  local o = fam_owner(owner)
  if not o then return nil, "owner must be 1 .. 2^62-1", E_INVAL end
  local tw = thread_wait_ms == nil and 0 or integer_arg(thread_wait_ms, "thread_wait_ms")
  return fam_new(self, FairLock, { name = name, owner = o, levels = { lock = 0 } },
                 "rlc_fairlock_new", "rlc_fairlock", name, o, tw)
end

-- Multi-name lock: acquire{ wait_ms, lease_ms }, release(), size().
local MultiLock = fam_class("resty.redlockc.multi_lock", "rlc_multilock_free")
owner_methods(MultiLock, function(self) return fam_self(self, MultiLock), self end,
              "rlc_multilock_acquire", "rlc_multilock_release", "lock")
function MultiLock:size()
  local h = fam_self(self, MultiLock)
  if not h then return closed() end
  local rc = lib.rlc_multilock_size(h, int_out)
  if rc ~= OK then return failed(rc) end
  return tonumber(int_out[0])
end
function MultiLock:close() fam_close(self, MultiLock, { { "lock", "rlc_multilock_release" } }) end

function Client:multi_lock(names, owner)
  if type(names) ~= "table" then
    error("resty.redlockc: multi_lock names must be a list of strings, got " .. type(names), 2)
  end
  local n = #names
  local arr = ffi_new("const char *[?]", n + 1)
  for i = 1, n do
    if not fam_name(names[i], "name " .. i) then
      return nil, "name " .. i .. " contains a NUL byte", E_INVAL
    end
    arr[i - 1] = names[i] -- the strings stay alive in `names` during the call
  end
  local o = fam_owner(owner)
  if not o then return nil, "owner must be 1 .. 2^62-1", E_INVAL end
  return fam_new(self, MultiLock, { name = concat(names, ","), owner = o, levels = { lock = 0 },
                                    names = names },
                 "rlc_multilock_new", "rlc_multilock", arr, n, o)
end

-- Semaphore: acquire{ permits = 1, wait_ms = -1 }, release([n]),
-- available(), try_set_permits(n).
local Semaphore = fam_class("resty.redlockc.semaphore", "rlc_semaphore_free")
local SEM_OPTS = { wait_ms = true, permits = true }
function Semaphore:acquire(opts)
  local h = fam_self(self, Semaphore)
  local o = fam_opts(opts, SEM_OPTS)
  if not h then return closed() end
  local rc = fam_wait(o, function(w) return lib.rlc_semaphore_acquire(h, o.permits, w) end,
                      function() return self.h ~= nil end)
  if rc ~= OK then return fam_failed(rc) end
  return true
end
function Semaphore:release(n)
  local h = fam_self(self, Semaphore)
  n = n == nil and 1 or integer_arg(n, "permits")
  if not h then return closed() end
  local rc = lib.rlc_semaphore_release(h, n)
  if rc ~= OK then return failed(rc) end
  return true
end
function Semaphore:available() return fam_i64(fam_self(self, Semaphore), "rlc_semaphore_available") end

-- Permit-expirable semaphore: acquire{ permits = 1, wait_ms = -1, lease_ms
-- (required) } -> id | nil, err, code; release(id) (E_LOST: it had expired).
local PSemaphore = fam_class("resty.redlockc.permit_semaphore", "rlc_psemaphore_free")
local PSEM_OPTS = { wait_ms = true, permits = true, lease_ms = true }
function PSemaphore:acquire(opts)
  local h = fam_self(self, PSemaphore)
  local o = fam_opts(opts, PSEM_OPTS)
  if o.lease_ms <= 0 then
    error("resty.redlockc: a permit needs lease_ms > 0 (expirable permits have no watchdog)", 2)
  end
  if not h then return closed() end
  local rc = fam_wait(o, function(w)
    return lib.rlc_psemaphore_acquire(h, o.permits, w, o.lease_ms, id_buf)
  end, function() return self.h ~= nil end)
  if rc ~= OK then return fam_failed(rc) end
  return ffi_string(id_buf)
end
function PSemaphore:release(id)
  local h = fam_self(self, PSemaphore)
  if type(id) ~= "string" then
    error("resty.redlockc: permit id must be a string, got " .. type(id), 2)
  end
  if has_nul(id) then return nil, "permit id contains a NUL byte", E_INVAL end
  if not h then return closed() end
  local rc = lib.rlc_psemaphore_release(h, id)
  if rc ~= OK then return failed(rc) end
  return true
end
function PSemaphore:available() return fam_i64(fam_self(self, PSemaphore), "rlc_psemaphore_available") end

for _, pair in ipairs{ { Semaphore, "rlc_semaphore" }, { PSemaphore, "rlc_psemaphore" } } do
  local mt, prefix = pair[1], pair[2]
  mt.try_set_permits = function(self, n)
    local h = fam_self(self, mt)
    integer_arg(n, "permits")
    if not h then return closed() end
    local rc = lib[prefix .. "_try_set_permits"](h, n, int_out)
    if rc ~= OK then return failed(rc) end
    return int_out[0] ~= 0
  end
  mt.close = function(self)
    local h = fam_self(self, mt)
    if not h then return end
    self.h = nil
    lib[mt.free_name](ffi_gc(h, nil))
  end
end

local function semaphore_of(client, mt, prefix, name, permits)
  if not fam_name(name, "semaphore name") then
    return nil, "semaphore name contains a NUL byte", E_INVAL
  end
  if permits ~= nil then integer_arg(permits, "permits", 4) end
  local s, err, code = fam_new(client, mt, { name = name }, prefix .. "_new", prefix, name)
  if not s then return nil, err, code end
  if permits ~= nil then
    local ok, e2, c2 = s:try_set_permits(permits)
    if ok == nil then
      s:close()
      return nil, e2, c2
    end
  end
  return s
end
-- client:semaphore(name [, permits]), client:permit_semaphore(name [, permits]):
-- with permits, the count is set if the semaphore has none.
function Client:semaphore(name, permits)
  return semaphore_of(self, Semaphore, "rlc_semaphore", name, permits)
end
function Client:permit_semaphore(name, permits)
  return semaphore_of(self, PSemaphore, "rlc_psemaphore", name, permits)
end


-- Shared with resty.redlockc (not an API): its argument checks and option
-- strings are these.
_M._internal = {
  integer_arg = integer_arg, owner_in_range = owner_in_range,
  options_string = options_string, has_nul = has_nul, CAN_SLEEP = CAN_SLEEP,
  metrics_table = metrics_table, new_owner = new_owner,
}

return _M
