-- held_app.lua - "held means held" (tests/openresty/run.sh): what a lock
-- object says about its hold answers from the hold's validity at the moment
-- of the call, and a reply that came before its deadline is not timed out.
--   /h/fixed?lock=     a fixed lease (600 ms) runs out while another owner
--                      takes the lock: owned(), hold_count(), fencing_token(),
--                      validity() of the first (line 1); the loss in the
--                      error log without anyone asking, and the release
--                      (line 2)
--   /h/blocked?lock=   the worker blocked (a busy loop) past a 600 ms
--                      watchdog lease while another client (blocking, its
--                      own connection) takes the lock: the first look after
--   /h/validity?lock=  validity() sampled every 20 ms over 3.2 s of a
--                      healthy watchdog hold (lease 1.2 s: renewed every
--                      400 ms): its least value, and the renewals meanwhile
--   /h/grant?lock=     Redis paused 200 ms (CLIENT PAUSE) as an acquire is
--                      sent on a client with io_timeout_ms = 500, and the
--                      worker blocked 1.5 s right after: the grant that came
--                      at 200 ms, while the worker was blocked, is a grant
-- Each handler makes its own clients and closes them.

local redlockc = require "resty.redlockc"

local _M = {}
local PORT = tonumber(os.getenv("REDIS_PORT"))
local URI = "redis://127.0.0.1:" .. PORT

local function arg(name, default)
  local v = ngx.var["arg_" .. name]
  return v and v ~= "" and v or default
end

-- One Redis command on a cosocket of its own; the reply's first line.
local function redis_line(...)
  local args = { ... }
  local req = { "*", #args, "\r\n" }
  for _, a in ipairs(args) do
    a = tostring(a)
    req[#req + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
  end
  local sock = ngx.socket.tcp()
  sock:settimeout(3000)
  assert(sock:connect("127.0.0.1", PORT))
  assert(sock:send(table.concat(req)))
  local line = assert(sock:receive("*l"))
  sock:close()
  return line
end

-- Seconds on nginx's clock, brought up to date (a busy loop must, or the
-- clock stays where the loop began).
local function now_s()
  ngx.update_time()
  return ngx.now()
end

-- Keeps the worker busy (no yield) until done() says so or max_s passed;
-- returns done()'s last answer.
local function busy(max_s, done)
  local start, seen = now_s(), nil
  repeat
    seen = done(now_s() - start)
  until seen or now_s() - start > max_s
  return seen
end

-- Whether the error log has a line saying the hold of name was lost.
local function loss_logged(name)
  local f = io.open(ngx.config.prefix() .. "error.log")
  if not f then return false end
  local needle = "resty.redlockc: lost the hold of " .. name .. " "
  for line in f:lines() do
    if line:find(needle, 1, true) then
      f:close()
      return true
    end
  end
  f:close()
  return false
end

local function errname(code) return tostring(redlockc.errname(code)) end

-- "owned=.. hold_count=.. token=<value or nil ERRNAME> validity=.."
local function look(lock)
  local token, _, code = lock:fencing_token()
  return "owned=" .. tostring(lock:owned()) .. " hold_count=" .. tostring(lock:hold_count()) ..
         " token=" .. (token and "number" or "nil " .. errname(code)) ..
         " validity=" .. tostring(lock:validity())
end

function _M.fixed()
  local name = arg("lock", "or:h:fixed")
  local c = assert(redlockc.client(URI, { fencing = 1 })) -- look() reads the token
  local first = assert(c:lock(name, 1))
  local ok, err, code = first:acquire{ wait_ms = 0, lease_ms = 600 }
  if not ok then
    c:close()
    return ngx.say("acquire: ", err, " (", errname(code), ")")
  end
  local before = first:owned()
  local other = assert(c:lock(name, 2))
  ok, err, code = other:acquire{ wait_ms = 5000 } -- it is free once the lease ends
  ngx.say("before=", tostring(before), " other took it=", tostring(ok or errname(code)), " ",
          look(first))
  local logged = false
  for _ = 1, 200 do -- 2 s at most
    logged = loss_logged(name)
    if logged then break end
    ngx.sleep(0.01)
  end
  local _, _, rcode = first:release()
  if ok then other:release() end
  c:close()
  ngx.say("loss logged=", tostring(logged), " release=", errname(rcode))
end

function _M.blocked()
  local name = arg("lock", "or:h:blocked")
  local c = assert(redlockc.client(URI, { watchdog_timeout_ms = 600, fencing = 1 }))
  local bc = assert(redlockc.blocking.client(URI))
  local mine = assert(c:lock(name, 1))
  local theirs = assert(bc:lock(name, 7))
  local ok, err, code = mine:acquire{ wait_ms = 0 }
  if not ok then
    c:close()
    bc:close()
    return ngx.say("acquire: ", err, " (", errname(code), ")")
  end
  ngx.sleep(0.5) -- a renewal or so
  local before = mine:owned()
  -- The worker busy: no renewal goes out. Once the lease has run out the
  -- other client takes the lock (each try is one blocking round trip).
  local took = busy(5, function(elapsed)
    return elapsed > 0.7 and theirs:acquire{ wait_ms = 0, lease_ms = 30000 } or nil
  end)
  local seen = look(mine) -- the first look, before the pump ran
  ngx.say("before=", tostring(before), " other took it=", tostring(took == true), " ", seen)
  ngx.sleep(0.05)
  mine:release()
  if took then theirs:release() end
  c:close()
  bc:close()
end

function _M.validity()
  local name = arg("lock", "or:h:validity")
  local lease = 1200
  local c = assert(redlockc.client(URI, { watchdog_timeout_ms = lease }))
  local lock = assert(c:lock(name, 1))
  local ok, err, code = lock:acquire{ wait_ms = 0 }
  if not ok then
    c:close()
    return ngx.say("acquire: ", err, " (", errname(code), ")")
  end
  local r0 = assert(c:metrics()).renewals
  local least = math.huge
  for _ = 1, 160 do -- 3.2 s
    least = math.min(least, lock:validity())
    ngx.sleep(0.02)
  end
  local renewals = assert(c:metrics()).renewals - r0
  lock:release()
  c:close()
  ngx.say("above a third of the lease=", tostring(least > lease / 3), " renewals>=5=",
          tostring(renewals >= 5), " (least ", least, " ms, ", renewals, " renewals)")
end

function _M.grant()
  local name = arg("lock", "or:h:grant")
  local c = assert(redlockc.client(URI, { io_timeout_ms = 500, connect_timeout_ms = 3000 }))
  -- connections open and scripts loaded before Redis pauses
  local warm = assert(c:lock(name .. ":warm", 1))
  assert(warm:acquire{ wait_ms = 0 })
  assert(warm:release())
  local lock = assert(c:lock(name, 1))
  local paused = redis_line("CLIENT", "PAUSE", 200)
  local t = ngx.thread.spawn(function() return lock:acquire{ wait_ms = 0 } end)
  ngx.sleep(0.02) -- the pump's writer sends the acquire; Redis holds it
  busy(1.5, function() return nil end) -- 3 x io_timeout_ms: the answer comes meanwhile
  local _, ok, err, code = ngx.thread.wait(t)
  ngx.say("pause=", paused, " acquire=", tostring(ok or (errname(code) .. ": " .. tostring(err))))
  if ok then lock:release() end
  c:close()
end

return _M
