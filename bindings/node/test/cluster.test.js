'use strict';
// A Lock through redis-cluster:// (the engine routes each lock to its slot's
// master and waits through sharded pub/sub). Its own 3+3 cluster.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const redlockc = require('..');
const { within } = require('./helpers.js');
const { startRedis, freePort } = require('./redis_server.js');

const { Client } = redlockc;

const cli = (port, ...args) => execFileSync('redis-cli', ['-p', String(port), '--raw', ...args.map(String)],
  { encoding: 'utf8', timeout: 5000 }).trim();

async function startCluster() {
  const nodes = [];
  for (let i = 0; i < 6; i++) {
    // A port above 55535 leaves no room for the cluster bus (port + 10000):
    // redis-server exits at start, and another port is tried.
    for (let attempt = 0; ; attempt++) {
      try {
        nodes.push(await startRedis(['--cluster-enabled', 'yes', '--cluster-node-timeout', '1000',
          '--cluster-port', String(await freePort())]));
        break;
      } catch (e) {
        if (attempt === 9) throw e;
      }
    }
  }
  execFileSync('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`),
    '--cluster-replicas', '1', '--cluster-yes'], { stdio: 'ignore', timeout: 60000 });
  const end = Date.now() + 30000;
  for (let i = 0; i < 1000 && Date.now() < end; i++) {
    if (nodes.every((n) => cli(n.port, 'CLUSTER', 'INFO').includes('cluster_state:ok'))) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  const masters = nodes.filter((n) => cli(n.port, 'ROLE').startsWith('master'));
  return {
    uri: `redis-cluster://${masters.map((n) => `127.0.0.1:${n.port}`).join(',')}`,
    masters,
    async stop() { for (const n of nodes) await n.stop(); },
  };
}

test('locks through redis-cluster:// land on their slots\' masters, and waiters are woken', async () => {
  const cluster = await startCluster();
  const a = new Client(cluster.uri);
  const b = new Client(cluster.uri);
  try {
    const used = new Set();
    for (let i = 0; i < 20; i++) {
      const name = `ncl-${i}`;
      const lock = a.lock(name);
      assert.equal(await within(10000, 'acquire', lock.acquire({ wait: 5000 })), true);
      const on = cluster.masters.filter((m) => cli(m.port, 'EXISTS', name) === '1');
      assert.equal(on.length, 1, `${name} is on exactly one master`);
      used.add(on[0].port);
      await lock.release();
    }
    assert.equal(used.size, 3, 'the names spread over the 3 masters');

    const holder = a.lock('ncl-wake');
    assert.equal(await holder.acquire({ wait: 0 }), true);
    const waiting = b.lock('ncl-wake').acquire({ wait: 20000 });
    await new Promise((r) => setTimeout(r, 200));
    await holder.release();
    assert.equal(await within(15000, 'waiter', waiting), true, 'the waiter gets the lock');

    // Loss push on a cluster: a tracking pair per master. With a 30 s lease
    // the next renewal is 10 s away; a DEL on the key's master is heard now.
    const c = new Client(cluster.uri, { watchdog_timeout_ms: 30000 });
    try {
      const pushed = c.lock('ncl-pushed');
      assert.equal(await pushed.acquire({ wait: 0 }), true);
      const master = cluster.masters.find((m) => cli(m.port, 'EXISTS', 'ncl-pushed') === '1');
      const tracked = () => Number((cli(master.port, 'INFO', 'stats').match(/tracking_total_keys:(\d+)/) || [])[1] || 0);
      for (let i = 0; i < 300 && tracked() < 1; i++) await new Promise((r) => setTimeout(r, 10));
      assert.ok(tracked() >= 1, 'the lock key is registered on its master');
      const lost = new Promise((resolve) => pushed.on('lost', resolve));
      assert.equal(cli(master.port, 'DEL', 'ncl-pushed'), '1');
      const err = await within(2000, "the 'lost' event", lost);
      assert.ok(err instanceof redlockc.LockLostError, `'lost' event: ${err}`);
      pushed.close();
    } finally {
      await c.close();
    }
  } finally {
    await a.close();
    await b.close();
    await cluster.stop();
  }
});
