'use strict';
// A Lock through redis-sentinel:// (the engine asks the sentinels where the
// master is, and follows a SENTINEL FAILOVER). Its own group of processes.
const test = require('node:test');
const assert = require('node:assert/strict');
const redlockc = require('..');
const { within } = require('./helpers.js');
const { startSentinelGroup, cli } = require('./sentinel_group.js');

const { Client } = redlockc;

test('a lock goes to the master the sentinels name, and follows a failover', async () => {
  const group = await startSentinelGroup('nodemaster');
  const client = new Client(group.uri, { watchdog_timeout_ms: 6000 });
  try {
    const first = client.lock('ns-basic');
    assert.equal(await within(10000, 'acquire', first.acquire({ wait: 5000 })), true);
    assert.equal(cli(group.masterPort(), 'HLEN', 'ns-basic'), '1', 'the hash is on the master');
    await first.release();
    assert.equal(cli(group.masterPort(), 'EXISTS', 'ns-basic'), '0');

    const started = Date.now();
    const newPort = await group.failover();
    // Followed: a fresh lock is written on the new master within a bound.
    let followed = false;
    for (let i = 0; i < 40 && !followed; i++) {
      const probe = client.lock(`ns-probe-${i}`);
      let ok = false;
      try { ok = await within(5000, 'probe', probe.acquire({ wait: 2000 })); } catch (e) { if (process.env.RLC_DEBUG) console.log('# probe', i, Date.now() - started, e.message); ok = false; }
      if (ok) {
        followed = cli(newPort, 'EXISTS', `ns-probe-${i}`) === '1';
        await probe.release();
      }
      if (!followed) await new Promise((r) => setTimeout(r, 100));
    }
    console.log(`# Node client followed the new master in ${((Date.now() - started) / 1000).toFixed(2)} s`);
    assert.ok(followed, 'the client writes to the new master after the failover');
  } finally {
    await client.close();
    await group.stop();
  }
});
