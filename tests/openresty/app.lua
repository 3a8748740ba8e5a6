-- app.lua - the handlers of the OpenResty test server (nginx.conf.in):
--   /incr   takes a lock with resty.redlockc, increments a Redis counter
--           NON-atomically (GET, ngx.sleep, SET) and releases
--   /wait   waits for a lock held elsewhere (acquire with wait_ms)
--   /ping   answers at once; also one library call (locked()) and how many
--           requests are waiting in /wait right now
--   /stats  the largest number of /incr requests seen at once inside the
--           critical section, and in acquire (waiting for the lock)
--   /errors resty.redlockc's error names, "NAME=code" per line
--   /selftest  results and errors of the module's methods in a request
-- Redis itself is spoken to over a cosocket (mini RESP client below), so the
-- counter's GET and SET yield like any OpenResty I/O.

-- A value as the checks read it: an integral number in full (a fencing
-- token is about 2^51: tostring would give 14 digits and an exponent).
local function shown(v)
  if type(v) == "number" and v == math.floor(v) and math.abs(v) < 2^53 then
    return string.format("%d", v)
  end
  return tostring(v)
end

local ffi = require "ffi"
local redlockc = require "resty.redlockc"

local _M = {}
local client -- one per worker
local stats = ngx.shared.rlc_test
local REDIS_PORT = tonumber(os.getenv("REDIS_PORT"))

function _M.init_worker()
  local err, code
  -- fencing = 1: /selftest reads fencing tokens.
  client, err, code = redlockc.client("redis://127.0.0.1:" .. REDIS_PORT,
                                      { io_timeout_ms = 1000, connect_timeout_ms = 1000,
                                        fencing = 1 })
  if not client then
    ngx.log(ngx.ERR, "redlockc.client: ", err, " (", code, ")")
  end
end

-- One Redis command over a cosocket: the reply as a Lua value (nil for a
-- nil bulk), or raises on an error reply or I/O failure (a test bug).
local function redis(...)
  local args = { ... }
  local req = { "*", #args, "\r\n" }
  for _, a in ipairs(args) do
    a = tostring(a)
    req[#req + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
  end
  local sock = ngx.socket.tcp()
  sock:settimeout(5000)
  assert(sock:connect("127.0.0.1", REDIS_PORT))
  assert(sock:send(table.concat(req)))
  local line = assert(sock:receive("*l"))
  local kind, rest = line:sub(1, 1), line:sub(2)
  local value
  if kind == "+" then
    value = rest
  elseif kind == ":" then
    value = tonumber(rest)
  elseif kind == "$" then
    local n = tonumber(rest)
    if n >= 0 then value = assert(sock:receive(n + 2)):sub(1, n) end
  else
    error("redis: " .. line)
  end
  sock:setkeepalive(10000, 64)
  return value
end

local function arg(name, default)
  local v = ngx.var["arg_" .. name]
  return v and v ~= "" and v or default
end

-- stats[key] += delta, and stats["max_" .. key] = the largest value seen.
local function count(key, delta)
  local v = stats:incr(key, delta, 0)
  if v > (stats:get("max_" .. key) or 0) then stats:set("max_" .. key, v) end
end

function _M.incr()
  local key, lock_name = arg("key", "or:counter"), arg("lock", "or:counter-lock")
  count("acquiring", 1)
  local lock = assert(client:lock(lock_name)) -- owned by this request
  local ok, err, code = lock:acquire{ wait_ms = 30000 }
  count("acquiring", -1)
  if not ok then
    ngx.status = 503
    return ngx.say("acquire: ", err, " (", code, ")")
  end
  count("inside", 1)

  local v = tonumber(redis("GET", key)) or 0
  ngx.sleep(0.001) -- yield mid-update: another holder would lose ours
  redis("SET", key, v + 1)

  count("inside", -1)
  local rok, rerr, rcode = lock:release()
  if not rok then
    ngx.status = 500
    return ngx.say("release: ", rerr, " (", rcode, ")")
  end
  ngx.say("ok owner=", tostring(lock.owner):gsub("ULL$", ""), " value=", v + 1)
end

function _M.wait()
  local lock = assert(client:lock(arg("lock", "or:held")))
  local wait_ms = tonumber(arg("wait_ms", "10000"))
  stats:incr("waiting", 1, 0)
  ngx.update_time()
  local start = ngx.now()
  local ok, err, code = lock:acquire{ wait_ms = wait_ms, lease_ms = 5000 }
  stats:incr("waiting", -1)
  ngx.update_time()
  if not ok then
    ngx.status = 503
    return ngx.say("not acquired: ", err, " (", redlockc.errname(code), ")")
  end
  lock:release()
  ngx.say(string.format("acquired after %d ms", (ngx.now() - start) * 1000))
end

function _M.ping()
  local lock = assert(client:lock(arg("lock", "or:held")))
  local locked, err = lock:locked()
  ngx.say("pong waiting=", stats:get("waiting") or 0, " locked=", tostring(locked or err))
end

function _M.stats()
  ngx.say("max_inside=", stats:get("max_inside") or 0,
          " max_acquiring=", stats:get("max_acquiring") or 0)
end

-- Results and errors of resty.redlockc inside a request; prints one line
-- per failed check ("expected ..., saw ...") and then "selftest done".
function _M.selftest()
  -- Status codes as pattern text ("-5" has a magic "-").
  local E = setmetatable({}, { __index = function(_, k)
    return (tostring(redlockc.errors[k]):gsub("%-", "%%-"))
  end })
  local function check(what, expected, ...)
    local seen = table.concat({ shown((select(1, ...))), shown((select(2, ...))),
                                shown((select(3, ...))) }, " ")
    if not seen:find(expected) then
      ngx.say("FAIL ", what, ": expected /", expected, "/, saw ", seen)
    end
  end
  local name = "or:selftest"
  local a1, a2 = assert(client:lock(name)), assert(client:lock(name))
  check("two objects of one request share the owner", "true", a1.owner == a2.owner)
  check("acquire", "^true", a1:acquire{ wait_ms = 0 })
  check("the same request reenters through another object", "^true", a2:acquire{ wait_ms = 0 })
  check("hold_count", "^2 ", a1:hold_count())
  check("fencing_token", "^%d+ ", a1:fencing_token())
  local other = assert(client:lock(name, 77))
  check("an explicit other owner is busy", "^nil busy " .. E.NOT_ACQUIRED .. "$", other:acquire{ wait_ms = 0 })
  check("and after waiting 50 ms", "^nil busy 1$", other:acquire{ wait_ms = 50 })
  check("its release", "^nil .+ " .. E.E_NOT_OWNER .. "$", other:release())
  check("its fencing_token", "^nil .+ " .. E.E_NOT_OWNER .. "$", other:fencing_token())
  check("locked", "^true", other:locked())
  check("owned by the other", "^false", other:owned())
  a1:close() -- gives back a1's level
  check("a2 still holds one level", "^1 ", a2:hold_count())
  check("closed object", "^nil closed " .. E.E_CLOSED .. "$", a1:acquire{ wait_ms = 0 })
  check("release", "^true", a2:release())
  check("ttl of a free lock", "^%-2 ", a2:ttl())
  check("a fixed lease", "^true", other:acquire{ wait_ms = 0, lease_ms = 60000 })
  local ttl = other:ttl()
  check("its ttl", "true", ttl > 50000 and ttl <= 60000)
  check("extend", "^true", other:extend(120000))
  check("force_release by another owner", "^true", a2:force_release())
  check("then the holder's release", "^nil .+ " .. E.E_LOST .. "$", other:release())
  check("an empty name", "^nil .+ " .. E.E_INVAL .. "$", client:lock(""))
  check("owner 2^62", "^nil .+ " .. E.E_INVAL .. "$", client:lock(name, 2 ^ 62))
  check("a bad URI", "^nil .+ " .. E.E_INVAL .. "$", redlockc.client("bogus://x"))
  check("wait_ms a fraction raises", "^false .*wait_ms must be an integer", pcall(a2.acquire, a2, { wait_ms = 1.5 }))
  check("an unknown option raises", "^false .*unknown acquire option", pcall(a2.acquire, a2, { wait = 1 }))
  check("a method called with '.' raises", "^false .*lock:method", pcall(a2.release))

  -- Beyond 2^53 a double is no integer the FFI passes faithfully: 1e300 or
  -- 2^63 would arrive as INT64_MIN, which the library reads as "watchdog".
  for _, v in ipairs({ 1e300, 2 ^ 63, -1e300, 2 ^ 53 + 2, 0 / 0, 1 / 0 }) do
    check("lease_ms = " .. tostring(v) .. " raises", "^false .*lease_ms must be an integer",
          pcall(a2.acquire, a2, { wait_ms = 0, lease_ms = v }))
    check("extend(" .. tostring(v) .. ") raises", "^false .*must be an integer",
          pcall(a2.extend, a2, v))
  end
  check("and took nothing", "^%-2 ", a2:ttl())

  -- Owners are 1 .. 2^62-1 whatever their Lua type.
  for _, o in ipairs({ 0ULL, 0LL, -1LL, 4611686018427387904ULL }) do
    check("owner " .. tostring(o), "^nil .+ " .. E.E_INVAL .. "$", client:lock(name, o))
  end
  check("owner 2^62-1 as a uint64_t", "^resty%.redlockc%.lock",
        client:lock(name, 4611686018427387903ULL))
  check("owner 1LL", "^resty%.redlockc%.lock", client:lock(name, 1LL))
  check("an owner of another cdata type raises", "^false .*owner must be an integer",
        pcall(client.lock, client, name, ffi.new("double", 5)))

  -- Options: a small drift_factor is written without an exponent (the C
  -- parser takes digits and '.'); a fraction where ms go raises.
  local uri = "redis://127.0.0.1:" .. REDIS_PORT
  local tiny, terr, tcode = redlockc.client(uri, { drift_factor = 1e-5 })
  check("drift_factor = 1e-5 accepted", "^resty%.redlockc%.client", tiny, terr, tcode)
  if tiny then
    local t = assert(tiny:lock(name .. ":tiny"))
    check("a lock of that client", "^true", t:acquire{ wait_ms = 0, lease_ms = 5000 })
    t:release()
    tiny:close()
  end
  check("io_timeout_ms a fraction raises", "^false .*io_timeout_ms must be an integer",
        pcall(redlockc.client, uri, { io_timeout_ms = 1.5 }))

  -- Metrics and fenced writes: the blocking module's (a client of its own,
  -- so that the counts are this test's).
  local mc = assert(redlockc.blocking.client(uri, { fencing = 1 }))
  local m0 = assert(mc:metrics())
  check("metrics start at 0", "^0 0 nil$", m0.acquires, m0.busy)
  local ml = assert(mc:lock(name .. ":metrics", 5))
  ml:acquire{ wait_ms = 0 }
  ml:acquire{ wait_ms = 0 }
  local busy = assert(mc:lock(name .. ":metrics", 6))
  busy:acquire{ wait_ms = 0 }
  ml:release()
  ml:release()
  local m = assert(mc:metrics())
  check("two acquires counted", "^2 ", m.acquires)
  check("one busy counted", "^1 ", m.busy)
  check("wait buckets", "^12 ", #m.wait_buckets)
  check("the last bucket is +inf", "^inf", m.wait_buckets[#m.wait_buckets].le)
  -- Fenced writes: a later holder's token wins, an older one is refused.
  local fl = assert(mc:lock(name .. ":fenced", 8))
  check("a lock for a token", "^true", fl:acquire{ wait_ms = 0 })
  local token = fl:fencing_token()
  fl:release()
  check("a write with a later holder's token", "^true", mc:fenced_set(name .. ":resource", "new", token + 1))
  check("the older token is refused", "^false", mc:fenced_set(name .. ":resource", "old", token))
  check("the same token again is taken", "^true", mc:fenced_set(name .. ":resource", "again", token + 1))
  check("token 0 is refused", "^nil .+ " .. E.E_INVAL .. "$", mc:fenced_set(name .. ":resource", "x", 0))
  mc:close()
  check("metrics of a closed client", "^nil closed " .. E.E_CLOSED .. "$", mc:metrics())
  ngx.say("selftest done")
end

function _M.errors()
  local lines = {}
  for name, code in pairs(redlockc.errors) do
    lines[#lines + 1] = name .. "=" .. code
    assert(redlockc.errname(code) == name)
  end
  table.sort(lines)
  ngx.say(table.concat(lines, "\n"))
end

return _M
