"""The client's counters (rlc_client_metrics), its log lines, and Prometheus.

``client.metrics()`` is a dict of counters (a ``redlockc.asyncio`` client's
come from its engine, rlc_engine_metrics: the same counters, turned into the
same dict by as_dict); ``client.prometheus()`` the same in Prometheus's text
format (through ``prometheus_client`` when it is importable, else written
here in the same format); ``Collector(*clients)`` registers clients of
either kind with a ``prometheus_client`` registry. The C library's log
lines go to the ``logging`` logger ``"redlockc"``, which has a NullHandler:
silent until the application configures logging.
"""
import logging

from . import redlockc_core as _core

log = logging.getLogger("redlockc")
log.addHandler(logging.NullHandler())

# C levels -> logging levels (the blocking log callback's and the engine's lines).
LEVELS = {_core.RLC_LOG_ERROR: logging.ERROR, _core.RLC_LOG_WARN: logging.WARNING,
          _core.RLC_LOG_INFO: logging.INFO, _core.RLC_LOG_DEBUG: logging.DEBUG}

_COUNTERS = {  # name in C -> (Prometheus name, help)
    "acquires": ("redlockc_acquires", "Acquires that got the lock (nested ones included)."),
    "busy": ("redlockc_busy", "Acquires that ended with the lock still busy."),
    "waits": ("redlockc_waits", "Acquires that found the lock busy and waited."),
    "renewals": ("redlockc_renewals", "Holds renewed by the watchdog."),
    "lost": ("redlockc_lost", "Holds found lost."),
    "reconnects": ("redlockc_reconnects", "Connections made again after a first one."),
    "script_reloads": ("redlockc_script_reloads", "NOSCRIPT answers (scripts sent as EVAL)."),
}
_WAIT_HELP = "How long acquires that waited took, in seconds."


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
    out = {name: values[i] for i, name in enumerate(names) if name in _COUNTERS}
    first = names.index("wait_bucket")
    per_bucket = values[first:first + _core.RLC_M_WAIT_BUCKETS]
    total, cumulative = 0, []
    for bound, n in zip(_bounds(), per_bucket):
        total += n
        cumulative.append((bound, total))
    out["wait_seconds_sum"] = values[names.index("wait_ms_sum")] / 1000
    out["wait_buckets"] = cumulative  # [(le seconds, waits that took <= le)], Prometheus-style
    return out


def _le(bound):
    return "+Inf" if bound == float("inf") else repr(float(bound))


def _text(clients):
    """Prometheus text format 0.0.4, written here."""
    lines = []
    snapshots = [(c.uuid, c.metrics()) for c in clients]
    for key, (name, help_text) in _COUNTERS.items():
        lines.append(f"# HELP {name}_total {help_text}")
        lines.append(f"# TYPE {name}_total counter")
        for uuid, m in snapshots:
            lines.append(f'{name}_total{{client="{uuid}"}} {m[key]}')
    lines.append(f"# HELP redlockc_wait_seconds {_WAIT_HELP}")
    lines.append("# TYPE redlockc_wait_seconds histogram")
    for uuid, m in snapshots:
        for bound, n in m["wait_buckets"]:
            lines.append(f'redlockc_wait_seconds_bucket{{client="{uuid}",le="{_le(bound)}"}} {n}')
        lines.append(f'redlockc_wait_seconds_sum{{client="{uuid}"}} {m["wait_seconds_sum"]}')
        lines.append(f'redlockc_wait_seconds_count{{client="{uuid}"}} {m["waits"]}')
    return "\n".join(lines) + "\n"


class Collector:
    """A prometheus_client collector of these clients' counters:
    ``prometheus_client.REGISTRY.register(redlockc.Collector(client))``."""

    def __init__(self, *clients):
        self.clients = clients

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        snapshots = [(c.uuid, c.metrics()) for c in self.clients if not c.closed]
        for key, (name, help_text) in _COUNTERS.items():
            family = CounterMetricFamily(name, help_text, labels=["client"])
            for uuid, m in snapshots:
                family.add_metric([uuid], m[key])
            yield family
        hist = HistogramMetricFamily("redlockc_wait_seconds", _WAIT_HELP, labels=["client"])
        for uuid, m in snapshots:
            hist.add_metric([uuid], [(_le(b), n) for b, n in m["wait_buckets"]],
                            m["wait_seconds_sum"])
        yield hist


def prometheus_text(*clients):
    """The counters of clients in Prometheus's text exposition format."""
    try:
        from prometheus_client import CollectorRegistry, generate_latest
    except ImportError:
        return _text(clients)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(*clients))
    return generate_latest(registry).decode("utf-8")
