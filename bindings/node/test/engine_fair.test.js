'use strict';
// A fair lock runs on the event-loop driver as a Lock does: an engine lock of
// kind RLC_KIND_FAIR (rlc_engine_acquire_fair with its thread wait), in
// Redisson's RFairLock layout: the lock's hash and field <uuid>:<owner>, the
// queue redisson_lock_queue:{name}, the timeouts redisson_lock_timeout:{name}
// and each waiter's own channel. A fair lock and its waiters start no helper
// thread, make no blocking client and open no connection but the engine's; a
// waiter is a Map entry, not a thread; its AbortSignal cancels the wait in
// the engine, which takes it out of the queue and the timeouts. Each test has
// a redis-server of its own, so the connections it counts are this client's.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { setMaxListeners } = require('node:events');
const { setTimeout: delay } = require('node:timers/promises');
const redlockc = require('..');
const { uniqueName, within, redis } = require('./helpers.js');
const { startRedis } = require('./redis_server.js');

const { Client, LockLostError, NotOwnerError } = redlockc;

// Threads of this process that the library or a helper pool started: a
// blocking client's are named rlc-*, the helper's pool's were rlcn-*.
function libraryThreads() {
  const names = [];
  for (const tid of fs.readdirSync('/proc/self/task')) {
    let comm;
    try {
      comm = fs.readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
    } catch {
      continue; // it ended meanwhile
    }
    if (comm.startsWith('rlc-') || comm.startsWith('rlcn-')) names.push(comm);
  }
  return names;
}

const threadCount = () => fs.readdirSync('/proc/self/task').length;

// "127.0.0.1:port" of each connection the server has, but the one asking.
async function serverConnections(uri) {
  const list = await redis(uri, 'CLIENT', 'LIST');
  return list.split('\n').filter((line) => line.trim() && !/ cmd=client/.test(line))
    .map((line) => /(?:^| )addr=(\S+)/.exec(line)[1]);
}

function engineConnections(client) {
  return client._driver.conns.filter(Boolean).map((c) => `${c.socket.localAddress}:${c.socket.localPort}`);
}

// Redisson's RFairLock keys beside the lock's hash.
const queueKey = (name) => `redisson_lock_queue:{${name}}`;
const timeoutKey = (name) => `redisson_lock_timeout:{${name}}`;
// A fair owner's field, in the hash, the queue and the timeouts: the
// engine's UUID (the client's) and the object's owner id.
const field = (client, fair) => `${client.uuid}:${fair.owner}`;

// The queue, head first (helpers.redis reads no arrays: joined by a space).
const queue = async (uri, name) => {
  const text = await redis(uri, 'EVAL',
    "return table.concat(redis.call('lrange', KEYS[1], 0, -1), ' ')", 1, queueKey(name));
  return text ? text.split(' ') : [];
};

// Resolves once check() is true; bounded (count and time), polled every 20 ms.
async function until(what, check, ms = 10000) {
  const end = Date.now() + ms;
  for (let i = 0; i < ms / 20 + 2 && Date.now() <= end; i++) {
    if (await check()) return;
    await delay(20);
  }
  assert.fail(`${what}: not seen within ${ms} ms`);
}

test('a fair lock and its waiters start no helper thread and no connection but the engine\'s', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('fair-engine');
    const fair = client.fairLock(name);
    assert.equal(await fair.acquire({ wait: 0 }), true);
    assert.equal(await fair.tryAcquire(), true, 'reentrant');
    assert.equal(fair.holdCount(), 2);
    assert.ok(fair.validity() > 0 && fair.validity() <= 30000, `validity ${fair.validity()}`);
    assert.equal(await redis(server.uri, 'HGET', name, field(client, fair)), '2',
      "Redisson's hash: the field <uuid>:<owner> of the engine's UUID");

    // another object is another owner: it waits in the queue; the release wakes it
    const other = client.fairLock(name);
    assert.equal(await other.tryAcquire(), false);
    const waiting = other.acquire({ wait: 20000 }).catch((err) => err);
    await until('the waiter is queued', async () => (await queue(server.uri, name)).length === 1);
    assert.deepEqual(await queue(server.uri, name), [field(client, other)]);
    assert.deepEqual(libraryThreads(), [], 'a waiter holds no helper thread');
    await fair.release();
    await fair.release();
    assert.equal(await within(10000, 'the waiter', waiting), true);
    assert.equal(await redis(server.uri, 'HGET', name, field(client, other)), '1');
    await other.release();
    assert.equal(await redis(server.uri, 'EXISTS', name), '0');
    await assert.rejects(fair.release(), NotOwnerError);

    assert.deepEqual(libraryThreads(), [], 'threads of the blocking client or the helper pool');
    let seen = [];
    let ours = [];
    for (let i = 0; i < 100; i++) {
      seen = await serverConnections(server.uri);
      ours = engineConnections(client);
      if (seen.every((addr) => ours.includes(addr))) break;
      await delay(30);
    }
    assert.ok(seen.length > 0, 'the engine is connected');
    assert.deepEqual(seen.filter((addr) => !ours.includes(addr)), [],
      `connections the server has that are not the engine's (engine: ${ours.join(', ')})`);
    fair.close();
    other.close();
  } finally {
    await client.close();
    await server.stop();
  }
  assert.deepEqual(libraryThreads(), [], 'threads started by close (it frees no blocking client)');
});

test('three waiters get the fair lock in the order they came, each woken by the release before it', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('fair-fifo');
    // A thread wait of 2 min: a waiter tries again by itself only every
    // minute, so a hand-off within the bound below is the release's message.
    const opts = { threadWait: 120000 };
    const holder = client.fairLock(name, opts);
    assert.equal(await holder.acquire({ wait: 0 }), true); // a watchdog lease: 30 s
    const waiters = [0, 1, 2].map(() => client.fairLock(name, opts));
    const order = [];
    const granted = [];
    for (const [i, w] of waiters.entries()) {
      granted.push(w.acquire({ wait: 120000 }).then((ok) => { order.push(i); return ok; }, (err) => err));
      // each joins the queue before the next comes
      await until(`waiter ${i} is queued`, async () => (await queue(server.uri, name)).length === i + 1);
    }
    assert.deepEqual(await queue(server.uri, name), waiters.map((w) => field(client, w)),
      'the queue holds the waiters in the order they came');
    assert.equal(Number(await redis(server.uri, 'ZCARD', timeoutKey(name))), 3);
    assert.deepEqual(libraryThreads(), [], 'waiters hold no helper thread');

    let releasing = holder;
    for (const [i, w] of waiters.entries()) {
      await releasing.release();
      assert.equal(await within(5000, `waiter ${i}, woken by the release`, granted[i]), true);
      assert.deepEqual(order, waiters.slice(0, i + 1).map((_, j) => j), 'first come, first served');
      assert.equal(w.holdCount(), 1);
      assert.equal(await redis(server.uri, 'HGET', name, field(client, w)), '1');
      releasing = w;
    }
    await releasing.release();
    assert.equal(await redis(server.uri, 'EXISTS', name), '0');
    assert.deepEqual(await queue(server.uri, name), []);
    assert.equal(await redis(server.uri, 'ZCARD', timeoutKey(name)), '0');
  } finally {
    await client.close();
    await server.stop();
  }
});

test('an aborted fair waiter leaves no queue entry and no timeout member; the next still gets it', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('fair-abort');
    const holder = client.fairLock(name);
    assert.equal(await holder.acquire({ wait: 0, lease: 60000 }), true);
    const first = client.fairLock(name);
    const ac = new AbortController();
    const aborted = first.acquire({ wait: 60000, signal: ac.signal }).then(() => null, (err) => err);
    await until('the first waiter is queued', async () => (await queue(server.uri, name)).length === 1);
    const second = client.fairLock(name);
    const waiting = second.acquire({ wait: 60000 }).catch((err) => err);
    await until('the second waiter is queued', async () => (await queue(server.uri, name)).length === 2);
    assert.deepEqual(libraryThreads(), [], 'waiters hold no helper thread');

    ac.abort(new Error('stop'));
    assert.equal((await within(5000, 'the aborted acquire', aborted)).message, 'stop');
    await until('the aborted waiter left the queue',
      async () => !(await queue(server.uri, name)).includes(field(client, first)));
    assert.deepEqual(await queue(server.uri, name), [field(client, second)]);
    assert.equal(await redis(server.uri, 'ZSCORE', timeoutKey(name), field(client, first)), null,
      'no timeout member of the aborted waiter');
    assert.equal(await redis(server.uri, 'ZCARD', timeoutKey(name)), '1');
    assert.equal(first.holdCount(), 0);

    await holder.release();
    assert.equal(await within(10000, 'the second waiter', waiting), true);
    assert.equal(await redis(server.uri, 'HEXISTS', name, field(client, first)), '0');
    await second.release();
    assert.deepEqual(await queue(server.uri, name), []);
    assert.equal(await redis(server.uri, 'ZCARD', timeoutKey(name)), '0');
  } finally {
    await client.close();
    await server.stop();
  }
});

test('1,000 waiting fair owners in one loop start no thread; their aborts leave the queue empty', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('fair-many');
    const holder = client.fairLock(name);
    assert.equal(await holder.acquire({ wait: 0, lease: 120000 }), true);
    const before = threadCount();
    const ac = new AbortController();
    setMaxListeners(2000, ac.signal); // one listener per waiter
    const waits = [];
    for (let i = 0; i < 1000; i++) {
      // a long thread wait: 1,000 waiters keep their places with few tries
      waits.push(client.fairLock(name, { threadWait: 60000 })
        .acquire({ wait: 120000, signal: ac.signal }).then(() => null, (err) => err));
    }
    await until('every waiter is queued',
      async () => (await redis(server.uri, 'LLEN', queueKey(name))) === '1000', 60000);
    assert.equal(threadCount(), before, 'waiting fair owners start no thread');
    assert.deepEqual(libraryThreads(), []);
    ac.abort(new Error('enough'));
    const ends = await within(60000, 'the aborted waiters', Promise.all(waits));
    assert.ok(ends.every((e) => e && e.message === 'enough'), 'each rejects with the reason');
    await until('every aborted waiter left the queue and the timeouts', async () =>
      (await redis(server.uri, 'LLEN', queueKey(name))) === '0' &&
      (await redis(server.uri, 'ZCARD', timeoutKey(name))) === '0', 30000);
    assert.equal(threadCount(), before);
    await holder.release();
    assert.equal(await redis(server.uri, 'EXISTS', name), '0');
  } finally {
    await client.close();
    await server.stop();
  }
});

test("a fair hold's loss is its own: logged as a fair lock's, no Lock or read-write lock of the name hears it", async () => {
  const server = await startRedis();
  const client = new Client(server.uri, { watchdogTimeoutMs: 1500 });
  const logs = [];
  client.on('log', (line) => logs.push(line.message));
  try {
    const name = uniqueName('fair-lost');
    const lock = client.lock(name);
    let lockHeard = 0;
    lock.on('lost', () => { lockHeard += 1; });
    const rw = client.rwlock(name);
    const fair = client.fairLock(name);
    assert.equal(await fair.acquire({ wait: 0 }), true);
    await redis(server.uri, 'DEL', name); // taken from under it: its renewal finds it gone
    await until('the fair hold is lost', async () => fair.holdCount() === 0);
    const line = `fair lock '${name}' (owner ${fair.owner}) was lost`;
    await until('its loss is logged', async () => logs.some((l) => l.includes(line)));
    assert.ok(!logs.some((l) => /(read|write) lock '/.test(l) && l.includes(name)),
      'not as a read or write lock');
    await assert.rejects(fair.release(), LockLostError);
    assert.equal(lockHeard, 0, 'the Lock of the name heard nothing');
    assert.equal(rw.readLock().holdCount() + rw.writeLock().holdCount(), 0);
    assert.deepEqual(libraryThreads(), [], 'no helper thread');
  } finally {
    await client.close();
    await server.stop();
  }
});
