'use strict';
/*
 * engine_bench.js - the Node binding on the engine (issue 15), against a
 * redis-server it starts itself (or --nodes URI), each figure beside a
 * baseline measured in the same run:
 *
 *   waiters   10,000 acquires (default) over 100 locks, all waiting at once
 *             in one process: every acquire must complete; threads and
 *             memory per waiter while they wait; hand-off p50/p99 (from a
 *             holder's release() call to the next holder's acquire()
 *             resolving, same lock).
 *   cycles    64 async tasks on distinct locks, acquire + release in a
 *             loop, over one Client (one command connection): cycles/s and
 *             p50/p99 of a cycle, beside
 *               bare        a bare client (one net.Socket, a minimal RESP
 *                           reader) sending the same shape of work: one
 *                           acquire script and one release script a cycle,
 *                           pipelined by the 64 tasks - the floor here;
 *               node-redlock  v5 + ioredis over one connection, when
 *                           require('redlock') works (NODE_PATH; tests/bench
 *                           /run.sh installs it into a scratch directory).
 *
 * Each cycles row also gives Redis's own time per cycle (INFO commandstats):
 * with Redis on the same machine, a client whose scripts cost the server
 * more per cycle is bounded by that, not by its own CPU.
 *
 *   node --expose-gc tests/bench/node/engine_bench.js [--seconds 3]
 *        [--waiters 10000] [--locks 100] [--tasks 64] [--nodes redis://h:p]
 *
 * Prints one JSON line per row, then a short table. Speed is never a test:
 * the figures are printed, not asserted (except that every acquire ends).
 */
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');

const root = path.resolve(__dirname, '..', '..', '..');
const redlockc = require(process.env.RLC_NODE_MODULE || path.join(root, 'bindings', 'node'));
const { startRedis } = require(path.join(root, 'bindings', 'node', 'test', 'redis_server.js'));

function args() {
  const a = { seconds: 3, waiters: 10000, locks: 100, tasks: 64, nodes: null };
  for (let i = 2; i < process.argv.length; i += 2) {
    const k = process.argv[i].replace(/^--/, '');
    const v = process.argv[i + 1];
    if (!(k in a) || v === undefined) throw new Error(`unknown argument ${process.argv[i]}`);
    a[k] = k === 'nodes' ? v : Number(v);
  }
  return a;
}

const nowNs = () => process.hrtime.bigint();
const threads = () => fs.readdirSync('/proc/self/task').length;
const gc = global.gc || (() => {});
const rows = [];
let admin = null; // a Bare connection for INFO and CONFIG RESETSTAT

function quantileUs(v, q) {
  if (v.length === 0) return -1;
  const s = [...v].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  return Number(s[Math.round(q * (s.length - 1))]) / 1000;
}

function emit(row) {
  rows.push(row);
  process.stdout.write(`${JSON.stringify(row)}\n`);
}

async function settleLoop(n = 10) {
  for (let i = 0; i < n; i++) await new Promise((r) => setTimeout(r, 10));
}

// ---- 1. many waiters -------------------------------------------------------

async function waiters(uri, W, L) {
  const client = new redlockc.Client(uri);
  const names = Array.from({ length: L }, (_, i) => `bench:waiters:${process.pid}:${i}`);
  // The gates hold every lock while the waiters line up.
  const gates = names.map((n) => client.lock(n));
  for (const g of gates) if (!(await g.acquire({ wait: 0 }))) throw new Error('a gate lock was busy');
  await settleLoop();
  gc();
  const t0 = threads();
  const m0 = process.memoryUsage();

  const releasedAt = new Array(L).fill(0n);
  const handoffs = [];
  let done = 0;
  let errors = 0;
  let overlaps = 0;
  const inside = new Array(L).fill(0);
  const tasks = [];
  for (let i = 0; i < W; i++) {
    const li = i % L;
    const lock = client.lock(names[li]);
    tasks.push(lock.acquire().then(async (held) => {
      if (!held) throw new Error('an acquire without limit returned false');
      const got = nowNs();
      if (releasedAt[li] > 0n) handoffs.push(got - releasedAt[li]);
      if (++inside[li] !== 1) overlaps++;
      await new Promise(setImmediate);
      inside[li]--;
      releasedAt[li] = nowNs();
      await lock.release();
      lock.close();
      done++;
    }).catch((e) => {
      if (errors++ === 0) process.stderr.write(`waiters: ${e.message}\n`);
    }));
  }
  // Everyone is waiting once every acquire is in the engine and the loop
  // has turned a few times with nothing to do.
  for (let i = 0; i < 2000 && client._driver.ops.size < W; i++) await new Promise((r) => setTimeout(r, 5));
  await settleLoop(20);
  gc();
  const m1 = process.memoryUsage();
  const t1 = threads();
  const waiting = client._driver.ops.size;

  const start = nowNs();
  for (let i = 0; i < L; i++) {
    releasedAt[i] = nowNs();
    gates[i].release();
  }
  await Promise.all(tasks);
  const wallS = Number(nowNs() - start) / 1e9;
  gates.forEach((g) => g.close());
  emit({
    row: 'node.engine.waiters',
    waiters: W,
    locks: L,
    waiting_at_once: waiting,
    completed: done,
    errors,
    overlaps,
    threads_before: t0,
    threads_waiting: t1,
    heap_bytes_per_waiter: Math.round((m1.heapUsed + m1.external - m0.heapUsed - m0.external) / W),
    rss_bytes_per_waiter: Math.round((m1.rss - m0.rss) / W),
    handoff_p50_us: quantileUs(handoffs, 0.5),
    handoff_p99_us: quantileUs(handoffs, 0.99),
    handoffs: handoffs.length,
    drain_s: wallS,
  });
  await client.close();
  if (done !== W) throw new Error(`only ${done} of ${W} acquires completed`);
}

// ---- 2. cycles on distinct locks -------------------------------------------

// Redis's own CPU time in commands (INFO commandstats), in us.
async function serverUs() {
  const text = await admin.call('INFO', 'commandstats');
  let us = 0;
  for (const m of text.matchAll(/^cmdstat_[^:]+:calls=\d+,usec=(\d+)/gm)) us += Number(m[1]);
  return us;
}

async function runCycles(row, tasks, seconds, cycle, extra = {}) {
  // warm-up, then the timed run
  await Promise.all(Array.from({ length: tasks }, async (_, w) => { for (let i = 0; i < 20; i++) await cycle(w); }));
  await admin.call('CONFIG', 'RESETSTAT');
  const lat = [];
  let errors = 0;
  const cpu0 = process.cpuUsage();
  const t0 = nowNs();
  const end = t0 + BigInt(Math.round(seconds * 1e9));
  await Promise.all(Array.from({ length: tasks }, async (_, w) => {
    for (let t = nowNs(); t < end && errors < 1000;) {
      try {
        await cycle(w);
        const t1 = nowNs();
        lat.push(t1 - t);
        t = t1;
      } catch (e) {
        if (errors++ === 0) process.stderr.write(`${row}: ${e.message}\n`);
        t = nowNs();
      }
    }
  }));
  const wall = Number(nowNs() - t0);
  const cpu = process.cpuUsage(cpu0);
  const redisUs = await serverUs();
  emit({
    row,
    tasks,
    cycles: lat.length / (wall / 1e9),
    p50_us: quantileUs(lat, 0.5),
    p99_us: quantileUs(lat, 0.99),
    errors,
    client_cpu_pct: (100 * (cpu.user + cpu.system) * 1000) / wall,
    redis_us_per_cycle: redisUs / Math.max(1, lat.length),
    ...extra,
  });
}

async function engineCycles(uri, tasks, seconds) {
  const client = new redlockc.Client(uri);
  const locks = Array.from({ length: tasks }, (_, w) => client.lock(`bench:cycles:${process.pid}:${w}`));
  await runCycles('node.engine.cycles', tasks, seconds, async (w) => {
    if (!(await locks[w].acquire())) throw new Error('not acquired');
    await locks[w].release();
  }, { connections: 1 });
  locks.forEach((l) => l.close());
  await client.close();
}

// A bare pipelined client: commands go out as they come, replies are matched
// in order. Just enough RESP to read these scripts' replies.
class Bare {
  constructor(port, host) {
    this.socket = net.connect(port, host);
    this.socket.setNoDelay(true);
    this.waiting = [];
    this.buf = Buffer.alloc(0);
    this.socket.on('data', (d) => this.read(d));
    this.ready = new Promise((resolve, reject) => {
      this.socket.once('connect', resolve);
      this.socket.once('error', reject);
    });
  }

  call(...argv) {
    let out = `*${argv.length}\r\n`;
    for (const a of argv) out += `$${Buffer.byteLength(a)}\r\n${a}\r\n`;
    this.socket.write(out);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  read(d) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    for (;;) {
      const r = parse(this.buf, 0);
      if (!r) break;
      this.buf = this.buf.subarray(r.end);
      const w = this.waiting.shift();
      if (r.error) w.reject(new Error(r.error)); else w.resolve(r.value);
    }
  }

  close() { this.socket.destroy(); }
}

// One reply from buf at i: {value | error, end}, or null when incomplete.
function parse(buf, i) {
  const eol = buf.indexOf('\r\n', i);
  if (eol < 0) return null;
  const line = buf.toString('latin1', i + 1, eol);
  switch (buf[i]) {
    case 0x2b: return { value: line, end: eol + 2 };            // +
    case 0x2d: return { error: line, end: eol + 2 };            // -
    case 0x3a: return { value: Number(line), end: eol + 2 };    // :
    case 0x24: {                                                // $
      const n = Number(line);
      if (n < 0) return { value: null, end: eol + 2 };
      if (buf.length < eol + 2 + n + 2) return null;
      return { value: buf.toString('utf8', eol + 2, eol + 2 + n), end: eol + 2 + n + 2 };
    }
    case 0x2a: {                                                // *
      const n = Number(line);
      const value = [];
      let at = eol + 2;
      for (let k = 0; k < n; k++) {
        const r = parse(buf, at);
        if (!r) return null;
        value.push(r.value);
        at = r.end;
      }
      return { value: n < 0 ? null : value, end: at };
    }
    default: throw new Error(`not RESP: ${buf.toString('latin1', i, i + 20)}`);
  }
}

// The shape of Redisson's lock and unlock scripts (hash, hold count, expiry,
// unlock message), without their finer cases.
const ACQUIRE = "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then " +
  "redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; " +
  "return redis.call('pttl', KEYS[1]);";
const RELEASE = "local c = redis.call('hincrby', KEYS[1], ARGV[1], -1); if c > 0 then return 0 end; " +
  "redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], '0'); return 1;";

async function bareCycles(uri, tasks, seconds) {
  const { hostname, port } = new URL(uri);
  const bare = new Bare(Number(port), hostname);
  await bare.ready;
  const acq = await bare.call('SCRIPT', 'LOAD', ACQUIRE);
  const rel = await bare.call('SCRIPT', 'LOAD', RELEASE);
  const field = `bare-${process.pid}:1`;
  await runCycles('node.bare.cycles', tasks, seconds, async (w) => {
    const key = `bench:bare:${process.pid}:${w}`;
    const got = await bare.call('EVALSHA', acq, '1', key, '30000', field);
    if (got !== null) throw new Error('not acquired');
    await bare.call('EVALSHA', rel, '2', key, `redisson_lock__channel:{${key}}`, field);
  }, { connections: 1 });
  bare.close();
}

async function redlockCycles(uri, tasks, seconds) {
  let Redis;
  let Redlock;
  try {
    Redis = require('ioredis');
    Redlock = require('redlock').default;
  } catch {
    emit({ row: 'node.redlock.cycles', note: 'node-redlock is not installed (NODE_PATH): not measured' });
    return;
  }
  const c = new Redis(uri, { lazyConnect: true });
  await c.connect();
  const redlock = new Redlock([c]);
  await runCycles('node.redlock.cycles', tasks, seconds, async (w) => {
    const lock = await redlock.acquire([`bench:redlock:${process.pid}:${w}`], 30000);
    await lock.release();
  }, { connections: 1 });
  await c.quit();
}

async function main() {
  const a = args();
  setTimeout(() => {
    process.stderr.write('engine_bench.js: out of time\n');
    process.exit(3);
  }, (a.seconds * 6 + 180) * 1000).unref();
  const server = a.nodes ? null : await startRedis();
  const uri = a.nodes || server.uri;
  const { hostname, port } = new URL(uri);
  admin = new Bare(Number(port), hostname);
  await admin.ready;
  try {
    await waiters(uri, a.waiters, a.locks);
    await bareCycles(uri, a.tasks, a.seconds);
    await engineCycles(uri, a.tasks, a.seconds);
    await redlockCycles(uri, a.tasks, a.seconds);
  } finally {
    admin.close();
    if (server) await server.stop('SIGTERM');
  }
  const byRow = Object.fromEntries(rows.map((r) => [r.row, r]));
  const w = byRow['node.engine.waiters'];
  const f = (x) => (typeof x === 'number' ? Math.round(x).toLocaleString('en-US') : String(x));
  console.log('');
  console.log(`waiters: ${f(w.completed)}/${f(w.waiters)} acquires completed over ${w.locks} locks ` +
    `(${f(w.waiting_at_once)} waiting at once); threads ${w.threads_before} -> ${w.threads_waiting} while waiting; ` +
    `${f(w.heap_bytes_per_waiter)} B heap+external, ${f(w.rss_bytes_per_waiter)} B RSS per waiter; ` +
    `hand-off p50 ${f(w.handoff_p50_us)} us, p99 ${f(w.handoff_p99_us)} us; drained in ${w.drain_s.toFixed(2)} s`);
  const bare = byRow['node.bare.cycles'];
  for (const name of ['node.bare.cycles', 'node.engine.cycles', 'node.redlock.cycles']) {
    const r = byRow[name];
    if (!r || r.cycles === undefined) {
      console.log(`${name.padEnd(22)} ${r ? r.note : 'not run'}`);
      continue;
    }
    console.log(`${name.padEnd(22)} ${f(r.cycles).padStart(8)} cycles/s  p50 ${f(r.p50_us).padStart(6)} us  ` +
      `p99 ${f(r.p99_us).padStart(6)} us  client cpu ${r.client_cpu_pct.toFixed(0)}%  ` +
      `redis ${r.redis_us_per_cycle.toFixed(0)} us/cycle  ` +
      `(${(r.cycles / bare.cycles).toFixed(2)}x bare)`);
  }
}

main().catch((e) => {
  process.stderr.write(`engine_bench.js: ${e.stack}\n`);
  process.exit(1);
});
