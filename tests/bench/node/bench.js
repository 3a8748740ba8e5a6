'use strict';
/*
 * bench.js - node-redlock v5 + ioredis, the peer, on the same workloads as
 * rlc_bench and against the same servers:
 *
 *   node.t1        1 worker, 1 node: uncontended acquire + release cycles
 *   node.w16       16 async workers on distinct names, 1 node, one Redlock
 *                  over one ioredis connection (its usual deployment)
 *   node.redlock5  1 worker, 5 nodes
 *   node.handoff   8 workers on one name; time from release() to the next
 *                  holder's acquire() resolving (same rules as rlc_bench: a
 *                  holder holds 1 ms, a releaser waits until someone else
 *                  took the lock)
 *
 * Each prints one JSON line. The modules come from NODE_PATH (run.sh installs
 * them into a temporary directory; they are never committed).
 *
 *   node bench.js --nodes redis://h:p,... --seconds S
 */
const Redis = require('ioredis');
const Redlock = require('redlock').default;

const LEASE_MS = 30000;
const WARMUP = 50;
const PATIENCE_MS = 2000;
const HOLD_MS = 1; // the critical section: see handoff.c for why

function args() {
  const a = { nodes: [], seconds: 3 };
  for (let i = 2; i < process.argv.length; i += 2) {
    const v = process.argv[i + 1];
    if (process.argv[i] === '--nodes') a.nodes = v.split(',');
    else if (process.argv[i] === '--seconds') a.seconds = Number(v);
    else throw new Error('unknown argument ' + process.argv[i]);
  }
  if (a.nodes.length < 5 || !(a.seconds > 0)) throw new Error('need --nodes (5) and --seconds');
  return a;
}

const nowNs = () => process.hrtime.bigint();

function quantileUs(v, q) {
  if (v.length === 0) return -1;
  v.sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  return Number(v[Math.round(q * (v.length - 1))]) / 1000;
}

function cpuPct(cpu0, wallNs) {
  const d = process.cpuUsage(cpu0);
  return (100 * (d.user + d.system) * 1000) / Number(wallNs);
}

function emit(row) {
  process.stdout.write(JSON.stringify(row) + '\n');
}

async function clients(uris) {
  const cs = uris.map((u) => new Redis(u, { lazyConnect: true }));
  await Promise.all(cs.map((c) => c.connect()));
  return cs;
}

async function cycle(redlock, name) {
  const lock = await redlock.acquire([name], LEASE_MS);
  await lock.release();
}

/* Uncontended cycles: `workers` async loops on distinct names. */
async function cycles(row, uris, workers, seconds) {
  const cs = await clients(uris);
  const redlock = new Redlock(cs);
  const lat = [];
  let errors = 0;
  await Promise.all(
    [...Array(workers).keys()].map(async (w) => {
      for (let i = 0; i < WARMUP; i++) await cycle(redlock, `bench:${row}:${w}`);
    }),
  );
  const cpu0 = process.cpuUsage();
  const t0 = nowNs();
  const end = t0 + BigInt(Math.round(seconds * 1e9));
  let last = t0;
  await Promise.all(
    [...Array(workers).keys()].map(async (w) => {
      const name = `bench:${row}:${w}`;
      for (let t = nowNs(); t < end && errors < 1000; ) {
        try {
          await cycle(redlock, name);
          const t1 = nowNs();
          lat.push(t1 - t);
          t = t1;
        } catch (e) {
          if (errors++ === 0) process.stderr.write(`${row}: ${e.message}\n`);
          t = nowNs();
        }
        if (t > last) last = t;
      }
    }),
  );
  const wall = last - t0;
  emit({
    row,
    threads: workers,
    nodes: uris.length,
    cycles: lat.length / (Number(wall) / 1e9),
    p50_us: quantileUs(lat, 0.5),
    p99_us: quantileUs(lat, 0.99),
    errors,
    client_cpu_pct: cpuPct(cpu0, wall),
  });
  await Promise.all(cs.map((c) => c.quit()));
}

/* Contended hand-off: `workers` loops on one name, default retry settings
 * (retryDelay 200 ms, jitter 200 ms) except that they retry forever. */
async function handoff(uris, workers, seconds) {
  const cs = await clients(uris);
  const redlock = new Redlock(cs, { retryCount: -1 });
  const name = 'bench:handoff';
  await cycle(redlock, name);
  const lat = [];
  let holder = -1, releasedAt = 0n, handoffs = 0, errors = 0, timeouts = 0;
  let wake = [];
  const cpu0 = process.cpuUsage();
  const t0 = nowNs();
  const end = t0 + BigInt(Math.round(seconds * 1e9));
  const waitForTaker = (me) =>
    new Promise((resolve) => {
      const ms = Math.min(PATIENCE_MS, Number(end - nowNs()) / 1e6);
      const timer = setTimeout(() => {
        if (ms === PATIENCE_MS) timeouts++;
        resolve();
      }, Math.max(0, ms));
      wake.push(() => {
        clearTimeout(timer);
        resolve();
      });
      if (holder !== me) wake.pop()();
    });
  await Promise.all(
    [...Array(workers).keys()].map(async (id) => {
      while (nowNs() < end && errors < 1000) {
        let lock;
        try {
          lock = await redlock.acquire([name], LEASE_MS);
        } catch (e) {
          if (errors++ === 0) process.stderr.write(`handoff: ${e.message}\n`);
          continue;
        }
        const got = nowNs();
        if (holder >= 0 && holder !== id && got < end) {
          lat.push(got - releasedAt);
          handoffs++;
        }
        holder = id;
        const w = wake;
        wake = [];
        w.forEach((f) => f());
        await new Promise((resolve) => setTimeout(resolve, HOLD_MS));
        releasedAt = nowNs();
        await lock.release();
        if (nowNs() < end) await waitForTaker(id);
      }
    }),
  );
  const wall = end - t0;
  emit({
    row: 'node.handoff',
    threads: workers,
    cycles: handoffs / (Number(wall) / 1e9),
    handoff_p50_us: quantileUs(lat, 0.5),
    handoff_p99_us: quantileUs(lat, 0.99),
    errors,
    patience_timeouts: timeouts,
    client_cpu_pct: cpuPct(cpu0, nowNs() - t0),
  });
  await Promise.all(cs.map((c) => c.quit()));
}

async function main() {
  const a = args();
  // A hard bound on the whole run, whatever happens to the servers.
  setTimeout(() => {
    process.stderr.write('bench.js: out of time\n');
    process.exit(3);
  }, (a.seconds * 8 + 30) * 1000).unref();
  const one = a.nodes.slice(0, 1);
  await cycles('node.t1', one, 1, a.seconds);
  await cycles('node.w16', one, 16, a.seconds);
  await cycles('node.redlock5', a.nodes.slice(0, 5), 1, a.seconds);
  await handoff(one, 8, a.seconds);
}

main().catch((e) => {
  process.stderr.write(`bench.js: ${e.stack}\n`);
  process.exit(1);
});
