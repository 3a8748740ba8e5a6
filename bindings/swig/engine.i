/*
 * engine.i - the engine (REDLOCKC_1.1, "a core that never blocks") for
 * Python's asyncio driver (bindings/python/redlockc/_aio.py).
 *
 * %included by redlockc.i (Python only), near its top. The raw rlc_engine_*
 * functions are not wrapped (redlockc.i ignores them for every language);
 * the driver calls the rlcpy_engine_* functions below instead, each shaped
 * for it and self-contained (they do not depend on redlockc.i's typemaps,
 * which come later in the file):
 *   - a lock name is a str (sent as UTF-8) or bytes;
 *   - failures raise the redlockc.Error subclass of the status (rlcpy_raise);
 *   - acquire/release/extend, and the one-shot rounds (query,
 *     force_release, fenced_set), return the operation id (an int): the
 *     answer of a one-shot round is its DONE event's count;
 *   - the *_kind calls are the same for a lock kind (RLC_KIND_*, its first
 *     argument after the engine); the calls without it are RLC_KIND_LOCK's;
 *     a fair lock (RLC_KIND_FAIR) is acquired with rlcpy_engine_acquire_fair
 *     (its thread wait), and released and counted with the *_kind calls;
 *   - a semaphore (RLC_KIND_SEMAPHORE, RLC_KIND_PSEMAPHORE) holds no lock:
 *     its permits are taken, given back, set and counted with the
 *     rlcpy_engine_*_permits calls (ops whose DONE's count is the answer),
 *     and an expirable grant named by rlcpy_engine_permit_id;
 *   - rlcpy_engine_flush(e), the driver's one call after each step, returns
 *     everything a driver must act on, in one crossing; rlcpy_engine_step
 *     feeds bytes read (or a tick) first.
 * An event is the tuple
 *     (type, status, op, owner, name, token, validity_ms, count, message, kind)
 * with name and message as str (invalid UTF-8 replaced) and kind the lock
 * kind of the operation or hold (RLC_KIND_*).
 *
 * The engine never blocks and touches no thread, so every call keeps the GIL
 * (%nothread: no release and re-take around a call of a microsecond).
 */

%{
/* Defined further down, with the binding's other Python helpers. */
static void rlcpy_raise(int status);

/* One event as the tuple above; NULL with an exception set on failure. */
static PyObject *rlcpy_event_tuple(const rlc_engine_event *ev)
{
    PyObject *name = PyUnicode_DecodeUTF8(ev->name ? ev->name : "", (Py_ssize_t)ev->name_len,
                                          "replace");
    const char *msg = ev->message ? ev->message : "";
    PyObject *message = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    PyObject *t = NULL;
    if (name && message)
        t = Py_BuildValue("(iiKKOKLLOL)", ev->type, ev->status, (unsigned long long)ev->op,
                          (unsigned long long)ev->owner, name, (unsigned long long)ev->token,
                          (long long)ev->validity_ms, (long long)ev->count, message,
                          (long long)ev->kind);
    Py_XDECREF(name);
    Py_XDECREF(message);
    return t;
}

/* A C string as str (invalid UTF-8 replaced), for Py_BuildValue's O&. */
static PyObject *rlcpy_text(void *p)
{
    const char *s = p;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

/* A lock name: str (its UTF-8, cached in the object the caller holds) or bytes. */
static int rlcpy_name(PyObject *name, const char **p, size_t *n)
{
    Py_ssize_t len = 0;
    if (PyUnicode_Check(name)) {
        *p = PyUnicode_AsUTF8AndSize(name, &len);
        if (!*p)
            return 0;
    } else if (PyBytes_Check(name)) {
        *p = PyBytes_AS_STRING(name);
        len = PyBytes_GET_SIZE(name);
    } else {
        PyErr_SetString(PyExc_TypeError, "name must be a str or bytes");
        return 0;
    }
    *n = (size_t)len;
    return 1;
}

/* An operation's id, or the status's exception. */
static PyObject *rlcpy_op_result(int status, uint64_t op)
{
    if (status != RLC_OK) {
        rlcpy_raise(status);
        return NULL;
    }
    return PyLong_FromUnsignedLongLong((unsigned long long)op);
}

/* Counters read by rlc_client_metrics or rlc_engine_metrics (n: what it
 * returned, v: 64 of room) as a list of ints, or the status's exception. */
static PyObject *rlcpy_counters(int n, const uint64_t *v)
{
    if (n < 0) {
        rlcpy_raise(n);
        return NULL;
    }
    PyObject *list = PyList_New(n < 64 ? n : 64);
    for (int i = 0; list && i < n && i < 64; i++)
        PyList_SET_ITEM(list, i, PyLong_FromUnsignedLongLong(v[i]));
    return list;
}
%}

/* NULL: rlc_engine_new failed and rlcpy_engine_new raised. */
%typemap(out) rlc_engine *rlcpy_engine_new {
  if (!$1)
    SWIG_fail;
  $result = SWIG_NewPointerObj($1, $1_descriptor, 0);
}

%nothread rlcpy_engine_new;
%nothread rlcpy_engine_free;
%nothread rlcpy_engine_info;
%nothread rlcpy_engine_tls;
%nothread rlcpy_engine_conn_address;
%nothread rlcpy_engine_option;
%nothread rlcpy_engine_connected;
%nothread rlcpy_engine_closed;
%nothread rlcpy_engine_idle;
%nothread rlcpy_engine_acquire;
%nothread rlcpy_engine_release;
%nothread rlcpy_engine_extend;
%nothread rlcpy_engine_cancel;
%nothread rlcpy_engine_query;
%nothread rlcpy_engine_force_release;
%nothread rlcpy_engine_fenced_set;
%nothread rlcpy_engine_forget;
%nothread rlcpy_engine_hold_count;
%nothread rlcpy_engine_validity_ms;
%nothread rlcpy_engine_metrics;
%nothread rlcpy_engine_acquire_kind;
%nothread rlcpy_engine_acquire_fair;
%nothread rlcpy_engine_acquire_multi;
%nothread rlcpy_engine_release_kind;
%nothread rlcpy_engine_acquire_permits;
%nothread rlcpy_engine_permit_id;
%nothread rlcpy_engine_release_permits;
%nothread rlcpy_engine_set_permits;
%nothread rlcpy_engine_available_permits;
%nothread rlcpy_engine_forget_kind;
%nothread rlcpy_engine_hold_count_kind;
%nothread rlcpy_engine_validity_ms_kind;
%nothread rlcpy_engine_flush;
%nothread rlcpy_engine_step;

%inline %{
/* rlc_engine_new; raises (InvalidArgument...) on failure. options may be None. */
rlc_engine *rlcpy_engine_new(const char *nodes, const char *client_uuid, const char *options)
{
    rlc_engine *e = NULL;
    int st = rlc_engine_new(&e, nodes, client_uuid, options);
    if (st != RLC_OK) {
        rlcpy_raise(st < 0 ? st : RLC_E_INVAL);
        return NULL;
    }
    return e;
}

void rlcpy_engine_free(rlc_engine *e)
{
    rlc_engine_free(e);
}

/* (uuid, [(host, port) of each node]); port 0: host is a unix socket's path. */
PyObject *rlcpy_engine_info(rlc_engine *e)
{
    int n = rlc_engine_nodes(e);
    PyObject *nodes = PyList_New(0);
    for (int i = 0; nodes && i < n; i++) {
        const char *host = NULL;
        int port = 0;
        if (rlc_engine_node_address(e, i, &host, &port) != RLC_OK)
            host = "", port = 0;
        PyObject *item = Py_BuildValue("(si)", host ? host : "", port);
        if (!item || PyList_Append(nodes, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(nodes);
            break;
        }
        Py_DECREF(item);
    }
    return nodes ? Py_BuildValue("(sN)", rlc_engine_uuid(e), nodes) : NULL;
}

/* rlc_engine_conn_address: (host, port, tls) where connection k goes now;
 * raises (ConnectError) while a sentinel node's master is unknown. */
PyObject *rlcpy_engine_conn_address(rlc_engine *e, int k)
{
    const char *host = NULL;
    int port = 0, tls = 0;
    int st = rlc_engine_conn_address(e, k, &host, &port, &tls);
    if (st != RLC_OK) {
        rlcpy_raise(st);
        return NULL;
    }
    return Py_BuildValue("(siO)", host ? host : "", port, tls ? Py_True : Py_False);
}

/* [rlc_engine_node_tls of each node]: True for a rediss:// node. */
PyObject *rlcpy_engine_tls(rlc_engine *e)
{
    int n = rlc_engine_nodes(e);
    PyObject *out = PyList_New(n);
    for (int i = 0; out && i < n; i++)
        PyList_SET_ITEM(out, i, PyBool_FromLong(rlc_engine_node_tls(e, i) == 1));
    return out;
}

/* rlc_engine_option: the option's value as written, or None. */
PyObject *rlcpy_engine_option(rlc_engine *e, const char *name)
{
    const char *v = rlc_engine_option(e, name);
    if (!v)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(v, (Py_ssize_t)strlen(v), "replace");
}

void rlcpy_engine_connected(rlc_engine *e, int conn, int64_t now_ms)
{
    rlc_engine_connected(e, conn, now_ms);
}

void rlcpy_engine_closed(rlc_engine *e, int conn, int64_t now_ms)
{
    rlc_engine_closed(e, conn, now_ms);
}

PyObject *rlcpy_engine_idle(rlc_engine *e)
{
    return PyBool_FromLong(rlc_engine_idle(e) == 1);
}

/* The operation's id; raises InvalidArgument (bad name, owner, lease). */
PyObject *rlcpy_engine_acquire(rlc_engine *e, PyObject *name, uint64_t owner, int64_t wait_ms,
                               int64_t lease_ms, int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_acquire(e, p, n, owner, wait_ms, lease_ms, now_ms, &op);
    return rlcpy_op_result(st, op);
}

PyObject *rlcpy_engine_release(rlc_engine *e, PyObject *name, uint64_t owner, int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_release(e, p, n, owner, now_ms, &op);
    return rlcpy_op_result(st, op);
}

PyObject *rlcpy_engine_extend(rlc_engine *e, PyObject *name, uint64_t owner, int64_t lease_ms,
                              int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_extend(e, p, n, owner, lease_ms, now_ms, &op);
    return rlcpy_op_result(st, op);
}

/* rlc_engine_query: what (RLC_Q_*) a quorum of the servers says of name;
 * raises InvalidArgument (bad name, owner, what). */
PyObject *rlcpy_engine_query(rlc_engine *e, PyObject *name, uint64_t owner, int what,
                             int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_query(e, p, n, owner, what, now_ms, &op);
    return rlcpy_op_result(st, op);
}

/* rlc_engine_force_release: deletes name whoever holds it (DONE count: how
 * many nodes had the key); owner is any non-zero id. */
PyObject *rlcpy_engine_force_release(rlc_engine *e, PyObject *name, uint64_t owner,
                                     int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_force_release(e, p, n, owner, now_ms, &op);
    return rlcpy_op_result(st, op);
}

/* rlc_engine_fenced_set: key a str or bytes, value bytes (DONE count: 1
 * written, 0 refused); raises InvalidArgument (an engine of more than one
 * node, token 0, a bad key). */
PyObject *rlcpy_engine_fenced_set(rlc_engine *e, PyObject *key, PyObject *value,
                                  uint64_t token, int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(key, &p, &n))
        return NULL;
    if (!PyBytes_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "value must be bytes");
        return NULL;
    }
    int st = rlc_engine_fenced_set(e, p, n, PyBytes_AS_STRING(value),
                                   (size_t)PyBytes_GET_SIZE(value), token, now_ms, &op);
    return rlcpy_op_result(st, op);
}

/* rlc_engine_forget: owner's hold of name ends here quietly (no renewal, no
 * loss report, no level to nest in); nothing is sent. */
PyObject *rlcpy_engine_forget(rlc_engine *e, PyObject *name, uint64_t owner, int64_t now_ms)
{
    const char *p;
    size_t n;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_forget(e, p, n, owner, now_ms);
    if (st != RLC_OK) {
        rlcpy_raise(st);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* True: the acquire was running and ends with RLC_E_CANCELED; False: it had
 * already ended (its DONE is queued or was read). */
PyObject *rlcpy_engine_cancel(rlc_engine *e, uint64_t op, int64_t now_ms)
{
    int st = rlc_engine_cancel(e, op, now_ms);
    if (st < 0) {
        rlcpy_raise(st);
        return NULL;
    }
    return PyBool_FromLong(st == RLC_OK);
}

/* rlc_engine_validity_ms: ms the hold is certainly still held, or 0. */
PyObject *rlcpy_engine_validity_ms(rlc_engine *e, PyObject *name, uint64_t owner, int64_t now_ms)
{
    const char *p;
    size_t n;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    return PyLong_FromLongLong((long long)rlc_engine_validity_ms(e, p, n, owner, now_ms));
}

PyObject *rlcpy_engine_hold_count(rlc_engine *e, PyObject *name, uint64_t owner)
{
    const char *p;
    size_t n;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    return PyLong_FromLongLong((long long)rlc_engine_hold_count(e, p, n, owner));
}

/* The same calls for a lock kind (RLC_KIND_LOCK, RLC_KIND_WRITE, ...): the
 * engine refuses a kind it does not run (InvalidArgument; 0 for the counts). */
PyObject *rlcpy_engine_acquire_kind(rlc_engine *e, int kind, PyObject *name, uint64_t owner,
                                    int64_t wait_ms, int64_t lease_ms, int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_acquire_kind(e, kind, p, n, owner, wait_ms, lease_ms, now_ms, &op);
    return rlcpy_op_result(st, op);
}

/* A fair lock's acquire (RLC_KIND_FAIR), with its thread wait (ms, > 0):
 * released, forgotten and counted with the *_kind calls above and below. */
PyObject *rlcpy_engine_acquire_fair(rlc_engine *e, PyObject *name, uint64_t owner,
                                    int64_t wait_ms, int64_t lease_ms, int64_t thread_wait_ms,
                                    int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_acquire_fair(e, p, n, owner, wait_ms, lease_ms, thread_wait_ms, now_ms,
                                     &op);
    return rlcpy_op_result(st, op);
}

/* A multi-lock's acquire (rlc_engine_acquire_multi): names a list or tuple
 * of str or bytes (1 to 1024), every name or none; each name is then a
 * lock's (RLC_KIND_LOCK) hold of owner, released and forgotten per name.
 * The pointers are the list's items' own: they live through the call. */
PyObject *rlcpy_engine_acquire_multi(rlc_engine *e, PyObject *names, uint64_t owner,
                                     int64_t wait_ms, int64_t lease_ms, int64_t now_ms)
{
    if (!PyList_Check(names) && !PyTuple_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "names must be a list or tuple of str or bytes");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(names);
    uint64_t op = 0;
    if (n < 1 || n > 1024) { /* the engine's own refusal and message */
        const char *none = "";
        size_t zero = 0;
        return rlcpy_op_result(rlc_engine_acquire_multi(e, &none, &zero, n < 1 ? 0 : 1025, owner,
                                                        wait_ms, lease_ms, now_ms, &op),
                               op);
    }
    const char **v = PyMem_Malloc((size_t)n * sizeof *v);
    size_t *lens = PyMem_Malloc((size_t)n * sizeof *lens);
    if (!v || !lens) {
        PyMem_Free(v);
        PyMem_Free(lens);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!rlcpy_name(PySequence_Fast_GET_ITEM(names, i), &v[i], &lens[i])) {
            PyMem_Free(v);
            PyMem_Free(lens);
            return NULL;
        }
    }
    int st = rlc_engine_acquire_multi(e, v, lens, (int)n, owner, wait_ms, lease_ms, now_ms, &op);
    PyMem_Free(v);
    PyMem_Free(lens);
    return rlcpy_op_result(st, op);
}

PyObject *rlcpy_engine_release_kind(rlc_engine *e, int kind, PyObject *name, uint64_t owner,
                                    int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_release_kind(e, kind, p, n, owner, now_ms, &op);
    return rlcpy_op_result(st, op);
}

/* A semaphore's acquire of permits (1 .. 65535; kind RLC_KIND_SEMAPHORE or
 * RLC_KIND_PSEMAPHORE, whose lease_ms > 0): owner names only this try's
 * record (permits belong to no owner), so each acquire takes an id of its
 * own. Its DONE: count the permits taken, token the grant. */
PyObject *rlcpy_engine_acquire_permits(rlc_engine *e, int kind, PyObject *name, uint64_t owner,
                                       int64_t permits, int64_t wait_ms, int64_t lease_ms,
                                       int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_acquire_permits(e, kind, p, n, owner, permits, wait_ms, lease_ms, now_ms,
                                        &op);
    return rlcpy_op_result(st, op);
}

/* An expirable grant's permit id (32 hex digits, str) from its DONE's token
 * and count. */
PyObject *rlcpy_engine_permit_id(rlc_engine *e, uint64_t token, int64_t permits)
{
    char id[RLC_PERMIT_ID_LEN + 1];
    int st = rlc_engine_permit_id(e, token, permits, id, sizeof id);
    if (st != RLC_OK) {
        rlcpy_raise(st);
        return NULL;
    }
    return PyUnicode_FromString(id);
}

/* Gives permits back: a plain semaphore's `permits` (id None), an expirable
 * one's those named by id (a str; permits unused). DONE's count: the
 * permits given back; an expirable id not held ends RLC_E_LOST. */
PyObject *rlcpy_engine_release_permits(rlc_engine *e, int kind, PyObject *name, int64_t permits,
                                       PyObject *id, int64_t now_ms)
{
    const char *p, *idp = NULL;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    if (id != Py_None) {
        if (!PyUnicode_Check(id)) {
            PyErr_SetString(PyExc_TypeError, "permit id must be a str or None");
            return NULL;
        }
        if (!(idp = PyUnicode_AsUTF8(id)))
            return NULL;
    }
    int st = rlc_engine_release_permits(e, kind, p, n, permits, idp, now_ms, &op);
    return rlcpy_op_result(st, op);
}

/* The count set to permits if the semaphore has none: DONE's count 1 set, 0 not. */
PyObject *rlcpy_engine_set_permits(rlc_engine *e, int kind, PyObject *name, int64_t permits,
                                   int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_set_permits(e, kind, p, n, permits, now_ms, &op);
    return rlcpy_op_result(st, op);
}

/* The permits free now: DONE's count. */
PyObject *rlcpy_engine_available_permits(rlc_engine *e, int kind, PyObject *name, int64_t now_ms)
{
    const char *p;
    size_t n;
    uint64_t op = 0;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_available_permits(e, kind, p, n, now_ms, &op);
    return rlcpy_op_result(st, op);
}

PyObject *rlcpy_engine_forget_kind(rlc_engine *e, int kind, PyObject *name, uint64_t owner,
                                   int64_t now_ms)
{
    const char *p;
    size_t n;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    int st = rlc_engine_forget_kind(e, kind, p, n, owner, now_ms);
    if (st != RLC_OK) {
        rlcpy_raise(st);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *rlcpy_engine_validity_ms_kind(rlc_engine *e, int kind, PyObject *name, uint64_t owner,
                                        int64_t now_ms)
{
    const char *p;
    size_t n;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    return PyLong_FromLongLong(
        (long long)rlc_engine_validity_ms_kind(e, kind, p, n, owner, now_ms));
}

PyObject *rlcpy_engine_hold_count_kind(rlc_engine *e, int kind, PyObject *name, uint64_t owner)
{
    const char *p;
    size_t n;
    if (!rlcpy_name(name, &p, &n))
        return NULL;
    return PyLong_FromLongLong((long long)rlc_engine_hold_count_kind(e, kind, p, n, owner));
}

/* The engine's counters, by index (rlc_engine_metrics), as a list of ints:
 * what rlcpy_metrics gives for a client, so _metrics.py reads both alike. */
PyObject *rlcpy_engine_metrics(rlc_engine *e)
{
    uint64_t v[64];
    int n = rlc_engine_metrics(e, v, 64);
    return rlcpy_counters(n, v);
}

/* What the driver does after every call into the engine, in one crossing:
 *   (writes, wants, events, deadline)
 *   writes   [(conn, bytes)]: everything pending, already counted as sent
 *            (an asyncio transport takes every byte: it buffers what the
 *            socket does not); None when nothing is pending;
 *   wants    [conn]: the connections the engine wants open (conn), and
 *            those it gave up (-conn - 1: close the socket, then say
 *            rlcpy_engine_closed);
 *   events   [event tuple]: every event, in order; None when there are none;
 *   deadline rlc_engine_deadline(): when to tick, or -1. */
PyObject *rlcpy_engine_flush(rlc_engine *e)
{
    PyObject *writes = NULL, *wants = NULL, *events = NULL, *item = NULL;
    int conns = rlc_engine_conns(e);
    if (!(wants = PyList_New(0)))
        goto fail;
    for (int k = 0; k < conns; k++) {
        int want = rlc_engine_want_open(e, k);
        if (want != 0) {
            if (!(item = PyLong_FromLong(want > 0 ? k : -k - 1)) ||
                PyList_Append(wants, item) < 0)
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
    /* the engine's log lines, as ("log", level, text) among the events */
    char wbuf[600];
    int level;
    while (rlc_engine_next_log(e, &level, wbuf, sizeof wbuf) > 0) {
        if (!events && !(events = PyList_New(0)))
            goto fail;
        item = Py_BuildValue("(siO&)", "log", level, rlcpy_text, wbuf);
        if (!item || PyList_Append(events, item) < 0)
            goto fail;
        Py_CLEAR(item);
    }
    if (!writes) {
        Py_INCREF(Py_None);
        writes = Py_None;
    }
    if (!events) {
        Py_INCREF(Py_None);
        events = Py_None;
    }
    return Py_BuildValue("(NNNL)", writes, wants, events, (long long)rlc_engine_deadline(e));
fail:
    Py_XDECREF(item);
    Py_XDECREF(writes);
    Py_XDECREF(wants);
    Py_XDECREF(events);
    return NULL;
}

/* rlc_engine_received (data: bytes) or rlc_engine_tick (data: None), then
 * the flush: the hot path of a read or a timer, in one crossing. Raises
 * ProtocolError when the bytes are not RESP (the engine then counts conn as
 * closed: the driver closes the socket and flushes). */
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
