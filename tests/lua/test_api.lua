-- test_api.lua - the Lua 5.4 module against real redis-servers (started by
-- tests/lua/run.sh): results, integers, reentrancy, leases, errors, <close>,
-- GC. Raw redis-cli commands check what the server holds.

local T = require "check"

local PORT = T.env("REDIS_PORT")
local URI = T.env("REDIS_URI")
local DEAD_URI = T.env("DEAD_URI") -- loopback ports nobody listens on
local DEAD2_URI = T.env("DEAD2_URI")
local NODES = { T.env("NODE1_URI"), T.env("NODE2_URI"), T.env("NODE3_URI") }
local NODE_PORTS = { T.env("NODE1_PORT"), T.env("NODE2_PORT"), T.env("NODE3_PORT") }
local HEADER = T.env("RLC_HEADER")

-- Loading the module adds no global (SWIG's runtime sets two; see redlockc.lua).
local globals_before = {}
for k in pairs(_G) do globals_before[k] = true end
local redlockc = require "redlockc"

local E = redlockc.errors
-- fencing = 1: the cases below read fencing tokens.
local client = assert(redlockc.client(URI, { watchdog_timeout_ms = 30000, fencing = 1 }))

-- The hash field a lock of this client and owner writes.
local function field(owner) return client:uuid() .. ":" .. owner end

T.case("require adds no global variable", function()
  local added = {}
  for k in pairs(_G) do
    if not globals_before[k] then added[#added + 1] = tostring(k) end
  end
  T.eq("globals added", "", table.concat(added, ","))
  T.eq("_VERSION is the C library's version", redlockc.version(), redlockc._VERSION)
end)

T.case("errors has every C status of redlockc.h, under its name without RLC_", function()
  local want, n = {}, 0
  -- The statuses: RLC_NOT_ACQUIRED and RLC_E_* (not the metric and log
  -- level indices of the 1.1 block, RLC_M_* and RLC_LOG_*).
  for name, value in io.open(HEADER):read("a"):gmatch("RLC_([%u_]+)%s*=%s*(%-?%d+)") do
    if name == "NOT_ACQUIRED" or name:match("^E_") then
      want[name] = math.tointeger(tonumber(value)); n = n + 1
    end
  end
  T.eq("statuses in the header", 13, n)
  for name, value in pairs(want) do
    T.eq("errors." .. name, value, E[name])
    T.eq("errname(" .. value .. ")", name, redlockc.errname(value))
  end
  local extra = {}
  for name in pairs(E) do if not want[name] then extra[#extra + 1] = name end end
  T.eq("names not in the header", "", table.concat(extra, ","))
end)

T.case("counts, tokens and milliseconds are Lua integers", function()
  local l = assert(client:lock("lua:ints"))
  T.eq("acquire", true, l:acquire{ wait_ms = 0, lease_ms = 20000 })
  local count, ttl, validity, token = l:hold_count(), l:ttl(), l:validity(), l:fencing_token()
  T.eq("hold_count", 1, count)
  T.ok("ttl is an integer in (0, 20000]", math.type(ttl) == "integer" and ttl > 0 and ttl <= 20000, ttl)
  T.ok("validity is an integer in (0, 20000)", math.type(validity) == "integer" and validity > 0 and validity < 20000, validity)
  T.ok("fencing_token is an integer >= 1", math.type(token) == "integer" and token >= 1, token)
  -- Integral floats are taken as integers (as luaL_checkinteger does).
  T.eq("a reentrant acquire with wait_ms = 0.0, lease_ms = 20000.0", true,
       l:acquire{ wait_ms = 0.0, lease_ms = 20000.0 })
  T.eq("hold_count after it", 2, l:hold_count())
  l:force_release()
  T.eq("ttl of a missing lock (Redis's PTTL)", -2, l:ttl())
end)

T.case("the same owner reenters: the count goes up, the key stays until the last release", function()
  local l = assert(client:lock("lua:reentrant", 11))
  T.eq("first acquire", true, l:acquire{ wait_ms = 0 })
  T.eq("second acquire", true, l:acquire{ wait_ms = 0 })
  T.eq("hold_count", 2, l:hold_count())
  T.eq("count in the hash field on the server", "2", T.redis(PORT, "hget", "lua:reentrant", field(11)))
  T.eq("first release", true, l:release())
  T.eq("still locked after one release", true, l:locked())
  T.eq("still owned", true, l:owned())
  T.eq("second release", true, l:release())
  T.eq("key deleted at count 0", "0", T.redis(PORT, "exists", "lua:reentrant"))
  T.eq("owned after the last release", false, l:owned())
  T.eq("validity after the last release", 0, l:validity())
  T.fails("a third release", E.E_NOT_OWNER, l:release())
end)

T.case("metrics count what a fresh client did: acquires, busy, waits, buckets", function()
  local c = assert(redlockc.client(URI))
  local a = assert(c:lock("lua:metrics", 31))
  local b = assert(c:lock("lua:metrics", 32))
  T.eq("a acquires", true, a:acquire{ wait_ms = 0 })
  T.eq("b refused once", nil, (b:acquire{ wait_ms = 0 }))
  T.eq("b refused after a wait", nil, (b:acquire{ wait_ms = 50 }))
  assert(a:release())
  local m = assert(c:metrics())
  T.eq("acquires", 1, m.acquires)
  T.eq("busy", 2, m.busy)
  T.eq("waits", 1, m.waits)
  T.eq("12 wait buckets", 12, #m.wait_buckets)
  T.eq("the last bucket has no bound", math.huge, m.wait_buckets[12].le)
  T.eq("the last bucket counts every wait", 1, m.wait_buckets[12].count)
  T.eq("counters are integers", "integer", math.type(m.acquires))
  c:close()
  T.fails("metrics after close", E.E_CLOSED, c:metrics())
end)

T.case("another owner is refused: nil, 'busy', NOT_ACQUIRED, with and without a wait", function()
  local a = assert(client:lock("lua:busy", 21))
  local b = assert(client:lock("lua:busy", 22))
  T.eq("a acquires", true, a:acquire{ wait_ms = 0 })
  local ok, err, code = b:acquire{ wait_ms = 0 }
  T.eq("b try once: result", nil, ok)
  T.eq("b try once: message", "busy", err)
  T.eq("b try once: code", E.NOT_ACQUIRED, code)
  ok, err, code = b:acquire{ wait_ms = 150 }
  T.eq("b waiting 150 ms: message", "busy", err)
  T.eq("b waiting 150 ms: code", E.NOT_ACQUIRED, code)
  T.eq("b owns it", false, b:owned())
  T.eq("b sees it locked", true, b:locked())
  T.fails("b's release", E.E_NOT_OWNER, b:release())
  T.fails("b's extend", E.E_NOT_OWNER, b:extend(1000))
  T.fails("b's fencing_token", E.E_NOT_OWNER, b:fencing_token())
  T.eq("a's hold untouched", "1", T.redis(PORT, "hget", "lua:busy", field(21)))
  a:release()
  T.eq("b acquires once a released", true, b:acquire{ wait_ms = 0 })
  b:release()
end)

T.case("owner 0 (default) is the OS thread: two handles of one process reenter", function()
  local a, b = assert(client:lock("lua:thread")), assert(client:lock("lua:thread", 0))
  T.eq("a acquires", true, a:acquire{ wait_ms = 0 })
  T.eq("b reenters", true, b:acquire{ wait_ms = 0 })
  T.eq("hold_count seen by a", 2, a:hold_count())
  a:close()
  b:close()
  T.eq("closing both gave both levels back", "0", T.redis(PORT, "exists", "lua:thread"))
end)

T.case("a fixed lease ends by itself: the next owner gets it, the old one's release says E_LOST", function()
  local a = assert(client:lock("lua:lease", 31))
  local b = assert(client:lock("lua:lease", 32))
  T.eq("a acquires with a 300 ms lease", true, a:acquire{ wait_ms = 0, lease_ms = 300 })
  local ttl = a:ttl()
  T.ok("ttl at most 300", ttl > 0 and ttl <= 300, ttl)
  -- b's wait (the library sleeps until the lease would end) is the clock here.
  T.eq("b acquires within 5 s", true, b:acquire{ wait_ms = 5000 })
  T.eq("a owns it", false, a:owned())
  T.eq("a's validity", 0, a:validity())
  T.fails("a's release after expiry", E.E_LOST, a:release())
  T.eq("b's hold untouched by a's release", "1", T.redis(PORT, "hget", "lua:lease", field(32)))
  b:release()
end)

T.case("a fixed lease that ran out while another client took the lock: not owned, count 0, token E_LOST", function()
  local other = assert(redlockc.client(URI))
  local a = assert(client:lock("lua:ranout", 33))
  local b = assert(other:lock("lua:ranout", 34))
  T.eq("a acquires with a 700 ms lease", true, a:acquire{ wait_ms = 0, lease_ms = 700 })
  T.ok("a's token while held", a:fencing_token() > 0, a:fencing_token())
  -- b's wait (the library sleeps until the lease would end) is the clock here.
  T.eq("the other client's b acquires within 5 s", true, b:acquire{ wait_ms = 5000 })
  T.eq("a owns it", false, a:owned())
  T.eq("a's hold count", 0, a:hold_count())
  T.eq("a's validity", 0, a:validity())
  T.fails("a's fencing token", E.E_LOST, a:fencing_token())
  T.fails("a's release", E.E_LOST, a:release())
  T.eq("b still owns it", true, b:owned())
  T.eq("b releases", true, b:release())
  b:close()
  other:close()
end)

T.case("the watchdog keeps a lock past its lease until release", function()
  -- Renewed every 300 ms: a renewal may be up to 600 ms late on a busy
  -- machine before the hold is at risk.
  local short = assert(redlockc.client(URI, { watchdog_timeout_ms = 900 }))
  local a = assert(short:lock("lua:watchdog", 41))
  local b = assert(short:lock("lua:watchdog", 42))
  T.eq("a acquires (watchdog lease 900 ms)", true, a:acquire{ wait_ms = 0 })
  -- 2000 ms > 2 leases: without renewals the key would be gone and b in.
  T.fails("b waits 2000 ms in vain", E.NOT_ACQUIRED, b:acquire{ wait_ms = 2000 })
  T.eq("a still owns it", true, a:owned())
  local ttl = a:ttl()
  T.ok("the key's ttl is within the 900 ms lease", ttl > 0 and ttl <= 900, ttl)
  T.eq("a releases", true, a:release())
  short:close()
end)

T.case("collecting a held lock frees its handle: renewals stop and the lock expires", function()
  local short = assert(redlockc.client(URI, { watchdog_timeout_ms = 300 }))
  -- In a function of its own, so that no stack slot of ours still refers to
  -- the lock when it returns.
  local function hold_and_drop()
    local a = assert(short:lock("lua:gc", 51))
    T.eq("a acquires (watchdog lease 300 ms)", true, a:acquire{ wait_ms = 0 })
  end
  hold_and_drop() -- a is garbage now: its __gc frees the handle (no release)
  collectgarbage()
  collectgarbage()
  -- Were the handle alive, the watchdog would keep the lock forever.
  local b = assert(short:lock("lua:gc", 52))
  T.eq("b gets it within 5 s", true, b:acquire{ wait_ms = 5000 })
  b:release()
  short:close()
end)

T.case("<close> gives back every level taken through the handle, also on error", function()
  do
    local l <close> = assert(client:lock("lua:close", 61))
    assert(l:acquire{ wait_ms = 0 })
    assert(l:acquire{ wait_ms = 0 })
    T.eq("held twice inside the block", "2", T.redis(PORT, "hget", "lua:close", field(61)))
  end
  T.eq("released at the end of the block", "0", T.redis(PORT, "exists", "lua:close"))

  local escaped
  local ok, err = pcall(function()
    local l <close> = assert(client:lock("lua:close", 62))
    escaped = l
    assert(l:acquire{ wait_ms = 0 })
    error("boom", 0)
  end)
  T.eq("the block's error comes through", "boom", not ok and err)
  T.eq("released although the block raised", "0", T.redis(PORT, "exists", "lua:close"))
  T.fails("the closed handle answers E_CLOSED", E.E_CLOSED, escaped:acquire{ wait_ms = 0 })
  T.eq("closing again is harmless", nil, escaped:close())
end)

T.case("a closed client: its locks answer E_CLOSED, their handles still free", function()
  local c = assert(redlockc.client(URI))
  local uuid = c:uuid()
  local l = assert(c:lock("lua:closed", 71))
  T.eq("acquire before close", true, l:acquire{ wait_ms = 0, lease_ms = 5000 })
  do local cc <close> = c end
  T.fails("acquire after client:close()", E.E_CLOSED, l:acquire{ wait_ms = 0 })
  T.fails("release after client:close()", E.E_CLOSED, l:release())
  T.fails("client:lock after close", E.E_CLOSED, c:lock("lua:closed"))
  T.eq("the hold was not released (it expires)", "1", T.redis(PORT, "hget", "lua:closed", uuid .. ":71"))
  l:close()
  T.redis(PORT, "del", "lua:closed")
end)

T.case("force_release deletes whoever holds it; the holder's release then says E_LOST", function()
  local a = assert(client:lock("lua:force", 81))
  local b = assert(client:lock("lua:force", 82))
  assert(a:acquire{ wait_ms = 0 })
  T.eq("b force-releases", true, b:force_release())
  T.eq("key gone", "0", T.redis(PORT, "exists", "lua:force"))
  T.fails("a's release", E.E_LOST, a:release())
  T.eq("force_release of a free lock", true, b:force_release())
end)

T.case("extend sets a new fixed lease", function()
  local l = assert(client:lock("lua:extend", 91))
  assert(l:acquire{ wait_ms = 0, lease_ms = 500 })
  T.eq("extend(60000)", true, l:extend(60000))
  local ttl = l:ttl()
  T.ok("ttl now above 500 and at most 60000", ttl > 500 and ttl <= 60000, ttl)
  l:release()
end)

T.case("expected failures return nil, message, code", function()
  T.fails("a malformed node URI", E.E_INVAL, redlockc.client("bogus://127.0.0.1"))
  T.fails("an unknown option", E.E_INVAL, redlockc.client(URI, { no_such_option = 1 }))
  T.fails("an out-of-range option", E.E_INVAL, redlockc.client(URI, { io_timeout_ms = -5 }))
  T.fails("an option value with ';'", E.E_INVAL, redlockc.client(URI, { key_prefix = "a;b" }))
  T.fails("an empty lock name", E.E_INVAL, client:lock(""))
  T.fails("a lock name with a NUL byte", E.E_INVAL, client:lock("a\0b"))
  T.fails("owner 2^62 (a thread's range)", E.E_INVAL, client:lock("x", 1 << 62))
  T.fails("owner -1", E.E_INVAL, client:lock("x", -1))

  local dead = assert(redlockc.client(DEAD_URI, { connect_timeout_ms = 500 }))
  local l = assert(dead:lock("lua:dead"))
  local msg = T.fails("no server listening", E.E_CONNECT, l:acquire{ wait_ms = 0 })
  T.ok("the message names the node", msg and msg:find(DEAD_URI:match("//(.*)"), 1, true), msg)
  dead:close()

  T.redis(PORT, "set", "lua:string", "x")
  local s = assert(client:lock("lua:string"))
  msg = T.fails("the key holds a string", E.E_SERVER, s:acquire{ wait_ms = 0 })
  T.ok("the message quotes Redis", msg and msg:find("WRONGTYPE", 1, true), msg)
  T.redis(PORT, "del", "lua:string")

  local auth = assert(redlockc.client((URI:gsub("//", "//:wrong@"))))
  T.fails("a password the server refuses", E.E_AUTH, assert(auth:lock("lua:auth")):acquire{ wait_ms = 0 })
  auth:close()

  -- CLIENT PAUSE holds every client's commands: ours times out.
  local slow = assert(redlockc.client(URI, { io_timeout_ms = 100 }))
  local p = assert(slow:lock("lua:slow", 99))
  -- Connect first: a call that must connect also gets connect_timeout_ms.
  T.eq("locked() before the pause", false, p:locked())
  T.eq("pause", "OK", T.redis(PORT, "client", "pause", "600", "ALL"))
  -- (The paused call still runs when the pause ends: a 2 s hold nobody uses.)
  T.fails("the server does not answer within io_timeout_ms", E.E_TIMEOUT, p:acquire{ wait_ms = 0, lease_ms = 2000 })
  slow:close()
end)

T.case("programming errors raise", function()
  local l = assert(client:lock("lua:raise"))
  T.raises("nodes not a string", "nodes must be", redlockc.client, 42)
  T.raises("options not a table", "options must be a table", redlockc.client, URI, 42)
  T.raises("an option value of the wrong type", "must be a number or a string", redlockc.client, URI, { drift_factor = true })
  T.raises("lock name not a string", "lock name must be a string", client.lock, client, 42)
  T.raises("owner a string", "owner must be an integer", client.lock, client, "x", "7")
  T.raises("owner a fraction", "owner must be an integer", client.lock, client, "x", 1.5)
  T.raises("acquire with a non-table", "acquire takes a table", l.acquire, l, 5)
  T.raises("acquire with an unknown option", "unknown acquire option wait", l.acquire, l, { wait = 5 })
  T.raises("wait_ms a fraction", "wait_ms must be an integer", l.acquire, l, { wait_ms = 0.5 })
  T.raises("lease_ms a string", "lease_ms must be an integer", l.acquire, l, { lease_ms = "100" })
  T.raises("extend without ms", "must be an integer", l.extend, l)
  T.raises("a method called with '.'", "lock:method", l.release)
  T.raises("a client method called with '.'", "client:method", client.lock, "x")
  local core = require "redlockc_core"
  T.raises("the C module refuses a fraction itself", "expected 'integer'", core.rlc_lock_acquire, l._h, 0.5, 0)
  T.raises("the C module refuses a numeric string", "expected 'integer'", core.rlc_lock_acquire, l._h, "5", 0)
  T.raises("the C module refuses an int out of range", "expected 'integer'", core.rlc_strerror, 1 << 40)
  local owner = core.rlc_thread_owner()
  T.ok("the thread's owner id is an integer >= 2^62", math.type(owner) == "integer" and owner >= 1 << 62, owner)
end)

T.case("options in ms are integers: a fraction, NaN or a string raises", function()
  for _, opt in ipairs{ "io_timeout_ms", "watchdog_timeout_ms", "node_timeout_ms",
                        "connect_timeout_ms", "retry_jitter_ms", "pool_size" } do
    for _, bad in ipairs{ 1.5, 0 / 0, 1e300, "100", true } do
      local shown = type(bad) == "string" and ("%q"):format(bad) or tostring(bad)
      T.raises(opt .. " = " .. shown, opt .. " must be an integer",
               redlockc.client, URI, { [opt] = bad })
    end
  end
  local c = assert(redlockc.client(URI, { io_timeout_ms = 500.0 }))
  T.eq("an integral float is taken (io_timeout_ms = 500.0)", true,
       assert(c:lock("lua:opt", 7)):acquire{ wait_ms = 0 })
  assert(c:lock("lua:opt", 7)):release()
  c:close()
end)

T.case("a small drift_factor reaches the library without an exponent", function()
  -- "%.17g" would write 1e-05 as "1.0000000000000001e-05", which the C
  -- option parser refuses (digits and '.' only).
  for _, v in ipairs{ 1e-5, 0.00005, 5e-324, 0.5 } do
    local c, err, code = redlockc.client(URI, { drift_factor = v })
    T.ok("drift_factor = " .. tostring(v) .. " accepted", c, tostring(err) .. " " .. tostring(code))
    if c then
      local l = assert(c:lock("lua:drift", 8))
      T.eq("a lock of that client (drift_factor " .. tostring(v) .. ")", true,
           l:acquire{ wait_ms = 0, lease_ms = 5000 })
      l:release()
      c:close()
    end
  end
  T.fails("drift_factor 0.6 is out of the library's range", E.E_INVAL,
          redlockc.client(URI, { drift_factor = 0.6 }))
end)

T.case("Redlock over 3 nodes: the hold is on every node; one node left is no quorum", function()
  local rl = assert(redlockc.client(NODES))
  local l = assert(rl:lock("lua:redlock", 101))
  T.eq("acquire", true, l:acquire{ wait_ms = 0 })
  for i, port in ipairs(NODE_PORTS) do
    T.eq("count on node " .. i, "1", T.redis(port, "hget", "lua:redlock", rl:uuid() .. ":101"))
  end
  T.eq("hold_count", 1, l:hold_count())
  T.eq("release", true, l:release())
  for i, port in ipairs(NODE_PORTS) do
    T.eq("gone from node " .. i, "0", T.redis(port, "exists", "lua:redlock"))
  end
  rl:close()

  local lone = assert(redlockc.client({ NODES[1], DEAD_URI, DEAD2_URI }))
  T.fails("two of three nodes down", E.E_NO_QUORUM, assert(lone:lock("lua:redlock")):acquire{ wait_ms = 0 })
  lone:close()
end)

T.case("fenced_set writes with a token at least the fence, refuses a smaller one", function()
  local l = assert(client:lock("lua:fence"))
  T.eq("acquire", true, l:acquire{ wait_ms = 0, lease_ms = 20000 })
  local token = l:fencing_token()
  T.eq("write with a token past the hold's", true, client:fenced_set("lua:res", "v\0one", token + 1))
  T.eq("value stored, binary-safe", "v\0one", T.redis(PORT, "get", "lua:res"))
  T.eq("the same token writes again", true, client:fenced_set("lua:res", "two", token + 1))
  T.eq("an older token is refused", false, client:fenced_set("lua:res", "late", token))
  T.eq("value after the refusal", "two", T.redis(PORT, "get", "lua:res"))
  T.eq("fence", tostring(token + 1), T.redis(PORT, "get", "redlockc_fence:{lua:res}"))
  T.fails("a Redlock client is refused", E.E_INVAL,
          assert(redlockc.client(NODES)):fenced_set("lua:res", "x", token))
  T.ok("token 0 raises", not pcall(client.fenced_set, client, "lua:res", "x", 0))
  l:release()
end)

T.done()
