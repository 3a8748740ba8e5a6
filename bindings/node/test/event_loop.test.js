'use strict';
// 200 acquisitions wait for one busy lock. The event loop must keep serving
// timers meanwhile, and libuv's thread pool (fs, dns, zlib) must stay free:
// waits are engine state driven by the loop's sockets, never a blocked
// thread (test/engine.test.js counts the threads).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs/promises');
const { Client } = require('..');
const { serverUri, uniqueName, within } = require('./helpers.js');

const WAITERS = 200;
const TICKS = 20;

test('timers keep firing while 200 async acquisitions wait', async () => {
  const client = new Client(serverUri());
  const name = uniqueName('loop');
  const holder = client.lock(name);
  assert.equal(await holder.acquire({ wait: 0 }), true);

  let settled = 0;
  let inside = 0;
  let overlaps = 0;
  const waiters = Array.from({ length: WAITERS }, async () => {
    const lock = client.lock(name);
    try {
      const ok = await lock.acquire({ wait: 60000 });
      settled++;
      if (!ok) return false;
      if (++inside !== 1) overlaps++;
      await new Promise(setImmediate); // hold across a loop turn: overlaps would show
      inside--;
      await lock.release();
      return true;
    } finally {
      lock.close();
    }
  });

  // Evidence 1: TICKS timer callbacks, 10 ms apart, while every waiter waits.
  const gaps = [];
  await within(30000, `${TICKS} timer ticks`, new Promise((resolve) => {
    let last = performance.now();
    const timer = setInterval(() => {
      const now = performance.now();
      gaps.push(now - last);
      last = now;
      if (gaps.length === TICKS) {
        clearInterval(timer);
        resolve();
      }
    }, 10);
  }));
  assert.equal(settled, 0, `${settled} acquisitions returned while the lock was held`);
  // Evidence 2: the libuv pool still serves fs calls.
  const self = await within(30000, 'fs.readFile', fs.readFile(__filename, 'utf8'));
  assert.ok(self.includes('timers keep firing'));
  assert.equal(settled, 0, `${settled} acquisitions returned while the lock was held`);
  console.log(`${TICKS} ticks while ${WAITERS} acquisitions waited: ` +
    `median gap ${median(gaps).toFixed(1)} ms, max ${Math.max(...gaps).toFixed(1)} ms ` +
    '(10 ms asked; printed, not asserted)');

  const started = performance.now();
  await holder.release();
  const results = await Promise.all(waiters);
  const took = performance.now() - started;
  assert.equal(results.filter(Boolean).length, WAITERS, 'every waiter got the lock in turn');
  assert.equal(overlaps, 0, `${overlaps} overlapping holds`);
  console.log(`${WAITERS} hand-overs in ${took.toFixed(0)} ms (printed, not asserted)`);
  holder.close();
  await client.close();
});

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}
