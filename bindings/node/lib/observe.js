// What a Client's Locks do, for those who watch it: Prometheus metrics
// through registerMetrics() (prom-client), and OpenTelemetry spans when
// @opentelemetry/api is installed (a no-op tracer until the program sets up
// an SDK). Both are optional peers, loaded only if the program has them. The
// names and labels are those of the other bindings (Go's promredlock,
// Python's register_metrics):
//   redlock_acquire_wait_seconds{client, result}  histogram: each
//       lock.acquire() from its call to its end; result acquired, busy (the
//       wait ran out), canceled (its signal, or the client closed), error
//   redlock_locks_held{client}       Locks held now (validity not over)
//   redlock_waiters{client}          lock.acquire() calls in progress now
//   redlock_lock_lost_total{client, reason}  expired (a fixed lease ran
//       out), taken (a renewal, loss push or release found it gone),
//       renewal_failed (renewals failed until its validity ran out)
//   redlock_renewals_total{client, result}   ok (the library's count of
//       renewals, Locks and the family), lost (watchdog holds the renewals
//       could not keep)
// The Locks' (engine) operations are what the binding observes itself; the
// lock family's are in client.metrics().
// Spans: redlock.acquire (the wait; attributes redlock.lock, redlock.wait_ms,
// redlock.lease_ms, redlock.result) and redlock.hold (from the acquire to the
// release or close; an error status when lost).
const { createRequire } = require('node:module');
const path = require('node:path');

const RESULTS = ['acquired', 'busy', 'canceled', 'error'];
const REASONS = ['expired', 'taken', 'renewal_failed'];

// An optional peer: from this package's place, else from the application's
// (a linked folder resolves from its own path). null when not installed.
function optional(name) {
  const roots = [__dirname, process.cwd()];
  if (require.main && require.main.filename) roots.push(path.dirname(require.main.filename));
  for (const root of roots) {
    try {
      return createRequire(path.join(root, 'noop.js'))(name);
    } catch (e) {
      if (e.code !== 'MODULE_NOT_FOUND') throw e;
    }
  }
  return null;
}

// ---- OpenTelemetry ---------------------------------------------------------

let otel; // undefined: not looked for yet; null: not installed
function tracer(version) {
  if (otel === undefined) otel = optional('@opentelemetry/api');
  return otel ? otel.trace.getTracer('redlockc', version) : null;
}

// Spans of one acquire and of the hold it takes; all calls no-ops without
// the API. A hold's span is ended by release, loss or close.
function startAcquire(lock, version, waitMs, leaseMs) {
  const t = tracer(version);
  if (!t) return null;
  return t.startSpan('redlock.acquire', {
    kind: otel.SpanKind.CLIENT,
    attributes: { 'redlock.lock': lock.name, 'redlock.wait_ms': waitMs, 'redlock.lease_ms': leaseMs },
  });
}

function endAcquire(span, result, err) {
  if (!span) return;
  span.setAttribute('redlock.result', result);
  if (result === 'error' && err) {
    span.recordException(err);
    span.setStatus({ code: otel.SpanStatusCode.ERROR, message: err.message });
  }
  span.end();
}

// token: the hold's fencing token, 0n without the client option fencing
// (then the span has no token attribute).
function startHold(lock, version, token) {
  const t = tracer(version);
  if (!t) return null;
  const attributes = { 'redlock.lock': lock.name };
  if (token) attributes['redlock.fencing_token'] = String(token);
  return t.startSpan('redlock.hold', { attributes });
}

function endHold(span, err) {
  if (!span) return;
  if (err) {
    span.recordException(err);
    span.setStatus({ code: otel.SpanStatusCode.ERROR, message: err.message });
  }
  span.end();
}

// ---- prom-client -----------------------------------------------------------

// One set of collectors per registry (prom-client refuses a second metric of
// one name); each client's series carry its label. The histogram and the
// lost counter are fed as things happen (from registration on), the gauges
// and the renewals read the client when the registry is collected.
const perRegistry = new WeakMap();

function collectors(prom, registry, bounds) {
  const known = perRegistry.get(registry);
  if (known) return known;
  const clients = new Map(); // label -> {ref: WeakRef(Client), renewals: count seen}
  const each = (fn) => {
    for (const [label, entry] of clients) {
      const client = entry.ref.deref();
      if (client && client._open) fn(label, client, entry);
    }
  };
  const registers = [registry];
  const m = {
    clients,
    wait: new prom.Histogram({
      name: 'redlock_acquire_wait_seconds',
      help: 'Time each lock acquire took, from its call to its end, by result.',
      labelNames: ['client', 'result'], buckets: bounds, registers,
    }),
    held: new prom.Gauge({
      name: 'redlock_locks_held', help: 'Locks held now (their validity not over).',
      labelNames: ['client'], registers,
      collect() { each((label, client) => this.set({ client: label }, client._heldNow())); },
    }),
    waiters: new prom.Gauge({
      name: 'redlock_waiters', help: 'Lock acquires in progress now.',
      labelNames: ['client'], registers,
      collect() { each((label, client) => this.set({ client: label }, client._waiters)); },
    }),
    lost: new prom.Counter({
      name: 'redlock_lock_lost_total', help: 'Holds lost, by reason.',
      labelNames: ['client', 'reason'], registers,
    }),
    renewals: new prom.Counter({
      name: 'redlock_renewals_total',
      help: 'Watchdog renewals: ok, renewed in time; lost, holds the renewals could not keep.',
      labelNames: ['client', 'result'], registers,
      // ok: the library's count (a total: added here by what is new).
      collect() {
        each((label, client, entry) => {
          const total = client.metrics().renewals;
          if (total > entry.renewals) this.inc({ client: label, result: 'ok' }, total - entry.renewals);
          entry.renewals = Math.max(entry.renewals, total);
        });
      },
    }),
  };
  perRegistry.set(registry, m);
  return m;
}

// Adds client's series under label; returns the sink its Locks report to
// and a function that takes the series away again.
function register(prom, registry, client, label, bounds) {
  const m = collectors(prom, registry, bounds);
  const other = m.clients.get(label)?.ref.deref();
  if (other && other._open) throw new Error(`a client labelled '${label}' is registered on this registry already`);
  const entry = { ref: new WeakRef(client), renewals: client.metrics().renewals };
  m.clients.set(label, entry);
  // Every series present from the start, at 0.
  for (const result of RESULTS) m.wait.zero({ client: label, result });
  for (const reason of REASONS) m.lost.inc({ client: label, reason }, 0);
  for (const result of ['ok', 'lost']) m.renewals.inc({ client: label, result }, 0);
  const sink = {
    waited(result, seconds) { m.wait.observe({ client: label, result }, seconds); },
    lostHold(reason, watchdog) {
      m.lost.inc({ client: label, reason });
      if (watchdog) m.renewals.inc({ client: label, result: 'lost' });
    },
  };
  const unregister = () => {
    client._sinks.delete(sink);
    if (m.clients.get(label) !== entry) return;
    m.clients.delete(label);
    for (const result of RESULTS) m.wait.remove({ client: label, result });
    for (const reason of REASONS) m.lost.remove({ client: label, reason });
    for (const result of ['ok', 'lost']) m.renewals.remove({ client: label, result });
    m.held.remove({ client: label });
    m.waiters.remove({ client: label });
  };
  client._sinks.add(sink);
  return unregister;
}

module.exports = { RESULTS, REASONS, optional, register, startAcquire, endAcquire, startHold, endHold };
