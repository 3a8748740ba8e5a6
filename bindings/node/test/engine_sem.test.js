'use strict';
// Semaphores and the multi-name lock run on the event-loop driver as a Lock
// does: a Semaphore's or a PermitExpirableSemaphore's acquire is an engine
// acquire of permits (RLC_KIND_SEMAPHORE, RLC_KIND_PSEMAPHORE), in
// Redisson's layout (the count at the name's key, the expirable kind's
// zset {name}:timeout, the channel redisson_sc:{name}); a MultiLock one
// engine acquire over all its names. They start no helper thread, make no
// blocking client and open no connection but the engine's; a waiter is a
// Map entry, not a thread; its AbortSignal cancels the wait in the engine,
// which undoes whatever a try took. Each test has a redis-server of its own,
// so the connections and keys it counts are this client's.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { setMaxListeners } = require('node:events');
const { setTimeout: delay } = require('node:timers/promises');
const redlockc = require('..');
const { uniqueName, within, redis } = require('./helpers.js');
const { startRedis } = require('./redis_server.js');

const { Client, LockLostError } = redlockc;

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

// Subscribers of the semaphore's channel (an integer reply: helpers.redis reads no arrays).
const listeners = async (uri, name) => Number(await redis(uri, 'EVAL',
  "return redis.call('pubsub', 'numsub', KEYS[1])[2]", 1, `redisson_sc:{${name}}`));

// The try records (redlockc_attempt:{name}:<id>) with no expiry, and all of them.
async function records(uri) {
  const text = await redis(uri, 'EVAL',
    "local n, all = 0, redis.call('keys', 'redlockc_attempt:*') " +
    "for _, k in ipairs(all) do if redis.call('pttl', k) < 0 then n = n + 1 end end " +
    "return n .. ' ' .. #all", 0);
  const [forever, all] = text.split(' ').map(Number);
  return { forever, all };
}

// Resolves once check() is true; bounded (count and time), polled every 20 ms.
async function until(what, check, ms = 10000) {
  const end = Date.now() + ms;
  for (let i = 0; i < ms / 20 + 2 && Date.now() <= end; i++) {
    if (await check()) return;
    await delay(20);
  }
  assert.fail(`${what}: not seen within ${ms} ms`);
}

// Every connection the server has is the engine's (bounded: a connection
// closed a moment ago may still be listed).
async function onlyEngineConnections(uri, client) {
  let seen = [];
  let ours = [];
  for (let i = 0; i < 100; i++) {
    seen = await serverConnections(uri);
    ours = engineConnections(client);
    if (seen.every((addr) => ours.includes(addr))) break;
    await delay(30);
  }
  assert.ok(seen.length > 0, 'the engine is connected');
  assert.deepEqual(seen.filter((addr) => !ours.includes(addr)), [],
    `connections the server has that are not the engine's (engine: ${ours.join(', ')})`);
}

test("semaphores and a multi-lock start no helper thread and no connection but the engine's", async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('sem-engine');
    const sem = await client.semaphore(name, 2);
    assert.equal(await redis(server.uri, 'GET', name), '2', "Redisson's count at the name's key");
    assert.equal(await sem.trySetPermits(5), false, 'set only if unset');
    assert.equal(await sem.acquire({ permits: 2, wait: 0 }), true);
    assert.equal(await sem.available(), 0);
    assert.equal(await sem.tryAcquire(), false);
    await sem.release(2);
    assert.equal(await sem.available(), 2);

    const pname = uniqueName('psem-engine');
    const psem = await client.permitSemaphore(pname, 1);
    const id = await psem.acquire({ wait: 0, lease: 30000 });
    assert.match(id, /^[0-9a-f]{32}$/);
    assert.equal(await redis(server.uri, 'ZCARD', `{${pname}}:timeout`), '1', 'one member per permit taken');
    await psem.release(id);
    assert.equal(await psem.available(), 1);

    const multi = client.multiLock([`${name}-b`, `${name}-a`, `${name}-b`]);
    assert.deepEqual(multi.names, [`${name}-a`, `${name}-b`]);
    assert.equal(multi.size, 2);
    assert.equal(await multi.acquire({ wait: 0 }), true);
    assert.equal(await redis(server.uri, 'HGET', `${name}-a`, `${client.uuid}:${multi.owner}`), '1',
      "each name a Lock's hash with the engine's UUID and the multi-lock's owner");
    assert.equal(await client.lock(`${name}-a`).tryAcquire(), false, 'another owner is kept out');
    await multi.release();
    assert.equal(await redis(server.uri, 'EXISTS', `${name}-a`, `${name}-b`), '0');

    assert.deepEqual(libraryThreads(), [], 'threads of a blocking client or a helper pool');
    await onlyEngineConnections(server.uri, client);
    for (const h of [sem, psem, multi]) h.close();
  } finally {
    await client.close();
    await server.stop();
  }
  assert.deepEqual(libraryThreads(), [], 'threads started by close (it frees no blocking client)');
});

test('waiting semaphore acquires are each woken by a release, and never more are in than the count', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('sem-wake');
    const sem = await client.semaphore(name, 2);
    assert.equal(await sem.acquire({ permits: 2, wait: 0 }), true); // none free
    let released = 0;
    let granted = 0;
    const overrun = [];
    const waiters = [];
    for (let i = 0; i < 4; i++) {
      const s = await client.semaphore(name);
      waiters.push(s.acquire({ wait: 60000 }).then((ok) => {
        granted += 1;
        if (granted > released) overrun.push(`grant ${granted} after ${released} releases`);
        return ok;
      }, (err) => err));
    }
    await until('the waiters listen', async () => (await listeners(server.uri, name)) >= 1);
    assert.deepEqual(libraryThreads(), [], 'waiters hold no helper thread');
    assert.equal(granted, 0);

    for (let k = 1; k <= 4; k++) {
      released += 1;
      await sem.release();
      await until(`waiter ${k}, woken by release ${k}`, () => granted === k, 5000);
      assert.equal(await redis(server.uri, 'GET', name), '0', 'each permit given back is taken at once');
    }
    assert.deepEqual(await within(5000, 'the waiters', Promise.all(waiters)), [true, true, true, true]);
    assert.deepEqual(overrun, [], 'no waiter got in without a permit free');
    await sem.release(2);
    assert.equal(await sem.available(), 2);
    assert.deepEqual(libraryThreads(), []);
  } finally {
    await client.close();
    await server.stop();
  }
});

test('an aborted semaphore waiter keeps nothing: the count is back, its try left only a tombstone', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    for (const kind of ['plain', 'expirable']) {
      const name = uniqueName(`sem-abort-${kind}`);
      const make = kind === 'plain' ? client.semaphore.bind(client) : client.permitSemaphore.bind(client);
      const take = (s, opts) => s.acquire(kind === 'plain' ? opts : { lease: 60000, ...opts });
      const holder = await make(name, 1);
      const held = await take(holder, { wait: 0 });
      assert.ok(held, 'the holder has the one permit');
      const ac = new AbortController();
      const waiter = await make(name);
      const aborted = take(waiter, { wait: 60000, signal: ac.signal }).then(() => null, (err) => err);
      await until(`the ${kind} waiter listens`, async () => (await listeners(server.uri, name)) === 1);
      assert.deepEqual(libraryThreads(), [], 'a waiter holds no helper thread');

      ac.abort(new Error('stop'));
      assert.equal((await within(5000, 'the aborted acquire', aborted)).message, 'stop');
      await until('the waiter stopped listening', async () => (await listeners(server.uri, name)) === 0);
      assert.equal(await redis(server.uri, 'GET', name), '0', 'the aborted waiter took nothing');
      if (kind === 'expirable') {
        assert.equal(await redis(server.uri, 'ZCARD', `{${name}}:timeout`), '1', "only the holder's permit is out");
        await holder.release(held);
      } else {
        await holder.release();
      }
      assert.equal(await holder.available(), 1, 'the count is back');
      const { forever, all } = await records(server.uri);
      assert.ok(all > 0, 'the tries wrote records');
      assert.equal(forever, 0, `try records without an expiry (of ${all}): only tombstones with a TTL stay`);
    }
  } finally {
    await client.close();
    await server.stop();
  }
});

test('an expirable permit is released by its id; a second release of it is lost', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('psem-id');
    const psem = await client.permitSemaphore(name, 3);
    const a = await psem.acquire({ permits: 2, wait: 0, lease: 60000 });
    const b = await psem.acquire({ wait: 0, lease: 60000 });
    assert.match(a, /^[0-9a-f]{32}$/);
    assert.match(b, /^[0-9a-f]{32}$/);
    assert.notEqual(a, b);
    assert.equal(await psem.acquire({ wait: 0, lease: 60000 }), null, 'none free');
    assert.equal(await redis(server.uri, 'ZCARD', `{${name}}:timeout`), '3', 'one member per permit taken');
    await psem.release(a);
    assert.equal(await psem.available(), 2, 'both permits of the grant are back');
    assert.equal(await redis(server.uri, 'ZCARD', `{${name}}:timeout`), '1');
    await assert.rejects(psem.release(a), (e) => e instanceof LockLostError && e.message.includes(name),
      'the id went back already');
    assert.equal(await psem.available(), 2, 'a lost release gives nothing back');
    await psem.release(b);
    assert.equal(await psem.available(), 3);
    assert.equal(await redis(server.uri, 'ZCARD', `{${name}}:timeout`), '0');
    assert.deepEqual(libraryThreads(), [], 'no helper thread, no blocking client');
  } finally {
    await client.close();
    await server.stop();
  }
});

test('1,000 waiting semaphore acquires in one loop start no thread; one release of 1,000 lets them in', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const name = uniqueName('sem-many');
    const sem = await client.semaphore(name, 1);
    assert.equal(await sem.acquire({ wait: 0 }), true); // none free
    const before = threadCount();
    const waits = [];
    for (let i = 0; i < 1000; i++) waits.push(sem.acquire({ wait: 120000 }).catch((err) => err));
    await until('the waiters listen', async () => (await listeners(server.uri, name)) >= 1);
    assert.equal(client._driver.ops.size, 1000, "each waiter is an operation of the client's engine");
    assert.equal(threadCount(), before, 'waiting acquires start no thread');
    assert.deepEqual(libraryThreads(), []);
    assert.equal(await redis(server.uri, 'GET', name), '0');
    await sem.release(1000);
    const ends = await within(60000, 'the 1,000 waiters', Promise.all(waits));
    assert.ok(ends.every((ok) => ok === true), 'each got its permit');
    assert.equal(await redis(server.uri, 'GET', name), '0');
    assert.equal(threadCount(), before);
    await sem.release(1000);
    assert.equal(await sem.available(), 1000);
  } finally {
    await client.close();
    await server.stop();
  }
});
