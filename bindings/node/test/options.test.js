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

// The library's option table (c/src/engine/options.c) is the one list of
// client options: every name in it is taken here, in snake_case and in
// camelCase, and index.d.ts declares both spellings (the one copy, checked).
const fs = require('node:fs');
const path = require('node:path');

function libraryOptions() {
  const source = fs.readFileSync(path.join(__dirname, '..', '..', '..', 'c', 'src', 'engine', 'options.c'), 'utf8');
  const specs = [...source.matchAll(/^\s*\{"(\w+)",\s*(INT|FRACTION|TEXT),\s*FIELD\(\w+\),\s*([\d.]+),/gm)];
  assert.ok(specs.length >= 20, `the option table was read (${specs.length} names)`);
  return specs.map(([, name, kind, min]) => ({ name, kind, min: Number(min) }));
}

const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
// A value the library takes for the option (file options name a file that
// exists; whether it is a good PEM is not this test's question).
function valueFor({ name, kind, min }) {
  if (kind !== 'TEXT') return min;
  return name.endsWith('_file') || name.endsWith('_dir') ? __filename : 'x';
}

test('every option of the library is taken, in snake_case and in camelCase', async () => {
  for (const spec of libraryOptions()) {
    for (const name of [spec.name, camel(spec.name)]) {
      let client;
      try {
        client = new Client(serverUri(), { [name]: valueFor(spec) });
      } catch (err) {
        assert.doesNotMatch(err.message, /unknown option/, `${name} is refused as unknown`);
        continue; // a file option's content, a key without its certificate
      }
      await client.close();
    }
  }
});

test('index.d.ts declares every option of the library in both spellings', () => {
  const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');
  const body = dts.slice(dts.indexOf('interface ClientOptions'));
  const declared = new Set([...body.slice(0, body.indexOf('\n}')).matchAll(/^\s*(\w+)\?:/gm)].map((m) => m[1]));
  const wanted = libraryOptions().flatMap(({ name }) => [name, camel(name)]);
  assert.deepEqual(wanted.filter((n) => !declared.has(n)), [], 'declared in ClientOptions');
  assert.deepEqual([...declared].filter((n) => !wanted.includes(n)), [], 'not options of the library');
});

test('camelCase options take effect: watchdogTimeoutMs sets the lease', async () => {
  const client = new Client(serverUri(), { watchdogTimeoutMs: 10000, ioTimeoutMs: 2000, lossPush: true });
  const lock = client.lock(uniqueName('camel'));
  assert.equal(await lock.acquire({ wait: 0 }), true);
  const ttl = await lock.ttl();
  assert.ok(ttl > 9000 && ttl <= 10000, `a 10 s watchdog lease, PTTL ${ttl}`);
  await lock.release();
  lock.close();
  await client.close();
});

test('a camelCase name the library does not know is refused as written', () => {
  assert.throws(() => new Client(serverUri(), { ioTimeout: 1 }), /unknown option 'ioTimeout'/);
  assert.throws(() => new Client(serverUri(), { ioTimeoutMs: 1, io_timeout_ms: 2 }), /given twice/);
  assert.throws(() => new Client(serverUri(), { keyPrefix: 'a;loss_push=0' }), /keyPrefix must not contain ';'/);
});
