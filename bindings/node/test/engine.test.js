'use strict';
// Lock runs on the engine, driven by this thread's event loop: a waiting
// acquire is an entry in a Map, not a thread. These tests check what that
// promises: no thread per waiter, cancellation that leaves nothing held, a
// stopped server that ends a wait with an error, and exclusion between a
// Lock and a MultiLock's hold of the same name (two owners of one engine).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const redlockc = require('..');
const { serverUri, uniqueName, within } = require('./helpers.js');
const { startRedis } = require('./redis_server.js');

const { Client } = redlockc;

const threads = () => fs.readdirSync('/proc/self/task').length;

// Resolves after n timer callbacks: time for the waiters' commands to reach
// the server and come back while nothing else happens.
function ticks(n, ms = 10) {
  return new Promise((resolve) => {
    let left = n;
    const t = setInterval(() => { if (--left === 0) { clearInterval(t); resolve(); } }, ms);
  });
}

// Resolves when cond() holds, checking every 5 ms, at most ms.
async function until(what, ms, cond) {
  const end = Date.now() + ms;
  for (let i = 0; i < 100000 && Date.now() < end; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.ok(cond(), `${what}: not within ${ms} ms`);
}

test('200 acquires waiting on one lock add no thread, and all get it in turn', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('nothreads');
  const holder = client.lock(name);
  assert.equal(await holder.acquire({ wait: 0 }), true);
  const before = threads();

  let settled = 0;
  let inside = 0;
  let overlaps = 0;
  const order = [];
  const waiters = Array.from({ length: 200 }, async (_, i) => {
    const lock = client.lock(name);
    try {
      const ok = await lock.acquire({ wait: 60000 });
      settled++;
      if (!ok) return false;
      if (++inside !== 1) overlaps++;
      order.push(i);
      await new Promise(setImmediate);
      inside--;
      await lock.release();
      return true;
    } finally {
      lock.close();
    }
  });
  await until('200 acquires in flight', 10000, () => client._driver.ops.size >= 200);
  await ticks(10);
  const during = threads();
  assert.equal(settled, 0, `${settled} acquires returned while the lock was held`);
  assert.ok(during <= before,
    `threads went from ${before} to ${during} while 200 acquires waited (expected none added)`);

  await holder.release();
  const results = await within(60000, '200 hand-overs', Promise.all(waiters));
  assert.equal(results.filter(Boolean).length, 200, 'every waiter got the lock');
  assert.equal(overlaps, 0, `${overlaps} overlapping holds`);
  assert.equal(new Set(order).size, 200);
  assert.ok(threads() <= before, `threads after: ${threads()}, before: ${before}`);
  holder.close();
  await client.close();
});

test('an aborted signal ends a wait, rejecting with its reason; nothing stays held', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('abort');
  const holder = client.lock(name);
  const waiter = client.lock(name);
  const probe = client.lock(name);
  assert.equal(await holder.acquire({ wait: 0 }), true);

  // Aborted before the call: rejects at once, nothing sent.
  await assert.rejects(waiter.acquire({ signal: AbortSignal.abort() }), (e) => e.name === 'AbortError');

  // Aborted while waiting, with a reason of the caller's.
  const controller = new AbortController();
  const waiting = waiter.acquire({ signal: controller.signal }).then(() => 'returned', (e) => e);
  const others = Array.from({ length: 20 }, () => {
    const c = new AbortController();
    const l = client.lock(name);
    return { c, l, p: l.acquire({ signal: c.signal }).then(() => 'returned', (e) => e) };
  });
  await until('22 acquires in flight', 10000, () => client._driver.ops.size >= 21);
  await ticks(5);
  const reason = new Error('the caller gave up');
  controller.abort(reason);
  others.forEach(({ c }) => c.abort());
  assert.equal(await within(5000, 'the aborted wait', waiting), reason);
  for (const { l, p } of others) {
    const e = await within(5000, 'an aborted wait', p);
    assert.equal(e.name, 'AbortError', `${e}`);
    assert.equal(await l.isHeld(), false);
    l.close();
  }
  assert.equal(waiter.signal, null);
  assert.equal(await waiter.isHeld(), false);

  // The holder goes: nobody cancelled may have taken it.
  await holder.release();
  assert.equal(await probe.isLocked(), false, 'free once the holder released');
  assert.equal(await probe.acquire({ wait: 0 }), true);
  await probe.release();

  // An abort after the acquire ended changes nothing.
  const late = new AbortController();
  assert.equal(await waiter.acquire({ wait: 0, signal: late.signal }), true);
  late.abort();
  assert.equal(await waiter.isHeld(), true);
  await waiter.release();

  // withLock passes it on.
  assert.equal(await holder.acquire({ wait: 0 }), true);
  const c2 = new AbortController();
  const run = client.withLock(name, async () => 'ran', { signal: c2.signal }).then((v) => v, (e) => e);
  await ticks(3);
  c2.abort();
  assert.equal((await within(5000, 'withLock', run)).name, 'AbortError');
  await holder.release();
  assert.equal(await probe.isLocked(), false);
  [holder, waiter, probe].forEach((l) => l.close());
  await client.close();
});

test('a server stopped while acquires wait ends them with an error, within bounds', async () => {
  const server = await startRedis();
  const client = new Client(server.uri, { connect_timeout_ms: 300, io_timeout_ms: 500 });
  try {
    const name = uniqueName('stopped');
    const holder = client.lock(name);
    assert.equal(await holder.acquire({ wait: 0, lease: 60000 }), true);
    const waits = Array.from({ length: 10 }, () => {
      const l = client.lock(name);
      return l.acquire().then((held) => ({ held }), (err) => ({ err }));
    });
    await until('10 acquires in flight', 10000, () => client._driver.ops.size >= 10);
    await ticks(5);
    const stopped = Date.now();
    await server.stop('SIGKILL');
    const outcomes = await within(15000, 'the waiters, after the server stopped', Promise.all(waits));
    const took = Date.now() - stopped;
    for (const o of outcomes) {
      assert.ok(o.err instanceof redlockc.RedlockcError, `expected an error, saw ${JSON.stringify(o)}`);
      assert.ok(o.err instanceof redlockc.ConnectionError || o.err instanceof redlockc.TimeoutError ||
        o.err instanceof redlockc.NoQuorumError, `${o.err.name}: ${o.err.message}`);
    }
    console.log(`the waiters failed ${took} ms after the server stopped (${outcomes[0].err.name}: ` +
      `${outcomes[0].err.message}) (printed, not asserted)`);
  } finally {
    await client.close();
    await server.stop();
  }
});

test('a Lock and a MultiLock exclude each other on one name', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('vsblocking');
  const multi = client.multiLock([name]);
  const lock = client.lock(name);
  assert.equal(await multi.acquire({ wait: 0 }), true);
  assert.equal(await lock.acquire({ wait: 0 }), false, 'held through the multi-lock');
  const waiting = lock.acquire({ wait: 30000 });
  await until('the acquire in flight', 10000, () => client._driver.ops.size >= 1);
  await ticks(5);
  await multi.release();
  assert.equal(await within(10000, 'the engine waiter', waiting), true, 'woken by the unlock message');
  assert.equal(await multi.acquire({ wait: 0 }), false, 'held through the Lock');
  await lock.release();
  assert.equal(await multi.acquire({ wait: 0 }), true);
  await multi.release();
  multi.close();
  lock.close();
  await client.close();
});

test('a watchdog hold renewed past its lease still reports validity, never more than a lease', async () => {
  const client = new Client(serverUri(), { watchdog_timeout_ms: 300 });
  const lock = client.lock(uniqueName('validity'));
  assert.equal(await lock.acquire({ wait: 0 }), true);
  const first = lock.validity();
  assert.ok(first > 0 && first <= 300, `validity right after acquire: ${first}`);
  // Three leases later the hold lives only through renewals.
  const start = Date.now();
  const seen = [];
  while (Date.now() - start < 900) {
    await ticks(1, 25);
    seen.push(lock.validity());
  }
  assert.ok(seen.every((v) => v <= 300), `validity above the lease: ${seen}`);
  assert.ok(seen.slice(-10).some((v) => v > 0), `validity stuck at 0 after renewals: ${seen}`);
  assert.equal(await lock.isLocked(), true);
  assert.ok((await lock.ttl()) > 0);
  await lock.release();
  assert.equal(lock.validity(), 0);
  lock.close();
  await client.close();
});
