-- exclusion_worker.lua ID URI NAME COUNTER LOG N - one process of
-- test_exclusion.lua: N times, under the lock, read the counter file, write
-- it back plus one, and log "enter ID i" / "exit ID i" around that.
local redlockc = require "redlockc"
local id, uri, name, counter_path, log_path, n = ...
n = math.tointeger(tonumber(n))

local client = assert(redlockc.client(uri))
local lock <close> = assert(client:lock(name))
local log = assert(io.open(log_path, "a")) -- O_APPEND: whole lines, in order
log:setvbuf("no")

local function read_counter()
  local f = assert(io.open(counter_path))
  local v = math.tointeger(tonumber(f:read("a")))
  f:close()
  return v
end

for i = 1, n do
  local ok, err, code = lock:acquire{ wait_ms = 20000 }
  if not ok then
    io.stderr:write(string.format("worker %s: acquire %d: %s (%s)\n", id, i, err, code))
    os.exit(2)
  end
  log:write(string.format("enter %s %d\n", id, i))
  local v = read_counter()
  -- Widen the window between read and write, so that a second holder
  -- would be caught losing an update.
  local x = 0
  for k = 1, 20000 do x = x + k end
  assert(x > 0)
  local f = assert(io.open(counter_path, "w"))
  f:write(tostring(v + 1))
  f:close()
  log:write(string.format("exit %s %d\n", id, i))
  assert(lock:release())
end
log:close()
print("done " .. id)
