'use strict';
// The native side: librlcnode.so (src/rlcnode.c) loaded with koffi, and the
// pipe on which its worker threads report results and the blocking client's
// log lines. Only the lock family (and freeing its blocking client) comes
// here; a Lock and fencedSet run on lib/engine_driver.js.
//
// Every blocking libredlockc call becomes a job: rlcn_submit() queues it
// (never blocks), a worker thread of the helper runs it, copies rlc_errmsg()
// on that same thread, and writes a 256-byte record to the pipe. The pipe is
// read here as a socket, so a result is an ordinary event on the JS thread.
const koffi = loadKoffi();
const net = require('node:net');
const { loadNative } = require('../build.js');

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
  channelOpen: lib.func('int rlcn_channel_open(_Out_ void **out)'),
  submit: lib.func('int rlcn_submit(void *ch, int op, void *target, int64_t a, int64_t b, uint64_t tag)'),
  clientNew: lib.func('void *rlcn_client_new(const char *nodes, const char *options, void *res)'),
  version: lib.func('const char *rlcn_version(void)'),
  strerror: lib.func('const char *rlcn_strerror(int rc)'),
  recordSize: lib.func('int rlcn_record_size(void)'),
  clientMetrics: lib.func('int rlcn_client_metrics(void *c, void *out, int n)'),
  // From libredlockc itself (the helper's dependency: dlsym finds them).
  metricName: lib.func('const char *rlc_metric_name(int i)'),
  metricBucketMs: lib.func('int64_t rlc_metric_bucket_ms(int i)'),
  clientSetLog: lib.func('void *rlcn_client_set_log(void *c, void *ch, uint64_t id, int level, void *res)'),
  sinkFree: lib.func('void rlcn_sink_free(void *k)'),
};

const RECORD = 256;
if (fn.recordSize() !== RECORD) {
  throw new Error(`librlcnode.so record size ${fn.recordSize()}, expected ${RECORD}: rebuild it`);
}
const KIND_LOG = 2;

// Job kinds, as enum op in rlcnode.c (the family's: lib/family.js).
const OP = { CLIENT_FREE: 9 };

// A record as {tag, value, rc, kind, msg}.
function decode(buf, at) {
  const end = buf.indexOf(0, at + 24);
  return {
    tag: Number(buf.readBigUInt64LE(at)),
    value: buf.readBigInt64LE(at + 8),
    rc: buf.readInt32LE(at + 16),
    kind: buf.readInt32LE(at + 20),
    msg: buf.toString('utf8', at + 24, end < 0 || end > at + RECORD ? at + RECORD : end),
  };
}

// Out-buffer of the sync calls: the JS thread is the only caller.
const scratch = Buffer.alloc(RECORD);
function syncResult() {
  return decode(scratch, 0);
}

class Channel {
  constructor() {
    const out = [null];
    const fd = fn.channelOpen(out);
    if (fd < 0) throw new Error(`redlockc: cannot open the result pipe (errno ${-fd})`);
    this.ptr = out[0];
    this.pending = new Map(); // job tag -> {resolve, owner}
    this.clients = new Map(); // client id -> WeakRef(Client), for log lines
    this.nextTag = 1;
    this.rest = Buffer.alloc(0);
    this.socket = new net.Socket({ fd, readable: true, writable: false });
    this.socket.on('data', (chunk) => this.onData(chunk));
    // Idle, the pipe must not keep the process alive (like an unref'd timer);
    // while a job is pending it must.
    this.socket.unref();
  }

  // Runs op on a worker thread; resolves with its record (never rejects).
  run(op, target, a = 0, b = 0, owner = null) {
    const tag = this.nextTag++;
    const rc = fn.submit(this.ptr, op, target, a, b, tag);
    if (rc !== 0) {
      return Promise.resolve({ tag, value: 0n, rc: -2, kind: 0, msg: `cannot start a thread (errno ${-rc})` });
    }
    if (this.pending.size === 0) this.socket.ref();
    return new Promise((resolve) => this.pending.set(tag, { resolve, owner }));
  }

  onData(chunk) {
    const buf = this.rest.length ? Buffer.concat([this.rest, chunk]) : chunk;
    let at = 0;
    for (; at + RECORD <= buf.length; at += RECORD) {
      const rec = decode(buf, at);
      if (rec.kind === KIND_LOG) {
        const client = this.clients.get(rec.tag)?.deref();
        if (client) client._log(rec.rc, rec.msg);
        continue;
      }
      const job = this.pending.get(rec.tag);
      if (!job) continue;
      this.pending.delete(rec.tag);
      job.resolve(rec);
    }
    this.rest = Buffer.from(buf.subarray(at));
    if (this.pending.size === 0) this.socket.unref();
  }
}

let channel = null;
function getChannel() {
  if (!channel) channel = new Channel();
  return channel;
}

module.exports = { fn, OP, scratch, syncResult, getChannel, koffi };
