-- engine_app.lua - handlers for the non-blocking driver's checks
-- (resty.redlockc on the engine; tests/openresty/run.sh):
--   /e/hold?lock=&ms=&wait_ms=   acquires (watchdog), sleeps ms, and returns
--                                WITHOUT releasing: finish_request() in the
--                                log phase must release it
--   /e/cycle?lock=&hold_ms=      acquire, sleep, release; says the owner
--   /e/ping                      answers at once, no Redis
--   /e/stats                     the engine client's ops in flight, open conns
--   /e/lost?lock=                a watchdog hold whose key is deleted behind
--                                its back: owned() turns false, release E_LOST
--   /e/pushed?lock=              the same with the default 30 s lease: the
--                                loss is pushed (loss_push), not found at the
--                                renewal 10 s later
--   /e/refused?lock=             an ACL user without +client: loss push
--                                refused, said once in the error log
--   /e/renew?lock=               a watchdog hold (1.5 s) kept 4 s by renewals
--   /e/metrics?lock=             client:metrics() of a client of its own:
--                                counts after an acquire, a busy try, a wait
--                                of ~150 ms and a blocking twin's acquire,
--                                then renewals before and after a 1 s hold
--   /e/redlock?lock=&expect=     acquire + release over 3 nodes; how many
--                                nodes had the key while held
--   /e/selftest                  acquire/extend/release results in a request
--   /e/sentinel?lock=            acquire + release through redis-sentinel://;
--                                which master had the key while held
--   /e/cluster?n=                n locks through redis-cluster://: each held
--                                on exactly one master (its slot's)
-- Clients: one per worker each (made in init_worker): `main` on REDIS_PORT,
-- `fast` with a 1.5 s watchdog (renewals every 0.5 s), `red` over REDIS_PORT,
-- REDIS_PORT2, REDIS_PORT3 (Redlock).

-- A value as the checks read it: an integral number in full (a fencing
-- token is about 2^51: tostring would give 14 digits and an exponent).
local function shown(v)
  if type(v) == "number" and v == math.floor(v) and math.abs(v) < 2^53 then
    return string.format("%d", v)
  end
  return tostring(v)
end

local redlockc = require "resty.redlockc"

local _M = {}
local PORTS = { tonumber(os.getenv("REDIS_PORT")), tonumber(os.getenv("REDIS_PORT2")),
                tonumber(os.getenv("REDIS_PORT3")) }
local main, fast, red, sen, clu

function _M.init_worker()
  local uri = "redis://127.0.0.1:" .. PORTS[1]
  -- fencing = 1 where a handler reads fencing tokens (selftest, redlock).
  main = assert(redlockc.client(uri, { io_timeout_ms = 1000, connect_timeout_ms = 1000,
                                       fencing = 1 }))
  fast = assert(redlockc.client(uri, { watchdog_timeout_ms = 1500 }))
  if PORTS[2] and PORTS[3] then
    red = assert(redlockc.client({ uri, "redis://127.0.0.1:" .. PORTS[2],
                                   "redis://127.0.0.1:" .. PORTS[3] },
                                 { node_timeout_ms = 200, io_timeout_ms = 300, fencing = 1 }))
  end

  local sentinel_uri = os.getenv("SENTINEL_URI")
  if sentinel_uri and sentinel_uri ~= "" then
    sen = assert(redlockc.client(sentinel_uri, { io_timeout_ms = 500, connect_timeout_ms = 500 }))
  end
  local cluster_uri = os.getenv("CLUSTER_URI")
  if cluster_uri and cluster_uri ~= "" then clu = assert(redlockc.client(cluster_uri)) end
end

function _M.main() return main end

-- One Redis command over a cosocket to node i (default 1), or to a port.
local function redis(i, ...)
  local args = { ... }
  local req = { "*", #args, "\r\n" }
  for _, a in ipairs(args) do
    a = tostring(a)
    req[#req + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
  end
  local sock = ngx.socket.tcp()
  sock:settimeout(3000)
  assert(sock:connect("127.0.0.1", PORTS[i] or i))
  assert(sock:send(table.concat(req)))
  local line = assert(sock:receive("*l"))
  local kind, rest = line:sub(1, 1), line:sub(2)
  local value = rest
  if kind == ":" then
    value = tonumber(rest)
  elseif kind == "-" then
    error("redis: " .. line)
  elseif kind == "$" then
    local n = tonumber(rest)
    value = n >= 0 and assert(sock:receive(n + 2)):sub(1, n) or nil
  end
  sock:setkeepalive(10000, 16)
  return value
end

local function arg(name, default)
  local v = ngx.var["arg_" .. name]
  return v and v ~= "" and v or default
end

local function pid_of(owner)
  return tostring(owner / 4294967296ULL):gsub("ULL$", "")
end

function _M.hold()
  local lock = assert(main:lock(arg("lock", "or:e:hold")))
  local ok, err, code = lock:acquire{ wait_ms = tonumber(arg("wait_ms", "0")) }
  if not ok then
    ngx.status = 503
    return ngx.say("acquire: ", err, " (", code, ")")
  end
  ngx.say("held")
  ngx.flush(true)
  ngx.sleep(tonumber(arg("ms", "0")) / 1000)
  ngx.say("returning without release")
end

function _M.cycle()
  local lock = assert(main:lock(arg("lock", "or:e:cycle")))
  local ok, err, code = lock:acquire{ wait_ms = tonumber(arg("wait_ms", "30000")) }
  if not ok then
    ngx.status = 503
    return ngx.say("acquire: ", err, " (", code, ")")
  end
  local hold = tonumber(arg("hold_ms", "0"))
  if hold > 0 then ngx.sleep(hold / 1000) end
  local rok, rerr, rcode = lock:release()
  if not rok then
    ngx.status = 500
    return ngx.say("release: ", rerr, " (", rcode, ")")
  end
  ngx.say("ok pid=", pid_of(lock.owner))
end

function _M.ping()
  ngx.say("pong")
end

function _M.stats()
  local s = main:stats()
  ngx.say("ops=", s.ops, " conns_open=", s.conns_open, " pump=", tostring(s.pump))
end

function _M.lost()
  local name = arg("lock", "or:e:lost")
  local lock = assert(fast:lock(name))
  assert(lock:acquire{ wait_ms = 0 })
  local before = lock:owned()
  redis(1, "DEL", name) -- taken away behind the holder's back
  local seen = false
  for _ = 1, 100 do -- 10 s at most; renewals come every 0.5 s
    if not lock:owned() then seen = true break end
    ngx.sleep(0.1)
  end
  local _, err, code = lock:release()
  ngx.say("owned before=", tostring(before), " lost seen=", tostring(seen), " validity=",
          lock:validity(), " release=", tostring(redlockc.errname(code)), " (", tostring(err), ")")
end

function _M.pushed()
  local name = arg("lock", "or:e:pushed")
  local lock = assert(main:lock(name))
  assert(lock:acquire{ wait_ms = 0 })
  redis(1, "DEL", name) -- the hold joins loss push 50 ms after the acquire
  local seen = false
  for _ = 1, 200 do -- 2 s at most; the renewal is 10 s away
    if not lock:owned() then seen = true break end
    ngx.sleep(0.01)
  end
  local _, _, code = lock:release()
  ngx.say("pushed=", tostring(seen), " release=", tostring(redlockc.errname(code)))
end

-- Lines of nginx's error log (run.sh starts nginx with -e <prefix>/error.log)
-- that name a loss_push refusal.
local function refusals_logged()
  local f = io.open(ngx.config.prefix() .. "error.log")
  if not f then return -1 end
  local n = 0
  for line in f:lines() do
    if line:find("resty.redlockc: loss_push:", 1, true) and line:find("refused", 1, true) then
      n = n + 1
    end
  end
  f:close()
  return n
end

-- /e/refused: a client whose ACL user lacks +client. Loss push is refused
-- (found at renewal instead) and the engine's warning reaches the error
-- log once, however many renewals follow.
function _M.refused()
  redis(1, "ACL", "SETUSER", "ornc", "on", ">pw", "~*", "&*", "+@all", "-client")
  local c = assert(redlockc.client("redis://ornc:pw@127.0.0.1:" .. PORTS[1],
                                   { watchdog_timeout_ms = 900 }))
  local lock = assert(c:lock(arg("lock", "or:e:refused")))
  assert(lock:acquire{ wait_ms = 0 })
  local seen = 0
  for _ = 1, 300 do -- 3 s at most
    seen = refusals_logged()
    if seen ~= 0 then break end
    ngx.sleep(0.01)
  end
  ngx.sleep(0.7) -- two renewals more: the refusal is not said again
  local later = refusals_logged()
  local ok = lock:release()
  c:close()
  ngx.say("logged=", seen, " later=", later, " release=", tostring(ok))
end

-- A watchdog hold (1.5 s lease) kept for 4 s: the pump's renewals keep it.
function _M.renew()
  local name = arg("lock", "or:e:renew")
  local lock = assert(fast:lock(name))
  assert(lock:acquire{ wait_ms = 0 })
  ngx.sleep(4)
  local pttl = redis(1, "PTTL", name)
  local owned = lock:owned()
  local ok, err = lock:release()
  ngx.say("held 4 s: pttl>0=", tostring(pttl > 0), " owned=", tostring(owned), " release=",
          tostring(ok or err))
end

-- /e/metrics: the counters client:metrics() gives, on a client made here
-- (so that other checks' locks do not count): one acquire, one try that
-- finds the lock busy, one acquire that waits for a holder that lets go
-- 150 ms later (as Redisson does: DEL, then the unlock message), and one
-- acquire through the client's blocking twin, which the sum includes.
-- Then renewals of a watchdog hold (600 ms lease: renewed every 200 ms)
-- before and after 1 s. Answers
-- "acquires=3 busy=1 waits=1 wait_ms_sum=N bucketed=1 renewals=A->B".
function _M.metrics()
  local name = arg("lock", "or:e:metrics")
  local c = assert(redlockc.client("redis://127.0.0.1:" .. PORTS[1],
                                   { watchdog_timeout_ms = 600 }))
  -- a step that did not give what it should ends the answer, saying so
  local function step(what, ok, err, code)
    if ok then return true end
    ngx.say(what, " failed: ", tostring(err), " (", tostring(code), ")")
    c:close()
    return false
  end
  local first = assert(c:lock(name, 1))
  if not step("acquire", first:acquire{ wait_ms = 0 }) then return end
  local second = assert(c:lock(name, 2))
  local ok, err, code = second:acquire{ wait_ms = 0 }
  if not step("a try on the held lock answering busy", not ok and err == "busy", err, code) or
     not step("release", first:release()) then
    return
  end

  redis(1, "HSET", name, "external-holder:1", 1)
  redis(1, "PEXPIRE", name, 30000)
  local holder = ngx.thread.spawn(function()
    ngx.sleep(0.15)
    redis(1, "DEL", name)
    redis(1, "PUBLISH", "redisson_lock__channel:{" .. name .. "}", 0)
  end)
  ok, err, code = second:acquire{ wait_ms = 5000 }
  ngx.thread.wait(holder)
  if not step("the wait for the external holder", ok, err, code) or
     not step("release", second:release()) then
    return
  end

  local twin = assert(c:blocking():lock(name .. ":twin", 3))
  if not step("the blocking twin's acquire", twin:acquire{ wait_ms = 0 }) or
     not step("the blocking twin's release", twin:release()) then
    return
  end

  local m = assert(c:metrics())
  local last = m.wait_buckets[#m.wait_buckets]
  local hold = assert(c:lock(name .. ":renew", 4))
  if not step("the watchdog hold", hold:acquire{ wait_ms = 0 }) then return end
  ngx.sleep(1)
  local renewals = assert(c:metrics()).renewals
  if not step("the watchdog hold's release", hold:release()) then return end
  c:close()
  ngx.say("acquires=", m.acquires, " busy=", m.busy, " waits=", m.waits, " wait_ms_sum=",
          m.wait_ms_sum, " bucketed=", last and last.count, " renewals=", m.renewals, "->",
          renewals)
end

function _M.redlock()
  if not red then return ngx.say("no Redlock nodes") end
  local name = arg("lock", "or:e:red")
  local lock = assert(red:lock(name))
  local ok, err, code = lock:acquire{ wait_ms = 2000 }
  if not ok then
    ngx.status = 503
    return ngx.say("acquire: ", err, " (", tostring(redlockc.errname(code)), ")")
  end
  local have = 0
  for i = 1, 3 do
    local okq, n = pcall(redis, i, "EXISTS", name)
    if okq and n == 1 then have = have + 1 end
  end
  local token = lock:fencing_token()
  local rok, rerr, rcode = lock:release()
  ngx.say("acquired nodes_with_key=", have, " token=", shown(token), " release=",
          tostring(rok or redlockc.errname(rcode)), rok and "" or (" " .. tostring(rerr)))
end

function _M.sentinel()
  if not sen then return ngx.say("no sentinel group") end
  local name = arg("lock", "or:e:sen")
  local lock = assert(sen:lock(name))
  local ok, err, code = lock:acquire{ wait_ms = 2000 }
  if not ok then
    ngx.status = 503
    return ngx.say("acquire: ", err, " (", tostring(redlockc.errname(code)), ")")
  end
  local on = {}
  for port in (os.getenv("SENTINEL_DATA") or ""):gmatch("%d+") do
    -- the key is replicated: the master is the one that counts
    local okq, n = pcall(redis, tonumber(port), "EXISTS", name)
    local okr, info = pcall(redis, tonumber(port), "INFO", "replication")
    if okq and n == 1 and okr and info:find("role:master", 1, true) then on[#on + 1] = port end
  end
  local rok, rerr, rcode = lock:release()
  ngx.say("acquired on=", table.concat(on, ","), " release=",
          tostring(rok or redlockc.errname(rcode)), rok and "" or (" " .. tostring(rerr)))
end

function _M.cluster()
  if not clu then return ngx.say("no cluster") end
  local ports = {}
  for port in (os.getenv("CLUSTER_URI") or ""):gmatch(":(%d+)") do ports[#ports + 1] = tonumber(port) end
  local n, good, used, nused = tonumber(arg("n", "30")), 0, {}, 0
  for i = 1, n do
    local name = "or:cl:" .. i
    local lock = assert(clu:lock(name))
    local ok, err = lock:acquire{ wait_ms = 5000 }
    if not ok then return ngx.say("acquire ", name, ": ", err) end
    local on = {}
    for _, port in ipairs(ports) do
      local okq, v = pcall(redis, port, "EXISTS", name)
      local okr, info = pcall(redis, port, "INFO", "replication")
      if okq and v == 1 and okr and info:find("role:master", 1, true) then on[#on + 1] = port end
    end
    if #on == 1 then
      good = good + 1
      if not used[on[1]] then used[on[1]], nused = true, nused + 1 end
    end
    lock:release()
  end
  ngx.say(good, " ok, masters used ", nused)
end

-- Results of the engine-driven calls in a request; one FAIL line per
-- failed check, then "engine selftest done".
function _M.selftest()
  local function check(what, expected, ...)
    local seen = table.concat({ shown((select(1, ...))), shown((select(2, ...))),
                                shown((select(3, ...))) }, " ")
    if not seen:find(expected) then
      ngx.say("FAIL ", what, ": expected /", expected, "/, saw ", seen)
    end
  end
  -- status codes as pattern text ("-5" has a magic "-")
  local E = setmetatable({}, { __index = function(_, k)
    return (tostring(redlockc.errors[k]):gsub("%-", "%%-"))
  end })
  local name = "or:e:self"
  local a = assert(main:lock(name))
  check("acquire", "^true", a:acquire{ wait_ms = 0 })
  check("reenter", "^true", a:acquire{ wait_ms = 0 })
  check("hold_count 2", "^2 ", a:hold_count())
  check("owned", "^true", a:owned())
  check("the key has our field", "^2 ", tostring(redis(1, "HGET", name, main:uuid() .. ":"
    .. tostring(a.owner):gsub("ULL$", ""))))
  check("fencing token", "^%d+ ", a:fencing_token())
  check("validity of a watchdog hold", "^%d+ ", a:validity())
  local other = assert(main:lock(name, 99))
  check("another owner: busy at once", "^nil busy " .. E.NOT_ACQUIRED, other:acquire{ wait_ms = 0 })
  check("another owner: busy after 100 ms", "^nil busy " .. E.NOT_ACQUIRED,
        other:acquire{ wait_ms = 100 })
  check("another owner's release", "^nil .+ " .. E.E_NOT_OWNER, other:release())
  check("extend to a fixed lease", "^true", a:extend(60000))
  local ttl = redis(1, "PTTL", name)
  check("its PTTL", "true", ttl > 50000 and ttl <= 60000)
  check("validity after extend", "true", a:validity() > 50000)
  check("release 1", "^true", a:release())
  check("release 2", "^true", a:release())
  check("key gone", "^0 ", tostring(redis(1, "EXISTS", name)))
  check("release once more", "^nil .+ " .. E.E_NOT_OWNER, a:release())
  check("hold_count 0", "^0 ", a:hold_count())
  check("fixed lease", "^true", a:acquire{ wait_ms = 0, lease_ms = 30000 })
  local pttl = redis(1, "PTTL", name)
  check("its PTTL", "true", pttl > 20000 and pttl <= 30000)
  a:close()
  check("close released it", "^0 ", tostring(redis(1, "EXISTS", name)))
  check("closed object", "^nil closed " .. E.E_CLOSED, a:acquire{ wait_ms = 0 })
  check("locked", "^false", other:locked())
  check("bad name", "^nil .+ " .. E.E_INVAL, main:lock(""))
  check("a fraction raises", "^false .*wait_ms must be an integer",
        pcall(other.acquire, other, { wait_ms = 0.5 }))
  -- a waiter woken by a release from another request of this worker
  local b = assert(main:lock(name .. ":w", 1001))
  assert(b:acquire{ wait_ms = 0 })
  local t = ngx.thread.spawn(function()
    local w = assert(main:lock(name .. ":w", 1002))
    local ok, err = w:acquire{ wait_ms = 10000 }
    if ok then w:release() end
    return ok, err
  end)
  ngx.sleep(0.05)
  check("release wakes the waiter", "^true", b:release())
  local _, wok, werr = ngx.thread.wait(t)
  check("the waiter got it", "^true", wok, werr)
  ngx.say("engine selftest done")
end

return _M
