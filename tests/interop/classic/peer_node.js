'use strict';
/*
 * peer_node.js - node-redlock v5 (with ioredis), the Node peer of judge.py:
 *
 *   node peer_node.js MODE URIS CHECKER SIDE ARGS...
 *
 * node-redlock keys a lock by its resource name as given, SETs a random
 * 16-byte hex token with PX (a Lua script over the resources), releases with
 * a compare-and-DEL and extends with a compare-and-SET PX; over N clients it is
 * Redlock. It has no pub/sub: a waiter retries every retryDelay (200 ms by
 * default) +- retryJitter (200 ms). The modes and control protocol are
 * judge.py's (the same as peer_py.py's). NODE_PATH has redlock and ioredis.
 */
const fs = require('fs');
const Redis = require('ioredis');
const Redlock = require('redlock').default;

const [mode, uris, checkerPath, side, ...args] = process.argv.slice(2);
const clients = uris.split(',').map((u) => new Redis(u, { maxRetriesPerRequest: 2 }));
const ctl = new Redis(uris.split(',')[0]);
const blocker = new Redis(uris.split(',')[0]); // BLPOP: a connection of its own
const checkerText = fs.readFileSync(checkerPath, 'utf8');
// The library's defaults, except retryCount, set per call from the wait.
const redlock = new Redlock(clients, { retryCount: 0 });
const RETRY_MS = redlock.settings.retryDelay;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Wall clock in ns: comparable with the other processes' (time.time_ns).
const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));

async function acquire(name, leaseMs, waitMs) {
  const retryCount = waitMs ? Math.ceil(waitMs / RETRY_MS) : 0;
  try {
    return await redlock.acquire([name], leaseMs, { retryCount });
  } catch (e) {
    // Busy: an ExecutionError whose attempts all lost the vote.
    if (e && e.name === 'ExecutionError') return null;
    throw e;
  }
}

async function check(name, delta) {
  const keys = [`chk:${name}`, `chk:${name}:who`, 'chk:bad', 'chk:sections'];
  await ctl.eval(checkerText, 4, ...keys, delta, side, name);
}
const say = (name, value) => ctl.rpush(`ctl:${name}`, value);
async function take(name, timeout = 30) {
  const got = await blocker.blpop(`go:${name}`, timeout);
  if (!got) throw new Error(`nothing on go:${name} within ${timeout} s`);
  return got[1];
}

async function contend(seconds, workers, leaseMs, waitMs, names) {
  names = names.split(',');
  const deadline = Date.now() + Number(seconds) * 1000;
  const counts = { sections: 0, tries: 0, errors: 0 };
  let firstError = null;
  async function worker() {
    for (let i = 0; i < 100000 && Date.now() < deadline; i++) {
      const name = names[Math.floor(Math.random() * names.length)];
      counts.tries++;
      try {
        const lock = await acquire(name, Number(leaseMs), Number(waitMs));
        if (!lock) continue;
        await check(name, 1);
        await sleep(Math.random() * 2);
        await check(name, -1);
        await lock.release();
        counts.sections++;
      } catch (e) {
        counts.errors++;
        firstError = firstError || `${e.name}: ${e.message}`;
      }
    }
  }
  await Promise.all(Array.from({ length: Number(workers) }, worker));
  for (const [k, v] of Object.entries(counts)) console.log(`RESULT ${k} ${v}`);
  if (firstError) console.log(`ERROR ${firstError}`);
}

async function hold(rounds, prefix, leaseMs) {
  for (let i = 0; i < Number(rounds); i++) {
    const name = `${prefix}:${i}`;
    const lock = await acquire(name, Number(leaseMs), 5000);
    if (!lock) { await say(name, 'none'); continue; }
    await say(name, 'held');
    await take(name);
    const t0 = nowNs();
    await lock.release();
    await say(name, String(t0));
  }
}

async function wait(rounds, prefix, leaseMs) {
  for (let i = 0; i < Number(rounds); i++) {
    const name = `${prefix}:${i}`;
    await take(name);
    await say(name, 'waiting');
    const lock = await acquire(name, Number(leaseMs), 10000);
    const t1 = nowNs();
    await say(name, lock ? String(t1) : 'none');
    if (lock) await lock.release();
  }
}

async function extend(name, leaseMs, holdMs, everyMs) {
  let lock = await acquire(name, Number(leaseMs), 5000);
  if (!lock) { await say(name, 'none'); return; }
  await say(name, 'held');
  let ok = 0, bad = 0;
  const end = Date.now() + Number(holdMs);
  for (let i = 0; i < 1000 && Date.now() < end; i++) {
    await sleep(Number(everyMs));
    try {
      lock = await lock.extend(Number(leaseMs));
      ok++;
    } catch (e) {
      bad++;
    }
  }
  await say(name, `extended ${ok} failed ${bad}`);
  await take(name);
  await lock.release();
  await say(name, 'released');
}

async function tryWhileHeld(name, leaseMs, everyMs) {
  await take(name); // "held"
  let tries = 0, got = 0;
  for (let i = 0; i < 10000; i++) {
    if (await ctl.lpop(`go:${name}`)) break; // "done"
    tries++;
    const lock = await acquire(name, Number(leaseMs), 0);
    if (lock) { got++; await lock.release(); }
    await sleep(Number(everyMs));
  }
  await say(name, `tries ${tries} got ${got}`);
  await take(name); // "released"
  const lock = await acquire(name, Number(leaseMs), 3000);
  await say(name, lock ? 'after got' : 'after none');
  if (lock) await lock.release();
}

const MODES = { contend, hold, wait, extend, try: tryWhileHeld };

MODES[mode](...args)
  .then(() => 0, (e) => { console.log(`ERROR ${e.name}: ${e.message}`); return 1; })
  .then((rc) => {
    for (const c of [...clients, ctl, blocker]) c.disconnect();
    process.exitCode = rc;
  });
