/*
 * worker.c - a worker process: one client, T threads contending for one
 * lock name, each logging its critical sections.
 *
 * A client is made after fork() (a client made in the parent is closed in
 * the child), and shared by the process's threads, as an application would.
 * Each thread has its own handle, owned by the thread (owner 0).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "fault.h"

#define WAIT_MS 500         /* an acquire's wait: short, so that stop is prompt */
#define HOLD_MAX_US 1000    /* time between read and write: widens any race */
#define MAX_CLEANUP 8       /* orphaned levels released per failure, at most */

struct wctx {
    const struct run *r;
    struct shared *sh;
    rlc_client *c;
    int proc, thread;
    struct thread_stats *st;
    struct storage *storage;
    atomic_int lost;        /* set by on_lost; cleared at each acquire */
    atomic_int releasing;   /* this thread is inside rlc_lock_release */
    atomic_int lost_in_release;
    unsigned seed;
};

bool await_phase_run(struct shared *sh, int64_t timeout_ms)
{
    int64_t until = now_ns() + timeout_ms * 1000000LL;
    while (atomic_load(&sh->phase) == PHASE_WAIT && now_ns() < until)
        sleep_ms(1);
    return atomic_load(&sh->phase) != PHASE_WAIT;
}

static void on_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    struct wctx *w = user;
    atomic_store(&w->lost, 1);
    if (atomic_load(&w->releasing))
        atomic_store(&w->lost_in_release, 1);
    w->st->lost_callbacks++;
    w->st->lost_reason[status_index(reason)]++;
}

static void pause_us(unsigned us)
{
    struct timespec ts = {0, (long)us * 1000L};
    nanosleep(&ts, NULL);
}

/* After a call failed on I/O, our field may still be on the server (the
 * command ran, its reply was lost). An application that wants its lock
 * freed at once releases what is_held still reports. Counted, so the
 * figures show how often the library left one behind. */
static void release_orphans(struct wctx *w, rlc_lock *l)
{
    for (int i = 0; i < MAX_CLEANUP; i++) {
        int held = 0;
        if (rlc_lock_is_held(l, &held) != RLC_OK || !held)
            return;
        w->st->orphans++;
        if (rlc_lock_release(l) != RLC_OK)
            return;
    }
}

static void critical_section(struct wctx *w, rlc_lock *l, struct section *s)
{
    int64_t v = 0;
    s->enter_ns = now_ns();
    rlc_lock_fencing_token(l, &s->token);
    rlc_lock_validity_ms(l, &v);
    s->validity_enter_ms = (int32_t)v;

    long long counter;
    if (storage_get(w->storage, &counter) != 0) {
        w->st->storage_errors++;
    } else {
        pause_us((unsigned)rand_r(&w->seed) % HOLD_MAX_US);
        /* Commit only while the library still vouches for the lock. */
        rlc_lock_validity_ms(l, &v);
        if (v <= 0 || atomic_load(&w->lost)) {
            w->st->aborted_writes++;
        } else {
            int put = storage_put(w->storage, counter + 1, w->r->sc->fenced ? s->token : 0);
            s->wrote = put == 1;
            w->st->writes += put == 1;
            w->st->fenced_out += put == 0;
            w->st->storage_errors += put < 0;
        }
    }
    s->exit_ns = now_ns();

    rlc_lock_validity_ms(l, &v);
    s->validity_exit_ms = (int32_t)v;
    int held = -1;
    s->held_exit = rlc_lock_is_held(l, &held) == RLC_OK ? (int8_t)held : -1;
    s->lost = (int8_t)atomic_load(&w->lost);
}

static void *worker_thread(void *arg)
{
    struct wctx *w = arg;
    struct shared *sh = w->sh;
    rlc_lock *l = NULL;
    w->storage = storage_open(w->r->storage.port);
    if (rlc_lock_new(w->c, FAULT_LOCK, 0, &l) != RLC_OK || !w->storage) {
        fprintf(stderr, "worker %d.%d: no lock handle or storage: %s\n", w->proc, w->thread,
                rlc_errmsg());
        atomic_fetch_add(&sh->ready, 1);
        storage_close(w->storage);
        return (void *)1;
    }
    rlc_lock_on_lost(l, on_lost, w);
    atomic_fetch_add(&sh->ready, 1);
    await_phase_run(sh, 60000);

    while (atomic_load(&sh->phase) == PHASE_RUN) {
        atomic_store(&w->lost, 0);
        int rc = rlc_lock_acquire(l, WAIT_MS, -1);
        w->st->acquire[status_index(rc)]++;
        if (rc == RLC_OK) {
            struct section s;
            memset(&s, 0, sizeof s);
            s.proc = (int8_t)w->proc;
            s.thread = (int8_t)w->thread;
            critical_section(w, l, &s);
            atomic_store(&w->lost_in_release, 0);
            atomic_store(&w->releasing, 1);
            int64_t t = now_ns();
            int rel = rlc_lock_release(l);
            t = (now_ns() - t) / 1000000LL;
            atomic_store(&w->releasing, 0);
            if (t > w->st->max_release_ms)
                w->st->max_release_ms = t;
            /* A hold being released normally is not lost: a callback that
             * ran during a release that succeeded was a false alarm. */
            if (atomic_load(&w->lost_in_release)) {
                w->st->lost_in_release++;
                w->st->spurious_lost += rel == RLC_OK;
            }
            s.release_rc = (int8_t)rel;
            w->st->release[status_index(rel)]++;
            /* Outcomes no fault explains by itself: say what the library said. */
            if ((rel == RLC_E_SERVER || rel == RLC_E_PROTOCOL || rel == RLC_E_NOMEM) &&
                w->st->release[status_index(rel)] <= 3)
                fprintf(stderr, "  worker %d.%d: release returned %d: %s\n", w->proc,
                        w->thread, rel, rlc_errmsg());
            struct section *slot = log_slot(sh);
            if (slot) {
                *slot = s;
                log_done(sh, slot);
            }
            if (rel != RLC_OK && rel != RLC_E_LOST && rel != RLC_E_NOT_OWNER)
                release_orphans(w, l);
        } else if (rc < 0) {
            release_orphans(w, l);
            /* An outage: back off a little instead of spinning on refusals. */
            sleep_ms(5 + rand_r(&w->seed) % 20);
        }
    }
    rlc_lock_free(l);
    storage_close(w->storage);
    return NULL;
}

void worker_process(const struct run *r, int proc)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct shared *sh = r->sh;
    rlc_client *c = NULL;
    if (rlc_client_new(&c, r->uris, r->options) != RLC_OK) {
        fprintf(stderr, "worker %d: rlc_client_new: %s\n", proc, rlc_errmsg());
        atomic_fetch_add(&sh->ready, r->threads);
        _exit(3);
    }
    pthread_t t[FAULT_MAX_THREADS];
    struct wctx w[FAULT_MAX_THREADS];
    int started = 0;
    for (int i = 0; i < r->threads; i++) {
        w[i] = (struct wctx){.r = r, .sh = sh, .c = c, .proc = proc, .thread = i,
                             .st = &sh->stats[proc][i],
                             .seed = (unsigned)(getpid() * 31 + i)};
        atomic_init(&w[i].lost, 0);
        atomic_init(&w[i].releasing, 0);
        atomic_init(&w[i].lost_in_release, 0);
        if (pthread_create(&t[i], NULL, worker_thread, &w[i]) != 0) {
            atomic_fetch_add(&sh->ready, r->threads - i);
            break;
        }
        started++;
    }
    int bad = started != r->threads;
    for (int i = 0; i < started; i++) {
        void *ret = NULL;
        pthread_join(t[i], &ret);
        bad |= ret != NULL;
    }
    rlc_client_free(c);
    _exit(bad ? 4 : 0);
}
