-- test_family.lua - the lock family from Lua 5.4 (read-write lock, fair
-- lock, semaphores, multi-name lock) against a real redis-server started by
-- tests/lua/run.sh; redis-cli shows what the server holds (Redisson's
-- layout, docs/FAMILY.md). Owners are explicit ids: one Lua state is one
-- OS thread, so contention is between owners.

local T = require "check"
local redlockc = require "redlockc"

local PORT = T.env("REDIS_PORT")
local URI = T.env("REDIS_URI")
local NODES = { T.env("NODE1_URI"), T.env("NODE2_URI"), T.env("NODE3_URI") }
local E = redlockc.errors
local client = assert(redlockc.client(URI))

T.case("readers of two owners overlap; the mode field says read", function()
  local a, b = assert(client:rwlock("lf:rw", 1)), assert(client:rwlock("lf:rw", 2))
  T.eq("owner 1 reads", true, a:read():acquire{ wait_ms = 0 })
  T.eq("owner 2 reads too", true, b:read():acquire{ wait_ms = 0 })
  T.eq("mode field", "read", T.redis(PORT, "HGET", "lf:rw", "mode"))
  T.eq("mode()", "read", a:mode())
  T.fails("a writer waits for the readers", E.NOT_ACQUIRED,
          assert(client:rwlock("lf:rw", 3)):write():acquire{ wait_ms = 50 })
  T.eq("owner 1 read release", true, a:read():release())
  T.eq("owner 2 read release", true, b:read():release())
  T.eq("mode() once free", "free", a:mode())
  T.eq("no key left", "0", T.redis(PORT, "EXISTS", "lf:rw"))
end)

T.case("a writer excludes other owners and may take read levels itself", function()
  local w, r = assert(client:rwlock("lf:rw2", 1)), assert(client:rwlock("lf:rw2", 2))
  T.eq("write", true, w:write():acquire{ lease_ms = 10000 })
  T.eq("the writer reads", true, w:read():acquire{ wait_ms = 0 })
  T.eq("write hold_count", 1, w:write():hold_count())
  T.eq("read hold_count", 1, w:read():hold_count())
  T.ok("write validity is an integer in (0, 10000)", math.type(w:write():validity()) == "integer"
       and w:write():validity() > 0, w:write():validity())
  T.fails("another owner's read", E.NOT_ACQUIRED, r:read():acquire{ wait_ms = 0 })
  T.fails("another owner's write", E.NOT_ACQUIRED, r:write():acquire{ wait_ms = 0 })
  w:close() -- gives back the read and the write level
  T.eq("no key left after close", "0", T.redis(PORT, "EXISTS", "lf:rw2"))
  T.eq("the other owner writes now", true, r:write():acquire{ wait_ms = 0 })
  T.eq("release", true, r:write():release())
  T.fails("a second release", E.E_NOT_OWNER, r:write():release())
end)

T.case("fair lock: reentrant, and a waiter that gives up leaves the queue", function()
  local f1, f2 = assert(client:fair_lock("lf:fair", 1)), assert(client:fair_lock("lf:fair", 2))
  T.eq("acquire", true, f1:acquire{ lease_ms = 10000 })
  T.eq("reenter", true, f1:acquire{ wait_ms = 0 })
  T.eq("hold_count", 2, f1:hold_count())
  T.fails("owner 2 waits 100 ms", E.NOT_ACQUIRED, f2:acquire{ wait_ms = 100 })
  T.eq("the queue is empty again", "0", T.redis(PORT, "LLEN", "redisson_lock_queue:{lf:fair}"))
  f1:release(); f1:release()
  T.eq("owner 2 gets it", true, f2:acquire{ wait_ms = 0 })
  f2:close()
  T.eq("no key left", "0", T.redis(PORT, "EXISTS", "lf:fair"))
end)

T.case("fair lock and semaphores are refused over several masters", function()
  local many = assert(redlockc.client(NODES))
  T.fails("fair_lock", E.E_INVAL, many:fair_lock("x"))
  T.fails("semaphore", E.E_INVAL, many:semaphore("x"))
  T.fails("permit_semaphore", E.E_INVAL, many:permit_semaphore("x"))
  many:close()
end)

T.case("semaphore: n permits, never more; set only if unset", function()
  local s = assert(client:semaphore("lf:sem", 3))
  T.eq("the count in Redis", "3", T.redis(PORT, "GET", "lf:sem"))
  T.eq("try_set_permits on a set semaphore", false, s:try_set_permits(9))
  T.eq("take 2", true, s:acquire{ permits = 2 })
  T.eq("available", 1, s:available())
  T.fails("2 more", E.NOT_ACQUIRED, s:acquire{ permits = 2, wait_ms = 50 })
  T.eq("release 2", true, s:release(2))
  T.eq("available", 3, s:available())
  T.raises("a fractional permit count", "permits", s.acquire, s, { permits = 1.5 })
  T.raises("an unknown option", "unknown acquire option", s.acquire, s, { lease_ms = 5 })
end)

T.case("permit-expirable semaphore: a permit's lease runs out, its release is E_LOST", function()
  local p = assert(client:permit_semaphore("lf:psem", 1))
  local id = p:acquire{ lease_ms = 200 }
  T.ok("the id is 32 hex digits", type(id) == "string" and id:match("^%x+$") and #id == 32, id)
  T.fails("none left", E.NOT_ACQUIRED, p:acquire{ wait_ms = 0, lease_ms = 1000 })
  local back = false
  for _ = 1, 100 do -- up to 5 s
    if p:available() == 1 then back = true break end
    os.execute("sleep 0.05")
  end
  T.ok("the permit came back", back, p:available())
  T.fails("the late release", E.E_LOST, p:release(id))
  T.eq("and added nothing", 1, p:available())
  T.raises("no lease", "lease_ms", p.acquire, p, { wait_ms = 0 })
end)

T.case("multi-name lock: all names or none", function()
  local blocker = assert(client:lock("lf:m3", 9))
  T.eq("blocker", true, blocker:acquire{ lease_ms = 10000 })
  local m = assert(client:multi_lock({ "lf:m1", "lf:m2", "lf:m3", "lf:m1" }, 8))
  T.eq("size (de-duplicated)", 3, m:size())
  T.fails("busy on one name", E.NOT_ACQUIRED, m:acquire{ wait_ms = 0 })
  T.eq("no partial hold", "0", T.redis(PORT, "EXISTS", "lf:m1", "lf:m2"))
  blocker:release()
  T.eq("acquire", true, m:acquire{ wait_ms = 0 })
  T.eq("all three held", "3", T.redis(PORT, "EXISTS", "lf:m1", "lf:m2", "lf:m3"))
  T.eq("release", true, m:release())
  T.eq("none left", "0", T.redis(PORT, "EXISTS", "lf:m1", "lf:m2", "lf:m3"))
  T.raises("a name that is no string", "name 2", client.multi_lock, client, { "a", 5 })
end)

T.case("<close> gives back what the handle took; a closed client refuses", function()
  do
    local f <close> = assert(client:fair_lock("lf:close", 1))
    assert(f:acquire{ wait_ms = 0 })
  end
  T.eq("freed by <close>", "0", T.redis(PORT, "EXISTS", "lf:close"))
  local c2 = assert(redlockc.client(URI))
  local rw = assert(c2:rwlock("lf:closed"))
  c2:close()
  T.fails("rwlock on a closed client", E.E_CLOSED, c2:rwlock("x"))
  T.fails("read on a closed client", E.E_CLOSED, rw:read():acquire{ wait_ms = 0 })
end)

T.done()
