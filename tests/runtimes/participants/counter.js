'use strict';
// The Node side of the cross-runtime counter (the critical section is
// described in counter.c). Each iteration uses client.withLock, i.e. a fresh
// Lock object, so every acquisition is a new explicit owner.
//   node counter.js URI LOCK DIR ITERATIONS LABEL READY
const fs = require('node:fs');
const path = require('node:path');
const { Client } = require(process.env.RLC_NODE_MODULE || '../../../bindings/node');

function critical(dir, label) {
  const inside = path.join(dir, 'inside');
  let marker = null;
  let overlap = false;
  try {
    marker = fs.openSync(inside, 'wx');
  } catch (e) {
    if (e.code !== 'EEXIST') throw e;
    overlap = true;
  }
  let value = 0;
  try {
    value = parseInt(fs.readFileSync(path.join(dir, 'counter'), 'utf8'), 10) || 0;
  } catch (e) {
    if (e.code !== 'ENOENT') throw e;
  }
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); // 1 ms, in the section
  const tmp = path.join(dir, `counter.${label}`);
  fs.writeFileSync(tmp, `${value + 1}\n`);
  fs.renameSync(tmp, path.join(dir, 'counter'));
  if (marker !== null) {
    fs.closeSync(marker);
    fs.unlinkSync(inside);
  }
  return overlap;
}

async function main() {
  const [uri, name, dir, iterations, label, ready] = process.argv.slice(2);
  const client = new Client(uri);
  let overlaps = 0;
  let errors = 0;
  fs.appendFileSync(ready, `ready ${label}\n`);
  for (let i = 0; i < Number(iterations); i++) {
    try {
      await client.withLock(name, async () => {
        if (critical(dir, label)) overlaps++;
      }, { wait: 60000 });
    } catch (e) {
      console.error(`${label}: iteration ${i}: ${e.name}: ${e.message}`);
      errors++;
    }
  }
  await client.close();
  console.log(`${label} iterations=${iterations} overlaps=${overlaps} errors=${errors}`);
  process.exitCode = overlaps === 0 && errors === 0 ? 0 : 1;
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
