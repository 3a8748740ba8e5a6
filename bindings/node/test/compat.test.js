'use strict';
// redlockc/compat: node-redlock's API on the classic format, checked against
// node-redlock v5's documented behaviour (its README and source) on the
// suite's real redis-server, and against node-redlock itself (from the npm
// registry, installed into a temporary directory by this file) contending
// on the same resources.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const compat = require('../compat.js');
const { LockLostError } = require('..');
const { serverUri, uniqueName, redis } = require('./helpers.js');

const { Redlock, ResourceLockedError, ExecutionError } = compat;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('the package exports it as redlockc/compat, also as node-redlock\'s default export', () => {
  const pkg = require('../package.json');
  assert.equal(pkg.exports['./compat'].require.default, './compat.js');
  assert.ok(pkg.files.includes('compat.js'));
  assert.equal(compat.default, Redlock);
});

test('acquire, extend and release one resource: the key holds lock.value for the duration', async () => {
  const uri = serverUri();
  const redlock = new Redlock([uri]);
  const name = uniqueName('rl-one');
  try {
    const before = Date.now();
    let lock = await redlock.acquire([name], 10000);
    assert.deepEqual(lock.resources, [name]);
    assert.equal(await redis(uri, 'GET', name), lock.value, 'the key holds the lock value');
    assert.match(lock.value, /^[0-9a-f-]{36}:[0-9a-f]+$/);
    assert.ok(Math.abs(Number(await redis(uri, 'PTTL', name)) - 10000) < 1000, 'PTTL is about the duration');
    assert.ok(lock.expiration > before && lock.expiration <= Date.now() + 10000, `expiration ${lock.expiration - Date.now()} ms ahead`);
    const old = lock;
    lock = await lock.extend(30000);
    assert.equal(old.expiration, 0, 'the extended lock is spent');
    assert.equal(lock.value, old.value);
    assert.equal(await redis(uri, 'GET', name), lock.value);
    assert.ok(Number(await redis(uri, 'PTTL', name)) > 20000, 'PTTL is about the new duration');
    await lock.release();
    assert.equal(lock.expiration, 0);
    assert.equal(await redis(uri, 'GET', name), null, 'released: no key');
  } finally {
    await redlock.quit();
  }
});

test('a held resource refuses a second acquire: ExecutionError after retryCount + 1 attempts of ResourceLockedError', async () => {
  const uri = serverUri();
  const redlock = new Redlock([uri], { retryCount: 3, retryDelay: 20, retryJitter: 5 });
  const name = uniqueName('rl-excl');
  const errors = [];
  redlock.on('error', (e) => errors.push(e));
  try {
    await assert.rejects(redlock.acquire([name], 1000.5), { message: 'Duration must be an integer value in milliseconds.' });
    const lock = await redlock.acquire([name], 10000);
    const err = await redlock.acquire([name], 10000).then(() => null, (e) => e);
    assert.ok(err instanceof ExecutionError, `an ExecutionError, got ${err}`);
    assert.equal(err.message, 'The operation was unable to achieve a quorum during its retry window.');
    assert.equal(err.attempts.length, 4, 'retryCount 3: four attempts');
    for (const stats of await Promise.all(err.attempts)) {
      assert.equal(stats.membershipSize, 1);
      assert.equal(stats.quorumSize, 1);
      assert.equal(stats.votesAgainst.size, 1);
      for (const v of stats.votesAgainst.values()) assert.ok(v instanceof ResourceLockedError);
    }
    assert.ok(errors.length >= 4 && errors.every((e) => e instanceof ResourceLockedError), 'an error event per vote against');
    assert.equal(await redis(uri, 'GET', name), lock.value, 'the holder keeps it');
    await lock.release();
    await assert.rejects(lock.release(), ExecutionError, 'a second release fails');
    await assert.rejects(lock.extend(1000), { message: 'Cannot extend an already-expired lock.' });
  } finally {
    await redlock.quit();
  }
});

test('several resources are one lock: one value on each, and an overlapping lock takes none', async () => {
  const uri = serverUri();
  const redlock = new Redlock([uri], { retryCount: 1, retryDelay: 20 });
  const [a, b, c] = ['a', 'b', 'c'].map((x) => uniqueName(`rl-multi-${x}`));
  try {
    let lock = await redlock.acquire([a, b], 10000);
    assert.equal(await redis(uri, 'GET', a), lock.value);
    assert.equal(await redis(uri, 'GET', b), lock.value);
    await assert.rejects(redlock.acquire([b, c], 10000), ExecutionError);
    assert.equal(await redis(uri, 'GET', c), null, 'the free resource of a refused lock stays free');
    lock = await lock.extend(20000);
    assert.ok(Number(await redis(uri, 'PTTL', a)) > 15000 && Number(await redis(uri, 'PTTL', b)) > 15000, 'both extended');
    await lock.release();
    assert.deepEqual([await redis(uri, 'GET', a), await redis(uri, 'GET', b)], [null, null]);
  } finally {
    await redlock.quit();
  }
});

test('using() extends the lock while the routine runs and releases it after', async () => {
  const uri = serverUri();
  const redlock = new Redlock([uri]);
  const name = uniqueName('rl-using');
  try {
    await assert.rejects(redlock.using([name], 500, async () => 1),
      { message: 'A lock `duration` must be at least 100ms greater than the `automaticExtensionThreshold` setting.' });
    const seen = await redlock.using([name], 500, { automaticExtensionThreshold: 200 }, async (signal) => {
      const value = await redis(uri, 'GET', name);
      await sleep(900); // past the duration: only extensions keep it
      return { value, after: await redis(uri, 'GET', name), aborted: signal.aborted, error: signal.error };
    });
    assert.equal(typeof seen.value, 'string');
    assert.equal(seen.after, seen.value, 'still held, by the same value, after the duration');
    assert.equal(seen.aborted, false);
    assert.equal(seen.error, undefined);
    assert.equal(await redis(uri, 'GET', name), null, 'released after the routine');
  } finally {
    await redlock.quit();
  }
});

test('using(): a lock deleted behind its back aborts the signal, with the error', async () => {
  const uri = serverUri();
  const redlock = new Redlock([uri]);
  const name = uniqueName('rl-lost');
  try {
    let seen;
    const run = redlock.using([name], 1000, { automaticExtensionThreshold: 500 }, async (signal) => {
      await redis(uri, 'DEL', name);
      for (let i = 0; i < 100 && !signal.aborted; i++) await sleep(50); // 5 s at most
      seen = { aborted: signal.aborted, error: signal.error, reason: signal.reason };
    });
    // The release after the routine finds the lock gone, as node-redlock's does.
    await assert.rejects(run, ExecutionError);
    assert.equal(seen.aborted, true, 'the signal aborted when the key was deleted');
    assert.ok(seen.error instanceof Error && seen.reason === seen.error, `signal.error is its reason: ${seen.error}`);
    await redlock.using([name], 1000, { automaticExtensionThreshold: 500 }, async () => 0); // free again
    const run2 = redlock.using([name], 1000, { automaticExtensionThreshold: 500 }, async (signal) => {
      await redis(uri, 'SET', name, 'someone-else', 'PX', '10000');
      for (let i = 0; i < 100 && !signal.aborted; i++) await sleep(50);
      seen = { aborted: signal.aborted, error: signal.error };
    });
    await assert.rejects(run2, ExecutionError);
    assert.equal(seen.aborted, true, 'the signal aborted when the key was taken');
    assert.ok(seen.error instanceof ExecutionError || seen.error instanceof LockLostError, `its error: ${seen.error}`);
    assert.equal(await redis(uri, 'GET', name), 'someone-else', 'the other holder\'s key is left alone');
    await redis(uri, 'DEL', name);
  } finally {
    await redlock.quit();
  }
});

// ---- against node-redlock itself --------------------------------------------

// node-redlock v5 and ioredis from the npm registry, into a temporary
// directory (v5 is published as prereleases only: pinned).
function installNodeRedlock() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rlc-node-redlock-'));
  execFileSync('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', '--no-save', '--loglevel=error',
    'redlock@5.0.0-beta2', 'ioredis@^5'], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 180000 });
  const need = (m) => require(require.resolve(m, { paths: [dir] }));
  return { dir, NodeRedlock: need('redlock').default, IORedis: need('ioredis').default || need('ioredis') };
}

test('node-redlock and this class contend on the same resources without overlap', { timeout: 240000 }, async () => {
  const uri = serverUri();
  const { dir, NodeRedlock, IORedis } = installNodeRedlock();
  const { hostname, port } = new URL(uri);
  const ioredis = new IORedis({ host: hostname, port: Number(port), lazyConnect: false });
  // Ours is made from the same ioredis instance: its host and port are read.
  const ours = new Redlock([ioredis], { retryCount: -1 });
  const theirs = new NodeRedlock([ioredis], { retryCount: -1, retryDelay: 20, retryJitter: 10 });
  const names = [uniqueName('rl-both-a'), uniqueName('rl-both-b')];
  let inside = 0;
  let overlaps = 0;
  const turns = { ours: 0, theirs: 0 };
  const worker = async (who, redlock, rounds, resources) => {
    for (let i = 0; i < rounds; i++) {
      const lock = await redlock.acquire(resources, 5000);
      if (++inside !== 1) overlaps++;
      assert.equal(await ioredis.get(resources[0]), lock.value, `${who}: the key holds its value`);
      await sleep(2);
      inside--;
      turns[who]++;
      await lock.release();
    }
  };
  try {
    const deadline = Date.now() + 120000;
    await Promise.all([
      worker('ours', ours, 25, names), worker('ours', ours, 25, [names[0]]),
      worker('theirs', theirs, 25, names), worker('theirs', theirs, 25, [names[0]]),
    ]);
    assert.ok(Date.now() < deadline, 'within the bound');
    assert.equal(overlaps, 0, 'never two holders at once');
    assert.deepEqual(turns, { ours: 50, theirs: 50 }, 'each side\'s release let the other in');
    assert.deepEqual([await ioredis.exists(names[0]), await ioredis.exists(names[1])], [0, 0], 'no key left');
  } finally {
    await ours.quit();
    ioredis.disconnect();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
