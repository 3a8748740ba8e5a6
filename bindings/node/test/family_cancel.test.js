'use strict';
// A family acquire's signal (an AbortSignal) ends its wait as for Lock: the
// engine's wait is cancelled (rlc_engine_cancel, every kind), the acquire
// rejects with signal.reason, and nothing stays held (no level, no permit,
// no writer's hold on new readers, no place in the fair queue). Real
// redis-server.
const test = require('node:test');
const assert = require('node:assert/strict');
const { setTimeout: delay } = require('node:timers/promises');
const redlockc = require('..');
const { serverUri, uniqueName, within, redis } = require('./helpers.js');

const { Client } = redlockc;

// Subscribers of a channel, as an integer reply (helpers.redis reads no arrays).
const subscribers = async (channel) => Number(await redis(serverUri(), 'EVAL',
  "return redis.call('pubsub', 'numsub', KEYS[1])[2]", 1, channel));

// Resolves once check() is true; bounded (10 s), polled every 20 ms.
async function until(what, check) {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await delay(20);
  }
  assert.fail(`${what}: not seen within 10 s`);
}

// Per kind: another owner holds it; the waiter's acquire; when it waits
// (seen on the server); what shows nothing was kept.
const KINDS = {
  'read-write lock, write side': {
    hold: async (c, n) => assert.equal(await c.rwlock(n).readLock().acquire({ lease: 30000 }), true),
    wait: (c, n, signal) => {
      const w = c.rwlock(n).writeLock();
      return { w, p: w.acquire({ signal }) };
    },
    waiting: async (n) => Number(await redis(serverUri(), 'ZCARD', `redlockc_rwlock_writers:{${n}}`)) === 1,
    kept: async (c, n, { w }) => {
      assert.equal(w.holdCount(), 0);
      assert.equal(await redis(serverUri(), 'ZCARD', `redlockc_rwlock_writers:{${n}}`), '0',
        "the writer's intent went with its wait");
      assert.equal(await c.rwlock(n).readLock().tryAcquire({ lease: 10000 }), true,
        'a new reader is not held back');
    },
  },
  'read-write lock, read side': {
    hold: async (c, n) => assert.equal(await c.rwlock(n).writeLock().acquire({ lease: 30000 }), true),
    wait: (c, n, signal) => {
      const w = c.rwlock(n).readLock();
      return { w, p: w.acquire({ signal }) };
    },
    waiting: async (n) => (await subscribers(`redisson_rwlock:{${n}}`)) === 1,
    kept: async (c, n, { w }) => assert.equal(w.holdCount(), 0),
  },
  'fair lock': {
    hold: async (c, n) => assert.equal(await c.fairLock(n).acquire({ lease: 30000 }), true),
    wait: (c, n, signal) => {
      const w = c.fairLock(n);
      return { w, p: w.acquire({ signal }) };
    },
    waiting: async (n) => (await redis(serverUri(), 'LLEN', `redisson_lock_queue:{${n}}`)) === '1',
    kept: async (c, n, { w }) => {
      assert.equal(w.holdCount(), 0);
      assert.equal(await redis(serverUri(), 'LLEN', `redisson_lock_queue:{${n}}`), '0',
        'the waiter left the queue');
    },
  },
  semaphore: {
    hold: async (c, n) => assert.equal(await (await c.semaphore(n, 1)).acquire(), true),
    wait: async (c, n, signal) => ({ p: (await c.semaphore(n)).acquire({ signal }) }),
    waiting: async (n) => (await subscribers(`redisson_sc:{${n}}`)) === 1,
    kept: async (c, n) => assert.equal(await redis(serverUri(), 'GET', n), '0', 'no permit taken'),
  },
  'permit-expirable semaphore': {
    hold: async (c, n) => assert.ok(await (await c.permitSemaphore(n, 1)).acquire({ lease: 30000 })),
    wait: async (c, n, signal) => ({ p: (await c.permitSemaphore(n)).acquire({ lease: 30000, signal }) }),
    waiting: async (n) => (await subscribers(`redisson_sc:{${n}}`)) === 1,
    kept: async (c, n) => assert.equal(await redis(serverUri(), 'ZCARD', `{${n}}:timeout`), '1',
      "only the holder's permit is out"),
  },
  'multi-name lock': {
    hold: async (c, n) => assert.equal(await c.lock(`${n}-b`).acquire({ lease: 30000 }), true),
    wait: (c, n, signal) => ({ p: c.multiLock([`${n}-a`, `${n}-b`]).acquire({ signal }) }),
    waiting: async (n) => (await subscribers(`redisson_lock__channel:{${n}-b}`)) === 1,
    kept: async (c, n) => assert.equal(await redis(serverUri(), 'EXISTS', `${n}-a`), '0',
      'the free name was not kept'),
  },
};

for (const [kind, k] of Object.entries(KINDS)) {
  test(`aborting the signal ends a waiting ${kind} acquire, keeping nothing`, async () => {
    const client = new Client(serverUri());
    const name = uniqueName('fcancel');
    try {
      await k.hold(client, name);
      const ac = new AbortController();
      const waiter = await k.wait(client, name, ac.signal);
      await until('the waiter', () => k.waiting(name));
      const reason = new Error('stop waiting');
      ac.abort(reason);
      await within(10000, 'the aborted acquire',
        assert.rejects(waiter.p, (e) => e === reason));
      await k.kept(client, name, waiter);
    } finally {
      await client.close();
    }
  });
}

test('a family acquire with a signal aborted before it rejects at once and takes nothing', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('fcancel-pre');
  try {
    const rw = client.rwlock(name);
    const reason = new Error('already');
    await assert.rejects(rw.writeLock().acquire({ signal: AbortSignal.abort(reason) }),
      (e) => e === reason);
    assert.equal(rw.writeLock().holdCount(), 0);
    assert.equal(await redis(serverUri(), 'EXISTS', name), '0');
    await assert.rejects(rw.writeLock().acquire({ signal: 'no' }), redlockc.InvalidArgumentError);
  } finally {
    await client.close();
  }
});

test('a signal that is never aborted lets a family acquire get what comes free', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('fcancel-free');
  try {
    const sem = await client.semaphore(name, 1);
    assert.equal(await sem.acquire(), true);
    const ac = new AbortController();
    const p = (await client.semaphore(name)).acquire({ signal: ac.signal });
    await until('the waiter', async () => (await subscribers(`redisson_sc:{${name}}`)) === 1);
    await sem.release();
    assert.equal(await within(10000, 'the acquire', p), true);
    assert.equal(await redis(serverUri(), 'GET', name), '0');
  } finally {
    await client.close();
  }
});
