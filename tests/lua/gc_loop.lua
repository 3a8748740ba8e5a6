-- gc_loop.lua - run by tests/lua/run.sh under valgrind: 10,000 lock handles
-- made and dropped without close(), so that only __gc frees them, plus
-- clients closed or dropped while their locks live. valgrind then reports
-- no byte definitely or indirectly lost.
local redlockc = require "redlockc"
local uri = assert(os.getenv("REDIS_URI"))
local N = 10000

local client = assert(redlockc.client(uri))
local done = 0
for i = 1, N do
  local l = assert(client:lock("lua:gc-loop:" .. (i % 16), i))
  -- Every tenth handle takes and gives back the lock: handles with a
  -- history (a hold, a released hold) are freed by __gc too.
  if i % 10 == 0 then
    assert(l:acquire{ wait_ms = 0, lease_ms = 10000 })
    assert(l:release())
  end
  if i % 1000 == 0 then
    -- A client closed while its lock lives: the lock frees later (E_CLOSED).
    local c = assert(redlockc.client(uri))
    local orphan = assert(c:lock("lua:gc-loop:orphan:" .. i, i))
    assert(orphan:acquire{ wait_ms = 0, lease_ms = 1000 })
    c:close()
    local ok, _, code = orphan:acquire{ wait_ms = 0 }
    assert(ok == nil and code == redlockc.errors.E_CLOSED, "orphan lock after client close")
    -- And a client dropped together with a lock that still holds: both
    -- become garbage at once.
    local c2 = assert(redlockc.client(uri))
    assert(assert(c2:lock("lua:gc-loop:dropped:" .. i, i)):acquire{ wait_ms = 0, lease_ms = 1000 })
  end
  done = done + 1
end
collectgarbage()
collectgarbage()
print(string.format("gc loop: %d lock handles made and dropped, Lua heap %d KiB", done,
                    math.floor(collectgarbage("count"))))
