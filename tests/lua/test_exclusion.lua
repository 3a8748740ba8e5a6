-- test_exclusion.lua - mutual exclusion between two Lua 5.4 processes: each
-- increments a counter file N times without any atomic operation, under one
-- lock. No update may be lost and no two critical sections may overlap.

local T = require "check"
local PORT, URI = T.env("REDIS_PORT"), T.env("REDIS_URI")
local WORK = T.env("RLC_LUA_WORK") -- a temporary directory of run.sh
local HERE = T.env("RLC_LUA_TESTS")
local N = 200
local NAME = "lua:exclusion"

local redlockc = require "redlockc"

-- Calls cond() until it is true, at most `tries` times, 20 ms apart.
local function poll(tries, cond)
  for _ = 1, tries do
    if cond() then return true end
    os.execute("sleep 0.02")
  end
  return false
end

T.case("two processes never overlap and lose no update", function()
  local counter, log = WORK .. "/counter", WORK .. "/sections.log"
  assert(io.open(counter, "w")):write("0"):close()
  assert(io.open(log, "w")):close()

  -- Hold the lock while the workers start, so that both begin by waiting
  -- and then contend from the same moment.
  local client = assert(redlockc.client(URI))
  local gate = assert(client:lock(NAME, 1))
  assert(gate:acquire{ wait_ms = 0 })

  local workers = {}
  for id = 1, 2 do
    local cmd = string.format("lua5.4 %s/exclusion_worker.lua %d %s %s %s %s %d 2>&1",
                              HERE, id, URI, NAME, counter, log, N)
    workers[id] = assert(io.popen(cmd))
  end
  -- Each waiting process has subscribed to the unlock channel.
  local channel = "redisson_lock__channel:{" .. NAME .. "}"
  local both = poll(500, function()
    return T.redis(PORT, "pubsub", "numsub", channel):match("(%d+)$") == "2"
  end)
  T.ok("both workers wait on the unlock channel (within 10 s)", both,
       T.redis(PORT, "pubsub", "numsub", channel))
  assert(gate:release())

  for id, p in ipairs(workers) do
    local out = p:read("a")
    local ok, how, code = p:close()
    T.eq("worker " .. id .. " exit status", "exit 0", string.format("%s %s", how, code))
    T.eq("worker " .. id .. " output", "done " .. id, (out:gsub("%s+$", "")))
  end

  local f = assert(io.open(counter))
  T.eq("counter after 2 x " .. N .. " unlocked read-modify-writes", tostring(2 * N), f:read("a"))
  f:close()

  -- Sections must nest nowhere: each "enter w i" is followed by "exit w i".
  local lines, overlaps, switches, last = {}, 0, 0, nil
  for line in io.lines(log) do lines[#lines + 1] = line end
  T.eq("log lines", 4 * N, #lines)
  for k = 1, #lines - 1, 2 do
    local w, i = lines[k]:match("^enter (%d) (%d+)$")
    if not w or lines[k + 1] ~= ("exit " .. w .. " " .. i) then
      overlaps = overlaps + 1
      if overlaps == 1 then
        T.ok("first overlap", false, lines[k] .. " | " .. tostring(lines[k + 1]))
      end
    end
    if last and w ~= last then switches = switches + 1 end
    last = w
  end
  T.eq("overlapping critical sections", 0, overlaps)
  T.ok("the lock changed hands between the processes", switches >= 1, switches)
  T.eq("the lock is free at the end", "0", T.redis(PORT, "exists", NAME))
  client:close()
end)

T.done()
