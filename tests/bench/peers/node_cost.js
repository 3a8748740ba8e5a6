'use strict';
/*
 * node_cost.js - node-redlock v5 + ioredis doing exactly N lock cycles on one
 * name (acquire + release, 30 s lease), for peers.py's server time per cycle.
 *
 *   NODE_PATH=<dir>/node_modules node node_cost.js redis://h:p N
 */
const Redis = require('ioredis');
const Redlock = require('redlock').default;

async function main() {
  const [uri, n] = [process.argv[2], Number(process.argv[3])];
  setTimeout(() => process.exit(3), 90000).unref(); // a hard bound
  const client = new Redis(uri);
  const redlock = new Redlock([client]);
  let errors = 0;
  const t0 = Date.now();
  for (let i = 0; i < n && Date.now() - t0 < 60000; i++) {
    try {
      const lock = await redlock.acquire(['bench:cost'], 30000);
      await lock.release();
    } catch (e) {
      errors++;
    }
  }
  process.stdout.write(JSON.stringify({ row: 'cost.node_redlock', n, errors }) + '\n');
  await client.quit();
}

main().catch((e) => {
  process.stderr.write(`node_cost.js: ${e.stack}\n`);
  process.exit(1);
});
