'use strict';
// The lock family (REDLOCKC_1.1, docs/FAMILY.md) for Node: ReadWriteLock,
// FairLock, Semaphore, PermitExpirableSemaphore, MultiLock, made by the
// client (client.rwlock(name), client.fairLock(name), client.semaphore(name,
// permits), client.permitSemaphore(name, permits), client.multiLock(names)).
//
// A ReadWriteLock and a FairLock run on the client's event-loop driver
// (lib/engine_driver.js) as a Lock does: a read-write lock's sides are
// engine locks of kinds RLC_KIND_READ and RLC_KIND_WRITE, mode() an engine
// query (RLC_Q_MODE), a fair lock an engine lock of kind RLC_KIND_FAIR, with
// no thread and no second client. The semaphores and the multi-name lock run
// on the helper's thread pool (src/rlcnode_family.c) through a blocking
// client made on their first use, until the engine runs them too.
//
// As Lock: every call that may touch the network returns a Promise; times are ms; each
// owner-bound object is an explicit owner of its own (acquiring the same
// object again is reentrant, two objects of one name exclude each other);
// failures reject with the error class of their status; a wait that runs
// out resolves false (null for a permit). An acquire's signal (an
// AbortSignal) ends its wait as for Lock: the engine's wait (a read-write
// or fair lock's) or the pool thread's (rlc_semaphore_cancel etc.) is
// cancelled, the acquire rejects with signal.reason, and nothing stays
// held. close() frees the native handle once no call is in flight (holds
// are not released: they expire).
const { loadNative } = require('../build.js');
// koffi as native.js found it (in this package, or in the application).
const { getChannel, scratch, syncResult, koffi } = require('./native.js');
const errors = require('./errors.js');
const { StartError, LOCK_KIND, Q } = require('./engine_driver.js');

const { STATUS, errorFor, ClosedError, InvalidArgumentError } = errors;
const lib = loadNative(koffi);
const ffn = {
  call: lib.func('void *rlcn_fcall_new(void *h, int64_t a, int64_t b, int64_t c, const char *s)'),
  semNew: lib.func('void *rlcn_semaphore_new(void *c, const char *name, void *res)'),
  psemNew: lib.func('void *rlcn_psemaphore_new(void *c, const char *name, void *res)'),
  multiNew: lib.func('void *rlcn_multilock_new(void *c, const uint8_t *names, int n, uint64_t owner, void *res)'),
  free: lib.func('void rlcn_family_free(int kind, void *h)'),
  cancel: lib.func('int rlcn_family_cancel(int kind, void *h)'),
  local: lib.func('int rlcn_family_local(int what, void *h, int write, void *res)'),
  strerror: lib.func('const char *rlcn_strerror(int rc)'),
};

// Job kinds, as enum fop in rlcnode_family.c.
const F = {
  RW_READ_ACQUIRE: 100, RW_READ_RELEASE: 101, RW_WRITE_ACQUIRE: 102, RW_WRITE_RELEASE: 103,
  RW_MODE: 104, FAIR_ACQUIRE: 105, FAIR_RELEASE: 106,
  SEM_SET: 107, SEM_AVAILABLE: 108, SEM_ACQUIRE: 109, SEM_RELEASE: 110,
  PSEM_SET: 111, PSEM_AVAILABLE: 112, PSEM_ACQUIRE: 113, PSEM_RELEASE: 114,
  MULTI_ACQUIRE: 115, MULTI_RELEASE: 116,
};
const KIND = { RW: 0, FAIR: 1, SEM: 2, PSEM: 3, MULTI: 4 };
const MODES = ['free', 'read', 'write'];

const strerror = (rc) => ffn.strerror(rc);
const fail = (rec) => errorFor(rec.rc, rec.msg, strerror);

// A cancel spares an acquire that had not started yet (its job may still
// wait for a pool thread): after an abort it is made again at this interval
// until the job has settled.
const CANCEL_AGAIN_MS = 20;

// An AbortSignal, or nothing.
function signalOption(signal) {
  if (signal === undefined || signal === null) return null;
  if (typeof signal !== 'object' || typeof signal.aborted !== 'boolean' ||
      typeof signal.addEventListener !== 'function') {
    throw new InvalidArgumentError(STATUS.E_INVAL, 'signal must be an AbortSignal');
  }
  return signal;
}

// Owner ids of family objects: from 2^52 up, apart from Lock's (1 up), so a
// MultiLock never shares a hold with a Lock object of this process.
let nextOwner = 2 ** 52;

function waitMs(wait) {
  if (wait === undefined || wait === null || wait === Infinity || wait < 0) return -1;
  if (!Number.isFinite(wait)) throw new InvalidArgumentError(STATUS.E_INVAL, `wait must be a number of ms, got ${wait}`);
  return Math.floor(wait);
}

function leaseMs(lease) {
  if (lease === undefined || lease === null || lease <= 0) return 0;
  if (!Number.isFinite(lease)) throw new InvalidArgumentError(STATUS.E_INVAL, `lease must be a number of ms, got ${lease}`);
  return Math.ceil(lease);
}

function permitCount(n, what = 'permits') {
  if (!Number.isSafeInteger(n) || n < 1) {
    throw new InvalidArgumentError(STATUS.E_INVAL, `${what} must be a positive integer, got ${n}`);
  }
  return n;
}

function checkName(name, what) {
  if (typeof name !== 'string' || name === '' || name.includes('\0')) {
    throw new InvalidArgumentError(STATUS.E_INVAL, `${what} must be a non-empty string without NUL`);
  }
  return name;
}

const registry = new FinalizationRegistry(({ kind, handle }) => ffn.free(kind, handle));

// A native family handle: jobs in flight keep it; close() frees it after them.
class Handle {
  constructor(client, kind, name, make) {
    this.client = client; // keeps the client alive as long as its handles
    this.name = name;
    this._kind = kind;
    this._make = make;
    this._handle = null;
    this._jobs = 0;
    this._closing = false;
    this._native();
  }

  // The native handle, made on first use; throws once closed.
  _native() {
    if (this._closing) throw new ClosedError(STATUS.E_CLOSED, `'${this.name}' is closed`);
    if (!this._handle) {
      const handle = this._make(this.client._native(this.constructor.name)); // throws once closed
      if (!handle) throw fail(syncResult());
      this._handle = handle;
      registry.register(this, { kind: this._kind, handle }, this);
    }
    return this._handle;
  }

  async _run(op, a = 0, b = 0, c = 0, s = null) {
    const call = ffn.call(this._native(), a, b, c, s);
    if (!call) throw new errors.OutOfMemoryError(STATUS.E_NOMEM, 'out of memory');
    this._jobs++;
    try {
      return await getChannel().run(op, call, 0, 0, this);
    } finally {
      if (--this._jobs === 0 && this._closing) this._free();
    }
  }

  async _ok(op, a, b, c, s) {
    const rec = await this._run(op, a, b, c, s);
    if (rec.rc !== STATUS.OK) throw fail(rec);
    return rec;
  }

  // An acquire job whose wait sig's abort cancels: its record, or rejects
  // with sig.reason once aborted, after undo(rec) gave back what a job that
  // crossed the abort took (nothing stays held).
  async _wait(op, a, b, c, signal, undo) {
    const sig = signalOption(signal);
    if (!sig) return this._run(op, a, b, c);
    if (sig.aborted) throw sig.reason;
    let again = null;
    const cancel = () => {
      const once = () => { if (this._handle) ffn.cancel(this._kind, this._handle); };
      once();
      again = setInterval(once, CANCEL_AGAIN_MS);
    };
    sig.addEventListener('abort', cancel, { once: true });
    let rec;
    try {
      rec = await this._run(op, a, b, c);
    } finally {
      sig.removeEventListener('abort', cancel);
      if (again) clearInterval(again);
    }
    if (!sig.aborted) return rec;
    if (rec.rc === STATUS.OK) await undo(rec).catch(() => {}); // the abort is what the caller sees
    throw sig.reason;
  }

  // true | false (the wait ran out) | throws; undo() gives a level back.
  async _acquire(op, a, b, c, signal, undo) {
    const rec = await this._wait(op, a, b, c, signal, undo);
    if (rec.rc === STATUS.NOT_ACQUIRED) return false;
    if (rec.rc !== STATUS.OK) throw fail(rec);
    return true;
  }

  _local(what, write = 0) {
    if (ffn.local(what, this._native(), write, scratch) !== STATUS.OK) throw fail(syncResult());
    return Number(syncResult().value);
  }

  close() {
    if (this._closing) return;
    this._closing = true;
    registry.unregister(this);
    if (this._jobs === 0) this._free();
  }

  _free() {
    const h = this._handle;
    this._handle = null;
    if (h) ffn.free(this._kind, h);
  }
}

// What its lock kind is called in messages.
const NOUNS = { [LOCK_KIND.READ]: 'read lock', [LOCK_KIND.WRITE]: 'write lock', [LOCK_KIND.FAIR]: 'fair lock' };

// A lock of one kind on the client's engine, for the object `of` that owns
// it (its client, name, _key, owner, _closing, _forget()): a side of a
// ReadWriteLock (RLC_KIND_READ, RLC_KIND_WRITE) or a FairLock
// (RLC_KIND_FAIR, with of._threadWait). acquire({wait, lease, signal}),
// release(), holdCount(), validity() (no I/O). An abort of signal cancels
// the wait in the engine (rlc_engine_cancel): nothing stays (no level, no
// reader's timeout key, no place among the waiting writers, no place in the
// fair queue or its timeouts).
class EngineLock {
  constructor(of, lockKind) {
    this._of = of;
    this.lockKind = lockKind;
    this.write = lockKind === LOCK_KIND.WRITE;
  }

  get _noun() { return NOUNS[this.lockKind]; }

  // The client's driver, or throws ClosedError (the client's or this object's).
  _driver() {
    if (this._of._closing) throw new ClosedError(STATUS.E_CLOSED, `'${this._of.name}' is closed`);
    this._of.client._check();
    return this._of.client._driver;
  }

  // Starts an engine operation of this lock: its {op, promise}.
  _start(how) {
    try {
      return how(this._driver());
    } catch (e) {
      if (e instanceof StartError) throw errorFor(e.status, `${this._noun} '${this._of.name}': ${e.message}`, strerror);
      throw e;
    }
  }

  _fail(ev) {
    if (ev.status === STATUS.E_CLOSED) return new ClosedError(STATUS.E_CLOSED, 'the client is closed');
    let msg = ev.message || '';
    if (ev.detail && !msg.includes(ev.detail)) msg = msg ? `${msg} (${ev.detail})` : ev.detail;
    return errorFor(ev.status, `${this._noun} '${this._of.name}'${msg ? `: ${msg}` : ''}`, strerror);
  }

  // The acquire operation of this kind (a fair lock's carries its thread wait).
  _acquireOp(d, wait, lease) {
    const of = this._of;
    if (this.lockKind === LOCK_KIND.FAIR) return d.acquireFair(of._key, of.owner, wait, lease, of._threadWait);
    return d.acquire(of._key, of.owner, wait, lease, this.lockKind);
  }

  async acquire({ wait = -1, lease = 0, signal } = {}) {
    const w = waitMs(wait);
    const l = leaseMs(lease);
    const sig = signalOption(signal);
    if (sig && sig.aborted) throw sig.reason;
    const of = this._of;
    const job = this._start((d) => this._acquireOp(d, w, l));
    const cancel = () => of.client._driver.cancel(job.op);
    if (sig) sig.addEventListener('abort', cancel, { once: true });
    let ev;
    try {
      ev = await job.promise;
    } finally {
      if (sig) sig.removeEventListener('abort', cancel);
    }
    if (sig && sig.aborted) {
      // granted as the abort came: the caller sees the abort, so give it back
      if (ev.status === STATUS.OK) await this.release().catch(() => {});
      throw sig.reason;
    }
    if (ev.status === STATUS.OK) {
      if (of._closing) of._forget(); // closed while it waited: not renewed
      return true;
    }
    if (ev.status === STATUS.NOT_ACQUIRED) return false;
    if (ev.status === STATUS.E_CANCELED && of.client._driver.closing) {
      throw new ClosedError(STATUS.E_CLOSED, 'the client is closed');
    }
    throw this._fail(ev);
  }

  tryAcquire({ lease = 0 } = {}) { return this.acquire({ wait: 0, lease }); }

  async release() {
    const of = this._of;
    const ev = await this._start((d) => d.release(of._key, of.owner, this.lockKind)).promise;
    if (ev.status !== STATUS.OK) throw this._fail(ev);
  }

  // Levels held (0 once the hold's validity ran out: lost). No I/O.
  holdCount() {
    if (this.validity() === 0) return 0;
    return this._of.client._driver.holdCount(this._of._key, this._of.owner, this.lockKind);
  }

  // ms this lock's hold is certainly still held (0 if not held). No I/O.
  validity() {
    if (this._of._closing) return 0;
    return this._of.client._driver.validity(this._of._key, this._of.owner, this.lockKind);
  }
}

// A dropped object's holds of these kinds stop being renewed (they expire).
function forgetHolds(driver, key, owner, kinds) {
  for (const kind of kinds) {
    driver.watchLost(kind, owner, null);
    driver.forget(key, owner, kind);
  }
}
const engineRegistry = new FinalizationRegistry(({ driver, key, owner, kinds }) =>
  forgetHolds(driver, key, owner, kinds));

// What ReadWriteLock and FairLock share: an owner of engine locks of name,
// one per kind in kinds, each hold's loss (found by a renewal) logged as a
// Lock's is, by its kind. No native handle, no thread, no blocking client.
class EngineOwner {
  constructor(client, name, kinds) {
    client._check(); // throws once closed
    this.client = client; // keeps the client alive as long as its handles
    this.name = checkName(name, 'lock name');
    this.owner = nextOwner++;
    this._closing = false;
    this._key = Buffer.from(name, 'utf8');
    this._kinds = kinds;
    const driver = client._driver;
    const owner = this.owner;
    const state = new WeakRef(client);
    for (const kind of kinds) {
      const noun = NOUNS[kind];
      driver.watchLost(kind, owner, (ev) => {
        const c = state.deref();
        if (c && c.listenerCount('log')) {
          c._log(2, `${noun} '${name}' (owner ${owner}) was lost: ${ev.message || strerror(ev.status)}`);
        }
      });
    }
    engineRegistry.register(this, { driver, key: this._key, owner, kinds }, this);
  }

  _forget() { forgetHolds(this.client._driver, this._key, this.owner, this._kinds); }

  // Its holds are not released: they are no longer renewed and expire with
  // their lease. Calls made after it reject with ClosedError.
  close() {
    if (this._closing) return;
    this._closing = true;
    engineRegistry.unregister(this);
    this._forget();
  }
}

// Many readers or one writer (Redisson's RReadWriteLock). rw.readLock() and
// rw.writeLock() are its sides; await rw.mode() is 'free', 'read' or 'write'
// (the mode a quorum of nodes agrees on). All of it runs on the client's
// engine: no thread, no blocking client. The object is one owner: its
// writer may take read levels; its two sides' levels are counted, released
// and lost apart.
class ReadWriteLock extends EngineOwner {
  constructor(client, name) {
    super(client, name, [LOCK_KIND.READ, LOCK_KIND.WRITE]);
    this._read = new EngineLock(this, LOCK_KIND.READ);
    this._write = new EngineLock(this, LOCK_KIND.WRITE);
  }

  readLock() { return this._read; }

  writeLock() { return this._write; }

  async mode() {
    const ev = await this._write._start((d) => d.query(this._key, this.owner, Q.MODE)).promise;
    if (ev.status !== STATUS.OK) throw this._write._fail(ev);
    return MODES[ev.count] ?? 'free';
  }
}

const DEFAULT_THREAD_WAIT_MS = 5000; // Redisson's threadWaitTime
const MAX_THREAD_WAIT_MS = 366 * 24 * 3600 * 1000;

function threadWaitMs(threadWait) {
  const tw = leaseMs(threadWait);
  if (tw > MAX_THREAD_WAIT_MS) {
    throw new InvalidArgumentError(STATUS.E_INVAL, `thread wait of ${tw} ms is longer than 366 days`);
  }
  return tw > 0 ? tw : DEFAULT_THREAD_WAIT_MS;
}

// First come, first served (Redisson's RFairLock). One node only.
// threadWait (ms, default 5000): a dead waiter leaves the queue within 2x.
// An engine lock of kind RLC_KIND_FAIR on the client's engine: a waiter is
// in Redisson's queue and timeouts, listening on its own channel, and holds
// no thread; an abort of its signal takes it out of both.
class FairLock extends EngineOwner {
  constructor(client, name, { threadWait = 0 } = {}) {
    const tw = threadWaitMs(threadWait);
    const nodes = client._driver ? client._driver.addresses.length : 1;
    if (nodes > 1) {
      // as the engine answers a fair acquire, refused here at once
      throw new InvalidArgumentError(STATUS.E_INVAL,
        `a fair lock over ${nodes} nodes is refused: each node keeps its own queue, so no order ` +
        'is shared by a quorum and the FIFO promise cannot hold (use one node, or a Lock for Redlock)');
    }
    super(client, name, [LOCK_KIND.FAIR]);
    this._threadWait = tw;
    this._lock = new EngineLock(this, LOCK_KIND.FAIR);
  }

  acquire(options) { return this._lock.acquire(options); }

  tryAcquire(options) { return this._lock.tryAcquire(options); }

  release() { return this._lock.release(); }

  holdCount() { return this._lock.holdCount(); }

  validity() { return this._lock.validity(); }
}

// A count of free permits (Redisson's RSemaphore), not bound to an owner.
class Semaphore extends Handle {
  constructor(client, name) {
    super(client, KIND.SEM, checkName(name, 'semaphore name'), (c) => ffn.semNew(c, name, scratch));
  }

  // Sets the count only if the semaphore has none; resolves true if it did.
  async trySetPermits(permits) { return (await this._ok(F.SEM_SET, permitCount(permits))).value !== 0n; }

  async available() { return Number((await this._ok(F.SEM_AVAILABLE)).value); }

  acquire({ permits = 1, wait = -1, signal } = {}) {
    const n = permitCount(permits);
    return this._acquire(F.SEM_ACQUIRE, n, waitMs(wait), 0, signal, () => this.release(n));
  }

  tryAcquire({ permits = 1 } = {}) { return this.acquire({ permits, wait: 0 }); }

  async release(permits = 1) { await this._ok(F.SEM_RELEASE, permitCount(permits)); }
}

// Permits with a lease (Redisson's RPermitExpirableSemaphore): acquire
// resolves a permit id (32 hex digits) or null; release(id) rejects
// LockLostError if the lease ran out first (they were back in the pool).
class PermitExpirableSemaphore extends Handle {
  constructor(client, name) {
    super(client, KIND.PSEM, checkName(name, 'semaphore name'), (c) => ffn.psemNew(c, name, scratch));
  }

  async trySetPermits(permits) { return (await this._ok(F.PSEM_SET, permitCount(permits))).value !== 0n; }

  async available() { return Number((await this._ok(F.PSEM_AVAILABLE)).value); }

  async acquire({ permits = 1, wait = -1, lease, signal } = {}) {
    const l = leaseMs(lease);
    if (l <= 0) throw new InvalidArgumentError(STATUS.E_INVAL, 'a permit needs a lease > 0 ms (expirable permits have no watchdog)');
    const rec = await this._wait(F.PSEM_ACQUIRE, permitCount(permits), waitMs(wait), l, signal,
      (taken) => this.release(taken.msg));
    if (rec.rc === STATUS.NOT_ACQUIRED) return null;
    if (rec.rc !== STATUS.OK) throw fail(rec);
    return rec.msg;
  }

  async release(id) { await this._ok(F.PSEM_RELEASE, 0, 0, 0, checkName(id, 'permit id')); }
}

// RLock names held together, all or none. Names are sorted and de-duplicated.
class MultiLock extends Handle {
  constructor(client, names) {
    if (!Array.isArray(names) || names.length === 0) {
      throw new InvalidArgumentError(STATUS.E_INVAL, 'names must be a non-empty array of strings');
    }
    names.forEach((n, i) => checkName(n, `name ${i}`));
    const packed = Buffer.concat(names.map((n) => Buffer.from(`${n}\0`, 'utf8')));
    const owner = nextOwner++;
    super(client, KIND.MULTI, names.join(','),
      (c) => ffn.multiNew(c, packed, names.length, owner, scratch));
    this.owner = owner;
    this.names = [...new Set(names)].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  }

  get size() { return this._local(4); }

  acquire({ wait = -1, lease = 0, signal } = {}) {
    return this._acquire(F.MULTI_ACQUIRE, waitMs(wait), leaseMs(lease), 0, signal, () => this.release());
  }

  tryAcquire({ lease = 0 } = {}) { return this.acquire({ wait: 0, lease }); }

  async release() { await this._ok(F.MULTI_RELEASE); }
}

// The constructors on Client.prototype (a hook in index.js).
function install(Client) {
  Object.assign(Client.prototype, {
    rwlock(name) { return new ReadWriteLock(this, name); },
    fairLock(name, options) { return new FairLock(this, name, options); },
    // With permits, the count is set if the semaphore has none (one round trip).
    async semaphore(name, permits) {
      const s = new Semaphore(this, name);
      if (permits !== undefined) {
        try { await s.trySetPermits(permits); } catch (e) { s.close(); throw e; }
      }
      return s;
    },
    async permitSemaphore(name, permits) {
      const s = new PermitExpirableSemaphore(this, name);
      if (permits !== undefined) {
        try { await s.trySetPermits(permits); } catch (e) { s.close(); throw e; }
      }
      return s;
    },
    multiLock(names) { return new MultiLock(this, names); },
  });
}

module.exports = { install, ReadWriteLock, FairLock, Semaphore, PermitExpirableSemaphore, MultiLock };
