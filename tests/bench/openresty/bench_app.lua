-- bench_app.lua - the OpenResty benchmark's handlers (tests/bench/openresty/run.sh):
--   /b/ping                 answers at once, no Redis (the "unrelated request")
--   /b/cycle?mod=&lock=     one acquire + release with resty.redlockc (mod=engine)
--                           or resty.redlockc.blocking (mod=blocking)
--   /b/cycles?mod=&tasks=&seconds=   `tasks` light threads of this request, each
--                           on its own lock, cycle acquire + release for `seconds`;
--                           prints JSON {cycles, cycles_s, p50_ms, p99_ms}
--   /b/waiters?n=&locks=    n light threads wait for `locks` locks held by this
--                           request (engine); then the locks are let go and every
--                           waiter takes and releases its lock in turn. JSON:
--                           completed, memory per parked waiter, hand-off p50/p99.
-- One client of each module per worker, io/connect timeouts 200 ms.

local redlockc = require "resty.redlockc"
local blocking = require "resty.redlockc.blocking"
local ffi = require "ffi"

local _M = {}
local PORT = tonumber(os.getenv("REDIS_PORT"))
local engine_client, blocking_client, waiters_client

function _M.init_worker()
  local uri = "redis://127.0.0.1:" .. PORT
  local opts = { io_timeout_ms = 200, connect_timeout_ms = 200 }
  engine_client = assert(redlockc.client(uri, opts))
  blocking_client = assert(blocking.client(uri, opts))
  -- the waiters' client: the library's default timeouts (1 s); 200 ms is
  -- shorter than Redis takes to answer 10,000 pipelined tries
  waiters_client = assert(redlockc.client(uri))
end

local function client_of(mod)
  return mod == "blocking" and blocking_client or engine_client
end

local function now_ms()
  ngx.update_time()
  return ngx.now() * 1000
end

-- The monotonic clock in µs, for hand-offs shorter than ngx.now()'s ms.
pcall(ffi.cdef, "typedef struct { long tv_sec; long tv_nsec; } rlc_bench_ts;")
pcall(ffi.cdef, "int clock_gettime(int clk_id, void *tp);")
local ts = ffi.new("rlc_bench_ts")
local function now_us()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1000
end

local function pct(sorted, p)
  if #sorted == 0 then return 0 end
  local i = math.max(1, math.min(#sorted, math.ceil(#sorted * p)))
  return sorted[i]
end

local function json(t)
  local parts = {}
  for k, v in pairs(t) do
    local s = type(v) == "number" and (v == math.floor(v) and string.format("%d", v)
      or string.format("%.3f", v)) or string.format("%q", tostring(v))
    parts[#parts + 1] = string.format("%q: %s", k, s)
  end
  table.sort(parts)
  return "{" .. table.concat(parts, ", ") .. "}"
end

local function arg(name, default)
  local v = ngx.var["arg_" .. name]
  return v and v ~= "" and v or default
end

function _M.ping()
  ngx.print("pong\n")
end

function _M.cycle()
  local lock = assert(client_of(arg("mod", "engine")):lock(arg("lock", "bench:cycle")))
  local ok, err = lock:acquire{ wait_ms = 1000 }
  if not ok then
    ngx.status = 503
    return ngx.print("acquire: ", err, "\n")
  end
  lock:release()
  ngx.print("ok\n")
end

-- Owners for the benchmark's light threads: distinct, explicit.
local owner_base = 0

function _M.cycles()
  local mod, tasks, seconds = arg("mod", "engine"), tonumber(arg("tasks", "64")),
    tonumber(arg("seconds", "3"))
  local client = client_of(mod)
  owner_base = owner_base + 100000
  local base = owner_base
  local stop = now_ms() + seconds * 1000
  local lat, errs = {}, 0
  local function task(i)
    local lock = assert(client:lock("bench:cyc:" .. mod .. ":" .. i, base + i))
    while now_ms() < stop do
      local t0 = now_us()
      local ok = lock:acquire{ wait_ms = 1000 }
      if ok then
        lock:release()
        lat[#lat + 1] = (now_us() - t0) / 1000
      else
        errs = errs + 1
      end
      if mod == "blocking" then ngx.sleep(0) end -- blocking calls never yield
    end
  end
  local t_start = now_ms()
  local threads = {}
  for i = 1, tasks do threads[i] = ngx.thread.spawn(task, i) end
  for i = 1, tasks do ngx.thread.wait(threads[i]) end
  local elapsed = (now_ms() - t_start) / 1000
  table.sort(lat)
  ngx.print(json{ mod = mod, tasks = tasks, cycles = #lat, errors = errs,
                  cycles_s = #lat / elapsed, p50_ms = pct(lat, 0.5), p99_ms = pct(lat, 0.99) },
            "\n")
end

local function rss_kb()
  local f = io.open("/proc/self/statm")
  local s = f:read("*l")
  f:close()
  local pages = tonumber(s:match("^%d+%s+(%d+)"))
  return pages * 4
end

function _M.waiters()
  local n, nlocks = tonumber(arg("n", "10000")), tonumber(arg("locks", "100"))
  local timeout_s = tonumber(arg("timeout_s", "120"))
  local client = waiters_client
  owner_base = owner_base + 1000000
  local base = owner_base
  local prefix = "bench:wait:" .. base .. ":"
  -- This request holds every lock first (owners base+1 .. base+nlocks).
  local holders = {}
  for j = 1, nlocks do
    holders[j] = assert(client:lock(prefix .. j, base + j))
    assert(holders[j]:acquire{ wait_ms = 0 })
  end
  collectgarbage()
  collectgarbage()
  local lua0, rss0 = collectgarbage("count"), rss_kb()
  local released_at = {} -- lock -> µs of its last release
  local handoffs, done, failed, first_err = {}, 0, 0, ""
  local function waiter(i)
    local j = i % nlocks + 1
    local lock = client:lock(prefix .. j, base + nlocks + i)
    local ok, err, code = lock:acquire{ wait_ms = timeout_s * 1000 }
    if not ok then
      failed = failed + 1
      if first_err == "" then first_err = tostring(err) .. " (" .. tostring(code) .. ")" end
      return
    end
    local t = now_us()
    if released_at[j] then handoffs[#handoffs + 1] = (t - released_at[j]) / 1000 end
    released_at[j] = now_us()
    lock:release()
    done = done + 1
  end
  local threads = {}
  for i = 1, n do threads[i] = ngx.thread.spawn(waiter, i) end
  -- Wait until every acquire is parked in the engine (an op in flight each).
  local deadline = now_ms() + 60000
  while client:stats().ops < n and now_ms() < deadline do ngx.sleep(0.05) end
  local parked = client:stats().ops
  -- Settle: the first tries (and the retry of every waiter once its lock's
  -- subscription is confirmed) are pipelined ahead of this probe's command
  -- on the same connection, so its answer means they were all answered.
  for _ = 1, 2 do
    local probe = client:lock(prefix .. "probe", base)
    probe:acquire{ wait_ms = 0 }
    probe:release()
    ngx.sleep(0.1)
  end
  local lua1, rss1 = collectgarbage("count"), rss_kb()
  local t0 = now_ms()
  for j = 1, nlocks do
    released_at[j] = now_us()
    holders[j]:release()
  end
  for i = 1, n do ngx.thread.wait(threads[i]) end
  local elapsed = (now_ms() - t0) / 1000
  table.sort(handoffs)
  ngx.print(json{ waiters = n, locks = nlocks, parked = parked, completed = done,
                  failed = failed, first_error = first_err, seconds = elapsed,
                  rss_kb_per_waiter = (rss1 - rss0) / n,
                  lua_kb_per_waiter = (lua1 - lua0) / n,
                  handoffs = #handoffs, handoff_p50_ms = pct(handoffs, 0.5),
                  handoff_p99_ms = pct(handoffs, 0.99) }, "\n")
end

return _M
