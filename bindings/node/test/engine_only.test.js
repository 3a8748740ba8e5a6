'use strict';
// A program that uses Locks and fencedSet, and nothing of the lock family,
// runs on the engine alone: every call of a Lock (queries and force release
// included) and fencedSet go through the event-loop driver, so no helper
// thread starts, no blocking client is made, and the server sees no
// connection but the engine's. Each test has a redis-server of its own, so
// the connections it counts are this client's.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
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

// "127.0.0.1:port" of each connection the server has, but the one asking.
async function serverConnections(uri) {
  const list = await redis(uri, 'CLIENT', 'LIST');
  return list.split('\n').filter((line) => line.trim() && !/ cmd=client/.test(line))
    .map((line) => /(?:^| )addr=(\S+)/.exec(line)[1]);
}

// The client's engine's open sockets, as the server names them.
function engineConnections(client) {
  return client._driver.conns.filter(Boolean).map((c) => `${c.socket.localAddress}:${c.socket.localPort}`);
}

test('every Lock call and fencedSet start no helper thread and no connection but the engine\'s', async () => {
  const server = await startRedis();
  const client = new Client(server.uri, { fencing: true });
  const logs = [];
  client.on('log', (line) => logs.push(line));
  try {
    const name = uniqueName('engine-only');
    const lock = client.lock(name);
    assert.equal(await lock.acquire({ wait: 0 }), true);
    assert.equal(await lock.tryAcquire(), true, 'reentrant');
    assert.equal(await lock.holdCount(), 2);
    assert.equal(await lock.isHeld(), true);
    assert.ok(lock.validity() > 0);
    const token = lock.fencingToken();
    await lock.extend(5000);
    await lock.extend(0);
    assert.equal(await lock.isLocked(), true);
    const ttl = await lock.ttl();
    assert.ok(ttl > 0 && ttl <= 30000, `ttl ${ttl}`);

    // a waiter (the subscriber connection) and a cancelled one
    const waiter = client.lock(name);
    const waiting = waiter.acquire({ wait: 10000 });
    const ac = new AbortController();
    const cancelled = client.lock(name).acquire({ signal: ac.signal }).then(() => null, (err) => err);
    ac.abort(new Error('stop'));
    assert.equal((await within(5000, 'the cancelled acquire', cancelled)).message, 'stop');
    await lock.release();
    await lock.release();
    assert.equal(await within(10000, 'the waiter', waiting), true);
    await waiter.release();
    waiter.close();

    assert.equal(await client.withLock(uniqueName('with'), async () => 7), 7);
    const held = await client.acquire(uniqueName('acquired'));
    await held.release();
    held.close();

    const key = uniqueName('fenced');
    assert.equal(await client.fencedSet(key, 'v1', token + 1n), true);
    assert.equal(await client.fencedSet(key, 'v0', token), false, 'a smaller token is refused');
    assert.equal(await redis(server.uri, 'GET', key), 'v1');

    const other = client.lock(name);
    assert.equal(await other.acquire({ wait: 0, lease: 60000 }), true);
    await lock.forceRelease();
    assert.equal(await lock.isLocked(), false);
    assert.equal(await lock.ttl(), -2);
    other.close();
    lock.close();
    assert.ok(client.metrics().acquires >= 5, JSON.stringify(client.metrics()));
    assert.ok(client.uuid);

    assert.deepEqual(libraryThreads(), [], 'threads of the blocking client or the helper pool');
    // Connections the engine gave up (the subscriber once no one waits) may
    // still be listed a moment: wait, bounded, for the lists to agree.
    let seen = [];
    let ours = [];
    for (let i = 0; i < 100; i++) {
      seen = await serverConnections(server.uri);
      ours = engineConnections(client);
      if (seen.every((addr) => ours.includes(addr))) break;
      await new Promise((r) => setTimeout(r, 30));
    }
    assert.ok(seen.length > 0, 'the engine is connected');
    assert.deepEqual(seen.filter((addr) => !ours.includes(addr)), [],
      `connections the server has that are not the engine's (engine: ${ours.join(', ')})`);
  } finally {
    await client.close();
    await server.stop();
  }
  assert.deepEqual(libraryThreads(), [], 'threads started by close (it frees no blocking client)');
  assert.deepEqual(logs.filter((l) => l.level === 'error'), []);
});

// As before it ran on the engine: the key is gone for every holder, this
// object's hold too, which is then lost as another owner's would be.
test("forceRelease of the caller's own hold: the hold is lost and its release rejects LockLostError", async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    const lock = client.lock(uniqueName('own-force'));
    assert.equal(await lock.acquire({ wait: 0 }), true);
    const lost = new Promise((resolve) => lock.once('lost', resolve));
    await lock.forceRelease();
    assert.ok((await within(5000, "the 'lost' event", lost)) instanceof LockLostError);
    assert.equal(await lock.isHeld(), false);
    assert.equal(await lock.isLocked(), false);
    await assert.rejects(lock.release(), LockLostError);
    lock.close();
  } finally {
    await client.close();
    await server.stop();
  }
});

test('fencedSet on a client of several nodes is refused; on a closed client it rejects ClosedError', async () => {
  const server = await startRedis();
  const many = new Client(`${server.uri},redis://127.0.0.1:1,redis://127.0.0.1:2`);
  const one = new Client(server.uri);
  try {
    await assert.rejects(many.fencedSet('k', 'v', 1), (err) => err instanceof redlockc.InvalidArgumentError &&
      /one Redis/.test(err.message));
    await assert.rejects(one.fencedSet('k', 'v', 0), redlockc.InvalidArgumentError);
  } finally {
    await many.close();
    await one.close();
  }
  await assert.rejects(one.fencedSet('k', 'v', 1), redlockc.ClosedError);
  await server.stop();
});
