'use strict';
// The lock family (REDLOCKC_1.1, docs/FAMILY.md) for Node: ReadWriteLock,
// FairLock, Semaphore, PermitExpirableSemaphore, MultiLock, made by the
// client (client.rwlock(name), client.fairLock(name), client.semaphore(name,
// permits), client.permitSemaphore(name, permits), client.multiLock(names)).
//
// All of it runs on the client's event-loop driver (lib/engine_driver.js)
// as a Lock does, with no thread and no second client: a read-write lock's
// sides are engine locks of kinds RLC_KIND_READ and RLC_KIND_WRITE, mode()
// an engine query (RLC_Q_MODE); a fair lock an engine lock of kind
// RLC_KIND_FAIR; a semaphore's acquire an engine acquire of permits
// (RLC_KIND_SEMAPHORE, RLC_KIND_PSEMAPHORE) and its other calls one-shot
// engine calls; a multi-name lock one engine acquire over every name
// (rlc_engine_acquire_multi), each name then a Lock's hold of its owner.
//
// As Lock: every call that may touch the network returns a Promise; times
// are ms; each owner-bound object is an explicit owner of its own
// (acquiring the same object again is reentrant, two objects of one name
// exclude each other); failures reject with the error class of their
// status; a wait that runs out resolves false (null for a permit). An
// acquire's signal (an AbortSignal) cancels its wait in the engine
// (rlc_engine_cancel, which undoes whatever a try may have taken), the
// acquire rejects with signal.reason, and nothing stays held. close() ends
// the object: later calls reject ClosedError; holds are not released (they
// are no longer renewed and expire), permits taken stay taken.
const errors = require('./errors.js');
const { StartError, LOCK_KIND, Q } = require('./engine_driver.js');
const { fn } = require('./native.js');

const { STATUS, errorFor, ClosedError, InvalidArgumentError } = errors;
const MODES = ['free', 'read', 'write'];

const strerror = (rc) => fn.strerror(rc);

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

// Starts an engine operation (start() returns the driver's {op, promise});
// a refusal at once (StartError) throws as the library's error, about
// noun 'name'.
function startOp(noun, name, start) {
  try {
    return start();
  } catch (e) {
    if (e instanceof StartError) throw errorFor(e.status, `${noun} '${name}': ${e.message}`, strerror);
    throw e;
  }
}

// An operation's failure (its DONE event) as the error of its status.
function eventFail(noun, name, ev) {
  if (ev.status === STATUS.E_CLOSED) return new ClosedError(STATUS.E_CLOSED, 'the client is closed');
  let msg = ev.message || '';
  if (ev.detail && !msg.includes(ev.detail)) msg = msg ? `${msg} (${ev.detail})` : ev.detail;
  return errorFor(ev.status, `${noun} '${name}'${msg ? `: ${msg}` : ''}`, strerror);
}

// An acquire's DONE event; an abort of sig meanwhile cancels it in the
// engine (rlc_engine_cancel: it ends E_CANCELED, and whatever a try of it
// took is undone there).
async function settled(driver, job, sig) {
  const cancel = () => driver.cancel(job.op);
  if (sig) sig.addEventListener('abort', cancel, { once: true });
  try {
    return await job.promise;
  } finally {
    if (sig) sig.removeEventListener('abort', cancel);
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
    return startOp(this._noun, this._of.name, () => how(this._driver()));
  }

  _fail(ev) { return eventFail(this._noun, this._of.name, ev); }

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
    const ev = await settled(of.client._driver, job, sig);
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
// A MultiLock's: each name's hold of its owner (a Lock's kind).
function forgetNames(driver, keys, owner) {
  for (const key of keys) driver.forget(key, owner, LOCK_KIND.LOCK);
}
const engineRegistry = new FinalizationRegistry(({ driver, key, keys, owner, kinds }) => {
  if (keys) forgetNames(driver, keys, owner);
  else forgetHolds(driver, key, owner, kinds);
});

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

// A semaphore of either kind on the client's engine (one node only):
// nothing in it is owner-bound or renewed, so it keeps no state here but
// its name. An acquire is the engine's acquire of permits, with an owner
// id of its own (permits belong to no owner; the engine keys the try's
// record by it); set, count and give back are one-shot engine calls.
class EngineSemaphore {
  constructor(client, name, lockKind) {
    client._check(); // throws once closed
    checkName(name, 'semaphore name');
    const nodes = client._driver.addresses.length;
    if (nodes > 1) {
      // as the engine answers a semaphore's call, refused here at once
      throw new InvalidArgumentError(STATUS.E_INVAL,
        `a semaphore over ${nodes} masters is refused: a count of permits cannot be voted on ` +
        'by a quorum, so more than N permits could be out at once (use one node)');
    }
    this.client = client; // keeps the client alive as long as its handles
    this.name = name;
    this._key = Buffer.from(name, 'utf8');
    this._lockKind = lockKind;
    this._closing = false;
  }

  get _noun() {
    return this._lockKind === LOCK_KIND.PSEMAPHORE ? 'permit-expirable semaphore' : 'semaphore';
  }

  // Throws ClosedError once this object or its client is closed.
  _usable() {
    if (this._closing) throw new ClosedError(STATUS.E_CLOSED, `'${this.name}' is closed`);
    this.client._check();
  }

  // Starts an engine operation: its {op, promise}.
  _start(how) {
    this._usable();
    return startOp(this._noun, this.name, () => how(this.client._driver));
  }

  // A one-shot call's DONE event, or rejects with its failure.
  async _call(how) {
    const ev = await this._start(how).promise;
    if (ev.status !== STATUS.OK) throw eventFail(this._noun, this.name, ev);
    return ev;
  }

  // Sets the count only if the semaphore has none; resolves true if it did.
  async trySetPermits(permits) {
    const n = permitCount(permits);
    return (await this._call((d) => d.setPermits(this._lockKind, this._key, n))).count !== 0;
  }

  // The permits free now (an expirable one's ended leases given back first).
  async available() {
    return (await this._call((d) => d.availablePermits(this._lockKind, this._key))).count;
  }

  // An acquire's DONE event (OK or NOT_ACQUIRED), or rejects. An abort of
  // signal cancels it in the engine and rejects with signal.reason, after
  // undo(ev) gave back what a grant that crossed the abort took.
  async _take(permits, wait, lease, signal, undo) {
    const sig = signalOption(signal);
    if (sig && sig.aborted) throw sig.reason;
    const owner = nextOwner++;
    const driver = this.client._driver;
    const job = this._start((d) => d.acquirePermits(this._lockKind, this._key, owner, permits, wait, lease));
    const ev = await settled(driver, job, sig);
    if (sig && sig.aborted) {
      if (ev.status === STATUS.OK) await undo(ev).catch(() => {}); // the abort is what the caller sees
      throw sig.reason;
    }
    if (ev.status === STATUS.OK || ev.status === STATUS.NOT_ACQUIRED) return ev;
    if (ev.status === STATUS.E_CANCELED && driver.closing) {
      throw new ClosedError(STATUS.E_CLOSED, 'the client is closed');
    }
    throw eventFail(this._noun, this.name, ev);
  }

  // Gives permits back (plain: n; expirable: id), closed or not: an
  // abort's undo runs after close() too.
  async _giveBack(n, id) {
    const job = startOp(this._noun, this.name,
      () => this.client._driver.releasePermits(this._lockKind, this._key, n, id));
    const ev = await job.promise;
    if (ev.status !== STATUS.OK) throw eventFail(this._noun, this.name, ev);
  }

  // Later calls reject ClosedError; permits taken stay taken.
  close() { this._closing = true; }
}

// A count of free permits (Redisson's RSemaphore), not bound to an owner.
class Semaphore extends EngineSemaphore {
  constructor(client, name) {
    super(client, name, LOCK_KIND.SEMAPHORE);
  }

  async acquire({ permits = 1, wait = -1, signal } = {}) {
    const n = permitCount(permits);
    const ev = await this._take(n, waitMs(wait), 0, signal, () => this._giveBack(n, null));
    return ev.status === STATUS.OK;
  }

  tryAcquire({ permits = 1 } = {}) { return this.acquire({ permits, wait: 0 }); }

  async release(permits = 1) {
    const n = permitCount(permits);
    this._usable();
    await this._giveBack(n, null);
  }
}

// Permits with a lease (Redisson's RPermitExpirableSemaphore): acquire
// resolves a permit id (32 hex digits) or null; release(id) rejects
// LockLostError if the lease ran out first (they were back in the pool).
class PermitExpirableSemaphore extends EngineSemaphore {
  constructor(client, name) {
    super(client, name, LOCK_KIND.PSEMAPHORE);
  }

  async acquire({ permits = 1, wait = -1, lease, signal } = {}) {
    const l = leaseMs(lease);
    if (l <= 0) throw new InvalidArgumentError(STATUS.E_INVAL, 'a permit needs a lease > 0 ms (expirable permits have no watchdog)');
    const n = permitCount(permits);
    const driver = this.client._driver;
    const ev = await this._take(n, waitMs(wait), l, signal,
      async (taken) => this._giveBack(0, driver.permitId(taken)));
    if (ev.status !== STATUS.OK) return null;
    try {
      return driver.permitId(ev);
    } catch (e) {
      if (e instanceof StartError) throw errorFor(e.status, `${this._noun} '${this.name}': ${e.message}`, strerror);
      throw e;
    }
  }

  async release(id) {
    checkName(id, 'permit id');
    this._usable();
    await this._giveBack(0, id);
  }
}

const MAX_NAMES = 1024; // what one multi-lock takes (rlc_engine_acquire_multi)
const byBytes = (a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));

// RLock names held together, all or none (Redisson's RedissonMultiLock, one
// script per node: no hold-and-wait). Names are sorted by their bytes and
// de-duplicated. One engine acquire over every name; each name is then one
// level of this object's hold of it, a Lock's kind of hold (renewed, lost
// and released as a Lock's; its loss is logged as a lock's), released name
// by name.
class MultiLock {
  constructor(client, names) {
    if (!Array.isArray(names) || names.length === 0) {
      throw new InvalidArgumentError(STATUS.E_INVAL, 'names must be a non-empty array of strings');
    }
    names.forEach((n, i) => checkName(n, `name ${i}`));
    client._check(); // throws once closed
    this.client = client; // keeps the client alive as long as its handles
    this.name = names.join(',');
    this.owner = nextOwner++;
    this.names = [...new Set(names)].sort(byBytes);
    if (this.names.length > MAX_NAMES) {
      throw new InvalidArgumentError(STATUS.E_INVAL, `a multi-lock takes 1 .. ${MAX_NAMES} names, got ${this.names.length}`);
    }
    this._keys = this.names.map((n) => Buffer.from(n, 'utf8'));
    this._closing = false;
    engineRegistry.register(this, { driver: client._driver, keys: this._keys, owner: this.owner }, this);
  }

  // Throws ClosedError once this object or its client is closed.
  _usable() {
    if (this._closing) throw new ClosedError(STATUS.E_CLOSED, `'${this.name}' is closed`);
    this.client._check();
  }

  get size() {
    this._usable();
    return this.names.length;
  }

  async acquire({ wait = -1, lease = 0, signal } = {}) {
    const w = waitMs(wait);
    const l = leaseMs(lease);
    const sig = signalOption(signal);
    if (sig && sig.aborted) throw sig.reason;
    this._usable();
    const driver = this.client._driver;
    const job = startOp('multi-lock', this.name, () => driver.acquireMulti(this._keys, this.owner, w, l));
    const ev = await settled(driver, job, sig);
    if (sig && sig.aborted) {
      // granted as the abort came: the caller sees the abort, so give it back
      if (ev.status === STATUS.OK) await this._releaseAll().catch(() => {});
      throw sig.reason;
    }
    if (ev.status === STATUS.OK) {
      if (this._closing) this._forget(); // closed while it waited: not renewed
      return true;
    }
    if (ev.status === STATUS.NOT_ACQUIRED) return false;
    if (ev.status === STATUS.E_CANCELED && driver.closing) {
      throw new ClosedError(STATUS.E_CLOSED, 'the client is closed');
    }
    throw eventFail('multi-lock', this.name, ev);
  }

  tryAcquire({ lease = 0 } = {}) { return this.acquire({ wait: 0, lease }); }

  // One level of every name, the last in order first (all sent in one
  // write); every name is released even if one fails, and the first
  // failure in that order is what rejects.
  async release() {
    this._usable();
    await this._releaseAll();
  }

  async _releaseAll() {
    const driver = this.client._driver;
    const one = (i) => {
      try {
        return startOp('lock', this.names[i], () => driver.release(this._keys[i], this.owner, LOCK_KIND.LOCK))
          .promise.then((ev) => (ev.status === STATUS.OK ? null : eventFail('lock', this.names[i], ev)));
      } catch (e) {
        return Promise.resolve(e);
      }
    };
    const order = this._keys.map((_, i) => i).reverse();
    const failure = (await Promise.all(order.map(one))).find(Boolean);
    if (failure) throw failure;
  }

  _forget() {
    forgetNames(this.client._driver, this._keys, this.owner);
  }

  // Its holds are not released: they are no longer renewed and expire with
  // their lease. Calls made after it reject with ClosedError.
  close() {
    if (this._closing) return;
    this._closing = true;
    engineRegistry.unregister(this);
    this._forget();
  }
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
