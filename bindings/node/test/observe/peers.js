'use strict';
// The optional peers (prom-client, @opentelemetry/api and, for the tests,
// @opentelemetry/sdk-trace-base) installed from the npm registry into a
// temporary directory of their own, as an application would have them.
// runIn(dir, script) runs a script copied there (so the application's
// node_modules is where the binding finds them) and returns its output.
const { execFile, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const PEERS = ['prom-client@15', '@opentelemetry/api@1', '@opentelemetry/sdk-trace-base@2'];

function installPeers() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rlc-node-peers-'));
  fs.writeFileSync(path.join(dir, 'package.json'), '{"name": "app", "private": true}');
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...PEERS],
    { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'], timeout: 300000 });
  return dir;
}

// Runs script (a file of test/observe) as the application in dir; resolves
// {code, stdout, stderr}; bounded by ms.
function runIn(dir, script, env, ms = 60000) {
  const copy = path.join(dir, path.basename(script));
  fs.copyFileSync(script, copy);
  return new Promise((resolve) => {
    execFile(process.execPath, [copy], {
      cwd: dir, timeout: ms, env: { ...process.env, ...env, RLC_NODE_BINDING: path.join(__dirname, '..', '..') },
    }, (err, stdout, stderr) => resolve({ code: err ? err.code ?? err.signal : 0, stdout, stderr }));
  });
}

module.exports = { installPeers, runIn };
