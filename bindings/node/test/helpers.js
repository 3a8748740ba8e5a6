'use strict';
// Shared by the tests: the real redis-server that tests/runtimes/run.sh
// started (tests/support) is named in RLC_TEST_REDIS; without it, fail.
const assert = require('node:assert/strict');

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

module.exports = { serverUri, uniqueName, within };
