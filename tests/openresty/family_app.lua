-- family_app.lua - the lock family in the OpenResty test server
-- (nginx.conf.in). Each handler takes module=engine (default: resty.redlockc,
-- the family on the engine over cosockets) or module=blocking
-- (resty.redlockc.blocking, 1.0's module):
--   /family/selftest  results and errors of rwlock, fair_lock, semaphore,
--                     permit_semaphore and multi_lock in a request
--   /family/rw?side=read|write  one request holds the read-write lock
--                     "or:rw" across an ngx.sleep; counts who is inside
--   /family/sem       one request holds a permit of "or:sem" (3 permits)
--   /family/stats     what the counters saw
--   /family/wait?name=&wait_ms=  waits for the write side of name (held
--                     elsewhere); counts itself in "fam_waiting" meanwhile
--   /family/ping      answers at once: how many /family/wait are waiting
--   /family/warm?name=  a plain lock's wait of 50 ms for name (held
--                     elsewhere): the engine client's command and subscriber
--                     connections are open afterwards
-- One client per module per worker, made on first use.

-- A value as the checks read it: an integral number in full (a fencing
-- token is about 2^51: tostring would give 14 digits and an exponent).
local function shown(v)
  if type(v) == "number" and v == math.floor(v) and math.abs(v) < 2^53 then
    return string.format("%d", v)
  end
  return tostring(v)
end

local MODULES = { engine = "resty.redlockc", blocking = "resty.redlockc.blocking" }

local _M = {}
local stats = ngx.shared.rlc_test
local clients = {}

local function module_name()
  return ngx.var.arg_module == "blocking" and "blocking" or "engine"
end

local function get_client()
  local m = module_name()
  if not clients[m] then
    clients[m] = assert(require(MODULES[m]).client(
      "redis://127.0.0.1:" .. os.getenv("REDIS_PORT"),
      { io_timeout_ms = 1000, connect_timeout_ms = 1000 }))
  end
  return clients[m]
end

local function count(key, delta)
  local v = stats:incr(key, delta, 0)
  if v > (stats:get("max_" .. key) or 0) then stats:set("max_" .. key, v) end
  return v
end

function _M.rw()
  local write = ngx.var.arg_side == "write"
  local rw = assert(get_client():rwlock("or:rw"))
  local side = write and rw:write() or rw:read()
  local ok, err, code = side:acquire{ wait_ms = 30000 }
  if not ok then
    ngx.status = 503
    return ngx.say("acquire: ", err, " (", code, ")")
  end
  local r = count("rw_readers", write and 0 or 1)
  local w = count("rw_writers", write and 1 or 0)
  if (w > 0 and r > 0) or w > 1 then stats:incr("rw_violations", 1, 0) end
  ngx.sleep(0.005)
  count("rw_readers", write and 0 or -1)
  count("rw_writers", write and -1 or 0)
  local rok, rerr, rcode = side:release()
  if not rok then
    ngx.status = 500
    return ngx.say("release: ", rerr, " (", rcode, ")")
  end
  ngx.say("ok")
end

function _M.sem()
  local s = assert(get_client():semaphore("or:sem", 3))
  local ok, err, code = s:acquire{ wait_ms = 30000 }
  if not ok then
    ngx.status = 503
    return ngx.say("acquire: ", err, " (", code, ")")
  end
  count("sem_inside", 1)
  ngx.sleep(0.005)
  count("sem_inside", -1)
  assert(s:release())
  ngx.say("ok")
end

function _M.stats()
  ngx.say("max_readers=", stats:get("max_rw_readers") or 0,
          " max_writers=", stats:get("max_rw_writers") or 0,
          " violations=", stats:get("rw_violations") or 0,
          " max_permits=", stats:get("max_sem_inside") or 0)
end

function _M.wait()
  local rw = assert(get_client():rwlock(ngx.var.arg_name, 1))
  local started = ngx.now()
  stats:incr("fam_waiting", 1, 0)
  local ok, err, code = rw:write():acquire{ wait_ms = tonumber(ngx.var.arg_wait_ms) }
  stats:incr("fam_waiting", -1, 0)
  if not ok then
    ngx.status = 503
    return ngx.say("acquire: ", err, " (", code, ")")
  end
  ngx.update_time()
  local ms = math.floor((ngx.now() - started) * 1000)
  rw:close()
  ngx.say("acquired after ", ms, " ms")
end

function _M.ping()
  ngx.say("pong waiting=", stats:get("fam_waiting") or 0)
end

function _M.warm()
  local l = assert(get_client():lock(ngx.var.arg_name, 1))
  local ok, err = l:acquire{ wait_ms = 50 }
  ngx.say(tostring(ok), " ", tostring(err))
end

function _M.selftest()
  local redlockc = require(MODULES[module_name()])
  local c = get_client()
  local E = redlockc.errors
  local function check(what, expected, ...)
    local seen = table.concat({ shown((select(1, ...))), shown((select(2, ...))),
                                shown((select(3, ...))) }, " ")
    if seen ~= expected then
      ngx.say("FAIL ", what, ": expected '", expected, "', saw '", seen, "'")
    end
  end
  -- an expected failure: nil, a message, this code
  local function fails(what, expected_code, ok, err, code)
    if ok ~= nil or type(err) ~= "string" or code ~= expected_code then
      ngx.say("FAIL ", what, ": expected nil, <message>, ", expected_code, "; saw ",
              tostring(ok), ", ", tostring(err), ", ", tostring(code))
    end
  end
  -- read-write lock: explicit owners 1 and 2 in one request
  local a, b = assert(c:rwlock("or:frw", 1)), assert(c:rwlock("or:frw", 2))
  check("read 1", "true nil nil", a:read():acquire{ wait_ms = 0 })
  check("read 2", "true nil nil", b:read():acquire{ wait_ms = 0 })
  check("mode", "read nil nil", a:mode())
  local w = assert(c:rwlock("or:frw", 3))
  fails("a write waits 50 ms for the readers", E.NOT_ACQUIRED, w:write():acquire{ wait_ms = 50 })
  a:close(); b:close()
  check("write", "true nil nil", w:write():acquire{ wait_ms = 0, lease_ms = 5000 })
  check("the writer reads", "true nil nil", w:read():acquire{ wait_ms = 0 })
  check("write hold_count", "1 nil nil", w:write():hold_count())
  w:close()
  check("mode after close", "free nil nil", assert(c:rwlock("or:frw", 4)):mode())
  -- fair lock
  local f1, f2 = assert(c:fair_lock("or:fair", 1)), assert(c:fair_lock("or:fair", 2))
  check("fair acquire", "true nil nil", f1:acquire{ wait_ms = 0, lease_ms = 5000 })
  fails("fair busy", E.NOT_ACQUIRED, f2:acquire{ wait_ms = 30 })
  check("fair release", "true nil nil", f1:release())
  check("fair 2", "true nil nil", f2:acquire{ wait_ms = 0 })
  f2:close()
  fails("release without hold", E.E_NOT_OWNER, f1:release())
  -- semaphore
  local s = assert(c:semaphore("or:fsem", 2))
  check("take 2", "true nil nil", s:acquire{ permits = 2 })
  fails("none left", E.NOT_ACQUIRED, s:acquire{ wait_ms = 20 })
  check("release 2", "true nil nil", s:release(2))
  check("available", "2 nil nil", s:available())
  -- permit-expirable semaphore
  local p = assert(c:permit_semaphore("or:fpsem", 1))
  local id = p:acquire{ lease_ms = 5000 }
  if type(id) ~= "string" or #id ~= 32 then ngx.say("FAIL permit id: ", tostring(id)) end
  check("release the permit", "true nil nil", p:release(id))
  check("available", "1 nil nil", p:available())
  -- multi-name lock
  local m = assert(c:multi_lock({ "or:m1", "or:m2", "or:m1" }, 5))
  check("size", "2 nil nil", m:size())
  local other = assert(c:lock("or:m2", 6))
  assert(other:acquire{ wait_ms = 0, lease_ms = 5000 })
  fails("multi busy on one name", E.NOT_ACQUIRED, m:acquire{ wait_ms = 0 })
  check("no partial hold", "false nil nil", assert(c:lock("or:m1", 7)):locked())
  other:release()
  check("multi acquire", "true nil nil", m:acquire{ wait_ms = 100 })
  check("multi release", "true nil nil", m:release())
  -- refusals
  local many = assert(redlockc.client({ "redis://127.0.0.1:1", "redis://127.0.0.1:2",
                                        "redis://127.0.0.1:3" }))
  fails("fair over 3 masters", E.E_INVAL, many:fair_lock("x"))
  fails("semaphore over 3 masters", E.E_INVAL, many:semaphore("x"))
  many:close()
  ngx.say("family selftest done")
end

return _M
