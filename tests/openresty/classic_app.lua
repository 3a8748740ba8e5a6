-- classic_app.lua - the client option format = "classic" (tests/openresty/run.sh):
--   /classic?port=&module=engine|blocking&name=
--       a client of its own with format = "classic" (resty.redlockc, or
--       resty.redlockc.blocking); acquires name and says what the server
--       holds there (TYPE, and whether GET is "<client uuid>:<hex>"), what a
--       nested acquire by the same owner said, the hold count after it, the
--       release, and EXISTS after it: one line the suite compares.
--   /classic_fencing?port=&module=: what the client call said with
--       fencing = 1 beside format = "classic".
local redlockc = require "resty.redlockc"

local _M = {}

-- One command on a connection of its own; its reply as a string (bulk,
-- simple or integer), "nil" for a null bulk.
local function redis(port, ...)
  local sock = ngx.socket.tcp()
  sock:settimeout(2000)
  local ok, err = sock:connect("127.0.0.1", port)
  if not ok then return "connect: " .. tostring(err) end
  local args = { ... }
  local out = { "*" .. #args .. "\r\n" }
  for _, a in ipairs(args) do out[#out + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n" end
  sock:send(table.concat(out))
  local line = sock:receive("*l") or ""
  local reply = line:sub(2)
  if line:sub(1, 1) == "$" then
    local n = tonumber(reply)
    reply = n < 0 and "nil" or sock:receive(n + 2):sub(1, n)
  end
  sock:close()
  return reply
end

local function module_of(args)
  return args.module == "blocking" and redlockc.blocking or redlockc
end

function _M.run()
  local args = ngx.req.get_uri_args()
  local port, name = tostring(args.port), args.name
  local c, err, code = module_of(args).client("redis://127.0.0.1:" .. port, { format = "classic" })
  if not c then return ngx.say("client failed: ", err, " (", redlockc.errname(code), ")") end
  local lock = assert(c:lock(name))
  local ok
  ok, err, code = lock:acquire{ wait_ms = 2000 }
  if not ok then
    c:close()
    return ngx.say("acquire failed: ", err, " (", redlockc.errname(code), ")")
  end
  local said = { "type=" .. redis(port, "TYPE", name) }
  local value, uuid = redis(port, "GET", name), c:uuid()
  local shaped = value:sub(1, #uuid + 1) == uuid .. ":" and value:sub(#uuid + 2):match("^%x+$") ~= nil
  said[#said + 1] = "value=" .. (shaped and "<uuid>:<hex>" or value)
  ok, err, code = lock:acquire{ wait_ms = 0 }
  said[#said + 1] = "nested=" .. (ok and "held" or tostring(redlockc.errname(code)))
  said[#said + 1] = "not reentrant=" .. tostring(tostring(err):find("not reentrant", 1, true) ~= nil)
  said[#said + 1] = "value kept=" .. tostring(redis(port, "GET", name) == value)
  said[#said + 1] = "count=" .. tostring(lock:hold_count())
  ok, err, code = lock:release()
  said[#said + 1] = "release=" .. (ok and "true" or tostring(redlockc.errname(code)))
  said[#said + 1] = "exists=" .. redis(port, "EXISTS", name)
  c:close()
  ngx.say(table.concat(said, " "))
end

function _M.fencing()
  local args = ngx.req.get_uri_args()
  local c, err, code = module_of(args).client("redis://127.0.0.1:" .. tostring(args.port),
                                              { format = "classic", fencing = 1 })
  if c then
    c:close()
    return ngx.say("client made")
  end
  ngx.say(tostring(redlockc.errname(code)), " format named=", tostring(tostring(err):find("format", 1, true) ~= nil))
end

return _M
