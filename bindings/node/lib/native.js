'use strict';
// The native side: librlcnode.so (src/rlcnode.c) loaded with koffi. It wraps
// the library's engine (lib/engine_driver.js binds those calls); what is
// here is what the rest of the package asks the library directly: its
// version, its status names and its metric names. No call here blocks, and
// the helper starts no thread.
const { loadNative } = require('../build.js');
const koffi = loadKoffi();

// koffi, the package's one dependency. Installed from a tarball or a
// registry, npm puts it where require() finds it. `npm install <folder>`
// links the folder instead and installs none of its dependencies (npm's rule
// for folders outside the project), so the application's own node_modules is
// asked too: `npm install <checkout>/bindings/node koffi` then works.
function loadKoffi() {
  try {
    return require('koffi');
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND') throw e;
  }
  const { createRequire } = require('node:module');
  const path = require('node:path');
  const roots = [process.cwd()];
  if (require.main && require.main.filename) roots.push(path.dirname(require.main.filename));
  for (const root of roots) {
    try {
      return createRequire(path.join(root, 'noop.js'))('koffi');
    } catch (e) {
      if (e.code !== 'MODULE_NOT_FOUND') throw e;
    }
  }
  throw new Error("redlockc needs koffi, which is not installed: npm installs it with a packed " +
    "redlockc (npm pack, a registry); with a linked folder run `npm install koffi` too");
}

const lib = loadNative(koffi);

const fn = {
  version: lib.func('const char *rlcn_version(void)'),
  strerror: lib.func('const char *rlcn_strerror(int rc)'),
  recordSize: lib.func('int rlcn_record_size(void)'),
  // From libredlockc itself (the helper's dependency: dlsym finds them).
  metricName: lib.func('const char *rlc_metric_name(int i)'),
  metricBucketMs: lib.func('int64_t rlc_metric_bucket_ms(int i)'),
};

const RECORD = 256;
if (fn.recordSize() !== RECORD) {
  throw new Error(`librlcnode.so record size ${fn.recordSize()}, expected ${RECORD}: rebuild it`);
}

module.exports = { fn, koffi };
