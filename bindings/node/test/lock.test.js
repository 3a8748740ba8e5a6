'use strict';
// Behaviours of the Node binding against a real redis-server.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const v8 = require('node:v8');
const vm = require('node:vm');
const { setTimeout: delay } = require('node:timers/promises');
const redlockc = require('..');
const { serverUri, uniqueName, within } = require('./helpers.js');

const { Client } = redlockc;

test('two Lock objects exclude each other; one Lock object is reentrant', async () => {
  const client = new Client(serverUri(), { fencing: true });
  const name = uniqueName('excl');
  const a = client.lock(name);
  const b = client.lock(name);
  assert.equal(await a.acquire({ wait: 0 }), true);
  assert.equal(await b.tryAcquire(), false, 'b must not get a lock a holds');
  assert.equal(await a.acquire({ wait: 0 }), true, 'the same owner again: reentrant');
  assert.equal(await a.holdCount(), 2);
  assert.equal(await a.isHeld(), true);
  assert.equal(await b.isHeld(), false);
  assert.equal(await b.isLocked(), true);
  const ttl = await a.ttl();
  assert.ok(ttl > 0 && ttl <= 30000, `watchdog lease ttl ${ttl} ms, expected (0, 30000]`);
  assert.ok(a.validity() > 0, 'a holder has validity left');
  assert.equal(typeof a.fencingToken(), 'bigint');
  await a.release();
  assert.equal(await b.tryAcquire(), false, 'one level is still held');
  await a.release();
  assert.equal(await b.tryAcquire(), true, 'free after the second release');
  await b.release();
  a.close();
  b.close();
  await client.close();
});

test('a failed call rejects with the class of its status and its own message', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('notowner');
  const lock = client.lock(name);
  await assert.rejects(lock.release(), (err) => {
    assert.ok(err instanceof redlockc.NotOwnerError, `${err.name}`);
    assert.ok(err instanceof redlockc.RedlockcError);
    assert.equal(err.status, -5);
    assert.equal(err.code, 'RLC_E_NOT_OWNER');
    assert.match(err.message, new RegExp(`'${name}'`));
    return true;
  });
  assert.throws(() => new Client(serverUri(), { no_such_option: 1 }), (err) => {
    assert.ok(err instanceof redlockc.InvalidArgumentError, `${err.name}`);
    assert.match(err.message, /no_such_option/);
    return true;
  });
  lock.close();
  await client.close();
});

// rlc_errmsg() is per OS thread: each result must carry the message of the
// call that failed on its worker thread, not another one's.
test('100 concurrent failures each carry the message of their own call', async () => {
  const client = new Client(serverUri());
  const names = Array.from({ length: 100 }, (_, i) => uniqueName(`msg${i}`));
  const locks = names.map((n) => client.lock(n));
  const errors = await Promise.all(locks.map((l) => l.release().then(() => null, (e) => e)));
  errors.forEach((err, i) => {
    assert.ok(err instanceof redlockc.NotOwnerError, `call ${i}: ${err}`);
    assert.ok(err.message.includes(`'${names[i]}'`),
      `call ${i}: expected a message naming '${names[i]}', saw: ${err.message}`);
  });
  locks.forEach((l) => l.close());
  await client.close();
});

test('an unreachable server rejects with ConnectionError naming the address', async () => {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  const client = new Client(`redis://127.0.0.1:${port}`, { connect_timeout_ms: 500 });
  const lock = client.lock(uniqueName('down'));
  await assert.rejects(lock.acquire({ wait: 0 }), (err) => {
    assert.ok(err instanceof redlockc.ConnectionError, `${err.name}: ${err.message}`);
    assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
    return true;
  });
  lock.close();
  await client.close();
});

test('withLock returns the body result, releases, and releases when the body throws', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('with');
  const probe = client.lock(name);
  const out = await client.withLock(name, async (signal, lock) => {
    assert.equal(signal.aborted, false);
    assert.equal(await lock.isHeld(), true);
    return 42;
  });
  assert.equal(out, 42);
  assert.equal(await probe.isLocked(), false, 'released after the body');
  await assert.rejects(client.withLock(name, async () => { throw new Error('boom'); }), /boom/);
  assert.equal(await probe.isLocked(), false, 'released after a throwing body');

  assert.equal(await probe.acquire({ wait: 0 }), true);
  await assert.rejects(client.withLock(name, async () => 1, { wait: 100 }),
    (err) => err instanceof redlockc.NotAcquiredError && err.status === 1);
  await probe.release();
  probe.close();
  await client.close();
});

test('a lost lock aborts the withLock signal and emits lost, on the JS thread', async () => {
  const client = new Client(serverUri(), { watchdog_timeout_ms: 600 });
  const name = uniqueName('lost');
  const other = client.lock(name);
  let emitted = null;
  const run = client.withLock(name, async (signal, lock) => {
    lock.on('lost', (err) => { emitted = err; });
    await other.forceRelease(); // the holder's field is gone: its renewal fails
    // With loss_push the loss may be known before forceRelease's promise
    // settles: the signal can be aborted already.
    await within(10000, 'the signal', new Promise((resolve) => {
      if (signal.aborted) resolve();
      else signal.addEventListener('abort', resolve, { once: true });
    }));
    assert.ok(signal.reason instanceof redlockc.LockLostError, `reason ${signal.reason}`);
  });
  await assert.rejects(run, (err) => err instanceof redlockc.LockLostError,
    'withLock must report that the section was not protected to its end');
  assert.ok(emitted instanceof redlockc.LockLostError, `'lost' event: ${emitted}`);
  other.close();
  await client.close();
});

test('with a 30 s lease a deleted key is pushed as lost, not found 10 s later at the renewal', async () => {
  const client = new Client(serverUri(), { watchdog_timeout_ms: 30000 });
  const name = uniqueName('pushed');
  const lock = client.lock(name);
  const other = client.lock(name);
  assert.equal(await lock.acquire({ wait: 0 }), true);
  const lost = new Promise((resolve) => lock.on('lost', resolve));
  // the hold joins loss push after a 50 ms grace; its first verify finds the
  // key gone even if the DEL came first
  await other.forceRelease();
  const err = await within(2000, "the 'lost' event", lost);
  assert.ok(err instanceof redlockc.LockLostError, `'lost' event: ${err}`);
  assert.equal(await lock.isHeld(), false);
  lock.close();
  other.close();
  await client.close();
});

test('close waits for calls in flight; later calls reject ClosedError', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('close');
  const holder = client.lock(name);
  const waiter = client.lock(name);
  await holder.acquire();
  const pending = waiter.acquire({ wait: 300 });
  waiter.close(); // the handle is freed only after the pending call returns
  assert.equal(await pending, false);
  await assert.rejects(waiter.acquire(), redlockc.ClosedError);

  const late = client.lock(uniqueName('close-late'));
  const taking = late.acquire({ wait: 0 });
  late.close(); // freed when the call returns, whatever it returns
  assert.equal(await taking, true);
  await assert.rejects(late.release(), redlockc.ClosedError);

  await client.close();
  await assert.rejects(holder.release(), (err) => err instanceof redlockc.ClosedError && err.status === -10);
  assert.throws(() => client.lock('x'), redlockc.ClosedError);
  holder.close();
});

test('closing the client wakes a waiter with ClosedError', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('closewake');
  const holder = client.lock(name);
  const waiter = client.lock(name);
  await holder.acquire();
  // Forever. Whether it is already waiting when close runs or starts after,
  // it must end with ClosedError, never hang. (Settled into a value at once:
  // it may reject before close() resolves.)
  const outcome = waiter.acquire().then((held) => held, (err) => err);
  await client.close();
  const err = await within(5000, 'the waiter', outcome);
  assert.ok(err instanceof redlockc.ClosedError, `expected ClosedError, saw ${err}`);
  holder.close();
  waiter.close();
});

test('a Lock collected while held stops being renewed, and its key expires', async () => {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  const client = new Client(serverUri(), { watchdog_timeout_ms: 600 });
  const name = uniqueName('gc');
  await (async () => {
    const dropped = client.lock(name);
    assert.equal(await dropped.acquire(), true);
  })();
  const probe = client.lock(name);
  let locked = true;
  for (let i = 0; i < 100 && locked; i++) { // 100 x 50 ms: well past the 600 ms lease
    gc();
    await delay(50);
    locked = await probe.isLocked();
  }
  assert.equal(locked, false, 'the collected lock was still renewed after 5 s');
  probe.close();
  await client.close();
});

test('fencedSet writes with a token at least the fence and refuses a smaller one', async () => {
  const client = new Client(serverUri(), { fencing: true });
  const lock = client.lock(uniqueName('fence'));
  assert.equal(await lock.acquire({ wait: 0, lease: 20000 }), true);
  const token = lock.fencingToken();
  const key = uniqueName('fenced-res');
  assert.equal(await client.fencedSet(key, 'newer', token + 1n), true);
  assert.equal(await client.fencedSet(key, Buffer.from([0, 1, 2]), token + 1n), true, 'equal tokens write');
  assert.equal(await client.fencedSet(key, 'late', token), false, 'a smaller token is refused');
  await assert.rejects(client.fencedSet(key, 'x', 0), redlockc.InvalidArgumentError);
  await lock.release();
  lock.close();
  await client.close();
});

test("a node that refuses loss push is said once on the client's 'log' (warn)", async () => {
  const { execFileSync } = require('node:child_process');
  const port = new URL(serverUri()).port;
  // a user without +client: CLIENT ID is refused, loss is found at renewal
  execFileSync('redis-cli', ['-p', port, 'ACL', 'SETUSER', 'nodenc', 'on', '>pw', '~*', '&*',
    '+@all', '-client'], { timeout: 5000 });
  const client = new Client(`redis://nodenc:pw@127.0.0.1:${port}`, { watchdog_timeout_ms: 900 });
  const warned = [];
  let told;
  const first = new Promise((resolve) => { told = resolve; });
  client.on('log', ({ level, message }) => {
    if (level === 'warn' && message.includes('loss_push')) {
      warned.push(message);
      told();
    }
  });
  const lock = client.lock(uniqueName('refused'));
  try {
    assert.equal(await lock.acquire({ wait: 0 }), true);
    await within(3000, 'the loss_push warning', first);
    assert.match(warned[0], /refused.*client/i);
    await delay(500); // renewals go on; the refusal is not said again
    assert.equal(warned.length, 1, warned.join(' | '));
    await lock.release();
  } finally {
    lock.close();
    await client.close();
  }
});
