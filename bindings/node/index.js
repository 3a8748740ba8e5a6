'use strict';
// redlockc for Node.js: Redisson-compatible distributed locks and Redlock,
// over libredlockc.so.1. Every call that may touch the network returns a
// Promise and runs on a helper thread (see lib/native.js); times are
// milliseconds, like setTimeout.
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
const { fn, OP, scratch, syncResult, getChannel } = require('./lib/native.js');
const errors = require('./lib/errors.js');

const { STATUS, errorFor, NotAcquiredError, ClosedError, LockLostError } = errors;
const strerror = (rc) => fn.strerror(rc);
const fail = (rec) => errorFor(rec.rc, rec.msg, strerror);
const asyncDispose = Symbol.asyncDispose || Symbol.for('nodejs.asyncDispose');

// Explicit owner ids: unique in this process, never 0 (0 means "the thread").
let nextOwner = 1;
let nextClientId = 1;
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

const ACQUIRE_OPTIONS = ['wait', 'lease'];
const CLIENT_OPTIONS = ['watchdog_timeout_ms', 'io_timeout_ms', 'node_timeout_ms', 'connect_timeout_ms',
  'retry_jitter_ms', 'drift_factor', 'pool_size', 'key_prefix'];

// {watchdog_timeout_ms: 600} -> "watchdog_timeout_ms=600"
function optionString(options) {
  if (typeof options === 'string') return options;
  checkNames('new Client', options, CLIENT_OPTIONS);
  return Object.entries(options || {}).map(([k, v]) => {
    if (k.endsWith('_ms') && (typeof v !== 'number' || !Number.isInteger(v))) {
      throw invalid(`new Client: ${k} must be a whole number of milliseconds, got ${JSON.stringify(v)}`);
    }
    return `${k}=${v}`;
  }).join(';');
}

// Native handles not closed by the program are freed when their object is
// collected. A Lock with a job in flight is still referenced by that job.
const lockRegistry = new FinalizationRegistry(({ handle, id }) => {
  getChannel().locks.delete(id);
  fn.lockFree(handle);
});
const clientRegistry = new FinalizationRegistry((handle) => {
  getChannel().run(OP.CLIENT_FREE, handle); // it joins the watchdog: not on this thread
});

class Client extends EventEmitter {
  // nodes: "redis://host:port" or a comma-separated list (>= 2: Redlock).
  // options: {watchdog_timeout_ms, io_timeout_ms, ...} as in redlockc.h.
  // Events: 'log' ({level, message}) with the library's log lines, from the
  // first listener on (silent without one).
  constructor(nodes, options = {}) {
    super();
    this._handle = fn.clientNew(nodes, optionString(options), scratch);
    if (!this._handle) throw fail(syncResult());
    this._closed = null;
    this._id = nextClientId++;
    this._sink = null;
    clientRegistry.register(this, this._handle, this);
    this.on('newListener', (event) => { if (event === 'log') this._logging(true); });
    this.on('removeListener', (event) => {
      if (event === 'log' && this.listenerCount('log') === 0) this._logging(false);
    });
  }

  _logging(on) {
    if (!this._handle || on === (this._sink !== null)) return;
    const channel = getChannel();
    if (on) {
      channel.clients.set(this._id, new WeakRef(this));
      this._sink = fn.clientSetLog(this._handle, channel.ptr, this._id, 4, scratch);
      if (!this._sink) throw fail(syncResult());
    } else {
      fn.clientSetLog(this._handle, channel.ptr, this._id, 0, scratch); // waits for a line in flight
      fn.sinkFree(this._sink);
      this._sink = null;
      channel.clients.delete(this._id);
    }
  }

  _log(level, message) {
    this.emit('log', { level: LOG_LEVELS[level] || String(level), message });
  }

  // The client's counters (rlc_client_metrics), no I/O: {acquires, busy,
  // waits, renewals, lost, reconnects, scriptReloads, waitMsSum, waitBuckets:
  // [{le (ms, Infinity last), count (cumulative)}]}.
  metrics() {
    if (!this._handle) throw new ClosedError(STATUS.E_CLOSED, 'the client is closed');
    const buf = Buffer.alloc(8 * METRICS_MAX);
    const n = Math.min(fn.clientMetrics(this._handle, buf, METRICS_MAX), METRICS_MAX);
    const out = { waitBuckets: [] };
    const camel = (name) => name.replace(/_([a-z])/g, (_, ch) => ch.toUpperCase());
    let bucket = 0;
    let total = 0;
    for (let i = 0; i < n; i++) {
      const name = fn.metricName(i);
      const value = Number(buf.readBigUInt64LE(8 * i));
      if (name === 'wait_bucket') {
        const le = fn.metricBucketMs(bucket++);
        total += value;
        out.waitBuckets.push({ le: le >= Number.MAX_SAFE_INTEGER ? Infinity : Number(le), count: total });
      } else if (name) {
        out[camel(name)] = value;
      }
    }
    return out;
  }

  get uuid() {
    return this._handle ? fn.clientUuid(this._handle) : null;
  }

  // A new Lock object (a new owner) for `name`. No network I/O.
  lock(name) {
    return new Lock(this, name);
  }

  // Acquires `name` for a new owner and returns the held Lock, for
  // `await using lock = await client.acquire(name)`; throws NotAcquiredError
  // when the wait runs out. Release with lock.release(), then lock.close().
  async acquire(name, options = {}) {
    const { wait = -1, lease = 0 } = checkNames('client.acquire', options, ACQUIRE_OPTIONS);
    waitMs(wait, 'client.acquire'); leaseMs(lease, 'client.acquire');
    const lock = this.lock(name);
    try {
      if (!(await lock.acquire({ wait, lease }))) {
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
  async withLock(name, body, options = {}) {
    const { wait = -1, lease = 0 } = checkNames('client.withLock', options, ACQUIRE_OPTIONS);
    const lock = await this.acquire(name, { wait, lease });
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
    if (!this._handle) throw new ClosedError(STATUS.E_CLOSED, 'the client is closed');
    const job = fn.fencedNew(this._handle, key, bytes, bytes.length, t);
    if (!job) throw new errors.OutOfMemoryError(STATUS.E_NOMEM, 'out of memory');
    const done = getChannel().run(OP.FENCED_SET, job);
    this._inflight = (this._inflight || new Set()).add(done);
    try {
      const rec = await done;
      if (rec.rc !== STATUS.OK) throw fail(rec);
      return rec.value !== 0n;
    } finally {
      this._inflight.delete(done);
    }
  }

  // Stops the watchdog and closes connections. Held locks are not released
  // on the server (they expire); later calls on its locks reject ClosedError.
  // A fencedSet() in flight ends first.
  close() {
    if (!this._closed) {
      const handle = this._handle;
      this._handle = null;
      clientRegistry.unregister(this);
      const sink = this._sink;
      this._sink = null;
      const before = Promise.allSettled([...(this._inflight || [])]);
      // rlc_client_free silences the log first: the sink may go after it.
      this._closed = before.then(() => getChannel().run(OP.CLIENT_FREE, handle)).then(() => {
        if (sink) fn.sinkFree(sink);
        getChannel().clients.delete(this._id);
      });
    }
    return this._closed;
  }
}

class Lock extends EventEmitter {
  constructor(client, name) {
    super();
    if (!client._handle) throw new ClosedError(STATUS.E_CLOSED, 'the client is closed');
    const channel = getChannel();
    this.name = name;
    this.owner = nextOwner++;
    this.client = client; // keeps the client alive as long as its locks
    this._handle = fn.lockNew(client._handle, name, this.owner, this.owner, channel.ptr, scratch);
    if (!this._handle) throw fail(syncResult());
    this._channel = channel;
    this._jobs = 0;        // in flight: the handle is freed only after them
    this._closing = false;
    this._depth = 0;       // levels held through this object, as far as we know
    this._controller = null;
    channel.locks.set(this.owner, new WeakRef(this));
    lockRegistry.register(this, { handle: this._handle, id: this.owner }, this);
  }

  async _run(op, a = 0, b = 0) {
    if (this._closing) throw new ClosedError(STATUS.E_CLOSED, `lock '${this.name}' is closed`);
    this._jobs++;
    try {
      return await this._channel.run(op, this._handle, a, b, this);
    } finally {
      if (--this._jobs === 0 && this._closing) this._free();
    }
  }

  // Resolves true when held, false when the wait (ms; default forever, 0 =
  // try once) ran out. lease (ms): 0 lets the watchdog renew it until
  // release; > 0 is a fixed lease.
  async acquire(options = {}) {
    const { wait = -1, lease = 0 } = checkNames('lock.acquire', options, ACQUIRE_OPTIONS);
    const rec = await this._run(OP.ACQUIRE, waitMs(wait, 'lock.acquire'), leaseMs(lease, 'lock.acquire'));
    if (rec.rc === STATUS.NOT_ACQUIRED) return false;
    if (rec.rc !== STATUS.OK) throw fail(rec);
    if (this._depth++ === 0) {
      // A notice about an earlier hold is stale now. (The handle is gone if
      // close() came while this call was in flight.)
      if (this._handle) fn.takeLost(this._handle);
      this._controller = new AbortController();
    }
    return true;
  }

  async tryAcquire(options = {}) {
    const { lease = 0 } = checkNames('lock.tryAcquire', options, ['lease']);
    return this.acquire({ wait: 0, lease });
  }

  // Releases one level. Rejects NotOwnerError if this owner does not hold it,
  // LockLostError if it was held but expired or was taken.
  async release() {
    const rec = await this._run(OP.RELEASE);
    if (rec.rc === STATUS.OK) {
      if (this._depth > 0) this._depth--;
      return;
    }
    if (rec.rc === STATUS.E_LOST) this._lost(rec.rc, rec.msg);
    if (rec.rc === STATUS.E_LOST || rec.rc === STATUS.E_NOT_OWNER) this._depth = 0;
    throw fail(rec);
  }

  // lease > 0: a fixed lease from now; 0: back to the watchdog.
  async extend(lease = 0) {
    const rec = await this._run(OP.EXTEND, leaseMs(lease, 'lock.extend'));
    if (rec.rc !== STATUS.OK) throw fail(rec);
  }

  // Deletes the lock whoever holds it, and wakes waiters.
  async forceRelease() {
    const rec = await this._run(OP.FORCE_RELEASE);
    if (rec.rc !== STATUS.OK) throw fail(rec);
  }

  async _query(op) {
    const rec = await this._run(op);
    if (rec.rc !== STATUS.OK) throw fail(rec);
    return rec.value;
  }

  async isLocked() { return (await this._query(OP.IS_LOCKED)) !== 0n; }
  async isHeld() { return (await this._query(OP.IS_HELD)) !== 0n; }
  async holdCount() { return Number(await this._query(OP.HOLD_COUNT)); }
  // The key's PTTL in ms: -2 no lock, -1 no expiry.
  async ttl() { return Number(await this._query(OP.TTL)); }

  // ms this owner's hold is certainly still valid (0 if not held). No I/O.
  validity() {
    if (this._closing) throw new ClosedError(STATUS.E_CLOSED, `lock '${this.name}' is closed`);
    if (fn.validity(this._handle, scratch) !== STATUS.OK) throw fail(syncResult());
    return Number(syncResult().value);
  }

  // The fencing token (BigInt) of the current hold. No I/O.
  fencingToken() {
    if (this._closing) throw new ClosedError(STATUS.E_CLOSED, `lock '${this.name}' is closed`);
    if (fn.fencingToken(this._handle, scratch) !== STATUS.OK) throw fail(syncResult());
    return BigInt.asUintN(64, syncResult().value);
  }

  // An AbortSignal for the current hold: aborted, with a LockLostError as its
  // reason, when the watchdog can no longer renew it. null when not held.
  get signal() {
    return this._controller && this._depth > 0 ? this._controller.signal : null;
  }

  // Called on the JS thread when the helper's pipe said some lock was lost.
  _pollLost() {
    if (this._closing) return;
    const reason = fn.takeLost(this._handle);
    if (reason !== 0 && this._depth > 0) this._lost(reason, null);
  }

  _lost(reason, detail) {
    const controller = this._controller;
    if (!controller || controller.signal.aborted) return;
    const err = new LockLostError(STATUS.E_LOST,
      `lock '${this.name}' was lost (${strerror(reason)})${detail ? `: ${detail}` : ''}`);
    err.reason = reason;
    controller.abort(err);
    this.emit('lost', err);
  }

  // Frees the native handle once no call is in flight. A hold still held is
  // not released on the server: it stops being renewed and expires.
  close() {
    if (this._closing) return;
    this._closing = true;
    this._channel.locks.delete(this.owner);
    lockRegistry.unregister(this);
    if (this._jobs === 0) this._free();
  }

  _free() {
    const handle = this._handle;
    this._handle = null;
    if (handle) fn.lockFree(handle);
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
  ...errors,
};
delete module.exports.errorFor;
