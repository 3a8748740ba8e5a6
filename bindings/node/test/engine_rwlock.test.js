'use strict';
// A read-write lock runs on the event-loop driver as a Lock does: its sides
// are engine locks of kinds RLC_KIND_READ and RLC_KIND_WRITE, mode() an
// engine query (RLC_Q_MODE). A program of Locks and read-write locks starts
// no helper thread, makes no blocking client and opens no connection but the
// engine's; a waiting reader or writer is a Map entry, not a thread; its
// AbortSignal cancels the wait in the engine. Each test has a redis-server
// of its own, so the connections it counts are this client's.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
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

const writers = (name) => `redlockc_rwlock_writers:{${name}}`;

// Resolves once check() is true; bounded (count and time), polled every 20 ms.
async function until(what, check, ms = 10000) {
  const end = Date.now() + ms;
  for (let i = 0; i < ms / 20 + 2 && Date.now() <= end; i++) {
    if (await check()) return;
    await delay(20);
  }
  assert.fail(`${what}: not seen within ${ms} ms`);
}

test('Locks and read-write locks start no helper thread and no connection but the engine\'s', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('rw-engine');
    const lock = client.lock(uniqueName('beside'));
    assert.equal(await lock.acquire({ wait: 0 }), true);

    const rw = client.rwlock(name);
    const w = rw.writeLock();
    assert.equal(await w.acquire({ wait: 0 }), true);
    assert.equal(await w.tryAcquire(), true, 'reentrant');
    assert.equal(w.holdCount(), 2);
    assert.ok(w.validity() > 0 && w.validity() <= 30000, `validity ${w.validity()}`);
    // Redisson's RReadWriteLock layout
    assert.equal(await redis(server.uri, 'HGET', name, 'mode'), 'write');
    assert.equal(await redis(server.uri, 'HGET', name, `${client.uuid}:${rw.owner}:write`), '2');

    // another object is another owner: it waits, registered among the
    // writers; its abort ends the wait and leaves nothing
    const other = client.rwlock(name).writeLock();
    assert.equal(await other.tryAcquire(), false);
    const ac = new AbortController();
    const cancelled = other.acquire({ signal: ac.signal }).then(() => null, (err) => err);
    await until('the writer waits, registered', async () => (await redis(server.uri, 'ZCARD', writers(name))) === '1');
    ac.abort(new Error('stop'));
    assert.equal((await within(5000, 'the cancelled acquire', cancelled)).message, 'stop');
    await until('the cancelled writer withdrew', async () => (await redis(server.uri, 'ZCARD', writers(name))) === '0');
    assert.equal(other.holdCount(), 0);
    assert.equal(await redis(server.uri, 'HLEN', name), '2', 'mode and the holder\'s field only');

    // a waiter wakes on the release
    const third = client.rwlock(name).writeLock();
    const waiting = third.acquire({ wait: 10000 });
    await w.release();
    await w.release();
    assert.equal(await within(10000, 'the waiting writer', waiting), true);
    await third.release();
    assert.equal(await redis(server.uri, 'EXISTS', name), '0');
    await assert.rejects(w.release(), NotOwnerError);

    // the read side and mode(): readers overlap, the writer reads
    const r = rw.readLock();
    const r2 = client.rwlock(name).readLock();
    assert.equal(await rw.mode(), 'free');
    assert.equal(await r.tryAcquire(), true);
    assert.equal(await r2.tryAcquire(), true, 'two readers at once');
    assert.equal(await rw.mode(), 'read');
    assert.equal(await redis(server.uri, 'HGET', name, `${client.uuid}:${rw.owner}`), '1',
      "a reader's field <uuid>:<owner>");
    assert.equal(await redis(server.uri, 'EXISTS', `{${name}}:${client.uuid}:${rw.owner}:rwlock_timeout:1`), '1',
      'its timeout key');
    await r.release();
    await r2.release();
    assert.equal(await w.tryAcquire(), true);
    assert.equal(await r.tryAcquire(), true, 'the writer reads');
    assert.equal(r.holdCount(), 1);
    assert.equal(w.holdCount(), 1);
    await w.release();
    assert.equal(await rw.mode(), 'read', 'its read level is left');
    await r.release();
    assert.equal(await redis(server.uri, 'EXISTS', name), '0');
    await lock.release();

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
    rw.close();
    lock.close();
  } finally {
    await client.close();
    await server.stop();
  }
  assert.deepEqual(libraryThreads(), [], 'threads started by close (it frees no blocking client)');
});

test('1,000 waiting writers in one loop start no thread; their aborts leave no place', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('rw-many');
    const holder = client.rwlock(name).writeLock();
    assert.equal(await holder.acquire({ wait: 0, lease: 60000 }), true);
    const before = threadCount();
    const ac = new AbortController();
    const waits = [];
    for (let i = 0; i < 1000; i++) {
      waits.push(client.rwlock(name).writeLock().acquire({ wait: 60000, signal: ac.signal })
        .then(() => null, (err) => err));
    }
    await until('every writer waits, registered',
      async () => (await redis(server.uri, 'ZCARD', writers(name))) === '1000', 30000);
    assert.equal(threadCount(), before, 'waiting writers start no thread');
    assert.deepEqual(libraryThreads(), []);
    ac.abort(new Error('enough'));
    const ends = await within(30000, 'the aborted writers', Promise.all(waits));
    assert.ok(ends.every((e) => e && e.message === 'enough'), 'each rejects with the reason');
    await until('every aborted writer withdrew',
      async () => (await redis(server.uri, 'ZCARD', writers(name))) === '0', 30000);
    assert.equal(threadCount(), before);
    await holder.release();
  } finally {
    await client.close();
    await server.stop();
  }
});

test("a write hold's loss is its own: logged as a write lock's, no Lock of the name hears it", async () => {
  const server = await startRedis();
  const client = new Client(server.uri, { watchdogTimeoutMs: 1500 });
  const logs = [];
  client.on('log', (line) => logs.push(line.message));
  try {
    const name = uniqueName('rw-lost');
    const lock = client.lock(name);
    let lockHeard = 0;
    lock.on('lost', () => { lockHeard += 1; });
    const w = client.rwlock(name).writeLock();
    assert.equal(await w.acquire({ wait: 0 }), true);
    await redis(server.uri, 'DEL', name); // taken from under it: its renewal finds it gone
    await until('the write hold is lost', async () => w.holdCount() === 0);
    await until('its loss is logged', async () => logs.some((l) => l.includes(`write lock '${name}'`)));
    await assert.rejects(w.release(), LockLostError);
    assert.equal(lockHeard, 0, 'the Lock of the name heard nothing');
  } finally {
    await client.close();
    await server.stop();
  }
});

// The keys a reader keeps beside the hash: one timeout key per level.
const timeoutKeys = async (uri, name) => Number(await redis(uri, 'EVAL',
  "return #redis.call('keys', KEYS[1])", 1, `{${name}}:*rwlock_timeout*`));

test("a writer's release wakes every waiting reader; the last reader's wakes the writer", async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  const other = new Client(server.uri);
  try {
    const name = uniqueName('rw-wake');
    const w = other.rwlock(name).writeLock();
    assert.equal(await w.acquire({ wait: 0 }), true); // a watchdog lease: 30 s
    const readers = [client, other, client, other].map((c) => c.rwlock(name).readLock());
    const waits = readers.map((r) => r.acquire({ wait: 60000 }));
    await until('both clients wait on the channel', async () => Number(await redis(server.uri, 'EVAL',
      "return redis.call('pubsub', 'numsub', KEYS[1])[2]", 1, `redisson_rwlock:{${name}}`)) === 2);
    // a round trip of each client: the tries their subscription's
    // confirmation started are answered, every reader sleeps
    for (let i = 0; i < 2; i++) await Promise.all([client, other].map((c) => c.rwlock(name).mode()));
    await w.release();
    // far below the 30 s lease: only the release's message meets it
    assert.deepEqual(await within(5000, 'the woken readers', Promise.all(waits)), [true, true, true, true]);
    assert.equal(await redis(server.uri, 'HLEN', name), '5', 'mode and four readers');
    assert.deepEqual(libraryThreads(), [], 'readers hold no helper thread');

    const writer = client.rwlock(name).writeLock();
    const writing = writer.acquire({ wait: 60000 });
    await until('the writer waits, registered', async () => (await redis(server.uri, 'ZCARD', writers(name))) === '1');
    for (const r of readers.slice(1)) await r.release();
    assert.equal(await Promise.race([writing, delay(50, 'waits')]), 'waits', 'one reader is left');
    await readers[0].release();
    assert.equal(await within(5000, "the last reader's release woke the writer", writing), true);
    assert.equal(await redis(server.uri, 'HGET', name, 'mode'), 'write');
    await writer.release();
    assert.equal(await redis(server.uri, 'EXISTS', name), '0');
    assert.equal(await timeoutKeys(server.uri, name), 0);
  } finally {
    await client.close();
    await other.close();
    await server.stop();
  }
});

test('1,000 waiting readers in one loop start no thread; their aborts leave no field and no timeout key', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('rw-readers');
    const holder = client.rwlock(name).writeLock();
    assert.equal(await holder.acquire({ wait: 0, lease: 60000 }), true);
    const before = threadCount();
    const waitsBefore = client.metrics().waits;
    const ac = new AbortController();
    const waits = [];
    for (let i = 0; i < 1000; i++) {
      waits.push(client.rwlock(name).readLock().acquire({ wait: 60000, signal: ac.signal })
        .then(() => null, (err) => err));
    }
    await until('every reader waits', async () => client.metrics().waits - waitsBefore === 1000, 30000);
    assert.equal(threadCount(), before, 'waiting readers start no thread');
    assert.deepEqual(libraryThreads(), []);
    ac.abort(new Error('enough'));
    const ends = await within(30000, 'the aborted readers', Promise.all(waits));
    assert.ok(ends.every((e) => e && e.message === 'enough'), 'each rejects with the reason');
    assert.equal(await redis(server.uri, 'HLEN', name), '2', "mode and the writer's field only");
    assert.equal(await timeoutKeys(server.uri, name), 0, 'no reader left a timeout key');
    assert.equal(threadCount(), before);
    await holder.release();
    assert.equal(await redis(server.uri, 'EXISTS', name), '0');
  } finally {
    await client.close();
    await server.stop();
  }
});

test("a read hold's loss is its own: logged as a read lock's, neither the write side nor a Lock hears it", async () => {
  const server = await startRedis();
  const client = new Client(server.uri, { watchdogTimeoutMs: 1500 });
  const logs = [];
  client.on('log', (line) => logs.push(line.message));
  try {
    const name = uniqueName('rw-rlost');
    const lock = client.lock(name);
    let lockHeard = 0;
    lock.on('lost', () => { lockHeard += 1; });
    const rw = client.rwlock(name);
    assert.equal(await rw.readLock().acquire({ wait: 0 }), true);
    await redis(server.uri, 'DEL', name); // taken from under it: its renewal finds it gone
    await until('the read hold is lost', async () => rw.readLock().holdCount() === 0);
    await until('its loss is logged', async () => logs.some((l) => l.includes(`read lock '${name}'`)));
    assert.ok(!logs.some((l) => l.includes(`write lock '${name}'`)), 'not as a write lock');
    await assert.rejects(rw.readLock().release(), LockLostError);
    assert.equal(lockHeard, 0, 'the Lock of the name heard nothing');
  } finally {
    await client.close();
    await server.stop();
  }
});
