"""OpenTelemetry spans of the plain locks, through opentelemetry-api alone.

"redlock.acquire": one acquire() (or ``with``/``async with``), its wait
included; attributes ``redlock.lock`` (the name) and ``redlock.result``
(acquired, busy, error; an exception is recorded and sets status ERROR).
"redlock.hold": from the grant of a hold's first level to its last release,
or to its loss (status ERROR, the loss recorded). Both are children of the
context current at the acquire.

The API is imported when it is installed (the extra ``redlockc[otel]``);
without it every function here is one None check. With the API but no
tracer provider set up (no SDK) no span is made at all; a provider set up
later (``trace.set_tracer_provider``) is used within a second.
"""
import time

from . import redlockc_core as _core

try:
    from opentelemetry import trace as _trace
    from opentelemetry.trace import Status as _Status
    from opentelemetry.trace import StatusCode as _StatusCode
except ImportError:  # no opentelemetry-api: no spans
    _trace = None

_tracer = None if _trace is None else _trace.get_tracer("redlockc", _core.rlc_version())


_live = False  # a tracer provider is set (it stays: the API sets one only once)
_asked_at = float("-inf")  # when the API was last asked, time.monotonic()


def _tracing():
    """The tracer when spans may record, else None. Before a tracer provider
    is set up, the API's proxy makes non-recording spans, which still cost
    ~5 us a pair, and asking the API whether one is set costs ~2 us: it is
    asked at most once a second until one is."""
    global _live, _asked_at
    if _live or _tracer is None:
        return _tracer
    now = time.monotonic()
    if now - _asked_at < 1.0:
        return None
    _asked_at = now
    _live = not isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)
    return _tracer if _live else None


def acquire_started(name):
    """The span of an acquire of lock `name` that starts now (None: none)."""
    tracer = _tracing()
    if tracer is None:
        return None
    return tracer.start_span("redlock.acquire", attributes={"redlock.lock": name})


def acquire_ended(span, result, error=None):
    """The acquire of `span` ended with result (acquired, busy, error)."""
    if span is None:
        return
    span.set_attribute("redlock.result", result)
    if error is not None:
        _failed(span, error)
    span.end()


def hold_started(name):
    """The span of a hold of lock `name` granted now (None: none)."""
    tracer = _tracing()
    if tracer is None:
        return None
    return tracer.start_span("redlock.hold", attributes={"redlock.lock": name})


def hold_ended(span, lost=None):
    """The hold of `span` was released to zero, or lost (with that error)."""
    if span is None:
        return
    if lost is not None:
        _failed(span, lost)
    span.end()


def _failed(span, error):
    if span.is_recording():
        span.record_exception(error)
        span.set_status(_Status(_StatusCode.ERROR, str(error)))
