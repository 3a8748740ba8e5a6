/*
 * rlcnode.c - the Node binding's helper library (librlcnode.so), built by
 * build.js with cc. It adds no feature to libredlockc and uses only
 * redlockc.h. Two halves:
 *
 * - Lock (every call of it) and fencedSet run on the engine
 *   (rlcnode_engine.c wraps it for koffi; lib/engine_driver.js moves its
 *   bytes on net.Sockets and its time with one timer). No thread there, and
 *   none per waiter.
 *
 * - The lock family, and freeing the blocking client it made, still call
 *   the blocking API. For those calls:
 *
 * 1. Blocking calls need threads that nothing else needs. koffi's fn.async
 *    queues calls on libuv's thread pool (4 threads by default, shared with
 *    fs, dns and zlib). Four acquisitions waiting for a busy lock would take
 *    all four, and the holder's release would queue behind them: a deadlock
 *    until a wait runs out. So every blocking call runs here on a thread of a
 *    cached pool: idle threads are reused, and a job that finds none idle gets
 *    a new one. A waiting family acquisition holds one of them.
 *
 * 2. rlc_errmsg() belongs to the OS thread that made the failing call. The
 *    worker copies it right after the call, on that thread, into the result.
 *
 * 3. The library's log lines come on its own threads, where JS must never
 *    run; on_log writes a record without blocking.
 *
 * Results and log lines travel as fixed-size records (struct rlcn_record,
 * 256 bytes, below PIPE_BUF so each write is atomic) on a pipe that the JS
 * thread reads as a stream socket: completion is an ordinary event-loop event.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <redlockc.h>

#define API __attribute__((visibility("default")))

enum { RLCN_DONE = 0, RLCN_LOG = 2 };

/* One job's result or one log line; also the out-buffer of sync calls. */
struct rlcn_record {
    uint64_t tag;  /* job id; for RLCN_LOG the client's id */
    int64_t value; /* a query's answer */
    int32_t rc;    /* status; for RLCN_LOG the level */
    int32_t kind;  /* RLCN_DONE or RLCN_LOG */
    char msg[232]; /* rlc_errmsg() of the failing call, "" on success */
};
_Static_assert(sizeof(struct rlcn_record) == 256, "record layout is read by index.js");
_Static_assert(sizeof(struct rlcn_record) <= PIPE_BUF, "records must be written atomically");

/* A JS environment's pipe (one per loaded copy of the module). */
struct rlcn_channel {
    int rfd, wfd;
};

/* The jobs beside the family's (op >= OP_FAMILY, rlcnode_family.c). */
enum op { OP_CLIENT_FREE = 9 };

struct job {
    struct job *next;
    int op;
    void *target; /* rlc_client * for OP_CLIENT_FREE, else the family's call */
    int64_t a, b;
    uint64_t tag;
    struct rlcn_channel *ch;
};

static void set_msg(struct rlcn_record *r, int rc)
{
    if (rc < 0)
        snprintf(r->msg, sizeof r->msg, "%s", rlc_errmsg());
    else
        r->msg[0] = '\0';
}

/* ---- the pipe ------------------------------------------------------------ */

/* Blocks only a pool thread, and only while JS is behind by a full pipe. A JS
 * thread that reads nothing for 10 minutes is stuck; the record is dropped. */
static void put(struct rlcn_channel *ch, const struct rlcn_record *r)
{
    for (int waits = 0; waits < 600;) {
        ssize_t n = write(ch->wfd, r, sizeof *r);
        if (n == (ssize_t)sizeof *r)
            return;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = ch->wfd, .events = POLLOUT};
            if (poll(&p, 1, 1000) == 0)
                waits++;
            continue;
        }
        return; /* EPIPE: the JS environment is gone; nobody waits for this */
    }
}

API int rlcn_channel_open(struct rlcn_channel **out)
{
    struct rlcn_channel *ch = calloc(1, sizeof *ch);
    int fds[2];
    if (!ch)
        return -ENOMEM;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int e = errno;
        free(ch);
        return -e;
    }
    /* Non-blocking writes: a library thread must never wait on JS. The
     * read end stays as libuv wants it (it sets O_NONBLOCK itself). */
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    fcntl(fds[1], F_SETPIPE_SZ, 1 << 20); /* best effort: more slack */
    ch->rfd = fds[0];
    ch->wfd = fds[1];
    *out = ch;
    return fds[0];
}

/* ---- the cached thread pool ------------------------------------------- */

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static struct job *queue_head, *queue_tail;
static int queued, idle, threads;

static void pool_init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&pool_cv, &a);
    pthread_condattr_destroy(&a);
}

#include "rlcnode_family.c" /* the lock family's jobs and handles */
#include "rlcnode_engine.c" /* Lock's engine, driven from JS (no thread) */

static void run(struct job *j)
{
    struct rlcn_record r = {.tag = j->tag, .kind = RLCN_DONE};
    if (j->op >= OP_FAMILY)
        family_run(j->op, j->target, &r);
    else if (j->op == OP_CLIENT_FREE)
        rlc_client_free(j->target); /* joins the client's threads */
    else {
        r.rc = RLC_E_INVAL;
        snprintf(r.msg, sizeof r.msg, "unknown op %d", j->op);
    }
    put(j->ch, &r);
}

static void *worker(void *unused)
{
    (void)unused;
    (void)pthread_setname_np(pthread_self(), "rlcn-pool"); /* seen in top -H, gdb */
    pthread_mutex_lock(&pool_mu);
    for (;;) {
        while (!queue_head) {
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_sec += 10; /* an idle thread lives 10 s */
            idle++;
            int rc = pthread_cond_timedwait(&pool_cv, &pool_mu, &until);
            idle--;
            if (rc == ETIMEDOUT && !queue_head) {
                threads--;
                pthread_mutex_unlock(&pool_mu);
                return NULL;
            }
        }
        struct job *j = queue_head;
        queue_head = j->next;
        if (!queue_head)
            queue_tail = NULL;
        queued--;
        pthread_mutex_unlock(&pool_mu);
        run(j);
        free(j);
        pthread_mutex_lock(&pool_mu);
    }
}

/* Queues a job; 0, or -errno when no thread could take it. Never blocks. */
API int rlcn_submit(struct rlcn_channel *ch, int op, void *target, int64_t a, int64_t b,
                    uint64_t tag)
{
    pthread_once(&pool_once, pool_init);
    struct job *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    *j = (struct job){.op = op, .target = target, .a = a, .b = b, .tag = tag, .ch = ch};
    pthread_mutex_lock(&pool_mu);
    if (queue_tail)
        queue_tail->next = j;
    else
        queue_head = j;
    queue_tail = j;
    queued++;
    int err = 0;
    if (idle >= queued) {
        pthread_cond_signal(&pool_cv);
    } else {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 1 << 20);
        err = pthread_create(&t, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (err == 0)
            threads++;
        else if (threads > 0)
            err = 0; /* a busy thread takes it when it is done */
    }
    if (err) { /* no thread at all, so j is the only job queued: take it back */
        queue_head = queue_tail = NULL;
        queued = 0;
        free(j);
    }
    pthread_mutex_unlock(&pool_mu);
    return -err;
}

/* ---- handles (no network I/O: called on the JS thread) ------------------- */

API rlc_client *rlcn_client_new(const char *nodes, const char *options, struct rlcn_record *res)
{
    rlc_client *c = NULL;
    res->rc = rlc_client_new(&c, nodes, options);
    set_msg(res, res->rc);
    return c;
}

/* ---- metrics and log lines (REDLOCKC_1.1) -------------------------------- */

API int rlcn_client_metrics(rlc_client *c, uint64_t *out, int n)
{
    return rlc_client_metrics(c, out, n);
}

/* Where a client's log lines go: its channel, as records for client id. */
struct rlcn_sink {
    struct rlcn_channel *ch;
    uint64_t id;
};

/* Called by the library where it holds no lock (any thread): one record to
 * the pipe, never blocking (a full pipe drops the line). */
static void on_log(int level, const char *message, void *user)
{
    struct rlcn_sink *k = user;
    struct rlcn_record r = {.tag = k->id, .rc = level, .kind = RLCN_LOG};
    snprintf(r.msg, sizeof r.msg, "%s", message);
    ssize_t n;
    do
        n = write(k->ch->wfd, &r, sizeof r);
    while (n < 0 && errno == EINTR);
}

/* Routes c's log lines up to level to the channel (level 0: silences them).
 * Returns the sink to free with rlcn_sink_free once the client is freed or
 * silenced (the library then calls on_log no more), or NULL. */
API struct rlcn_sink *rlcn_client_set_log(rlc_client *c, struct rlcn_channel *ch, uint64_t id,
                                          int level, struct rlcn_record *res)
{
    struct rlcn_sink *k = level > 0 ? calloc(1, sizeof *k) : NULL;
    if (level > 0 && !k) {
        res->rc = RLC_E_NOMEM;
        snprintf(res->msg, sizeof res->msg, "out of memory");
        return NULL;
    }
    if (k)
        *k = (struct rlcn_sink){ch, id};
    res->rc = rlc_client_set_log(c, level, k ? on_log : NULL, k);
    set_msg(res, res->rc);
    if (res->rc != RLC_OK) {
        free(k);
        return NULL;
    }
    return k;
}

API void rlcn_sink_free(struct rlcn_sink *k)
{
    free(k);
}

API const char *rlcn_version(void) { return rlc_version(); }
API const char *rlcn_strerror(int rc) { return rlc_strerror(rc); }
API int rlcn_record_size(void) { return (int)sizeof(struct rlcn_record); }
