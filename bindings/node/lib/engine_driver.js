'use strict';
// The event-loop driver of one rlc_engine (redlockc.h, "Engine (1.1)"): the
// lock protocol runs in the engine, and this file only moves its bytes and
// its time. Per node it owns two net.Sockets (the command connection 2i and
// the subscriber 2i+1, opened when the engine wants them, setNoDelay), one
// timer for rlc_engine_deadline(), and the map from operation ids to the
// promises that RLC_EV_DONE events resolve. Nothing blocks and no thread is
// started: 10,000 waiting acquisitions are 10,000 entries in a Map.
//
// After every call into the engine the driver "pumps" (see pump()): opens
// the connections the engine wants, writes what it has pending, reads its
// events, and re-arms the timer. Calls made by the program (acquire,
// release...) pump from setImmediate: the operations started in one turn of
// the loop leave in one write, and after the I/O of that turn was read - a
// connection the server closed a moment ago is known closed then, and its
// requests go on a new one instead of into the dead socket.
//
// TLS: a rediss:// node's sockets are tls.connect()s, built from the tls_*
// options the engine keeps (rlc_engine_option): the engine writes and reads
// the same RESP, the TLS is all here. A connection counts as up once its
// handshake is done; a handshake that fails closes it to the engine, and its
// error ("host:port: TLS handshake failed: ...") is the detail of the
// failing operation.
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const tls = require('node:tls');
const { koffi } = require('./native.js');
const { loadNative } = require('../build.js');
const { STATUS } = require('./errors.js');

const lib = loadNative(koffi);
const efn = {
  engineNew: lib.func('void *rlcn_engine_new(const char *nodes, const char *uuid, const char *options, void *res)'),
  address: lib.func('int rlcn_engine_node_address(void *e, int node, void *res)'),
  connAddress: lib.func('int rlcn_engine_conn_address(void *e, int conn, void *res)'),
  conns: lib.func('int rlc_engine_conns(void *e)'),
  nodeTls: lib.func('int rlc_engine_node_tls(void *e, int node)'),
  option: lib.func('const char *rlc_engine_option(void *e, const char *name)'),
  take: lib.func('size_t rlcn_engine_take(void *e, int conn, uint8_t *buf, size_t cap)'),
  start: lib.func('uint64_t rlcn_engine_start(void *e, int kind, int lockKind, const uint8_t *name, size_t len, uint64_t owner, int64_t wait, int64_t lease, int64_t now, void *res)'),
  startFair: lib.func('uint64_t rlcn_engine_start_fair(void *e, const uint8_t *name, size_t len, uint64_t owner, int64_t wait, int64_t lease, int64_t threadWait, int64_t now, void *res)'),
  startFenced: lib.func('uint64_t rlcn_engine_start_fenced(void *e, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len, uint64_t token, int64_t now, void *res)'),
  startMulti: lib.func('uint64_t rlcn_engine_start_multi(void *e, const uint8_t *names, int n, uint64_t owner, int64_t wait, int64_t lease, int64_t now, void *res)'),
  startPermits: lib.func('uint64_t rlcn_engine_start_permits(void *e, int what, int kind, const uint8_t *name, size_t len, uint64_t owner, int64_t permits, const char *id, int64_t wait, int64_t lease, int64_t now, void *res)'),
  permitId: lib.func('int rlcn_engine_permit_id(void *e, uint64_t token, int64_t permits, void *res)'),
  event: lib.func('int rlcn_engine_event(void *e, uint8_t *buf, size_t cap)'),
  // libredlockc's own (the helper links it: its symbols are found through it)
  free: lib.func('void rlc_engine_free(void *e)'),
  nodes: lib.func('int rlc_engine_nodes(void *e)'),
  wantOpen: lib.func('int rlc_engine_want_open(void *e, int conn)'),
  connected: lib.func('void rlc_engine_connected(void *e, int conn, int64_t now)'),
  closed: lib.func('void rlc_engine_closed(void *e, int conn, int64_t now)'),
  received: lib.func('int rlc_engine_received(void *e, int conn, const uint8_t *data, size_t len, int64_t now)'),
  deadline: lib.func('int64_t rlc_engine_deadline(void *e)'),
  tick: lib.func('void rlc_engine_tick(void *e, int64_t now)'),
  idle: lib.func('int rlc_engine_idle(void *e)'),
  cancel: lib.func('int rlc_engine_cancel(void *e, uint64_t op, int64_t now)'),
  holdCount: lib.func('int64_t rlc_engine_hold_count_kind(void *e, int kind, const uint8_t *name, size_t len, uint64_t owner)'),
  validity: lib.func('int64_t rlc_engine_validity_ms_kind(void *e, int kind, const uint8_t *name, size_t len, uint64_t owner, int64_t now)'),
  forget: lib.func('int rlc_engine_forget_kind(void *e, int kind, const uint8_t *name, size_t len, uint64_t owner, int64_t now)'),
  nextLog: lib.func('size_t rlc_engine_next_log(void *e, void *level, uint8_t *buf, size_t size)'),
  metrics: lib.func('int rlc_engine_metrics(void *e, void *out, int n)'),
};

// As in src/rlcnode_engine.c: a query's kind is QUERY + what it asks (Q).
// PERMITS: a semaphore's one-shot calls (set, count, give back); they end
// as they would at close, as a release does.
const KIND = { ACQUIRE: 0, RELEASE: 1, EXTEND: 2, FORCE_RELEASE: 3, QUERY: 4, FENCED_SET: -1, PERMITS: -2 };
// What rlcn_engine_start_permits starts (its enum in src/rlcnode_engine.c).
const PERMITS = { ACQUIRE: 0, RELEASE: 1, SET: 2, AVAILABLE: 3 };
// RLC_Q_* of redlockc.h; MODE: a read-write lock's (0 free, 1 read, 2 write).
const Q = { LOCKED: 1, HELD: 2, COUNT: 3, TTL: 4, MODE: 5 };
// The lock kinds the engine runs (RLC_KIND_* of redlockc.h): a Lock's (a
// MultiLock's names too), the read and write sides of a read-write lock, the
// fair lock and the two semaphores (lib/family.js).
const LOCK_KIND = { LOCK: 0, READ: 1, WRITE: 2, FAIR: 3, SEMAPHORE: 4, PSEMAPHORE: 5 };
const EV_DONE = 1;
const EV_LOST = 2;
const EV_HEAD = 64;
const OUT_CAP = 1 << 16;
const RECORD = 256;

// One monotonic ms clock for every engine of the process (never 0, never back).
const CLOCK_BASE = 1000 - Math.floor(performance.now());
const nowMs = () => Math.floor(performance.now()) + CLOCK_BASE;

// Shared scratch buffers: the JS thread is the only caller, and each is read
// right after the call that filled it.
const outBuf = Buffer.alloc(OUT_CAP);
const evBuf = Buffer.alloc(EV_HEAD + 1024);
const logBuf = Buffer.alloc(1024);
const logLevel = Buffer.alloc(4);
const res = Buffer.alloc(RECORD);
const resMsg = () => {
  const end = res.indexOf(0, 24);
  return res.toString('utf8', 24, end < 0 ? RECORD : end);
};

function readEvent() {
  return {
    type: evBuf.readInt32LE(0),
    status: evBuf.readInt32LE(4),
    op: Number(evBuf.readBigUInt64LE(8)),
    owner: Number(evBuf.readBigUInt64LE(16)),
    token: evBuf.readBigUInt64LE(24),
    validity: Number(evBuf.readBigInt64LE(32)),
    count: Number(evBuf.readBigInt64LE(40)),
    lockKind: evBuf.readInt32LE(56),
    message: evBuf.toString('utf8', EV_HEAD, EV_HEAD + evBuf.readUInt32LE(52)),
  };
}

// A failure that the engine reported synchronously (a bad name or lease).
class StartError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const E_INVAL = -1;

// The PEM certificates of an OpenSSL CA directory (c_rehash's "<hash>.0"
// links, or plain .pem/.crt files): Node has no CApath, so they are read.
function readCaDir(dir) {
  const pems = [];
  for (const name of fs.readdirSync(dir).sort()) {
    const file = path.join(dir, name);
    let text;
    try {
      if (!fs.statSync(file).isFile()) continue;
      text = fs.readFileSync(file, 'latin1');
    } catch {
      continue;
    }
    if (text.includes('-----BEGIN CERTIFICATE-----')) pems.push(text);
  }
  if (pems.length === 0) throw new Error(`no PEM certificate in ${dir}`);
  return pems;
}

// The tls.connect() options of this engine's rediss:// nodes (host and port
// come per connection), or throws StartError naming the option at fault.
function tlsSettings(e) {
  const opt = (name) => efn.option(e, name);
  const read = (name, how) => {
    const v = opt(name);
    if (v === null || v === undefined) return undefined;
    try {
      return how(v);
    } catch (err) {
      throw new StartError(E_INVAL, `option ${name}: cannot read '${v}': ${err.code || err.message}`);
    }
  };
  const caFile = read('tls_ca_file', (f) => fs.readFileSync(f, 'latin1'));
  const caDir = read('tls_ca_dir', readCaDir);
  const cert = read('tls_cert_file', (f) => fs.readFileSync(f, 'latin1'));
  const key = read('tls_key_file', (f) => fs.readFileSync(f, 'latin1')) ?? cert;
  // The given CAs replace the default ones (a private CA is trusted alone).
  const ca = caFile || caDir ? [caFile, ...(caDir || [])].filter(Boolean) : undefined;
  let secureContext;
  try {
    secureContext = tls.createSecureContext({ ca, cert, key });
  } catch (err) {
    throw new StartError(E_INVAL, `TLS options: ${err.message}`);
  }
  const settings = { secureContext, rejectUnauthorized: opt('tls_verify') !== '0' };
  const name = opt('tls_server_name');
  if (name) settings.servername = name; // SNI, and the name the certificate must carry
  return settings;
}

// "TLS handshake failed: self-signed certificate in certificate chain
// (SELF_SIGNED_CERT_IN_CHAIN)" (errorDetail() puts the node before it); a TCP
// error (refused, reset) as it is.
function tlsError(err, c) {
  const ssl = /^ERR_(SSL|TLS)_|CERT|SELF_SIGNED|UNABLE_TO|HOSTNAME/.test(err.code || '') ||
    Boolean(err.library) || Boolean(err.reason);
  if (!ssl && !(c.tcp && !c.up)) return err;
  const text = err.reason || err.message; // OpenSSL's reason, without its file and line
  const code = err.code && !text.includes(err.code) ? ` (${err.code})` : '';
  const hint = /certificate required/i.test(text) ? ': the server requires a client certificate (tls_cert_file)' : '';
  return new Error(`${c.up ? 'TLS connection failed' : 'TLS handshake failed'}: ${text}${code}${hint}`);
}

class EngineDriver {
  // nodes, uuid, options: as rlc_engine_new. hooks: {lost(owner, status,
  // message): a Lock's hold (RLC_KIND_LOCK) was lost, log(level, message),
  // connectTimeoutMs}. The losses of other kinds go to watchLost's watchers.
  constructor(nodes, uuid, options, hooks) {
    this.e = efn.engineNew(nodes, uuid, options, res);
    if (!this.e) throw new StartError(res.readInt32LE(16), resMsg());
    this.hooks = hooks;
    this.uuid = uuid;
    const n = efn.nodes(this.e);
    this.addresses = [];
    for (let i = 0; i < n; i++) {
      efn.address(this.e, i, res);
      this.addresses.push({ host: resMsg(), port: Number(res.readBigInt64LE(8)), tls: efn.nodeTls(this.e, i) === 1 });
    }
    this.tls = this.addresses.some((a) => a.tls);
    try {
      this.tlsSettings = this.tls ? tlsSettings(this.e) : null;
    } catch (err) {
      efn.free(this.e);
      this.e = null;
      throw err;
    }
    // 2 per node, then a sentinel node's discovery connection (redlockc.h)
    const nConns = efn.conns(this.e);
    this.conns = new Array(nConns).fill(null);
    this.lastError = new Array(nConns).fill(null);
    this.connLabel = new Array(nConns).fill(null); // where each went last
    this.ops = new Map();      // op id -> {resolve, kind}
    this.kindLost = new Map(); // "<lock kind>:<owner>" -> fn(ev): losses of holds not a Lock's
    this.timer = null;
    this.timerAt = -1;
    this.tickQueued = false;   // the timer fired: its tick waits for the poll phase
    this.scheduled = false;
    this.pumping = false;
    this.again = false;
    this.referenced = false;   // sockets and timer keep the process alive
    this.closing = false;
    this.waitIdle = null;      // close(): resolves when nothing is in flight
  }

  // ---- operations -----------------------------------------------------------

  // Starts an operation; resolves with its RLC_EV_DONE event (never rejects).
  // Throws StartError when the engine refuses it at once.
  start(kind, name, owner, waitMs = 0, leaseMs = 0, lockKind = LOCK_KIND.LOCK) {
    if (!this.e) throw new StartError(STATUS.E_CLOSED, 'the client is closed');
    const op = Number(efn.start(this.e, kind, lockKind, name, name.length, owner, waitMs, leaseMs,
      nowMs(), res));
    return this.started(op, kind);
  }

  // A multi-lock of names (Buffers without NUL): every name or none; each
  // name is then one level of owner's hold of it, released and extended on
  // its own (rlc_engine_acquire_multi).
  acquireMulti(names, owner, waitMs, leaseMs) {
    if (!this.e) throw new StartError(STATUS.E_CLOSED, 'the client is closed');
    const packed = Buffer.concat(names.flatMap((n) => [n, Buffer.alloc(1)]));
    const op = Number(efn.startMulti(this.e, packed, names.length, owner, waitMs, leaseMs, nowMs(), res));
    return this.started(op, KIND.ACQUIRE);
  }

  started(op, kind) {
    if (op === 0) throw new StartError(res.readInt32LE(16), resMsg());
    const promise = new Promise((resolve) => this.ops.set(op, { resolve, kind }));
    this.reference();
    this.schedule();
    return { op, promise };
  }

  // lockKind: LOCK_KIND.* (default a Lock's); a fair lock's acquire is
  // acquireFair.
  acquire(name, owner, waitMs, leaseMs, lockKind) {
    return this.start(KIND.ACQUIRE, name, owner, waitMs, leaseMs, lockKind);
  }

  // A fair lock's acquire (LOCK_KIND.FAIR, rlc_engine_acquire_fair):
  // threadWaitMs (> 0) is how long a queued waiter that stopped trying keeps
  // its place. Released, counted and forgotten with LOCK_KIND.FAIR.
  acquireFair(name, owner, waitMs, leaseMs, threadWaitMs) {
    if (!this.e) throw new StartError(STATUS.E_CLOSED, 'the client is closed');
    const op = Number(efn.startFair(this.e, name, name.length, owner, waitMs, leaseMs, threadWaitMs,
      nowMs(), res));
    return this.started(op, KIND.ACQUIRE);
  }

  // A semaphore's operations (lockKind LOCK_KIND.SEMAPHORE or .PSEMAPHORE,
  // one node only). acquirePermits takes permits for owner (an id of one
  // acquire: permits are bound to no owner), waiting waitMs, an expirable
  // one with a lease of leaseMs; its DONE event's count is the permits
  // taken and its token the grant (permitId names an expirable grant's
  // permits). An acquire is cancelled as any (cancel(op)).
  acquirePermits(lockKind, name, owner, permits, waitMs, leaseMs) {
    return this.startPermits(PERMITS.ACQUIRE, KIND.ACQUIRE, lockKind, name, owner, permits, null, waitMs, leaseMs);
  }

  // Gives permits back: plain, that many; expirable, those named by id. DONE's
  // count is the permits given back; an id no longer held ends RLC_E_LOST.
  releasePermits(lockKind, name, permits, id) {
    return this.startPermits(PERMITS.RELEASE, KIND.PERMITS, lockKind, name, 0, permits, id);
  }

  // The count set to permits if it has none: DONE's count 1 set, 0 it had one.
  setPermits(lockKind, name, permits) {
    return this.startPermits(PERMITS.SET, KIND.PERMITS, lockKind, name, 0, permits);
  }

  // The permits free now: DONE's count.
  availablePermits(lockKind, name) {
    return this.startPermits(PERMITS.AVAILABLE, KIND.PERMITS, lockKind, name, 0, 0);
  }

  startPermits(what, kind, lockKind, name, owner, permits, id = null, waitMs = 0, leaseMs = 0) {
    if (!this.e) throw new StartError(STATUS.E_CLOSED, 'the client is closed');
    const op = Number(efn.startPermits(this.e, what, lockKind, name, name.length, owner, permits, id,
      waitMs, leaseMs, nowMs(), res));
    return this.started(op, kind);
  }

  // An expirable grant's permit id (32 hex digits) from its DONE event.
  permitId(ev) {
    if (!this.e) throw new StartError(STATUS.E_CLOSED, 'the client is closed');
    if (efn.permitId(this.e, ev.token, ev.count, res) !== STATUS.OK) {
      throw new StartError(res.readInt32LE(16), resMsg());
    }
    return resMsg();
  }

  release(name, owner, lockKind) { return this.start(KIND.RELEASE, name, owner, 0, 0, lockKind); }
  extend(name, owner, leaseMs) { return this.start(KIND.EXTEND, name, owner, 0, leaseMs); }

  // One round that asks the servers (what: Q.*), changing nothing; its DONE
  // event's count is the answer (rlc_engine_query).
  query(name, owner, what) { return this.start(KIND.QUERY + what, name, owner); }

  // Deletes the lock whoever holds it and wakes its waiters; DONE's count is
  // how many nodes had it (rlc_engine_force_release). No hold of this engine
  // ends with it: a hold of the name finds it gone and is reported lost.
  forceRelease(name, owner) { return this.start(KIND.FORCE_RELEASE, name, owner); }

  // key = value if token is at least the fence stored with it; DONE's count
  // is 1 written, 0 refused (rlc_engine_fenced_set: an engine of one node).
  fencedSet(key, value, token) {
    if (!this.e) throw new StartError(STATUS.E_CLOSED, 'the client is closed');
    const op = Number(efn.startFenced(this.e, key, key.length, value, value.length, token, nowMs(), res));
    return this.started(op, KIND.FENCED_SET);
  }

  // Ends a running acquire with RLC_E_CANCELED (its DONE event says so).
  cancel(op) {
    if (!this.e || !this.ops.has(op)) return;
    efn.cancel(this.e, op, nowMs());
    this.schedule();
  }

  // When the engine next wants tick() (ms, driver clock), or -1.
  deadline() {
    return this.e ? Number(efn.deadline(this.e)) : -1;
  }

  holdCount(name, owner, lockKind = LOCK_KIND.LOCK) {
    return this.e ? Number(efn.holdCount(this.e, lockKind, name, name.length, owner)) : 0;
  }

  // owner's hold of (name, lockKind) ends here quietly: no renewal, no loss
  // report; what the servers keep of it expires with its lease.
  forget(name, owner, lockKind) {
    if (this.e && !this.closing) efn.forget(this.e, lockKind, name, name.length, owner, nowMs());
  }

  // fn(ev) hears the loss of owner's holds of lockKind (not LOCK_KIND.LOCK:
  // a Lock's go to hooks.lost); fn null stops it.
  watchLost(lockKind, owner, fn) {
    const key = `${lockKind}:${owner}`;
    if (fn) this.kindLost.set(key, fn);
    else this.kindLost.delete(key);
  }

  // ms the owner's hold is certainly still held, now (the engine's own
  // figure, at the clock's current reading, not at the engine's last tick):
  // 0 once its validity ran out, even before the timer that finds it lost
  // has run (a loop blocked past the lease). The one answer to "is it held".
  validity(name, owner, lockKind = LOCK_KIND.LOCK) {
    return this.e ? Number(efn.validity(this.e, lockKind, name, name.length, owner, nowMs())) : 0;
  }

  // The engine's counters (rlc_engine_metrics: the indices of
  // rlc_client_metrics) into out, one uint64 LE each; returns how many the
  // library has (0, and out left as it is, once the engine is freed).
  metrics(out) {
    return this.e ? efn.metrics(this.e, out, out.length >> 3) : 0;
  }

  // ---- the loop ---------------------------------------------------------------

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  // Does what the engine asks for now; re-entrant calls (an event handler
  // that starts an operation) make the running pump go round again.
  pump() {
    if (!this.e) return;
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = true;
    try {
      for (let rounds = 0; rounds < 1000; rounds++) {
        this.again = false;
        this.service();
        if (!this.again) break;
      }
    } finally {
      this.pumping = false;
    }
  }

  service() {
    const e = this.e;
    for (let k = 0; k < this.conns.length; k++) {
      const c = this.conns[k];
      const want = efn.wantOpen(e, k);
      if (!c) {
        if (want === 1) this.open(k);
        else if (want === -1) efn.closed(e, k, nowMs()); // given up while closed: acknowledged
      } else if (want === -1) {
        // The engine gave it up (a stalled server, bytes not RESP, a sentinel
        // node's master moved): close it, and say so, so it may reopen.
        c.gone = true;
        this.conns[k] = null;
        c.socket.destroy();
        efn.closed(e, k, nowMs());
        this.again = true;
      } else if (c.up) {
        for (let n = OUT_CAP; n === OUT_CAP;) {
          n = Number(efn.take(e, k, outBuf, OUT_CAP));
          if (n > 0) c.socket.write(Buffer.from(outBuf.subarray(0, n)));
        }
      }
    }
    const done = [];
    while (efn.event(e, evBuf, evBuf.length)) done.push(readEvent());
    for (const ev of done) this.dispatch(ev);
    // what the engine would log, as the blocking client does: a node that
    // refused loss push (warn), reconnecting, a node that lost the scripts
    for (let n; (n = Number(efn.nextLog(e, logLevel, logBuf, logBuf.length))) > 0;) {
      this.hooks.log(logLevel.readInt32LE(0), logBuf.toString('utf8', 0, Math.min(n, logBuf.length - 1)));
    }
    this.arm();
    if (this.waitIdle && this.ops.size === 0 && efn.idle(e)) this.waitIdle();
  }

  dispatch(ev) {
    if (ev.type === EV_LOST) {
      // Routed by (kind, owner): a read, write or fair hold's loss never reaches a Lock.
      if (ev.lockKind === LOCK_KIND.LOCK) this.hooks.lost(ev.owner, ev.status, ev.message);
      else this.kindLost.get(`${ev.lockKind}:${ev.owner}`)?.(ev);
      return;
    }
    if (ev.type !== EV_DONE) return;
    const job = this.ops.get(ev.op);
    if (!job) return;
    this.ops.delete(ev.op);
    ev.kind = job.kind;
    if (ev.status === STATUS.E_CONNECT || ev.status === STATUS.E_TIMEOUT) ev.detail = this.errorDetail();
    if (this.ops.size === 0) this.unreference();
    job.resolve(ev);
  }

  // What the sockets saw last ("127.0.0.1:6379: connect ECONNREFUSED ..."),
  // for a connection error whose engine message does not say it.
  errorDetail() {
    const seen = this.lastError.map((err, k) => (err ? `${this.where(k)}: ${err.message}` : null))
      .filter(Boolean);
    return [...new Set(seen)].join('; ');
  }

  // One timer, at the engine's deadline (a timer fires no earlier than asked).
  //
  // Its tick runs from setImmediate, not from the timer callback. Node's loop
  // runs its due timers before it polls the sockets: after a turn that kept
  // the loop busy past the deadline (a blocked loop, a long callback), the
  // timer would come first, and rlc_engine_tick would declare a timeout for
  // an operation whose reply has been waiting, unread, in the socket since
  // before its deadline. An immediate runs in the check phase, after the
  // poll phase of the same turn (which does not sleep while an immediate is
  // pending): every byte that arrived meanwhile has gone to
  // rlc_engine_received by then, and the tick judges only what is really
  // missing. On a loop that was idle the poll phase has nothing new and the
  // tick is as prompt as before (one loop phase later).
  arm() {
    if (this.tickQueued) return; // the queued tick re-arms after it ran
    const at = efn.deadline(this.e);
    const when = at < 0 ? -1 : Number(at);
    if (when === this.timerAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = when;
    if (when < 0) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.timerAt = -1;
      if (!this.e) return;
      this.tickQueued = true;
      setImmediate(() => {
        this.tickQueued = false;
        if (!this.e) return;
        efn.tick(this.e, nowMs());
        this.pump();
      });
    }, Math.max(0, when - nowMs()));
    if (!this.referenced) this.timer.unref();
  }

  // ---- connections ----------------------------------------------------------

  open(k) {
    // Asked at each connect: a sentinel node's master moves.
    const tlsFlag = efn.connAddress(this.e, k, res);
    if (tlsFlag < 0) return; // its master is not known yet: not wanted
    const host = resMsg();
    const port = Number(res.readBigInt64LE(8));
    const secure = tlsFlag === 1;
    this.connLabel[k] = port ? `${host}:${port}` : host;
    let socket;
    if (port === 0) socket = net.createConnection({ path: host });
    else if (secure) socket = tls.connect({ host, port, ...this.tlsSettings });
    else socket = net.createConnection({ host, port });
    const c = { socket, up: false, gone: false };
    this.conns[k] = c;
    socket.setNoDelay(true);
    if (!this.referenced) socket.unref();
    const limit = this.hooks.connectTimeoutMs;
    const timer = setTimeout(() => {
      socket.destroy(new Error(`connect timed out after ${limit} ms`));
    }, limit);
    timer.unref();
    if (secure) socket.once('connect', () => { c.tcp = true; });
    // A TLS connection is up when its handshake is done (and verified).
    socket.on(secure ? 'secureConnect' : 'connect', () => {
      clearTimeout(timer);
      if (c.gone || !this.e) return;
      c.up = true;
      this.lastError[k] = null;
      efn.connected(this.e, k, nowMs());
      this.pump();
    });
    socket.on('data', (chunk) => {
      if (c.gone || !this.e) return;
      if (efn.received(this.e, k, chunk, chunk.length, nowMs()) !== STATUS.OK) {
        // Not RESP: the engine counts the connection closed already.
        c.gone = true;
        this.conns[k] = null;
        this.lastError[k] = new Error('the server sent something that is not RESP');
        socket.destroy();
      }
      this.pump();
    });
    socket.on('error', (err) => {
      this.lastError[k] = secure ? tlsError(err, c) : err;
      if (secure && this.lastError[k] !== err) this.hooks.log(2, `${this.where(k)}: ${this.lastError[k].message}`);
    });
    // EOF ends the connection at once ('close' comes later, after our own
    // side is shut): nothing more may be written into it meanwhile.
    const ended = () => {
      clearTimeout(timer);
      if (c.gone) return;
      c.gone = true;
      if (this.conns[k] === c) this.conns[k] = null;
      socket.destroy();
      if (!this.e) return;
      if (c.up && !this.lastError[k]) this.lastError[k] = new Error('the server closed the connection');
      efn.closed(this.e, k, nowMs());
      this.pump();
    };
    socket.on('end', ended);
    socket.on('close', ended);
  }

  where(k) {
    if (this.connLabel[k]) return this.connLabel[k];
    const a = this.addresses[k >> 1] || this.addresses[0];
    return a.port ? `${a.host}:${a.port}` : a.host;
  }

  // While an operation is in flight the process stays alive; otherwise the
  // sockets and the timer do not keep it (a held lock renews in the
  // background, like an unref'd timer).
  reference() {
    if (this.referenced) return;
    this.referenced = true;
    for (const c of this.conns) if (c) c.socket.ref();
    if (this.timer) this.timer.ref();
  }

  unreference() {
    if (!this.referenced || this.closing) return;
    this.referenced = false;
    for (const c of this.conns) if (c) c.socket.unref();
    if (this.timer) this.timer.unref();
  }

  // ---- shutdown -------------------------------------------------------------

  // Cancels the waiting acquisitions, lets releases and extends in flight end
  // (at most boundMs), then frees the engine and closes the sockets. Returns
  // the operations still in flight then, already resolved with RLC_E_CLOSED.
  async close(boundMs) {
    if (this.closing) return this.closed;
    this.closing = true;
    this.reference();
    this.closed = (async () => {
      for (const [op, job] of this.ops) {
        if (job.kind === KIND.ACQUIRE) efn.cancel(this.e, op, nowMs());
      }
      let timer;
      await new Promise((resolve) => {
        this.waitIdle = resolve;
        timer = setTimeout(resolve, boundMs);
        this.pump();
      });
      clearTimeout(timer);
      this.waitIdle = null;
      const e = this.e;
      this.e = null;
      for (const [op, job] of this.ops) {
        job.resolve({ type: EV_DONE, status: STATUS.E_CLOSED, op, kind: job.kind, message: 'the client is closed' });
      }
      this.ops.clear();
      if (this.timer) clearTimeout(this.timer);
      this.timer = null;
      for (const c of this.conns) {
        if (c) {
          c.gone = true;
          c.socket.destroy();
        }
      }
      efn.free(e);
    })();
    return this.closed;
  }
}

module.exports = { EngineDriver, StartError, KIND, LOCK_KIND, Q, nowMs };
