-- fencing_app.lua - the client option fencing (tests/openresty/run.sh), on
-- a redis-server of its own that the suite reads afterwards (KEYS *).
--   /fencing?port=&module=engine|blocking&fencing=0|1
--       a client of its own for this request (resty.redlockc, or
--       resty.redlockc.blocking), with fencing = 1 when asked; acquires and
--       releases three names; per name, what fencing_token() said while
--       held: "token" (a number > 0) or "<ERRNAME> option named=<bool>"
--       (the message says fencing is off and names the option).
local redlockc = require "resty.redlockc"

local _M = {}
local NAMES = { "orders", "accounts", "jobs:7" }

-- What lock:fencing_token() said, as the suite compares it.
local function token_said(lock)
  local token, err, code = lock:fencing_token()
  if token then return (type(token) == "number" and token > 0) and "token" or "token<=0" end
  local named = tostring(err):find("fencing is off", 1, true) ~= nil
                and tostring(err):find("fencing=1", 1, true) ~= nil
  return tostring(redlockc.errname(code)) .. " option named=" .. tostring(named)
end

function _M.run()
  local args = ngx.req.get_uri_args()
  local module = args.module == "blocking" and redlockc.blocking or redlockc
  local opts = args.fencing == "1" and { fencing = 1 } or nil
  local c, err, code = module.client("redis://127.0.0.1:" .. tostring(args.port), opts)
  if not c then return ngx.say("client failed: ", err, " (", redlockc.errname(code), ")") end
  local said = {}
  for _, name in ipairs(NAMES) do
    local lock = assert(c:lock(name))
    local ok
    ok, err, code = lock:acquire{ wait_ms = 2000 }
    if not ok then
      c:close()
      return ngx.say("acquire ", name, " failed: ", err, " (", redlockc.errname(code), ")")
    end
    said[#said + 1] = name .. ": " .. token_said(lock)
    ok, err, code = lock:release()
    if not ok then
      c:close()
      return ngx.say("release ", name, " failed: ", err, " (", redlockc.errname(code), ")")
    end
  end
  c:close()
  ngx.say(table.concat(said, ", "))
end

return _M
