-- test_logs.lua - client:logs(): the client's log lines, queued on the
-- library's threads and taken on the Lua thread, against a real redis-server
-- started by tests/lua/run.sh. SCRIPT FLUSH makes the next command a NOSCRIPT
-- reply, which the library logs at info ("... had lost the scripts").

local T = require "check"
local redlockc = require "redlockc"

local PORT = T.env("REDIS_PORT")
local URI = T.env("REDIS_URI")

T.case("a script reload is a line client:logs() returns, once", function()
  local client = assert(redlockc.client(URI))
  local lock = assert(client:lock("ll:reload"))
  T.eq("first acquire (scripts loaded)", true, lock:acquire{ wait_ms = 0 })
  T.eq("release", true, lock:release())
  T.eq("SCRIPT FLUSH", "OK", T.redis(PORT, "SCRIPT", "FLUSH"))
  T.eq("acquire after the flush", true, lock:acquire{ wait_ms = 0 })
  T.eq("release", true, lock:release())
  local lines, dropped
  for _ = 1, 50 do -- handed over at the end of an acquire; bounded, 5 s
    lines, dropped = client:logs()
    if #lines > 0 then break end
    os.execute("sleep 0.1")
  end
  -- One line per script reloaded (the acquire's, the release's).
  T.ok("one or two lines", #lines >= 1 and #lines <= 2, #lines)
  for i, line in ipairs(lines) do
    T.eq("line " .. i .. "'s level", "info", line.level)
    T.eq("line " .. i .. " names the reload on this node",
         "127.0.0.1:" .. PORT .. " had lost the scripts (NOSCRIPT): loaded them again", line.message)
  end
  T.eq("none dropped", 0, dropped)
  local again = client:logs()
  T.eq("taken once: the next call has none", 0, #again)
  lock:close()
  client:close()
  local after, d2 = client:logs()
  T.eq("after close: none", 0, #after)
  T.eq("after close: none dropped", 0, d2)
end)

T.done()
