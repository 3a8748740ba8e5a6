'use strict';
// The application of observe.test.js's Prometheus case: two clients
// registered on one prom-client Registry (labels 'orders' and 'billing'),
// served over HTTP as an application serves /metrics, scraped after each
// step and checked against what the step did. Exits non-zero on a failed
// check (node:assert's message says what was expected and seen).
const assert = require('node:assert/strict');
const http = require('node:http');
const net = require('node:net');
const prom = require('prom-client');
const { Client, registerMetrics } = require(process.env.RLC_NODE_BINDING);

const uri = process.env.RLC_TEST_REDIS;
const name = `node-prom-${process.pid}-${Date.now()}`;

// "name{a="x",b="y"} 3" lines -> value of the series with these labels.
function value(text, metric, labels) {
  for (const line of text.split('\n')) {
    const m = /^(\w+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== metric) continue;
    const got = Object.fromEntries([...(m[2] || '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v) && Object.keys(got).length === Object.keys(labels).length) {
      return Number(m[3]);
    }
  }
  return undefined;
}

async function scrape(port) {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  assert.equal(res.status, 200);
  return res.text();
}

async function until(ms, what, check) {
  const end = Date.now() + ms;
  for (let i = 0; i < 10000 && !(await check()); i++) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function del(key) { // a raw DEL to the test server
  const { hostname, port } = new URL(uri);
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(port), hostname, () => s.write(`*2\r\n$3\r\nDEL\r\n$${Buffer.byteLength(key)}\r\n${key}\r\n`));
    s.once('data', (d) => { s.end(); resolve(d.toString()); });
    s.once('error', reject);
  });
}

async function main() {
  const registry = new prom.Registry();
  const orders = new Client(uri);
  const billing = new Client(uri, { watchdogTimeoutMs: 300 });
  registerMetrics(orders, { registry, label: 'orders' });
  registerMetrics(billing, { registry, label: 'billing' });
  assert.throws(() => registerMetrics(new Client(uri), { registry, label: 'orders' }), /labelled 'orders'/);
  const server = http.createServer(async (req, res) => {
    res.setHeader('Content-Type', registry.contentType);
    res.end(await registry.metrics());
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  const o = { client: 'orders' };
  const b = { client: 'billing' };

  let text = await scrape(port);
  assert.equal(value(text, 'redlock_locks_held', o), 0, 'nothing held at the start');
  assert.equal(value(text, 'redlock_acquire_wait_seconds_count', { ...o, result: 'acquired' }), 0);

  // orders holds; billing tries once (busy), then waits in the background.
  const mine = orders.lock(name);
  assert.equal(await mine.acquire(), true);
  const theirs = billing.lock(name);
  assert.equal(await theirs.acquire({ wait: 0 }), false);
  const waiting = theirs.acquire({ wait: 10000 });
  await until(3000, 'billing waiting', async () => value(await scrape(port), 'redlock_waiters', b) === 1);
  text = await scrape(port);
  assert.equal(value(text, 'redlock_locks_held', o), 1, text);
  assert.equal(value(text, 'redlock_locks_held', b), 0);
  assert.equal(value(text, 'redlock_acquire_wait_seconds_count', { ...o, result: 'acquired' }), 1);
  assert.equal(value(text, 'redlock_acquire_wait_seconds_count', { ...b, result: 'busy' }), 1);

  // The release hands it over: the waiter's time lands in the buckets.
  await new Promise((r) => setTimeout(r, 100));
  await mine.release();
  assert.equal(await waiting, true);
  text = await scrape(port);
  assert.equal(value(text, 'redlock_waiters', b), 0);
  assert.equal(value(text, 'redlock_locks_held', o), 0);
  assert.equal(value(text, 'redlock_locks_held', b), 1);
  assert.equal(value(text, 'redlock_acquire_wait_seconds_count', { ...b, result: 'acquired' }), 1);
  assert.equal(value(text, 'redlock_acquire_wait_seconds_bucket', { ...b, result: 'acquired', le: '0.05' }), 0,
    'the waiter waited 100 ms or more');
  assert.equal(value(text, 'redlock_acquire_wait_seconds_bucket', { ...b, result: 'acquired', le: '+Inf' }), 1);
  assert.ok(value(text, 'redlock_acquire_wait_seconds_sum', { ...b, result: 'acquired' }) >= 0.1);

  // billing's watchdog (300 ms) renews; then its key is deleted: taken.
  await until(5000, 'a renewal', async () => value(await scrape(port), 'redlock_renewals_total', { ...b, result: 'ok' }) >= 1);
  const lost = new Promise((r) => theirs.once('lost', r));
  await del(name);
  await lost;
  text = await scrape(port);
  assert.equal(value(text, 'redlock_lock_lost_total', { ...b, reason: 'taken' }), 1, text);
  assert.equal(value(text, 'redlock_renewals_total', { ...b, result: 'lost' }), 1);
  assert.equal(value(text, 'redlock_locks_held', b), 0);

  // A fixed lease that runs out: expired (and no renewal was lost).
  const short = orders.lock(`${name}-fixed`);
  const gone = new Promise((r) => short.once('lost', r));
  assert.equal(await short.acquire({ lease: 200 }), true);
  await gone;
  text = await scrape(port);
  assert.equal(value(text, 'redlock_lock_lost_total', { ...o, reason: 'expired' }), 1, text);
  assert.equal(value(text, 'redlock_renewals_total', { ...o, result: 'lost' }), 0);
  assert.match(text, /# TYPE redlock_acquire_wait_seconds histogram/);

  theirs.close(); mine.close(); short.close();
  server.close();
  await Promise.all([orders.close(), billing.close()]);
  console.log('prometheus: ok');
}

main().catch((e) => { console.error(e); process.exit(1); });
