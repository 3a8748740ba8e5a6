'use strict';
// client.metrics() counts what the test does; 'log' events carry the
// library's log lines (a reconnect here), and nothing is logged without a
// listener.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { Client } = require('..');
const { serverUri, uniqueName, within } = require('./helpers.js');

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
