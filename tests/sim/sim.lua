-- sim.lua - deterministic simulation of the lock protocol (FoundationDB's
-- way): simulated Redis nodes running the library's real scripts
-- (SCRIPTS, from c/src/scripts.c), a simulated network that delays,
-- stalls, cuts and reorders across connections, SCRIPT FLUSH, paused
-- holders, and clients that follow the protocol of c/src/blocking/lock.c and mux.c
-- (attempt ids, undo on any connection, redo after a cut, no resend of an
-- abandoned request, release by level with the last one's `upto`).
-- Everything runs on one simulated clock from one seed: a failing seed
-- replays exactly.
--
-- Checked in every schedule:
--   overlaps   two clients in their critical section of one lock, both
--              within the validity the library would report (must be 0)
--   residue    lock fields left on a node once every client released and
--              the network went quiet: left behind by a failed acquire, or
--              orphan levels (must be 0)
--   tokens     on one node, a new holder's fencing token not above the
--              last one (must be 0)
--   liveness   after faults stop, a client that cannot get a free lock
--              within the lease of a leftover (must be 0)

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local Redis = dofile(here .. "redis.lua")
local NIL = Redis.NIL

local opts = { seed = os.time(), schedules = 1000, profile = "short", mutate = "", verbose = 0 }
for _, a in ipairs(arg or {}) do
  local k, v = a:match("^(%w+)=(.*)$")
  if k then opts[k] = tonumber(v) or v end
end

-- A mutation breaks one rule on purpose: the run must then find violations
-- (shows that the checks can fail).
local scripts = {}
for name, src in pairs(SCRIPTS) do scripts[name] = src end
if opts.mutate == "notombstone" then
  scripts.acquire = scripts.acquire:gsub("if redis.call%('hexists', KEYS%[3%], ARGV%[3%]%) == 1 then",
    "if false then", 1)
elseif opts.mutate == "noepoch" then
  for _, n in ipairs({ "release", "undo", "renew" }) do
    scripts[n] = scripts[n]:gsub("%(redis.call%('hget', (%w+), 'e'%) or ''%) ~= epoch",
      "false"):gsub("%(redis.call%('hget', att, 'e'%) or ''%) == string.sub%(rec, a %+ 1, b %- 1%)", "true")
  end
elseif opts.mutate == "noupto" then
  scripts.release = scripts.release:gsub("if seq and upto and seq <= upto", "if seq", 1)
elseif opts.mutate ~= "" then
  error("unknown mutation " .. opts.mutate)
end

---------------------------------------------------------------- event loop
local now, seq, heap = 0, 0, {}

local function less(a, b) return a.t < b.t or (a.t == b.t and a.s < b.s) end
local function push(ev)
  heap[#heap + 1] = ev
  local i = #heap
  while i > 1 do
    local p = i // 2
    if less(heap[i], heap[p]) then heap[i], heap[p] = heap[p], heap[i]; i = p else break end
  end
end
local function pop()
  local top, last = heap[1], heap[#heap]
  heap[#heap] = nil
  if #heap > 0 then
    heap[1] = last
    local i = 1
    while true do
      local l, r, m = 2 * i, 2 * i + 1, i
      if l <= #heap and less(heap[l], heap[m]) then m = l end
      if r <= #heap and less(heap[r], heap[m]) then m = r end
      if m == i then break end
      heap[i], heap[m] = heap[m], heap[i]
      i = m
    end
  end
  return top
end
local function at(t, fn)
  seq = seq + 1
  push({ t = t, s = seq, fn = fn })
end

local rnd = math.random
local function chance(p) return rnd() < p end

---------------------------------------------------------------- one schedule
local function schedule(seed)
  math.randomseed(seed)
  now, seq, heap = 0, 0, {}
  local cfg = {
    nodes = chance(0.5) and 1 or 3,
    clients = rnd(2, 4),
    locks = rnd(1, 2),
    lease = rnd(150, 1500),
    io = rnd(20, 200),
    rounds = rnd(4, 10),
    faults = chance(0.85),
  }
  local q = cfg.nodes // 2 + 1
  local nodes = {}
  for i = 1, cfg.nodes do nodes[i] = Redis.new(i) end
  local stats = { overlaps = 0, residue = 0, tokens = 0, liveness = 0, grants = 0, cuts = 0,
                  stalls = 0, flushes = 0, pauses = 0, timeouts = 0, noscript = 0 }
  local faults_on = cfg.faults
  local function log(...) if opts.verbose > 0 then print(now, ...) end end

  local function drift(lease) return math.ceil(lease * 0.01) + 2 end
  local function delay() return rnd(0, 2) end

  -- connections -------------------------------------------------------
  local function new_conn(cl, i)
    local c = { cl = cl, node = nodes[i], i = i, dead = false, fresh = true,
                fwd = now, back = now, inflight = {}, outq = {}, stall_until = 0 }
    cl.conns[i] = c
    return c
  end

  local kick

  -- bytes to the server leave in order: a connection's queue is served
  -- from its head only, so stalls and pauses never reorder it
  local function schedule_delivery(c, r)
    local t = math.max(c.fwd, now + delay())
    c.fwd = t
    r.undelivered, r.t = true, t
    c.outq[#c.outq + 1] = r
    at(t, function() kick(c) end)
  end

  local function cut(c, why)
    if c.dead then return end
    c.dead = true
    stats.cuts = stats.cuts + 1
    log("cut", c.cl.id, c.i, why)
    -- bytes already on their way may still reach the server: a prefix
    local pending = {}
    for _, r in ipairs(c.inflight) do if r.undelivered then pending[#pending + 1] = r end end
    local keep = rnd(0, #pending)
    for k = keep + 1, #pending do pending[k].discarded = true end
    for _, r in ipairs(c.inflight) do
      if r.waiter then
        r.done, r.status = true, "CONNECT"
        r.waiter = nil
      elseif r.redo then
        local copy = { name = r.name, keys = r.keys, argv = r.argv, kind = "eval", redo = true }
        table.insert(c.cl.redo[c.i], copy)
      end
    end
    c.inflight = {}
    if c.wake then c.wake() end
  end

  -- the library's send: reconnect when dead or stale, redo first
  local function send(cl, i, r)
    local c = cl.conns[i]
    if c and not c.dead and r.waiter and #c.inflight > 0 then
      local head = c.inflight[1]
      local waiting = false
      for _, x in ipairs(c.inflight) do waiting = waiting or x.waiter ~= nil end
      if not waiting and now - head.sent > cfg.io then cut(c, "stale") end
    end
    if not c or c.dead then
      c = new_conn(cl, i)
      local redo = cl.redo[i]
      cl.redo[i] = {}
      for _, x in ipairs(redo) do
        x.sent = now
        c.inflight[#c.inflight + 1] = x
        schedule_delivery(c, x)
      end
    end
    r.sent = now
    c.inflight[#c.inflight + 1] = r
    schedule_delivery(c, r)
    return c
  end

  local function on_reply(c, r, reply)
    if c.dead then return end
    assert(c.inflight[1] == r, "replies out of order")
    table.remove(c.inflight, 1)
    if r.kind == "sha" and type(reply) == "table" and reply.err and reply.err:match("^NOSCRIPT")
        and r.waiter and not r.retried then
      stats.noscript = stats.noscript + 1
      r.kind, r.retried = "eval", true -- sent again as EVAL, behind what is queued
      c.inflight[#c.inflight + 1] = r
      schedule_delivery(c, r)
      return
    end
    if r.waiter then
      r.done, r.status, r.reply = true, "OK", reply
      local w = r.waiter
      r.waiter = nil
      w()
    end
  end

  local function execute(c, r)
    r.undelivered = false
    local node = c.node
    node.now = now
    if c.fresh then -- the handshake loads every script on a new connection
      c.fresh = false
      for name in pairs(scripts) do node:script_load(name) end
    end
    local reply
    if r.kind == "sha" and not node:has_script(r.name) then
      reply = { err = "NOSCRIPT No matching script." }
    else
      node:script_load(r.name)
      reply = node:eval(r.name, scripts[r.name], r.keys, r.argv)
    end
    if opts.verbose > 1 then
      local rep = type(reply) == "table" and (reply.err or table.concat(reply, ",")) or tostring(reply)
      log("exec", "node" .. node.id, "client" .. c.cl.id, r.name, r.keys[1], table.concat(r.argv, " "), "->", rep,
          "|", table.concat(Redis.dump(node, r.keys[1]), " "), "|", table.concat(Redis.dump(node, r.keys[#r.keys]), " "))
    end
    if c.dead then return end
    local t = math.max(c.back, now + delay())
    c.back = t
    at(t, function() on_reply(c, r, reply) end)
  end

  kick = function(c)
    while #c.outq > 0 do
      local r = c.outq[1]
      if r.discarded then
        table.remove(c.outq, 1)
      else
        if r.t > now then return end -- its own kick comes
        local hold = math.max(c.stall_until, c.node.paused_until or 0)
        if hold > now then
          at(hold, function() kick(c) end)
          return
        end
        table.remove(c.outq, 1)
        execute(c, r)
      end
    end
  end

  -- clients ------------------------------------------------------------
  local clients, locks = {}, {}
  for k = 1, cfg.locks do locks[k] = "lk" .. k end
  local last_token = {}

  local function resume(cl)
    if coroutine.status(cl.co) == "suspended" then
      local ok, err = coroutine.resume(cl.co)
      if not ok then error(debug.traceback(cl.co, tostring(err)), 0) end
    end
  end

  local function sleep(cl, ms)
    local t = now + ms
    at(t, function() resume(cl) end)
    repeat coroutine.yield() until now >= t
  end

  -- sends one script to each node in `which`; waits for them until the
  -- deadline; returns the requests
  local function call_all(cl, name, keys, argv, deadline)
    local reqs = {}
    for i = 1, #nodes do
      local r = { name = name, keys = keys, argv = argv, kind = "sha",
                  waiter = function() resume(cl) end }
      reqs[i] = r
      send(cl, i, r)
    end
    at(deadline, function() resume(cl) end)
    while true do
      local all = true
      for _, r in ipairs(reqs) do all = all and r.done end
      if all then break end
      if now >= deadline then
        for _, r in ipairs(reqs) do
          if not r.done then
            r.done, r.status, r.waiter = true, "TIMEOUT", nil
            stats.timeouts = stats.timeouts + 1
          end
        end
        break
      end
      coroutine.yield()
    end
    return reqs
  end

  local function detached(cl, i, name, keys, argv)
    send(cl, i, { name = name, keys = keys, argv = argv, kind = "eval", redo = true })
  end

  local function keys_of(lk, second)
    return { lk, second == "channel" and ("redisson_lock__channel:{" .. lk .. "}")
               or ("redisson_lock_token:{" .. lk .. "}"),
             "redlockc_attempts:{" .. lk .. "}" }
  end

  local function in_cs_others(cl, lk)
    for _, o in ipairs(clients) do
      if o ~= cl and o.cs[lk] and o.cs[lk] > now then return o end
    end
  end

  local function acquire(cl, lk, lease_req)
    local h = cl.holds[lk]
    if h and h.lost then return false end
    local nested = h and h.count > 0
    local lease = nested and h.lease or lease_req
    cl.next_attempt = cl.next_attempt + 1
    local attempt = cl.next_attempt
    local id = string.format("%s:%x", cl.uuid, attempt)
    local start = now
    local outer = nested and string.format("%s:%x", cl.uuid, h.attempts[1]) or ""
    local reqs = call_all(cl, "acquire", keys_of(lk), { tostring(lease), cl.field, id, outer },
                          start + cfg.io)
    local yes, busy, undo, inner = 0, 0, {}, 0
    local token = 0
    for i, r in ipairs(reqs) do
      undo[i] = true
      local rep = r.reply
      if r.status == "OK" and type(rep) == "table" and not rep.err and rep.n and rep.n >= 2 then
        if rep[1] >= 1 then
          yes = yes + 1
          if rep[4] == 1 then inner = inner + 1 end
          if rep[2] > token then token = rep[2] end
        elseif rep[1] == 0 then
          busy = busy + 1
          undo[i] = false
        end
      end
    end
    local validity = lease - (now - start) - drift(lease)
    log("acquire", cl.id, lk, id, "yes", yes, "busy", busy, "validity", validity)
    if yes >= q and nested and inner < q then
      -- the outer hold expired on a quorum: lost, and this attempt undone
      h.lost = true
      cl.cs[lk] = nil
    elseif yes >= q and validity > 0 then
      h = h or { count = 0, attempts = {} }
      cl.holds[lk] = h
      if h.count == 0 then
        h.lease, h.token = lease, token
        if #nodes == 1 then -- equal only for the same owner nesting into its late hold
          local last = last_token[lk]
          if last and (token < last.token or (token == last.token and last.id ~= cl.id)) then
            stats.tokens = stats.tokens + 1
            log("TOKEN", lk, cl.id, token, last.id, last.token)
          end
          last_token[lk] = { token = token, id = cl.id }
        end
      end
      h.count = h.count + 1
      h.attempts[#h.attempts + 1] = attempt
      local o = in_cs_others(cl, lk)
      if o then
        stats.overlaps = stats.overlaps + 1
        log("OVERLAP", lk, cl.id, o.id, o.cs[lk])
      end
      cl.cs[lk] = start + lease - drift(lease)
      stats.grants = stats.grants + 1
      return true
    end
    for i = 1, #nodes do
      if undo[i] then
        detached(cl, i, "undo", { lk, "redlockc_attempts:{" .. lk .. "}" },
                 { id, cl.field, tostring(lease + 2 * cfg.io + 60000) })
      end
    end
    return false
  end

  local function release(cl, lk)
    local h = cl.holds[lk]
    if h.lost then -- the library answers RLC_E_LOST; the last level cleans up
      h.count = h.count - 1
      if h.count == 0 then
        cl.holds[lk] = nil
        cl.cs[lk] = nil
        local argv = { tostring(h.lease), cl.field, string.format("%s:%x", cl.uuid, h.attempts[1]),
                       string.format("%x", cl.next_attempt) }
        for k = 2, #h.attempts do argv[#argv + 1] = string.format("%s:%x", cl.uuid, h.attempts[k]) end
        for i = 1, #nodes do detached(cl, i, "release", keys_of(lk, "channel"), argv) end
      end
      return false
    end
    local last = h.count <= 1
    local attempt = table.remove(h.attempts)
    local id = string.format("%s:%x", cl.uuid, attempt)
    local upto = last and string.format("%x", cl.next_attempt) or ""
    if last then cl.cs[lk] = nil end
    h.count = h.count - 1
    local reqs = call_all(cl, "release", keys_of(lk, "channel"),
                          { tostring(h.lease), cl.field, id, upto }, now + cfg.io)
    local done = 0
    log("release", cl.id, lk, id, upto, reqs[1].status, tostring(reqs[1].reply))
    for i, r in ipairs(reqs) do
      if r.status ~= "OK" then
        detached(cl, i, "release", keys_of(lk, "channel"), { tostring(h.lease), cl.field, id, upto })
      elseif math.type(r.reply) == "integer" and r.reply >= 0 then
        done = done + 1
      end
    end
    if h.count == 0 then cl.holds[lk] = nil end
    return done >= q
  end

  local function extend(cl, lk)
    local h = cl.holds[lk]
    local id = string.format("%s:%x", cl.uuid, h.attempts[1])
    local start = now
    local reqs = call_all(cl, "renew", { lk, "redlockc_attempts:{" .. lk .. "}" },
                          { tostring(h.lease), cl.field, id }, start + cfg.io)
    local yes = 0
    for _, r in ipairs(reqs) do
      if r.status == "OK" and type(r.reply) == "table" and r.reply[1] == 1 then yes = yes + 1 end
    end
    if yes >= q and cl.cs[lk] then cl.cs[lk] = start + h.lease - drift(h.lease) end
  end

  local function body(cl)
    for _ = 1, cfg.rounds do
      sleep(cl, rnd(0, 30))
      local lk = locks[rnd(1, #locks)]
      if acquire(cl, lk, cfg.lease) then
        local extra = rnd(0, 2)
        for _ = 1, extra do
          sleep(cl, rnd(0, 10))
          acquire(cl, lk, cfg.lease)
        end
        local hold = rnd(1, cfg.lease // 2)
        if faults_on and chance(0.1) then -- a paused holder (GC, SIGSTOP)
          hold = rnd(cfg.lease, 2 * cfg.lease)
          stats.pauses = stats.pauses + 1
        end
        sleep(cl, hold)
        if chance(0.3) and cl.holds[lk] then extend(cl, lk) end
        while cl.holds[lk] and cl.holds[lk].count > 0 do
          release(cl, lk)
          sleep(cl, rnd(0, 5))
        end
      end
    end
    cl.done = true
  end

  for k = 1, cfg.clients do
    local cl = { id = k, uuid = string.format("u%04d", k), conns = {}, redo = {}, holds = {},
                 cs = {}, next_attempt = 0 }
    cl.field = cl.uuid .. ":1"
    for i = 1, #nodes do cl.redo[i] = {} end
    cl.co = coroutine.create(function() body(cl) end)
    clients[k] = cl
    at(rnd(0, 5), function() resume(cl) end)
  end

  -- faults -----------------------------------------------------------------
  local function live_conns()
    local out = {}
    for _, cl in ipairs(clients) do
      for i = 1, #nodes do
        local c = cl.conns[i]
        if c and not c.dead then out[#out + 1] = c end
      end
    end
    return out
  end
  local function fault()
    if not faults_on then return end
    local k = rnd(1, 10)
    local cs = live_conns()
    if k <= 4 and #cs > 0 then
      local c = cs[rnd(1, #cs)]
      c.stall_until = math.max(c.stall_until, now + rnd(cfg.io // 2, cfg.io * 6))
      stats.stalls = stats.stalls + 1
    elseif k <= 7 and #cs > 0 then
      cut(cs[rnd(1, #cs)], "fault")
    elseif k <= 8 then
      nodes[rnd(1, #nodes)]:script_flush()
      stats.flushes = stats.flushes + 1
    else
      local n = nodes[rnd(1, #nodes)]
      n.paused_until = now + rnd(cfg.io, cfg.io * 4)
      stats.pauses = stats.pauses + 1
    end
    at(now + rnd(5, 60), fault)
  end
  at(rnd(1, 20), fault)

  -- run until every client is done, bounded in simulated time
  local limit = 600000
  local function all_done()
    for _, cl in ipairs(clients) do if not cl.done then return false end end
    return true
  end
  while #heap > 0 and now < limit and not all_done() do
    local ev = pop()
    now = ev.t
    ev.fn()
  end
  if not all_done() then
    stats.liveness = stats.liveness + 1
    return stats, cfg
  end
  faults_on = false
  -- quiet network: everything in flight lands, every redo goes out
  for _, cl in ipairs(clients) do
    for i = 1, #nodes do
      if #cl.redo[i] > 0 then
        local c = new_conn(cl, i)
        local redo = cl.redo[i]
        cl.redo[i] = {}
        for _, x in ipairs(redo) do
          x.sent = now
          c.inflight[#c.inflight + 1] = x
          schedule_delivery(c, x)
        end
      end
    end
  end
  while #heap > 0 and now < limit * 2 do
    local ev = pop()
    now = ev.t
    ev.fn()
  end
  -- residue: no field of any client may be left on any node
  for _, node in ipairs(nodes) do
    node.now = now
    for _, lk in ipairs(locks) do
      local e = node:entry(lk)
      if e then
        stats.residue = stats.residue + 1
        log("RESIDUE", node.id, lk, table.concat(Redis.dump(node, lk), " "),
            table.concat(Redis.dump(node, "redlockc_attempts:{" .. lk .. "}"), " "))
      end
    end
  end
  return stats, cfg
end

---------------------------------------------------------------- the run
local totals = { overlaps = 0, residue = 0, tokens = 0, liveness = 0, grants = 0, cuts = 0,
                 stalls = 0, flushes = 0, pauses = 0, timeouts = 0, noscript = 0 }
local bad = {}
local count = opts.schedules
if opts.profile == "long" and opts.schedules == 1000 then count = 200000 end
local t0 = os.clock()
for k = 0, count - 1 do
  local seed = opts.seed + k
  local st, cfg = schedule(seed)
  for name, v in pairs(st) do totals[name] = totals[name] + v end
  if st.overlaps + st.residue + st.tokens + st.liveness > 0 then
    bad[#bad + 1] = string.format("seed=%d nodes=%d clients=%d lease=%d io=%d: overlaps=%d residue=%d tokens=%d liveness=%d",
      seed, cfg.nodes, cfg.clients, cfg.lease, cfg.io, st.overlaps, st.residue, st.tokens, st.liveness)
  end
end
print(string.format("sim: seeds %d..%d (%d schedules) in %.1f s cpu%s", opts.seed,
  opts.seed + count - 1, count, os.clock() - t0,
  opts.mutate ~= "" and (", mutation " .. opts.mutate) or ""))
print(string.format("sim: grants %d, timeouts %d, cuts %d, stalls %d, node/holder pauses %d, script flushes %d, NOSCRIPT resends %d",
  totals.grants, totals.timeouts, totals.cuts, totals.stalls, totals.pauses, totals.flushes,
  totals.noscript))
print(string.format("sim: overlaps %d, residue %d, token regressions %d, liveness %d",
  totals.overlaps, totals.residue, totals.tokens, totals.liveness))
for i = 1, math.min(#bad, 10) do print("sim: FAILED " .. bad[i]) end
if #bad > 0 then
  print(string.format("sim: %d of %d schedules failed; replay one with seed=N schedules=1 verbose=1", #bad, count))
  return 1
end
return 0
