'use strict';
// redlockc for Node.js: Redisson-compatible distributed locks and Redlock,
// over libredlockc.so.1. Every call that may touch the network returns a
// Promise; times are milliseconds, like setTimeout. A Lock (every call of
// it), the lock family (lib/family.js: ReadWriteLock, FairLock, Semaphore,
// PermitExpirableSemaphore, MultiLock) and fencedSet run on the library's
// engine, driven from this thread with net.Sockets (lib/engine_driver.js): a
// waiting acquire holds no thread, and a Client starts no thread and makes
// no blocking client.
//
//   const { Client } = require('redlockc');
//   const client = new Client('redis://127.0.0.1:6379');
//   await client.withLock('orders', async (signal) => { ... }, { wait: 5000 });
//
// Owners: a Node process is one thread running many tasks, so the library's
// per-thread owner means nothing here. Each Lock object is an explicit owner
// of its own: acquiring the same Lock again is reentrant, two Lock objects of
// one name exclude each other. Give each task its own Lock (withLock does).
const { EventEmitter } = require('node:events');
const { randomUUID } = require('node:crypto');
const { fn } = require('./lib/native.js');
const { EngineDriver, StartError, Q } = require('./lib/engine_driver.js');
const errors = require('./lib/errors.js');
const observe = require('./lib/observe.js');

const { STATUS, errorFor, NotAcquiredError, ClosedError, LockLostError, NotOwnerError } = errors;
const strerror = (rc) => fn.strerror(rc);
const asyncDispose = Symbol.asyncDispose || Symbol.for('nodejs.asyncDispose');
const VERSION = fn.version(); // the tracer's instrumentation version

// Explicit owner ids: unique in this process, never 0 (0 means "the thread").
let nextOwner = 1;
const LOG_LEVELS = { 1: 'error', 2: 'warn', 3: 'info', 4: 'debug' };
const METRICS_MAX = 64;

const invalid = (msg) => new errors.InvalidArgumentError(STATUS.E_INVAL, msg);

// Option objects are checked by name: a misspelt or foreign name (`timeout`
// for `wait`, `ttl` for `lease`) would otherwise be ignored, and a wait
// meant to end after 500 ms would wait forever.
function checkNames(where, options, known) {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError(`${where}: options must be an object like {${known.join(', ')}}, got ${typeof options}`);
  }
  for (const name of Object.keys(options)) {
    if (!known.includes(name)) {
      const hint = { timeout: 'wait', ttl: 'lease', leaseTime: 'lease', waitTime: 'wait' }[name];
      throw invalid(`${where}: unknown option '${name}'${hint ? ` (did you mean '${hint}'? times are in ms)` : ''}; options: ${known.join(', ')}`);
    }
  }
  return options;
}

// A time option in ms: a number (not a string like '5s'); fractions of a ms
// are not a unit anyone means here (0.5 is seconds written in the wrong unit).
function msOption(where, name, value) {
  if (typeof value !== 'number' || Number.isNaN(value)) {
    throw invalid(`${where}: ${name} must be a number of milliseconds, got ${JSON.stringify(value)}`);
  }
  if (value > 0 && value < 1) {
    throw invalid(`${where}: ${name} is ${value} ms; times are in milliseconds (${value} s is ${value * 1000})`);
  }
  return value;
}

// ms -> the C convention: negative (or Infinity) waits forever.
function waitMs(wait, where = 'acquire') {
  if (wait === undefined || wait === null || wait === Infinity) return -1;
  msOption(where, 'wait', wait);
  if (wait < 0) return -1;
  return Math.floor(wait);
}

function leaseMs(lease, where = 'acquire') {
  if (lease === undefined || lease === null) return 0;
  msOption(where, 'lease', lease);
  if (lease <= 0) return 0;
  if (!Number.isFinite(lease)) throw invalid(`${where}: lease must be a finite number of ms, got ${lease}`);
  return Math.ceil(lease);
}

const ACQUIRE_OPTIONS = ['wait', 'lease', 'signal'];

// An AbortSignal, or nothing.
function signalOption(where, signal) {
  if (signal === undefined || signal === null) return null;
  if (typeof signal !== 'object' || typeof signal.aborted !== 'boolean' ||
      typeof signal.addEventListener !== 'function') {
    throw invalid(`${where}: signal must be an AbortSignal`);
  }
  return signal;
}

// "a=1;b=2" -> {a: '1', b: '2'} (for the few values the driver needs).
function parseOptions(text) {
  const out = {};
  for (const part of text.split(';')) {
    const at = part.indexOf('=');
    if (at > 0) out[part.slice(0, at).trim()] = part.slice(at + 1).trim();
  }
  return out;
}

// Client options as Node users write them (watchdogTimeoutMs) or as
// redlockc.h names them (watchdog_timeout_ms): 'ioTimeoutMs' -> 'io_timeout_ms'.
function snakeName(name) {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

// {watchdogTimeoutMs: 600, loss_push: false} -> {text:
// "watchdog_timeout_ms=600;loss_push=0", given: Map(snake -> as written)}.
// The names are not listed here: the library's option table is the one list
// (c/src/engine/options.c), and the library refuses a name it does not know
// ("unknown option"), so every option it takes is taken here, under either
// spelling. Only what the text form cannot say is checked here: a value
// with ';' (it would start another option), a name given twice.
function optionString(options) {
  if (typeof options === 'string') return { text: options, given: new Map() };
  if (options === undefined || options === null) return { text: '', given: new Map() };
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError(`new Client: options must be an object like {watchdogTimeoutMs: 30000}, got ${typeof options}`);
  }
  const given = new Map();
  const parts = [];
  for (const [name, value] of Object.entries(options)) {
    if (value === undefined) continue;
    const key = snakeName(name);
    if (given.has(key)) throw invalid(`new Client: option ${key} is given twice ('${given.get(key)}' and '${name}')`);
    given.set(key, name);
    let v = value;
    if (typeof v === 'boolean') v = v ? 1 : 0;
    if (key.endsWith('_ms') && (typeof v !== 'number' || !Number.isInteger(v))) {
      throw invalid(`new Client: ${name} must be a whole number of milliseconds, got ${JSON.stringify(value)}`);
    }
    if (typeof v !== 'number' && typeof v !== 'string') {
      throw invalid(`new Client: ${name} must be a number, a string or a boolean, got ${typeof value}`);
    }
    if (String(v).includes(';')) throw invalid(`new Client: ${name} must not contain ';'`);
    parts.push(`${key}=${v}`);
  }
  return { text: parts.join(';'), given };
}

// The library's "unknown option 'io_timeout'" names the option as the
// program wrote it ('ioTimeout').
function asWritten(err, given) {
  const m = /unknown option '([^']*)'/.exec(err.message);
  const name = m && given.get(m[1]);
  if (name && name !== m[1]) err.message = err.message.replace(m[0], `unknown option '${name}'`);
  return err;
}

const MAX_NAME_BYTES = 65536;
const CLOSE_BOUND_MS = 2000; // how long client.close() lets releases in flight end

// What a Client shares with its driver's callbacks and its Locks, and
// nothing that keeps the Client itself alive (the sockets keep the driver).
function makeState(client) {
  return {
    client: new WeakRef(client),
    locks: new Map(), // owner -> WeakRef(Lock): lost notices
  };
}

// Objects not closed by the program are ended when they are collected. A Lock dropped while held stops being renewed: its hold turns
// into a fixed lease of one watchdog period, and expires.
const lockRegistry = new FinalizationRegistry(({ driver, key, owner, locks, leaseMs }) => {
  locks.delete(owner);
  abandon(driver, key, owner, leaseMs);
});
const clientRegistry = new FinalizationRegistry((driver) => driver.close(0));

// Starts an engine operation (start() returns the driver's {op, promise});
// resolves with {op, done: its DONE event}. A refusal at once (StartError)
// rejects as the library's error.
async function started(start, onStart) {
  let job;
  try {
    job = start();
  } catch (e) {
    if (e instanceof StartError) throw errorFor(e.status, e.message, strerror);
    throw e;
  }
  if (onStart) onStart(job.op);
  return { op: job.op, done: await job.promise };
}

// An engine operation's failure (its DONE event) as an error whose message
// names what it was about (kind 'name': "lock 'orders': ...").
function eventError(ev, kind, name) {
  if (ev.status === STATUS.E_CLOSED) return new ClosedError(STATUS.E_CLOSED, 'the client is closed');
  let msg = ev.message || '';
  if (ev.detail && !msg.includes(ev.detail)) msg = msg ? `${msg} (${ev.detail})` : ev.detail;
  if (!msg.includes(`'${name}'`)) msg = msg ? `${kind} '${name}': ${msg}` : `${kind} '${name}'`;
  return errorFor(ev.status, msg, strerror);
}

function abandon(driver, key, owner, leaseMs) {
  if (driver.closing || driver.holdCount(key, owner) === 0) return;
  try {
    driver.extend(key, owner, leaseMs); // its end is of no interest
  } catch {
    // the engine refused it (closed): the hold expires anyway
  }
}

class Client extends EventEmitter {
  // nodes: "redis://host:port" or a comma-separated list (>= 2: Redlock).
  // options: every option of redlockc.h, camelCase ({watchdogTimeoutMs,
  // ioTimeoutMs, lossPush, syncReplicas, ...}) or snake_case as there
  // ({watchdog_timeout_ms, ...}); booleans for the 0/1 ones.
  // Events: 'log' ({level, message}) with the engine's log lines and lost
  // holds, while it has a listener (silent without one).
  constructor(nodes, options = {}) {
    super();
    const { text, given: written } = optionString(options);
    const given = parseOptions(text);
    this._watchdogMs = Number(given.watchdog_timeout_ms) || 30000;
    // fencing: 1 gives each hold a token (the engine's grants carry it);
    // off, a grant's token is 0 and fencingToken() refuses, as the C call does.
    this._fencing = Number(given.fencing || 0) !== 0;
    const state = makeState(this);
    this._state = state;
    // The engine has a UUID of its own: two writers of one UUID would give
    // their attempts the same ids ("<uuid>:<n>", counted by each) and could
    // take each other's attempt records for their own.
    try {
      this._driver = new EngineDriver(nodes, randomUUID(), text, {
        connectTimeoutMs: Number(given.connect_timeout_ms) || 1000,
        lost: (owner, status, message) => {
          const lock = state.locks.get(owner)?.deref();
          const client = state.client.deref();
          if (client && client.listenerCount('log')) {
            client._log(2, `lock ${lock ? `'${lock.name}' ` : ''}(owner ${owner}) was lost: ${message || strerror(status)}`);
          }
          if (lock) lock._lost(status, message);
        },
        log: (level, message) => {
          const client = state.client.deref();
          if (client && client.listenerCount('log')) client._log(level, message);
        },
      });
    } catch (e) {
      if (e instanceof StartError) throw asWritten(errorFor(e.status, e.message, strerror), written);
      throw e;
    }
    this._open = true;
    this._closed = null;
    this._waiters = 0;        // Lock acquires in progress (redlock_waiters)
    this._sinks = new Set();  // registered metrics (registerMetrics)
    clientRegistry.register(this, this._driver, this);
  }

  // Throws ClosedError once close() was called.
  _check() {
    if (!this._open) throw new ClosedError(STATUS.E_CLOSED, 'the client is closed');
  }

  _log(level, message) {
    this.emit('log', { level: LOG_LEVELS[level] || String(level), message });
  }

  // The client's counters, no I/O: {acquires, busy, waits, renewals, lost,
  // reconnects, scriptReloads, waitMsSum, waitBuckets: [{le (ms, Infinity
  // last), count (cumulative)}]}: the engine's (rlc_engine_metrics), counted
  // by the library for every lock kind this client runs.
  metrics() {
    this._check();
    const engine = Buffer.alloc(8 * METRICS_MAX);
    const n = Math.min(this._driver.metrics(engine), METRICS_MAX);
    const out = { waitBuckets: [] };
    const camel = (name) => name.replace(/_([a-z])/g, (_, ch) => ch.toUpperCase());
    let bucket = 0;
    let total = 0;
    for (let i = 0; i < n; i++) {
      const name = fn.metricName(i);
      const value = Number(engine.readBigUInt64LE(8 * i));
      if (name === 'wait_bucket') {
        const le = fn.metricBucketMs(bucket);
        total += value;
        bucket++;
        out.waitBuckets.push({ le: le >= Number.MAX_SAFE_INTEGER ? Infinity : Number(le), count: total });
      } else if (name) {
        out[camel(name)] = value;
      }
    }
    return out;
  }

  // Locks of this client held now: their validity is not over (no I/O).
  _heldNow() {
    let n = 0;
    for (const ref of this._state.locks.values()) {
      const lock = ref.deref();
      if (lock && lock._depth > 0 && !lock._closing && lock._validity() > 0) n++;
    }
    return n;
  }

  // The UUID in the hash fields of this client's holds
  // ("<uuid>:<lock.owner>"), the lock family's too (one engine).
  get uuid() {
    return this._open ? this._driver.uuid : null;
  }

  // A new Lock object (a new owner) for `name`. No network I/O.
  lock(name) {
    return new Lock(this, name);
  }

  // Acquires `name` for a new owner and returns the held Lock, for
  // `await using lock = await client.acquire(name)`; throws NotAcquiredError
  // when the wait runs out. Release with lock.release(), then lock.close().
  async acquire(name, options = {}) {
    const { wait = -1, lease = 0, signal } = checkNames('client.acquire', options, ACQUIRE_OPTIONS);
    waitMs(wait, 'client.acquire'); leaseMs(lease, 'client.acquire'); signalOption('client.acquire', signal);
    const lock = this.lock(name);
    try {
      if (!(await lock.acquire({ wait, lease, signal }))) {
        throw new NotAcquiredError(STATUS.NOT_ACQUIRED, `lock '${name}' is busy: the wait of ${wait} ms ran out`);
      }
      return lock;
    } catch (e) {
      lock.close();
      throw e;
    }
  }

  // Runs fn(signal, lock) holding `name`, then releases it. signal aborts
  // (reason: a LockLostError) if the lock is lost meanwhile. Throws
  // NotAcquiredError when the wait runs out; when fn succeeded but the
  // release finds the lock lost, throws that LockLostError (the section was
  // not protected to the end). fn's own error wins over a release error.
  // options.signal (an AbortSignal) cancels the wait.
  async withLock(name, body, options = {}) {
    const { wait = -1, lease = 0, signal } = checkNames('client.withLock', options, ACQUIRE_OPTIONS);
    const lock = await this.acquire(name, { wait, lease, signal });
    let result;
    try {
      result = await body(lock.signal, lock);
    } catch (e) {
      await lock.release().catch(() => {});
      lock.close();
      throw e;
    }
    try {
      await lock.release();
    } finally {
      lock.close();
    }
    return result;
  }
  // Writes value (a string, as UTF-8, or a Buffer) at key only if token
  // (lock.fencingToken(), a bigint or integer >= 1) is at least the fence
  // stored with it in "redlockc_fence:{key}". Resolves true (written) or
  // false (refused: a later holder's larger token is stored). This client
  // must have one node: the resource's Redis.
  async fencedSet(key, value, token) {
    if (typeof key !== 'string' || key === '' || key.includes('\0')) {
      throw new errors.InvalidArgumentError(STATUS.E_INVAL, 'key must be a non-empty string without NUL');
    }
    const bytes = Buffer.isBuffer(value) ? value : Buffer.from(String(value), 'utf8');
    const t = BigInt(token);
    if (t < 1n || t >= 1n << 64n) throw new errors.InvalidArgumentError(STATUS.E_INVAL, `token must be 1 .. 2^64-1, got ${token}`);
    this._check();
    const ev = (await started(() => this._driver.fencedSet(Buffer.from(key, 'utf8'), bytes, t))).done;
    if (ev.status !== STATUS.OK) throw eventError(ev, 'fencedSet', key);
    return ev.count !== 0;
  }

  // Stops renewing and closes connections. Held locks are not released on
  // the server (they expire); a waiting acquire rejects ClosedError, and
  // later calls on its locks too. Releases, queries and fencedSet() in
  // flight end first (for at most 2 s; then they reject ClosedError).
  close() {
    if (!this._closed) {
      this._open = false;
      clientRegistry.unregister(this);
      this._closed = this._driver.close(CLOSE_BOUND_MS);
    }
    return this._closed;
  }
}

class Lock extends EventEmitter {
  constructor(client, name) {
    super();
    client._check();
    if (typeof name !== 'string' || name === '' || name.includes('\0')) {
      throw invalid(`lock name must be a non-empty string without NUL, got ${JSON.stringify(name)}`);
    }
    const key = Buffer.from(name, 'utf8');
    if (key.length > MAX_NAME_BYTES) throw invalid(`lock name is longer than ${MAX_NAME_BYTES} bytes`);
    this.name = name;
    this.owner = nextOwner++;
    this.client = client; // keeps the client alive as long as its locks
    this._key = key;
    this._driver = client._driver;
    this._state = client._state;
    this._closing = false;
    this._depth = 0;       // levels held through this object, as the engine counts them
    this._controller = null;
    this._token = 0n;
    this._lostKnown = false; // its 'lost' was emitted (the next hold is a fresh one)
    this._fixed = false;     // the hold has a fixed lease (else the watchdog renews it)
    this._holdSpan = null;   // OpenTelemetry: the current hold's span
    this._state.locks.set(this.owner, new WeakRef(this));
    lockRegistry.register(this, {
      driver: this._driver, key, owner: this.owner,
      locks: this._state.locks, leaseMs: client._watchdogMs,
    }, this);
  }

  _usable() {
    if (this._closing) throw new ClosedError(STATUS.E_CLOSED, `lock '${this.name}' is closed`);
    this.client._check();
  }

  _fail(ev) {
    return eventError(ev, 'lock', this.name);
  }

  // Starts an engine operation; resolves with its DONE event. onStart gets
  // the operation's id before anything can end it.
  async _engine(start, onStart) {
    this._usable();
    return (await started(start, onStart)).done;
  }

  // Resolves true when held, false when the wait (ms; default forever, 0 =
  // try once) ran out. lease (ms): 0 lets the watchdog renew it until
  // release; > 0 is a fixed lease. signal (an AbortSignal): aborting it ends
  // the wait, rejecting with signal.reason; nothing stays held.
  async acquire(options = {}) {
    const { wait = -1, lease = 0, signal } = checkNames('lock.acquire', options, ACQUIRE_OPTIONS);
    const w = waitMs(wait, 'lock.acquire');
    const l = leaseMs(lease, 'lock.acquire');
    const sig = signalOption('lock.acquire', signal);
    if (sig && sig.aborted) throw sig.reason;
    // Watched: the wait's time and result (metrics), its span (OpenTelemetry).
    const client = this.client;
    const start = performance.now();
    const span = observe.startAcquire(this, VERSION, w, l);
    client._waiters++;
    let result = 'error';
    let error = null;
    try {
      const held = await this._acquire(w, l, sig);
      result = held ? 'acquired' : 'busy';
      return held;
    } catch (e) {
      error = e;
      if ((sig && sig.aborted && e === sig.reason) || e instanceof ClosedError) result = 'canceled';
      throw e;
    } finally {
      client._waiters--;
      const seconds = (performance.now() - start) / 1000;
      for (const sink of client._sinks) sink.waited(result, seconds);
      observe.endAcquire(span, result, error);
    }
  }

  async _acquire(w, l, sig) {
    let cancel = null;
    let ev;
    try {
      ev = await this._engine(() => this._driver.acquire(this._key, this.owner, w, l), (op) => {
        if (!sig) return;
        cancel = () => this._driver.cancel(op);
        sig.addEventListener('abort', cancel, { once: true });
      });
    } finally {
      if (cancel) sig.removeEventListener('abort', cancel);
    }
    if (ev.status === STATUS.OK) {
      this._held(ev, l > 0);
      if (this._closing) abandon(this._driver, this._key, this.owner, this.client._watchdogMs);
      return true;
    }
    if (ev.status === STATUS.NOT_ACQUIRED) return false;
    if (ev.status === STATUS.E_CANCELED) {
      if (sig && sig.aborted) throw sig.reason;
      if (this._driver.closing) throw new ClosedError(STATUS.E_CLOSED, 'the client is closed');
    }
    throw this._fail(ev);
  }

  _held(ev, fixed) {
    const fresh = this._depth === 0 || this._lostKnown || !this._controller;
    this._depth = ev.count;
    this._token = ev.token;
    if (fresh) {
      this._lostKnown = false;
      this._controller = new AbortController();
      this._fixed = fixed;
      this._endHold(null);
      if (!this._closing) this._holdSpan = observe.startHold(this, VERSION, ev.token);
    }
  }

  _endHold(err) {
    const span = this._holdSpan;
    this._holdSpan = null;
    observe.endHold(span, err);
  }

  async tryAcquire(options = {}) {
    const { lease = 0 } = checkNames('lock.tryAcquire', options, ['lease']);
    return this.acquire({ wait: 0, lease });
  }

  // Releases one level. Rejects NotOwnerError if this owner does not hold it,
  // LockLostError if it was held but expired or was taken.
  async release() {
    const ev = await this._engine(() => this._driver.release(this._key, this.owner));
    if (ev.status === STATUS.OK) {
      this._depth = ev.count;
      if (ev.count === 0) this._endHold(null);
      return;
    }
    if (ev.status === STATUS.E_LOST) this._lost(ev.status, ev.message);
    if (ev.status === STATUS.E_LOST || ev.status === STATUS.E_NOT_OWNER) {
      this._depth = 0;
      this._endHold(null);
    }
    throw this._fail(ev);
  }

  // lease > 0: a fixed lease from now; 0: back to the watchdog.
  async extend(lease = 0) {
    const l = leaseMs(lease, 'lock.extend');
    const ev = await this._engine(() => this._driver.extend(this._key, this.owner, l));
    if (ev.status !== STATUS.OK) {
      if (ev.status === STATUS.E_LOST) this._lost(ev.status, ev.message);
      throw this._fail(ev);
    }
    this._fixed = l > 0;
  }

  // Deletes the lock whoever holds it, and wakes waiters. A hold of it
  // (this object's too) is then found gone: it is lost ('lost', its signal
  // aborts) and its release rejects LockLostError.
  async forceRelease() {
    const ev = await this._engine(() => this._driver.forceRelease(this._key, this.owner));
    if (ev.status !== STATUS.OK) throw this._fail(ev);
  }

  // One round trip that asks the servers (what: Q.*): its answer.
  async _ask(what) {
    const ev = await this._engine(() => this._driver.query(this._key, this.owner, what));
    if (ev.status !== STATUS.OK) throw this._fail(ev);
    return ev.count;
  }

  // Whether a majority of the nodes has the lock, whoever holds it.
  async isLocked() { return (await this._ask(Q.LOCKED)) !== 0; }

  // ms this owner's hold is certainly still held, now: the engine's own
  // figure (rlc_engine_validity_ms at this call; renewals move it on), 0 when
  // not held, lost, or once its validity ran out (a fixed lease that ended,
  // a watchdog hold not renewed in time), already on the first look after a
  // blocked event loop, before the timer that finds it lost has run. No I/O.
  _validity() {
    return this._driver.validity(this._key, this.owner);
  }

  // Whether this owner holds it now: its validity is not over (no I/O).
  async isHeld() {
    this._usable();
    return this._validity() > 0;
  }

  // Levels held by this owner, as the engine counts them; 0 once the hold's
  // validity is over (no I/O).
  async holdCount() {
    this._usable();
    return this._validity() > 0 ? this._driver.holdCount(this._key, this.owner) : 0;
  }

  // The key's PTTL in ms: -2 no lock, -1 no expiry.
  async ttl() { return this._ask(Q.TTL); }

  // ms this owner's hold is certainly still held (0 if not held). No I/O.
  validity() {
    if (this._closing) throw new ClosedError(STATUS.E_CLOSED, `lock '${this.name}' is closed`);
    return this._validity();
  }

  // The fencing token (BigInt) of the current hold. No I/O. Needs the
  // client option fencing: true (InvalidArgumentError without it: no hold
  // takes a token). Throws NotOwnerError when not held through this object,
  // LockLostError once the hold's validity is over (a later holder may have
  // a larger token).
  fencingToken() {
    this._usable();
    if (!this.client._fencing) {
      throw invalid(`lock '${this.name}' has no fencing token: fencing is off (open the client with the option fencing: true)`);
    }
    if (this._lostKnown) throw new LockLostError(STATUS.E_LOST, `lock '${this.name}' was lost`);
    if (this._depth === 0) {
      throw new NotOwnerError(STATUS.E_NOT_OWNER, `lock '${this.name}' is not held through this object`);
    }
    if (this._validity() === 0) {
      throw new LockLostError(STATUS.E_LOST, `lock '${this.name}' was lost: its validity is over`);
    }
    return this._token;
  }

  // An AbortSignal for the current hold: aborted, with a LockLostError as its
  // reason, when the hold is lost (a fixed lease's end, a watchdog hold not
  // renewed in time, the key found deleted or taken). null when not held.
  get signal() {
    return this._controller && this._depth > 0 ? this._controller.signal : null;
  }

  _lost(reason, detail) {
    this._lostKnown = true;
    const controller = this._controller;
    if (!controller || controller.signal.aborted) return;
    const err = new LockLostError(STATUS.E_LOST,
      `lock '${this.name}' was lost (${strerror(reason)})${detail ? `: ${detail}` : ''}`);
    err.reason = reason;
    // Why, for redlock_lock_lost_total: a fixed lease's end, its key found
    // gone or taken, or renewals that failed until its validity ran out.
    const why = reason !== STATUS.E_LOST ? 'renewal_failed' : this._fixed ? 'expired' : 'taken';
    for (const sink of this.client._sinks) sink.lostHold(why, !this._fixed);
    this._endHold(err);
    controller.abort(err);
    this.emit('lost', err);
  }

  // Ends this object: later calls reject ClosedError. A hold still held is
  // not released on the server: it stops being renewed and expires (within
  // one watchdog period). Calls in flight end as they would have.
  close() {
    if (this._closing) return;
    this._closing = true;
    this._endHold(null);
    this._state.locks.delete(this.owner);
    lockRegistry.unregister(this);
    abandon(this._driver, this._key, this.owner, this.client._watchdogMs);
  }

  // `await using lock = await client.acquire(name)`: release, then close.
  async [asyncDispose]() {
    try {
      if (this._depth > 0 && !this._closing) await this.release();
    } finally {
      this.close();
    }
  }
}

const family = require('./lib/family.js');

// The wait buckets in seconds: the library's (rlc_metric_bucket_ms), the
// last (forever) left to Prometheus' +Inf.
function waitBounds() {
  const out = [];
  for (let i = 0; i < 64; i++) {
    const ms = Number(fn.metricBucketMs(i));
    if (ms < 0 || ms >= Number.MAX_SAFE_INTEGER) break;
    out.push(ms / 1000);
  }
  return out;
}

// Registers client's Prometheus metrics (observe.js lists them) on a
// prom-client Registry, labelled client="<label>": a name the program
// chooses, stable across restarts. One label per client on a registry.
// prom-client is an optional peer dependency: passed as promClient, or
// required from this package's place or the application's. Returns a
// function that removes the client's series again.
function registerMetrics(client, { registry, label = 'default', promClient } = {}) {
  if (!(client instanceof Client)) throw new TypeError('registerMetrics: client must be a redlockc Client');
  if (typeof label !== 'string' || label === '') throw invalid('registerMetrics: label must be a non-empty string');
  const prom = promClient || observe.optional('prom-client');
  if (!prom) throw new Error("registerMetrics needs prom-client: npm install prom-client");
  const reg = registry || prom.register;
  client._check(); // throws once closed
  return observe.register(prom, reg, client, label, waitBounds());
}

family.install(Client);

module.exports = {
  Client,
  Lock,
  ReadWriteLock: family.ReadWriteLock,
  FairLock: family.FairLock,
  Semaphore: family.Semaphore,
  PermitExpirableSemaphore: family.PermitExpirableSemaphore,
  MultiLock: family.MultiLock,
  version: fn.version(),
  strerror,
  registerMetrics,
  ...errors,
};
delete module.exports.errorFor;
