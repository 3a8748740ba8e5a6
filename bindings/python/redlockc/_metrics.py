"""The client's counters (rlc_client_metrics), its log lines, and Prometheus.

``client.metrics()`` is a dict of counters (a ``redlockc.asyncio`` client's
come from its engine, rlc_engine_metrics: the same counters, turned into the
same dict by as_dict).

Prometheus: ``register_metrics(client, label)`` adds a client of either kind,
under a ``client`` label the application chooses, to the one redlockc
Collector of a ``prometheus_client`` registry (one per registry: two
collectors of the same metric names would be refused by the registry as
duplicated series). ``client.prometheus(label)`` is one client in the text
format (rendered by ``prometheus_client`` when it is importable, else here).
The series are the library's counters (renewals, losses, reconnects, script
reloads) and what the binding counts itself in each client's Stats: how
long each acquire() took, by result, the acquires in progress and the holds
held now.

The C library's log lines go to the ``logging`` logger ``"redlockc"``, which
has a NullHandler: silent until the application configures logging.
"""
import logging
import threading
import time
import weakref
from bisect import bisect_left

from . import redlockc_core as _core

log = logging.getLogger("redlockc")
log.addHandler(logging.NullHandler())

# C levels -> logging levels (the blocking log callback's and the engine's lines).
LEVELS = {_core.RLC_LOG_ERROR: logging.ERROR, _core.RLC_LOG_WARN: logging.WARNING,
          _core.RLC_LOG_INFO: logging.INFO, _core.RLC_LOG_DEBUG: logging.DEBUG}

# The counters of client.metrics() (the C names).
_C_COUNTERS = ("acquires", "busy", "waits", "renewals", "lost", "reconnects", "script_reloads")
# acquire()'s results: the label `result` of redlock_acquire_wait_seconds.
RESULTS = ("acquired", "busy", "error")
# Why a hold was lost: the label `reason` of redlock_lock_lost_total. Its key
# or this owner's field was gone, or its fixed lease ran out (LockLostError);
# or renewals failed until its validity ran out (an I/O error).
EXPIRED_OR_TAKEN, RENEWAL_FAILED = "expired_or_taken", "renewal_failed"
DEFAULT_LABEL = "default"


class LogDispatch:
    """What the C log trampoline calls (any thread, GIL held): level, text."""
    __slots__ = ("uuid",)

    def __init__(self, uuid):
        self.uuid = uuid

    def __call__(self, level, text):
        log.log(LEVELS.get(level, logging.INFO), "%s", text,
                extra={"redlockc_client": self.uuid})

    def __repr__(self):
        return f"<redlockc log dispatch of client {self.uuid}>"


def _bounds():
    """The wait buckets' upper bounds in seconds (the last: inf)."""
    out = []
    for i in range(_core.RLC_M_WAIT_BUCKETS):
        ms = _core.rlc_metric_bucket_ms(i)
        out.append(float("inf") if ms >= 2**63 - 1 else ms / 1000)
    return out


def read(ptr):
    """The counters of the C client ptr as a dict (see Client.metrics)."""
    return as_dict(_core.rlcpy_metrics(ptr))


def read_engine(engine):
    """The counters of the engine (an asyncio client's) as the same dict."""
    return as_dict(_core.rlcpy_engine_metrics(engine))


def as_dict(values):
    """Counter values by index (RLC_M_*, as rlc_client_metrics and
    rlc_engine_metrics give them) as the dict of Client.metrics."""
    names = [_core.rlc_metric_name(i) for i in range(len(values))]
    out = {name: values[i] for i, name in enumerate(names) if name in _C_COUNTERS}
    first = names.index("wait_bucket")
    per_bucket = values[first:first + _core.RLC_M_WAIT_BUCKETS]
    total, cumulative = 0, []
    for bound, n in zip(_bounds(), per_bucket):
        total += n
        cumulative.append((bound, total))
    out["wait_seconds_sum"] = values[names.index("wait_ms_sum")] / 1000
    out["wait_buckets"] = cumulative  # [(le seconds, waits that took <= le)], Prometheus-style
    return out



class Stats:
    """What the binding counts for one client (any thread; one mutex held
    for a few additions): each acquire's duration by result, acquires in
    progress, and holds lost because renewals failed (the library counts
    every loss; the rest are the expired or taken ones)."""
    __slots__ = ("_mu", "_bounds", "waiting", "hist", "renewal_failed")

    def __init__(self):
        self._mu = threading.Lock()
        self._bounds = _bounds()
        self.waiting = 0
        # result -> [per-bucket counts..., sum of seconds, count]
        self.hist = {r: [0] * len(self._bounds) + [0.0, 0] for r in RESULTS}
        self.renewal_failed = 0

    def enter(self):
        """An acquire starts: returns its start time (for leave)."""
        with self._mu:
            self.waiting += 1
        return time.monotonic()

    def leave(self, start, result):
        """The acquire that started at `start` ended with `result` (RESULTS)."""
        took = time.monotonic() - start
        i = bisect_left(self._bounds, took)
        with self._mu:
            self.waiting -= 1
            h = self.hist[result]
            h[i] += 1
            h[-2] += took
            h[-1] += 1

    def lost(self, status):
        """A hold was lost with this status (RLC_E_LOST or an I/O error's)."""
        if status != _core.RLC_E_LOST:
            with self._mu:
                self.renewal_failed += 1

    def snapshot(self):
        with self._mu:
            return self.waiting, {r: list(h) for r, h in self.hist.items()}, self.renewal_failed


def _families(labelled):
    """The metric families of [(label, client)]: (name, type, help,
    [(sample name, labels, value)]), for prometheus_client or the text."""
    rows = []
    for label, client in labelled:
        try:
            m = client.metrics()
        except Exception:  # closed meanwhile: no series for it
            continue
        rows.append((label, m, client._stats.snapshot(), client._locks_held()))
    hist, held, waiters, lost, renewals, reconnects, reloads = ([] for _ in range(7))
    for label, m, (waiting, by_result, renewal_failed), n_held in rows:
        for result, h in by_result.items():
            labels = {"client": label, "result": result}
            total = 0
            for bound, n in zip(_bounds(), h):
                total += n
                hist.append(("redlock_acquire_wait_seconds_bucket",
                             {**labels, "le": _le(bound)}, total))
            hist.append(("redlock_acquire_wait_seconds_sum", labels, h[-2]))
            hist.append(("redlock_acquire_wait_seconds_count", labels, h[-1]))
        held.append(("redlock_locks_held", {"client": label}, n_held))
        waiters.append(("redlock_waiters", {"client": label}, waiting))
        renewal_failed = min(renewal_failed, m["lost"])
        lost.append(("redlock_lock_lost_total", {"client": label, "reason": EXPIRED_OR_TAKEN},
                     m["lost"] - renewal_failed))
        lost.append(("redlock_lock_lost_total", {"client": label, "reason": RENEWAL_FAILED},
                     renewal_failed))
        renewals.append(("redlock_renewals_total", {"client": label, "result": "ok"},
                         m["renewals"]))
        reconnects.append(("redlock_reconnects_total", {"client": label}, m["reconnects"]))
        reloads.append(("redlock_script_reloads_total", {"client": label}, m["script_reloads"]))
    return [
        ("redlock_acquire_wait_seconds", "histogram",
         "How long acquire() took, by result (acquired, busy, error).", hist),
        ("redlock_locks_held", "gauge", "Holds taken and not yet released.", held),
        ("redlock_waiters", "gauge", "acquire() calls in progress.", waiters),
        ("redlock_lock_lost", "counter", "Holds found lost, by reason.", lost),
        ("redlock_renewals", "counter", "Watchdog renewals, by result.", renewals),
        ("redlock_reconnects", "counter", "Connections made again after a first one.",
         reconnects),
        ("redlock_script_reloads", "counter", "A node lost the scripts (NOSCRIPT): loaded again.",
         reloads),
    ]


def _le(bound):
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _num(value):
    return repr(float(value)) if isinstance(value, float) else str(value)


def _escape(value):
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _text(labelled):
    """Prometheus text format 0.0.4, written here."""
    lines = []
    for name, typ, help_text, samples in _families(labelled):
        shown = name + "_total" if typ == "counter" else name
        lines.append(f"# HELP {shown} {help_text}")
        lines.append(f"# TYPE {shown} {typ}")
        for sample, labels, value in samples:
            pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(f"{sample}{{{pairs}}} {_num(value)}")
    return "\n".join(lines) + "\n"


def _check_label(label):
    if not isinstance(label, str) or not label:
        raise TypeError(f"the client label must be a non-empty str, not {label!r}")


class Collector:
    """The redlockc collector of one ``prometheus_client`` registry: every
    client added to it, each under its own ``client`` label. Made and
    registered by :func:`register_metrics` (one per registry)."""

    def __init__(self):
        self._mu = threading.Lock()
        self._clients = {}  # label -> weakref to the client

    def add(self, client, label=DEFAULT_LABEL):
        """Adds client under label. A label another open client has is a
        ValueError (its series would merge two clients' counters); a closed
        or collected client's label is taken over."""
        _check_label(label)
        if not hasattr(client, "_stats"):
            raise TypeError(f"not a redlockc client: {type(client).__name__}")
        with self._mu:
            ref = self._clients.get(label)
            other = ref() if ref is not None else None
            if other is not None and other is not client and not other.closed:
                raise ValueError(f"redlockc metrics: the client label {label!r} is already "
                                 f"registered (client {other.uuid}); give each client "
                                 "its own label")
            for lb, r in list(self._clients.items()):
                if r() is client:
                    del self._clients[lb]  # one label per client: the newest
            self._clients[label] = weakref.ref(client)

    def remove(self, client):
        """Takes client's series out (they disappear from the next scrape)."""
        with self._mu:
            for lb, r in list(self._clients.items()):
                if r() is client or r() is None:
                    del self._clients[lb]

    def _labelled(self):
        with self._mu:
            pairs = [(lb, r()) for lb, r in sorted(self._clients.items())]
        return [(lb, c) for lb, c in pairs if c is not None and not c.closed]

    def collect(self):
        from prometheus_client.metrics_core import Metric
        for name, typ, help_text, samples in _families(self._labelled()):
            family = Metric(name, help_text, typ)
            for sample, labels, value in samples:
                family.add_sample(sample, labels, value)
            yield family

    def describe(self):
        """The families' names, without samples (the registry refuses
        another collector of the same names)."""
        from prometheus_client.metrics_core import Metric
        return [Metric(name, help_text, typ) for name, typ, help_text, _ in _families([])]


_registered_mu = threading.Lock()
_registered = weakref.WeakKeyDictionary()  # prometheus_client registry -> Collector


def register_metrics(client, label=DEFAULT_LABEL, registry=None):
    """Exports client's metrics through ``prometheus_client`` under the label
    ``client=<label>`` (default "default"), in ``registry`` (default
    ``prometheus_client.REGISTRY``, what ``start_http_server`` serves).
    Returns the registry's redlockc Collector."""
    _check_label(label)
    if registry is None:
        from prometheus_client import REGISTRY as registry
    with _registered_mu:
        collector = _registered.get(registry)
        if collector is None:
            collector = Collector()
            registry.register(collector)
            _registered[registry] = collector
    collector.add(client, label)
    return collector


def unregister_metrics(client, registry=None):
    """Takes client's series out of ``registry`` (default
    ``prometheus_client.REGISTRY``)."""
    if registry is None:
        from prometheus_client import REGISTRY as registry
    with _registered_mu:
        collector = _registered.get(registry)
    if collector is not None:
        collector.remove(client)


def prometheus_text(client, label=DEFAULT_LABEL):
    """client's metrics in Prometheus's text exposition format, labelled
    ``client=<label>``."""
    _check_label(label)
    try:
        from prometheus_client import CollectorRegistry, generate_latest
    except ImportError:
        return _text([(label, client)])
    collector = Collector()
    collector.add(client, label)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode("utf-8")
