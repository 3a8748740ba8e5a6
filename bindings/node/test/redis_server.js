'use strict';
// A redis-server of a test's (or the benchmark's) own: on a free 127.0.0.1
// port, --save "" --appendonly no, in a temporary directory; stopped by its
// pid. Nothing here ends a process it did not start.
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// Resolves once a connection to port succeeds; rejects after ms.
async function awaitListening(port, ms, exited) {
  const until = Date.now() + ms;
  for (let i = 0; i < 1000 && Date.now() < until; i++) {
    if (exited()) throw new Error(`redis-server on port ${port} exited at start`);
    const ok = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => { s.destroy(); resolve(true); });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`redis-server on port ${port} did not listen within ${ms} ms`);
}

// tls: {certs (a tests/tls/make_certs.sh directory), authClients}: the
// port speaks TLS only (--port 0 --tls-port), with certs' server.crt.
async function startRedis(extra = [], tls = null) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rlc-node-redis-'));
  const port = await freePort();
  const listen = tls ? ['--port', '0', '--tls-port', String(port),
    '--tls-cert-file', path.join(tls.certs, 'server.crt'), '--tls-key-file', path.join(tls.certs, 'server.key'),
    '--tls-ca-cert-file', path.join(tls.certs, 'ca.crt'), '--tls-auth-clients', tls.authClients ? 'yes' : 'no']
    : ['--port', String(port)];
  const child = spawn('redis-server', [...listen, '--bind', '127.0.0.1', '--save', '',
    '--appendonly', 'no', '--dir', dir, ...extra], { stdio: 'ignore' });
  let exited = false;
  const gone = new Promise((resolve) => child.once('exit', () => { exited = true; resolve(); }));
  try {
    await awaitListening(port, 10000, () => exited);
  } catch (e) {
    if (!exited) child.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    uri: `${tls ? 'rediss' : 'redis'}://127.0.0.1:${port}`,
    port,
    pid: child.pid,
    // SIGKILL by default: a server that vanishes, as in a crash.
    async stop(sig = 'SIGKILL') {
      if (!exited) child.kill(sig);
      await gone;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

module.exports = { startRedis, freePort };
