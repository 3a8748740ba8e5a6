-- test_fencing.lua - the client option fencing, against a redis-server of
-- this file's own (FENCE, started empty by tests/lua/run.sh): off by
-- default, a released lock leaves no key and fencing_token() says E_INVAL
-- naming the option; with fencing = 1 each hold takes a token from the
-- counter redisson_lock_token:{name}, the one key per name that stays.

local T = require "check"
local redlockc = require "redlockc"

local E = redlockc.errors
local PORT = T.env("FENCE_PORT")
local URI = T.env("FENCE_URI")
local NAMES = { "orders", "accounts", "jobs:7" }

-- KEYS * of the server, sorted, one line.
local function keys()
  local list = {}
  for k in T.redis(PORT, "keys", "*"):gmatch("[^\n]+") do list[#list + 1] = k end
  table.sort(list)
  return table.concat(list, " ")
end

T.case("by default a released lock leaves no key, and fencing_token() says E_INVAL", function()
  T.eq("the server starts empty", "0", T.redis(PORT, "dbsize"))
  local client = assert(redlockc.client(URI))
  for _, name in ipairs(NAMES) do
    local l <close> = assert(client:lock(name))
    T.eq(name .. " acquired", true, l:acquire{ wait_ms = 5000 })
    local ok, err, code = l:fencing_token()
    T.fails(name .. "'s fencing_token", E.E_INVAL, ok, err, code)
    T.ok("the message names the option and the lock",
         tostring(err):find("fencing is off", 1, true) and tostring(err):find("fencing=1", 1, true)
           and tostring(err):find(name, 1, true), err)
    T.eq(name .. " released", true, l:release())
  end
  T.eq("keys left", "", keys())
  client:close()
end)

T.case("with fencing = 1 each hold has a token and one counter key per name stays", function()
  local client = assert(redlockc.client(URI, { fencing = 1 }))
  local want = {}
  for _, name in ipairs(NAMES) do
    local l <close> = assert(client:lock(name))
    T.eq(name .. " acquired", true, l:acquire{ wait_ms = 5000 })
    local token = l:fencing_token()
    T.ok(name .. "'s token > 0", math.type(token) == "integer" and token > 0, token)
    T.eq(name .. " released", true, l:release())
    want[#want + 1] = "redisson_lock_token:{" .. name .. "}"
  end
  table.sort(want)
  T.eq("keys left", table.concat(want, " "), keys())
  client:close()
end)

T.done()
