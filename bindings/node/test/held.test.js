'use strict';
// "Held means held" (issue 36): what a Lock says about its own hold is the
// engine's validity at the moment of the question. A fixed lease that ran
// out, or a watchdog hold that was not renewed in time because the event
// loop was blocked, is not held, on the first look, before any timer ran;
// its signal aborts and 'lost' is emitted for fixed leases too. validity()
// of a healthy hold never dips towards 0 between renewals. A grant already
// on the socket is not a timeout because the loop ran its timers first.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const redlockc = require('..');
const { serverUri, uniqueName, within } = require('./helpers.js');

const { Client, LockLostError, NotOwnerError } = redlockc;

// Resolves with the Lock's next 'lost' error (await it within a bound).
const nextLost = (lock) => new Promise((resolve) => lock.once('lost', resolve));

// Resolves when signal aborts.
const aborted = (signal) => new Promise((resolve) => {
  if (signal.aborted) resolve();
  else signal.addEventListener('abort', resolve, { once: true });
});

// Keeps the event loop (this whole thread) busy for ms: no timer, no socket
// read runs meanwhile. Bounded in time and in count.
function blockLoop(ms) {
  const until = performance.now() + ms;
  for (let i = 0; i < 1e10 && performance.now() < until; i++);
}

// Another process takes `name` (waiting up to 5 s, then holding it for a
// fixed 10 s) while this one's event loop waits for it: execFileSync blocks.
function takeInAnotherProcess(name) {
  const code = `
    const { Client } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
    (async () => {
      const c = new Client(${JSON.stringify(serverUri())});
      const l = c.lock(${JSON.stringify(name)});
      const ok = await l.acquire({ wait: 5000, lease: 10000 });
      process.stdout.write(String(ok));
      l.close();
      await c.close();
    })().catch((e) => { process.stdout.write(String(e)); process.exitCode = 1; });`;
  return execFileSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: 20000 });
}

test('a fixed lease that ran out while another owner took the lock is not held', async () => {
  const client = new Client(serverUri(), { fencing: true });
  const rival = new Client(serverUri());
  const name = uniqueName('fixed-ended');
  const lock = client.lock(name);
  const other = rival.lock(name);
  try {
    assert.equal(await lock.acquire({ wait: 0, lease: 1000 }), true);
    assert.equal(await other.acquire({ wait: 5000 }), true, 'the rival gets it once the lease ends');
    assert.equal(await lock.isHeld(), false, 'isHeld() after the lease ended');
    assert.equal(await lock.holdCount(), 0, 'holdCount() after the lease ended');
    assert.equal(lock.validity(), 0, 'validity() after the lease ended');
    assert.throws(() => lock.fencingToken(), (err) => err instanceof LockLostError || err instanceof NotOwnerError,
      'fencingToken() after the lease ended');
    await other.release();
  } finally {
    lock.close();
    other.close();
    await Promise.all([client.close(), rival.close()]);
  }
});

test('a fixed lease that ran out during synchronous work is not held on the first look', async () => {
  const client = new Client(serverUri(), { fencing: true });
  const name = uniqueName('fixed-blocked');
  const lock = client.lock(name);
  try {
    assert.equal(await lock.acquire({ wait: 0, lease: 1000 }), true);
    const lost = nextLost(lock);
    blockLoop(1500); // 1.5 s of work that never yields: no timer runs
    assert.equal(takeInAnotherProcess(name), 'true', 'another process takes the lock');
    const held = lock.isHeld();
    const count = lock.holdCount();
    assert.equal(await held, false, 'isHeld() on the first look after the lease ended');
    assert.equal(await count, 0, 'holdCount() on the first look');
    assert.equal(lock.validity(), 0);
    assert.throws(() => lock.fencingToken(), LockLostError);
    const err = await within(3000, "the 'lost' event", lost);
    assert.ok(err instanceof LockLostError, `'lost' event: ${err}`);
    assert.equal(lock.signal.aborted, true);
  } finally {
    lock.close();
    await client.close();
  }
});

test("a fixed lease that runs out aborts the lock's signal and emits 'lost'", async () => {
  const client = new Client(serverUri());
  const rival = new Client(serverUri());
  const name = uniqueName('fixed-lost');
  const lock = client.lock(name);
  const other = rival.lock(name);
  try {
    assert.equal(await lock.acquire({ wait: 0, lease: 1000 }), true);
    const lost = nextLost(lock);
    const { signal } = lock;
    assert.equal(signal.aborted, false);
    assert.equal(await other.acquire({ wait: 5000 }), true);
    const err = await within(3000, "the 'lost' event of a fixed lease", lost);
    assert.ok(err instanceof LockLostError, `'lost' event: ${err}`);
    assert.equal(signal.aborted, true, 'the signal of the ended hold');
    assert.ok(signal.reason instanceof LockLostError, `signal.reason: ${signal.reason}`);
    await other.release();
  } finally {
    lock.close();
    other.close();
    await Promise.all([client.close(), rival.close()]);
  }
});

test("withLock's signal aborts when its fixed lease runs out", async () => {
  const client = new Client(serverUri());
  const rival = new Client(serverUri());
  const name = uniqueName('fixed-with');
  const other = rival.lock(name);
  try {
    const run = client.withLock(name, async (signal) => {
      assert.equal(await other.acquire({ wait: 5000 }), true);
      await within(3000, "withLock's signal", aborted(signal));
      assert.ok(signal.reason instanceof LockLostError, `signal.reason: ${signal.reason}`);
      return 'body ended';
    }, { wait: 0, lease: 1000 });
    await assert.rejects(run, (err) => err instanceof LockLostError,
      'withLock must say the section was not protected to its end');
    await other.release();
  } finally {
    other.close();
    await Promise.all([client.close(), rival.close()]);
  }
});

test('after the loop was blocked past a watchdog lease, the first synchronous look says not held', async () => {
  const client = new Client(serverUri(), { watchdog_timeout_ms: 600, fencing: true });
  const name = uniqueName('blocked');
  const lock = client.lock(name);
  try {
    assert.equal(await lock.acquire({ wait: 0 }), true);
    const lost = nextLost(lock);
    blockLoop(900); // no renewal runs: the 600 ms lease ends on the server
    assert.equal(takeInAnotherProcess(name), 'true', 'another process takes the lock');
    // The first look, before any timer or socket read of this loop ran:
    const held = lock.isHeld();
    const count = lock.holdCount();
    const validity = lock.validity();
    let token = null;
    try {
      token = lock.fencingToken();
    } catch (err) {
      token = err;
    }
    assert.equal(await held, false, 'isHeld() on the first look after the blocked loop');
    assert.equal(await count, 0, 'holdCount() on the first look');
    assert.equal(validity, 0, 'validity() on the first look');
    assert.ok(token instanceof LockLostError || token instanceof NotOwnerError,
      `fencingToken() on the first look: ${token}`);
    const err = await within(3000, "the 'lost' event", lost);
    assert.ok(err instanceof LockLostError, `'lost' event: ${err}`);
  } finally {
    lock.close();
    await client.close();
  }
});

test("validity() of a healthy watchdog hold stays high across many renewals (the engine's figure)", async () => {
  const LEASE = 900; // renewed every 300 ms: at least 600 ms left, less a round trip
  const client = new Client(serverUri(), { watchdog_timeout_ms: LEASE });
  const lock = client.lock(uniqueName('validity'));
  try {
    assert.equal(await lock.acquire({ wait: 0 }), true);
    const before = client.metrics().renewals;
    const samples = [];
    // 5 ms apart until 8 renewals (one every LEASE/3), at most 10 s.
    const end = Date.now() + 10000;
    for (let i = 0; i < 2000 && Date.now() < end && client.metrics().renewals < before + 8; i++) {
      samples.push(lock.validity());
      await new Promise((r) => setTimeout(r, 5));
    }
    const renewals = client.metrics().renewals - before;
    assert.ok(renewals >= 8, `only ${renewals} renewals within 10 s`);
    const low = Math.min(...samples);
    assert.ok(low >= LEASE / 3,
      `validity() fell to ${low} ms over ${renewals} renewals (${samples.length} samples); ` +
      `a hold renewed every ${LEASE / 3} ms is valid for more than ${LEASE / 3}`);
    assert.ok(Math.max(...samples) <= LEASE, `validity() above the lease: ${Math.max(...samples)}`);
    await lock.release();
  } finally {
    lock.close();
    await client.close();
  }
});

test('a grant waiting on the socket while the loop was blocked past io_timeout_ms is a grant', async () => {
  const client = new Client(serverUri(), { io_timeout_ms: 300 });
  const warm = client.lock(uniqueName('warm'));
  const lock = client.lock(uniqueName('late-read'));
  try {
    // Connected, scripts loaded: the next acquire is written in one pump.
    assert.equal(await warm.acquire({ wait: 0 }), true);
    await warm.release();
    const taking = lock.acquire({ wait: 0 });
    // The driver writes in the setImmediate queued by acquire(); this one
    // runs right after it, and blocks while the server answers at once.
    await new Promise(setImmediate);
    blockLoop(900);
    assert.equal(await within(5000, 'the acquire', taking), true, 'the acquire the server granted');
    assert.equal(await lock.isHeld(), true);
    await lock.release();
  } finally {
    warm.close();
    lock.close();
    await client.close();
  }
});
