/*
 * metrics.c - per-client counters and the log callback (REDLOCKC_1.1), and
 * the polled log (REDLOCKC_1.1).
 *
 * The counters are the engine's (every lock kind runs there): read from
 * it while the client lives, and kept when it is freed.
 *
 * Log lines are never handed to the callback where they happen: that may be
 * under client->mu (the watchdog's verdicts), and a callback entering a VM
 * (Python's GIL) there could deadlock against a thread of that VM waiting
 * for client->mu. They are queued (a small ring; the oldest line is dropped
 * when it is full, and the drop is counted in the next line) and handed
 * over by metrics_flush_log(), which the core calls where it holds nothing.
 *
 * The polled log (rlc_client_keep_log, rlc_client_next_log) is a second,
 * separate queue for callers that may not be called on a library thread
 * (Ruby's Fiddle): lines wait there until the caller takes them on its own
 * thread. It keeps the oldest: past KEEP_LINES the newest are dropped and
 * counted on the newest line kept, which then says how many followed it.
 */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "engine_driver.h"
#include "error.h"
#include "metric_defs.h"
#include "state.h"

#define N_COUNTERS RLC_M_COUNT
#define LOG_RING 64
#define LOG_LINE 256

#define KEEP_LINES 64

struct log_line {
    int level;
    char text[LOG_LINE];
};

struct kept_line {
    int level;
    unsigned dropped_after; /* lines dropped right after this one (queue full) */
    char text[LOG_LINE];
};

struct rlc_metrics {
    rlc_client *client;
    /* the engine's counters, kept when it is freed (rlc_client_free) */
    uint64_t engine_final[N_COUNTERS];
    bool engine_gone;

    pthread_mutex_t log_mu; /* guards what follows; never held while calling fn */
    rlc_log_fn fn;
    void *user;
    int max_level;
    struct log_line ring[LOG_RING];
    int head, count, dropped;
    atomic_int pending; /* lines queued: lets flush skip the mutex when 0 */
    pthread_mutex_t deliver_mu; /* one deliverer at a time keeps the lines in order */
    /* the polled log, under log_mu too; keep_level 0: nothing is kept */
    int keep_level;
    struct kept_line kept[KEEP_LINES];
    int kept_head, kept_count;
};

/* The metrics whose lines this thread is handing over now (set_log called
 * from inside the callback must not wait for itself). */
static _Thread_local struct rlc_metrics *delivering_here;

struct rlc_metrics *metrics_new(rlc_client *c)
{
    struct rlc_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->client = c;
    pthread_mutex_init(&m->log_mu, NULL);
    pthread_mutex_init(&m->deliver_mu, NULL);
    return m;
}

void metrics_free(struct rlc_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->log_mu);
    pthread_mutex_destroy(&m->deliver_mu);
    free(m);
}

/* Into the callback's ring (under log_mu): when full, the oldest goes. */
static void ring_push(struct rlc_metrics *m, int level, const char *text)
{
    if (m->count == LOG_RING) {
        m->head = (m->head + 1) % LOG_RING;
        m->count--;
        m->dropped++;
    }
    struct log_line *ln = &m->ring[(m->head + m->count) % LOG_RING];
    ln->level = level;
    snprintf(ln->text, sizeof ln->text, "%s", text);
    m->count++;
    atomic_store(&m->pending, m->count);
}

/* Into the polled queue (under log_mu): when full, this newest line is
 * dropped and counted on the newest kept, so the reader learns where the
 * gap is. */
static void keep_push(struct rlc_metrics *m, int level, const char *text)
{
    if (m->kept_count == KEEP_LINES) {
        m->kept[(m->kept_head + KEEP_LINES - 1) % KEEP_LINES].dropped_after++;
        return;
    }
    struct kept_line *ln = &m->kept[(m->kept_head + m->kept_count) % KEEP_LINES];
    ln->level = level;
    ln->dropped_after = 0;
    snprintf(ln->text, sizeof ln->text, "%s", text);
    m->kept_count++;
}

/* Queues a line for the callback and the polled log, if they want its
 * level. */
static void logf_(struct rlc_metrics *m, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_(struct rlc_metrics *m, int level, const char *fmt, ...)
{
    if (!m)
        return;
    char text[LOG_LINE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&m->log_mu);
    if (m->fn && level <= m->max_level)
        ring_push(m, level, text);
    if (level <= m->keep_level)
        keep_push(m, level, text);
    pthread_mutex_unlock(&m->log_mu);
}

void metrics_log(rlc_client *c, int level, const char *line)
{
    logf_(c ? c->metrics : NULL, level, "%s", line);
}

void metrics_keep_engine(rlc_client *c)
{
    struct rlc_metrics *m = c->metrics;
    if (!m || !c->drv)
        return;
    edrv_metrics(c->drv, m->engine_final, N_COUNTERS);
    m->engine_gone = true;
}

void metrics_flush_log(rlc_client *c)
{
    struct rlc_metrics *m = c ? c->metrics : NULL;
    /* Nothing queued; or called from inside the callback (it acquired a
     * lock): the delivery under way hands the rest over. */
    if (!m || atomic_load(&m->pending) == 0 || delivering_here == m)
        return;
    pthread_mutex_lock(&m->deliver_mu);
    struct rlc_metrics *outer = delivering_here;
    delivering_here = m;
    for (int guard = 0; guard < LOG_RING * 4; guard++) { /* bounded: lines keep coming */
        pthread_mutex_lock(&m->log_mu);
        if (m->count == 0) {
            atomic_store(&m->pending, 0);
            pthread_mutex_unlock(&m->log_mu);
            break;
        }
        struct log_line ln = m->ring[m->head];
        m->head = (m->head + 1) % LOG_RING;
        m->count--;
        atomic_store(&m->pending, m->count);
        int dropped = m->dropped;
        m->dropped = 0;
        rlc_log_fn fn = m->fn;
        void *user = m->user;
        pthread_mutex_unlock(&m->log_mu);
        if (!fn)
            continue;
        if (dropped) {
            char note[64];
            snprintf(note, sizeof note, "%d log lines dropped (the queue was full)", dropped);
            fn(RLC_LOG_WARN, note, user);
        }
        fn(ln.level, ln.text, user);
    }
    delivering_here = outer;
    pthread_mutex_unlock(&m->deliver_mu);
}

void metrics_lost(rlc_client *c, const rlc_lock *l, int reason)
{
    struct rlc_metrics *m = c ? c->metrics : NULL; /* the engine counted it */
    char name[80];
    snprintf(name, sizeof name, "%.*s%s", 64, l ? l->key : "?",
             l && l->key_len > 64 ? "..." : "");
    logf_(m, RLC_LOG_WARN, "lock '%s' was lost: %s", name,
          reason == RLC_E_LOST ? "its key or this owner's field is gone"
                               : rlc_strerror(reason));
}

/* ---- the public API ------------------------------------------------------ */

int rlc_client_metrics(rlc_client *c, uint64_t *out, int n)
{
    if (!c || !out || n < 0)
        return rlc_fail(RLC_E_INVAL, "rlc_client_metrics: %s",
                        !c ? "client is NULL" : !out ? "out is NULL" : "n is negative");
    /* the engine's: every lock kind runs there */
    uint64_t eng[N_COUNTERS] = {0};
    struct rlc_metrics *m = c->metrics;
    if (m && m->engine_gone)
        memcpy(eng, m->engine_final, sizeof eng);
    else if (!atomic_load(&c->closed) && client_enter(c) == RLC_OK) {
        edrv_metrics(c->drv, eng, N_COUNTERS); /* as a call: not freed under it */
        client_leave(c);
    }
    for (int i = 0; i < n && i < N_COUNTERS; i++)
        out[i] = eng[i];
    return N_COUNTERS;
}

int rlc_client_set_log(rlc_client *c, int max_level, rlc_log_fn fn, void *user)
{
    if (!c)
        return rlc_fail(RLC_E_INVAL, "rlc_client_set_log: client is NULL");
    if (fn && (max_level < RLC_LOG_ERROR || max_level > RLC_LOG_DEBUG))
        return rlc_fail(RLC_E_INVAL, "log level %d is outside %d..%d", max_level, RLC_LOG_ERROR,
                        RLC_LOG_DEBUG);
    struct rlc_metrics *m = c->metrics;
    if (!m)
        return rlc_fail(RLC_E_NOMEM, "this client has no metrics block (out of memory)");
    pthread_mutex_lock(&m->log_mu);
    m->fn = fn;
    m->user = user;
    m->max_level = fn ? max_level : 0;
    if (!fn) {
        m->count = 0;
        m->dropped = 0;
        atomic_store(&m->pending, 0);
    }
    pthread_mutex_unlock(&m->log_mu);
    /* A line being handed over meanwhile still runs the old fn: wait for it,
     * so that the caller may free what user points to once this returns
     * (not from inside fn itself: that delivery is this very call). */
    if (delivering_here != m) {
        pthread_mutex_lock(&m->deliver_mu);
        pthread_mutex_unlock(&m->deliver_mu);
    }
    return RLC_OK;
}

int rlc_client_keep_log(rlc_client *c, int max_level)
{
    if (!c)
        return rlc_fail(RLC_E_INVAL, "rlc_client_keep_log: client is NULL");
    if (max_level < 0 || max_level > RLC_LOG_DEBUG)
        return rlc_fail(RLC_E_INVAL, "log level %d is outside 0..%d", max_level, RLC_LOG_DEBUG);
    struct rlc_metrics *m = c->metrics;
    if (!m)
        return rlc_fail(RLC_E_NOMEM, "this client has no metrics block (out of memory)");
    pthread_mutex_lock(&m->log_mu);
    m->keep_level = max_level;
    if (max_level == 0)
        m->kept_count = 0;
    pthread_mutex_unlock(&m->log_mu);
    return RLC_OK;
}

/* The text the line is taken as: its own, and how many were dropped after
 * it if any. */
static int render_kept(const struct kept_line *ln, char *buf, size_t size)
{
    if (ln->dropped_after > 0)
        return snprintf(buf, size, "%s (and %u more log lines, dropped)", ln->text,
                        ln->dropped_after);
    return snprintf(buf, size, "%s", ln->text);
}

size_t rlc_client_next_log(rlc_client *c, int *level, char *buf, size_t size)
{
    struct rlc_metrics *m = c ? c->metrics : NULL;
    if (!m)
        return 0;
    pthread_mutex_lock(&m->log_mu);
    int n = 0;
    if (m->kept_count > 0) {
        const struct kept_line *ln = &m->kept[m->kept_head];
        if (level)
            *level = ln->level;
        if (!buf || size == 0) {
            n = render_kept(ln, NULL, 0); /* its length; it stays queued */
        } else {
            n = render_kept(ln, buf, size);
            m->kept_head = (m->kept_head + 1) % KEEP_LINES;
            m->kept_count--;
        }
    }
    pthread_mutex_unlock(&m->log_mu);
    return n > 0 ? (size_t)n : 0;
}

void metrics_close(rlc_client *c)
{
    if (!c || !c->metrics)
        return;
    metrics_flush_log(c); /* lines still queued (a reconnect by the last release) */
    rlc_client_set_log(c, 0, NULL, NULL);
}
