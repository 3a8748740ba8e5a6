'use strict';
// A Sentinel group of a test's own: a master, a replica and three sentinels,
// real processes on free 127.0.0.1 ports, stopped by their pids. Short
// down-after / failover timeouts so that a failover takes about a second.
const { execFileSync, spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startRedis, freePort } = require('./redis_server.js');

function cli(port, ...args) {
  return execFileSync('redis-cli', ['-p', String(port), '--raw', ...args.map(String)],
    { encoding: 'utf8', timeout: 5000 }).trim();
}

function tryCli(port, ...args) {
  try { return cli(port, ...args); } catch { return null; }
}

async function until(what, ms, cond) {
  const end = Date.now() + ms;
  for (let i = 0; i < 100000 && Date.now() < end; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  if (!(await cond())) throw new Error(`${what}: not within ${ms} ms`);
}

async function startSentinel(masterPort, name) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rlc-node-sentinel-'));
  const port = await freePort();
  const conf = path.join(dir, 'sentinel.conf');
  fs.writeFileSync(conf, [`port ${port}`, 'bind 127.0.0.1', 'protected-mode no', `dir ${dir}`,
    `sentinel monitor ${name} 127.0.0.1 ${masterPort} 2`,
    `sentinel down-after-milliseconds ${name} 600`,
    `sentinel failover-timeout ${name} 3000`, ''].join('\n'));
  const child = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  let exited = false;
  const gone = new Promise((resolve) => child.once('exit', () => { exited = true; resolve(); }));
  await until('sentinel up', 10000, () => exited || tryCli(port, 'PING') === 'PONG');
  return {
    port,
    async stop() {
      if (!exited) child.kill('SIGKILL');
      await gone;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

function replication(port) {
  const out = tryCli(port, 'INFO', 'replication') || '';
  return Object.fromEntries(out.split(/\r?\n/).map((l) => l.split(':')).filter((p) => p.length === 2));
}

async function startSentinelGroup(name) {
  // Redis 7 waits 5 s before a diskless full sync: the replica would hold nothing.
  const sync = ['--repl-diskless-sync-delay', '0'];
  const master = await startRedis(sync);
  const replica = await startRedis([...sync, '--replicaof', '127.0.0.1', String(master.port)]);
  const servers = [master, replica];
  const sentinels = [];
  const group = {
    name,
    sentinels,
    uri: '',
    masterPort() {
      const out = tryCli(sentinels[0].port, 'SENTINEL', 'get-master-addr-by-name', name);
      return out ? Number(out.split(/\r?\n/)[1]) : null;
    },
    async failover() {
      const old = group.masterPort();
      cli(sentinels[0].port, 'SENTINEL', 'FAILOVER', name);
      await until('failover', 20000, () => {
        const ports = new Set(sentinels.map((s) => {
          const out = tryCli(s.port, 'SENTINEL', 'get-master-addr-by-name', name);
          return out ? Number(out.split(/\r?\n/)[1]) : null;
        }));
        if (ports.size !== 1) return false;
        const [p] = ports;
        return p && p !== old && replication(p).role === 'master';
      });
      return group.masterPort();
    },
    async stop() {
      for (const s of sentinels) await s.stop();
      for (const s of servers) await s.stop();
    },
  };
  try {
    await until('replica in sync', 15000, () => replication(replica.port).master_link_status === 'up');
    for (let i = 0; i < 3; i++) sentinels.push(await startSentinel(master.port, name));
    await until('sentinels see each other and the replica', 20000, () => sentinels.every((s) => {
      const out = tryCli(s.port, 'SENTINEL', 'master', name);
      if (!out) return false;
      const l = out.split(/\r?\n/);
      const field = (k) => Number(l[l.indexOf(k) + 1]);
      return field('num-slaves') >= 1 && field('num-other-sentinels') >= 2;
    }));
  } catch (e) {
    await group.stop();
    throw e;
  }
  group.uri = `redis-sentinel://${sentinels.map((s) => `127.0.0.1:${s.port}`).join(',')}/${name}`;
  return group;
}

module.exports = { startSentinelGroup, cli };
