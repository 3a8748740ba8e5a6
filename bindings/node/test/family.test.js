'use strict';
// The lock family from Node against a real redis-server: read-write lock,
// fair lock, semaphores, multi-name lock.
const test = require('node:test');
const assert = require('node:assert/strict');
const { setTimeout: delay } = require('node:timers/promises');
const redlockc = require('..');
const { serverUri, uniqueName } = require('./helpers.js');

const { Client } = redlockc;

test('readers overlap, a writer is alone, and the writer may read', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('rw');
  const a = client.rwlock(name);
  const b = client.rwlock(name);
  const w = client.rwlock(name);
  assert.equal(await a.readLock().tryAcquire(), true);
  assert.equal(await b.readLock().tryAcquire(), true, 'two readers at once');
  assert.equal(await a.mode(), 'read');
  assert.equal(await w.writeLock().acquire({ wait: 50 }), false, 'a writer waits for readers');
  await a.readLock().release();
  await b.readLock().release();
  assert.equal(await w.writeLock().tryAcquire(), true);
  assert.equal(await w.mode(), 'write');
  assert.equal(await a.readLock().tryAcquire(), false, 'no reader while written');
  assert.equal(await w.readLock().tryAcquire(), true, 'the writer reads');
  assert.equal(w.writeLock().holdCount(), 1);
  assert.equal(w.readLock().holdCount(), 1);
  assert.ok(w.writeLock().validity() > 0);
  await w.readLock().release();
  await w.writeLock().release();
  assert.equal(await w.mode(), 'free');
  await assert.rejects(w.writeLock().release(), redlockc.NotOwnerError);
  for (const l of [a, b, w]) l.close();
  await client.close();
});

test('concurrent readers and writers: no writer ever overlaps anyone', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('rwmix');
  let readers = 0;
  let writers = 0;
  let maxReaders = 0;
  let violations = 0;
  const worker = async (i) => {
    const rw = client.rwlock(name);
    const side = i % 4 === 0 ? rw.writeLock() : rw.readLock();
    for (let k = 0; k < 5; k++) {
      assert.equal(await side.acquire({ wait: 20000 }), true);
      if (side.write) writers++; else readers++;
      maxReaders = Math.max(maxReaders, readers);
      if (writers > 1 || (writers > 0 && readers > 0)) violations++;
      await delay(3);
      if (side.write) writers--; else readers--;
      await side.release();
    }
    rw.close();
  };
  await Promise.all(Array.from({ length: 12 }, (_, i) => worker(i)));
  assert.equal(violations, 0);
  assert.ok(maxReaders > 1, `readers should overlap, max ${maxReaders}`);
  await client.close();
});

test('fair lock: waiters get it in the order they came', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('fair');
  const holder = client.fairLock(name);
  assert.equal(await holder.acquire({ lease: 20000 }), true);
  const order = [];
  const waiters = [];
  for (let i = 0; i < 4; i++) {
    const l = client.fairLock(name);
    waiters.push(l.acquire({ wait: 20000 }).then(async (ok) => {
      assert.equal(ok, true);
      order.push(i);
      await l.release();
      l.close();
    }));
    await delay(150); // each joins the queue before the next
  }
  await holder.release();
  await Promise.all(waiters);
  assert.deepEqual(order, [0, 1, 2, 3]);
  holder.close();
  await client.close();
});

test('semaphore: n permits, never more; set only if unset', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('sem');
  const sem = await client.semaphore(name, 2);
  assert.equal(await sem.trySetPermits(5), false);
  assert.equal(await sem.available(), 2);
  let inside = 0;
  let peak = 0;
  await Promise.all(Array.from({ length: 6 }, async () => {
    const s = await client.semaphore(name);
    for (let k = 0; k < 4; k++) {
      assert.equal(await s.acquire({ wait: 20000 }), true);
      peak = Math.max(peak, ++inside);
      await delay(2);
      inside--;
      await s.release();
    }
    s.close();
  }));
  assert.equal(peak, 2);
  assert.equal(await sem.acquire({ permits: 3, wait: 50 }), false);
  sem.close();
  await client.close();
});

test('permit-expirable semaphore: an expired permit goes back, its release is lost', async () => {
  const client = new Client(serverUri());
  const sem = await client.permitSemaphore(uniqueName('psem'), 1);
  const id = await sem.acquire({ lease: 200 });
  assert.match(id, /^[0-9a-f]{32}$/);
  assert.equal(await sem.acquire({ wait: 0, lease: 1000 }), null);
  let back = false;
  for (let i = 0; i < 100 && !back; i++) { // 5 s at most
    back = (await sem.available()) === 1;
    if (!back) await delay(50);
  }
  assert.ok(back, 'the permit came back');
  await assert.rejects(sem.release(id), redlockc.LockLostError);
  assert.equal(await sem.available(), 1);
  await assert.rejects(sem.acquire({ wait: 0 }), redlockc.InvalidArgumentError);
  sem.close();
  await client.close();
});

test('multi-name lock: all names or none', async () => {
  const client = new Client(serverUri());
  const n1 = uniqueName('m');
  const n2 = uniqueName('m');
  const blocker = client.lock(n2);
  assert.equal(await blocker.acquire({ lease: 20000 }), true);
  const m = client.multiLock([n1, n2, n1]);
  assert.equal(m.size, 2);
  assert.equal(await m.tryAcquire(), false);
  assert.equal(await client.lock(n1).isLocked(), false, 'no partial hold');
  await blocker.release();
  assert.equal(await m.tryAcquire(), true);
  assert.equal(await client.lock(n1).isLocked(), true);
  await m.release();
  assert.equal(await client.lock(n2).isLocked(), false);
  m.close();
  blocker.close();
  await client.close();
});

test('over several masters the fair lock and semaphores are refused; closed handles reject', async () => {
  const uri = serverUri();
  const client = new Client(`${uri},redis://127.0.0.1:1,redis://127.0.0.1:2`);
  assert.throws(() => client.fairLock('x'), redlockc.InvalidArgumentError);
  await assert.rejects(client.semaphore('x'), redlockc.InvalidArgumentError);
  await client.close();
  const c2 = new Client(uri);
  const rw = c2.rwlock(uniqueName('closed'));
  rw.close();
  await assert.rejects(rw.readLock().acquire(), redlockc.ClosedError);
  await c2.close();
  assert.throws(() => c2.rwlock('y'), redlockc.ClosedError);
});
