'use strict';
// Prometheus (prom-client) and OpenTelemetry, as an application has them:
// the optional peers installed from the npm registry into a directory of
// their own, and an application script there (test/observe/*_app.js) that
// uses this binding. The Prometheus case scrapes a registry over HTTP after
// each step; the OpenTelemetry case reads an InMemorySpanExporter.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { installPeers, runIn } = require('./observe/peers.js');
const { serverUri } = require('./helpers.js');

let dir;
test.before(() => { dir = installPeers(); });
test.after(() => { if (dir) fs.rmSync(dir, { recursive: true, force: true }); });

test('prom-client: the metrics scraped over HTTP count what was done, per client label', async () => {
  const out = await runIn(dir, path.join(__dirname, 'observe', 'prom_app.js'), { RLC_TEST_REDIS: serverUri() });
  assert.equal(out.code, 0, `the application failed:\n${out.stdout}\n${out.stderr}`);
  assert.match(out.stdout, /prometheus: ok/);
});

test('OpenTelemetry: spans redlock.acquire and redlock.hold, none without an SDK', async () => {
  const out = await runIn(dir, path.join(__dirname, 'observe', 'otel_app.js'), { RLC_TEST_REDIS: serverUri() });
  assert.equal(out.code, 0, `the application failed:\n${out.stdout}\n${out.stderr}`);
  const { noSdk, spans } = JSON.parse(out.stdout.trim().split('\n').pop());
  assert.equal(noSdk, 0, 'nothing recorded before an SDK was set up');
  const acquires = spans.filter((s) => s.name === 'redlock.acquire');
  const holds = spans.filter((s) => s.name === 'redlock.hold');
  assert.deepEqual(acquires.map((s) => s.attributes['redlock.result']), ['acquired', 'busy', 'acquired'],
    JSON.stringify(spans));
  assert.equal(acquires[0].attributes['redlock.wait_ms'], 1000);
  assert.equal(acquires[2].attributes['redlock.lease_ms'], 150);
  assert.equal(holds.length, 2, JSON.stringify(spans));
  assert.equal(holds[0].status, 0, 'the released hold ended unset (fine)');
  assert.match(holds[0].attributes['redlock.fencing_token'], /^\d+$/);
  assert.equal(holds[1].status, 2, 'the hold whose lease ran out ended with an error');
  assert.deepEqual(holds[1].events, ['exception']);
});
