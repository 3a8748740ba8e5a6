/*
 * sched_family.h - what schedule.c (the randomized fault schedule) shares
 * with sched_family.c (its lock-family owners and their checkers): the
 * section log in shared memory, the owners' outcomes, the schedule's
 * configuration, the run's totals, and the seeded random helpers.
 *
 * Owners: ids 0 .. PROCS*THREADS-1 are rlc_lock owners (proc*THREADS +
 * thread, as before the family came), then FAM_THREADS family owners per
 * process: FAM_BASE + proc*FAM_THREADS + (kind - K_WRITE).
 */
#ifndef RLC_SCHED_FAMILY_H
#define RLC_SCHED_FAMILY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "redis_server.h"
#include "redlockc.h"

#define MAXN 3
#define PROCS 3
#define THREADS 3     /* rlc_lock owners per process */
#define FAM_THREADS 4 /* per process: a writer, a reader, a fair owner, a semaphore owner */
#define FAM_BASE (PROCS * THREADS)
#define OWNERS (FAM_BASE + PROCS * FAM_THREADS)
#define LOG_CAP 400000

#define LOCK_NAME "sched:lock"
#define RW_NAME "sched:rw" /* the writers' and the readers' one rwlock */
#define FAIR_NAME "sched:fair"
#define SEM_NAME "sched:sem"
#define FAIR_QUEUE "redisson_lock_queue:{" FAIR_NAME "}"

/* What a section (and its owner) is. */
enum sec_kind { K_LOCK, K_WRITE, K_READ, K_FAIR, K_SEM, K_NKINDS };
extern const char *const kind_names[K_NKINDS];

struct sec {
    int64_t enter_ns, exit_ns;
    int32_t v_exit_ms; /* validity at exit (the semaphore has none: 1) */
    int16_t owner;
    int8_t kind;
};

struct owner_state {
    char field[96];                 /* its field in the lock's hash */
    atomic_int last_acquire_failed; /* the latest acquire attempt reported failure */
    atomic_int release_error;       /* a release ended with an I/O status */
    atomic_int levels;              /* levels (permits) it believes it holds */
    uint64_t acquired, nested, acquire_failed, release_failed, lost;
};

struct shared {
    atomic_int stop;
    atomic_uint_fast64_t nsec;
    struct owner_state owner[OWNERS];
    struct sec log[LOG_CAP];
};

struct config {
    uint64_t seed;
    int nodes, pool;
    int64_t lease[OWNERS]; /* 0 watchdog, else fixed */
    bool run[K_NKINDS];    /* which kinds of owner this schedule runs */
    int permits;           /* the semaphore's, set once by the orchestrator */
    char uris[MAXN * 64];
    char options[128];
};

struct totals {
    uint64_t schedules, acquired, nested, acquire_failed, release_failed, lost, sections;
    uint64_t faults[8];
    uint64_t overlaps, left_behind, orphans, explained;
    /* the family, per kind */
    uint64_t ran[K_NKINDS], kind_acquired[K_NKINDS], kind_sections[K_NKINDS];
    uint64_t readers_peak, rw_overlaps, fair_overlaps, sem_excess;
    uint64_t fam_left_behind, fam_orphans, fam_explained;
    uint64_t permit_lost, permit_extra, permit_explained, fair_queue_left;
};

extern struct shared *sh;

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline uint64_t rnd(uint64_t *s)
{ /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static inline uint64_t splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return (x ^ (x >> 31)) | 1;
}

static inline int64_t rnd_in(uint64_t *s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd(s) % (uint64_t)(hi - lo + 1));
}

/* Mostly short sections; one in four holds 5-100 ms, so that a late undo
 * landing meanwhile lets another owner in while this holder is still valid
 * (what the overlap checks can see). */
static inline void section_pause(uint64_t *rs)
{
    uint64_t pick = rnd(rs) % 4;
    sleep_ms(pick == 0 ? rnd_in(rs, 5, 100) : pick == 1 ? 1 : 0);
}

/* Appends one section to the shared log (dropped past LOG_CAP). */
static inline void log_section(const struct sec *s)
{
    uint64_t slot = atomic_fetch_add(&sh->nsec, 1);
    if (slot < LOG_CAP)
        sh->log[slot] = *s;
}

/* ---- sched_family.c ------------------------------------------------------- */

/* Draws the family part of schedule cfg->seed (which kinds run, their
 * leases, the permits) after schedule.c drew nodes, pool and lock leases.
 * cfg->nodes must be set: fair and semaphore owners need one node. */
void fam_plan(struct config *cfg);
/* Sets the semaphore's permits on the node (before the workers start). */
int fam_setup(const struct redis_server *node0, const struct config *cfg);
/* Starts this process's family owner threads (those cfg->run asks for);
 * returns how many were written to t[] (at most FAM_THREADS). */
int fam_start(rlc_client *c, const struct config *cfg, int proc, pthread_t *t);
/* The per-kind checks over the log (sorted by enter time), printing each
 * violation; adds to tot. */
void fam_check_sections(const struct config *cfg, const struct sec *log, size_t n,
                        struct totals *tot);
/* Classifies every owner field of hash `key` on a node (schedule.c uses it
 * for the rlc_lock's hash too): "explained" (its process was killed or its
 * release ended with an I/O status), "left_behind" (an unknown owner, or
 * its last acquire reported failure), else "orphan". */
void hash_leftovers(const struct redis_server *node, int node_i, const char *key,
                    const struct config *cfg, const bool *killed, uint64_t *explained,
                    uint64_t *left_behind, uint64_t *orphans);
/* What the family left on the servers after quiescence; adds to tot. */
void fam_leftovers(const struct redis_server *nodes, const struct config *cfg,
                   const bool *killed, struct totals *tot);
/* Prints the family's part of the FIGURES line. */
void fam_figures(const struct totals *tot);

#endif
