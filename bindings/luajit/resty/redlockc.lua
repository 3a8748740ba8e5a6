--[[
resty.redlockc - distributed locks on Redis for OpenResty that never block
the nginx worker: the lock protocol is libredlockc's engine (rlc_engine_*,
no I/O of its own, driven here through the LuaJIT FFI) and every byte goes
through nginx cosockets.

  init_worker_by_lua_block {
    package.loaded.locks = assert(require("resty.redlockc").client("redis://127.0.0.1:6379"))
  }
  log_by_lua_block { require("resty.redlockc").finish_request() }   -- see below
  content_by_lua_block {
    local lock = assert(package.loaded.locks:lock("orders"))  -- owned by this request
    local ok, err, code = lock:acquire{ wait_ms = 5000 }
    if not ok then return ngx.exit(503) end
    -- critical section
    lock:release()
  }

How it runs (one client per worker; see bindings/luajit/README.md):
  - the client owns one engine and one "pump": a background ngx.timer whose
    light threads own the cosockets, one reader and one writer thread per
    connection (node i: 2i commands, 2i+1 its subscriber). Cosockets belong
    to the request or timer that made them, so only the pump can use them;
    requests never touch a socket;
  - a request calls rlc_engine_acquire/release/extend (pure computation,
    no I/O), wakes the pump's writers and waits on an ngx.semaphore that is
    posted when the op's DONE event comes out of the engine. Waiting for a
    busy lock is the engine's wait: one subscription per worker, woken by
    the unlock message; the worker serves other requests meanwhile;
  - the pump calls rlc_engine_tick at rlc_engine_deadline (renewals, time
    outs, retries, a hold's validity ending: its loss); a tick that comes
    late lets the readers run first (see pump_loop);
  - owned, hold_count, fencing_token and validity answer from the engine's
    validity at the moment of the call (rlc_engine_validity_ms);
  - the family (rwlock, fair_lock, semaphore, permit_semaphore,
    multi_lock), locked, ttl, force_release and fenced_set are engine ops
    too (every kind in redlockc.h), waited for the same way: no call of this
    client blocks the worker or opens a connection of its own.
  - rediss:// nodes: the connection does sock:sslhandshake() after connect
    (the engine's bytes are the same RESP); the CAs are nginx's
    lua_ssl_trusted_certificate, the client certificate goes through
    sock:setclientcert (lua-resty-core), the name checked is tls_server_name
    or the URI's host. A failed handshake closes the connection to the
    engine and its error is appended to the failing operation's message.
A lock still held when its request ends is released by finish_request(),
which must be called in the log phase (log_by_lua*); it also ends the
request's acquires still waiting (a client that aborted).
]]

local ffi = require "ffi"
local blocking = require "resty.redlockc.blocking"

local ngx = ngx
local C = ffi.C
local ffi_new, ffi_string, ffi_cast = ffi.new, ffi.string, ffi.cast
local type, error, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable, pcall, io =
  type, error, pairs, ipairs, tostring, tonumber, setmetatable, getmetatable, pcall, io
local floor, min, max = math.floor, math.min, math.max
local format, concat, byte = string.format, table.concat, string.byte

pcall(ffi.cdef, [[
  int rlc_engine_node_tls(const void *e, int node);
  const char *rlc_engine_option(const void *e, const char *name);
]])
pcall(ffi.cdef, [[
  int64_t rlc_engine_validity_ms(const void *e, const char *name, size_t name_len,
                                 uint64_t owner, int64_t now_ms);
]])

local I = blocking._internal
local integer_arg, owner_in_range, options_string, has_nul, CAN_SLEEP =
  I.integer_arg, I.owner_in_range, I.options_string, I.has_nul, I.CAN_SLEEP

pcall(ffi.cdef, [[
  typedef struct rlc_engine rlc_engine;
  typedef struct rlc_engine_event {
    int type;
    int status;
    uint64_t op;
    uint64_t owner;
    const char *name;
    size_t name_len;
    uint64_t token;
    int64_t validity_ms;
    int64_t count;
    const char *message;
    int64_t kind;
    int64_t reserved[3];
  } rlc_engine_event;
  int rlc_engine_new(rlc_engine **out, const char *nodes, const char *client_uuid,
                     const char *options);
  void rlc_engine_free(rlc_engine *e);
  int rlc_engine_nodes(const rlc_engine *e);
  int rlc_engine_node_address(const rlc_engine *e, int node, const char **host, int *port);
  int rlc_engine_conns(const rlc_engine *e);
  int rlc_engine_conn_address(const rlc_engine *e, int conn, const char **host, int *port,
                              int *tls);
  const char *rlc_engine_uuid(const rlc_engine *e);
  int rlc_engine_want_open(const rlc_engine *e, int conn);
  void rlc_engine_connected(rlc_engine *e, int conn, int64_t now_ms);
  void rlc_engine_closed(rlc_engine *e, int conn, int64_t now_ms);
  size_t rlc_engine_pending(rlc_engine *e, int conn, const char **data);
  void rlc_engine_sent(rlc_engine *e, int conn, size_t n);
  int rlc_engine_received(rlc_engine *e, int conn, const char *data, size_t len, int64_t now_ms);
  int64_t rlc_engine_deadline(const rlc_engine *e);
  void rlc_engine_tick(rlc_engine *e, int64_t now_ms);
  int rlc_engine_idle(const rlc_engine *e);
  int rlc_engine_acquire(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                         int64_t wait_ms, int64_t lease_ms, int64_t now_ms, uint64_t *op);
  int rlc_engine_release(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                         int64_t now_ms, uint64_t *op);
  int rlc_engine_extend(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
                        int64_t lease_ms, int64_t now_ms, uint64_t *op);
  int rlc_engine_cancel(rlc_engine *e, uint64_t op, int64_t now_ms);
  int64_t rlc_engine_hold_count(const rlc_engine *e, const char *name, size_t name_len,
                                uint64_t owner);
  int rlc_engine_next_event(rlc_engine *e, rlc_engine_event *ev);
  size_t rlc_engine_next_log(rlc_engine *e, int *level, char *buf, size_t size);
  int rlc_engine_metrics(const rlc_engine *e, uint64_t *out, int n);
]])
-- rlc_metric_name and rlc_metric_bucket_ms (client:metrics()) are declared
-- by resty.redlockc.blocking, loaded above.
-- The monotonic clock (CLOCK_MONOTONIC = 1 on Linux). Declared with a
-- void * so that another module's declaration with struct timespec * does
-- not clash; if one exists with another type, now_ms() falls back below.
pcall(ffi.cdef, "typedef struct { long tv_sec; long tv_nsec; } rlc_luajit_timespec;")
pcall(ffi.cdef, "int clock_gettime(int clk_id, void *tp);")

local _M = { _VERSION = "1.1.0" } -- the project's version (CMakeLists.txt)

local errors = blocking.errors
_M.errors = errors
_M.errname = blocking.errname
_M.version = blocking.version
_M.load = blocking.load
_M.request_owner = blocking.request_owner

local OK, NOT_ACQUIRED, E_INVAL, E_CLOSED = 0, errors.NOT_ACQUIRED, errors.E_INVAL, errors.E_CLOSED
local E_NOT_OWNER, E_LOST = errors.E_NOT_OWNER, errors.E_LOST
local E_CONNECT, E_TIMEOUT = errors.E_CONNECT, errors.E_TIMEOUT
local E_CANCELED = -12
local EV_DONE, EV_LOST = 1, 2

local lib -- libredlockc, loaded by the first client()

-- ---- time --------------------------------------------------------------------

local ts = ffi_new("rlc_luajit_timespec")
local last_ms = 0
local have_clock = pcall(function() return C.clock_gettime(1, ts) end)

-- ms on one clock that never goes back (the engine's contract).
local function now_ms()
  local t
  if have_clock then
    C.clock_gettime(1, ts)
    t = tonumber(ts.tv_sec) * 1000 + floor(tonumber(ts.tv_nsec) / 1000000)
  else
    ngx.update_time()
    t = floor(ngx.now() * 1000)
  end
  if t < last_ms then t = last_ms end
  last_ms = t
  return t
end

-- ---- results -------------------------------------------------------------------

local function closed() return nil, "closed", E_CLOSED end

local function failed(rc, msg)
  if rc == NOT_ACQUIRED then return nil, "busy", rc end
  if rc == E_CANCELED then return nil, "canceled", rc end
  if not msg or msg == "" then
    msg = ffi_string(lib.rlc_strerror(rc))
  end
  return nil, msg, rc
end

-- A call's own failure (E_INVAL with rlc_errmsg()).
local function call_failed(rc)
  return nil, ffi_string(lib.rlc_errmsg()), rc
end

local op_out = ffi_new("uint64_t[1]")
local data_out = ffi_new("const char *[1]")
local ev = ffi_new("rlc_engine_event")
local host_out = ffi_new("const char *[1]")
local port_out = ffi_new("int[1]")
local tls_out = ffi_new("int[1]")

-- ---- the per-request record ------------------------------------------------------

-- ngx.ctx[REQ_KEY] = { locks = { [lock] = true }, ops = { [rec] = true } }:
-- the lock objects of this request that took a level, and its acquires in
-- flight. finish_request() gives them back.
local REQ_KEY = {}

local function request_state()
  local ok, ctx = pcall(function() return ngx.ctx end)
  if not ok or not ctx then return nil end
  local rs = ctx[REQ_KEY]
  if not rs then
    rs = { locks = {}, ops = {}, fam = {} }
    ctx[REQ_KEY] = rs
  end
  return rs
end

local function can_wait()
  return CAN_SLEEP[ngx.get_phase()] == true
end

-- ---- semaphores ----------------------------------------------------------------

local semaphore -- ngx.semaphore, required on first use (it needs nginx)
local sema_pool, sema_pool_n = {}, 0

local function sema_get()
  if sema_pool_n > 0 then
    local s = sema_pool[sema_pool_n]
    sema_pool[sema_pool_n] = nil
    sema_pool_n = sema_pool_n - 1
    return s
  end
  return semaphore.new(0)
end

-- Only a semaphore whose one post was consumed by a wait goes back.
local function sema_put(s)
  if sema_pool_n < 1024 and s:count() == 0 then
    sema_pool_n = sema_pool_n + 1
    sema_pool[sema_pool_n] = s
  end
end

-- ---- the client: engine + pump ----------------------------------------------------

local Client = {}
Client.__index = Client

local CLOSED, OPENING, OPEN = 0, 1, 2
-- A reader's read timeout: reads wait for Redis (see connection()).
local READ_TIMEOUT_MS = 86400000
-- The pump's longest sleep when nothing is timed.
local IDLE_MS = 1000

local service -- forward
local handshake -- forward

local function lost_key(name, owner)
  return name .. "\0" .. tostring(owner)
end

-- msg and what the connections saw last (a failed TLS handshake, a refused
-- connect: "127.0.0.1:6380: TLS handshake failed: ..."), which the engine's
-- message does not know.
local function with_detail(c, msg)
  local seen, parts = {}, {}
  for k = 0, c.nconns - 1 do
    local err = c.conns[k].last_err
    if err then
      local line = (c.conns[k].where or "?") .. ": " .. err
      if not seen[line] and not msg:find(line, 1, true) then
        seen[line] = true
        parts[#parts + 1] = line
      end
    end
  end
  if #parts == 0 then return msg end
  local detail = concat(parts, "; ")
  return msg == "" and detail or msg .. " (" .. detail .. ")"
end

local LOG_LEN = 1024
local log_buf = ffi.new("char[?]", LOG_LEN)
local log_level = ffi.new("int[1]")
local RLC_LOG_WARN = 2 -- redlockc.h; other lines are INFO

local HOLD_OPS = { acquire = true, release = true, extend = true }

-- An event out of the engine: DONE wakes the op's waiter, LOST marks the hold.
local function dispatch(c)
  while lib.rlc_engine_next_event(c.e, ev) == 1 do
    local name = ev.name ~= nil and ffi_string(ev.name, ev.name_len) or ""
    -- c.lost is client:lock's (kind 0): a family hold's loss is not a lock's
    local is_lock = tonumber(ev.kind) == 0
    if ev.type == EV_LOST then
      if is_lock then c.lost[lost_key(name, ev.owner)] = true end
      ngx.log(ngx.WARN, "resty.redlockc: lost the hold of ", name, " (owner ",
              tostring(ev.owner), "): ", ffi_string(ev.message))
    elseif ev.type == EV_DONE then
      local id = tonumber(ev.op)
      local rec = c.ops[id]
      if rec then
        c.ops[id] = nil
        rec.done = true
        rec.status = ev.status
        rec.token = ev.token
        rec.validity_ms = tonumber(ev.validity_ms)
        rec.count = tonumber(ev.count)
        rec.message = ev.message ~= nil and ffi_string(ev.message) or ""
        if ev.status == E_CONNECT or ev.status == E_TIMEOUT then
          rec.message = with_detail(c, rec.message)
        end
        -- a lock's acquire, release or extend that counts 0 levels: no hold
        -- left to be lost (a query's count is an answer, not levels)
        if rec.count == 0 and is_lock and HOLD_OPS[rec.kind] then
          c.lost[lost_key(name, ev.owner)] = nil
        end
        if rec.sema then
          rec.sema:post(1)
        elseif ev.status ~= OK and ev.status ~= E_CANCELED then
          -- nobody waits (finish_request, a release in the log phase)
          ngx.log(ngx.WARN, "resty.redlockc: ", rec.kind, " of ", name, " ended with ",
                  tostring(_M.errname(ev.status)), ": ", rec.message)
        end
      end
    end
  end
  -- what the engine would log, as the blocking client does: a node that
  -- refused loss push (warn), reconnecting, a node that lost the scripts
  while tonumber(lib.rlc_engine_next_log(c.e, log_level, log_buf, LOG_LEN)) > 0 do
    ngx.log(log_level[0] == RLC_LOG_WARN and ngx.WARN or ngx.INFO, "resty.redlockc: ",
            ffi_string(log_buf))
  end
end

local function wake_pump(c)
  if not c.wake_posted then
    c.wake_posted = true
    c.wake:post(1)
  end
end

local pump -- forward

local function start_pump(c, delay)
  if c.pump_running or c.closed then return end
  local ok, err = ngx.timer.at(delay or 0, pump, c)
  if ok then
    c.pump_running = true
  else
    ngx.log(ngx.ERR, "resty.redlockc: cannot start the pump timer: ", err)
  end
end

-- After every call into the engine: hand out its events, wake the writers
-- of connections with bytes to send, and the pump if a connection must be
-- opened or the next deadline came closer.
function service(c)
  if not c.e then return end
  dispatch(c)
  local e = c.e
  for k = 0, c.nconns - 1 do
    local cn = c.conns[k]
    if cn.state == OPEN then
      if not cn.writing and lib.rlc_engine_pending(e, k, data_out) > 0 then
        cn.writing = true
        cn.wsem:post(1)
      end
      if lib.rlc_engine_want_open(e, k) < 0 then c.need_open = true end -- dropped
    elseif cn.state == CLOSED and lib.rlc_engine_want_open(e, k) == 1 then
      c.need_open = true
    end
  end
  local dl = tonumber(lib.rlc_engine_deadline(e))
  if c.need_open or (dl >= 0 and dl < c.pump_deadline) then
    wake_pump(c)
  end
  if not c.pump_running then start_pump(c) end
end

-- The connection is gone: tell the engine (once per connection's life).
local function conn_down(c, k, gen, why)
  local cn = c.conns[k]
  if cn.gen ~= gen or cn.state == CLOSED then return end
  cn.gen = cn.gen + 1
  cn.state = CLOSED
  cn.writing = false
  cn.sock = nil
  cn.wsem:post(1) -- the writer ends
  if why then
    ngx.log(ngx.INFO, "resty.redlockc: connection ", k, " closed: ", why)
  end
  if c.e then
    c.last_now = now_ms()
    lib.rlc_engine_closed(c.e, k, c.last_now)
    service(c)
  end
end

-- The writer of connection k while its generation is gen: sends what the
-- engine has for it whenever woken (service() posts cn.wsem).
local function writer(c, k, gen)
  local cn = c.conns[k]
  while cn.gen == gen and c.e do
    local n = cn.state == OPEN and tonumber(lib.rlc_engine_pending(c.e, k, data_out)) or 0
    if n == 0 then
      cn.writing = false
      cn.wsem:wait(IDLE_MS / 1000)
    else
      cn.writing = true
      local bytes, err = cn.sock:send(ffi_string(data_out[0], n))
      if cn.gen ~= gen or not c.e then return end
      if not bytes then
        -- ngx_lua closed the socket; the reader sees it too
        conn_down(c, k, gen, "send: " .. tostring(err))
        return
      end
      lib.rlc_engine_sent(c.e, k, n)
      service(c)
    end
  end
end

-- Why a handshake that sslhandshake called a success closed its socket.
-- lua-nginx-module (0.10.23, Debian 12) returns true when the handshake
-- completes within the call and then fails verification (a wrong CA, a name
-- the certificate lacks): the socket is closed and the reason is kept where
-- only the handshake's asynchronous result reads it. It is read there.
local handshake_err = ffi_new("char *[1]")
local handshake_code = ffi_new("int[1]")
local handshake_sess = ffi_new("void *[1]")
local function lost_handshake_error(sock)
  local ok, err = pcall(function()
    local r = require("resty.core.base").get_request()
    handshake_err[0], handshake_code[0] = nil, 0
    if r and sock[1] and C.ngx_http_lua_ffi_socket_tcp_get_sslhandshake_result(
        r, sock[1], handshake_sess, handshake_err, handshake_code) ~= 0
        and handshake_err[0] ~= nil then
      local msg = ffi_string(handshake_err[0])
      return handshake_code[0] ~= 0 and handshake_code[0] .. ": " .. msg or msg
    end
  end)
  return ok and err or "the certificate did not pass verification (nginx's error log says why)"
end

-- TLS on a connected cosocket of a rediss:// node: true, or nil and
-- "TLS handshake failed: <nginx's reason>".
function handshake(c, sock, host)
  local t = c.tls
  if t.cert then
    if not sock.setclientcert then
      return nil, "TLS handshake failed: this lua-nginx-module has no sock:setclientcert " ..
                  "(tls_cert_file needs lua-resty-core >= 0.1.24)"
    end
    local ok, err = sock:setclientcert(t.cert, t.key)
    if not ok then return nil, "TLS handshake failed: client certificate: " .. tostring(err) end
  end
  local ok, err = sock:sslhandshake(false, t.server_name or host, t.verify)
  if ok and not sock:getreusedtimes() then
    ok, err = nil, lost_handshake_error(sock)
  end
  if not ok then
    local hint = ""
    if t.verify and tostring(err):find("verify", 1, true) then
      hint = " (the CAs are nginx's lua_ssl_trusted_certificate)"
    end
    return nil, "TLS handshake failed: " .. tostring(err) .. hint
  end
  return true
end

-- A connection's life: connect, then read until it ends. The writer is a
-- light thread of its own, so that a slow send never holds up reading.
-- Reads have no time limit of their own (the engine times its requests
-- out through tick, and a cosocket read timeout would log an error on
-- every idle connection); the pump ends the thread with ngx.thread.kill.
local function connection(c, k, gen)
  local cn = c.conns[k]
  -- Asked at each connect: a sentinel node's master moves.
  if lib.rlc_engine_conn_address(c.e, k, host_out, port_out, tls_out) ~= OK then
    conn_down(c, k, gen, "no address yet")
    return
  end
  local host, port, secure = ffi_string(host_out[0]), tonumber(port_out[0]), tls_out[0] == 1
  cn.where = port == 0 and host or host .. ":" .. port
  local sock = ngx.socket.tcp()
  sock:settimeouts(c.connect_timeout_ms, c.send_timeout_ms, READ_TIMEOUT_MS)
  local ok, err
  if port == 0 then
    ok, err = sock:connect("unix:" .. host)
  else
    ok, err = sock:connect(host, port)
  end
  if cn.gen ~= gen or not c.e then
    sock:close()
    return
  end
  if ok and secure then
    ok, err = handshake(c, sock, host)
    if cn.gen ~= gen or not c.e then
      sock:close()
      return
    end
    if not ok then sock:close() end
  elseif not ok then
    err = "connect: " .. tostring(err)
  end
  if not ok then
    cn.fails = cn.fails + 1
    cn.next_try = now_ms() + min(1000, 25 * 2 ^ min(cn.fails, 6))
    cn.last_err = err
    conn_down(c, k, gen, err)
    return
  end
  cn.fails = 0
  cn.last_err = nil
  cn.state = OPEN
  cn.sock = sock
  c.last_now = now_ms()
  lib.rlc_engine_connected(c.e, k, c.last_now)
  service(c)
  while true do
    local data, rerr = sock:receiveany(65536)
    if cn.gen ~= gen or not c.e then
      sock:close()
      return
    end
    if data then
      c.last_now = now_ms()
      if lib.rlc_engine_received(c.e, k, data, #data, c.last_now) ~= OK then
        sock:close()
        conn_down(c, k, gen, "not RESP")
        return
      end
      service(c)
    elseif rerr ~= "timeout" then
      sock:close()
      -- TLS 1.3: a server that wanted a client certificate says so after
      -- the handshake, and the read ends
      if secure then cn.last_err = "TLS connection failed: " .. tostring(rerr) end
      conn_down(c, k, gen, rerr)
      return
    end
  end
end

-- A light thread that ended stays a zombie of its parent (the pump) until
-- the parent waits for it: each one hands itself to the pump to be reaped.
local function reap_me(c)
  c.reap[#c.reap + 1] = coroutine.running()
  if c.wake then wake_pump(c) end
end

local function connection_guard(c, k, gen)
  local ok, err = pcall(connection, c, k, gen)
  if not ok then
    ngx.log(ngx.ERR, "resty.redlockc: connection ", k, ": ", err)
    local cn = c.conns[k]
    if cn.sock then pcall(cn.sock.close, cn.sock) end
    conn_down(c, k, gen, "error")
  end
  if c.conns[k].reader == coroutine.running() then c.conns[k].reader = nil end
  reap_me(c)
end

local function writer_guard(c, k, gen)
  local ok, err = pcall(writer, c, k, gen)
  if not ok then
    ngx.log(ngx.ERR, "resty.redlockc: writer ", k, ": ", err)
    conn_down(c, k, gen, "error")
  end
  reap_me(c)
end

-- Ends every op still waited for with E_CLOSED (the engine is going away,
-- and it ends them without events).
local function fail_all(c)
  for id, rec in pairs(c.ops) do
    c.ops[id] = nil
    rec.done, rec.status, rec.message = true, E_CLOSED, "closed"
    if rec.sema then rec.sema:post(1) end
  end
end

-- The pump's loop: ticks at the deadline, opens the connections the engine
-- wants, sleeps on c.wake until the next deadline. On close or worker exit
-- it waits (bounded) for the engine to be idle so that releases sent from
-- the last requests go out, then closes everything.
local function pump_loop(c)
  local stop_at
  while true do
    local now = now_ms()
    local e = c.e
    if not e then return end
    local dl = tonumber(lib.rlc_engine_deadline(e))
    if dl >= 0 and dl < now then
      -- A late tick reads the sockets first. A reply that came before its
      -- deadline can still be unread when the deadline is past: the worker
      -- was busy (a request's long computation, a blocking call) while it
      -- arrived, and nginx, once free, expires the timers it owes (this
      -- thread's wake-up among them) before its next epoll pass, which is
      -- what hands the readers their bytes. Ticking now would time out a
      -- grant already on the socket. A 1 ms sleep is a timer set past the
      -- current time: it fires only after that epoll pass, so every reader
      -- has run with what was waiting, and the tick then ends only what
      -- truly had no answer.
      ngx.sleep(0.001)
      now = now_ms()
      e = c.e
      if not e then return end
      dl = tonumber(lib.rlc_engine_deadline(e))
    end
    if dl >= 0 and dl <= now then
      c.last_now = now
      lib.rlc_engine_tick(e, now)
      service(c)
      dl = tonumber(lib.rlc_engine_deadline(e))
    end
    if c.closing or ngx.worker.exiting() then
      c.closing = true
      stop_at = stop_at or now + c.shutdown_ms
      if lib.rlc_engine_idle(e) == 1 or now >= stop_at then
        c.e = nil
        fail_all(c)
        for k = 0, c.nconns - 1 do
          local cn = c.conns[k]
          cn.gen = cn.gen + 1
          cn.state = CLOSED
          -- a reader waits in receive: kill it (its parent, this thread,
          -- may), then the socket is free to close
          if cn.reader then ngx.thread.kill(cn.reader) end
          if cn.sock then cn.sock:close() end
          cn.reader, cn.sock = nil, nil
          cn.wsem:post(1)
        end
        lib.rlc_engine_free(e)
        return
      end
    end
    for i = #c.reap, 1, -1 do
      ngx.thread.wait(c.reap[i]) -- already dead: returns at once
      c.reap[i] = nil
    end
    local wake_at = dl >= 0 and dl or now + IDLE_MS
    c.need_open = false
    for k = 0, c.nconns - 1 do
      local cn = c.conns[k]
      if cn.state == OPEN and lib.rlc_engine_want_open(e, k) < 0 then
        -- The engine dropped it (a stalled server: its oldest request waited
        -- too long). Its reader waits in receive: this thread, its parent,
        -- kills it, then closes the socket and tells the engine.
        if cn.reader then ngx.thread.kill(cn.reader) end
        local sock = cn.sock
        cn.reader = nil
        if sock then sock:close() end
        conn_down(c, k, cn.gen, "dropped by the engine")
      end
      if cn.state == CLOSED and lib.rlc_engine_want_open(e, k) == 1 then
        if now >= cn.next_try then
          cn.state = OPENING
          cn.gen = cn.gen + 1
          cn.reader = ngx.thread.spawn(connection_guard, c, k, cn.gen)
          ngx.thread.spawn(writer_guard, c, k, cn.gen)
        else
          wake_at = min(wake_at, cn.next_try)
        end
      end
    end
    wake_at = min(wake_at, now + (c.closing and 50 or IDLE_MS))
    c.pump_deadline = wake_at
    c.wake_posted = false
    c.wake:wait(max(1, wake_at - now_ms()) / 1000)
  end
end

function pump(premature, c)
  if premature then
    c.pump_running = false
    return
  end
  local ok, err = pcall(pump_loop, c)
  c.pump_running = false
  c.pump_deadline = -1
  if not ok then
    ngx.log(ngx.ERR, "resty.redlockc: pump: ", err)
    if c.e and not ngx.worker.exiting() then start_pump(c, 0.1) end
  end
end

-- ---- ops ---------------------------------------------------------------------------

-- Registers op id (just started) and returns its record; with wait, the
-- record has a semaphore the DONE event posts.
local function new_op(c, kind, wait)
  local rec = { kind = kind, done = false, sema = wait and sema_get() or nil }
  c.ops[tonumber(op_out[0])] = rec
  rec.id = op_out[0]
  return rec
end

-- Waits for the op's end. The engine ends every op (its own time outs), so
-- the loop only guards a wait that the semaphore cut short.
local function await(rec)
  while not rec.done do
    local ok, err = rec.sema:wait(60)
    if not ok and err ~= "timeout" then
      return nil, err
    end
  end
  sema_put(rec.sema)
  rec.sema = nil
  return true
end

-- ---- lock ------------------------------------------------------------------------

local Lock = {}
Lock.__index = Lock

local function lock_self(self)
  if getmetatable(self) ~= Lock then
    error("resty.redlockc: call lock methods as lock:method()", 3)
  end
  return self.client
end

local function usable(self)
  local c = lock_self(self)
  if self.is_closed or not c.e or c.closing then return nil end
  return c
end

local function need_wait_phase(what)
  if not can_wait() then
    error("resty.redlockc: " .. what .. " waits for Redis, which the " .. tostring(ngx.get_phase())
          .. " phase cannot do (no yielding there); use resty.redlockc.blocking", 3)
  end
end

-- lock:acquire{ wait_ms = -1, lease_ms = -1 } -> true | nil, err, code
--   wait_ms   0 try once; > 0 wait at most that long; < 0 (default) forever.
--   lease_ms  <= 0 (default) a watchdog hold, renewed until release;
--             > 0 a fixed lease.
-- Busy: nil, "busy", errors.NOT_ACQUIRED. Needs a phase that can yield
-- (rewrite, access, content, timer, ...). The request waits on a
-- semaphore; the worker goes on serving others.
function Lock:acquire(opts)
  local c0 = lock_self(self)
  local wait_ms, lease_ms = -1, -1
  if opts ~= nil then
    if type(opts) ~= "table" then
      error("resty.redlockc: acquire takes a table {wait_ms=, lease_ms=}, got " .. type(opts), 2)
    end
    for k, v in pairs(opts) do
      if k == "wait_ms" then wait_ms = integer_arg(v, "wait_ms")
      elseif k == "lease_ms" then lease_ms = integer_arg(v, "lease_ms")
      elseif k == "step_ms" or k == "max_step_ms" then integer_arg(v, k) -- 1.0's; unused
      else error("resty.redlockc: unknown acquire option " .. tostring(k), 2) end
    end
  end
  need_wait_phase("acquire")
  local c = usable(self)
  if not c then return closed() end
  c.last_now = now_ms()
  local rc = lib.rlc_engine_acquire(c.e, self.name, #self.name, self.owner, wait_ms, lease_ms,
                                    c.last_now, op_out)
  if rc ~= OK then return call_failed(rc) end
  local rec = new_op(c, "acquire", true)
  local rs = self.rs
  if rs then rs.ops[rec] = c0; rs.locks[self] = true end
  service(c)
  local ok, err = await(rec)
  if rs then rs.ops[rec] = nil end
  if not ok then
    -- the semaphore refused to wait: end the op, undoing what it took
    if c.e and not rec.done then
      rec.sema = nil
      c.last_now = now_ms()
      lib.rlc_engine_cancel(c.e, rec.id, c.last_now)
      service(c)
    end
    return nil, err, E_INVAL
  end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  self.levels = self.levels + 1
  self.token = rec.token
  return true
end

-- Sends a release without waiting (log phase, finish_request).
local function release_nowait(c, name, owner)
  c.last_now = now_ms()
  local rc = lib.rlc_engine_release(c.e, name, #name, owner, c.last_now, op_out)
  if rc == OK then new_op(c, "release", false) end
  return rc
end

-- lock:release() -> true | nil, err, code. One level; at zero the key is
-- deleted and the unlock message wakes a waiter. E_NOT_OWNER: not held by
-- this owner; E_LOST: it was, and expired, was taken or ran out its lease
-- (each level still taken answers so once). In a phase that
-- cannot yield (log, header_filter, ...) the release is sent without
-- waiting for Redis's answer: true, "sent" (a failure goes to the error log).
function Lock:release()
  lock_self(self)
  local c = usable(self)
  if not c then return closed() end
  if not can_wait() then
    local rc = release_nowait(c, self.name, self.owner)
    if rc ~= OK then return call_failed(rc) end
    if self.levels > 0 then self.levels = self.levels - 1 end
    service(c)
    return true, "sent"
  end
  c.last_now = now_ms()
  local rc = lib.rlc_engine_release(c.e, self.name, #self.name, self.owner, c.last_now, op_out)
  if rc ~= OK then return call_failed(rc) end
  local rec = new_op(c, "release", true)
  service(c)
  local ok, err = await(rec)
  if not ok then return nil, err, errors.E_INVAL end
  -- a lost hold gives up one level per release (each answers E_LOST)
  if rec.status == E_NOT_OWNER or rec.status == E_CLOSED then
    self.levels = 0
  elseif self.levels > 0 then
    self.levels = self.levels - 1
  end
  if self.levels == 0 and self.rs then self.rs.locks[self] = nil end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  return true
end

-- lock:extend(ms) -> true | nil, err, code. ms > 0: a fixed lease of ms
-- from now; ms <= 0: the watchdog takes the hold over.
function Lock:extend(ms)
  lock_self(self)
  integer_arg(ms, "extend's lease (ms)")
  need_wait_phase("extend")
  local c = usable(self)
  if not c then return closed() end
  c.last_now = now_ms()
  local rc = lib.rlc_engine_extend(c.e, self.name, #self.name, self.owner, ms, c.last_now, op_out)
  if rc ~= OK then return call_failed(rc) end
  local rec = new_op(c, "extend", true)
  service(c)
  local ok, err = await(rec)
  if not ok then return nil, err, errors.E_INVAL end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  return true
end

-- "Held" is the engine's validity at the moment of the call, on the clock
-- the pump gives the engine: a fixed lease that ended, or a watchdog hold
-- the blocked worker could not renew, is not held from that moment on, even
-- before the pump has run the tick that hands out its loss.
local function validity_now(c, self)
  return tonumber(lib.rlc_engine_validity_ms(c.e, self.name, #self.name, self.owner, now_ms()))
end

local function is_lost(c, self)
  return c.lost[lost_key(self.name, self.owner)] == true
end

-- lock:hold_count() -> the owner's reentrancy count while the hold is valid
-- now; 0 when not held, lost, or its validity ran out. No I/O.
function Lock:hold_count()
  local c = usable(self)
  if not c then return closed() end
  if validity_now(c, self) <= 0 then return 0 end
  return tonumber(lib.rlc_engine_hold_count(c.e, self.name, #self.name, self.owner))
end

-- lock:owned() -> held by this owner and still valid now. No I/O.
function Lock:owned()
  local c = usable(self)
  if not c then return closed() end
  return validity_now(c, self) > 0
end

-- lock:validity() -> ms the hold is certainly still held from now: the
-- engine's own figure (renewals move it on), 0 when not held, lost, or run
-- out. No I/O.
function Lock:validity()
  local c = usable(self)
  if not c then return closed() end
  return validity_now(c, self)
end

-- lock:fencing_token() -> number (exact below 2^53), of the last acquire
-- through this object, while the hold is valid now. Needs the client option
-- fencing = 1: E_INVAL without it (no hold takes a token; the engine's
-- grants say 0). E_NOT_OWNER when not held; E_LOST when this object's
-- levels are still out but the hold was lost or its validity ran out (the
-- token may no longer be the newest). No I/O.
function Lock:fencing_token()
  local c = usable(self)
  if not c then return closed() end
  if not c.fencing then
    return nil, format("lock '%s' has no fencing token: fencing is off (open the client " ..
                       "with the option fencing=1)", self.name), E_INVAL
  end
  if self.token and validity_now(c, self) > 0 then return tonumber(self.token) end
  if is_lost(c, self) or self.levels > 0 then return nil, "lost", E_LOST end
  return nil, "not held", E_NOT_OWNER
end

-- lock:close(): gives back every level taken through this object (waiting
-- for each release where the phase can yield, else sent without waiting).
-- Later calls return nil, "closed", E_CLOSED.
function Lock:close()
  lock_self(self)
  local c = usable(self)
  if c then
    while self.levels > 0 do -- each release takes a level, even a lost one
      local ok, _, code = self:release()
      if not ok and code ~= E_LOST then break end
    end
  end
  if self.rs then self.rs.locks[self] = nil end
  self.is_closed, self.levels = true, 0
end

function Lock:__tostring()
  return format("resty.redlockc.lock(%q)%s", self.name, self.is_closed and " closed" or "")
end

-- ---- client methods ------------------------------------------------------------------

local function client_self(self)
  if getmetatable(self) ~= Client then
    error("resty.redlockc: call client methods as client:method()", 3)
  end
  return self
end

-- client:lock(name [, owner]) -> lock | nil, err, code. No I/O.
--   owner nil: the current request (ngx.ctx; redlockc.request_owner());
--   else a number 1 .. 2^53 or an int64_t/uint64_t cdata 1 .. 2^62-1.
function Client:lock(name, owner)
  client_self(self)
  if type(name) ~= "string" then
    error("resty.redlockc: lock name must be a string, got " .. type(name), 2)
  end
  local rs
  if owner == nil then
    owner = blocking.request_owner()
    rs = request_state()
  elseif not owner_in_range(owner) then
    return nil, "owner must be 1 .. 2^62-1", E_INVAL
  end
  if has_nul(name) or name == "" then
    return nil, "lock name must be a non-empty string without NUL bytes", E_INVAL
  end
  if not self.e or self.closing then return closed() end
  return setmetatable({ client = self, name = name, owner = ffi_cast("uint64_t", owner),
                        levels = 0, rs = rs }, Lock)
end

function Client:uuid()
  client_self(self)
  return self.uuid_str
end

-- client:blocking() -> a resty.redlockc.blocking client on the same nodes
-- and options (made on first use, no I/O until used; closed with this
-- client). Each of its calls is a blocking round trip: none of this
-- client's own calls uses it.
function Client:blocking()
  client_self(self)
  if not self.twin then
    local b, err, code = blocking.client(self.nodes, self.options)
    if not b then return nil, err, code end
    self.twin = b
  end
  return self.twin
end

-- ---- the family on the engine -------------------------------------------------------
-- Every kind the engine runs (redlockc.h, RLC_KIND_*): read-write locks,
-- fair locks, semaphores, multi-locks, and the queries, forced releases and
-- fenced writes, with the method names and results of
-- resty.redlockc.blocking's family. A call starts its op in the engine and
-- waits on a semaphore for its DONE event, as lock:acquire does: the
-- worker serves other requests meanwhile, and no blocking connection is made.

for _, decl in ipairs{
  [[int rlc_engine_acquire_kind(rlc_engine *e, int kind, const char *name, size_t name_len,
      uint64_t owner, int64_t wait_ms, int64_t lease_ms, int64_t now_ms, uint64_t *op);]],
  [[int rlc_engine_release_kind(rlc_engine *e, int kind, const char *name, size_t name_len,
      uint64_t owner, int64_t now_ms, uint64_t *op);]],
  [[int64_t rlc_engine_hold_count_kind(const rlc_engine *e, int kind, const char *name,
      size_t name_len, uint64_t owner);]],
  [[int64_t rlc_engine_validity_ms_kind(const rlc_engine *e, int kind, const char *name,
      size_t name_len, uint64_t owner, int64_t now_ms);]],
  [[int rlc_engine_acquire_fair(rlc_engine *e, const char *name, size_t name_len,
      uint64_t owner, int64_t wait_ms, int64_t lease_ms, int64_t thread_wait_ms,
      int64_t now_ms, uint64_t *op);]],
  [[int rlc_engine_query(rlc_engine *e, const char *name, size_t name_len, uint64_t owner,
      int what, int64_t now_ms, uint64_t *op);]],
} do
  pcall(ffi.cdef, decl)
end

local KIND_LOCK, KIND_READ, KIND_WRITE, KIND_FAIR = 0, 1, 2, 3
local Q_LOCKED, Q_TTL, Q_MODE = 1, 4, 5
local FAIR_THREAD_WAIT_MS = 5000 -- Redisson's threadWaitTime (the twin's default)

-- Starts an op with start(now) (an rlc_engine_* call that writes op_out)
-- and waits for its DONE event: its record, or nil, err, code (the call's
-- own refusal; a wait the semaphore refused, which ends the op). While it
-- runs the record is in watch (the object's, so that close() ends it) and
-- in rs.ops (the request's, so that finish_request() ends it).
local function run_op(c, label, start, watch, rs)
  c.last_now = now_ms()
  local rc = start(c.last_now)
  if rc ~= OK then return call_failed(rc) end
  local rec = new_op(c, label, true)
  if watch then watch[rec] = true end
  if rs then rs.ops[rec] = c end
  service(c)
  local ok, err = await(rec)
  if watch then watch[rec] = nil end
  if rs then rs.ops[rec] = nil end
  if not ok then
    if c.e and not rec.done then
      rec.sema = nil
      c.last_now = now_ms()
      lib.rlc_engine_cancel(c.e, rec.id, c.last_now)
      service(c)
    end
    return nil, err, E_INVAL
  end
  return rec
end

-- Starts an op without waiting for it (a phase that cannot yield): its
-- failure goes to the error log.
local function start_nowait(c, label, start)
  c.last_now = now_ms()
  local rc = start(c.last_now)
  if rc == OK then new_op(c, label, false) end
  service(c)
  return rc
end

-- Ends the ops still running in watch (an object being closed): each ends
-- E_CANCELED, undoing what it took.
local function cancel_watched(c, watch)
  if not c.e then return end
  for rec in pairs(watch) do
    if not rec.done then
      c.last_now = now_ms()
      lib.rlc_engine_cancel(c.e, rec.id, c.last_now)
    end
  end
  service(c)
end

-- Options of a family acquire, as resty.redlockc.blocking takes them
-- (step_ms and max_step_ms are accepted and unused: the engine waits).
local function fam_opts(opts, allowed)
  local o = { wait_ms = -1, lease_ms = -1, permits = 1 }
  if opts ~= nil then
    if type(opts) ~= "table" then
      error("resty.redlockc: acquire takes a table of options, got " .. type(opts), 3)
    end
    for k, v in pairs(opts) do
      if not allowed[k] and k ~= "step_ms" and k ~= "max_step_ms" then
        error("resty.redlockc: unknown acquire option " .. tostring(k), 3)
      end
      o[k] = integer_arg(v, k, 4)
    end
  end
  if not can_wait() then
    error("resty.redlockc: acquire waits for Redis, which the " .. tostring(ngx.get_phase())
          .. " phase cannot do (no yielding there); use resty.redlockc.blocking", 3)
  end
  return o
end

local function fam_class(name)
  local mt = { __name = name }
  mt.__index = mt
  mt.__tostring = function(self)
    return format("%s(%q)%s", name, self.name, self.is_closed and " closed" or "")
  end
  return mt
end

local function fam_usable(self, mt)
  if getmetatable(self) ~= mt then
    error("resty.redlockc: call " .. mt.__name .. " methods as x:method()", 3)
  end
  local c = self.client
  if self.is_closed or not c.e or c.closing then return nil end
  return c
end

-- A family call that waits for Redis in a phase that cannot yield.
local function fam_need_wait(what)
  if not can_wait() then
    error("resty.redlockc: " .. what .. " waits for Redis, which the " ..
          tostring(ngx.get_phase()) .. " phase cannot do (no yielding there); use " ..
          "resty.redlockc.blocking", 3)
  end
end

-- The owner of a family object: the request's (as client:lock) or one given.
local function fam_owner(owner)
  if owner == nil then return ffi_cast("uint64_t", blocking.request_owner()), request_state() end
  if not owner_in_range(owner) then return nil end
  return ffi_cast("uint64_t", owner)
end

local function fam_name(name, what)
  if type(name) ~= "string" then
    error("resty.redlockc: " .. what .. " must be a string, got " .. type(name), 3)
  end
  return name ~= "" and not has_nul(name)
end

-- ---- owner-bound holds (a read-write lock's sides, a fair lock) ------------------
-- A hold: { client, name, owner, kind, levels (taken through this object),
-- waiting (its acquires running), rs (the request's record, or nil) }.

local LOCK_OPTS = { wait_ms = true, lease_ms = true }

local function hold_acquire(self, c, o)
  local name, kind = self.name, self.kind
  local start
  if kind == KIND_FAIR then
    start = function(now)
      return lib.rlc_engine_acquire_fair(c.e, name, #name, self.owner, o.wait_ms, o.lease_ms,
                                         self.thread_wait_ms, now, op_out)
    end
  else
    start = function(now)
      return lib.rlc_engine_acquire_kind(c.e, kind, name, #name, self.owner, o.wait_ms,
                                         o.lease_ms, now, op_out)
    end
  end
  local rec, err, code = run_op(c, "acquire", start, self.waiting, self.rs)
  if not rec then return nil, err, code end
  if rec.status == E_CANCELED and self.is_closed then return closed() end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  self.levels = self.levels + 1
  if self.rs then self.rs.fam[self] = true end
  return true
end

local function hold_release_start(self, c)
  local name, kind = self.name, self.kind
  return function(now)
    return lib.rlc_engine_release_kind(c.e, kind, name, #name, self.owner, now, op_out)
  end
end

-- One level back; in a phase that cannot yield, sent without waiting
-- (true, "sent"), as lock:release.
local function hold_release(self, c)
  if not can_wait() then
    local rc = start_nowait(c, "release", hold_release_start(self, c))
    if rc ~= OK then return call_failed(rc) end
    if self.levels > 0 then self.levels = self.levels - 1 end
    return true, "sent"
  end
  local rec, err, code = run_op(c, "release", hold_release_start(self, c))
  if not rec then return nil, err, code end
  -- as lock:release: a lost hold gives up one level per release
  if rec.status == E_NOT_OWNER or rec.status == E_CLOSED then
    self.levels = 0
  elseif self.levels > 0 then
    self.levels = self.levels - 1
  end
  if self.levels == 0 and self.rs then self.rs.fam[self] = nil end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  return true
end

-- The engine's count of the hold while it is valid now (0 otherwise). No I/O.
local function hold_count(self, c)
  local name, kind = self.name, self.kind
  if lib.rlc_engine_validity_ms_kind(c.e, kind, name, #name, self.owner, now_ms()) <= 0 then
    return 0
  end
  return tonumber(lib.rlc_engine_hold_count_kind(c.e, kind, name, #name, self.owner))
end

local function hold_validity(self, c)
  local name = self.name
  return tonumber(lib.rlc_engine_validity_ms_kind(c.e, self.kind, name, #name, self.owner,
                                                  now_ms()))
end

-- Ends the hold's waiting acquires and gives back its levels (waiting for
-- each release where the phase can yield).
local function hold_close(self, c)
  if c then
    cancel_watched(c, self.waiting)
    while self.levels > 0 do
      local ok, _, code = hold_release(self, c)
      if not ok and code ~= E_LOST then break end
    end
  end
  if self.rs then self.rs.fam[self] = nil end
  self.is_closed, self.levels = true, 0
end

-- The holds' methods on class mt; self.hold(self) is the hold.
local function hold_methods(mt)
  function mt:acquire(opts)
    local c = fam_usable(self, mt)
    local o = fam_opts(opts, LOCK_OPTS)
    if not c then return closed() end
    return hold_acquire(self, c, o)
  end
  function mt:release()
    local c = fam_usable(self, mt)
    if not c then return closed() end
    return hold_release(self, c)
  end
  function mt:hold_count()
    local c = fam_usable(self, mt)
    if not c then return closed() end
    return hold_count(self, c)
  end
  function mt:validity()
    local c = fam_usable(self, mt)
    if not c then return closed() end
    return hold_validity(self, c)
  end
  -- finish_request(): every level taken through this object, without waiting
  function mt:_finish(c)
    local sent = 0
    for _ = 1, self.levels do
      if start_nowait(c, "release", hold_release_start(self, c)) == OK then sent = sent + 1 end
    end
    self.levels = 0
    return sent
  end
end

-- Read-write lock: rw:read() and rw:write() are its sides, each with
-- acquire{ wait_ms, lease_ms }, release(), hold_count(), validity().
local RWLock = fam_class("resty.redlockc.rwlock")
local RWSide = fam_class("resty.redlockc.rwlock side")
hold_methods(RWSide)
function RWLock:read() fam_usable(self, RWLock); return self.sides[1] end
function RWLock:write() fam_usable(self, RWLock); return self.sides[2] end
local MODES = { [0] = "free", [1] = "read", [2] = "write" }
-- rw:mode() -> "free" | "read" | "write": the mode a quorum agrees on.
function RWLock:mode()
  local c = fam_usable(self, RWLock)
  if not c then return closed() end
  fam_need_wait("mode")
  local name = self.name
  local rec, err, code = run_op(c, "mode", function(now)
    return lib.rlc_engine_query(c.e, name, #name, self.owner, Q_MODE, now, op_out)
  end)
  if not rec then return nil, err, code end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  return MODES[rec.count] or "free"
end
-- rw:close(): gives back this object's read, then write levels.
function RWLock:close()
  local c = fam_usable(self, RWLock)
  for _, side in ipairs(self.sides) do
    if not side.is_closed then hold_close(side, c) end
  end
  self.is_closed = true
end

function Client:rwlock(name, owner)
  client_self(self)
  if not fam_name(name, "lock name") then
    return nil, "lock name must be a non-empty string without NUL bytes", E_INVAL
  end
  local o, rs = fam_owner(owner)
  if not o then return nil, "owner must be 1 .. 2^62-1", E_INVAL end
  if not self.e or self.closing then return closed() end
  local rw = setmetatable({ client = self, name = name, owner = o }, RWLock)
  local function side(kind)
    return setmetatable({ client = self, name = name, owner = o, kind = kind, levels = 0,
                          waiting = {}, rs = rs }, RWSide)
  end
  rw.sides = { side(KIND_READ), side(KIND_WRITE) }
  return rw
end

-- A fair lock, a semaphore: one node only (redlockc.h: a queue, a count of
-- permits, is not voted on by a quorum).
local function one_node(c, what)
  local n = lib.rlc_engine_nodes(c.e)
  if n > 1 then
    return nil, format("a %s over %d nodes is refused: it lives on one node (use one node)",
                       what, n), E_INVAL
  end
  return true
end

-- Fair lock: acquire{ wait_ms, lease_ms }, release(), hold_count(), validity().
local FairLock = fam_class("resty.redlockc.fair_lock")
hold_methods(FairLock)
function FairLock:close() hold_close(self, fam_usable(self, FairLock)) end

function Client:fair_lock(name, owner, thread_wait_ms)
  client_self(self)
  if not fam_name(name, "lock name") then
    return nil, "lock name must be a non-empty string without NUL bytes", E_INVAL
  end
  local o, rs = fam_owner(owner)
  if not o then return nil, "owner must be 1 .. 2^62-1", E_INVAL end
  local tw = thread_wait_ms == nil and 0 or integer_arg(thread_wait_ms, "thread_wait_ms")
  if tw < 0 then return nil, "thread_wait_ms must be >= 0 (0: 5000)", E_INVAL end
  if not self.e or self.closing then return closed() end
  local ok, err, code = one_node(self, "fair lock")
  if not ok then return nil, err, code end
  return setmetatable({ client = self, name = name, owner = o, kind = KIND_FAIR, levels = 0,
                        waiting = {}, rs = rs,
                        thread_wait_ms = tw > 0 and tw or FAIR_THREAD_WAIT_MS }, FairLock)
end

-- ---- semaphores ------------------------------------------------------------------

for _, decl in ipairs{
  [[int rlc_engine_acquire_permits(rlc_engine *e, int kind, const char *name,
      size_t name_len, uint64_t owner, int64_t permits, int64_t wait_ms, int64_t lease_ms,
      int64_t now_ms, uint64_t *op);]],
  [[int rlc_engine_permit_id(const rlc_engine *e, uint64_t token, int64_t permits,
      char *buf, size_t size);]],
  [[int rlc_engine_release_permits(rlc_engine *e, int kind, const char *name,
      size_t name_len, int64_t permits, const char *id, int64_t now_ms, uint64_t *op);]],
  [[int rlc_engine_set_permits(rlc_engine *e, int kind, const char *name, size_t name_len,
      int64_t permits, int64_t now_ms, uint64_t *op);]],
  [[int rlc_engine_available_permits(rlc_engine *e, int kind, const char *name,
      size_t name_len, int64_t now_ms, uint64_t *op);]],
} do
  pcall(ffi.cdef, decl)
end

local KIND_SEMAPHORE, KIND_PSEMAPHORE = 4, 5
local permit_id_buf = ffi_new("char[33]")

-- Takes o.permits (waiting up to o.wait_ms): the DONE record, or nil, err, code.
local function sem_acquire(self, c, o, lease_ms)
  local name, kind = self.name, self.kind
  local rec, err, code = run_op(c, "acquire", function(now)
    -- an owner per acquire: permits are no owner's, and an engine op waits
    -- behind its owner's others
    return lib.rlc_engine_acquire_permits(c.e, kind, name, #name, I.new_owner(), o.permits,
                                          o.wait_ms, lease_ms, now, op_out)
  end, self.waiting, request_state())
  if not rec then return nil, err, code end
  if rec.status == E_CANCELED and self.is_closed then return closed() end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  return rec
end

-- Gives permits back (plain: n of them; expirable: those named by id);
-- in a phase that cannot yield, sent without waiting (true, "sent").
local function sem_release(self, c, n, id)
  local name, kind = self.name, self.kind
  local function start(now)
    return lib.rlc_engine_release_permits(c.e, kind, name, #name, n, id, now, op_out)
  end
  if not can_wait() then
    local rc = start_nowait(c, "release", start)
    if rc ~= OK then return call_failed(rc) end
    return true, "sent"
  end
  local rec, err, code = run_op(c, "release", start)
  if not rec then return nil, err, code end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  return true
end

-- A semaphore query answered in the DONE event's count.
local function sem_count(self, c, what, start)
  fam_need_wait(what)
  local rec, err, code = run_op(c, what, start)
  if not rec then return nil, err, code end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  return rec.count
end

-- Semaphore: acquire{ permits = 1, wait_ms = -1 }, release([n]),
-- available(), try_set_permits(n), close().
local Semaphore = fam_class("resty.redlockc.semaphore")
local SEM_OPTS = { wait_ms = true, permits = true }
function Semaphore:acquire(opts)
  local c = fam_usable(self, Semaphore)
  local o = fam_opts(opts, SEM_OPTS)
  if not c then return closed() end
  local rec, err, code = sem_acquire(self, c, o, 0)
  if not rec then return nil, err, code end
  return true
end
function Semaphore:release(n)
  local c = fam_usable(self, Semaphore)
  n = n == nil and 1 or integer_arg(n, "permits")
  if not c then return closed() end
  return sem_release(self, c, n, nil)
end

-- Permit-expirable semaphore: acquire{ permits = 1, wait_ms = -1, lease_ms
-- (required) } -> id | nil, err, code; release(id) (E_LOST: it had expired).
local PSemaphore = fam_class("resty.redlockc.permit_semaphore")
local PSEM_OPTS = { wait_ms = true, permits = true, lease_ms = true }
function PSemaphore:acquire(opts)
  local c = fam_usable(self, PSemaphore)
  local o = fam_opts(opts, PSEM_OPTS)
  if o.lease_ms <= 0 then
    error("resty.redlockc: a permit needs lease_ms > 0 (expirable permits have no watchdog)", 2)
  end
  if not c then return closed() end
  local rec, err, code = sem_acquire(self, c, o, o.lease_ms)
  if not rec then return nil, err, code end
  if not c.e then return closed() end
  local rc = lib.rlc_engine_permit_id(c.e, rec.token, rec.count, permit_id_buf, 33)
  if rc ~= OK then return call_failed(rc) end
  return ffi_string(permit_id_buf)
end
function PSemaphore:release(id)
  local c = fam_usable(self, PSemaphore)
  if type(id) ~= "string" then
    error("resty.redlockc: permit id must be a string, got " .. type(id), 2)
  end
  if has_nul(id) then return nil, "permit id contains a NUL byte", E_INVAL end
  if not c then return closed() end
  return sem_release(self, c, 0, id)
end

for _, mt in ipairs{ Semaphore, PSemaphore } do
  -- available() -> the permits free now (a lease that ended is given back first)
  mt.available = function(self)
    local c = fam_usable(self, mt)
    if not c then return closed() end
    local name, kind = self.name, self.kind
    return sem_count(self, c, "available", function(now)
      return lib.rlc_engine_available_permits(c.e, kind, name, #name, now, op_out)
    end)
  end
  -- try_set_permits(n) -> true set, false it had a count already
  mt.try_set_permits = function(self, n)
    local c = fam_usable(self, mt)
    integer_arg(n, "permits")
    if not c then return closed() end
    local name, kind = self.name, self.kind
    local v, err, code = sem_count(self, c, "try_set_permits", function(now)
      return lib.rlc_engine_set_permits(c.e, kind, name, #name, n, now, op_out)
    end)
    if v == nil then return nil, err, code end
    return v ~= 0
  end
  -- close(): ends the acquires still waiting (permits are not owner-bound:
  -- those taken stay out until released or, expirable, their lease ends)
  mt.close = function(self)
    local c = fam_usable(self, mt)
    if c then cancel_watched(c, self.waiting) end
    self.is_closed = true
  end
end

local function semaphore_of(client, mt, kind, name, permits)
  client_self(client)
  if not fam_name(name, "semaphore name") then
    return nil, "semaphore name must be a non-empty string without NUL bytes", E_INVAL
  end
  if permits ~= nil then integer_arg(permits, "permits", 4) end
  if not client.e or client.closing then return closed() end
  local ok, err, code = one_node(client, "semaphore")
  if not ok then return nil, err, code end
  local s = setmetatable({ client = client, name = name, kind = kind, waiting = {} }, mt)
  if permits ~= nil then
    local set, e2, c2 = s:try_set_permits(permits)
    if set == nil then
      s:close()
      return nil, e2, c2
    end
  end
  return s
end
-- client:semaphore(name [, permits]), client:permit_semaphore(name [, permits]):
-- with permits, the count is set if the semaphore has none.
function Client:semaphore(name, permits)
  return semaphore_of(self, Semaphore, KIND_SEMAPHORE, name, permits)
end
function Client:permit_semaphore(name, permits)
  return semaphore_of(self, PSemaphore, KIND_PSEMAPHORE, name, permits)
end

-- ---- the lock's queries and forced release ----------------------------------------

pcall(ffi.cdef, [[int rlc_engine_force_release(rlc_engine *e, const char *name,
  size_t name_len, uint64_t owner, int64_t now_ms, uint64_t *op);]])
pcall(ffi.cdef, [[int rlc_engine_forget(rlc_engine *e, const char *name, size_t name_len,
  uint64_t owner, int64_t now_ms);]])

-- A query of the servers on the locks' connections: the DONE event's count.
local function lock_query(self, what, q)
  lock_self(self)
  local c = usable(self)
  if not c then return closed() end
  fam_need_wait(what)
  local name = self.name
  local rec, err, code = run_op(c, what, function(now)
    return lib.rlc_engine_query(c.e, name, #name, self.owner, q, now, op_out)
  end)
  if not rec then return nil, err, code end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  return rec.count
end

-- lock:locked() -> boolean: held by anyone (a quorum of nodes has its key).
function Lock:locked()
  local v, err, code = lock_query(self, "locked", Q_LOCKED)
  if v == nil then return nil, err, code end
  return v ~= 0
end

-- lock:ttl() -> ms, as Redis's PTTL: -2 no such lock, -1 no expiry.
function Lock:ttl() return lock_query(self, "ttl", Q_TTL) end

-- lock:force_release() -> true | nil, err, code: deletes it whoever holds
-- it (true also when nobody did) and wakes its waiters. This owner's own
-- hold of it, if any, is forgotten (not renewed, no loss reported).
function Lock:force_release()
  lock_self(self)
  local c = usable(self)
  if not c then return closed() end
  fam_need_wait("force_release")
  local name = self.name
  local rec, err, code = run_op(c, "force_release", function(now)
    return lib.rlc_engine_force_release(c.e, name, #name, self.owner, now, op_out)
  end)
  if not rec then return nil, err, code end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  if c.e then lib.rlc_engine_forget(c.e, name, #name, self.owner, now_ms()) end
  self.levels = 0
  if self.rs then self.rs.locks[self] = nil end
  return true
end

-- ---- multi-locks, fenced writes ---------------------------------------------------

for _, decl in ipairs{
  [[int rlc_engine_acquire_multi(rlc_engine *e, const char *const *names,
      const size_t *name_lens, int n, uint64_t owner, int64_t wait_ms, int64_t lease_ms,
      int64_t now_ms, uint64_t *op);]],
  [[int rlc_engine_fenced_set(rlc_engine *e, const char *key, size_t key_len,
      const char *value, size_t value_len, uint64_t token, int64_t now_ms, uint64_t *op);]],
} do
  pcall(ffi.cdef, decl)
end

-- Multi-name lock: acquire{ wait_ms, lease_ms }, release(), size(), close().
-- Every name or none; each name is then one more level of the owner's hold
-- of it as a lock (client:lock's kind), given back name by name.
local MultiLock = fam_class("resty.redlockc.multi_lock")

function MultiLock:acquire(opts)
  local c = fam_usable(self, MultiLock)
  local o = fam_opts(opts, LOCK_OPTS)
  if not c then return closed() end
  local names, n = self.names, #self.names
  local rec, err, code = run_op(c, "acquire", function(now)
    return lib.rlc_engine_acquire_multi(c.e, self.name_ptrs, self.name_lens, n, self.owner,
                                        o.wait_ms, o.lease_ms, now, op_out)
  end, self.waiting, self.rs)
  if not rec then return nil, err, code end
  if rec.status == E_CANCELED and self.is_closed then return closed() end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  self.levels = self.levels + 1
  if self.rs then self.rs.fam[self] = true end
  local _ = names -- the strings the pointers name stay alive with self
  return true
end

-- One level of each name back. Every release is sent, then each awaited;
-- the first failure is the result.
function MultiLock:release()
  local c = fam_usable(self, MultiLock)
  if not c then return closed() end
  if not can_wait() then
    self:_finish(c, 1)
    return true, "sent"
  end
  local recs, status, message = {}, OK, nil
  for i, name in ipairs(self.names) do
    c.last_now = now_ms()
    local rc = lib.rlc_engine_release(c.e, name, #name, self.owner, c.last_now, op_out)
    if rc ~= OK then
      service(c)
      return call_failed(rc)
    end
    recs[i] = new_op(c, "release", true)
  end
  service(c)
  for _, rec in ipairs(recs) do
    local ok, err = await(rec)
    if not ok then return nil, err, E_INVAL end
    if rec.status ~= OK and status == OK then status, message = rec.status, rec.message end
  end
  if status == E_NOT_OWNER or status == E_CLOSED then
    self.levels = 0
  elseif self.levels > 0 then
    self.levels = self.levels - 1
  end
  if self.levels == 0 and self.rs then self.rs.fam[self] = nil end
  if status ~= OK then return failed(status, message) end
  return true
end

-- Sends levels (default: all of this object's) releases of each name
-- without waiting: finish_request(), a phase that cannot yield.
function MultiLock:_finish(c, levels)
  local sent = 0
  levels = levels or self.levels
  for _ = 1, levels do
    for _, name in ipairs(self.names) do
      if release_nowait(c, name, self.owner) == OK then sent = sent + 1 end
    end
  end
  self.levels = max(0, self.levels - levels)
  if self.levels == 0 and self.rs then self.rs.fam[self] = nil end
  service(c)
  return sent
end

-- size() -> how many names (each once).
function MultiLock:size()
  local c = fam_usable(self, MultiLock)
  if not c then return closed() end
  return #self.names
end

function MultiLock:close()
  local c = fam_usable(self, MultiLock)
  if c then
    cancel_watched(c, self.waiting)
    while self.levels > 0 do
      local ok, _, code = self:release()
      if not ok and code ~= E_LOST then break end
    end
  end
  if self.rs then self.rs.fam[self] = nil end
  self.is_closed, self.levels = true, 0
end

function Client:multi_lock(names, owner)
  client_self(self)
  if type(names) ~= "table" then
    error("resty.redlockc: multi_lock names must be a list of strings, got " .. type(names), 2)
  end
  local seen, list = {}, {}
  for i = 1, #names do
    if not fam_name(names[i], "name " .. i) then
      return nil, "name " .. i .. " must be a non-empty string without NUL bytes", E_INVAL
    end
    if not seen[names[i]] then
      seen[names[i]] = true
      list[#list + 1] = names[i]
    end
  end
  if #list < 1 or #list > 1024 then
    return nil, "a multi-lock takes 1 to 1024 names", E_INVAL
  end
  local o, rs = fam_owner(owner)
  if not o then return nil, "owner must be 1 .. 2^62-1", E_INVAL end
  if not self.e or self.closing then return closed() end
  local ptrs, lens = ffi_new("const char *[?]", #list), ffi_new("size_t[?]", #list)
  for i, name in ipairs(list) do
    ptrs[i - 1], lens[i - 1] = name, #name
  end
  return setmetatable({ client = self, name = concat(names, ","), names = list, owner = o,
                        name_ptrs = ptrs, name_lens = lens, levels = 0, waiting = {},
                        rs = rs }, MultiLock)
end

-- client:fenced_set(key, value, token) -> true written | false refused (a
-- larger token is stored) | nil, err, code. Writes value at key only if
-- token (lock:fencing_token(), a number 1 .. 2^53 or a uint64_t cdata) is
-- at least the fence stored with it in "redlockc_fence:{key}". The client
-- must have one node: the resource's Redis.
function Client:fenced_set(key, value, token)
  client_self(self)
  if type(key) ~= "string" or type(value) ~= "string" then
    error("resty.redlockc: key and value must be strings", 2)
  end
  if type(token) == "number" then
    integer_arg(token, "token")
  elseif not ffi.istype("uint64_t", token) then
    error("resty.redlockc: token must be a number or a uint64_t cdata", 2)
  end
  if token < 1 then return nil, "token must be >= 1 (a lock's fencing_token)", E_INVAL end
  if has_nul(key) then return nil, "key contains a NUL byte", E_INVAL end
  if not self.e or self.closing then return closed() end
  fam_need_wait("fenced_set")
  local rec, err, code = run_op(self, "fenced_set", function(now)
    return lib.rlc_engine_fenced_set(self.e, key, #key, value, #value, token, now, op_out)
  end)
  if not rec then return nil, err, code end
  if rec.status ~= OK then return failed(rec.status, rec.message) end
  return rec.count ~= 0
end

-- client:metrics() -> the counters of this client, in this worker, as
-- resty.redlockc.blocking's metrics() gives them (see metrics_table): its
-- engine's (every kind: locks, the family, their waits and renewals, its
-- connections) plus client:blocking()'s, if the app made that one. Each worker has its own clients: a sum over workers is
-- the caller's. No I/O.
local METRICS_MAX = 64
local metrics_out = ffi_new("uint64_t[?]", METRICS_MAX)
function Client:metrics()
  client_self(self)
  if not self.e or self.closing then return closed() end
  local n = lib.rlc_engine_metrics(self.e, metrics_out, METRICS_MAX)
  if n < 0 then return call_failed(n) end
  -- the table resty.redlockc.blocking's metrics() gives: acquires, busy,
  -- waits, ..., wait_ms_sum, wait_buckets (cumulative counts)
  local out = blocking._internal.metrics_table(metrics_out, min(n, METRICS_MAX))
  if self.twin then
    local b, err, code = self.twin:metrics()
    if not b then return nil, err, code end
    for name, value in pairs(b) do
      if name == "wait_buckets" then
        -- the same bounds on both sides: cumulative counts add up
        for i, wb in ipairs(value) do
          local mine = out.wait_buckets[i]
          if mine then
            mine.count = mine.count + wb.count
          else
            out.wait_buckets[i] = { le = wb.le, count = wb.count }
          end
        end
      elseif type(value) == "number" then
        out[name] = (out[name] or 0) + value
      end
    end
  end
  return out
end

-- client:close(): stops the pump once the engine is idle (bounded by
-- shutdown_ms, default 2000) so that releases already sent go out; holds
-- not released expire. Ops still waiting end with E_CLOSED.
function Client:close()
  client_self(self)
  if self.closing or not self.e then return end
  self.closing = true
  if self.twin then self.twin:close() end
  if self.pump_running then
    wake_pump(self)
  else
    local e = self.e
    self.e = nil
    fail_all(self)
    lib.rlc_engine_free(e)
  end
end

function Client:__tostring()
  return "resty.redlockc.client" .. ((self.e and not self.closing) and "" or " closed")
end

-- client:stats() -> { ops = in flight, conns_open = n, pump = bool }. No I/O.
function Client:stats()
  local n, open = 0, 0
  for _ in pairs(self.ops) do n = n + 1 end
  for k = 0, self.nconns - 1 do
    if self.conns[k].state == OPEN then open = open + 1 end
  end
  return { ops = n, conns_open = open, pump = self.pump_running }
end

-- ---- module functions -------------------------------------------------------------------

local function read_random(n)
  local f = io.open("/dev/urandom", "rb")
  if not f then return nil end
  local s = f:read(n)
  f:close()
  return s and #s == n and s or nil
end

-- A version 4 UUID from /dev/urandom (the engine seeds its jitter with it).
local function new_uuid()
  local r = read_random(16)
  if not r then return nil end
  local b = { byte(r, 1, 16) }
  b[7] = b[7] % 16 + 0x40
  b[9] = b[9] % 64 + 0x80
  local h = {}
  for i = 1, 16 do h[i] = format("%02x", b[i]) end
  return concat(h, "", 1, 4) .. "-" .. concat(h, "", 5, 6) .. "-" .. concat(h, "", 7, 8) .. "-"
    .. concat(h, "", 9, 10) .. "-" .. concat(h, "", 11, 16)
end

-- Options the driver reads itself (the engine accepts them too).
local function option_number(options, name, default)
  if not options then return default end
  local v = options:match("%f[%w_]" .. name .. "%s*=%s*(%d+)")
  return v and tonumber(v) or default
end

-- The TLS settings of a client with rediss:// nodes from the engine's
-- tls_* options, or nil and why. The CAs are nginx's (there is no per-socket
-- CA in ngx_lua): tls_ca_file and tls_ca_dir are refused, not ignored.
local function tls_settings(e)
  local function opt(name)
    local v = lib.rlc_engine_option(e, name)
    return v ~= nil and ffi_string(v) or nil
  end
  for _, name in ipairs({ "tls_ca_file", "tls_ca_dir" }) do
    if opt(name) then
      return nil, "option " .. name .. ": under nginx the CAs come from the " ..
                  "lua_ssl_trusted_certificate directive (http block); remove the option"
    end
  end
  local t = { verify = opt("tls_verify") ~= "0", server_name = opt("tls_server_name") }
  local cert_file = opt("tls_cert_file")
  if cert_file then
    local ok, ssl = pcall(require, "ngx.ssl")
    if not ok then return nil, "option tls_cert_file needs ngx.ssl (lua-resty-core): " .. ssl end
    local function read(name, file)
      local f, err = io.open(file, "rb")
      if not f then return nil, "option " .. name .. ": cannot read '" .. file .. "': " .. err end
      local pem = f:read("*a")
      f:close()
      return pem
    end
    local pem, err = read("tls_cert_file", cert_file)
    if not pem then return nil, err end
    local key_file = opt("tls_key_file") or cert_file
    local key_pem = pem
    if key_file ~= cert_file then
      key_pem, err = read("tls_key_file", key_file)
      if not key_pem then return nil, err end
    end
    t.cert, err = ssl.parse_pem_cert(pem)
    if not t.cert then return nil, "option tls_cert_file: " .. tostring(err) end
    t.key, err = ssl.parse_pem_priv_key(key_pem)
    if not t.key then return nil, "option tls_key_file: " .. tostring(err) end
  end
  return t
end

-- redlockc.client(nodes [, opts]) -> client | nil, err, code. No I/O.
-- nodes: "redis://host:port[/db]" or unix:// URIs, a comma-separated string
-- or a list (N >= 2 nodes: Redlock). Host names must be IP addresses (the
-- cosocket connect would resolve them, the engine's address is used as
-- given). opts as resty.redlockc.blocking's, plus shutdown_ms (driver:
-- how long close() or a worker's exit waits for the engine to be idle).
-- Make one client per worker, in init_worker_by_lua* or later.
function _M.client(nodes, opts)
  if not ngx then
    error("resty.redlockc needs OpenResty; outside nginx use resty.redlockc.blocking", 2)
  end
  semaphore = semaphore or require "ngx.semaphore"
  lib = lib or blocking.lib()
  if type(nodes) == "table" then
    for i = 1, #nodes do
      if type(nodes[i]) ~= "string" then
        error("resty.redlockc: node " .. i .. " must be a string, got " .. type(nodes[i]), 2)
      end
    end
    nodes = concat(nodes, ",")
  elseif type(nodes) ~= "string" then
    error("resty.redlockc: nodes must be a string or a list of strings, got " .. type(nodes), 2)
  end
  local shutdown_ms = 2000
  if type(opts) == "table" and opts.shutdown_ms ~= nil then
    shutdown_ms = integer_arg(opts.shutdown_ms, "option shutdown_ms")
    local o = {}
    for k, v in pairs(opts) do if k ~= "shutdown_ms" then o[k] = v end end
    opts = o
  end
  local options, oerr = options_string(opts)
  if oerr then return nil, oerr, E_INVAL end
  if has_nul(nodes) or (options and has_nul(options)) then
    return nil, "nodes or options contain a NUL byte", E_INVAL
  end
  local uuid = new_uuid()
  if not uuid then return nil, "cannot read /dev/urandom", errors.E_NOMEM end
  local out = ffi_new("rlc_engine *[1]")
  local rc = lib.rlc_engine_new(out, nodes, uuid, options)
  if rc ~= OK then return call_failed(rc) end
  local e = out[0]
  local n = lib.rlc_engine_nodes(e)
  local c = setmetatable({
    e = e, nodes = nodes, options = options, uuid_str = uuid, nconns = lib.rlc_engine_conns(e),
    conns = {}, ops = {}, lost = {}, reap = {}, node_host = {}, node_port = {},
    wake = semaphore.new(0), wake_posted = false, pump_running = false, pump_deadline = -1,
    need_open = false, closing = false, last_now = now_ms(),
    connect_timeout_ms = option_number(options, "connect_timeout_ms", 1000),
    fencing = option_number(options, "fencing", 0) ~= 0,
    send_timeout_ms = max(option_number(options, "io_timeout_ms", 1000), 10000),
    shutdown_ms = shutdown_ms,
  }, Client)
  c.node_tls = {}
  for i = 0, n - 1 do
    lib.rlc_engine_node_address(e, i, host_out, port_out)
    c.node_host[i], c.node_port[i] = ffi_string(host_out[0]), tonumber(port_out[0])
    c.node_tls[i] = lib.rlc_engine_node_tls(e, i) == 1
    if c.node_tls[i] then c.any_tls = true end
  end
  if c.any_tls then
    local tls, terr = tls_settings(e)
    if not tls then
      lib.rlc_engine_free(e)
      return nil, terr, E_INVAL
    end
    c.tls = tls
    -- nginx checks the certificate against a name (X509_check_host), never
    -- an IP address: an address with no tls_server_name could not verify.
    for i = 0, n - 1 do
      local h = c.node_host[i]
      if c.node_tls[i] and tls.verify and not tls.server_name
         and (h:find(":", 1, true) or h:match("^%d+%.%d+%.%d+%.%d+$")) then
        lib.rlc_engine_free(e)
        return nil, "node " .. h .. ":" .. c.node_port[i] .. " is rediss:// at an IP address: " ..
                    "nginx checks a certificate against a host name only; set tls_server_name " ..
                    "to the name in the server's certificate (or tls_verify=0)", E_INVAL
      end
    end
  end
  for k = 0, c.nconns - 1 do
    c.conns[k] = { state = CLOSED, gen = 0, writing = false, wsem = semaphore.new(0),
                   fails = 0, next_try = 0 }
  end
  -- The pump keeps c alive while it runs; engine freed by close() or at exit.
  return c
end

-- redlockc.finish_request(): call it in log_by_lua* (on every location
-- where locks are taken, or at http level). Ends the request's acquires
-- still in flight (what they took is undone: a client that aborted) and
-- releases every level its lock objects still hold, without waiting (the
-- pump sends them). Returns the number of releases sent.
function _M.finish_request()
  local ok, ctx = pcall(function() return ngx.ctx end)
  local rs = ok and ctx and ctx[REQ_KEY]
  if not rs then return 0 end
  ctx[REQ_KEY] = nil
  local sent = 0
  for rec, c in pairs(rs.ops) do
    if c.e and not rec.done then
      c.last_now = now_ms()
      lib.rlc_engine_cancel(c.e, rec.id, c.last_now)
      service(c)
    end
  end
  -- The levels of each (client, name, owner): the engine's count while the
  -- hold is valid; once lost it counts 0, and the levels the request's
  -- objects still have out are what the engine still keeps (a release each).
  local todo = {}
  for lock in pairs(rs.locks) do
    local c = lock.client
    if c.e and not c.closing and not lock.is_closed then
      local key = lost_key(lock.name, lock.owner)
      todo[c] = todo[c] or {}
      local t = todo[c][key]
      if not t then
        t = { lock = lock, levels = 0 }
        todo[c][key] = t
      end
      t.levels = t.levels + lock.levels
      lock.levels = 0
    end
  end
  for h in pairs(rs.fam) do -- the family's holds
    local c = h.client
    if c.e and not c.closing and not h.is_closed then sent = sent + h:_finish(c) end
  end
  for c, locks in pairs(todo) do
    for _, t in pairs(locks) do
      local lock = t.lock
      local n = t.levels
      if validity_now(c, lock) > 0 then
        n = tonumber(lib.rlc_engine_hold_count(c.e, lock.name, #lock.name, lock.owner))
      end
      for _ = 1, n do
        if release_nowait(c, lock.name, lock.owner) == OK then sent = sent + 1 end
      end
    end
    service(c)
  end
  return sent
end

-- The blocking module (1.0's resty.redlockc; plain LuaJIT outside nginx).
_M.blocking = blocking

return _M
