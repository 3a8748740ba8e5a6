/*
 * shm.c - the log and counters every process of a run shares.
 *
 * One anonymous MAP_SHARED mapping made before the first fork: each worker
 * thread writes its own stats slot and its own log records, so the only
 * contended words are the atomic counters. Pages of the log are touched only
 * as sections are written, so a big capacity costs nothing until used.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fault.h"

int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static size_t shared_size(void)
{
    return sizeof(struct shared) + sizeof(struct section) * (size_t)FAULT_LOG_CAP;
}

struct shared *shared_new(void)
{
    void *p = mmap(NULL, shared_size(), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    struct shared *sh = p; /* anonymous pages are zero: every counter starts at 0 */
    atomic_init(&sh->phase, PHASE_WAIT);
    return sh;
}

void shared_free(struct shared *sh)
{
    if (sh)
        munmap(sh, shared_size());
}

void event_add(struct run *r, int kind, const char *fmt, ...)
{
    struct shared *sh = r->sh;
    if (sh->nevents >= FAULT_MAX_EVENTS)
        return;
    struct event *e = &sh->events[sh->nevents++];
    e->t_ns = now_ns();
    e->kind = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->what, sizeof e->what, fmt, ap);
    va_end(ap);
    fprintf(stderr, "  [%7.2f s] %s\n", (double)(e->t_ns - r->t0_ns) / 1e9, e->what);
}

struct section *log_slot(struct shared *sh)
{
    uint64_t i = atomic_fetch_add(&sh->nsections, 1);
    if (i >= FAULT_LOG_CAP)
        return NULL;
    return &sh->log[i];
}

void log_done(struct shared *sh, const struct section *s)
{
    int64_t seen = atomic_load(&sh->last_enter_ns);
    while (s->enter_ns > seen &&
           !atomic_compare_exchange_weak(&sh->last_enter_ns, &seen, s->enter_ns))
        ;
    atomic_fetch_add(&sh->completed, 1);
}
