/*
 * fault.h - the mutual-exclusion checker under faults: what its processes
 * share and what each part provides.
 *
 * An orchestrator process starts real redis-server nodes (the lock service)
 * and one more (the "storage", never faulted), forks P worker processes of T
 * threads each, and then injects one scenario's faults. Every worker thread
 * loops: acquire the one lock name, run a critical section that does a
 * non-atomic read-modify-write of a counter in the storage, release. Each
 * critical section is appended to a log in shared memory with its holder's
 * view of its own validity; afterwards the checker reads the log.
 *
 * All times are CLOCK_MONOTONIC, which is one clock for every process of
 * one machine, so sections of different processes compare directly.
 */
#ifndef RLC_FAULT_H
#define RLC_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "redis_server.h"
#include "redlockc.h"

#define FAULT_MAX_NODES 5
#define FAULT_MAX_PROCS 8
#define FAULT_MAX_THREADS 8
#define FAULT_MAX_EVENTS 64
#define FAULT_LOG_CAP (1 << 20) /* sections; pages are touched only as used */
#define FAULT_LOCK "fault:lock"
#define FAULT_COUNTER "fault:counter"
#define FAULT_FENCE "fault:fence"

/* Status codes RLC_NOT_ACQUIRED (1) down to RLC_E_CANCELED (-12) as 0..13. */
#define FAULT_NSTATUS 14
static inline int status_index(int rc)
{
    return rc > 1 || rc < -12 ? 0 : 1 - rc;
}

/* One critical section as its holder saw it. */
struct section {
    int64_t enter_ns;          /* right after acquire returned RLC_OK */
    int64_t exit_ns;           /* right after the counter write */
    uint64_t token;            /* fencing token of the hold */
    int32_t validity_enter_ms; /* rlc_lock_validity_ms after acquire */
    int32_t validity_exit_ms;  /* rlc_lock_validity_ms after exit_ns */
    int8_t held_exit;          /* rlc_lock_is_held after exit_ns: 1, 0, -1 failed */
    int8_t lost;               /* the lost callback fired between enter and exit */
    int8_t wrote;              /* 1 written, 0 not (validity gone or fenced out) */
    int8_t proc, thread;
    int8_t release_rc;
};

/* The holder considered its lock valid from enter to exit: the library
 * still vouched for it after the write (validity left, no lost callback),
 * and the server still had its field then (a renewal-based hold that is
 * still there was never gone in between: nobody re-creates our field). */
static inline bool section_valid(const struct section *s)
{
    return s->validity_exit_ms > 0 && s->held_exit == 1 && !s->lost;
}

struct thread_stats {
    uint64_t acquire[FAULT_NSTATUS]; /* by status_index */
    uint64_t release[FAULT_NSTATUS];
    uint64_t lost_callbacks;
    uint64_t lost_reason[FAULT_NSTATUS];
    uint64_t lost_in_release; /* on_lost ran while this thread's release was in flight */
    uint64_t spurious_lost;   /* ... and that release then returned RLC_OK */
    int64_t max_release_ms;   /* the slowest rlc_lock_release */
    uint64_t writes;          /* counter writes the storage applied */
    uint64_t orphans;         /* a failed call left our field on the server */
    uint64_t aborted_writes;  /* validity ran out before the write: not written */
    uint64_t fenced_out;      /* the storage refused a stale fencing token */
    uint64_t storage_errors;
};

/* EV_OUTAGE: a fault after which no quorum exists until the next EV_HEAL,
 * so no section may begin in between. */
enum event_kind { EV_FAULT, EV_OUTAGE, EV_HEAL, EV_NOTE };

struct event {
    int64_t t_ns;
    int kind;
    char what[64];
};

enum { PHASE_WAIT = 0, PHASE_RUN = 1, PHASE_STOP = 2 };

/* Progress of the holder-pause scenario's victim and witness. */
enum { ROLE_INIT, ROLE_READY, ROLE_HOLDING, ROLE_DONE, ROLE_FAILED };

/* The holder-pause scenario's frozen holder (victim.c). */
struct victim_report {
    atomic_int state;        /* ROLE_* */
    atomic_int go_on;        /* orchestrator: 1 take the lock, 2 go on after SIGCONT */
    atomic_int lost_seen;
    int lost_reason;
    int64_t lost_ns;         /* when its on_lost ran */
    int64_t enter_ns;
    uint64_t token;
    int write_result;        /* 1 applied, 0 fenced out, -1 error */
    int validity_exit_ms;
    int held_exit;
    int release_rc;
    int64_t pause_ns, resume_ns; /* set by the orchestrator: SIGSTOP, SIGCONT */
    char field[128];         /* "<uuid>:<owner>" of the victim's hold */
};

/* The holder while the victim resumes. */
struct witness_report {
    atomic_int state;        /* ROLE_* */
    atomic_int go;           /* set by the orchestrator: acquire now */
    atomic_int release_now;  /* set by the orchestrator: check and release */
    int acquire_rc;
    int intact;              /* orchestrator: its field survived the victim's release */
    int held_before_release;
    int release_rc;
    char field[128];
};

struct shared {
    atomic_int phase;                   /* PHASE_* */
    atomic_int ready;                   /* worker threads ready to run */
    atomic_uint_fast64_t nsections;     /* slots taken in log[] */
    atomic_uint_fast64_t completed;     /* sections fully written */
    atomic_int_fast64_t last_enter_ns;  /* latest enter_ns written */
    struct thread_stats stats[FAULT_MAX_PROCS][FAULT_MAX_THREADS];
    int nevents;                        /* events: written by the orchestrator only */
    struct event events[FAULT_MAX_EVENTS];
    struct victim_report victim;
    struct witness_report witness;
    struct section log[];
};

struct scenario;
struct figures;

/* One run of one scenario: everything the orchestrator knows. */
struct run {
    const struct scenario *sc;
    bool long_profile;
    int cycles;           /* how often a scenario repeats its fault (long: more) */
    int64_t load_ms;      /* how long load runs between fault steps */
    int64_t lease_ms;     /* watchdog_timeout_ms of every client */
    char options[256];
    int n_nodes;
    struct redis_server node[FAULT_MAX_NODES];
    bool paused[FAULT_MAX_NODES]; /* SIGSTOPped now: raw commands would hang */
    struct redis_server storage;
    char uris[FAULT_MAX_NODES * 64];
    struct shared *sh;
    int procs, threads;
    pid_t pid[FAULT_MAX_PROCS + 2]; /* workers, then victim and witness */
    int npids;
    bool exited[FAULT_MAX_PROCS + 2];
    int exit_status[FAULT_MAX_PROCS + 2];
    long long kills;      /* client_kill: connections the server closed */
    int64_t t0_ns;
    int64_t deadline_ns;  /* the whole scenario, hard bound */
    char failure[512];    /* first orchestration failure, if any */
};

struct scenario {
    const char *name;
    const char *what;
    int nodes;
    bool fenced;           /* counter writes carry the fencing token */
    bool tokens_monotonic; /* no node loses its data: tokens must only grow */
    bool victim;           /* runs the holder-pause victim and witness */
    int (*faults)(struct run *r);  /* the fault steps; 0 or -1 with r->failure */
    /* Checks of its own after the common ones (log sorted by enter time). */
    void (*verify)(struct run *r, const struct section *log, size_t n, const struct figures *f);
};

/* ---- time ---------------------------------------------------------------- */
int64_t now_ns(void);
void sleep_ms(int64_t ms);

/* ---- shared memory (shm.c) ----------------------------------------------- */
struct shared *shared_new(void);
void shared_free(struct shared *sh);
void event_add(struct run *r, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A section's slot, or NULL when the log is full. */
struct section *log_slot(struct shared *sh);
void log_done(struct shared *sh, const struct section *s);

/* ---- storage (storage.c): the counter the critical sections update -------- */
struct storage;
struct storage *storage_open(int port);
void storage_close(struct storage *st);
/* GET: 0 and *v, or -1. */
int storage_get(struct storage *st, long long *v);
/* SET, or with token > 0 a fenced SET refused for a token older than the
 * newest seen: 1 written, 0 fenced out, -1 error. */
int storage_put(struct storage *st, long long v, uint64_t token);

/* ---- workers (worker.c) ---------------------------------------------------- */
/* Runs in a forked child: makes its own client and T threads; never returns. */
void worker_process(const struct run *r, int proc) __attribute__((noreturn));
/* Waits, bounded, until the shared phase leaves PHASE_WAIT. */
bool await_phase_run(struct shared *sh, int64_t timeout_ms);

/* ---- holder-pause roles (victim.c) ----------------------------------------- */
void victim_process(const struct run *r, int proc) __attribute__((noreturn));
void witness_process(const struct run *r) __attribute__((noreturn));

/* ---- scenarios (scenarios.c) ------------------------------------------------ */
extern const struct scenario fault_scenarios[];
extern const int fault_nscenarios;
/* Lets load run for ms, or until the hard deadline; -1 if a child died. */
int run_load(struct run *r, int64_t ms);
/* Waits until k sections completed after this call (bounded); -1 if not. */
int await_sections(struct run *r, uint64_t k, int64_t timeout_ms);
/* Waits until a section entered after t (bounded); -1 if not. */
int await_enter_after(struct run *r, int64_t t, int64_t timeout_ms);

/* ---- the checker (checker.c) ------------------------------------------------- */
struct figures {
    uint64_t acquire[FAULT_NSTATUS], release[FAULT_NSTATUS];
    uint64_t lost_callbacks, lost_reason[FAULT_NSTATUS];
    uint64_t lost_in_release, spurious_lost;
    int64_t max_release_ms;
    uint64_t orphans, aborted_writes, fenced_out, storage_errors;
    size_t sections, valid_sections;
    size_t overlaps_valid, overlaps_all;
    size_t tokens_out_of_order_valid, tokens_out_of_order_all;
    size_t validity_contradicted; /* library said valid, server had no field */
    long long writes, counter, lost_updates;
    int64_t longest_gap_ms;
    int64_t min_validity_enter_ms;
};

/* Sorts the log by enter time and computes the figures. r NULL: a synthetic
 * log (selftest), whose writes are counted from the sections. */
void analyse(const struct run *r, struct section *log, size_t n, long long counter,
             struct figures *f);
void report(const struct run *r, const struct section *log, size_t n, const struct figures *f);
/* Checks on synthetic logs: the checker finds what it should. 0 if fine. */
int checker_selftest(void);

/* A failed expectation: prints "expected ... seen ..." and counts it. */
extern int fault_failures;
#define EXPECT(cond, ...)                                                            \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
            fault_failures++;                                                        \
        }                                                                            \
    } while (0)

#endif
