'use strict';
// rediss:// nodes: the engine driver speaks TLS (tls.connect) to a real
// redis-server listening with --tls-port, certificates made for the run by
// tests/tls/make_certs.sh (OpenSSL). What a user can observe: locks work
// over a verified connection; a wrong CA, a wrong server name or a missing
// client certificate end the acquire with an error that says so (and no
// password), within its bound; tls_verify=0 turns the check off.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const redlockc = require('..');
const { uniqueName, within } = require('./helpers.js');
const { startRedis } = require('./redis_server.js');

const { Client, ConnectionError, InvalidArgumentError } = redlockc;
const PASSWORD = 'tls-Pa55-not-for-logs';

let certs;
let open;  // TLS, no client certificate asked, AUTH with PASSWORD
let mtls;  // TLS, a client certificate required (--tls-auth-clients yes)

test.before(async () => {
  certs = fs.mkdtempSync(path.join(os.tmpdir(), 'rlc-node-tls-'));
  execFileSync('bash', [path.join(__dirname, '..', '..', '..', 'tests', 'tls', 'make_certs.sh'), certs]);
  open = await startRedis(['--requirepass', PASSWORD], { certs, authClients: false });
  mtls = await startRedis([], { certs, authClients: true });
});

test.after(async () => {
  if (open) await open.stop('SIGTERM');
  if (mtls) await mtls.stop('SIGTERM');
  fs.rmSync(certs, { recursive: true, force: true });
});

const cert = (name) => path.join(certs, name);
const openUri = (host = '127.0.0.1') => `rediss://:${PASSWORD}@${host}:${open.port}`;

// Takes name on uri, checks a second client is kept out, releases.
async function roundTrip(uri, options) {
  const a = new Client(uri, { ...options, fencing: true });
  const b = new Client(uri, options);
  const name = uniqueName('tls');
  try {
    const la = a.lock(name);
    const lb = b.lock(name);
    assert.equal(await within(10000, 'acquire over TLS', la.acquire({ wait: 5000 })), true);
    assert.ok(la.fencingToken() >= 1n);
    assert.equal(await lb.tryAcquire(), false, 'a second client got a held lock');
    await la.release();
    assert.equal(await lb.tryAcquire(), true, 'the lock was not free after release');
    await lb.release();
    la.close();
    lb.close();
  } finally {
    await a.close();
    await b.close();
  }
}

// The error of an acquire that cannot connect, within a bound (no hang).
async function failure(uri, options) {
  const client = new Client(uri, options);
  try {
    const lock = client.lock(uniqueName('tls-fail'));
    const err = await within(15000, 'a failing TLS acquire', lock.acquire({ wait: 1000 }).then(
      () => assert.fail('the acquire succeeded'), (e) => e));
    lock.close();
    assert.ok(!err.message.includes(PASSWORD), `the password is shown: ${err.message}`);
    return err;
  } finally {
    await client.close();
  }
}

test('acquire and release over rediss:// with the server certificate verified (AUTH inside)', async () => {
  await roundTrip(openUri(), { tls_ca_file: cert('ca.crt') });
  await roundTrip(openUri('localhost'), { tls_ca_file: cert('ca.crt') });
  // The CA as a directory, as OpenSSL's CApath (any file holding PEM).
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rlc-node-cadir-'));
  fs.copyFileSync(cert('ca.crt'), path.join(dir, 'ca.pem'));
  try {
    await roundTrip(openUri(), { tls_ca_dir: dir });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a server certificate from another CA fails the handshake with a clear error', async () => {
  const err = await failure(openUri(), { tls_ca_file: cert('other-ca.crt') });
  assert.ok(err instanceof ConnectionError || err.status === redlockc.STATUS.E_TIMEOUT, `${err.name}: ${err.message}`);
  assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${open.port}: TLS handshake failed: .*certificate`));
});

test('the default CAs do not trust a private CA', async () => {
  const err = await failure(openUri(), {});
  assert.match(err.message, /TLS handshake failed: .*certificate/);
});

test('tls_verify=0 (and false) connects whatever the certificate', async () => {
  await roundTrip(openUri(), { tls_ca_file: cert('other-ca.crt'), tls_verify: 0 });
  await roundTrip(openUri(), { tls_verify: false, tls_server_name: 'wrong.example' });
});

test('a server name the certificate does not carry fails verification', async () => {
  const err = await failure(openUri(), { tls_ca_file: cert('ca.crt'), tls_server_name: 'wrong.example' });
  assert.match(err.message, /TLS handshake failed: .*(altnames|does not match)/i);
  // The name it does carry works, on an address it does not name as such.
  await roundTrip(openUri(), { tls_ca_file: cert('ca.crt'), tls_server_name: 'localhost' });
});

test('a server that requires a client certificate: given, it works; missing, it fails clearly', async () => {
  const uri = `rediss://127.0.0.1:${mtls.port}`;
  await roundTrip(uri, { tls_ca_file: cert('ca.crt'), tls_cert_file: cert('client.crt'), tls_key_file: cert('client.key') });
  await roundTrip(uri, { tls_ca_file: cert('ca.crt'), tls_cert_file: cert('client.pem') });
  const err = await failure(uri, { tls_ca_file: cert('ca.crt') });
  assert.match(err.message, /127\.0\.0\.1:\d+: TLS (handshake|connection) failed: .*certificate required.*tls_cert_file/i);
});

test('bad TLS settings are refused when the client is made, naming the option', () => {
  assert.throws(() => new Client(openUri(), { tls_ca_file: cert('missing.crt') }),
    (e) => e instanceof InvalidArgumentError && /option tls_ca_file: cannot read .*missing\.crt.*ENOENT/.test(e.message));
  assert.throws(() => new Client(openUri(), { tls_cert_file: cert('ca.key') }),
    (e) => e instanceof InvalidArgumentError && /TLS options/.test(e.message));
  assert.throws(() => new Client(openUri(), { tls_key_file: cert('client.key') }),
    (e) => e instanceof InvalidArgumentError && /tls_key_file needs tls_cert_file/.test(e.message));
  assert.throws(() => new Client(`redis://:${PASSWORD}@127.0.0.1:${open.port}`, { tls_ca_file: cert('ca.crt') }),
    (e) => e instanceof InvalidArgumentError && /no node is rediss:\/\//.test(e.message) && !e.message.includes(PASSWORD));
  assert.throws(() => new Client(openUri(), { tls_verify: 2 }),
    (e) => e instanceof InvalidArgumentError && /tls_verify must be an integer from 0 to 1/.test(e.message));
});

test('with rediss:// nodes the lock family works over the engine\'s TLS connections', async () => {
  const client = new Client(openUri(), { tls_ca_file: cert('ca.crt') });
  try {
    const lock = client.lock(uniqueName('tls-query'));
    assert.equal(await lock.isLocked(), false);
    await lock.acquire();
    assert.equal(await lock.isLocked(), true);
    await lock.release();
    const sem = await client.semaphore(uniqueName('tls-sem'), 1); // on the engine's TLS connections
    assert.equal(await sem.tryAcquire(), true);
    assert.equal(await sem.available(), 0);
    await sem.release();
    sem.close();
    const fair = client.fairLock(uniqueName('tls-fair')); // on the engine's TLS connections
    assert.equal(await fair.tryAcquire(), true);
    assert.equal(fair.holdCount(), 1);
    await fair.release();
    fair.close();
    const rw = client.rwlock(uniqueName('tls-rw')); // on the engine's TLS connections
    assert.equal(await rw.writeLock().tryAcquire(), true);
    assert.equal(await rw.mode(), 'write');
    await rw.writeLock().release();
    rw.close();
    assert.equal(typeof client.metrics().acquires, 'number');
    lock.close();
  } finally {
    await client.close();
  }
});
