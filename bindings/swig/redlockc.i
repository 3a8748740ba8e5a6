/*
 * redlockc.i - the one SWIG interface for every SWIG-generated binding.
 *
 * The generated module ("redlockc_core") is never used raw by callers: each
 * language wraps it in its own idioms (bindings/python/redlockc/,
 * bindings/lua/redlockc.lua). Shared here: the module, the header, opaque
 * handles. Language parts sit behind #ifdef SWIGPYTHON / #ifdef SWIGLUA:
 * typemaps that turn out-parameters into return values and status codes
 * into the language's error convention.
 */
%module redlockc_core

%{
#include "redlockc.h"
%}

%include <stdint.i>

/* The engine (1.1, rlc_engine_*) is not wrapped raw for any language: Python
 * gets the rlcpy_engine_* functions of engine.i, made for its asyncio
 * driver; Lua gets nothing (Lua 5.4 has no event loop of its own; OpenResty
 * drives the engine through LuaJIT's FFI). */
%rename("$ignore", regextarget=1) "^rlc_engine_";
%ignore rlc_engine_event;
#ifdef SWIGPYTHON
%include "engine.i"
#endif

#ifdef SWIGPYTHON
/* ---- Python (owned by bindings/python) ----
 * The generated module is private: the package bindings/python/redlockc/
 * wraps it. Built with -threads, so the GIL is released around every C call
 * (a blocked acquire never stalls other Python threads), except where
 * %nothread says the call touches Python objects or cannot block.
 *
 * Shape of the generated functions:
 *   - an int return is a status: < 0 raises the redlockc.Error subclass
 *     registered for it (with rlc_errmsg()), else True for RLC_OK and False
 *     for RLC_NOT_ACQUIRED;
 *   - an "out" parameter disappears from the arguments and becomes the
 *     return value (a handle, a bool, an int). */
%{
#include <pthread.h>
#include <time.h>
#include <unistd.h>

/* Exception classes by -status, registered by redlockc/_errors.py at import.
 * Until then (nobody should call us before) failures raise RuntimeError. */
#define RLCPY_MAX_STATUS 32
static PyObject *rlcpy_errors[RLCPY_MAX_STATUS];

/* Raises the class of `status` with (status, detail). rlc_errmsg() is per
 * thread: the wrapper re-took the GIL on the thread that made the call, and
 * no other call ran on it since, so this is that call's detail. */
static void rlcpy_raise(int status)
{
    const char *detail = rlc_errmsg();
    if (!detail || !*detail)
        detail = rlc_strerror(status);
    int i = -status;
    PyObject *cls = i > 0 && i < RLCPY_MAX_STATUS && rlcpy_errors[i] ? rlcpy_errors[i]
                                                                      : PyExc_RuntimeError;
    /* A lock name clipped mid-character must not turn into a UnicodeError. */
    PyObject *text = PyUnicode_DecodeUTF8(detail, (Py_ssize_t)strlen(detail), "replace");
    PyObject *args = text ? Py_BuildValue("(iO)", status, text) : NULL;
    if (args)
        PyErr_SetObject(cls, args);
    Py_XDECREF(args);
    Py_XDECREF(text);
}

#if PY_VERSION_HEX >= 0x030D0000
#define RLCPY_FINALIZING() Py_IsFinalizing()
#else
#define RLCPY_FINALIZING() _Py_IsFinalizing()
#endif

/* The on_lost trampoline, on the client's watchdog thread. `user` is the
 * package's dispatcher object, kept alive by the Lock until rlc_lock_free
 * has returned (which waits for a running callback), so it is valid here.
 * Python code runs with the GIL held; an exception goes to
 * sys.unraisablehook, never further. */
static void rlcpy_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    if (!Py_IsInitialized() || RLCPY_FINALIZING())
        return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *dispatch = (PyObject *)user;
    Py_INCREF(dispatch); /* the callback may drop the last other reference */
    PyObject *r = PyObject_CallFunction(dispatch, "i", reason);
    if (r)
        Py_DECREF(r);
    else
        PyErr_WriteUnraisable(dispatch);
    Py_DECREF(dispatch);
    PyGILState_Release(gil);
}

/* The log trampoline: the library hands lines over where it holds no lock
 * of its own (any thread); Python code runs with the GIL held, an exception
 * goes to sys.unraisablehook. `user` is the package's dispatcher, kept alive
 * by the Client until rlc_client_free has returned. */
static void rlcpy_log(int level, const char *message, void *user)
{
    if (!Py_IsInitialized() || RLCPY_FINALIZING())
        return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *dispatch = (PyObject *)user;
    Py_INCREF(dispatch);
    PyObject *r = PyObject_CallFunction(dispatch, "is", level, message);
    if (r)
        Py_DECREF(r);
    else
        PyErr_WriteUnraisable(dispatch);
    Py_DECREF(dispatch);
    PyGILState_Release(gil);
}

/* got: Lock.acquire()'s record of this call, a list of one bool. */
static int rlcpy_is_record(PyObject *got)
{
    if (PyList_Check(got) && PyList_GET_SIZE(got) == 1)
        return 1;
    PyErr_SetString(PyExc_TypeError, "got must be a list of one bool");
    return 0;
}
%}

/* Status codes -> exceptions (or True/False for RLC_OK/RLC_NOT_ACQUIRED). */
%typemap(out) int {
  if ($1 < 0) {
    rlcpy_raise($1);
    SWIG_fail;
  }
  $result = PyBool_FromLong($1 == RLC_OK);
}

/* Out-parameters -> the return value (the status's True is replaced). */
%typemap(in, numinputs=0) rlc_client **out (rlc_client *tmp = NULL) "$1 = &tmp;"
%typemap(argout) rlc_client **out {
  Py_DECREF($result);
  $result = SWIG_NewPointerObj(*$1, $*1_descriptor, 0);
}
%typemap(in, numinputs=0) rlc_lock **out (rlc_lock *tmp = NULL) "$1 = &tmp;"
%typemap(argout) rlc_lock **out {
  Py_DECREF($result);
  $result = SWIG_NewPointerObj(*$1, $*1_descriptor, 0);
}
%typemap(in, numinputs=0) int *out (int tmp = 0) "$1 = &tmp;"
%typemap(argout) int *out {
  Py_DECREF($result);
  $result = PyBool_FromLong(*$1);
}
%typemap(in, numinputs=0) int64_t *out (int64_t tmp = 0) "$1 = &tmp;"
%typemap(argout) int64_t *out {
  Py_DECREF($result);
  $result = PyLong_FromLongLong((long long)*$1);
}
%typemap(in, numinputs=0) uint64_t *out (uint64_t tmp = 0) "$1 = &tmp;"
%typemap(argout) uint64_t *out {
  Py_DECREF($result);
  $result = PyLong_FromUnsignedLongLong((unsigned long long)*$1);
}

/* rlc_fenced_set: the value is bytes (Client.fenced_set encodes a str), the
 * out-parameter `applied` becomes the return value (True/False). */
%typemap(in) (const char *value, size_t value_len) {
  if (!PyBytes_Check($input)) {
    PyErr_SetString(PyExc_TypeError, "value must be bytes");
    SWIG_fail;
  }
  $1 = PyBytes_AS_STRING($input);
  $2 = (size_t)PyBytes_GET_SIZE($input);
}
%apply int *out { int *applied };

/* A C function pointer cannot come from Python: rlcpy_on_lost replaces it. */
%ignore rlc_lock_on_lost;
/* An out-array and a callback: rlcpy_metrics and rlcpy_set_log replace them. */
%ignore rlc_client_metrics;
%ignore rlc_client_set_log;
%ignore rlc_client_keep_log;
%ignore rlc_client_next_log;

/* These never block: keep the GIL (cheaper). rlcpy_register_error must:
 * it touches Python objects. */
%nothread rlc_version;
%nothread rlc_strerror;
%nothread rlc_errmsg;
%nothread rlc_thread_owner;
%nothread rlcpy_register_error;
/* These release the GIL themselves, around the C call only. */
%nothread rlcpy_acquire;
%nothread rlcpy_acquire_main;
%nothread rlcpy_rwlock_acquire_main;
%nothread rlcpy_fairlock_acquire_main;
%nothread rlcpy_multilock_acquire_main;
%nothread rlcpy_semaphore_acquire_main;
%nothread rlcpy_psemaphore_acquire_main;
%nothread rlcpy_signal_arrived;
%nothread rlcpy_register_set_wakeup_fd;
%nothread rlcpy_undo_acquire;
%nothread rlcpy_metrics;
/* The main thread's wait record: C only. */
%ignore rlcpy_wait;

%inline %{
/* redlockc/_errors.py: the class raised for `status` (a negative code). */
void rlcpy_register_error(int status, PyObject *cls)
{
    int i = -status;
    if (i <= 0 || i >= RLCPY_MAX_STATUS || !PyExceptionClass_Check(cls))
        return;
    Py_INCREF(cls);
    Py_XSETREF(rlcpy_errors[i], cls);
}

/* Routes the lock's on_lost to dispatch(reason), or removes it (None). The
 * caller keeps dispatch alive until rlc_lock_free(l) has returned. Runs
 * without the GIL (the lock's mutex may be briefly busy); it only stores the
 * pointer. */
int rlcpy_on_lost(rlc_lock *l, PyObject *dispatch)
{
    if (dispatch == Py_None)
        return rlc_lock_on_lost(l, NULL, NULL);
    return rlc_lock_on_lost(l, rlcpy_lost, dispatch);
}

/* rlc_lock_acquire for Lock.acquire(): True, False, or raises; on success
 * got[0] becomes True before any Python code can run. Python runs a signal
 * handler (Ctrl-C) at the first bytecode after a call returns, so its
 * KeyboardInterrupt can come after the lock was taken and before acquire()
 * returns True; nobody would release that level, and the watchdog would
 * renew it forever. got[0] tells acquire()'s except clause that there is a
 * level to give back (rlcpy_undo_acquire). */
PyObject *rlcpy_acquire(rlc_lock *l, int64_t wait_ms, int64_t lease_ms, PyObject *got)
{
    if (!rlcpy_is_record(got))
        return NULL;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = rlc_lock_acquire(l, wait_ms, lease_ms);
    Py_END_ALLOW_THREADS
    if (status < 0) {
        rlcpy_raise(status);
        return NULL;
    }
    if (status == RLC_OK) {
        Py_INCREF(Py_True);
        PyList_SetItem(got, 0, Py_True);
    }
    return PyBool_FromLong(status == RLC_OK);
}

/* ---- the main thread's wait, which a signal cancels (redlockc/_interrupt.py).
 * Python's own C signal handler writes each signal's number to its wakeup
 * fd; for the length of the wait that fd is the package's pipe, whose reader
 * thread calls rlcpy_signal_arrived. The swap and its undo happen here, in C,
 * so that no Python signal handler can run between them and leave the pipe
 * installed. Every kind waits the same way: a struct rlcpy_wait names the
 * acquire and the cancel of its handle (rlc_lock_cancel, rlc_rwlock_cancel,
 * ...). */
struct rlcpy_wait {
    int (*acquire)(struct rlcpy_wait *w);
    int (*cancel)(struct rlcpy_wait *w);
    void *handle;
    int64_t n;                       /* permits; a read-write lock: 1 for the write side */
    int64_t wait_ms, lease_ms;
    char id[RLC_PERMIT_ID_LEN + 1];  /* a permit-expirable semaphore's permit id */
};

static pthread_mutex_t rlcpy_wait_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rlcpy_wait_ended = PTHREAD_COND_INITIALIZER;
static struct rlcpy_wait *rlcpy_waiting; /* the main thread's wait, or NULL */
static uint64_t rlcpy_wait_call;     /* that wait's number: the next one is another */
static int rlcpy_wait_signalled;     /* rlcpy_signal_arrived cancelled that wait */
static int rlcpy_forward_fd = -1;    /* the wakeup fd set before the pipe */
static PyObject *rlcpy_set_wakeup_fd; /* signal.set_wakeup_fd, from _interrupt.py */

/* _interrupt.py hands over signal.set_wakeup_fd at import. (Python's C
 * PySignal_SetWakeupFd is not exported.) A builtin called from C runs no
 * bytecode, so no signal handler can run in the middle of the swap. */
void rlcpy_register_set_wakeup_fd(PyObject *fn)
{
    Py_INCREF(fn);
    Py_XSETREF(rlcpy_set_wakeup_fd, fn);
}

/* Sets Python's wakeup fd; the previous one, or -2 if it cannot be set here
 * (not the main thread: the caller then waits without it). */
static int rlcpy_swap_wakeup_fd(int fd)
{
    PyObject *r = rlcpy_set_wakeup_fd ? PyObject_CallFunction(rlcpy_set_wakeup_fd, "i", fd)
                                      : NULL;
    long previous = r ? PyLong_AsLong(r) : -2;
    Py_XDECREF(r);
    PyErr_Clear();
    return (int)previous;
}

/* w->acquire(w) without the GIL, with wake_fd (the pipe) as Python's wakeup
 * fd meanwhile. Its status; *signalled says a signal cancelled it. */
static int rlcpy_wait_main(struct rlcpy_wait *w, int wake_fd, int *signalled)
{
    int status;
    int previous = rlcpy_swap_wakeup_fd(wake_fd);
    if (previous == -2)
        wake_fd = -1;
    pthread_mutex_lock(&rlcpy_wait_mu);
    rlcpy_waiting = wake_fd >= 0 ? w : NULL;
    rlcpy_wait_call++;
    rlcpy_wait_signalled = 0;
    if (wake_fd >= 0)
        rlcpy_forward_fd = previous;
    pthread_mutex_unlock(&rlcpy_wait_mu);
    Py_BEGIN_ALLOW_THREADS
    status = w->acquire(w);
    Py_END_ALLOW_THREADS
    pthread_mutex_lock(&rlcpy_wait_mu);
    rlcpy_waiting = NULL;
    *signalled = rlcpy_wait_signalled;
    pthread_cond_broadcast(&rlcpy_wait_ended);
    pthread_mutex_unlock(&rlcpy_wait_mu);
    if (wake_fd >= 0)
        rlcpy_swap_wakeup_fd(previous);
    return status;
}

/* The Python result of a main-thread wait: None if a signal cancelled it
 * (nothing kept; its handler runs as soon as Python code does, and the
 * caller waits again if that handler returns), else raises, or True/False
 * (a permit-expirable semaphore: its id or False). What was taken is
 * recorded in got[0] before any Python code can run (see rlcpy_acquire). */
static PyObject *rlcpy_wait_result(struct rlcpy_wait *w, PyObject *got, int wake_fd,
                                   int with_id)
{
    if (!rlcpy_is_record(got))
        return NULL;
    int signalled = 0;
    int status = rlcpy_wait_main(w, wake_fd, &signalled);
    if (status == RLC_E_CANCELED && signalled)
        Py_RETURN_NONE;
    if (status < 0) {
        rlcpy_raise(status);
        return NULL;
    }
    if (status != RLC_OK)
        return PyBool_FromLong(0);
    PyObject *taken = with_id ? PyUnicode_FromString(w->id) : PyBool_FromLong(1);
    if (!taken)
        return NULL;
    Py_INCREF(taken);
    PyList_SetItem(got, 0, taken);
    return taken;
}

static int rlcpy_lock_acquire_w(struct rlcpy_wait *w)
{
    return rlc_lock_acquire(w->handle, w->wait_ms, w->lease_ms);
}

static int rlcpy_lock_cancel_w(struct rlcpy_wait *w)
{
    return rlc_lock_cancel(w->handle);
}

static int rlcpy_rwlock_acquire_w(struct rlcpy_wait *w)
{
    return w->n ? rlc_rwlock_write_acquire(w->handle, w->wait_ms, w->lease_ms)
                : rlc_rwlock_read_acquire(w->handle, w->wait_ms, w->lease_ms);
}

static int rlcpy_rwlock_cancel_w(struct rlcpy_wait *w)
{
    return rlc_rwlock_cancel(w->handle);
}

static int rlcpy_fairlock_acquire_w(struct rlcpy_wait *w)
{
    return rlc_fairlock_acquire(w->handle, w->wait_ms, w->lease_ms);
}

static int rlcpy_fairlock_cancel_w(struct rlcpy_wait *w)
{
    return rlc_fairlock_cancel(w->handle);
}

static int rlcpy_multilock_acquire_w(struct rlcpy_wait *w)
{
    return rlc_multilock_acquire(w->handle, w->wait_ms, w->lease_ms);
}

static int rlcpy_multilock_cancel_w(struct rlcpy_wait *w)
{
    return rlc_multilock_cancel(w->handle);
}

static int rlcpy_semaphore_acquire_w(struct rlcpy_wait *w)
{
    return rlc_semaphore_acquire(w->handle, w->n, w->wait_ms);
}

static int rlcpy_semaphore_cancel_w(struct rlcpy_wait *w)
{
    return rlc_semaphore_cancel(w->handle);
}

static int rlcpy_psemaphore_acquire_w(struct rlcpy_wait *w)
{
    return rlc_psemaphore_acquire(w->handle, w->n, w->wait_ms, w->lease_ms, w->id);
}

static int rlcpy_psemaphore_cancel_w(struct rlcpy_wait *w)
{
    return rlc_psemaphore_cancel(w->handle);
}

/* As rlcpy_acquire, for the main thread (rlcpy_wait_result says what it returns). */
PyObject *rlcpy_acquire_main(rlc_lock *l, int64_t wait_ms, int64_t lease_ms, PyObject *got,
                             int wake_fd)
{
    struct rlcpy_wait w = {rlcpy_lock_acquire_w, rlcpy_lock_cancel_w, l, 0, wait_ms, lease_ms,
                           ""};
    return rlcpy_wait_result(&w, got, wake_fd, 0);
}

/* The family's acquires for the main thread (redlockc/_family.py), the same way. */
PyObject *rlcpy_rwlock_acquire_main(rlc_rwlock *l, int write, int64_t wait_ms,
                                    int64_t lease_ms, PyObject *got, int wake_fd)
{
    struct rlcpy_wait w = {rlcpy_rwlock_acquire_w, rlcpy_rwlock_cancel_w, l, write != 0,
                           wait_ms, lease_ms, ""};
    return rlcpy_wait_result(&w, got, wake_fd, 0);
}

PyObject *rlcpy_fairlock_acquire_main(rlc_fairlock *l, int64_t wait_ms, int64_t lease_ms,
                                      PyObject *got, int wake_fd)
{
    struct rlcpy_wait w = {rlcpy_fairlock_acquire_w, rlcpy_fairlock_cancel_w, l, 0, wait_ms,
                           lease_ms, ""};
    return rlcpy_wait_result(&w, got, wake_fd, 0);
}

PyObject *rlcpy_multilock_acquire_main(rlc_multilock *m, int64_t wait_ms, int64_t lease_ms,
                                       PyObject *got, int wake_fd)
{
    struct rlcpy_wait w = {rlcpy_multilock_acquire_w, rlcpy_multilock_cancel_w, m, 0, wait_ms,
                           lease_ms, ""};
    return rlcpy_wait_result(&w, got, wake_fd, 0);
}

PyObject *rlcpy_semaphore_acquire_main(rlc_semaphore *s, int64_t permits, int64_t wait_ms,
                                       PyObject *got, int wake_fd)
{
    struct rlcpy_wait w = {rlcpy_semaphore_acquire_w, rlcpy_semaphore_cancel_w, s, permits,
                           wait_ms, 0, ""};
    return rlcpy_wait_result(&w, got, wake_fd, 0);
}

PyObject *rlcpy_psemaphore_acquire_main(rlc_psemaphore *s, int64_t permits, int64_t wait_ms,
                                        int64_t lease_ms, PyObject *got, int wake_fd)
{
    struct rlcpy_wait w = {rlcpy_psemaphore_acquire_w, rlcpy_psemaphore_cancel_w, s, permits,
                           wait_ms, lease_ms, ""};
    return rlcpy_wait_result(&w, got, wake_fd, 1);
}

/* The pipe's reader read `data`: passes it on to the wakeup fd it replaced
 * (asyncio's, say), and cancels the main thread's wait. A cancel spares an
 * acquire that had not read its cancel count yet, and the signal may have
 * come just before: so it cancels again every 20 ms until the wait has
 * returned. The GIL is released meanwhile: the waiter needs it back. */
PyObject *rlcpy_signal_arrived(PyObject *data)
{
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "data must be bytes");
        return NULL;
    }
    const char *buf = PyBytes_AS_STRING(data);
    Py_ssize_t len = PyBytes_GET_SIZE(data);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&rlcpy_wait_mu);
    if (rlcpy_forward_fd >= 0)
        (void)!write(rlcpy_forward_fd, buf, (size_t)len);
    struct rlcpy_wait *w = rlcpy_waiting;
    uint64_t call = rlcpy_wait_call;
    if (w)
        rlcpy_wait_signalled = 1;
    /* w lives on the waiting thread's stack until it takes this mutex again */
    while (w && rlcpy_waiting == w && rlcpy_wait_call == call) {
        w->cancel(w);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 20 * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rlcpy_wait_ended, &rlcpy_wait_mu, &until);
    }
    pthread_mutex_unlock(&rlcpy_wait_mu);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* The client's counters, by index (rlc_client_metrics), as a list of ints. */
PyObject *rlcpy_metrics(rlc_client *c)
{
    uint64_t v[64];
    int n = rlc_client_metrics(c, v, 64);
    return rlcpy_counters(n, v);
}

/* Routes the client's log lines at or below level to dispatch(level, text),
 * or silences them (None). The caller keeps dispatch alive until
 * rlc_client_free(c) has returned. */
int rlcpy_set_log(rlc_client *c, int level, PyObject *dispatch)
{
    if (dispatch == Py_None)
        return rlc_client_set_log(c, 0, NULL, NULL);
    return rlc_client_set_log(c, level, rlcpy_log, dispatch);
}

/* Releases the level rlcpy_acquire recorded in got, once (got[0] becomes
 * False), for acquire() about to raise. Its failure is not reported: the
 * exception already on its way is what the caller must see, and the library
 * drops the level even when the release fails (it then expires with its
 * lease instead of being renewed). */
PyObject *rlcpy_undo_acquire(rlc_lock *l, PyObject *got)
{
    if (!rlcpy_is_record(got))
        return NULL;
    if (PyList_GET_ITEM(got, 0) == Py_True) {
        Py_INCREF(Py_False);
        PyList_SetItem(got, 0, Py_False);
        Py_BEGIN_ALLOW_THREADS
        (void)rlc_lock_release(l);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}
%}
#endif

#ifdef SWIGLUA
/* Metrics one counter at a time (rlclua_metric). The log callback runs on
 * other threads too (the watchdog's), where no lua_State may be entered: Lua
 * gets the lines through a queue (rlclua_log_*, below) it drains itself. */
%ignore rlc_client_metrics;
%ignore rlc_client_set_log;
%ignore rlc_client_keep_log;
%ignore rlc_client_next_log;
%ignore rlc_metric_bucket_ms;
/* ---- Lua 5.4 (owned by bindings/lua) ----
 * The generated module redlockc_core is private: bindings/lua/redlockc.lua
 * is what callers require. Every generated function returns a fixed shape:
 *
 *     status, detail, value
 *
 *   status  the C status, a Lua integer (RLC_OK, RLC_NOT_ACQUIRED, RLC_E_*);
 *   detail  nil on RLC_OK, else rlc_errmsg(). It is copied inside the same
 *           C call: rlc_errmsg() belongs to the OS thread and a later call
 *           on it (a __gc finalizer run by the next allocation) could
 *           replace it before Lua code asked;
 *   value   the out-parameter, if the function has one (nil unless RLC_OK).
 *
 * Numbers: SWIG's default Lua typemaps move C integers through lua_Number,
 * so counts and milliseconds would arrive as floats (5.0). Here every
 * integer crosses as a lua_Integer, both ways. In: a number with an exact
 * integer value (5 or 5.0, as luaL_checkinteger takes); a string or 5.5 is
 * refused with an error, because it is a programming error. */

/* Integers in. uint64_t (owner ids) takes the lua_Integer's bits: a negative
 * id becomes >= 2^63, which rlc_lock_new refuses with RLC_E_INVAL. */
%{
#include <limits.h>
%}
%define RLCLUA_INTEGER_IN(CTYPE, IN_RANGE)
%typemap(in) CTYPE %{
  {
    int rlclua_isnum = 0;
    lua_Integer rlclua_v = 0;
    if (lua_type(L, $input) == LUA_TNUMBER)
      rlclua_v = lua_tointegerx(L, $input, &rlclua_isnum);
    if (!rlclua_isnum || !(IN_RANGE))
      SWIG_fail_arg("$symname", $argnum, "integer");
    $1 = ($1_ltype)rlclua_v;
  }
%}
%enddef
RLCLUA_INTEGER_IN(int, rlclua_v >= INT_MIN && rlclua_v <= INT_MAX)
RLCLUA_INTEGER_IN(int64_t, 1)
RLCLUA_INTEGER_IN(uint64_t, 1)

/* An int result is always a status: status, detail. */
%typemap(out) int %{
  lua_pushinteger(L, (lua_Integer)$1);
  if ($1 == RLC_OK)
    lua_pushnil(L);
  else
    lua_pushstring(L, rlc_errmsg());
  SWIG_arg += 2;
%}

/* rlc_thread_owner: 2^62 + n fits a lua_Integer. */
%typemap(out) uint64_t %{
  lua_pushinteger(L, (lua_Integer)$1);
  SWIG_arg++;
%}

/* Out-parameters: the third value; nil unless the status is RLC_OK (the
 * library writes them only then). */
%typemap(in, numinputs=0) rlc_client **out ($*1_ltype rlclua_tmp = 0),
                          rlc_lock **out ($*1_ltype rlclua_tmp = 0),
                          int *out ($*1_ltype rlclua_tmp = 0),
                          int64_t *out ($*1_ltype rlclua_tmp = 0),
                          uint64_t *out ($*1_ltype rlclua_tmp = 0)
  "$1 = &rlclua_tmp;"
%typemap(argout) rlc_client **out, rlc_lock **out %{
  if (result == RLC_OK)
    SWIG_NewPointerObj(L, *$1, $*1_descriptor, 0);
  else
    lua_pushnil(L);
  SWIG_arg++;
%}
%typemap(argout) int *out %{
  if (result == RLC_OK)
    lua_pushboolean(L, *$1 != 0);
  else
    lua_pushnil(L);
  SWIG_arg++;
%}
%typemap(argout) int64_t *out, uint64_t *out %{
  if (result == RLC_OK)
    lua_pushinteger(L, (lua_Integer)*$1);
  else
    lua_pushnil(L);
  SWIG_arg++;
%}

/* rlc_fenced_set: any Lua string (binary-safe) as the value; `applied` is
 * the third value, a boolean. */
%typemap(in) (const char *value, size_t value_len) %{
  if (lua_type(L, $input) != LUA_TSTRING)
    SWIG_fail_arg("$symname", $argnum, "string");
  $1 = ($1_ltype)lua_tolstring(L, $input, &$2);
%}
%apply int *out { int *applied };

%inline %{
/* Counter i of c (rlc_client_metrics): status, detail, value; RLC_E_INVAL
 * past the last counter. */
int rlclua_metric(rlc_client *c, int i, uint64_t *out)
{
    uint64_t v[64];
    int n = rlc_client_metrics(c, v, 64);
    if (n < 0)
        return n;
    if (i < 0 || i >= n || i >= 64)
        return RLC_E_INVAL;
    *out = v[i];
    return RLC_OK;
}

/* The bound of wait bucket i in ms (INT64_MAX: none): status, detail, value. */
int rlclua_bucket_ms(int i, int64_t *out)
{
    int64_t ms = rlc_metric_bucket_ms(i);
    if (ms < 0)
        return (int)ms;
    *out = ms;
    return RLC_OK;
}
%}

/* client:logs(): rlclua_log_push, the client's rlc_client_set_log callback,
 * queues each line on whatever thread the library calls it from;
 * rlclua_log_take, on the Lua thread, takes them all. At most RLCLUA_LOG_MAX
 * wait; past that the newest are counted as dropped. The queue outlives
 * the callback: rlclua_log_free only after rlc_client_free has returned. */
%{
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#define RLCLUA_LOG_MAX 256
struct rlclua_line {
    struct rlclua_line *next;
    int level;
    char text[]; /* NUL-terminated */
};
struct rlclua_logq {
    pthread_mutex_t mu;
    struct rlclua_line *head, *tail;
    size_t n, dropped;
};

static void rlclua_log_push(int level, const char *message, void *user)
{
    struct rlclua_logq *q = user;
    size_t len = strlen(message);
    struct rlclua_line *line = malloc(sizeof *line + len + 1);
    pthread_mutex_lock(&q->mu);
    if (!line || q->n >= RLCLUA_LOG_MAX) {
        q->dropped++;
        free(line);
    } else {
        line->next = NULL;
        line->level = level;
        memcpy(line->text, message, len + 1);
        if (q->tail)
            q->tail->next = line;
        else
            q->head = line;
        q->tail = line;
        q->n++;
    }
    pthread_mutex_unlock(&q->mu);
}
%}
%inline %{
typedef struct rlclua_logq rlclua_logq;

/* A new, empty queue (nil when out of memory). */
rlclua_logq *rlclua_log_new(void)
{
    rlclua_logq *q = calloc(1, sizeof *q);
    if (q && pthread_mutex_init(&q->mu, NULL) != 0) {
        free(q);
        q = NULL;
    }
    return q;
}

/* Routes c's lines at or below max_level into q: status, detail. */
int rlclua_log_attach(rlc_client *c, int max_level, rlclua_logq *q)
{
    return rlc_client_set_log(c, max_level, rlclua_log_push, q);
}

/* Frees q and its lines; the client that fed it must be freed already. */
void rlclua_log_free(rlclua_logq *q)
{
    if (!q)
        return;
    while (q->head) {
        struct rlclua_line *next = q->head->next;
        free(q->head);
        q->head = next;
    }
    pthread_mutex_destroy(&q->mu);
    free(q);
}
%}
%native(rlclua_log_take) int rlclua_log_take(lua_State *L);
%wrapper %{
/* rlclua_log_take(q) -> { {level, text}, ... }, dropped: every queued line,
 * oldest first, and how many were dropped since the last take. */
static int rlclua_log_take(lua_State *L)
{
    rlclua_logq *q = NULL;
    if (!SWIG_IsOK(SWIG_ConvertPtr(L, 1, (void **)&q, SWIGTYPE_p_rlclua_logq, 0)) || !q)
        return luaL_argerror(L, 1, "a log queue");
    pthread_mutex_lock(&q->mu);
    struct rlclua_line *line = q->head;
    size_t dropped = q->dropped;
    q->head = q->tail = NULL;
    q->n = q->dropped = 0;
    pthread_mutex_unlock(&q->mu);
    lua_newtable(L);
    for (lua_Integer i = 1; line; i++) {
        struct rlclua_line *next = line->next;
        lua_createtable(L, 2, 0);
        lua_pushinteger(L, line->level);
        lua_rawseti(L, -2, 1);
        lua_pushstring(L, line->text); /* may raise on ENOMEM: the rest leak */
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, i);
        free(line);
        line = next;
    }
    lua_pushinteger(L, (lua_Integer)dropped);
    return 2;
}
%}

/* The lost callback runs on the client's watchdog thread, where no lua_State
 * may be entered. Lua does not get it: a lost hold shows as owned() == false,
 * validity 0, and release() returning E_LOST (bindings/lua/README.md). */
%ignore rlc_lock_on_lost;
#endif

/* ---- The lock family (REDLOCKC_1.1): typemaps of its new signatures ----
 * Same conventions as above for each language: the new handle types and
 * `int *set` become return values (third value in Lua); the permit id buffer
 * `char *id_out` becomes a str (None/nil unless RLC_OK); the multilock's
 * `(names, n)` is a Python sequence of str or a Lua array of strings. */
#ifdef SWIGPYTHON
%define RLCPY_HANDLE_OUT(T)
%typemap(in, numinputs=0) T **out (T *tmp = NULL) "$1 = &tmp;"
%typemap(argout) T **out {
  Py_DECREF($result);
  $result = SWIG_NewPointerObj(*$1, $*1_descriptor, 0);
}
%enddef
RLCPY_HANDLE_OUT(rlc_rwlock)
RLCPY_HANDLE_OUT(rlc_fairlock)
RLCPY_HANDLE_OUT(rlc_semaphore)
RLCPY_HANDLE_OUT(rlc_psemaphore)
RLCPY_HANDLE_OUT(rlc_multilock)
%apply int *out { int *set };
%typemap(in, numinputs=0) char *id_out (char tmp[RLC_PERMIT_ID_LEN + 1]) "tmp[0] = 0; $1 = tmp;"
%typemap(argout) char *id_out {
  Py_DECREF($result);
  if (result == RLC_OK) {
    $result = PyUnicode_FromString($1);
  } else {
    Py_INCREF(Py_None);
    $result = Py_None;
  }
}
/* The sequence is held (PySequence_Fast) until freearg, so the UTF-8 of its
 * items stays valid through the C call, which runs without the GIL. */
%typemap(in) (const char *const *names, int n) (PyObject *rlcpy_seq = NULL) {
  rlcpy_seq = PySequence_Fast($input, "names must be a sequence of str");
  if (!rlcpy_seq)
    SWIG_fail;
  Py_ssize_t rlcpy_len = PySequence_Fast_GET_SIZE(rlcpy_seq);
  if (rlcpy_len > INT_MAX) {
    PyErr_SetString(PyExc_ValueError, "too many names");
    SWIG_fail;
  }
  $1 = ($1_ltype)calloc((size_t)rlcpy_len + 1, sizeof(char *));
  if (!$1) {
    PyErr_NoMemory();
    SWIG_fail;
  }
  for (Py_ssize_t i = 0; i < rlcpy_len; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(rlcpy_seq, i);
    $1[i] = PyUnicode_Check(item) ? (char *)PyUnicode_AsUTF8(item) : NULL;
    if (!$1[i]) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "names must be str");
      SWIG_fail;
    }
  }
  $2 = (int)rlcpy_len;
}
%typemap(freearg) (const char *const *names, int n) {
  free((void *)$1);
  Py_XDECREF(rlcpy_seq$argnum);
}
%{
#include <limits.h>
%}
#endif

#ifdef SWIGLUA
%typemap(in, numinputs=0) rlc_rwlock **out ($*1_ltype rlclua_tmp = 0),
                          rlc_fairlock **out ($*1_ltype rlclua_tmp = 0),
                          rlc_semaphore **out ($*1_ltype rlclua_tmp = 0),
                          rlc_psemaphore **out ($*1_ltype rlclua_tmp = 0),
                          rlc_multilock **out ($*1_ltype rlclua_tmp = 0)
  "$1 = &rlclua_tmp;"
%typemap(argout) rlc_rwlock **out, rlc_fairlock **out, rlc_semaphore **out,
                 rlc_psemaphore **out, rlc_multilock **out %{
  if (result == RLC_OK)
    SWIG_NewPointerObj(L, *$1, $*1_descriptor, 0);
  else
    lua_pushnil(L);
  SWIG_arg++;
%}
%apply int *out { int *set };
%typemap(in, numinputs=0) char *id_out (char rlclua_id[RLC_PERMIT_ID_LEN + 1])
  "rlclua_id[0] = 0; $1 = rlclua_id;"
%typemap(argout) char *id_out %{
  if (result == RLC_OK)
    lua_pushstring(L, $1);
  else
    lua_pushnil(L);
  SWIG_arg++;
%}
/* The strings stay referenced by the table (an argument on the stack). */
%typemap(in) (const char *const *names, int n) %{
  {
    if (!lua_istable(L, $input))
      SWIG_fail_arg("$symname", $argnum, "table of strings");
    lua_Integer rlclua_len = (lua_Integer)lua_rawlen(L, $input);
    if (rlclua_len > 65536)
      SWIG_fail_arg("$symname", $argnum, "at most 65536 names");
    $1 = ($1_ltype)calloc((size_t)rlclua_len + 1, sizeof(char *));
    if (!$1)
      SWIG_fail_arg("$symname", $argnum, "memory");
    for (lua_Integer i = 1; i <= rlclua_len; i++) {
      lua_rawgeti(L, $input, i);
      $1[i - 1] = lua_type(L, -1) == LUA_TSTRING ? (char *)lua_tostring(L, -1) : NULL;
      lua_pop(L, 1);
      if (!$1[i - 1]) {
        free((void *)$1);
        $1 = NULL;
        SWIG_fail_arg("$symname", $argnum, "table of strings");
      }
    }
    $2 = (int)rlclua_len;
  }
%}
%typemap(freearg) (const char *const *names, int n) %{
  free((void *)$1);
%}
#endif

/* Counts, not flags: both languages' `int *out` make a boolean, so these two
 * come as rlcswig_* with an int64_t out-parameter (below). */
%ignore rlc_rwlock_mode;
%ignore rlc_multilock_size;

/* The sans-I/O engine (rlc_engine_*) is for drivers that own their sockets
 * and event loop; these bindings drive the blocking API. */
%rename("$ignore", regextarget=1) "^rlc_engine";

%include "redlockc.h"

%inline %{
/* rlc_rwlock_mode: 0 free, 1 read, 2 write. */
int rlcswig_rwlock_mode(rlc_rwlock *l, int64_t *out)
{
    int v = 0, st = rlc_rwlock_mode(l, &v);
    if (st == RLC_OK)
        *out = v;
    return st;
}

/* rlc_multilock_size: the number of distinct names. */
int rlcswig_multilock_size(rlc_multilock *m, int64_t *out)
{
    int v = 0, st = rlc_multilock_size(m, &v);
    if (st == RLC_OK)
        *out = v;
    return st;
}
%}
