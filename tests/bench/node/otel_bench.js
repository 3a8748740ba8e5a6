'use strict';
/*
 * otel_bench.js - what the Node binding's OpenTelemetry spans cost (issue 35,
 * point 5): acquire + release cycles per second over one Client, 32 async
 * tasks on distinct locks, against a redis-server it starts itself (or
 * --nodes URI), in one process, with rounds alternating:
 *
 *   no-sdk   @opentelemetry/api installed, no SDK set up: the binding's
 *            spans go to the API's no-op tracer (what every application
 *            that has the API but traces nothing pays)
 *   sdk      a BasicTracerProvider with a SimpleSpanProcessor into an
 *            InMemorySpanExporter (emptied after each round): two spans a
 *            cycle (redlock.acquire, redlock.hold) recorded and exported
 *
 * The API and the SDK come from the npm registry, installed into a scratch
 * directory that the measuring process runs in (as an application has
 * them; the binding finds the API there).
 *
 *   node tests/bench/node/otel_bench.js [--seconds 2] [--rounds 5] [--nodes redis://h:p]
 *
 * Prints one JSON line per row (the median round) and the overhead. Speed
 * is never a test: the figures are printed, not asserted.
 */
const { execFileSync, spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.resolve(__dirname, '..', '..', '..');
const TASKS = 32;

function args() {
  const a = { seconds: 2, rounds: 5, nodes: null };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    if (!(key in a)) throw new Error(`unknown argument ${argv[i]}`);
    a[key] = key === 'nodes' ? argv[i + 1] : Number(argv[i + 1]);
  }
  return a;
}

// ---- the measuring process (in the scratch directory) ----------------------

async function cycles(client, seconds, tag) {
  const end = Date.now() + seconds * 1000;
  let n = 0;
  const task = async (t) => {
    const lock = client.lock(`otel-bench-${process.pid}-${tag}-${t}`);
    while (Date.now() < end) {
      if (!(await lock.acquire({ wait: 1000 }))) throw new Error('a distinct lock was busy');
      await lock.release();
      n++;
    }
    lock.close();
  };
  await Promise.all(Array.from({ length: TASKS }, (_, t) => task(t)));
  return n / seconds;
}

async function measure() {
  const a = args();
  const api = require('@opentelemetry/api');
  const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
  const { Client } = require(process.env.RLC_NODE_MODULE);
  const client = new Client(a.nodes);
  const exporter = new InMemorySpanExporter();
  const rows = { 'no-sdk': [], sdk: [] };
  await cycles(client, 0.5, 'warm');
  for (let r = 0; r < a.rounds; r++) {
    api.trace.disable();
    rows['no-sdk'].push(await cycles(client, a.seconds, `n${r}`));
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    api.trace.setGlobalTracerProvider(provider);
    rows.sdk.push(await cycles(client, a.seconds, `s${r}`));
    const spans = exporter.getFinishedSpans().length;
    if (spans === 0) throw new Error('the sdk round recorded no spans');
    exporter.reset();
  }
  await client.close();
  const median = (v) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
  const out = {};
  for (const [row, v] of Object.entries(rows)) {
    out[row] = Math.round(median(v));
    console.log(JSON.stringify({ bench: 'node-otel', row, tasks: TASKS, cycles_per_s: out[row], rounds: v.map(Math.round) }));
  }
  console.log(`spans cost ${(100 * (1 - out.sdk / out['no-sdk'])).toFixed(1)}% of the cycles/s with an SDK recording them ` +
    `(${out['no-sdk']} -> ${out.sdk} cycles/s, 2 spans a cycle)`);
}

// ---- the driver: redis-server, the scratch directory, the child ------------

async function main() {
  const a = args();
  const { startRedis } = require(path.join(root, 'bindings', 'node', 'test', 'redis_server.js'));
  const server = a.nodes ? null : await startRedis();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rlc-otel-bench-'));
  try {
    fs.writeFileSync(path.join(dir, 'package.json'), '{"name": "bench", "private": true}');
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error',
      '@opentelemetry/api@1', '@opentelemetry/sdk-trace-base@2'], { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'], timeout: 300000 });
    const copy = path.join(dir, 'otel_bench.js');
    fs.copyFileSync(__filename, copy);
    const nodes = a.nodes || server.uri;
    const argv = [copy, '--seconds', String(a.seconds), '--rounds', String(a.rounds), '--nodes', nodes];
    const code = await new Promise((resolve) => {
      const child = spawn(process.execPath, argv, {
        cwd: dir, stdio: 'inherit',
        env: { ...process.env, RLC_OTEL_BENCH_CHILD: '1', RLC_NODE_MODULE: process.env.RLC_NODE_MODULE || path.join(root, 'bindings', 'node') },
      });
      child.on('exit', (c, sig) => resolve(c ?? sig));
    });
    if (code !== 0) process.exitCode = 1;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
    if (server) await server.stop();
  }
}

if (process.env.RLC_OTEL_BENCH_CHILD) {
  measure().catch((e) => { console.error(e); process.exit(1); });
} else {
  main().catch((e) => { console.error(e); process.exit(1); });
}
