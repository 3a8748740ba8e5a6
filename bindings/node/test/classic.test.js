'use strict';
// The client option format: 'classic' (the string lock of redis-py's Lock,
// node-redlock and redsync), on the suite's real redis-server.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client, InvalidArgumentError } = require('..');
const { serverUri, uniqueName, redis } = require('./helpers.js');

test("format: 'classic' keeps a string key of '<uuid>:<hex>', refuses nesting, leaves no key", async () => {
  const uri = serverUri();
  const client = new Client(uri, { format: 'classic' });
  const name = uniqueName('classic');
  const lock = client.lock(name);
  try {
    assert.equal(await lock.acquire({ wait: 0 }), true, 'a free classic lock is taken');
    assert.equal(await redis(uri, 'TYPE', name), 'string');
    const value = await redis(uri, 'GET', name);
    assert.match(value, new RegExp(`^${client.uuid}:[0-9a-f]+$`), 'the value is <client uuid>:<hex>');
    await assert.rejects(lock.acquire({ wait: 0 }), (err) => {
      assert.ok(err instanceof InvalidArgumentError, `an InvalidArgumentError, got ${err}`);
      assert.match(err.message, /not reentrant/);
      return true;
    });
    assert.equal(await redis(uri, 'GET', name), value, 'the hold stays as it was');
    assert.equal(await lock.holdCount(), 1);
    await lock.release();
    assert.equal(await redis(uri, 'EXISTS', name), '0', 'no key left after release');
  } finally {
    lock.close();
    await client.close();
  }
  assert.throws(() => new Client(uri, { format: 'classic', fencing: true }),
    (err) => err instanceof InvalidArgumentError && /format/.test(err.message));
});
