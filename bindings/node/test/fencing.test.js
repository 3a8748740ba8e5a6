'use strict';
// The client option fencing: off by default, a released lock leaves no key
// on the server and fencingToken() throws; on, each hold takes a token from
// the counter redisson_lock_token:{name}, the one key per name that stays.
// Each test has a redis-server of its own, so that it can count every key.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { Client, InvalidArgumentError } = require('..');
const { startRedis } = require('./redis_server.js');

const NAMES = ['orders', 'accounts', 'jobs:7'];
const keys = (port) => execFileSync('redis-cli', ['-p', String(port), '--raw', 'KEYS', '*'],
  { encoding: 'utf8', timeout: 10000 }).split('\n').filter((k) => k !== '').sort();

test('by default a released lock leaves no key, and fencingToken() throws naming the option', async () => {
  const server = await startRedis();
  const client = new Client(server.uri);
  try {
    for (const name of NAMES) {
      const lock = client.lock(name);
      assert.equal(await lock.acquire({ wait: 5000 }), true);
      assert.throws(() => lock.fencingToken(), (err) => {
        assert.ok(err instanceof InvalidArgumentError, `an InvalidArgumentError, got ${err}`);
        assert.match(err.message, /fencing is off/);
        assert.match(err.message, /fencing: true/, 'the message names the option');
        assert.ok(err.message.includes(`'${name}'`), 'and the lock');
        return true;
      });
      await lock.release();
      lock.close();
    }
    assert.deepEqual(keys(server.port), [], 'keys left after release');
  } finally {
    await client.close();
    await server.stop();
  }
});

test('with fencing: true each hold has a token and one counter key per name stays', async () => {
  const server = await startRedis();
  const client = new Client(server.uri, { fencing: true });
  try {
    for (const name of NAMES) {
      const lock = client.lock(name);
      assert.equal(await lock.acquire({ wait: 5000 }), true);
      assert.ok(lock.fencingToken() > 0n, `token ${lock.fencingToken()}`);
      await lock.release();
      lock.close();
    }
    assert.deepEqual(keys(server.port), NAMES.map((n) => `redisson_lock_token:{${n}}`).sort());
  } finally {
    await client.close();
    await server.stop();
  }
});
