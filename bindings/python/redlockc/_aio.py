"""The asyncio driver of the engine: sockets, one timer, futures. No threads.

The engine (rlc_engine_*, see redlockc.h "Engine (1.1)") is the lock logic
without I/O: it says which connections it wants, what bytes to write on
each, when it wants to be called again, and what happened (events). This
module moves those bytes over asyncio transports, calls it back on one
``loop.call_at`` timer, and turns its DONE events into the results of
futures. Everything runs on the event loop's thread; nothing here blocks.

After every call into the engine the driver "applies" its state, in one C
call (rlcpy_engine_flush, or rlcpy_engine_step for a read or a tick): the
pending bytes are written (an asyncio transport takes them all, buffering
what the socket does not), wanted connections that are not open are
opened, events are dispatched, and the timer is moved earlier if the
engine's deadline is. Operations started by the API (acquire, release,
extend, the queries) ask for an apply on the next loop iteration ("kick"),
so that many started in one iteration leave in one write per connection;
an operation started when no other is in flight is written at once instead.

A reply that reached its socket before the engine's deadline counts even
when the loop was blocked past that deadline: asyncio's loop runs the read
callbacks of an iteration before the timers that came due (the selector is
polled first), so the engine sees the reply before the tick that would time
it out. A fixed lease's end is a deadline like any other: the tick then
gives the LOST event.
"""
import asyncio
import logging
import ssl
import time
import uuid

from . import _metrics
from . import redlockc_core as _core
from ._errors import ClosedError, error_for, invalid

_log = logging.getLogger("redlockc")

_flush = _core.rlcpy_engine_flush
_step = _core.rlcpy_engine_step
_cancel = _core.rlcpy_engine_cancel
_release_kind = _core.rlcpy_engine_release_kind
_release_permits = _core.rlcpy_engine_release_permits
_permit_id = _core.rlcpy_engine_permit_id
_KIND_SEMAPHORE = _core.RLC_KIND_SEMAPHORE
_KIND_PSEMAPHORE = _core.RLC_KIND_PSEMAPHORE

EV_DONE = _core.RLC_EV_DONE
EV_LOST = _core.RLC_EV_LOST
OK = _core.RLC_OK
NOT_ACQUIRED = _core.RLC_NOT_ACQUIRED
E_CANCELED = _core.RLC_E_CANCELED
# Statuses whose message gets what the sockets saw (a refused connect, a
# failed TLS handshake): the engine's message does not know it.
_DETAILED = (_core.RLC_E_CONNECT, _core.RLC_E_TIMEOUT)

# An event tuple (engine.i): (type, status, op, owner, name, token,
# validity_ms, count, message, kind); kind is the lock kind (RLC_KIND_*).
EV_KIND = 9

# Kinds of operation, for what a DONE of an abandoned one needs. QUERY: a
# one-shot round (a query, a force release, a fenced write), whose answer is
# its DONE event's count; the engine cannot cancel one, it ends as it would.
ACQUIRE, RELEASE, EXTEND, QUERY = 1, 2, 3, 4

# After a connection attempt fails, the next on that connection waits this
# long (doubling per failure, up to the cap): a stopped server refuses at
# once, and the engine still wants the connection while it has work.
_RETRY_FIRST_S = 0.01
_RETRY_CAP_S = 0.5


def _tls_settings(engine, any_tls, given):
    """(SSLContext or None, server name or None) for the rediss:// nodes, from
    the tls_* options the engine keeps, or the SSLContext given (ssl_context=)."""
    def opt(name):
        return _core.rlcpy_engine_option(engine, name)
    name = opt("tls_server_name")
    if given is not None:
        if not any_tls:
            raise invalid("ssl_context is given but no node is rediss:// "
                          "(write rediss://host:port for a TLS node)")
        if not isinstance(given, ssl.SSLContext):
            raise TypeError(f"ssl_context must be an ssl.SSLContext, not {type(given).__name__}")
        files = [n for n in ("tls_ca_file", "tls_ca_dir", "tls_cert_file", "tls_verify")
                 if opt(n) is not None]
        if files:
            raise invalid(f"give either ssl_context or {', '.join(files)}, not both "
                          "(the context holds the CAs, the certificate and the checks)")
        return given, name
    if not any_tls:
        return None, None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies chain and name
    ca_file, ca_dir = opt("tls_ca_file"), opt("tls_ca_dir")
    try:
        if ca_file or ca_dir:
            ctx.load_verify_locations(cafile=ca_file, capath=ca_dir)  # these CAs alone
        else:
            ctx.load_default_certs()
    except (OSError, ssl.SSLError) as e:
        raise invalid(f"option {'tls_ca_file' if ca_file else 'tls_ca_dir'}: {e}") from None
    cert = opt("tls_cert_file")
    if cert:
        try:
            ctx.load_cert_chain(cert, opt("tls_key_file"))
        except (OSError, ssl.SSLError) as e:
            raise invalid(f"option tls_cert_file/tls_key_file: {e}") from None
    if opt("tls_verify") == "0":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx, name


def _describe(e, secure, handshake):
    """What a socket's failure says, TLS's own said as such."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return f"TLS handshake failed: {e.verify_message or e.reason} ({e.reason})"
    if isinstance(e, ssl.SSLError):
        text = e.reason or str(e)
        hint = ": the server requires a client certificate (tls_cert_file)" \
            if "CERTIFICATE_REQUIRED" in text else ""
        return f"TLS {'handshake' if handshake else 'connection'} failed: {text}{hint}"
    if isinstance(e, asyncio.TimeoutError) or type(e).__name__ == "TimeoutError":
        return "connect timed out" + (" (TLS handshake included)" if secure else "")
    return str(e) or type(e).__name__


class _Conn(asyncio.Protocol):
    """One connection of the engine (2*node: commands, 2*node+1: subscriber)."""

    __slots__ = ("driver", "k", "transport", "task", "label", "secure")

    def __init__(self, driver, k):
        self.driver = driver
        self.k = k
        self.transport = None
        self.task = None  # the connect (and TLS handshake) in flight
        self.label = ""  # "host:port" it went to, for messages
        self.secure = False

    def connection_made(self, transport):
        self.transport = transport
        d = self.driver
        if d.engine is None or d.conns.get(self.k) is not self:
            transport.abort()  # the client closed while this one connected
            return
        d.retry.pop(self.k, None)
        d.last_error.pop(self.k, None)
        _core.rlcpy_engine_connected(d.engine, self.k, d.now())
        d.apply(_flush(d.engine))

    def data_received(self, data):
        d = self.driver
        if d.engine is None or d.conns.get(self.k) is not self:
            return
        try:
            r = _step(d.engine, self.k, data, d.now())
        except Exception:  # ProtocolError: the engine gave conn up (want_open -1),
            d.apply(_flush(d.engine))  # which the apply closes
            return
        d.apply(r)

    def connection_lost(self, exc):
        self.driver.conn_gone(self, exc)


class Driver:
    """One engine on one event loop: its connections, timer and operations."""

    def __init__(self, nodes, options, connect_timeout_s, ssl_context=None):
        self.engine = _core.rlcpy_engine_new(nodes, str(uuid.uuid4()), options)
        self.uuid, self.addresses = _core.rlcpy_engine_info(self.engine)
        self.tls = _core.rlcpy_engine_tls(self.engine)
        self.last_error = {}  # conn -> what its socket saw last, for messages
        try:
            self.ssl, self.server_name = _tls_settings(self.engine, any(self.tls), ssl_context)
        except Exception:
            _core.rlcpy_engine_free(self.engine)
            self.engine = None
            raise
        self.connect_timeout_s = connect_timeout_s
        self.loop = None
        self.clock = None
        self.conns = {}  # conn -> _Conn, connecting or connected
        self.retry = {}  # conn -> (earliest next attempt, failures) after a failed connect
        self.retry_timer = None
        self.ops = {}  # op id -> (future, kind, sink: what sees its DONE, or None)
        self.timer = None
        self.timer_at = -1
        self.kicked = False
        # WeakMethod: fn(name, owner, status, message, kind), the client's
        self.on_lost = None
        self.idle_waiter = None  # a future close() awaits: set when the engine is idle

    # ---- time and scheduling ------------------------------------------------------

    def now(self):
        """The engine's clock: the loop's (monotonic) time in ms."""
        return int(self.clock() * 1000)

    def bind(self, loop):
        self.loop = loop
        # The loop's clock (call_at's): time.monotonic itself for asyncio's
        # own loops, without the method call around it.
        self.clock = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time \
            else loop.time

    def kick(self):
        """Apply on the next loop iteration (after an operation was started)."""
        if not self.kicked:
            self.kicked = True
            self.loop.call_soon(self._kicked)

    def _kicked(self):
        self.kicked = False
        if self.engine is not None:
            self.apply(_flush(self.engine))

    def _arm(self, deadline):
        # A timer that fires earlier than needed is harmless (the tick finds
        # nothing due and the timer is armed again), so an armed timer is moved
        # only earlier, never cancelled for a later deadline. +1 ms: the loop
        # may run a timer a hair early, and now() rounds down.
        if deadline < 0 or (self.timer is not None and self.timer_at <= deadline):
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = deadline
        self.timer = self.loop.call_at((deadline + 1) / 1000, self._tick)

    def _tick(self):
        self.timer = None
        if self.engine is not None:
            self.apply(_step(self.engine, 0, None, self.now()))

    # ---- the engine's state, applied ----------------------------------------------

    def apply(self, state):
        writes, wants, events, deadline = state
        conns = self.conns
        if writes:
            for k, data in writes:
                c = conns.get(k)
                if c is not None and c.transport is not None:
                    c.transport.write(data)
        for k in wants:
            if k >= 0:
                if k not in conns:
                    self._open(k)
            else:
                self._give_up(-k - 1)
        if events:
            self._dispatch(events)
        self._arm(deadline)
        if self.idle_waiter is not None and _core.rlcpy_engine_idle(self.engine):
            if not self.idle_waiter.done():
                self.idle_waiter.set_result(None)

    def _detail(self, message):
        """message and what the sockets saw last ("127.0.0.1:6380: TLS handshake
        failed: ..."), for a connection error."""
        seen = []
        for k, (label, err) in sorted(self.last_error.items()):
            line = f"{label}: {err}"
            if line not in seen and line not in message:
                seen.append(line)
        if not seen:
            return message
        return f"{message} ({'; '.join(seen)})" if message else "; ".join(seen)

    def _dispatch(self, events):
        ops = self.ops
        for ev in events:
            if ev[0] == EV_DONE and ev[1] in _DETAILED and self.last_error:
                ev = ev[:8] + (self._detail(ev[8]),) + ev[9:]
            if ev[0] == EV_DONE:
                rec = ops.pop(ev[2], None)
                if rec is None:
                    continue
                fut, kind, sink = rec
                if sink is not None:
                    sink._done(kind, ev)
                if not fut.done():
                    fut.set_result(ev)
                elif kind == ACQUIRE and ev[1] == OK:
                    # The task that waited was cancelled and the engine granted
                    # it anyway (the cancel came too late): nobody will release
                    # this level (or these permits), so give it back now.
                    self.give_back(ev, sink)
            elif ev[0] == EV_LOST:
                fn = self.on_lost() if self.on_lost is not None else None
                if fn is not None:
                    fn(ev[4], ev[3], ev[1], ev[8], ev[EV_KIND])
            elif ev[0] == "log":
                # what the blocking client logs too (a node refused loss
                # push; reconnecting; a node that lost the scripts)
                _log.log(_metrics.LEVELS.get(ev[1], logging.INFO), "%s", ev[2])

    # ---- connections --------------------------------------------------------------

    def _open(self, k):
        wait = self.retry.get(k)
        if wait is not None and wait[0] > self.loop.time():
            # Not yet: come back when this connection may be tried again.
            if self.retry_timer is None or wait[0] < self.retry_timer.when():
                if self.retry_timer is not None:
                    self.retry_timer.cancel()
                self.retry_timer = self.loop.call_at(wait[0], self._retry_due)
            return
        c = _Conn(self, k)
        self.conns[k] = c
        c.task = self.loop.create_task(self._connect(c))

    def _retry_due(self):
        self.retry_timer = None
        if self.engine is not None:
            self.apply(_flush(self.engine))

    async def _connect(self, c):
        try:
            # Asked at each connect: a sentinel node's master moves.
            host, port, secure = _core.rlcpy_engine_conn_address(self.engine, c.k)
        except Exception:  # its master became unknown since: wanted no more
            if self.conns.get(c.k) is c:
                del self.conns[c.k]
            return
        c.label, c.secure = (f"{host}:{port}" if port else host), secure
        try:
            if port == 0:
                coro = self.loop.create_unix_connection(lambda: c, host)
            elif secure:
                # The handshake (and the certificate check) is part of the
                # connect: connection_made comes after it.
                coro = self.loop.create_connection(
                    lambda: c, host, port, ssl=self.ssl,
                    server_hostname=self.server_name or host)
            else:
                coro = self.loop.create_connection(lambda: c, host, port)
            await asyncio.wait_for(coro, self.connect_timeout_s)
        except Exception as e:  # OSError, TimeoutError, a bad address, ssl.SSLError...
            if self.conns.get(c.k) is not c or self.engine is None:
                return
            self.last_error[c.k] = (c.label, _describe(e, secure, handshake=True))
            del self.conns[c.k]
            failures = self.retry.get(c.k, (0, 0))[1] + 1
            delay = min(_RETRY_CAP_S, _RETRY_FIRST_S * 2 ** (failures - 1))
            self.retry[c.k] = (self.loop.time() + delay, failures)
            _log.debug("redlockc.asyncio: connection %d to %s:%s failed: %r", c.k, host, port, e)
            _core.rlcpy_engine_closed(self.engine, c.k, self.now())
            self.apply(_flush(self.engine))

    def _give_up(self, k):
        """The engine gave connection k up (a stalled server, bytes not RESP)."""
        c = self.conns.pop(k, None)
        if c is None:
            return
        if c.transport is not None:
            c.transport.abort()  # its connection_lost finds it gone from conns
        _core.rlcpy_engine_closed(self.engine, k, self.now())
        self.kick()

    def conn_gone(self, c, exc=None):
        if self.conns.get(c.k) is not c:
            return
        del self.conns[c.k]
        if exc is not None:
            # TLS 1.3: a server that wants a client certificate says so after
            # the handshake, on the first read
            self.last_error[c.k] = (c.label, _describe(exc, c.secure, handshake=False))
        if self.engine is not None:
            _core.rlcpy_engine_closed(self.engine, c.k, self.now())
            self.apply(_flush(self.engine))

    # ---- operations ---------------------------------------------------------------

    def start(self, kind, op, sink):
        """A future for operation `op`, resolved with its DONE event tuple;
        sink._done(kind, ev) sees that event first (the client's holds)."""
        fut = self.loop.create_future()
        ops = self.ops
        ops[op] = (fut, kind, sink)
        if len(ops) == 1 and not self.kicked:
            # Alone in flight: write now (one loop iteration less per op). With
            # others in flight, the kick gathers every op started in this
            # iteration into one write per connection.
            self.apply(_flush(self.engine))
        else:
            self.kick()
        return fut

    def abandon(self, op, fut, sink):
        """The task awaiting acquire `op` was cancelled: nothing may stay held."""
        if fut.done() and not fut.cancelled():
            # The grant reached the future before the cancel reached the task:
            # the caller never sees True, so nobody would release this level.
            ev = fut.result()
            if ev[1] == OK:
                self.give_back(ev, sink)
            return
        if op in self.ops and self.engine is not None:
            # RLC_NOT_ACQUIRED: it already ended; its DONE, dispatched on the
            # next apply, finds the future cancelled and gives back a grant.
            _cancel(self.engine, op, self.now())
            self.kick()

    def give_back(self, ev, sink):
        """What the grant `ev` (a DONE event, RLC_OK) took goes back, with
        nobody awaiting the result: one level of a lock kind's hold, or a
        semaphore's permits (the count taken, or the expirable grant's id),
        or every name of a multi-lock (its sink's give_back)."""
        back = getattr(sink, "give_back", None)
        if back is not None:
            back(ev)
            return
        kind = ev[EV_KIND]
        if kind != _KIND_SEMAPHORE and kind != _KIND_PSEMAPHORE:
            self.release_level(ev[4], ev[3], sink, kind)
            return
        if self.engine is None:
            return
        try:
            if kind == _KIND_PSEMAPHORE:
                op = _release_permits(self.engine, kind, ev[4], 0,
                                      _permit_id(self.engine, ev[5], ev[7]), self.now())
            else:
                op = _release_permits(self.engine, kind, ev[4], ev[7], None, self.now())
        except Exception as e:  # refused at once: nothing to give back
            _log.debug("redlockc.asyncio: give-back of %r for a cancelled task: %r", ev[4], e)
            return
        self.ops[op] = (self.loop.create_future(), RELEASE, None)
        self.kick()

    def release_level(self, name, owner, sink, kind):
        """Releases one level of owner's hold of name of lock kind `kind`
        (RLC_KIND_*), with nobody awaiting the result."""
        if self.engine is None:
            return
        try:
            op = _release_kind(self.engine, kind, name, owner, self.now())
        except Exception as e:  # refused at once: nothing was held to give back
            _log.debug("redlockc.asyncio: release of %r for a cancelled task: %r", name, e)
            return
        self.ops[op] = (self.loop.create_future(), RELEASE, sink)
        self.kick()

    # ---- shutdown ------------------------------------------------------------------

    async def shutdown(self, bound_s):
        """Ends waits (ClosedError), lets work in flight finish (at most bound_s
        seconds), closes the sockets and frees the engine."""
        e = self.engine
        if e is None:
            return
        if self.loop is not None:
            now = self.now()
            for op, (fut, kind, _sink) in list(self.ops.items()):
                if kind == ACQUIRE:
                    _cancel(e, op, now)
            self.idle_waiter = self.loop.create_future()
            self.apply(_flush(e))
            try:
                await asyncio.wait_for(self.idle_waiter, bound_s)
            except asyncio.TimeoutError:
                _log.debug("redlockc.asyncio: close: work still in flight after %s s", bound_s)
        self.engine = None
        for fut, _kind, _sink in self.ops.values():
            if not fut.done():
                fut.set_exception(ClosedError(_core.RLC_E_CLOSED, "the client is closed"))
        self.ops.clear()
        for c in self.conns.values():
            if c.transport is not None:
                c.transport.abort()
            elif c.task is not None and not c.task.done():
                c.task.cancel()  # a connect or handshake still in flight
        self.conns.clear()
        for t in (self.timer, self.retry_timer):
            if t is not None:
                t.cancel()
        self.timer = self.retry_timer = None
        _core.rlcpy_engine_free(e)

    def error(self, ev):
        return error_for(ev[1], ev[8] or None)
