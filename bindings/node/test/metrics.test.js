'use strict';
// client.metrics() counts what the test does, as the engine counts it
// (rlc_engine_metrics: renewals, script reloads, waits that found the lock
// busy, a lost hold once); 'log' events carry the library's log lines (a
// reconnect here), and nothing is logged without a listener.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { Client, LockLostError } = require('..');
const { serverUri, uniqueName, within } = require('./helpers.js');

// Resolves once check() is true, polling every 10 ms; rejects after ms with
// what was last seen (a bound, not a wait).
async function until(ms, what, check, seen = () => '') {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms (saw ${seen()})`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

// A raw command to the test server (CLIENT KILL), over a plain socket.
function raw(uri, ...args) {
  const { hostname, port } = new URL(uri);
  const body = `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(port), hostname, () => s.write(body));
    s.once('data', (d) => { s.end(); resolve(d.toString()); });
    s.once('error', reject);
  });
}

test('metrics count acquires, busy and waits', async () => {
  const a = new Client(serverUri());
  const b = new Client(serverUri());
  const name = uniqueName('metrics');
  const mine = a.lock(name);
  const other = b.lock(name);
  assert.equal(await mine.acquire(), true);
  assert.equal(await other.acquire({ wait: 0 }), false);
  assert.equal(await other.acquire({ wait: 50 }), false);
  await mine.release();
  const ma = a.metrics();
  const mb = b.metrics();
  assert.equal(ma.acquires, 1, JSON.stringify(ma));
  assert.equal(mb.busy, 2, JSON.stringify(mb));
  assert.equal(mb.waits, 1, 'the 50 ms acquire waited');
  assert.equal(mb.waitBuckets.at(-1).le, Infinity);
  assert.equal(mb.waitBuckets.at(-1).count, 1);
  mine.close(); other.close();
  await a.close(); await b.close();
});

test("'log' events see a reconnect", async () => {
  const c = new Client(serverUri());
  const lines = [];
  c.on('log', (line) => lines.push(line));
  const lock = c.lock(uniqueName('reconnect'));
  assert.equal(await lock.acquire(), true);
  await lock.release();
  await raw(serverUri(), 'CLIENT', 'KILL', 'TYPE', 'normal');
  assert.equal(await lock.acquire(), true);
  await lock.release();
  await within(3000, 'a log line', (async () => {
    for (let i = 0; i < 300 && !lines.some((l) => /reconnecting/.test(l.message)); i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
  })());
  const line = lines.find((l) => /reconnecting/.test(l.message));
  assert.ok(line, `a reconnect line: ${JSON.stringify(lines)}`);
  assert.equal(line.level, 'info');
  assert.equal(c.metrics().reconnects, 1);
  lock.close();
  await c.close();
});

test('a watchdog hold counts its renewals', async () => {
  const c = new Client(serverUri(), { watchdog_timeout_ms: 300 });
  const lock = c.lock(uniqueName('renewals'));
  assert.equal(await lock.acquire({ wait: 0 }), true);
  const before = c.metrics().renewals;
  // renewed every 100 ms (a third of the lease): 3 rounds take about 300 ms
  await until(3000, 'three renewals', () => c.metrics().renewals >= before + 3,
    () => JSON.stringify(c.metrics()));
  assert.equal(await lock.isHeld(), true);
  await lock.release();
  assert.equal(c.metrics().lost, 0);
  lock.close();
  await c.close();
});

test('after SCRIPT FLUSH the next acquire counts a script reload', async () => {
  const c = new Client(serverUri());
  const lock = c.lock(uniqueName('noscript'));
  // the first acquire and release leave their scripts loaded on the server
  assert.equal(await lock.acquire({ wait: 0 }), true);
  await lock.release();
  const before = c.metrics().scriptReloads;
  assert.match(await raw(serverUri(), 'SCRIPT', 'FLUSH'), /^\+OK/);
  assert.equal(await lock.acquire({ wait: 0 }), true, 'the acquire is sent again as EVAL');
  const after = c.metrics().scriptReloads;
  assert.ok(after > before, `scriptReloads ${before} before SCRIPT FLUSH, ${after} after the acquire`);
  await lock.release();
  lock.close();
  await c.close();
});

test('an acquire that found the lock busy and waited counts one wait, with its time', async () => {
  const a = new Client(serverUri());
  const b = new Client(serverUri());
  const name = uniqueName('waited');
  const mine = a.lock(name);
  const holder = b.lock(name);
  assert.equal(await holder.acquire({ wait: 0 }), true);

  // a try without a wait: busy, not a wait
  assert.equal(await mine.tryAcquire(), false);
  let m = a.metrics();
  assert.equal(m.busy, 1, JSON.stringify(m));
  assert.equal(m.waits, 0, `a try with no wait is not a wait: ${JSON.stringify(m)}`);
  assert.equal(m.waitMsSum, 0);

  // The first acquire of this client that gets the lock, after waiting for
  // the holder's release 180 ms after it began.
  const waiting = mine.acquire({ wait: 5000 });
  const released = new Promise((resolve, reject) => {
    setTimeout(() => holder.release().then(resolve, reject), 180);
  });
  assert.equal(await waiting, true);
  await released;
  m = a.metrics();
  assert.equal(m.acquires, 1, JSON.stringify(m));
  assert.equal(m.busy, 1, JSON.stringify(m));
  assert.equal(m.waits, 1, `one acquire waited: ${JSON.stringify(m)}`);
  assert.ok(m.waitMsSum >= 150, `the wait lasted until the release, 180 ms: waitMsSum ${m.waitMsSum}`);
  // cumulative: the one wait is in every bucket whose bound it does not exceed
  for (const bucket of m.waitBuckets) {
    assert.equal(bucket.count, bucket.le >= m.waitMsSum ? 1 : 0,
      `a ${m.waitMsSum} ms wait in ${JSON.stringify(m.waitBuckets)}`);
  }
  assert.equal(b.metrics().waits, 0, JSON.stringify(b.metrics()));

  await mine.release();
  mine.close(); holder.close();
  await a.close(); await b.close();
});

test('a fixed-lease hold that its release finds gone counts as lost', async () => {
  const c = new Client(serverUri());
  const other = new Client(serverUri());
  const name = uniqueName('lostrelease');
  const lock = c.lock(name);
  // not renewed, so nothing but the release looks at it
  assert.equal(await lock.acquire({ wait: 0, lease: 30000 }), true);
  const thief = other.lock(name);
  await thief.forceRelease();
  await assert.rejects(lock.release(), LockLostError);
  const m = c.metrics();
  assert.equal(m.lost, 1, JSON.stringify(m));
  lock.close(); thief.close();
  await c.close(); await other.close();
});

test('a lost hold counts once, though the loss and the release both find it gone', async () => {
  const c = new Client(serverUri(), { watchdog_timeout_ms: 300 });
  const other = new Client(serverUri());
  const name = uniqueName('lostonce');
  const lock = c.lock(name);
  assert.equal(await lock.acquire({ wait: 0 }), true);
  const lost = new Promise((resolve) => lock.once('lost', resolve));
  const thief = other.lock(name);
  await thief.forceRelease();
  assert.ok((await within(3000, "the 'lost' event", lost)) instanceof LockLostError);
  await assert.rejects(lock.release(), LockLostError);
  const m = c.metrics();
  assert.equal(m.lost, 1, JSON.stringify(m));
  lock.close(); thief.close();
  await c.close(); await other.close();
});
