'use strict';
// Shared by the tests: the real redis-server that tests/runtimes/run.sh
// started (tests/support) is named in RLC_TEST_REDIS; without it, fail.
const assert = require('node:assert/strict');
const net = require('node:net');

function serverUri() {
  const uri = process.env.RLC_TEST_REDIS;
  assert.ok(uri, 'RLC_TEST_REDIS is not set: run tests/runtimes/run.sh');
  return uri;
}

let seq = 0;
// A name no other test (or earlier run) uses on the shared server.
function uniqueName(what) {
  seq += 1;
  return `node-${what}-${process.pid}-${Date.now()}-${seq}`;
}

// Resolves with fn's first event, or rejects after ms (a bound, not a wait).
function within(ms, what, promise) {
  let timer;
  const bound = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
  });
  return Promise.race([promise, bound]).finally(() => clearTimeout(timer));
}

// One command on a connection of its own: the reply's text (a bulk
// string, a status, an integer), null for a null bulk string.
function redis(uri, ...args) {
  const { hostname, port } = new URL(uri.split(',')[0]);
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(port), hostname);
    let buf = Buffer.alloc(0);
    s.on('error', reject);
    s.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      const eol = buf.indexOf('\r\n');
      if (eol < 0) return;
      const line = buf.toString('utf8', 1, eol);
      if (buf[0] !== 0x24) { s.destroy(); resolve(line); return; } // not '$'
      const n = Number(line);
      if (n < 0) { s.destroy(); resolve(null); return; }
      if (buf.length < eol + 2 + n + 2) return;
      s.destroy();
      resolve(buf.toString('utf8', eol + 2, eol + 2 + n));
    });
    s.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('')}`);
  });
}

module.exports = { serverUri, uniqueName, within, redis };
