/*
 * engine.i - the engine (REDLOCKC_1.1, "a core that never blocks") for SWIG.
 *
 * %included by redlockc.i (Python only) before the header: the engine for
 * the asyncio driver (bindings/python/redlockc/_aio.py).
 *
 * Python: the engine's functions never block and touch no thread, so every
 * one keeps the GIL (%nothread: no release/re-take around a call of a few
 * hundred nanoseconds). Shapes, besides redlockc.i's conventions (status ->
 * exception or True/False, out-parameter -> return value):
 *   - a lock name (const char *name, size_t name_len) is a str (UTF-8) or bytes;
 *   - received bytes (const char *data, size_t len) are bytes or a bytearray;
 *   - rlc_engine_pending(e, conn) returns the bytes (b"" when none);
 *   - rlc_engine_acquire/release/extend return the operation id (an int);
 *   - rlc_engine_node_address(e, i) returns (host, port);
 *   - rlc_engine_next_event(e) returns an event tuple (below), or None;
 *   - rlcpy_engine_flush(e), the driver's one call after each step: all of
 *     the above that a driver needs, in one crossing.
 * An event tuple:
 *   (type, status, op, owner, name, token, validity_ms, count, message)
 * with name and message as str (invalid UTF-8 replaced).
 */

#ifdef SWIGPYTHON
%{
/* One event as the tuple above; NULL with an exception set on failure. */
static PyObject *rlcpy_event_tuple(const rlc_engine_event *ev)
{
    PyObject *name = PyUnicode_DecodeUTF8(ev->name ? ev->name : "", (Py_ssize_t)ev->name_len,
                                          "replace");
    const char *msg = ev->message ? ev->message : "";
    PyObject *message = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    PyObject *t = NULL;
    if (name && message)
        t = Py_BuildValue("(iiKKOKLLO)", ev->type, ev->status, (unsigned long long)ev->op,
                          (unsigned long long)ev->owner, name, (unsigned long long)ev->token,
                          (long long)ev->validity_ms, (long long)ev->count, message);
    Py_XDECREF(name);
    Py_XDECREF(message);
    return t;
}
%}

/* Counts and flags, not statuses. */
%typemap(out) int rlc_engine_nodes "$result = PyLong_FromLong($1);"

%typemap(in, numinputs=0) rlc_engine **out (rlc_engine *tmp = NULL) "$1 = &tmp;"
%typemap(argout) rlc_engine **out {
  Py_DECREF($result);
  $result = SWIG_NewPointerObj(*$1, $*1_descriptor, 0);
}

/* A lock name: str (sent as UTF-8) or bytes. The str's UTF-8 is cached in
 * the object, which the caller holds through the call. */
%typemap(in) (const char *name, size_t name_len) {
  if (PyUnicode_Check($input)) {
    Py_ssize_t rlcpy_n = 0;
    $1 = (char *)PyUnicode_AsUTF8AndSize($input, &rlcpy_n);
    if (!$1)
      SWIG_fail;
    $2 = (size_t)rlcpy_n;
  } else if (PyBytes_Check($input)) {
    $1 = PyBytes_AS_STRING($input);
    $2 = (size_t)PyBytes_GET_SIZE($input);
  } else {
    PyErr_SetString(PyExc_TypeError, "name must be a str or bytes");
    SWIG_fail;
  }
}

/* Bytes read from a connection. */
%typemap(in) (const char *data, size_t len) {
  if (PyBytes_Check($input)) {
    $1 = PyBytes_AS_STRING($input);
    $2 = (size_t)PyBytes_GET_SIZE($input);
  } else if (PyByteArray_Check($input)) {
    $1 = PyByteArray_AS_STRING($input);
    $2 = (size_t)PyByteArray_GET_SIZE($input);
  } else {
    PyErr_SetString(PyExc_TypeError, "data must be bytes or a bytearray");
    SWIG_fail;
  }
}

/* rlc_engine_pending: the bytes themselves (a copy: the engine's buffer is
 * valid only until the next call on it). */
%typemap(in, numinputs=0) const char **data (const char *tmp = NULL) "$1 = ($1_ltype)&tmp;"
%typemap(out) size_t rlc_engine_pending "";
%typemap(argout) const char **data {
  $result = PyBytes_FromStringAndSize(result && *$1 ? *$1 : "", (Py_ssize_t)(*$1 ? result : 0));
  if (!$result)
    SWIG_fail;
}

/* The operation id. */
%apply uint64_t *out { uint64_t *op };

/* rlc_engine_node_address -> (host, port). */
%typemap(in, numinputs=0) (const char **host, int *port) (const char *h = NULL, int p = 0)
  "$1 = ($1_ltype)&h; $2 = &p;"
%typemap(argout) (const char **host, int *port) {
  Py_DECREF($result);
  $result = Py_BuildValue("(si)", *$1 ? *$1 : "", *$2);
  if (!$result)
    SWIG_fail;
}

/* rlc_engine_next_event -> an event tuple, or None. */
%typemap(in, numinputs=0) rlc_engine_event *ev (rlc_engine_event tmp) "$1 = &tmp;"
%typemap(argout) rlc_engine_event *ev {
  Py_DECREF($result);
  if (result == 1) {
    $result = rlcpy_event_tuple($1);
    if (!$result)
      SWIG_fail;
  } else {
    Py_INCREF(Py_None);
    $result = Py_None;
  }
}
/* The struct itself: read through the tuples, never built by Python. */
%ignore rlc_engine_event;

%nothread rlc_engine_new;
%nothread rlc_engine_free;
%nothread rlc_engine_nodes;
%nothread rlc_engine_node_address;
%nothread rlc_engine_uuid;
%nothread rlc_engine_want_open;
%nothread rlc_engine_connected;
%nothread rlc_engine_closed;
%nothread rlc_engine_pending;
%nothread rlc_engine_sent;
%nothread rlc_engine_received;
%nothread rlc_engine_deadline;
%nothread rlc_engine_tick;
%nothread rlc_engine_idle;
%nothread rlc_engine_acquire;
%nothread rlc_engine_release;
%nothread rlc_engine_extend;
%nothread rlc_engine_cancel;
%nothread rlc_engine_hold_count;
%nothread rlc_engine_next_event;
%nothread rlcpy_engine_flush;
%nothread rlcpy_engine_step;

%inline %{
/* What the driver does after every call into the engine, in one crossing:
 *   (writes, wants, events, deadline)
 * writes  [(conn, bytes)]: everything pending, already counted as sent
 *         (an asyncio transport takes every byte: it buffers what the
 *         socket does not); None when nothing is pending;
 *   wants   [conn]: the connections the engine wants open;
 *   events  [event tuple]: every event, in order; None when there are none;
 *   deadline rlc_engine_deadline(): when to tick, or -1. */
PyObject *rlcpy_engine_flush(rlc_engine *e)
{
    PyObject *writes = NULL, *wants = NULL, *events = NULL, *item = NULL;
    int conns = 2 * rlc_engine_nodes(e);
    if (!(wants = PyList_New(0)))
        goto fail;
    for (int k = 0; k < conns; k++) {
        if (rlc_engine_want_open(e, k) == 1) {
            if (!(item = PyLong_FromLong(k)) || PyList_Append(wants, item) < 0)
                goto fail;
            Py_CLEAR(item);
        }
        const char *data = NULL;
        size_t n = rlc_engine_pending(e, k, &data);
        if (!n)
            continue;
        if (!writes && !(writes = PyList_New(0)))
            goto fail;
        item = Py_BuildValue("(iy#)", k, data, (Py_ssize_t)n);
        if (!item || PyList_Append(writes, item) < 0)
            goto fail;
        Py_CLEAR(item);
        rlc_engine_sent(e, k, n);
    }
    rlc_engine_event ev;
    while (rlc_engine_next_event(e, &ev) == 1) {
        if (!events && !(events = PyList_New(0)))
            goto fail;
        item = rlcpy_event_tuple(&ev);
        if (!item || PyList_Append(events, item) < 0)
            goto fail;
        Py_CLEAR(item);
    }
    return Py_BuildValue("(NNNL)", writes ? writes : (Py_INCREF(Py_None), Py_None), wants,
                         events ? events : (Py_INCREF(Py_None), Py_None),
                         (long long)rlc_engine_deadline(e));
fail:
    Py_XDECREF(item);
    Py_XDECREF(writes);
    Py_XDECREF(wants);
    Py_XDECREF(events);
    return NULL;
}

/* rlc_engine_received or rlc_engine_tick (data None), then the flush: the
 * hot path of a read or a timer, one crossing. Returns the flush's tuple,
 * or raises (ProtocolError from rlc_engine_received: the engine then
 * treats conn as closed, and the driver closes the socket). */
PyObject *rlcpy_engine_step(rlc_engine *e, int conn, PyObject *data, int64_t now_ms)
{
    if (data == Py_None) {
        rlc_engine_tick(e, now_ms);
    } else {
        char *p;
        Py_ssize_t n;
        if (PyBytes_AsStringAndSize(data, &p, &n) < 0)
            return NULL;
        int st = rlc_engine_received(e, conn, p, (size_t)n, now_ms);
        if (st < 0) {
            rlcpy_raise(st);
            return NULL;
        }
    }
    return rlcpy_engine_flush(e);
}
%}
#endif
