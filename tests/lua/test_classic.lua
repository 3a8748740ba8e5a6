-- test_classic.lua - the client option format = "classic" (the string lock
-- of redis-py's Lock, node-redlock and redsync), against the suite's shared
-- redis-server: the lock is a string key at its name holding
-- "<client uuid>:<attempt hex>", a nested acquire by the same owner is
-- nil, err, E_INVAL naming "not reentrant" (the hold stays), and release
-- leaves no key. fencing = 1 beside it is refused when the client is made.

local T = require "check"
local redlockc = require "redlockc"

local E = redlockc.errors
local PORT = T.env("REDIS_PORT")
local URI = T.env("REDIS_URI")

T.case("format = 'classic': a string key of '<uuid>:<hex>', not reentrant, no key after release", function()
  local client = assert(redlockc.client(URI, { format = "classic" }))
  local name = "lua:classic:" .. os.time() .. ":" .. math.random(1 << 30)
  local l <close> = assert(client:lock(name))
  T.eq("acquired", true, l:acquire{ wait_ms = 0 })
  T.eq("the key is a string", "string", T.redis(PORT, "type", name))
  local value = T.redis(PORT, "get", name)
  local uuid = client:uuid()
  T.ok("its value is '<client uuid>:<hex>'",
       value:sub(1, #uuid + 1) == uuid .. ":" and value:sub(#uuid + 2):match("^%x+$") ~= nil, value)
  local ok, err, code = l:acquire{ wait_ms = 0 }
  T.fails("a nested acquire by the same owner", E.E_INVAL, ok, err, code)
  T.ok("the error says why", tostring(err):find("not reentrant", 1, true), err)
  T.eq("the hold stays as it was", value, T.redis(PORT, "get", name))
  T.eq("one level held", 1, l:hold_count())
  T.eq("released", true, l:release())
  T.eq("no key left", "0", T.redis(PORT, "exists", name))
  client:close()
end)

T.case("fencing = 1 with format = 'classic' is refused when the client is made", function()
  local c, err, code = redlockc.client(URI, { format = "classic", fencing = 1 })
  T.fails("the client", E.E_INVAL, c, err, code)
  T.ok("the message names format", tostring(err):find("format", 1, true), err)
end)

T.done()
