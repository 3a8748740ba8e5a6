-- check.lua - a small test harness for the Lua 5.4 suite (no busted here:
-- Debian CI has plain lua5.4). Cases are named by the behaviour they check;
-- a failed check prints what it expected and what it saw.
--
--   local T = require "check"
--   T.case("the same owner reenters", function() T.eq("hold count", 2, n) end)
--   T.done()    -- prints "N passed, N failed" and exits non-zero on failure

local T = {}
local passed, failed, current = 0, 0, "?"

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  if math.type(v) == "float" then return string.format("%s (float)", v) end
  return tostring(v)
end

local function fail(what, msg)
  failed = failed + 1
  io.write(string.format("not ok - %s: %s: %s\n", current, what, msg))
end

-- eq(what, expected, seen)
function T.eq(what, expected, seen)
  if expected == seen and math.type(expected) == math.type(seen) then
    passed = passed + 1
    return true
  end
  fail(what, "expected " .. show(expected) .. ", saw " .. show(seen))
  return false
end

-- ok(what, cond, seen): cond true; seen is printed when it is not.
function T.ok(what, cond, seen)
  if cond then
    passed = passed + 1
    return true
  end
  fail(what, "saw " .. show(seen))
  return false
end

-- fails(what, expected_code, call()): the call returned nil, err, code (an
-- expected failure) with that code and a non-empty message. Returns err.
function T.fails(what, expected_code, ok, err, code)
  if ok == nil and type(err) == "string" and err ~= "" and code == expected_code
     and math.type(code) == "integer" then
    passed = passed + 1
    return err
  end
  fail(what, string.format("expected nil, <message>, %s; saw %s, %s, %s",
                           show(expected_code), show(ok), show(err), show(code)))
end

-- raises(what, pattern, f, ...): f(...) raises an error matching pattern.
function T.raises(what, pattern, f, ...)
  local ok, err = pcall(f, ...)
  if not ok and tostring(err):find(pattern) then
    passed = passed + 1
    return true
  end
  fail(what, string.format("expected an error matching %q, saw %s", pattern,
                           ok and "no error" or show(err)))
  return false
end

-- case(name, fn): runs fn; an error in it fails the case (and says where).
function T.case(name, fn)
  current = name
  local before = failed
  local ok, err = xpcall(fn, debug.traceback)
  if not ok then fail("raised", tostring(err)) end
  io.write(string.format("%s - %s\n", failed == before and "ok" or "FAILED", name))
  current = "?"
end

function T.done()
  io.write(string.format("%d passed, %d failed\n", passed, failed))
  os.exit(failed == 0)
end

-- A raw Redis command with redis-cli, to look at the server directly (what
-- any other client of the same Redis would see). Returns its output, trimmed.
function T.redis(port, ...)
  local args = { "redis-cli", "-h", "127.0.0.1", "-p", tostring(port) }
  for _, a in ipairs({ ... }) do
    args[#args + 1] = "'" .. tostring(a):gsub("'", "'\\''") .. "'"
  end
  local p = assert(io.popen(table.concat(args, " ") .. " 2>&1"))
  local out = p:read("a")
  p:close()
  return (out:gsub("%s+$", ""))
end

-- Environment set by tests/lua/run.sh.
function T.env(name)
  local v = os.getenv(name)
  if not v or v == "" then error("environment variable " .. name .. " is not set (run tests/lua/run.sh)") end
  return v
end

return T
