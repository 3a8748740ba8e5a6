'use strict';
// redlockc/compat: node-redlock's API (v5: `new Redlock(clients, settings)`,
// acquire, release, extend, using with its AbortSignal, ResourceLockedError,
// ExecutionError) on this library's engine, with the client option
// format=classic: each resource is a string key holding the lock's value,
// as node-redlock keeps it, so processes running node-redlock and processes
// running this class exclude each other on the same resources.
//
//   const { Redlock } = require('redlockc/compat');   // or { default: Redlock }
//   const redlock = new Redlock(['redis://a:6379', 'redis://b:6379', 'redis://c:6379']);
//   await redlock.using(['orders'], 5000, async (signal) => { ... });
//
// One Redlock is one Client (one engine, one set of connections); every
// acquire is a new owner of it. Several resources are one multi-lock (every
// name or none, one value on each); release and extend act on each name.
//
// A Lock's value is the attempt id the engine wrote ("<client uuid>:<hex>").
// The engine does not hand it out, so acquire reads it back (one GET per
// node, on a connection of this class) before it resolves.
const net = require('node:net');
const tls = require('node:tls');
const { EventEmitter } = require('node:events');
const { Client, LockLostError, STATUS } = require('./index.js');

const defaultSettings = Object.freeze({
  driftFactor: 0.01,
  retryCount: 10,
  retryDelay: 200,
  retryJitter: 100,
  automaticExtensionThreshold: 500,
});

// node-redlock's own messages, word for word: programs match on them.
const DURATION_MESSAGE = 'Duration must be an integer value in milliseconds.';
const QUORUM_MESSAGE = 'The operation was unable to achieve a quorum during its retry window.';

// Another lock holds one or more of the resources (a vote against).
class ResourceLockedError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ResourceLockedError';
  }
}

// An operation that did not pass; attempts: one Promise<ExecutionStats> per try.
class ExecutionError extends Error {
  constructor(message, attempts) {
    super(message);
    this.name = 'ExecutionError';
    this.attempts = attempts;
  }
}

// A held lock on resources, as acquire and extend return it.
class Lock {
  constructor(redlock, resources, value, attempts, expiration, owner) {
    this.redlock = redlock;
    this.resources = resources;
    this.value = value;
    this.attempts = attempts;
    this.expiration = expiration;
    Object.defineProperty(this, '_owner', { value: owner }); // the engine's owner id
  }

  async release() { return this.redlock.release(this); }

  async extend(duration) { return this.redlock.extend(this, duration); }
}

// ---- the clients: node URIs, or ioredis instances' options ----------------

// An ioredis instance (or its options object) -> "redis://..." (its host,
// port, db, username, password; tls -> rediss://). A Cluster is refused.
function nodeUri(client) {
  if (typeof client === 'string') return client;
  if (!client || typeof client !== 'object') {
    throw new TypeError(`Redlock: a client must be a node URI or an ioredis instance, got ${typeof client}`);
  }
  if (client.isCluster) {
    throw new TypeError('Redlock: an ioredis Cluster is not supported here; give one "redis-cluster://host:port,..." URI per cluster');
  }
  const o = client.options || client;
  if (o.path) throw new TypeError('Redlock: a client on a unix socket: give its "unix://" URI');
  const host = o.host || '127.0.0.1';
  const auth = o.password ? `${encodeURIComponent(o.username || '')}:${encodeURIComponent(o.password)}@` : '';
  const h = host.includes(':') ? `[${host}]` : host;
  return `${o.tls ? 'rediss' : 'redis'}://${auth}${h}:${o.port || 6379}/${o.db || 0}`;
}

// ---- reading a key back (the lock's value) ---------------------------------

// One connection to a node for GETs: AUTH and SELECT as its URI says, then
// one GET at a time in order; a reply is a string, null, or an Error.
class Reader {
  constructor(address, uri, tlsSettings) {
    this.queue = [];
    this.buf = Buffer.alloc(0);
    const m = /^rediss?:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?(?:\[[^\]]+\]|[^:/]+)(?::\d+)?(?:\/(\d+))?/.exec(uri) || [];
    const connect = address.tls
      ? () => tls.connect({ host: address.host, port: address.port, ...tlsSettings })
      : () => net.connect(address.port, address.host);
    this.socket = connect();
    this.socket.setNoDelay(true);
    this.socket.unref();
    this.socket.on('data', (d) => this.data(d));
    const end = (err) => this.fail(err || new Error('connection closed'));
    this.socket.on('error', end);
    this.socket.on('close', () => end());
    if (m[2] !== undefined) this.send(m[1] ? ['AUTH', decodeURIComponent(m[1]), decodeURIComponent(m[2])] : ['AUTH', decodeURIComponent(m[2])]);
    if (m[3] && m[3] !== '0') this.send(['SELECT', m[3]]);
  }

  send(args) {
    if (this.dead) return Promise.resolve(new Error('connection closed'));
    this.socket.ref(); // a reply awaited keeps the process alive; none, not
    return new Promise((resolve) => {
      this.queue.push(resolve);
      this.socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`);
    });
  }

  async get(key) {
    return this.send(['GET', key]);
  }

  data(chunk) {
    this.buf = Buffer.concat([this.buf, chunk]);
    for (;;) {
      const eol = this.buf.indexOf('\r\n');
      if (eol < 0) return;
      const type = String.fromCharCode(this.buf[0]);
      const line = this.buf.toString('utf8', 1, eol);
      let reply;
      let used = eol + 2;
      if (type === '$') {
        const n = Number(line);
        if (n >= 0) {
          if (this.buf.length < used + n + 2) return;
          reply = this.buf.toString('utf8', used, used + n);
          used += n + 2;
        } else {
          reply = null;
        }
      } else {
        reply = type === '-' ? new Error(line) : line;
      }
      this.buf = this.buf.subarray(used);
      const resolve = this.queue.shift();
      if (this.queue.length === 0) this.socket.unref();
      if (resolve) resolve(reply);
    }
  }

  fail(err) {
    this.dead = true;
    for (const resolve of this.queue.splice(0)) resolve(err);
  }

  close() { this.socket.destroy(); }
}

// ---- Redlock ----------------------------------------------------------------

let nextOwner = 1;

class Redlock extends EventEmitter {
  // clients: node URIs ("redis://host:port/db", rediss://, unix://,
  // redis-sentinel://, redis-cluster://), or ioredis instances (their
  // host, port, db, username, password and tls are read; they are never
  // used or closed here). settings: node-redlock's, plus clientOptions
  // (options of this library's Client; format is always classic).
  constructor(clients, settings = {}) {
    super();
    this.on('error', () => {}); // as node-redlock: an 'error' per vote against, never fatal
    this.clients = new Set(clients);
    if (this.clients.size === 0) {
      throw new Error('Redlock must be instantiated with at least one redis client.');
    }
    const pick = (name) => (typeof settings[name] === 'number' ? settings[name] : defaultSettings[name]);
    this.settings = {
      driftFactor: pick('driftFactor'),
      retryCount: pick('retryCount'),
      retryDelay: pick('retryDelay'),
      retryJitter: pick('retryJitter'),
      automaticExtensionThreshold: pick('automaticExtensionThreshold'),
    };
    const uris = [...this.clients].map(nodeUri);
    const options = { ...(settings.clientOptions || {}), format: 'classic' };
    if ('driftFactor' in settings && !('driftFactor' in options) && !('drift_factor' in options)) {
      options.driftFactor = this.settings.driftFactor;
    }
    this._client = new Client(uris.join(','), options);
    this._uris = uris;
    this._prefix = options.keyPrefix ?? options.key_prefix ?? '';
    this._readers = null;
  }

  // Closes this class's connections (the ioredis instances given are not
  // touched). Locks still held expire with their duration.
  async quit() {
    for (const r of this._readers || []) r.close();
    this._readers = [];
    await this._client.close();
  }

  _settings(over) {
    return over ? { ...this.settings, ...over } : this.settings;
  }

  _stats(vote, error) {
    const members = [...this.clients];
    const stats = {
      membershipSize: members.length,
      quorumSize: Math.floor(members.length / 2) + 1,
      votesFor: new Set(),
      votesAgainst: new Map(),
    };
    for (const c of members) {
      if (vote === 'for') stats.votesFor.add(c);
      else stats.votesAgainst.set(c, error);
    }
    if (vote !== 'for') this.emit('error', error);
    return Promise.resolve(stats);
  }

  // The error of a failed engine event, as a vote against.
  _against(ev, resources) {
    if (ev.status === STATUS.NOT_ACQUIRED) {
      return new ResourceLockedError(`The operation was applied to: 0 of the ${resources.length} requested resources.`);
    }
    return new Error(ev.message || `status ${ev.status}`);
  }

  _key(resource) { return Buffer.from(resource, 'utf8'); }

  // Acquires resources for duration ms: true, or a vote against. Each try
  // but the last waits on the engine up to retryDelay (+- retryJitter):
  // a release made by this library wakes it at once, one by node-redlock
  // within the engine's poll.
  async acquire(resources, duration, settings) {
    checkDuration(duration);
    checkResources(resources);
    const s = this._settings(settings);
    const maxAttempts = s.retryCount === -1 ? Infinity : s.retryCount + 1;
    const owner = nextOwner++;
    const keys = resources.map((r) => this._key(r));
    const attempts = [];
    for (;;) {
      const last = attempts.length + 1 >= maxAttempts;
      const wait = s.retryCount === -1 ? -1 : last ? 0
        : Math.max(0, s.retryDelay + Math.floor((Math.random() * 2 - 1) * s.retryJitter));
      const ev = await this._start(() => (keys.length === 1
        ? this._client._driver.acquire(keys[0], owner, wait, duration)
        : this._client._driver.acquireMulti(keys, owner, wait, duration)));
      if (ev.status === STATUS.OK) {
        attempts.push(this._stats('for'));
        const expiration = Date.now() + ev.validity;
        const value = await this._value(resources[0]);
        return new Lock(this, resources, value, attempts, expiration, owner);
      }
      attempts.push(this._stats('against', this._against(ev, resources)));
      if (ev.status !== STATUS.NOT_ACQUIRED && !last) {
        await new Promise((r) => setTimeout(r, wait)); // a node error answers at once
      }
      if (last) throw new ExecutionError(QUORUM_MESSAGE, attempts);
    }
  }

  // The engine's DONE event of the operation start() begins; a refusal at
  // once (a bad name, a lease over the library's limit) throws.
  async _start(start) {
    let job;
    try {
      job = start();
    } catch (e) {
      if (e.status !== undefined) throw new Error(e.message);
      throw e;
    }
    return job.promise;
  }

  // The value this client wrote at resource: the one of its nodes' values
  // that is one of this client's attempt ids.
  async _value(resource) {
    const driver = this._client._driver;
    // Only plain nodes are read (one URI per engine node, in order).
    if (!this._uris.every((u) => /^rediss?:\/\//.test(u)) || this._uris.length !== driver.addresses.length) return '';
    if (!this._readers || this._readers.some((r) => r.dead)) {
      for (const r of this._readers || []) r.close();
      this._readers = driver.addresses.map((a, i) => new Reader(a, this._uris[i], driver.tlsSettings));
    }
    const mine = `${driver.uuid}:`;
    const replies = await Promise.all(this._readers.map((r) => r.get(this._prefix + resource)));
    return replies.find((v) => typeof v === 'string' && v.startsWith(mine)) || '';
  }

  // Gives back every resource of lock; throws ExecutionError when it was
  // not held any more (expired, taken, released already).
  async release(lock) {
    lock.expiration = 0;
    const evs = await Promise.all(lock.resources.map((r) =>
      this._start(() => this._client._driver.release(this._key(r), lock._owner))));
    const bad = evs.find((ev) => ev.status !== STATUS.OK);
    if (!bad) return { attempts: [this._stats('for')] };
    const applied = evs.filter((ev) => ev.status === STATUS.OK).length;
    const err = bad.status === STATUS.E_LOST || bad.status === STATUS.E_NOT_OWNER
      ? new ResourceLockedError(`The operation was applied to: ${applied} of the ${evs.length} requested resources.`)
      : new Error(bad.message || `status ${bad.status}`);
    throw new ExecutionError(QUORUM_MESSAGE, [this._stats('against', err)]);
  }

  // A new Lock holding the same resources for duration ms from now; the
  // existing one is spent (its expiration 0).
  async extend(existing, duration, settings) {
    checkDuration(duration);
    if (existing.expiration < Date.now()) {
      throw new ExecutionError('Cannot extend an already-expired lock.', []);
    }
    const evs = await Promise.all(existing.resources.map((r) =>
      this._start(() => this._client._driver.extend(this._key(r), existing._owner, duration))));
    const bad = evs.find((ev) => ev.status !== STATUS.OK);
    if (bad) {
      const err = bad.status === STATUS.E_LOST || bad.status === STATUS.E_NOT_OWNER
        ? new ResourceLockedError(`The operation was applied to: 0 of the ${evs.length} requested resources.`)
        : new Error(bad.message || `status ${bad.status}`);
      throw new ExecutionError(QUORUM_MESSAGE, [this._stats('against', err)]);
    }
    existing.expiration = 0;
    const validity = Math.min(...evs.map((ev) => ev.validity));
    void settings; // node-redlock reads driftFactor here; the client's drift_factor is the one used
    return new Lock(this, existing.resources, existing.value, [this._stats('for')], Date.now() + validity, existing._owner);
  }

  // Runs routine(signal) holding resources, extended automatically when
  // less than automaticExtensionThreshold ms is left; released after it.
  // signal.aborted (signal.error the reason) once an extension failed and
  // the lock expired, or the engine found the lock lost (taken or deleted).
  async using(resources, duration, settingsOrRoutine, optionalRoutine) {
    checkDuration(duration);
    const settings = settingsOrRoutine && typeof settingsOrRoutine !== 'function'
      ? this._settings(settingsOrRoutine) : this.settings;
    const routine = optionalRoutine ?? settingsOrRoutine;
    if (typeof routine !== 'function') throw new Error('INVARIANT: routine is not a function.');
    if (settings.automaticExtensionThreshold > duration - 100) {
      throw new Error('A lock `duration` must be at least 100ms greater than the `automaticExtensionThreshold` setting.');
    }
    const controller = new AbortController();
    const signal = controller.signal;
    const abort = (error) => {
      if (signal.aborted) return;
      signal.error = error;
      controller.abort(error);
    };
    let lock = await this.acquire(resources, duration, settings);
    const unwatch = this._watch(lock._owner, resources, abort);
    let timeout;
    let extension;
    const queue = () => {
      timeout = setTimeout(() => { extension = extend(); }, lock.expiration - Date.now() - settings.automaticExtensionThreshold);
    };
    const extend = async () => {
      timeout = undefined;
      try {
        lock = await lock.extend(duration);
        queue();
      } catch (error) {
        if (lock.expiration > Date.now()) return (extension = extend());
        abort(error instanceof Error ? error : new Error(`${error}`));
      }
      return undefined;
    };
    queue();
    try {
      return await routine(signal);
    } finally {
      if (timeout) clearTimeout(timeout);
      if (extension) await extension.catch(() => {});
      unwatch();
      await lock.release();
    }
  }

  // The engine's loss notices of owner (a key taken or deleted, seen by
  // loss push or a failed renewal) call abort with a LockLostError.
  _watch(owner, resources, abort) {
    const watcher = {
      name: resources.join(','),
      _lost: (status, message) => abort(new LockLostError(STATUS.E_LOST,
        `lock on ${resources.join(', ')} was lost${message ? `: ${message}` : ''}`)),
    };
    const locks = this._client._state.locks;
    locks.set(owner, { deref: () => watcher });
    return () => locks.delete(owner);
  }
}

function checkDuration(duration) {
  if (Math.floor(duration) !== duration) throw new Error(DURATION_MESSAGE);
}

function checkResources(resources) {
  if (!Array.isArray(resources) || resources.length === 0 ||
      resources.some((r) => typeof r !== 'string' || r === '' || r.includes('\0'))) {
    throw new TypeError('resources must be a non-empty array of non-empty strings');
  }
}

module.exports = { Redlock, Lock, ResourceLockedError, ExecutionError, default: Redlock };
