'use strict';
// Option objects are checked: an unknown name or a time in the wrong unit is
// an InvalidArgumentError naming the option, never silently ignored (an
// ignored `timeout` would make a 500 ms wait wait forever).
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, InvalidArgumentError } = require('..');
const { serverUri, uniqueName } = require('./helpers.js');

test('acquire({timeout}) rejects naming timeout, before touching Redis', async () => {
  const client = new Client(serverUri());
  const lock = client.lock(uniqueName('opt'));
  await assert.rejects(lock.acquire({ timeout: 500 }), (err) => {
    assert.ok(err instanceof InvalidArgumentError, `an InvalidArgumentError, got ${err}`);
    assert.match(err.message, /'timeout'/, 'the message names the option');
    assert.match(err.message, /'wait'/, 'and the documented name');
    return true;
  });
  assert.equal(await lock.isLocked(), false, 'nothing was acquired');
  lock.close();
  await client.close();
});

test('times in the wrong unit are refused naming the option', async () => {
  const client = new Client(serverUri());
  const lock = client.lock(uniqueName('unit'));
  await assert.rejects(lock.acquire({ wait: '5s' }), /wait must be a number of milliseconds/);
  await assert.rejects(lock.acquire({ lease: 0.5 }), /lease is 0.5 ms/);
  await assert.rejects(lock.tryAcquire({ wait: 1 }), /unknown option 'wait'/);
  await assert.rejects(client.withLock(lock.name, async () => 1, { ttl: 5 }), /'ttl'.*'lease'/);
  await assert.rejects(client.acquire(lock.name, { wait: 'x' }), /client.acquire: wait/);
  lock.close();
  await client.close();
});

test('client options: unknown names and non-integer ms are refused', () => {
  assert.throws(() => new Client(serverUri(), { io_timeout: 1 }), /unknown option 'io_timeout'/);
  assert.throws(() => new Client(serverUri(), { io_timeout_ms: '1s' }), /io_timeout_ms must be a whole number/);
  assert.throws(() => new Client(serverUri(), { io_timeout_ms: 1.5 }), /io_timeout_ms/);
});
