/*
 * sim_engine.c - deterministic simulation of the engine (FoundationDB's way).
 *
 * The clients are the real engine (c/src/engine, rlc_engine_*): several
 * engines, each with a few owners (tasks), run against simulated Redis nodes
 * that execute the library's real Lua scripts in an embedded Lua 5.4
 * (node.lua: the commands the scripts call, key expiry on simulated time).
 * Between them a simulated network carries the engine's RESP bytes: per
 * connection in order, with delays that reorder across connections, short
 * writes and split reads, stalls, cuts (what was in flight may or may not
 * have run on the node), node pauses, client pauses, SCRIPT FLUSH, a
 * SCRIPT LOAD refused now and then (an ACL), and subscriber connections
 * that receive the "0" the release script publishes.
 * Each engine reads its own clock: an offset, a drift within the engine's
 * drift_factor, and it stops running while its process is paused.
 *
 * Everything happens in one event loop on one simulated clock, driven by one
 * seed: a failing seed replays exactly (`seed=N schedules=1 verbose=1`).
 *
 * A quarter of the seeds (told by the seed alone, not by its random stream,
 * so the other schedules are byte for byte what they were before) are
 * cluster schedules: node 0 of the engines is a redis-cluster:// node backed
 * by 2-3 simulated masters (at times with 2 standalone nodes beside it, a
 * Redlock of 3 votes). Each master answers CLUSTER SLOTS from its own view
 * of the slot table and routes every keyed command by its hash slot
 * (slot.c), as Redis' getNodeByQuery does: MOVED to the owner it knows,
 * CROSSSLOT (a protocol violation: the engine keeps a call in one slot),
 * CLUSTERDOWN for a moment now and then. A lock's slot migrates between
 * masters: MIGRATING on the source, IMPORTING on the target; on the source
 * a command whose keys are all there runs, one whose keys are all gone is
 * ASKed to the target, one with some of each gets TRYAGAIN (Redis 7 rules;
 * Redis 6 ASKs it); on the target it runs only right after ASKING on that
 * connection, and a multi-key one only with every key there (else
 * TRYAGAIN); without ASKING it is MOVED back. The keys move one by one over
 * simulated time (MIGRATE: a copy with its TTL, then gone from the source),
 * then the target owns the slot, then the source knows (it drops the slot's
 * shard channels: sunsubscribe), then the other masters. A Redis 7 cluster
 * answers PUBSUB SHARDNUMSUB (the engine then SSUBSCRIBEs and its releases
 * SPUBLISH to the slot's master's shard subscribers); a Redis 6 one refuses
 * it (SUBSCRIBE, and PUBLISH reaches the subscribers of every master). Half
 * the cluster schedules name their locks in one {hash tag} (multi-locks
 * allowed), half in their own slots. When faults stop, the migration under
 * way ends at once and every master knows the owner (cluster=0|1: no
 * cluster schedule, or only cluster schedules).
 *
 * A fifth of the seeds (again by the seed alone; classic=0|1: none, all)
 * run the classic format (format=classic): string locks, no nested acquire
 * (an owner's stack is one unit deep), no fencing; the residue rule then
 * looks once the longest lease has run out (check_residue says why).
 *
 * A sixth of the other seeds (by the seed alone; write=0|1: none, all) make
 * some names read-write locks (the family's scripts, Redisson's
 * RReadWriteLock layout): each round of an owner on such a name takes it
 * as a reader (RLC_KIND_READ) or a writer (RLC_KIND_WRITE), nests in and
 * releases it as that kind; waiting writers register and withdraw. The
 * rules below hold for them as for a lock, where readers may overlap each
 * other and nothing else (no extend, no multi-lock and no query of them:
 * the engine has none for those kinds; their token is 0; residue also looks
 * for a reader's timeout keys, and for a waiting writer's place once its
 * registration time has run out). In such a schedule of one node, a name
 * may also be a fair lock (RLC_KIND_FAIR, Redisson's RFairLock: a queue and
 * each waiter's own channel; a thread wait drawn per schedule); residue
 * then also looks at its queue and timeouts in a schedule without faults
 * (with faults, a try a node ran late may queue a waiter that is gone, as
 * in Redisson: the next fair call on the name prunes it). In half of the
 * write schedules of one node (by the seed alone; sem=0|1: none, all of one
 * node) the last name, and of 3 names at even odds the middle one, is a
 * semaphore (RLC_KIND_SEMAPHORE, or RLC_KIND_PSEMAPHORE: expirable permits;
 * the engine refuses either over N nodes) with a count of 1-3: an owner's
 * round on it sets the count (rlc_engine_set_permits, until one of its set
 * calls answers RLC_OK: SETNX, so it is set once), acquires 1-2 permits
 * (waits and cancels as a lock's acquire), holds them, and gives them back
 * (rlc_engine_release_permits: plain, the count; expirable, by the id
 * rlc_engine_permit_id names from the grant's token), or lets their lease
 * run out (a quarter of the expirable holders; half of those still release
 * the id late). A semaphore takes no part in the checks above but its own
 * (permits, residue).
 *
 * An owner holds a stack of units, newest on top: a plain acquire's one name,
 * or a multi-lock's names (rlc_engine_acquire_multi: all of 1-3 names, given
 * unsorted and at times with a duplicate, or none). A unit is one more level
 * of each of its names; a release gives back the top unit, a multi-lock's
 * names one by one in reverse order. About one owner in four also takes
 * multi-locks: from no hold (waiting like a plain acquire), or nested in the
 * hold on top of its stack (no wait, as a nested acquire: waiting while
 * holding could deadlock two such owners). Every check below is per name:
 * a multi-lock's grant makes each of its names a hold valid for the DONE's
 * validity_ms, its token is 0 (no fencing token: outside the tokens check),
 * and its holds are lost, extended and released one name at a time. Beside
 * about one step in seven an owner also asks about a lock (rlc_engine_query:
 * LOCKED, HELD, COUNT or TTL of any name), which waits for nothing of its own.
 *
 * Checked in every schedule:
 *   overlaps   two owners hold one lock at once, both within the validity
 *              the engine reported (acquire/extend validity_ms on the owner's
 *              own clock; a watchdog hold until its LOST event or release)
 *   tokens     a new hold's fencing token not above the previous new hold's
 *              (plain acquires; a multi-lock's DONE must say token 0)
 *   residue    a lock hash still on a node once every owner released every
 *              level and every engine is idle: a level left by a failed or
 *              cancelled acquire, or an orphan level; a semaphore's count
 *              not what was set (plain: the count, nobody holding;
 *              expirable: the count and the zset's members, none of whose
 *              leases outlasts the longest lease from now, so that once they
 *              end the count is what was set), or a key under its try
 *              records' prefix "redlockc_attempt:{name}:" without a TTL (a
 *              try's record left: a granted try's is deleted by the client;
 *              tombstones have a TTL)
 *   liveness   once faults stop and what they left behind is over (a paused
 *              client runs again, a dropped connection is noticed), every
 *              acquire (wait without limit) ends RLC_OK, no hold taken then
 *              is reported gone (RLC_E_LOST: a renewal or loss push's
 *              verify found it gone on too many nodes);
 *              and every owner finishes, every engine is idle, within a bound
 *   protocol   the engine refused the node's bytes, or sent a command the
 *              node does not know (or keys of two slots to a cluster master),
 *              or its hold count disagrees with its events,
 *              or a query answered RLC_OK with a number it cannot give
 *   contract   a query was refused; an acquire or extend ended RLC_OK with
 *              validity_ms <= 0; a multi-lock's DONE names other than its
 *              first name in byte order, or an RLC_OK of it gives a token
 *   fifo       a fair lock granted to a live waiter while another live
 *              waiter is ahead of it in the node's queue (the rule, and
 *              why it holds with and without faults: "fair order" below)
 *   permits    more permits of a semaphore held at once than the count set,
 *              by the owners' own belief: a grant's from its DONE until its
 *              release begins, an expirable grant's capped at the validity
 *              it reported (on the owner's clock); with faults too (one
 *              node: a count cannot go above what was set, and an expirable
 *              lease ends on the server after the grant's validity)
 *   (semaphores: liveness also wants every set, acquire and plain release
 *              begun after faults settled to end RLC_OK, and an expirable
 *              release then too unless its lease may have ended first;
 *              contract: a grant's count is the permits asked for, its token
 *              is not 0, its validity_ms is -1 for plain permits, > 0 for
 *              expirable ones, and a release's count what it gave back)
 *
 *   sim_engine [seed=N] [schedules=N] [verbose=0|1|2] [mutate=NAME]
 *              [replay=1] [expect=violations] [lua=PATH/node.lua] [cluster=0|1]
 *              [classic=0|1] [write=0|1] [sem=0|1]
 *   sim_engine selftest
 * Exits 0 when every schedule kept every rule, 1 otherwise. replay=1 runs
 * each schedule twice and compares the traces. expect=violations (for the
 * mutations) turns it round: 0 at the first schedule that breaks a rule.
 */
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "redlockc.h"
#include "keys.h"
#include "lock_calls.h"
#include "scripts.h"
#include "scripts_family.h"
#include "sha1.h"
#include "slot.h"

#ifndef SIM_NODE_LUA
#define SIM_NODE_LUA "node.lua"
#endif

#define MAX_NODES 5   /* simulated servers: standalone nodes and cluster masters */
#define MAX_CONNS 160 /* an engine's connections: a cluster node has 2 per master it may name */
#define MAX_CLIENTS 4
#define MAX_TASKS 3
#define MAX_LOCKS 3
#define MAX_UNITS 4   /* an owner's stack: a hold, 2 nested in it, a multi-lock */
#define MAX_MULTI 4   /* names passed to one multi-lock: 3 and a duplicate */
#define MAX_SCRIPTS 64 /* both formats' scripts, the family's, their SPUBLISH twins and
                          mutated copies: a bit each in node_scripts */
#define NEVER INT64_MAX

/* ------------------------------------------------------------ utilities */

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "sim: out of memory\n");
        exit(2);
    }
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "sim: out of memory\n");
        exit(2);
    }
    return p;
}

struct buf {
    char *p;
    size_t len, cap;
};

static void buf_add(struct buf *b, const void *d, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(struct buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof tmp) {
        buf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    buf_add(b, big, (size_t)n);
    free(big);
}

static void buf_bulk(struct buf *b, const char *s, size_t n)
{
    buf_printf(b, "$%zu\r\n", n);
    buf_add(b, s, n);
    buf_add(b, "\r\n", 2);
}

/* splitmix64: one stream per schedule, so a seed alone decides everything. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int64_t rnd(int64_t lo, int64_t hi) /* inclusive */
{
    if (hi <= lo)
        return lo;
    return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

static bool chance(double p)
{
    return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0) < p;
}

/* ------------------------------------------------------------ the world */

enum ev_kind {
    EV_WAKE = 1,   /* a: client: its engine's deadline */
    EV_CONNECT,    /* a: pipe: the connect finishes */
    EV_FWD,        /* a: pipe: bytes reach the node */
    EV_BACK,       /* a: pipe: bytes reach the client */
    EV_NOTIFY,     /* a: pipe: the client learns its connection broke */
    EV_APP,        /* a: client, b: task: the owner's next step */
    EV_CANCEL,     /* a: client, b: task, op: cancel that acquire */
    EV_RESUME,     /* a: client: its process runs again */
    EV_FAULT,
    EV_QUIET,      /* faults stop */
    EV_CLUSTER,    /* a: what the cluster does next (enum cl_step), op: its generation */
};

struct event {
    int64_t t;
    uint64_t seq;
    int kind, a, b;
    uint64_t op;
};

struct seg {
    struct seg *next;
    int64_t t;
    size_t len;
    char data[];
};

enum pipe_state { P_CONNECTING, P_OPEN, P_CUT };

struct pipe {
    int client, conn, node;
    enum pipe_state state;
    bool told;            /* the client was told it is closed (or closed it) */
    bool authed, selected; /* node side: AUTH and SELECT came (password schedules) */
    int keep;             /* after a cut: forward segments the node still reads */
    struct seg *fh, *ft;  /* to the node */
    struct seg *bh, *bt;  /* to the client */
    int64_t fwd_last, back_last, stall_until;
    redisReader *rd;
    char **subs;          /* channels this connection subscribed to (node side) */
    int nsubs, capsubs;
    char **ssubs;         /* shard channels (SSUBSCRIBE: a cluster master) */
    int nssubs, capssubs;
    bool asking;          /* ASKING came: the next command may use an importing slot */
    int track_to;         /* CLIENT TRACKING ON REDIRECT: that pipe + 1; 0 off */
    char **tkeys;         /* keys it read since their last invalidation */
    int ntkeys, captkeys;
};

enum task_state { T_IDLE, T_ACQ, T_HELD, T_NESTED, T_MULTI, T_EXT, T_REL, T_DONE,
                  /* a semaphore's: set the count, acquire permits (next, running),
                     hold them, give them back */
                  T_PSET, T_PWANT, T_PACQ, T_PHELD, T_PREL };

/* An owner's hold of one name (all its levels, from any units). */
struct hold {
    int64_t levels;       /* the owner's hold count, as the events say */
    bool active;          /* a hold in use: from acquire RLC_OK to release or LOST */
    bool quiet_hold;      /* the hold was taken after faults stopped: never lost */
    bool lost_seen;       /* a LOST event or an op's RLC_E_LOST said it is gone */
    int64_t valid_end;    /* sim time its validity ends (NEVER: a watchdog hold) */
    int64_t lease;        /* the hold's lease_ms (<= 0: watchdog) */
    int kind;             /* the lock kind it is held as (RLC_KIND_*) */
    uint64_t token;       /* 0 when a multi-lock made it */
};

struct task {
    uint64_t owner;
    int rounds;           /* rounds left */
    bool multi;           /* this owner takes multi-locks too */
    int lock;             /* the running plain op's name */
    enum task_state st;
    uint64_t op;
    int64_t op_start;     /* sim time the running op began */
    bool quiet_op;        /* the op began after faults stopped */
    bool nested_multi;    /* the running multi-lock nests in a hold (no wait) */
    unsigned mset;        /* the running multi-lock's names, a bit per lock */
    int64_t mlease;       /* the running multi-lock's lease_ms */
    int64_t ext_lease;    /* the running extend's */
    unsigned unit[MAX_UNITS]; /* what it holds, oldest first: a bit per name */
    int nunits;
    unsigned releasing;   /* names of the unit being given back, not yet released */
    struct hold h[MAX_LOCKS];
    unsigned sem_known;   /* semaphores whose count this owner's set call saw set */
    /* The owner's one grant of permits (a semaphore's round holds nothing else). */
    struct permits {
        int64_t n;         /* held, by the owner's belief: from grant to release (0 none) */
        int64_t want;      /* the running acquire's */
        int64_t lease;     /* the running acquire's (expirable kind) */
        int64_t valid_end; /* NEVER (plain), or the expirable grant's validity */
        int64_t margin;    /* validity left when its release began */
        int64_t rel;       /* permits the running release gives back */
        bool run_out;      /* the holder lets the lease run out instead of releasing */
        bool late;         /* the running release names permits whose lease ran out */
        char id[RLC_PERMIT_ID_LEN + 1];
    } pm;
};

#define MAX_QUERIES 8
struct client {
    rlc_engine *e;
    char uuid[37];
    int64_t clk_off, clk_ppm; /* local = off + t + t*ppm/1e6 */
    int64_t paused_until;
    int64_t wake_t;
    int pipe[MAX_CONNS]; /* command, subscriber per node (a cluster's: per master); loss
                            push's pairs */
    int ntasks;
    struct task task[MAX_TASKS];
    int nq; /* queries in flight (rlc_engine_query), answered by events */
    struct query {
        uint64_t op;
        int what;
    } q[MAX_QUERIES];
};

struct script_slot {
    char sha[41];
    char *source; /* a copy: an EVAL of a known source needs no SHA-1 */
    size_t len;
    const char *name;
    int runner; /* Lua registry reference, LUA_NOREF if it does not compile */
};

struct stats {
    long overlaps, tokens, residue, liveness, protocol, contract, fifo, permits;
    long grants, busy, failed, canceled, lost, extends, releases;
    long multi_grants, multi_busy, multi_failed, multi_canceled;
    long cuts, stalls, node_pauses, client_pauses, flushes, noscript, short_writes, restarts;
    long counters_lost; /* fencing counters a restart took */
    long loads, loads_refused; /* SCRIPT LOAD answered, refused (an ACL) */
    long commands, messages, events, claims;
    long queries, query_answers; /* rlc_engine_query: sent, answered RLC_OK */
    long fair_grants, fair_behind; /* fair grants to live waiters; of them, with others queued */
    long sem_grants, sem_releases, sem_lapsed, sem_sets; /* permits taken, given back, left to
                                                            run out; counts set */
    long invalidations;   /* loss push: CLIENT TRACKING messages sent */
    long cluster_schedules, moved, ask, asking, tryagain, clusterdown, migrations,
        keys_migrated, slot_maps, sunsubscribes;
};

struct config {
    int nodes, clients, locks;
    int64_t io, node_timeout, connect, watchdog, jitter, lease_max, hold_max;
    int64_t quiet_at;
    int64_t settled_at; /* what faults left behind is over: paused clients run,
                           dropped connections are noticed (see liveness) */
    int rounds;
    bool faults;
    const char *prefix;   /* key_prefix ("" or "app:") */
    bool password;        /* nodes want AUTH and SELECT 3 (a cluster: AUTH) */
    /* a cluster schedule: node 0 of the engines is a redis-cluster:// node of
     * `masters` masters, servers first_master.. (standalone nodes before) */
    bool cluster;
    int servers, first_master, masters;
    bool redis7;          /* TRYAGAIN on a migrating source, sharded pub/sub */
    bool tagged;          /* the names share one {hash tag}: multi-locks allowed */
    bool fencing;         /* fencing=1: tokens checked; else every token is 0 */
    bool classic;         /* format=classic: string locks, no nesting, no fencing */
    bool writes;          /* some names are read-write or fair locks (kind) */
    int kind[MAX_LOCKS];  /* each name's lock kind: RLC_KIND_LOCK, WRITE (a read-write
                             lock: each round reads or writes), FAIR */
    int64_t thread_wait;  /* the fair locks' */
    bool sems;            /* some names are semaphores (one node; kind SEMAPHORE or
                             PSEMAPHORE): owners take 1-2 permits of them */
    int64_t sem_set[MAX_LOCKS]; /* the count each owner sets (once: SETNX) */
};

/* The cluster's state: each master's own view of who owns a slot (they agree
 * but while a migration ends: the target learns first, then the source, then
 * the others), one migration at a time, CLUSTERDOWN moments. */
enum cl_step { CL_NEXT, CL_MOVE_KEY, CL_SOURCE_KNOWS, CL_ALL_KNOW };
static struct {
    uint8_t view[MAX_NODES][RLC_SLOTS]; /* server n's owner of each slot (a server index) */
    bool mig;                /* a slot is MIGRATING on mfrom (and IMPORTING on mto until
                                mto owns it) */
    bool importing;
    int stage;               /* 0: every view agrees; else a migration is under way */
    unsigned mslot;
    int mfrom, mto;
    uint64_t gen;            /* steps of an earlier generation are moot (settled) */
    int64_t down_until;      /* CLUSTERDOWN for keyed commands until then */
} CL;

static struct {
    lua_State *L;
    struct script_slot scripts[MAX_SCRIPTS];
    int nscripts;
    int verbose;
    const char *mutate;
    int no_flush; /* flush=0: no SCRIPT FLUSH faults (to tell causes apart) */
    int cluster_mode; /* cluster=0|1: no schedule has a cluster, every one; -1: a quarter */
    int classic_mode; /* classic=0|1: no schedule in the classic format, every one; -1: a fifth */
    int write_mode;   /* write=0|1: no schedule with write locks, every one; -1: a sixth */
    int sem_mode;     /* sem=0|1: no schedule with semaphores, every one that may have
                         them; -1: half */
    char unknown[256]; /* names of commands the node did not know */

    /* per schedule */
    uint64_t seed;
    struct config cfg;
    int64_t now;
    uint64_t seq;
    struct event *heap;
    size_t nheap, capheap;
    struct client cl[MAX_CLIENTS];
    struct pipe *pipes;
    int npipes, cappipes;
    int64_t node_paused[MAX_NODES];
    int64_t node_down[MAX_NODES]; /* restarting: connects fail until then */
    int node_runs[MAX_NODES];     /* restarts so far: the run_id INFO server says */
    uint64_t node_scripts[MAX_NODES]; /* bit i: scripts[i] is in the node's cache */
    int cur_node;
    bool quiet;
    int tasks_left;
    uint64_t last_token[MAX_LOCKS];
    bool sem_used[MAX_LOCKS];   /* a set answered RLC_OK or a grant came: the count is there */
    int last_holder[MAX_LOCKS]; /* client * 1000 + owner of the last new hold */
    uint64_t digest;
    struct stats st;
} S;

/* In byte order: a set's first name in byte order is its lowest index. A
 * cluster schedule's names may share a hash tag (one slot: a multi-lock can
 * take them). */
static const char *const plain_names[MAX_LOCKS] = {"lk0", "lk1", "lk2"};
static const char *const tagged_names[MAX_LOCKS] = {"{t}0", "{t}1", "{t}2"};
static const char *const *lock_names = plain_names;

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
    if (!S.verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("%8" PRId64 " ", S.now);
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
}

static void digest_add(const void *d, size_t n)
{
    const unsigned char *p = d;
    for (size_t i = 0; i < n; i++)
        S.digest = (S.digest ^ p[i]) * 0x100000001b3ULL;
}

/* ------------------------------------------------------------ event heap */

static bool ev_less(const struct event *a, const struct event *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void at(int64_t t, int kind, int a, int b, uint64_t op)
{
    if (S.nheap == S.capheap) {
        S.capheap = S.capheap ? S.capheap * 2 : 256;
        S.heap = xrealloc(S.heap, S.capheap * sizeof *S.heap);
    }
    struct event ev = {t < S.now ? S.now : t, ++S.seq, kind, a, b, op};
    size_t i = S.nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&ev, &S.heap[p]))
            break;
        S.heap[i] = S.heap[p];
        i = p;
    }
    S.heap[i] = ev;
}

static struct event pop(void)
{
    struct event top = S.heap[0], last = S.heap[--S.nheap];
    size_t i = 0, n = S.nheap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct event *best = &last;
        if (l < n && ev_less(&S.heap[l], best)) {
            m = l;
            best = &S.heap[l];
        }
        if (r < n && ev_less(&S.heap[r], best))
            m = r;
        if (m == i)
            break;
        S.heap[i] = S.heap[m];
        i = m;
    }
    if (n > 0)
        S.heap[i] = last;
    return top;
}

/* ------------------------------------------------------------ clocks */

static int64_t local_at(const struct client *c, int64_t t)
{
    int64_t d = t * c->clk_ppm;
    int64_t q = d / 1000000;
    if (d % 1000000 < 0)
        q--; /* floor */
    return c->clk_off + t + q;
}

static int64_t local_now(const struct client *c)
{
    return local_at(c, S.now);
}

/* The first sim time at or after now when the client's clock reads >= local. */
static int64_t sim_at(const struct client *c, int64_t local)
{
    if (local_now(c) >= local)
        return S.now;
    double guess = (double)(local - c->clk_off) * 1e6 / (double)(1000000 + c->clk_ppm);
    int64_t t = (int64_t)guess;
    if (t < S.now)
        t = S.now;
    while (local_at(c, t) < local)
        t++;
    while (t > S.now && local_at(c, t - 1) >= local)
        t--;
    return t;
}

/* ------------------------------------------------------------ scripts */

static int script_find(const char *sha)
{
    for (int i = 0; i < S.nscripts; i++)
        if (strcmp(S.scripts[i].sha, sha) == 0)
            return i;
    return -1;
}

/* The slot of a script source (compiled once per process; the process
 * stops if there is none left). */
static int script_add(const char *src, size_t len, const char *name)
{
    for (int i = 0; i < S.nscripts; i++)
        if (S.scripts[i].len == len && memcmp(S.scripts[i].source, src, len) == 0)
            return i;
    if (S.nscripts == MAX_SCRIPTS) {
        /* a node that could not run a script would change what the engines do */
        fprintf(stderr, "sim: more than %d scripts: raise MAX_SCRIPTS\n", MAX_SCRIPTS);
        exit(2);
    }
    struct script_slot *s = &S.scripts[S.nscripts];
    sha1_hex(src, len, s->sha);
    s->source = xmalloc(len);
    memcpy(s->source, src, len);
    s->len = len;
    s->name = name ? name : "?";
    lua_getglobal(S.L, "compile");
    lua_pushlstring(S.L, src, len);
    lua_call(S.L, 1, 2);
    if (lua_isnil(S.L, -2)) {
        lua_pop(S.L, 2);
        s->runner = LUA_NOREF;
    } else {
        lua_pop(S.L, 1);
        s->runner = luaL_ref(S.L, LUA_REGISTRYINDEX);
    }
    return S.nscripts++;
}

static const char *script_name(const char *sha, size_t len)
{
    if (len != 40)
        return NULL;
    char s[41];
    memcpy(s, sha, 40);
    s[40] = 0;
    int i = script_find(s);
    return i >= 0 ? S.scripts[i].name : NULL;
}

/* Redis' conversion of a script's result (top of the Lua stack) to RESP2. */
static void encode_value(struct buf *out, int depth)
{
    lua_State *L = S.L;
    switch (lua_type(L, -1)) {
    case LUA_TNUMBER:
        if (lua_isinteger(L, -1))
            buf_printf(out, ":%lld\r\n", (long long)lua_tointeger(L, -1));
        else
            buf_printf(out, ":%lld\r\n", (long long)lua_tonumber(L, -1));
        break;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, -1, &n);
        buf_bulk(out, s, n);
        break;
    }
    case LUA_TBOOLEAN:
        if (lua_toboolean(L, -1))
            buf_printf(out, ":1\r\n");
        else
            buf_printf(out, "$-1\r\n"); /* false is nil */
        break;
    case LUA_TTABLE: {
        if (lua_getfield(L, -1, "err") == LUA_TSTRING) {
            const char *m = lua_tostring(L, -1);
            buf_add(out, "-", 1);
            for (const char *p = m; *p; p++)
                buf_add(out, (*p == '\r' || *p == '\n') ? " " : p, 1);
            buf_add(out, "\r\n", 2);
            lua_pop(L, 1);
            break;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, -1, "ok") == LUA_TSTRING) {
            buf_printf(out, "+%s\r\n", lua_tostring(L, -1));
            lua_pop(L, 1);
            break;
        }
        lua_pop(L, 1);
        int n = 0;
        while (lua_rawgeti(L, -1, n + 1) != LUA_TNIL && depth < 8) {
            lua_pop(L, 1);
            n++;
        }
        lua_pop(L, 1);
        buf_printf(out, "*%d\r\n", n);
        for (int i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            encode_value(out, depth + 1);
            lua_pop(L, 1);
        }
        break;
    }
    default:
        buf_add(out, "$-1\r\n", 5);
        break;
    }
}

static int fifo_before(int n, redisReply **keys, long nkeys);
static void fifo_after(int n, int l);

static void run_script(int node, int slot, redisReply **args, size_t nargs, struct buf *out)
{
    struct script_slot *s = &S.scripts[slot];
    if (s->runner == LUA_NOREF) {
        buf_printf(out, "-ERR Error compiling script\r\n");
        return;
    }
    if (nargs < 1) {
        buf_printf(out, "-ERR wrong number of arguments for 'evalsha' command\r\n");
        return;
    }
    char *end;
    long nkeys = strtol(args[0]->str, &end, 10);
    if (*end || nkeys < 0 || (size_t)nkeys > nargs - 1) {
        buf_printf(out, "-ERR Number of keys can't be greater than number of args\r\n");
        return;
    }
    int fair = fifo_before(node, args + 1, nkeys);
    lua_State *L = S.L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->runner);
    lua_pushinteger(L, node + 1);
    lua_pushinteger(L, S.now);
    lua_createtable(L, (int)nkeys, 0);
    for (long i = 0; i < nkeys; i++) {
        lua_pushlstring(L, args[1 + i]->str, args[1 + i]->len);
        lua_rawseti(L, -2, i + 1);
    }
    lua_createtable(L, (int)(nargs - 1 - (size_t)nkeys), 0);
    for (size_t i = 1 + (size_t)nkeys; i < nargs; i++) {
        lua_pushlstring(L, args[i]->str, args[i]->len);
        lua_rawseti(L, -2, (lua_Integer)(i - (size_t)nkeys));
    }
    S.cur_node = node;
    if (lua_pcall(L, 4, 1, 0) != LUA_OK)
        buf_printf(out, "-ERR %s\r\n", lua_tostring(L, -1));
    else
        encode_value(out, 0);
    lua_pop(L, 1);
    fifo_after(node, fair); /* an error keeps what the script wrote before it */
}

/* ------------------------------------------------------------ network */

static struct seg *seg_new(const char *d, size_t n, int64_t t)
{
    struct seg *s = xmalloc(sizeof *s + n);
    s->next = NULL;
    s->t = t;
    s->len = n;
    memcpy(s->data, d, n);
    return s;
}

static int64_t delay(void)
{
    if (!S.quiet && S.cfg.faults && chance(0.03))
        return rnd(5, S.cfg.io); /* a slow packet: later ones on the conn wait */
    return rnd(0, 2);
}

static void to_client(int p, const char *d, size_t n)
{
    struct pipe *pp = &S.pipes[p];
    if (pp->state == P_CUT)
        return;
    int64_t t = S.now + delay();
    if (t < pp->back_last)
        t = pp->back_last;
    pp->back_last = t;
    struct seg *s = seg_new(d, n, t);
    if (pp->bt)
        pp->bt->next = s;
    else
        pp->bh = s;
    pp->bt = s;
    at(t, EV_BACK, p, 0, 0);
}

static bool is_master(int n)
{
    return S.cfg.cluster && n >= S.cfg.first_master && n < S.cfg.servers;
}

/* The server a connection reaches: its address (a cluster's connections
 * follow the engine's map); "10.0.0.N" is standalone server N-1, "10.0.1.J"
 * the cluster's master J-1. */
static int server_of_conn(int client, int conn)
{
    const char *host = NULL;
    int port = 0, tls = 0, k = 0;
    if (S.cl[client].e &&
        rlc_engine_conn_address(S.cl[client].e, conn, &host, &port, &tls) == RLC_OK && host &&
        sscanf(host, "10.0.%*d.%d", &k) == 1 && k >= 1) {
        int n = strncmp(host, "10.0.1.", 7) == 0 ? S.cfg.first_master + k - 1 : k - 1;
        if (n >= 0 && n < S.cfg.servers && (strncmp(host, "10.0.1.", 7) == 0) == is_master(n)) {
            if (S.verbose > 1)
                trace("c%d conn%d opens to %s (n%d)", client, conn, host, n);
            return n;
        }
    }
    S.st.protocol++;
    trace("PROTOCOL c%d conn%d: opened to an address the simulation does not have (%s)", client,
          conn, host ? host : "none");
    return 0;
}

static int pipe_new(int client, int conn)
{
    if (S.npipes == S.cappipes) {
        S.cappipes = S.cappipes ? S.cappipes * 2 : 64;
        S.pipes = xrealloc(S.pipes, (size_t)S.cappipes * sizeof *S.pipes);
    }
    struct pipe *p = &S.pipes[S.npipes];
    memset(p, 0, sizeof *p);
    p->client = client;
    p->conn = conn;
    /* the engine's layout (engine_conn.c): 2 per node, then (no sentinel,
     * no cluster here) loss push's pair per node */
    if (S.cfg.cluster)
        p->node = server_of_conn(client, conn);
    else
        p->node = conn < 2 * S.cfg.nodes ? conn / 2 : (conn - 2 * S.cfg.nodes) / 2;
    p->state = P_CONNECTING;
    p->fwd_last = p->back_last = S.now;
    return S.npipes++;
}

static void pipe_unsubscribe_all(struct pipe *p)
{
    for (int i = 0; i < p->nsubs; i++)
        free(p->subs[i]);
    p->nsubs = 0;
    for (int i = 0; i < p->nssubs; i++)
        free(p->ssubs[i]);
    p->nssubs = 0;
    for (int i = 0; i < p->ntkeys; i++)
        free(p->tkeys[i]);
    p->ntkeys = 0;
    p->track_to = 0;
}

static void segs_free(struct seg *s)
{
    while (s) {
        struct seg *n = s->next;
        free(s);
        s = n;
    }
}

static void pipes_free(void)
{
    for (int i = 0; i < S.npipes; i++) {
        struct pipe *p = &S.pipes[i];
        segs_free(p->fh);
        segs_free(p->bh);
        if (p->rd)
            redisReaderFree(p->rd);
        pipe_unsubscribe_all(p);
        free(p->subs);
        free(p->ssubs);
        free(p->tkeys);
    }
    S.npipes = 0;
}

/* Breaks a connection: what the node has not read yet is lost except a
 * prefix (sent before the break: it may still run), replies are lost, the
 * node drops its subscriptions. tell: the client hears of it after `after`
 * ms (else the driver itself closed it). */
static void cut(int p, bool tell, int64_t after, const char *why)
{
    struct pipe *pp = &S.pipes[p];
    if (pp->state == P_CUT)
        return;
    pp->state = P_CUT;
    int queued = 0;
    for (struct seg *s = pp->fh; s; s = s->next)
        queued++;
    pp->keep = (int)rnd(0, queued);
    segs_free(pp->bh);
    pp->bh = pp->bt = NULL;
    pipe_unsubscribe_all(pp);
    S.st.cuts++;
    trace("c%d conn%d cut (%s; %d of %d unread segments still reach the node)", pp->client,
          pp->conn, why, pp->keep, queued);
    if (tell)
        at(S.now + after, EV_NOTIFY, p, 0, 0);
    else
        pp->told = true;
}

/* A tracking connection read key: its next change is pushed (once). */
static void track_key(struct pipe *pp, const char *key, size_t len)
{
    for (int i = 0; i < pp->ntkeys; i++)
        if (strlen(pp->tkeys[i]) == len && memcmp(pp->tkeys[i], key, len) == 0)
            return;
    if (pp->ntkeys == pp->captkeys) {
        pp->captkeys = pp->captkeys ? 2 * pp->captkeys : 8;
        pp->tkeys = xrealloc(pp->tkeys, (size_t)pp->captkeys * sizeof *pp->tkeys);
    }
    char *k = xmalloc(len + 1);
    memcpy(k, key, len);
    k[len] = 0;
    pp->tkeys[pp->ntkeys++] = k;
}

static void node_exec(int p, redisReply *r, struct buf *out);

/* The node reads what reached it on pipe p, runs it, answers. */
static void on_fwd(int p)
{
    struct pipe *pp = &S.pipes[p];
    while (pp->fh && pp->fh->t <= S.now) {
        int64_t hold = S.node_paused[pp->node];
        if (pp->stall_until > hold)
            hold = pp->stall_until;
        if (hold > S.now) {
            at(hold, EV_FWD, p, 0, 0);
            return;
        }
        struct seg *s = pp->fh;
        pp->fh = s->next;
        if (!pp->fh)
            pp->ft = NULL;
        if (pp->state == P_CUT) {
            if (pp->keep <= 0) {
                free(s);
                continue;
            }
            pp->keep--;
        }
        if (!pp->rd)
            pp->rd = redisReaderCreate();
        redisReaderFeed(pp->rd, s->data, s->len);
        digest_add(s->data, s->len);
        free(s);
        for (;;) {
            void *reply = NULL;
            if (redisReaderGetReply(pp->rd, &reply) != REDIS_OK) {
                S.st.protocol++;
                trace("PROTOCOL c%d conn%d: the node could not parse the client's bytes",
                      pp->client, pp->conn);
                cut(p, true, 0, "protocol error at the node");
                return;
            }
            if (!reply)
                break;
            struct buf out = {0};
            node_exec(p, reply, &out);
            freeReplyObject(reply);
            if (out.len)
                to_client(p, out.p, out.len);
            free(out.p);
        }
    }
}

static void show_cmd(int p, redisReply *r, const struct buf *out)
{
    if (S.verbose < 2)
        return;
    struct pipe *pp = &S.pipes[p];
    struct buf b = {0};
    for (size_t i = 0; i < r->elements; i++) {
        const char *s = r->element[i]->str;
        size_t n = r->element[i]->len;
        const char *name = i == 1 ? script_name(s, n) : NULL;
        if (i == 1 && !name && n > 60 && strncasecmp(r->element[0]->str, "eval", 5) == 0) {
            char sha[41];
            sha1_hex(s, n, sha);
            int k = script_find(sha);
            name = k >= 0 ? S.scripts[k].name : "?";
            buf_printf(&b, " <source of %s>", name);
            continue;
        }
        if (name)
            buf_printf(&b, " <%s>", name);
        else
            buf_printf(&b, " %.*s", (int)(n > 60 ? 60 : n), s);
    }
    struct buf rep = {0};
    for (size_t i = 0; i < out->len && i < 200; i++)
        buf_add(&rep, out->p[i] == '\r' ? "" : out->p[i] == '\n' ? " " : &out->p[i],
                out->p[i] == '\r' ? 0 : 1);
    trace("  n%d <- c%d conn%d:%s  ->  %s", pp->node, pp->client, pp->conn, b.p ? b.p : "",
          rep.p ? rep.p : "");
    free(b.p);
    free(rep.p);
}

static bool is(const redisReply *a, const char *name)
{
    return a->len == strlen(name) && strncasecmp(a->str, name, a->len) == 0;
}

static int list_index(char *const *list, int count, const char *ch, size_t n)
{
    for (int i = 0; i < count; i++)
        if (strlen(list[i]) == n && memcmp(list[i], ch, n) == 0)
            return i;
    return -1;
}

static void list_add(char ***list, int *count, int *cap, const char *ch, size_t n)
{
    if (list_index(*list, *count, ch, n) >= 0)
        return;
    if (*count == *cap) {
        *cap = *cap ? *cap * 2 : 4;
        *list = xrealloc(*list, (size_t)*cap * sizeof **list);
    }
    char *c = xmalloc(n + 1);
    memcpy(c, ch, n);
    c[n] = 0;
    (*list)[(*count)++] = c;
}

static int sub_index(const struct pipe *p, const char *ch, size_t n)
{
    return list_index(p->subs, p->nsubs, ch, n);
}

static void note_unknown(const redisReply *a)
{
    char name[40];
    snprintf(name, sizeof name, "%.*s ", (int)(a->len > 30 ? 30 : a->len), a->str);
    if (!strstr(S.unknown, name) && strlen(S.unknown) + strlen(name) < sizeof S.unknown)
        strcat(S.unknown, name);
}

/* ------------------------------------------------------------ cluster */

static void master_addr(int n, char *buf, size_t size)
{
    snprintf(buf, size, "10.0.1.%d:6379", n - S.cfg.first_master + 1);
}

static bool key_exists(int n, const char *key, size_t len)
{
    lua_getglobal(S.L, "exists");
    lua_pushinteger(S.L, n + 1);
    lua_pushlstring(S.L, key, len);
    lua_pushinteger(S.L, S.now);
    S.cur_node = n;
    lua_call(S.L, 3, 1);
    bool there = lua_toboolean(S.L, -1);
    lua_pop(S.L, 1);
    return there;
}

/* The command's keys (a script's declared ones) or shard channels. */
static size_t command_keys(redisReply **a, size_t argc, size_t *first, bool *shard)
{
    *first = 1;
    *shard = false;
    if ((is(a[0], "evalsha") || is(a[0], "eval")) && argc >= 3) {
        char *end;
        long k = strtol(a[2]->str, &end, 10);
        *first = 3;
        return *end || k < 0 || (size_t)k > argc - 3 ? 0 : (size_t)k;
    }
    if ((is(a[0], "hexists") || is(a[0], "hget") || is(a[0], "pttl") || is(a[0], "get") ||
         is(a[0], "setnx")) &&
        argc >= 2)
        return 1;
    if (is(a[0], "exists") || is(a[0], "del"))
        return argc - 1;
    if (is(a[0], "ssubscribe")) {
        *shard = true;
        return argc - 1;
    }
    return 0;
}

/* Redis' getNodeByQuery on master n: whether the command is redirected or
 * refused (the reply is in out) rather than run. Keys of a slot under
 * migration: on the source (MIGRATING) a command whose keys are all there
 * runs, one whose keys are all gone is ASKed to the target, and one with
 * some of each is TRYAGAIN (Redis 7; Redis 6 ASKs it); on the target
 * (IMPORTING) it runs only right after ASKING, and a multi-key one only if
 * every key is there (else TRYAGAIN); without ASKING it is MOVED to the
 * owner. Shard channels count no keys and ride out CLUSTERDOWN
 * (cluster-allow-pubsubshard-when-down). */
static bool cluster_gate(int p, redisReply **a, size_t argc, bool asking, struct buf *out)
{
    int n = S.pipes[p].node;
    size_t first;
    bool shard;
    size_t nk = command_keys(a, argc, &first, &shard);
    if (nk == 0)
        return false;
    unsigned slot = slot_of(a[first]->str, a[first]->len);
    int owner = CL.view[n][slot];
    bool here = CL.mig && CL.mslot == slot;
    bool migrating = here && owner == n && CL.mfrom == n;
    bool importing = here && !migrating && CL.importing && CL.mto == n;
    bool multiple = false;
    int missing = 0, existing = 0;
    for (size_t i = first; i < first + nk; i++) {
        if (slot_of(a[i]->str, a[i]->len) != slot) {
            S.st.protocol++; /* the engine keeps a call in one slot (C1) */
            buf_printf(out, "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
            return true;
        }
        if (a[i]->len != a[first]->len || memcmp(a[i]->str, a[first]->str, a[i]->len) != 0)
            multiple = true;
        if ((migrating || importing) && !shard)
            key_exists(n, a[i]->str, a[i]->len) ? existing++ : missing++;
    }
    char to[32];
    if (!shard && CL.down_until > S.now) {
        S.st.clusterdown++;
        buf_printf(out, "-CLUSTERDOWN The cluster is down\r\n");
        return true;
    }
    if (migrating && missing) {
        if (S.cfg.redis7 && existing) {
            S.st.tryagain++;
            buf_printf(out, "-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
        } else {
            S.st.ask++;
            master_addr(CL.mto, to, sizeof to);
            buf_printf(out, "-ASK %u %s\r\n", slot, to);
        }
        return true;
    }
    if (importing && asking) {
        if (!(multiple && missing))
            return false;
        S.st.tryagain++;
        buf_printf(out, "-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
        return true;
    }
    if (owner == n)
        return false;
    S.st.moved++;
    master_addr(owner, to, sizeof to);
    buf_printf(out, "-MOVED %u %s\r\n", slot, to);
    return true;
}

/* CLUSTER SLOTS as master n sees it: ranges of slots with one owner. */
static void cluster_slots(int n, struct buf *out)
{
    struct buf b = {0};
    int ranges = 0;
    for (int lo = 0; lo < RLC_SLOTS;) {
        int hi = lo;
        while (hi + 1 < RLC_SLOTS && CL.view[n][hi + 1] == CL.view[n][lo])
            hi++;
        char id[41];
        snprintf(id, sizeof id, "%040d", CL.view[n][lo] - S.cfg.first_master + 1);
        buf_printf(&b, "*3\r\n:%d\r\n:%d\r\n*3\r\n$8\r\n10.0.1.%d\r\n:6379\r\n", lo, hi,
                   CL.view[n][lo] - S.cfg.first_master + 1);
        buf_bulk(&b, id, 40);
        ranges++;
        lo = hi + 1;
    }
    buf_printf(out, "*%d\r\n", ranges);
    buf_add(out, b.p, b.len);
    free(b.p);
    S.st.slot_maps++;
}

/* The commands only a cluster master knows; false if it is none of them. */
static bool cluster_command(int p, redisReply **a, size_t argc, struct buf *out)
{
    struct pipe *pp = &S.pipes[p];
    if (is(a[0], "asking") && argc == 1) {
        pp->asking = true;
        S.st.asking++;
        buf_printf(out, "+OK\r\n");
    } else if (is(a[0], "cluster") && argc == 2 && is(a[1], "slots")) {
        cluster_slots(pp->node, out);
    } else if (is(a[0], "pubsub") && argc >= 2 && is(a[1], "shardnumsub")) {
        if (!S.cfg.redis7) {
            buf_printf(out, "-ERR unknown subcommand 'SHARDNUMSUB'. Try PUBSUB HELP.\r\n");
            return true;
        }
        buf_printf(out, "*%zu\r\n", 2 * (argc - 2));
        for (size_t i = 2; i < argc; i++) {
            buf_bulk(out, a[i]->str, a[i]->len);
            buf_printf(out, ":0\r\n");
        }
    } else if (is(a[0], "ssubscribe") && argc >= 2 && S.cfg.redis7) {
        for (size_t i = 1; i < argc; i++) {
            list_add(&pp->ssubs, &pp->nssubs, &pp->capssubs, a[i]->str, a[i]->len);
            buf_printf(out, "*3\r\n$10\r\nssubscribe\r\n");
            buf_bulk(out, a[i]->str, a[i]->len);
            buf_printf(out, ":%d\r\n", pp->nssubs);
        }
    } else if (is(a[0], "sunsubscribe") && argc >= 2 && S.cfg.redis7) {
        for (size_t i = 1; i < argc; i++) {
            int k = list_index(pp->ssubs, pp->nssubs, a[i]->str, a[i]->len);
            if (k >= 0) {
                free(pp->ssubs[k]);
                pp->ssubs[k] = pp->ssubs[--pp->nssubs];
            }
            buf_printf(out, "*3\r\n$12\r\nsunsubscribe\r\n");
            buf_bulk(out, a[i]->str, a[i]->len);
            buf_printf(out, ":%d\r\n", pp->nssubs);
        }
    } else {
        return false;
    }
    return true;
}

static void node_exec(int p, redisReply *r, struct buf *out)
{
    struct pipe *pp = &S.pipes[p];
    int n = pp->node;
    bool asking = pp->asking; /* ASKING holds for the next command only */
    pp->asking = false;
    S.st.commands++;
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        S.st.protocol++;
        buf_printf(out, "-ERR Protocol error: expected an array of bulk strings\r\n");
        goto done;
    }
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->type != REDIS_REPLY_STRING) {
            S.st.protocol++;
            buf_printf(out, "-ERR Protocol error: expected bulk strings\r\n");
            goto done;
        }
    redisReply **a = r->element;
    size_t argc = r->elements;
    if (S.cfg.password && !pp->authed) {
        if (is(a[0], "auth") && argc >= 2 && a[argc - 1]->len == 6 &&
            memcmp(a[argc - 1]->str, "s3cret", 6) == 0) {
            pp->authed = true;
            buf_printf(out, "+OK\r\n");
        } else if (is(a[0], "auth")) {
            buf_printf(out, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
            S.st.protocol++;
        } else {
            buf_printf(out, "-NOAUTH Authentication required.\r\n");
            S.st.protocol++; /* the handshake must come first */
        }
        goto done;
    }
    if (S.cfg.password && !pp->selected && !is_master(n) && !is(a[0], "select")) {
        S.st.protocol++; /* a command before SELECT would use the wrong database */
        buf_printf(out, "-ERR the simulation wants SELECT 3 before '%.*s'\r\n", (int)a[0]->len,
                   a[0]->str);
        goto done;
    }
    if (pp->nsubs + pp->nssubs > 0 && !is(a[0], "subscribe") && !is(a[0], "unsubscribe") &&
        !is(a[0], "ssubscribe") && !is(a[0], "sunsubscribe") && !is(a[0], "ping") &&
        !is(a[0], "quit")) {
        buf_printf(out, "-ERR Can't execute '%.*s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / "
                        "PING / QUIT / RESET are allowed in this context\r\n",
                   (int)a[0]->len, a[0]->str);
        S.st.protocol++;
        goto done;
    }
    if (is_master(n) && (cluster_gate(p, a, argc, asking, out) || cluster_command(p, a, argc, out)))
        goto done;
    if (is(a[0], "evalsha") && argc >= 3) {
        char sha[41];
        snprintf(sha, sizeof sha, "%.*s", (int)(a[1]->len > 40 ? 40 : a[1]->len), a[1]->str);
        int k = a[1]->len == 40 ? script_find(sha) : -1;
        if (k < 0 || !(S.node_scripts[n] & (1ull << k))) {
            S.st.noscript++;
            buf_printf(out, "-NOSCRIPT No matching script. Please use EVAL.\r\n");
            goto done;
        }
        run_script(n, k, a + 2, argc - 2, out);
    } else if (is(a[0], "eval") && argc >= 3) {
        int k = script_add(a[1]->str, a[1]->len, NULL);
        S.node_scripts[n] |= 1ull << k;
        run_script(n, k, a + 2, argc - 2, out);
    } else if (is(a[0], "script") && argc >= 2 && is(a[1], "load") && argc == 3 &&
               !S.quiet && S.cfg.faults && chance(0.01)) {
        /* an ACL without SCRIPT LOAD: the engine's calls go as EVAL after
         * NOSCRIPT (engine_conn.c, load_answered) */
        S.st.loads_refused++;
        buf_printf(out, "-NOPERM User default has no permissions to run the 'script|load' "
                        "command\r\n");
    } else if (is(a[0], "script") && argc >= 2 && is(a[1], "load") && argc == 3) {
        S.st.loads++;
        int k = script_add(a[2]->str, a[2]->len, NULL);
        S.node_scripts[n] |= 1ull << k;
        buf_bulk(out, S.scripts[k].sha, 40);
    } else if (is(a[0], "script") && argc == 2 && is(a[1], "flush")) {
        S.node_scripts[n] = 0;
        buf_printf(out, "+OK\r\n");
    } else if (is(a[0], "subscribe") && argc >= 2) {
        for (size_t i = 1; i < argc; i++) {
            if (sub_index(pp, a[i]->str, a[i]->len) < 0) {
                if (pp->nsubs == pp->capsubs) {
                    pp->capsubs = pp->capsubs ? pp->capsubs * 2 : 4;
                    pp->subs = xrealloc(pp->subs, (size_t)pp->capsubs * sizeof *pp->subs);
                }
                char *ch = xmalloc(a[i]->len + 1);
                memcpy(ch, a[i]->str, a[i]->len);
                ch[a[i]->len] = 0;
                pp->subs[pp->nsubs++] = ch;
            }
            buf_printf(out, "*3\r\n$9\r\nsubscribe\r\n");
            buf_bulk(out, a[i]->str, a[i]->len);
            buf_printf(out, ":%d\r\n", pp->nsubs);
        }
    } else if (is(a[0], "unsubscribe")) {
        if (argc == 1 && pp->nsubs == 0)
            buf_printf(out, "*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n");
        if (argc == 1) {
            while (pp->nsubs > 0) {
                char *ch = pp->subs[--pp->nsubs];
                buf_printf(out, "*3\r\n$11\r\nunsubscribe\r\n");
                buf_bulk(out, ch, strlen(ch));
                buf_printf(out, ":%d\r\n", pp->nsubs);
                free(ch);
            }
        }
        for (size_t i = 1; i < argc; i++) {
            int k = sub_index(pp, a[i]->str, a[i]->len);
            if (k >= 0) {
                free(pp->subs[k]);
                pp->subs[k] = pp->subs[--pp->nsubs];
            }
            buf_printf(out, "*3\r\n$11\r\nunsubscribe\r\n");
            buf_bulk(out, a[i]->str, a[i]->len);
            buf_printf(out, ":%d\r\n", pp->nsubs);
        }
    } else if (is(a[0], "ping")) {
        if (pp->nsubs + pp->nssubs > 0)
            buf_printf(out, "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
        else
            buf_printf(out, "+PONG\r\n");
    } else if (is(a[0], "auth")) {
        buf_printf(out, "+OK\r\n");
    } else if (is(a[0], "select") && argc == 2) {
        if (a[1]->len == 1 && a[1]->str[0] == (S.cfg.password ? '3' : '0')) {
            pp->selected = true;
            buf_printf(out, "+OK\r\n");
        } else {
            S.st.protocol++;
            buf_printf(out, "-ERR the simulation's nodes have database %c only\r\n",
                       S.cfg.password ? '3' : '0');
        }
    } else if (is(a[0], "info") && argc == 2 && is(a[1], "server")) {
        /* what the restart guard reads (restart_rule.c) */
        char info[160];
        int len = snprintf(info, sizeof info,
                           "# Server\r\nrun_id:%032x%08x\r\nuptime_in_seconds:%" PRId64 "\r\n",
                           n + 1, S.node_runs[n],
                           (S.now - (S.node_runs[n] ? S.node_down[n] : 0)) / 1000);
        buf_bulk(out, info, (size_t)len);
    } else if (is(a[0], "client") && argc >= 2 && is(a[1], "id")) {
        buf_printf(out, ":%d\r\n", p + 1);
    } else if (is(a[0], "client") && argc == 5 && is(a[1], "tracking") && is(a[2], "on") &&
               is(a[3], "redirect")) {
        /* loss push (engine_track.c): this connection's reads are tracked,
         * invalidations go to the subscriber named by its CLIENT ID */
        long to = strtol(a[4]->str, NULL, 10);
        if (!S.quiet && S.cfg.faults && chance(0.01)) {
            buf_printf(out, "-NOPERM this user has no permissions to run the 'client|tracking' "
                            "command\r\n");
        } else if (to < 1 || to > S.npipes || S.pipes[to - 1].state == P_CUT ||
                   S.pipes[to - 1].node != n) {
            buf_printf(out, "-ERR The client ID you want redirect to does not exist\r\n");
        } else {
            pp->track_to = (int)to;
            buf_printf(out, "+OK\r\n");
        }
    } else if (is(a[0], "client") && argc >= 2 && is(a[1], "setname")) {
        buf_printf(out, "+OK\r\n");
    } else if ((is(a[0], "hexists") && argc == 3) || (is(a[0], "hget") && argc == 3) ||
               (is(a[0], "pttl") && argc == 2) || (is(a[0], "get") && argc == 2)) {
        /* a query's read (engine_query.c; GET: a classic lock's); EXISTS is below */
        lua_getglobal(S.L, "command");
        lua_pushinteger(S.L, n + 1);
        lua_pushinteger(S.L, S.now);
        for (size_t i = 0; i < argc; i++)
            lua_pushlstring(S.L, a[i]->str, a[i]->len);
        S.cur_node = n;
        lua_call(S.L, (int)argc + 2, 1);
        encode_value(out, 0);
        lua_pop(S.L, 1);
        if (pp->track_to && pp->state != P_CUT)
            track_key(pp, a[1]->str, a[1]->len);
    } else if ((is(a[0], "setnx") && argc == 3) || (is(a[0], "del") && argc >= 2)) {
        /* a semaphore's count set once (SETNX), a granted try's record
         * deleted by the client (DEL; mutation semnoforget keeps it) */
        bool keep = S.mutate && strcmp(S.mutate, "semnoforget") == 0 && is(a[0], "del");
        lua_getglobal(S.L, "command");
        lua_pushinteger(S.L, n + 1);
        lua_pushinteger(S.L, S.now);
        for (size_t i = 0; i < argc; i++)
            lua_pushlstring(S.L, keep && i == 0 ? "exists" : a[i]->str,
                            keep && i == 0 ? 6 : a[i]->len);
        S.cur_node = n;
        lua_call(S.L, (int)argc + 2, 1);
        encode_value(out, 0);
        lua_pop(S.L, 1);
    } else if (is(a[0], "exists") && argc >= 2) {
        int count = 0;
        for (size_t i = 1; i < argc; i++) {
            lua_getglobal(S.L, "exists");
            lua_pushinteger(S.L, n + 1);
            lua_pushlstring(S.L, a[i]->str, a[i]->len);
            lua_pushinteger(S.L, S.now);
            S.cur_node = n;
            lua_call(S.L, 3, 1);
            count += lua_toboolean(S.L, -1);
            lua_pop(S.L, 1);
            if (pp->track_to && pp->state != P_CUT)
                track_key(pp, a[i]->str, a[i]->len);
        }
        buf_printf(out, ":%d\r\n", count);
    } else {
        note_unknown(a[0]);
        S.st.protocol++;
        buf_printf(out, "-ERR unknown command '%.*s'\r\n", (int)a[0]->len, a[0]->str);
    }
done:
    show_cmd(p, r, out);
}

/* sim_touch(node, key): a key of that node was written, deleted or expired.
 * Every connection that tracks it forgets it and its redirect target (if it
 * is there and subscribed to __redis__:invalidate) gets the invalidation. */
static int lua_touch(lua_State *L)
{
    int node = (int)luaL_checkinteger(L, 1) - 1;
    size_t len;
    const char *key = luaL_checklstring(L, 2, &len);
    static const char ch[] = "__redis__:invalidate";
    for (int p = 0; p < S.npipes; p++) {
        struct pipe *pp = &S.pipes[p];
        if (pp->state == P_CUT || pp->node != node || !pp->track_to)
            continue;
        int i = 0;
        while (i < pp->ntkeys && !(strlen(pp->tkeys[i]) == len && !memcmp(pp->tkeys[i], key, len)))
            i++;
        if (i == pp->ntkeys)
            continue;
        free(pp->tkeys[i]);
        pp->tkeys[i] = pp->tkeys[--pp->ntkeys];
        int t = pp->track_to - 1;
        struct pipe *tp = &S.pipes[t];
        if (tp->state == P_CUT || tp->node != node || sub_index(tp, ch, sizeof ch - 1) < 0)
            continue;
        struct buf b = {0};
        buf_printf(&b, "*3\r\n$7\r\nmessage\r\n");
        buf_bulk(&b, ch, sizeof ch - 1);
        buf_printf(&b, "*1\r\n");
        buf_bulk(&b, key, len);
        to_client(t, b.p, b.len);
        free(b.p);
        S.st.invalidations++;
    }
    return 0;
}

/* PUBLISH from a script on S.cur_node: every subscriber connection of that
 * node gets the message, after its own delay (on a cluster, of every master:
 * a cluster spreads PUBLISH to all its nodes). SPUBLISH: the shard
 * subscribers of that master only. */
static int publish(lua_State *L, bool shard)
{
    size_t n, mlen;
    const char *ch = luaL_checklstring(L, 1, &n);
    const char *msg = luaL_optlstring(L, 2, "0", &mlen);
    bool everywhere = !shard && is_master(S.cur_node);
    int count = 0;
    for (int p = 0; p < S.npipes; p++) {
        struct pipe *pp = &S.pipes[p];
        bool there = pp->node == S.cur_node || (everywhere && is_master(pp->node));
        if (pp->state == P_CUT || !there ||
            (shard ? list_index(pp->ssubs, pp->nssubs, ch, n) : sub_index(pp, ch, n)) < 0)
            continue;
        struct buf b = {0};
        if (shard)
            buf_printf(&b, "*3\r\n$8\r\nsmessage\r\n");
        else
            buf_printf(&b, "*3\r\n$7\r\nmessage\r\n");
        buf_bulk(&b, ch, n);
        buf_bulk(&b, msg, mlen);
        to_client(p, b.p, b.len);
        free(b.p);
        count++;
        S.st.messages++;
    }
    lua_pushinteger(L, count);
    return 1;
}

static int lua_publish(lua_State *L)
{
    return publish(L, false);
}

static int lua_spublish(lua_State *L)
{
    return publish(L, true);
}

/* ------------------------------------------------------------ clients */

static void service(int ci);

static bool client_paused(int ci)
{
    return S.cl[ci].paused_until > S.now;
}

/* An event for a paused client waits until it runs again (in order). */
static bool defer_if_paused(const struct event *ev, int ci)
{
    if (!client_paused(ci))
        return false;
    at(S.cl[ci].paused_until, ev->kind, ev->a, ev->b, ev->op);
    return true;
}

static void on_back(int p)
{
    struct pipe *pp = &S.pipes[p];
    struct client *c = &S.cl[pp->client];
    if (pp->state != P_OPEN || c->pipe[pp->conn] != p)
        return;
    bool any = false;
    while (pp->bh && pp->bh->t <= S.now) {
        if (pp->stall_until > S.now) {
            at(pp->stall_until, EV_BACK, p, 0, 0);
            break;
        }
        struct seg *s = pp->bh;
        pp->bh = s->next;
        if (!pp->bh)
            pp->bt = NULL;
        digest_add(s->data, s->len);
        /* a read may return any part of what arrived */
        size_t off = 0;
        int rc = RLC_OK;
        while (off < s->len && rc == RLC_OK) {
            size_t n = s->len - off;
            if (n > 1 && chance(0.1))
                n = (size_t)rnd(1, (int64_t)n - 1);
            if (S.verbose > 2)
                trace("  c%d conn%d reads %zu bytes: %.*s", pp->client, pp->conn, n,
                      (int)(n > 120 ? 120 : n), s->data + off);
            rc = rlc_engine_received(c->e, pp->conn, s->data + off, n, local_now(c));
            off += n;
        }
        free(s);
        any = true;
        if (rc != RLC_OK) {
            S.st.protocol++;
            trace("PROTOCOL c%d conn%d: rlc_engine_received -> %d (%s)", pp->client, pp->conn,
                  rc, rlc_errmsg());
            c->pipe[pp->conn] = -1;
            cut(p, false, 0, "the engine refused the bytes");
            break;
        }
    }
    if (any)
        service(pp->client);
}

/* Name l's lock kind in this schedule: RLC_KIND_LOCK, or RLC_KIND_WRITE for
 * a read-write lock (each round takes it as a reader or a writer). */
static int kind_of(int l)
{
    return S.cfg.kind[l];
}

/* Name l is a semaphore of either kind: permits, no holder on the server. */
static bool is_sem(int l)
{
    return kind_of(l) == RLC_KIND_SEMAPHORE || kind_of(l) == RLC_KIND_PSEMAPHORE;
}

/* Two holds of one name exclude each other unless both are read levels. */
static bool conflict(const struct hold *a, const struct hold *b)
{
    return a->kind != RLC_KIND_READ || b->kind != RLC_KIND_READ;
}

static int lock_index(const char *name, size_t len)
{
    for (int l = 0; l < MAX_LOCKS; l++)
        if (strlen(lock_names[l]) == len && memcmp(lock_names[l], name, len) == 0)
            return l;
    return -1;
}

static void check_overlap(int ci, int ti, int l)
{
    struct task *me = &S.cl[ci].task[ti];
    const struct hold *mh = &me->h[l];
    if (!mh->active || mh->valid_end <= S.now)
        return;
    for (int cj = 0; cj < S.cfg.clients; cj++) {
        if (client_paused(cj))
            continue;
        for (int tj = 0; tj < S.cl[cj].ntasks; tj++) {
            const struct task *ot = &S.cl[cj].task[tj];
            const struct hold *o = &ot->h[l];
            if ((cj == ci && tj == ti) || !o->active || o->valid_end <= S.now ||
                !conflict(mh, o))
                continue;
            S.st.overlaps++;
            trace("OVERLAP %s: c%d/o%" PRIu64 " (valid to %" PRId64 ") and c%d/o%" PRIu64
                  " (valid to %s%" PRId64 ")",
                  lock_names[l], ci, me->owner, mh->valid_end, cj, ot->owner,
                  o->valid_end == NEVER ? "watchdog " : "", o->valid_end == NEVER ? 0 : o->valid_end);
        }
    }
}

static int64_t engine_count(int ci, const struct task *t, int l)
{
    const char *name = lock_names[l];
    return rlc_engine_hold_count_kind(S.cl[ci].e, t->h[l].kind, name, strlen(name), t->owner);
}

/* The engine's own word, rlc_engine_validity_ms() now: while it says the
 * hold is still certainly held, no other owner may hold a valid grant of
 * the lock. (rlc_engine_hold_count is by the latest time the engine was
 * given: an owner that acts at the moment its process runs again, before
 * the engine's tick, may see its count of before the pause; "held now" is
 * a validity above 0, redlockc.h.) */
static void check_claim(int ci, int ti, int l)
{
    struct client *c = &S.cl[ci];
    struct task *me = &c->task[ti];
    const char *name = lock_names[l];
    int64_t v = rlc_engine_validity_ms_kind(c->e, me->h[l].kind, name, strlen(name), me->owner,
                                            local_now(c));
    int64_t n = engine_count(ci, me, l);
    if (v <= 0)
        return; /* says it does not hold it now */
    S.st.claims++;
    for (int cj = 0; cj < S.cfg.clients; cj++) {
        if (client_paused(cj))
            continue;
        for (int tj = 0; tj < S.cl[cj].ntasks; tj++) {
            const struct task *ot = &S.cl[cj].task[tj];
            const struct hold *o = &ot->h[l];
            if ((cj == ci && tj == ti) || !o->active || o->valid_end <= S.now ||
                !conflict(&me->h[l], o))
                continue;
            S.st.overlaps++;
            trace("OVERLAP %s: the engine says c%d/o%" PRIu64 " holds it (%" PRId64
                  " ms more, count %" PRId64 "), and c%d/o%" PRIu64 " holds a valid grant",
                  name, ci, me->owner, v, n, cj, ot->owner);
        }
    }
}

/* ------------------------------------------------------------ fair order */

/* FIFO (the fair lock's F2, docs/design/family.md): among the live waiters
 * of a fair lock, the lock goes in the order they joined its queue.
 *
 * The order is the server's, not the engines': after every script whose
 * first key is a fair lock's hash, the check reads that node's queue list
 * (node.lua's peek: it looks and writes nothing, so a seed replays the
 * same) and numbers each owner's entry when it first appears there, in list
 * order, so the numbers are the queue's order. A grant is a script that
 * leaves an owner's field in the hash where it was not before. A waiter is
 * live while its acquire of that name runs (T_ACQ: not yet granted, ended,
 * cancelled or timed out; a cancel's DONE comes in the same service). A
 * grant to a live owner F breaks the order when a live waiter G is ahead of
 * F: F has no place, or G's is older. G's place is
 *  - without faults: G's first entry in its running acquire, even once it
 *    is gone from the list. There a live waiter's place cannot lapse: it
 *    tries again at least every half thread wait (on a clock within 1% of
 *    the node's; each try sets its timeout to now + 2 thread waits) over a
 *    network of a few ms, and its entry leaves only by its grant or by the
 *    withdraw its acquire's end sends. So a place lost is itself a break
 *    (a waiter overtaken because its timeout ran out, or a prune that took
 *    a live entry, is caught);
 *  - with faults: G's entry as the granting script left it, if any. A
 *    paused client or node, a cut connection or a slow packet may hold G's
 *    tries back past its timeout, and then the next fair script prunes it
 *    (Redisson's rule); a late withdraw of G's earlier acquire may take the
 *    entry its new acquire kept. G joins again at the tail, and that is its
 *    place. An entry still there after a grant to another owner, ahead of
 *    that owner's, breaks the order in any schedule: the script grants only
 *    to the queue's head (once timed-out heads are pruned) or into an empty
 *    queue.
 * F's place is its entry before the script, or its first in this acquire
 * (without faults), whichever is older.
 */
#define FAIR_OWNERS (MAX_CLIENTS * MAX_TASKS)
static struct {
    int64_t seq;                           /* entries numbered so far */
    int64_t entry[MAX_LOCKS][FAIR_OWNERS]; /* the owner's entry in the list now; 0 none */
    int64_t place[MAX_LOCKS][FAIR_OWNERS]; /* its first entry in acquire place_op */
    uint64_t place_op[MAX_LOCKS][FAIR_OWNERS];
    bool held[FAIR_OWNERS];                /* in the hash before the running script */
} FQ;

static void fifo_reset(void)
{
    memset(&FQ, 0, sizeof FQ);
}

/* The fair lock whose hash is `key` (a script's first key), or -1. */
static int fair_lock_of(const char *key, size_t len)
{
    for (int l = 0; S.cfg.writes && l < S.cfg.locks; l++) {
        if (kind_of(l) != RLC_KIND_FAIR)
            continue;
        char k[64];
        int n = snprintf(k, sizeof k, "%s%s", S.cfg.prefix, lock_names[l]);
        if ((size_t)n == len && memcmp(k, key, len) == 0)
            return l;
    }
    return -1;
}

/* The owner (client * MAX_TASKS + task) whose field is f ("<uuid>:<owner>"), or -1. */
static int fair_owner_of(const char *f, size_t len)
{
    for (int ci = 0; ci < S.cfg.clients; ci++)
        for (int ti = 0; ti < S.cl[ci].ntasks; ti++) {
            char field[64];
            int n = snprintf(field, sizeof field, "%s:%" PRIu64, S.cl[ci].uuid,
                             S.cl[ci].task[ti].owner);
            if ((size_t)n == len && memcmp(field, f, len) == 0)
                return ci * MAX_TASKS + ti;
        }
    return -1;
}

static struct task *fair_task(int o)
{
    return &S.cl[o / MAX_TASKS].task[o % MAX_TASKS];
}

static bool fair_live(int o, int l)
{
    if (o / MAX_TASKS >= S.cfg.clients || o % MAX_TASKS >= S.cl[o / MAX_TASKS].ntasks)
        return false;
    const struct task *t = fair_task(o);
    return t->st == T_ACQ && t->lock == l;
}

/* The owners named by key's list items or hash fields on node n, in order
 * (each once; names of no owner are left out): how many. */
static int fair_peek(int n, const char *key, int out[FAIR_OWNERS])
{
    int count = 0;
    lua_getglobal(S.L, "peek");
    lua_pushinteger(S.L, n + 1);
    lua_pushstring(S.L, key);
    lua_pushinteger(S.L, S.now);
    lua_call(S.L, 3, 1);
    for (lua_Integer i = 1; lua_rawgeti(S.L, -1, i) == LUA_TSTRING; i++) {
        size_t len;
        const char *f = lua_tolstring(S.L, -1, &len);
        int o = fair_owner_of(f, len);
        bool seen = false;
        for (int k = 0; k < count; k++)
            seen |= out[k] == o;
        if (o >= 0 && !seen)
            out[count++] = o;
        lua_pop(S.L, 1);
    }
    lua_pop(S.L, 2);
    return count;
}

/* Before a script on node n: the fair lock it names (or -1) and who holds it. */
static int fifo_before(int n, redisReply **keys, long nkeys)
{
    if (!S.cfg.writes || nkeys < 1)
        return -1;
    int l = fair_lock_of(keys[0]->str, keys[0]->len);
    if (l < 0)
        return -1;
    int in[FAIR_OWNERS];
    memset(FQ.held, 0, sizeof FQ.held);
    for (int k = fair_peek(n, keys[0]->str, in); k-- > 0;)
        FQ.held[in[k]] = true;
    return l;
}

/* The queue's entries after the script: new ones numbered in list order,
 * each live waiter's first one in its acquire kept as its place. */
static void fifo_number(int n, int l, const char *queue)
{
    int in[FAIR_OWNERS];
    bool there[FAIR_OWNERS] = {false};
    int count = fair_peek(n, queue, in);
    for (int k = 0; k < count; k++) {
        int o = in[k];
        there[o] = true;
        if (FQ.entry[l][o])
            continue;
        FQ.entry[l][o] = ++FQ.seq;
        if (fair_live(o, l) && FQ.place_op[l][o] != fair_task(o)->op) {
            FQ.place[l][o] = FQ.seq;
            FQ.place_op[l][o] = fair_task(o)->op;
        }
    }
    for (int o = 0; o < FAIR_OWNERS; o++)
        if (!there[o])
            FQ.entry[l][o] = 0;
}

/* Owner o's place in lock l's queue by the rule above (0: none). */
static int64_t fifo_place(int o, int l, int64_t entry)
{
    int64_t p = entry;
    bool first = !S.cfg.faults && FQ.place_op[l][o] == fair_task(o)->op && FQ.place[l][o];
    if (first && (!p || FQ.place[l][o] < p))
        p = FQ.place[l][o];
    return p;
}

static void fifo_after(int n, int l)
{
    if (l < 0)
        return;
    char key[64];
    size_t len;
    snprintf(key, sizeof key, "%s%s", S.cfg.prefix, lock_names[l]);
    char *queue = key_derived("redisson_lock_queue:", key, strlen(key), "", &len);
    int64_t before[FAIR_OWNERS];
    memcpy(before, FQ.entry[l], sizeof before);
    fifo_number(n, l, queue);
    int in[FAIR_OWNERS];
    for (int k = fair_peek(n, key, in); k-- > 0;) {
        int f = in[k];
        if (FQ.held[f] || !fair_live(f, l))
            continue;
        int64_t pf = fifo_place(f, l, before[f]);
        S.st.fair_grants++;
        bool others = false;
        for (int g = 0; g < FAIR_OWNERS; g++) {
            int64_t pg = g == f || !fair_live(g, l) ? 0 : fifo_place(g, l, FQ.entry[l][g]);
            others |= pg != 0;
            if (!pg || (pf && pf < pg))
                continue;
            S.st.fifo++;
            if (!S.verbose)
                continue;
            lua_getglobal(S.L, "dump");
            lua_pushinteger(S.L, n + 1);
            lua_pushstring(S.L, queue);
            lua_pushinteger(S.L, S.now);
            lua_call(S.L, 3, 1);
            trace("FIFO %s: c%d/o%" PRIu64 " granted (place %" PRId64 ") while c%d/o%" PRIu64
                  " waits with place %" PRId64 " (entry %" PRId64 "); queue now %s",
                  lock_names[l], f / MAX_TASKS, fair_task(f)->owner, pf, g / MAX_TASKS,
                  fair_task(g)->owner, pg, FQ.entry[l][g], lua_tostring(S.L, -1));
            lua_pop(S.L, 1);
        }
        S.st.fair_behind += others;
    }
    free(queue);
}

static void app_next(int ci, int ti, int64_t after)
{
    at(S.now + after, EV_APP, ci, ti, 0);
}

static int task_of_op(int ci, uint64_t op)
{
    for (int t = 0; t < S.cl[ci].ntasks; t++)
        if (S.cl[ci].task[t].op == op)
            return t;
    return -1;
}

static int task_of_owner(int ci, uint64_t owner)
{
    for (int t = 0; t < S.cl[ci].ntasks; t++)
        if (S.cl[ci].task[t].owner == owner)
            return t;
    return -1;
}

/* rlc_engine_hold_count: the levels the events gave, or 0 once the hold
 * is lost (its levels are still the owner's to release) or its validity
 * ended by the engine's time (the LOST event comes at the next tick). */
static void check_count(int ci, const struct task *t, int l)
{
    const char *name = lock_names[l];
    const struct hold *h = &t->h[l];
    struct client *c = &S.cl[ci];
    int64_t n = engine_count(ci, t, l);
    int64_t want = h->lost_seen ? 0 : h->levels;
    bool ran_out = n == 0 && h->levels > 0 &&
                   rlc_engine_validity_ms_kind(c->e, h->kind, name, strlen(name), t->owner,
                                               local_now(c)) == 0;
    if (n != want && !ran_out) {
        S.st.protocol++;
        trace("COUNT c%d/o%" PRIu64 " %s: rlc_engine_hold_count %" PRId64 ", events said %" PRId64,
              ci, t->owner, name, n, t->h[l].levels);
    }
}

/* An OK with no validity left breaks the contract (validity_ms: "how long
 * the hold is certainly held"); the hold then counts as not valid. */
static bool validity_kept(int ci, const struct task *t, const rlc_engine_event *ev,
                          const char *what)
{
    if (ev->validity_ms > 0)
        return true;
    S.st.contract++;
    trace("CONTRACT c%d/o%" PRIu64 ": %s RLC_OK with validity_ms %" PRId64, ci, t->owner, what,
          ev->validity_ms);
    return false;
}

/* Until when an acquire or extend that ended RLC_OK is certainly held: its
 * validity on the owner's own clock; a watchdog hold until it is LOST. */
static int64_t valid_until(int ci, int64_t lease, int64_t validity_ms)
{
    struct client *c = &S.cl[ci];
    if (validity_ms <= 0)
        return S.now;
    return lease > 0 ? sim_at(c, local_now(c) + validity_ms) : NEVER;
}

/* One more acquire held: the unit a release gives back as a whole. */
static void push_unit(int ci, struct task *t, unsigned set)
{
    if (t->nunits == MAX_UNITS) {
        S.st.protocol++; /* the owner's steps never nest this deep: a bug here */
        trace("PROTOCOL c%d/o%" PRIu64 ": more than %d units held", ci, t->owner, MAX_UNITS);
        return;
    }
    t->unit[t->nunits++] = set;
}

/* Drops name l from every unit held: the engine forgot its hold. */
static void strip_name(struct task *t, int l)
{
    int k = 0;
    for (int i = 0; i < t->nunits; i++) {
        unsigned u = t->unit[i] & ~(1u << l);
        if (u)
            t->unit[k++] = u;
    }
    t->nunits = k;
}

/* The hold's count `got` after an acquire or multi-lock that took g levels
 * of it (0 or 1): its levels before and g; or just g if it was lost: a new
 * acquire forgets a lost hold's levels and starts it again (engine_acquire.c,
 * acquire_forget_lost), and so do its units here. */
static void settle_levels(int ci, struct task *t, int l, int64_t got, int g)
{
    struct hold *h = &t->h[l];
    bool restarted = h->levels == 0;
    if (got != h->levels + g) {
        if (h->lost_seen && got == g) {
            strip_name(t, l);
            restarted = true;
        } else {
            S.st.protocol++;
            trace("COUNT c%d/o%" PRIu64 " %s: %" PRId64 " levels after an acquire that took %d "
                  "of it, %" PRId64 " before", ci, t->owner, lock_names[l], got, g, h->levels);
        }
    }
    h->levels = got;
    if (restarted)
        h->lost_seen = false;
}

/* After an op that took nothing: what is still held, or a new round. */
static void after_no_grant(int ci, int ti)
{
    struct task *t = &S.cl[ci].task[ti];
    t->st = t->nunits > 0 ? T_HELD : T_IDLE;
    app_next(ci, ti, rnd(0, 20));
}

/* A plain acquire's new hold: its token must be above every earlier new
 * hold's (multi-locks give none: they are left out); without fencing it is 0. */
static void check_token(int ci, struct task *t, int l, const rlc_engine_event *ev)
{
    if (!S.cfg.fencing || kind_of(l) != RLC_KIND_LOCK) { /* a write lock takes none */
        if (ev->token != 0) {
            S.st.contract++;
            trace("CONTRACT c%d/o%" PRIu64 ": token %" PRIu64 " with fencing off", ci, t->owner,
                  ev->token);
        }
        return;
    }
    /* equal only when the same owner's new acquire landed in its own hold
     * whose release had not run yet (same life, same token) */
    bool same = ev->token == S.last_token[l] && S.last_holder[l] == ci * 1000 + (int)t->owner;
    if (ev->token <= S.last_token[l] && !same) {
        S.st.tokens++;
        trace("TOKEN %s: c%d/o%" PRIu64 " got %" PRIu64 ", an earlier hold had %" PRIu64,
              lock_names[l], ci, t->owner, ev->token, S.last_token[l]);
    }
    if (ev->token > S.last_token[l]) {
        S.last_token[l] = ev->token;
        S.last_holder[l] = ci * 1000 + (int)t->owner;
    }
}

static void on_acquire_done(int ci, int ti, enum task_state was, const rlc_engine_event *ev)
{
    struct task *t = &S.cl[ci].task[ti];
    int l = t->lock;
    struct hold *h = &t->h[l];
    /* an acquire over a lost hold whose levels are not all released is
     * refused (A7): the owner must give them back first */
    bool refused_lost = ev->status == RLC_E_LOST && h->lost_seen && h->levels > 0;
    settle_levels(ci, t, l, ev->count, ev->status == RLC_OK);
    check_count(ci, t, l);
    if (ev->status == RLC_E_LOST) {
        h->active = false; /* the engine says the hold is gone */
        h->lost_seen = true;
    }
    if (ev->status != RLC_OK) {
        if (ev->status == RLC_NOT_ACQUIRED)
            S.st.busy++;
        else if (ev->status == RLC_E_CANCELED)
            S.st.canceled++;
        else
            S.st.failed++;
        if (t->quiet_op && was == T_ACQ && !refused_lost) {
            S.st.liveness++;
            trace("LIVENESS c%d/o%" PRIu64 ": an acquire begun after faults stopped ended %d (%s)",
                  ci, t->owner, ev->status, ev->message);
        }
        after_no_grant(ci, ti);
        return;
    }
    S.st.grants++;
    if (ev->count == 1) {
        check_token(ci, t, l, ev);
        h->token = ev->token;
        h->quiet_hold = t->quiet_op && was == T_ACQ;
    }
    h->active = true;
    h->valid_end = validity_kept(ci, t, ev, "acquire") ? valid_until(ci, h->lease, ev->validity_ms)
                                                        : S.now;
    check_overlap(ci, ti, l);
    push_unit(ci, t, 1u << l);
    t->st = T_HELD;
    app_next(ci, ti, rnd(0, S.cfg.hold_max));
}

/* The multi-lock's DONE: for every name of the set, as a plain acquire's
 * DONE would be for that name (one more level each, or none at all). */
static void on_multi_done(int ci, int ti, const rlc_engine_event *ev)
{
    struct task *t = &S.cl[ci].task[ti];
    unsigned set = t->mset;
    t->mset = 0;
    int first = __builtin_ctz(set);
    if (lock_index(ev->name, ev->name_len) != first) {
        S.st.contract++;
        trace("CONTRACT c%d/o%" PRIu64 ": a multi-lock's DONE names %.*s, its first name is %s",
              ci, t->owner, (int)ev->name_len, ev->name, lock_names[first]);
    }
    if (ev->status != RLC_OK) {
        if (ev->status == RLC_NOT_ACQUIRED)
            S.st.multi_busy++;
        else if (ev->status == RLC_E_CANCELED)
            S.st.multi_canceled++;
        else
            S.st.multi_failed++;
        for (int l = 0; l < MAX_LOCKS; l++) {
            if (!(set & (1u << l)))
                continue;
            /* no level taken of it, none forgotten: a lost hold's levels
             * stay the owner's to release (the multi-lock is refused over
             * them), and the engine counts them 0 */
            settle_levels(ci, t, l, t->h[l].levels, 0);
            if (ev->status == RLC_E_LOST && t->h[l].levels > 0) {
                /* a hold it nests in is gone (the message names which): that
                 * one's levels are forgotten by the owner's next acquire */
                t->h[l].active = false;
                t->h[l].lost_seen = true;
            }
        }
        if (t->quiet_op && !t->nested_multi) {
            S.st.liveness++;
            trace("LIVENESS c%d/o%" PRIu64 ": a multi-lock begun after faults stopped ended %d (%s)",
                  ci, t->owner, ev->status, ev->message);
        }
        after_no_grant(ci, ti);
        return;
    }
    S.st.multi_grants++;
    if (ev->token != 0) {
        S.st.contract++;
        trace("CONTRACT c%d/o%" PRIu64 ": a multi-lock's RLC_OK gave token %" PRIu64
              " (it has none)", ci, t->owner, ev->token);
    }
    bool kept = validity_kept(ci, t, ev, "multi-lock");
    for (int l = 0; l < MAX_LOCKS; l++) {
        if (!(set & (1u << l)))
            continue;
        struct hold *h = &t->h[l];
        settle_levels(ci, t, l, engine_count(ci, t, l), 1);
        if (h->levels == 1) {
            h->token = 0;
            h->lease = t->mlease;
            h->quiet_hold = t->quiet_op;
        }
        h->active = true;
        h->valid_end = kept ? valid_until(ci, h->lease, ev->validity_ms) : S.now;
        check_overlap(ci, ti, l);
    }
    push_unit(ci, t, set);
    t->st = T_HELD;
    app_next(ci, ti, rnd(0, S.cfg.hold_max));
}

static void on_extend_done(int ci, int ti, const rlc_engine_event *ev)
{
    struct task *t = &S.cl[ci].task[ti];
    int l = t->lock;
    struct hold *h = &t->h[l];
    h->levels = ev->count;
    check_count(ci, t, l);
    if (ev->status == RLC_E_LOST) {
        h->active = false;
        h->lost_seen = true;
    }
    if (ev->status == RLC_OK) {
        S.st.extends++;
        h->lease = t->ext_lease;
        h->valid_end = validity_kept(ci, t, ev, "extend") ? valid_until(ci, h->lease, ev->validity_ms)
                                                          : S.now;
        if (h->active)
            check_overlap(ci, ti, l);
    }
    t->st = T_HELD;
    app_next(ci, ti, rnd(0, S.cfg.hold_max / 2));
}

static void on_release_done(int ci, int ti, const rlc_engine_event *ev)
{
    struct task *t = &S.cl[ci].task[ti];
    int l = t->lock;
    struct hold *h = &t->h[l];
    h->levels = ev->count;
    check_count(ci, t, l);
    if (ev->status == RLC_E_LOST) {
        h->active = false;
        h->lost_seen = true;
    }
    if (h->levels == 0)
        h->lost_seen = false; /* the next acquire starts a new hold */
    S.st.releases++;
    t->st = t->nunits > 0 || t->releasing ? T_HELD : T_IDLE;
    /* a multi-lock's next name goes at once, as a caller's loop would */
    app_next(ci, ti, t->releasing ? rnd(0, 2) : rnd(0, 10));
}

/* ------------------------------------------------------------ semaphores */

/* PERMITS: the permits held of semaphore l at once, by the owners' own
 * belief (a grant's permits from its DONE until its release begins; an
 * expirable grant's until the validity it reported ends), never exceed the
 * count set. Beliefs grow only at grants, so each grant checks. A paused
 * owner's permits count too: a plain permit never ends, and an expirable
 * one's validity is counted on its own clock. */
static void check_permits(int l)
{
    int64_t held = 0;
    for (int cj = 0; cj < S.cfg.clients; cj++)
        for (int tj = 0; tj < S.cl[cj].ntasks; tj++) {
            const struct task *o = &S.cl[cj].task[tj];
            if (o->pm.n > 0 && o->lock == l && o->pm.valid_end > S.now)
                held += o->pm.n;
        }
    if (held <= S.cfg.sem_set[l])
        return;
    S.st.permits++;
    trace("PERMITS %s: %" PRId64 " permits held at once, the count set is %" PRId64,
          lock_names[l], held, S.cfg.sem_set[l]);
    for (int cj = 0; cj < S.cfg.clients; cj++)
        for (int tj = 0; tj < S.cl[cj].ntasks; tj++) {
            const struct task *o = &S.cl[cj].task[tj];
            if (o->pm.n > 0 && o->lock == l && o->pm.valid_end > S.now)
                trace("  c%d/o%" PRIu64 " holds %" PRId64 " (valid to %s%" PRId64 ")", cj,
                      o->owner, o->pm.n, o->pm.valid_end == NEVER ? "release " : "",
                      o->pm.valid_end == NEVER ? 0 : o->pm.valid_end);
        }
}

static void contract_broken(int ci, const struct task *t, const char *what, int64_t v)
{
    S.st.contract++;
    trace("CONTRACT c%d/o%" PRIu64 " %s: %s %" PRId64, ci, t->owner, lock_names[t->lock], what,
          v);
}

/* The count's set call: once one answered RLC_OK (set now, or by another
 * owner before: SETNX), this owner acquires; else it sets again first (a
 * set lost to a fault may not have run, and a wait for a count nobody set
 * would never end). */
static void on_set_done(int ci, int ti, const rlc_engine_event *ev)
{
    struct task *t = &S.cl[ci].task[ti];
    if (ev->status == RLC_OK) {
        if (ev->count != 0 && ev->count != 1)
            contract_broken(ci, t, "set answered", ev->count);
        t->sem_known |= 1u << t->lock;
        S.sem_used[t->lock] = true;
        S.st.sem_sets++;
    } else if (t->quiet_op) {
        S.st.liveness++;
        trace("LIVENESS c%d/o%" PRIu64 ": a set begun after faults stopped ended %d (%s)", ci,
              t->owner, ev->status, ev->message);
    }
    t->st = T_PWANT;
    app_next(ci, ti, rnd(0, 5));
}

/* An acquire of permits ended: RLC_OK takes `want` of them (count), with
 * its attempt as token and validity_ms -1 (plain: they do not end) or the
 * lease left (expirable). */
static void on_permits_done(int ci, int ti, const rlc_engine_event *ev)
{
    struct client *c = &S.cl[ci];
    struct task *t = &c->task[ti];
    int l = t->lock;
    bool psem = kind_of(l) == RLC_KIND_PSEMAPHORE;
    if (ev->status != RLC_OK) {
        if (ev->status == RLC_NOT_ACQUIRED)
            S.st.busy++;
        else if (ev->status == RLC_E_CANCELED)
            S.st.canceled++;
        else
            S.st.failed++;
        if (t->quiet_op) {
            S.st.liveness++;
            trace("LIVENESS c%d/o%" PRIu64 ": an acquire of permits begun after faults stopped "
                  "ended %d (%s)", ci, t->owner, ev->status, ev->message);
        }
        t->st = T_IDLE;
        app_next(ci, ti, rnd(0, 20));
        return;
    }
    S.st.sem_grants++;
    S.sem_used[l] = true;
    if (ev->count != t->pm.want)
        contract_broken(ci, t, "a grant's count is not the permits asked for", ev->count);
    if (ev->token == 0)
        contract_broken(ci, t, "a grant's token (its attempt) is", 0);
    t->pm.n = t->pm.want;
    t->pm.valid_end = NEVER;
    if (psem) {
        t->pm.valid_end = validity_kept(ci, t, ev, "permits")
                              ? valid_until(ci, t->pm.lease, ev->validity_ms)
                              : S.now;
        if (rlc_engine_permit_id(c->e, ev->token, t->pm.n, t->pm.id, sizeof t->pm.id) != RLC_OK)
            contract_broken(ci, t, "no permit id for token", (int64_t)ev->token);
    } else if (ev->validity_ms != -1) {
        contract_broken(ci, t, "a plain grant's validity_ms", ev->validity_ms);
    }
    check_permits(l);
    t->st = T_PHELD;
    /* some expirable holders let the lease run out: they act again past it */
    t->pm.run_out = psem && chance(0.25);
    if (t->pm.run_out && t->pm.valid_end > S.now)
        app_next(ci, ti, t->pm.valid_end - S.now + rnd(1, 50));
    else
        app_next(ci, ti, rnd(0, S.cfg.hold_max));
}

/* A release ended: RLC_OK gives back what was held (count). A plain one is
 * sent until answered, so after faults stop it ends RLC_OK; an expirable
 * one answers RLC_E_LOST when its permits' lease ran out first, which only
 * a late release (or one begun near the end of its validity, or in faults)
 * may meet. */
static void on_permits_released(int ci, int ti, const rlc_engine_event *ev)
{
    struct task *t = &S.cl[ci].task[ti];
    bool psem = kind_of(t->lock) == RLC_KIND_PSEMAPHORE;
    S.st.sem_releases++;
    if (ev->status == RLC_OK && ev->count != t->pm.rel)
        contract_broken(ci, t, "a release gave back", ev->count);
    bool may_lose = psem && (t->pm.late || t->pm.margin < 50);
    bool lost_ok = ev->status == RLC_E_LOST && may_lose;
    if (t->quiet_op && ev->status != RLC_OK && !lost_ok) {
        S.st.liveness++;
        trace("LIVENESS c%d/o%" PRIu64 ": a release of permits begun after faults stopped ended "
              "%d (%s)", ci, t->owner, ev->status, ev->message);
    }
    t->st = T_IDLE;
    app_next(ci, ti, rnd(0, 10));
}

/* A query's answer: its op leaves the client's list; a number the query
 * cannot give (engine_query.c's answers) is a protocol error. */
static bool on_query_done(int ci, const rlc_engine_event *ev)
{
    struct client *c = &S.cl[ci];
    int k = 0;
    while (k < c->nq && c->q[k].op != ev->op)
        k++;
    if (k == c->nq)
        return false;
    int what = c->q[k].what;
    c->q[k] = c->q[--c->nq];
    if (ev->status != RLC_OK)
        return true; /* no quorum of answers: the faults' doing */
    S.st.query_answers++;
    int64_t v = ev->count;
    bool ok = what == RLC_Q_LOCKED || what == RLC_Q_HELD ? v == 0 || v == 1
              : what == RLC_Q_COUNT                     ? v >= 0
                                                        : v >= -2;
    if (!ok) {
        S.st.protocol++;
        trace("PROTOCOL c%d: query %d of %.*s answered %" PRId64, ci, what, (int)ev->name_len,
              ev->name, v);
    }
    return true;
}

static void on_done(int ci, const rlc_engine_event *ev)
{
    if (on_query_done(ci, ev))
        return;
    int ti = task_of_op(ci, ev->op);
    if (ti < 0) {
        S.st.protocol++;
        trace("PROTOCOL c%d: DONE for unknown op %" PRIu64, ci, ev->op);
        return;
    }
    struct task *t = &S.cl[ci].task[ti];
    t->op = 0;
    enum task_state was = t->st;
    if (was != T_MULTI && lock_index(ev->name, ev->name_len) != t->lock) {
        S.st.protocol++;
        trace("PROTOCOL c%d/o%" PRIu64 ": DONE of an op on %s names %.*s", ci, t->owner,
              lock_names[t->lock], (int)ev->name_len, ev->name);
    }
    switch (was) {
    case T_ACQ:
    case T_NESTED:
        on_acquire_done(ci, ti, was, ev);
        break;
    case T_MULTI:
        on_multi_done(ci, ti, ev);
        break;
    case T_EXT:
        on_extend_done(ci, ti, ev);
        break;
    case T_REL:
        on_release_done(ci, ti, ev);
        break;
    case T_PSET:
        on_set_done(ci, ti, ev);
        break;
    case T_PACQ:
        on_permits_done(ci, ti, ev);
        break;
    case T_PREL:
        on_permits_released(ci, ti, ev);
        break;
    default:
        break;
    }
}

static void on_lost(int ci, const rlc_engine_event *ev)
{
    S.st.lost++;
    int ti = task_of_owner(ci, ev->owner);
    int l = lock_index(ev->name, ev->name_len);
    if (ti < 0 || l < 0) {
        S.st.protocol++;
        trace("PROTOCOL c%d: LOST for unknown owner or name", ci);
        return;
    }
    struct hold *h = &S.cl[ci].task[ti].h[l];
    /* a fixed lease is lost when it runs out (on the owner's clock, where
     * valid_end was counted): that is its end, no fault */
    bool ran_out = h->lease > 0 && S.now >= h->valid_end;
    if (h->quiet_hold && ev->status == RLC_E_LOST && !ran_out) {
        /* no fault touched it: a renewal or a verify (loss push)
         * that says it is gone is wrong. (It may still run out of
         * time: a request of the owner's from the faults may still
         * run, and its short lease bounds every claim, E8.) */
        S.st.liveness++;
        trace("LIVENESS c%d/o%" PRIu64 ": a hold of %s taken after faults stopped was "
              "reported lost (%s)", ci, ev->owner, lock_names[l], ev->message ? ev->message : "");
    }
    h->quiet_hold = false;
    h->active = false;
    h->lost_seen = true;
}

static void on_event(int ci, const rlc_engine_event *ev)
{
    S.st.events++;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(ev->name_len < 60 ? ev->name_len : 60), ev->name);
    trace("c%d event %s op%" PRIu64 " o%" PRIu64 " %s status %d token %" PRIu64 " validity %" PRId64
          " count %" PRId64 "%s%s",
          ci, ev->type == RLC_EV_DONE ? "DONE" : "LOST", ev->op, ev->owner, name, ev->status,
          ev->token, ev->validity_ms, ev->count, ev->message && *ev->message ? " : " : "",
          ev->message ? ev->message : "");
    if (ev->type == RLC_EV_DONE) {
        on_done(ci, ev);
    } else if (ev->type == RLC_EV_LOST) {
        on_lost(ci, ev);
    } else {
        S.st.protocol++;
        trace("PROTOCOL c%d: event of unknown type %d", ci, ev->type);
    }
}

/* The driver loop: open what is wanted, write what is pending, read events,
 * then sleep until the engine's deadline. */
static void service(int ci)
{
    struct client *c = &S.cl[ci];
    int conns = rlc_engine_conns(c->e);
    for (int round = 0; round < 100; round++) {
        bool progress = false;
        for (int k = 0; k < conns; k++) {
            int p = c->pipe[k];
            int want = rlc_engine_want_open(c->e, k);
            if (want < 0) {
                /* the engine let the connection go (a stalled server): close it */
                if (p >= 0) {
                    c->pipe[k] = -1;
                    cut(p, false, 0, "the engine dropped it (want_open -1)");
                }
                rlc_engine_closed(c->e, k, local_now(c));
                progress = true;
                continue;
            }
            if (p < 0) {
                if (want) {
                    p = pipe_new(ci, k);
                    c->pipe[k] = p;
                    at(S.now + rnd(0, 3), EV_CONNECT, p, 0, 0);
                }
                continue;
            }
            struct pipe *pp = &S.pipes[p];
            const char *data;
            size_t n;
            if (pp->state == P_CUT) {
                /* not told yet: writes still succeed, into a dead socket */
                while ((n = rlc_engine_pending(c->e, k, &data)) > 0)
                    rlc_engine_sent(c->e, k, n);
                continue;
            }
            if (pp->state != P_OPEN)
                continue;
            while ((n = rlc_engine_pending(c->e, k, &data)) > 0) {
                size_t m = n;
                if (n > 1 && chance(0.05)) {
                    m = (size_t)rnd(1, (int64_t)n - 1); /* a short write */
                    S.st.short_writes++;
                }
                int64_t t = S.now + delay();
                if (t < pp->fwd_last)
                    t = pp->fwd_last;
                pp->fwd_last = t;
                if (S.verbose > 2)
                    trace("  c%d conn%d writes %zu of %zu bytes (at the node at %" PRId64 ")", ci,
                          k, m, n, t);
                struct seg *s = seg_new(data, m, t);
                if (pp->ft)
                    pp->ft->next = s;
                else
                    pp->fh = s;
                pp->ft = s;
                at(t, EV_FWD, p, 0, 0);
                rlc_engine_sent(c->e, k, m);
                progress = true;
            }
            if (!S.quiet && S.cfg.faults && !rlc_engine_want_open(c->e, k) && chance(0.02)) {
                c->pipe[k] = -1;
                cut(p, false, 0, "the driver closes a connection the engine no longer wants");
                rlc_engine_closed(c->e, k, local_now(c));
                progress = true;
            }
        }
        rlc_engine_event ev;
        while (rlc_engine_next_event(c->e, &ev)) {
            on_event(ci, &ev);
            progress = true;
        }
        if (!progress)
            break;
    }
    int64_t d = rlc_engine_deadline(c->e);
    if (d >= 0) {
        int64_t t = sim_at(c, d);
        if (t != c->wake_t) {
            c->wake_t = t;
            at(t, EV_WAKE, ci, 0, 0);
        }
    }
}

/* ------------------------------------------------------------ owners */

/* The engine refused to start an op: a protocol failure, the owner stops. */
static void refused(int ci, struct task *t, int rc)
{
    S.st.protocol++;
    trace("PROTOCOL c%d/o%" PRIu64 ": the call -> %d (%s)", ci, t->owner, rc, rlc_errmsg());
    t->st = T_DONE;
    S.tasks_left--;
}

static void begin_op(struct task *t, uint64_t op, enum task_state st)
{
    t->op = op;
    t->st = st;
    t->op_start = S.now;
    t->quiet_op = S.quiet && S.now >= S.cfg.settled_at;
}

/* A new round's lease: the watchdog or a lease of its own. */
static int64_t pick_lease(void)
{
    return chance(0.3) ? 0 : rnd(S.cfg.lease_max / 4, S.cfg.lease_max);
}

/* A new round's wait: none, some, or without limit; after faults stop,
 * without limit (the liveness rule: every one is served). */
static int64_t pick_wait(void)
{
    if (S.quiet)
        return -1;
    int64_t k = rnd(0, 3);
    return k == 0 ? 0 : k == 1 ? rnd(1, S.cfg.lease_max) : -1;
}

static void maybe_cancel(int ci, int ti, uint64_t op)
{
    if (!S.quiet && S.cfg.faults && chance(0.1))
        at(S.now + rnd(0, S.cfg.io * 3), EV_CANCEL, ci, ti, op);
}

/* A semaphore's round: set the count unless this owner saw it set, then
 * acquire 1-2 permits (at most the count: a wait for more would never end),
 * waiting as a lock's acquire does, at times cancelled. */
static bool start_permits(int ci, int ti)
{
    struct client *c = &S.cl[ci];
    struct task *t = &c->task[ti];
    int l = t->lock, kind = kind_of(l);
    const char *name = lock_names[l];
    uint64_t op = 0;
    int rc;
    if (!(t->sem_known & (1u << l))) {
        rc = rlc_engine_set_permits(c->e, kind, name, strlen(name), S.cfg.sem_set[l],
                                    local_now(c), &op);
        trace("c%d/o%" PRIu64 " set %s to %" PRId64 " permits -> op%" PRIu64, ci, t->owner, name,
              S.cfg.sem_set[l], op);
        if (rc != RLC_OK) {
            refused(ci, t, rc);
            return false;
        }
        begin_op(t, op, T_PSET);
        return true;
    }
    t->pm.want = rnd(1, S.cfg.sem_set[l] < 2 ? S.cfg.sem_set[l] : 2);
    t->pm.lease = kind == RLC_KIND_PSEMAPHORE ? rnd(S.cfg.lease_max / 4, S.cfg.lease_max) : 0;
    int64_t wait = pick_wait();
    rc = rlc_engine_acquire_permits(c->e, kind, name, strlen(name), t->owner, t->pm.want, wait,
                                    t->pm.lease, local_now(c), &op);
    trace("c%d/o%" PRIu64 " acquire %" PRId64 " permits of %s wait %" PRId64 " lease %" PRId64
          " -> op%" PRIu64, ci, t->owner, t->pm.want, name, wait, t->pm.lease, op);
    if (rc != RLC_OK) {
        refused(ci, t, rc);
        return false;
    }
    begin_op(t, op, T_PACQ);
    maybe_cancel(ci, ti, op);
    return true;
}

/* Gives the held permits back: plain, the count; expirable, by the grant's
 * id. Their use ends before the release leaves. A holder that let the lease
 * run out has nothing left; half of them release anyway (RLC_E_LOST, or
 * RLC_OK if no call on the server reclaimed them yet). */
static bool start_permits_release(int ci, int ti)
{
    struct client *c = &S.cl[ci];
    struct task *t = &c->task[ti];
    int l = t->lock, kind = kind_of(l);
    const char *name = lock_names[l];
    t->pm.late = t->pm.run_out;
    t->pm.margin = t->pm.valid_end == NEVER ? NEVER : t->pm.valid_end - S.now;
    t->pm.rel = t->pm.n;
    t->pm.n = 0;
    if (t->pm.run_out) {
        S.st.sem_lapsed++;
        trace("c%d/o%" PRIu64 " let the lease of its %" PRId64 " permits of %s run out", ci,
              t->owner, t->pm.rel, name);
        if (chance(0.5)) {
            t->st = T_IDLE;
            app_next(ci, ti, 0);
            return false;
        }
    }
    uint64_t op = 0;
    int rc = rlc_engine_release_permits(c->e, kind, name, strlen(name), t->pm.rel,
                                        kind == RLC_KIND_PSEMAPHORE ? t->pm.id : NULL,
                                        local_now(c), &op);
    trace("c%d/o%" PRIu64 " release %" PRId64 " permits of %s%s%s -> op%" PRIu64, ci, t->owner,
          t->pm.rel, name, kind == RLC_KIND_PSEMAPHORE ? " id " : "",
          kind == RLC_KIND_PSEMAPHORE ? t->pm.id : "", op);
    if (rc != RLC_OK) {
        refused(ci, t, rc);
        return false;
    }
    begin_op(t, op, T_PREL);
    return true;
}

static bool start_acquire(int ci, int ti)
{
    struct client *c = &S.cl[ci];
    struct task *t = &c->task[ti];
    t->lock = (int)rnd(0, S.cfg.locks - 1);
    if (is_sem(t->lock))
        return start_permits(ci, ti);
    const char *name = lock_names[t->lock];
    if (kind_of(t->lock) == RLC_KIND_WRITE)
        t->h[t->lock].kind = chance(0.5) ? RLC_KIND_READ : RLC_KIND_WRITE;
    else
        t->h[t->lock].kind = kind_of(t->lock);
    t->h[t->lock].lease = pick_lease();
    int64_t wait = pick_wait();
    uint64_t op = 0;
    int rc = t->h[t->lock].kind == RLC_KIND_FAIR
                 ? rlc_engine_acquire_fair(c->e, name, strlen(name), t->owner, wait,
                                           t->h[t->lock].lease, S.cfg.thread_wait, local_now(c),
                                           &op)
                 : rlc_engine_acquire_kind(c->e, t->h[t->lock].kind, name, strlen(name), t->owner,
                                           wait, t->h[t->lock].lease, local_now(c), &op);
    trace("c%d/o%" PRIu64 " acquire %s%s wait %" PRId64 " lease %" PRId64 " -> op%" PRIu64, ci,
          t->owner, name,
          t->h[t->lock].kind == RLC_KIND_READ    ? " (read)"
          : t->h[t->lock].kind == RLC_KIND_WRITE ? " (write)"
          : t->h[t->lock].kind == RLC_KIND_FAIR  ? " (fair)"
                                                 : "", wait, t->h[t->lock].lease, op);
    if (rc != RLC_OK) {
        refused(ci, t, rc);
        return false;
    }
    begin_op(t, op, T_ACQ);
    maybe_cancel(ci, ti, op);
    return true;
}

/* The names of a multi-lock: `in` (a name held, -1 for none) first, then
 * others up to 2-3 distinct ones (as many as the schedule has), at times a
 * duplicate, in a random order (the engine sorts them). */
static int pick_names(int in, int pick[MAX_MULTI], unsigned *set)
{
    int n = 0, distinct = 0, want = (int)rnd(2, 3);
    *set = 0;
    if (in >= 0) {
        pick[n++] = in;
        *set |= 1u << in;
        distinct++;
    }
    while (n < want && distinct < S.cfg.locks) {
        int l = (int)rnd(0, S.cfg.locks - 1);
        if (*set & (1u << l))
            continue;
        pick[n++] = l;
        *set |= 1u << l;
        distinct++;
    }
    if (chance(n == 1 ? 0.5 : 0.2)) {
        pick[n] = pick[rnd(0, n - 1)];
        n++;
    }
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rnd(0, i), x = pick[i];
        pick[i] = pick[j];
        pick[j] = x;
    }
    return n;
}

/* A multi-lock: from no hold (in -1) as a new round, or nested in the hold
 * of name `in` (no wait, that hold's lease, as a nested acquire). */
static bool start_multi(int ci, int ti, int in)
{
    struct client *c = &S.cl[ci];
    struct task *t = &c->task[ti];
    int pick[MAX_MULTI];
    unsigned set;
    int n = pick_names(in, pick, &set);
    int64_t lease = in >= 0 ? t->h[in].lease : pick_lease();
    int64_t wait = in >= 0 ? 0 : pick_wait();
    const char *names[MAX_MULTI];
    size_t lens[MAX_MULTI];
    char shown[64] = "";
    for (int i = 0; i < n; i++) {
        names[i] = lock_names[pick[i]];
        lens[i] = strlen(names[i]);
        snprintf(shown + strlen(shown), sizeof shown - strlen(shown), "%s%s", i ? "," : "",
                 names[i]);
    }
    uint64_t op = 0;
    int rc = rlc_engine_acquire_multi(c->e, names, lens, n, t->owner, wait, lease, local_now(c),
                                      &op);
    trace("c%d/o%" PRIu64 " %smulti-lock %s wait %" PRId64 " lease %" PRId64 " -> op%" PRIu64, ci,
          t->owner, in >= 0 ? "nested " : "", shown, wait, lease, op);
    if (rc != RLC_OK) {
        refused(ci, t, rc);
        return false;
    }
    t->mset = set;
    t->mlease = lease;
    t->nested_multi = in >= 0;
    begin_op(t, op, T_MULTI);
    maybe_cancel(ci, ti, op);
    return true;
}

static bool start_nested(int ci, int ti, int l)
{
    struct client *c = &S.cl[ci];
    struct task *t = &c->task[ti];
    const char *name = lock_names[l];
    uint64_t op = 0;
    t->lock = l;
    int rc = t->h[l].kind == RLC_KIND_FAIR
                 ? rlc_engine_acquire_fair(c->e, name, strlen(name), t->owner, 0, t->h[l].lease,
                                           S.cfg.thread_wait, local_now(c), &op)
                 : rlc_engine_acquire_kind(c->e, t->h[l].kind, name, strlen(name), t->owner, 0,
                                           t->h[l].lease, local_now(c), &op);
    trace("c%d/o%" PRIu64 " nested acquire %s -> op%" PRIu64, ci, t->owner, name, op);
    if (rc != RLC_OK) {
        refused(ci, t, rc);
        return false;
    }
    begin_op(t, op, T_NESTED);
    return true;
}

static bool start_extend(int ci, int ti, int l)
{
    struct client *c = &S.cl[ci];
    struct task *t = &c->task[ti];
    struct hold *h = &t->h[l];
    const char *name = lock_names[l];
    t->lock = l;
    /* the same lease, a shorter or longer one, or the watchdog */
    t->ext_lease = chance(0.5)   ? h->lease
                   : chance(0.3) ? 0
                                 : rnd(S.cfg.lease_max / 4, S.cfg.lease_max);
    /* A shorter lease may cut the hold's TTL as soon as it lands: from
     * now on the owner counts on no more than the new lease (less the
     * drift allowance), whatever the extend ends with. */
    int64_t lease = t->ext_lease > 0 ? t->ext_lease : S.cfg.watchdog;
    int64_t cap = sim_at(c, local_now(c) + lease - (lease + 99) / 100 - 2);
    if (cap < h->valid_end)
        h->valid_end = cap;
    uint64_t op = 0;
    int rc = rlc_engine_extend(c->e, name, strlen(name), t->owner, t->ext_lease, local_now(c), &op);
    trace("c%d/o%" PRIu64 " extend %s lease %" PRId64 " -> op%" PRIu64, ci, t->owner, name,
          t->ext_lease, op);
    if (rc != RLC_OK) {
        refused(ci, t, rc);
        return false;
    }
    begin_op(t, op, T_EXT);
    return true;
}

/* The next name of the unit being given back: the last in byte order first
 * (a multi-lock's reverse order). */
static bool release_next(int ci, int ti)
{
    struct client *c = &S.cl[ci];
    struct task *t = &c->task[ti];
    int l = 31 - __builtin_clz(t->releasing);
    t->releasing &= ~(1u << l);
    struct hold *h = &t->h[l];
    const char *name = lock_names[l];
    t->lock = l;
    if (h->levels == 1)
        h->active = false; /* the critical section ends before the release leaves */
    uint64_t op = 0;
    int rc = rlc_engine_release_kind(c->e, h->kind, name, strlen(name), t->owner,
                                     local_now(c), &op);
    trace("c%d/o%" PRIu64 " release %s -> op%" PRIu64, ci, t->owner, name, op);
    if (rc != RLC_OK) {
        refused(ci, t, rc);
        return false;
    }
    begin_op(t, op, T_REL);
    return true;
}

/* A name of what the owner holds, at random (the top unit's first if the
 * counts say none: check_count has told that already). */
static int pick_held(const struct task *t)
{
    int held[MAX_LOCKS], n = 0;
    for (int l = 0; l < MAX_LOCKS; l++)
        if (t->h[l].levels > 0)
            held[n++] = l;
    return n ? held[rnd(0, n - 1)] : __builtin_ctz(t->unit[t->nunits - 1]);
}

/* While holding: nest in the top unit's hold (a plain one's name), extend a
 * name, or give back the top unit. */
static bool held_step(int ci, int ti)
{
    struct task *t = &S.cl[ci].task[ti];
    if (t->releasing)
        return release_next(ci, ti);
    if (t->nunits == 0) {
        t->st = T_IDLE;
        app_next(ci, ti, 0);
        return false;
    }
    for (int l = 0; l < MAX_LOCKS; l++)
        if (t->h[l].levels > 0) {
            check_count(ci, t, l);
            check_claim(ci, ti, l);
        }
    unsigned top = t->unit[t->nunits - 1];
    int in = __builtin_ctz(top);
    int64_t k = rnd(0, 9);
    if (__builtin_popcount(top) == 1 && t->h[in].levels < 3 && k < 2 && !S.cfg.classic)
        return t->multi && chance(0.5) ? start_multi(ci, ti, in) : start_nested(ci, ti, in);
    if (k < 4) {
        int l = pick_held(t);
        if (kind_of(l) == RLC_KIND_LOCK) /* a write lock has no extend */
            return start_extend(ci, ti, l);
    }
    t->releasing = top;
    t->nunits--;
    return release_next(ci, ti);
}

/* Now and then an owner asks about a lock beside what it does (a query
 * waits for no acquire of its own: engine_query.c): the queries' ops must
 * end, and leave the holds they kept alive, under every fault. */
static void maybe_query(int ci, int ti)
{
    struct client *c = &S.cl[ci];
    if (c->nq == MAX_QUERIES || !chance(0.15))
        return;
    int l = (int)rnd(0, S.cfg.locks - 1), what = (int)rnd(RLC_Q_LOCKED, RLC_Q_TTL);
    if (kind_of(l) != RLC_KIND_LOCK)
        return; /* the queries are the lock's */
    const char *name = lock_names[l];
    uint64_t op = 0;
    int rc = rlc_engine_query(c->e, name, strlen(name), c->task[ti].owner, what, local_now(c),
                              &op);
    trace("c%d/o%" PRIu64 " query %d of %s -> op%" PRIu64 " (%d)", ci, c->task[ti].owner, what,
          name, op, rc);
    if (rc != RLC_OK) {
        S.st.contract++;
        return;
    }
    S.st.queries++;
    c->q[c->nq++] = (struct query){op, what};
}

static void app_step(int ci, int ti)
{
    struct task *t = &S.cl[ci].task[ti];
    if (t->op)
        return; /* an op runs: its DONE moves on */
    bool started = false;
    switch (t->st) {
    case T_IDLE:
        if (t->rounds == 0) {
            t->st = T_DONE;
            S.tasks_left--;
            return;
        }
        t->rounds--;
        started = t->multi && chance(0.5) ? start_multi(ci, ti, -1) : start_acquire(ci, ti);
        break;
    case T_HELD:
        started = held_step(ci, ti);
        break;
    case T_PWANT:
        started = start_permits(ci, ti);
        break;
    case T_PHELD:
        started = start_permits_release(ci, ti);
        break;
    default:
        return;
    }
    if (started) {
        maybe_query(ci, ti);
        service(ci);
    }
}

/* ------------------------------------------------------------ faults */

static int random_open_pipe(void)
{
    int n = 0;
    for (int p = 0; p < S.npipes; p++)
        n += S.pipes[p].state == P_OPEN;
    if (!n)
        return -1;
    int k = (int)rnd(0, n - 1);
    for (int p = 0; p < S.npipes; p++)
        if (S.pipes[p].state == P_OPEN && k-- == 0)
            return p;
    return -1;
}

static void fault(void)
{
    if (S.quiet)
        return;
    int64_t k = rnd(0, 99);
    int p = random_open_pipe();
    if (k < 25 && p >= 0) {
        cut(p, true, chance(0.7) ? rnd(0, 5) : rnd(0, 2 * S.cfg.io), "fault");
    } else if (k < 42 && p >= 0) {
        S.pipes[p].stall_until = S.now + rnd(S.cfg.io / 2, 4 * S.cfg.io);
        S.st.stalls++;
        trace("c%d conn%d stalls until %" PRId64, S.pipes[p].client, S.pipes[p].conn,
              S.pipes[p].stall_until);
    } else if (k < 55) {
        int n = (int)rnd(0, S.cfg.servers - 1);
        S.node_paused[n] = S.now + rnd(S.cfg.io / 2, 3 * S.cfg.io);
        S.st.node_pauses++;
        trace("node n%d paused until %" PRId64, n, S.node_paused[n]);
    } else if (k < 67) {
        int n = (int)rnd(0, S.cfg.servers - 1);
        if (S.no_flush)
            goto next;
        S.node_scripts[n] = 0;
        S.st.flushes++;
        trace("node n%d SCRIPT FLUSH", n);
    } else if (k < 75) {
        /* a restart (with its data kept, as with AOF): every connection to
         * it breaks, connects fail until it is back, its script cache is empty */
        int n = (int)rnd(0, S.cfg.servers - 1);
        S.node_down[n] = S.now + rnd(5, 3 * S.cfg.io);
        S.node_runs[n]++; /* a new run_id: the restart guard keeps it out a while */
        S.node_scripts[n] = 0;
        S.st.restarts++;
        trace("node n%d restarts, back at %" PRId64, n, S.node_down[n]);
        if (chance(0.5)) {
            /* without persistence of its fencing counters: a counter that
             * starts again must still give every later holder a larger
             * token (the tokens check) */
            lua_getglobal(S.L, "forget_counters");
            lua_pushinteger(S.L, n + 1);
            S.cur_node = n;
            lua_call(S.L, 1, 1);
            long lost = (long)lua_tointeger(S.L, -1);
            lua_pop(S.L, 1);
            S.st.counters_lost += lost;
            trace("node n%d lost its %ld fencing counter(s)", n, lost);
        }
        for (int q = 0; q < S.npipes; q++)
            if (S.pipes[q].node == n && S.pipes[q].state != P_CUT)
                cut(q, true, rnd(0, 5), "the node restarts");
    } else if (k < 92) {
        int ci = (int)rnd(0, S.cfg.clients - 1);
        if (!client_paused(ci)) {
            S.cl[ci].paused_until = S.now + rnd(1, S.cfg.lease_max * 2);
            S.st.client_pauses++;
            trace("c%d paused until %" PRId64, ci, S.cl[ci].paused_until);
            at(S.cl[ci].paused_until, EV_RESUME, ci, 0, 0);
        }
    }
next:
    at(S.now + rnd(5, 80), EV_FAULT, 0, 0, 0);
}

/* ------------------------------------------------------------ migrations */

static unsigned lock_slot(int l)
{
    char key[64];
    snprintf(key, sizeof key, "%s%s", S.cfg.prefix, lock_names[l]);
    return slot_of(key, strlen(key));
}

static void cluster_at(int64_t t, enum cl_step what)
{
    at(t, EV_CLUSTER, what, 0, CL.gen);
}

/* MIGRATE of the first key (in byte order) of the migrating slot still on
 * the source; false when none is left. */
static bool migrate_one_key(void)
{
    lua_getglobal(S.L, "keys_of");
    lua_pushinteger(S.L, CL.mfrom + 1);
    lua_pushinteger(S.L, S.now);
    S.cur_node = CL.mfrom;
    lua_call(S.L, 2, 1);
    char key[128] = "";
    lua_Integer n = luaL_len(S.L, -1);
    for (lua_Integer i = 1; i <= n && !key[0]; i++) {
        lua_rawgeti(S.L, -1, i);
        size_t len;
        const char *k = lua_tolstring(S.L, -1, &len);
        if (len < sizeof key && slot_of(k, len) == CL.mslot)
            memcpy(key, k, len + 1);
        lua_pop(S.L, 1);
    }
    lua_pop(S.L, 1);
    if (!key[0])
        return false;
    lua_getglobal(S.L, "move_key");
    lua_pushinteger(S.L, CL.mfrom + 1);
    lua_pushinteger(S.L, CL.mto + 1);
    lua_pushstring(S.L, key);
    lua_pushinteger(S.L, S.now);
    lua_call(S.L, 4, 1);
    lua_pop(S.L, 1);
    S.st.keys_migrated++;
    trace("cluster: MIGRATE %s from n%d to n%d", key, CL.mfrom, CL.mto);
    return true;
}

/* The source gives the slot up (SETSLOT NODE): Redis 7 drops the shard
 * channels of the slot there, telling each subscriber (sunsubscribe). */
static void source_gives_up(void)
{
    CL.view[CL.mfrom][CL.mslot] = (uint8_t)CL.mto;
    CL.mig = false;
    S.st.migrations++;
    trace("cluster: n%d knows n%d owns slot %u", CL.mfrom, CL.mto, CL.mslot);
    for (int p = 0; p < S.npipes; p++) {
        struct pipe *pp = &S.pipes[p];
        for (int i = 0; pp->node == CL.mfrom && pp->state != P_CUT && i < pp->nssubs;) {
            if (slot_of(pp->ssubs[i], strlen(pp->ssubs[i])) != CL.mslot) {
                i++;
                continue;
            }
            char *ch = pp->ssubs[i];
            pp->ssubs[i] = pp->ssubs[--pp->nssubs];
            struct buf b = {0};
            buf_printf(&b, "*3\r\n$12\r\nsunsubscribe\r\n");
            buf_bulk(&b, ch, strlen(ch));
            buf_printf(&b, ":%d\r\n", pp->nssubs);
            to_client(p, b.p, b.len);
            free(b.p);
            free(ch);
            S.st.sunsubscribes++;
        }
    }
}

static void all_know(void)
{
    for (int n = S.cfg.first_master; n < S.cfg.servers; n++)
        CL.view[n][CL.mslot] = (uint8_t)CL.mto;
    CL.stage = 0;
}

/* The target owns the slot (SETSLOT NODE on it first): no longer importing. */
static void target_owns(void)
{
    CL.view[CL.mto][CL.mslot] = (uint8_t)CL.mto;
    CL.importing = false;
    trace("cluster: slot %u is n%d's", CL.mslot, CL.mto);
}

/* A lock's slot starts moving to another master (MIGRATING on its owner,
 * IMPORTING on the target). */
static void start_migration(void)
{
    unsigned slot = lock_slot((int)rnd(0, S.cfg.locks - 1));
    int from = CL.view[S.cfg.first_master][slot];
    int to = S.cfg.first_master + (int)rnd(0, S.cfg.masters - 2);
    if (to >= from)
        to++;
    CL.mig = CL.importing = true;
    CL.stage = 1;
    CL.mslot = slot;
    CL.mfrom = from;
    CL.mto = to;
    trace("cluster: slot %u migrates from n%d to n%d", slot, from, to);
    cluster_at(S.now + rnd(1, S.cfg.io), CL_MOVE_KEY);
}

/* What the cluster does now and then while faults last: a migration of a
 * lock's slot, or a moment of CLUSTERDOWN. */
static void cluster_step(const struct event *ev)
{
    if (ev->op != CL.gen)
        return; /* settled meanwhile */
    switch (ev->a) {
    case CL_NEXT:
        if (S.quiet)
            return;
        if (CL.stage == 0 && chance(0.7)) {
            start_migration();
        } else if (chance(0.4)) {
            CL.down_until = S.now + rnd(S.cfg.io / 4, 2 * S.cfg.io);
            trace("cluster: CLUSTERDOWN until %" PRId64, CL.down_until);
        }
        cluster_at(S.now + rnd(20, 400), CL_NEXT);
        break;
    case CL_MOVE_KEY:
        if (migrate_one_key()) {
            cluster_at(S.now + rnd(1, S.cfg.io / 2), CL_MOVE_KEY);
        } else {
            target_owns();
            cluster_at(S.now + rnd(0, 5), CL_SOURCE_KNOWS);
        }
        break;
    case CL_SOURCE_KNOWS:
        source_gives_up();
        cluster_at(S.now + rnd(0, S.cfg.io), CL_ALL_KNOW);
        break;
    case CL_ALL_KNOW:
        all_know();
        break;
    }
}

/* Faults stop: the migration under way ends at once (its keys moved, every
 * master knows), and so does a CLUSTERDOWN. */
static void cluster_settle(void)
{
    CL.down_until = S.now;
    if (CL.stage == 0)
        return;
    if (CL.mig) {
        while (migrate_one_key())
            ;
        if (CL.importing)
            target_owns();
        source_gives_up();
    }
    all_know();
    CL.gen++;
}

/* The cluster of a schedule: slots split evenly among the masters, then
 * each lock's slot given to a master at random. */
static void cluster_init(void)
{
    memset(&CL, 0, sizeof CL);
    for (int n = S.cfg.first_master; n < S.cfg.servers; n++)
        for (int sl = 0; sl < RLC_SLOTS; sl++)
            CL.view[n][sl] = (uint8_t)(S.cfg.first_master + sl * S.cfg.masters / RLC_SLOTS);
    for (int l = 0; l < S.cfg.locks; l++) {
        unsigned sl = lock_slot(l);
        int owner = S.cfg.first_master + (int)rnd(0, S.cfg.masters - 1);
        for (int n = S.cfg.first_master; n < S.cfg.servers; n++)
            CL.view[n][sl] = (uint8_t)owner;
    }
    if (S.cfg.faults)
        cluster_at(rnd(0, 200), CL_NEXT);
}

static void on_resume(int ci)
{
    struct client *c = &S.cl[ci];
    if (client_paused(ci))
        return;
    trace("c%d runs again", ci);
    rlc_engine_tick(c->e, local_now(c));
    service(ci);
    for (int ti = 0; ti < c->ntasks; ti++)
        for (int l = 0; l < S.cfg.locks; l++)
            check_overlap(ci, ti, l);
}

static void go_quiet(void)
{
    S.quiet = true;
    trace("faults stop");
    if (S.cfg.cluster)
        cluster_settle();
    for (int n = 0; n < S.cfg.servers; n++)
        if (S.node_paused[n] > S.now) {
            S.node_paused[n] = S.now;
            for (int p = 0; p < S.npipes; p++)
                if (S.pipes[p].node == n && S.pipes[p].fh)
                    at(S.now, EV_FWD, p, 0, 0);
        }
    for (int p = 0; p < S.npipes; p++)
        if (S.pipes[p].stall_until > S.now) {
            S.pipes[p].stall_until = S.now;
            at(S.now, EV_FWD, p, 0, 0);
            at(S.now, EV_BACK, p, 0, 0);
        }
    /* a broken connection is seen at once (a paused client sees it when it
     * runs again: its pause ends on its own, within 2 leases) */
    for (int p = 0; p < S.npipes; p++)
        if (S.pipes[p].state == P_CUT && !S.pipes[p].told)
            at(S.now, EV_NOTIFY, p, 0, 0);
}

/* ------------------------------------------------------------ a schedule */

static void dispatch(const struct event *ev)
{
    uint64_t h[3] = {(uint64_t)ev->t, (uint64_t)ev->kind, (uint64_t)ev->a};
    digest_add(h, sizeof h);
    switch (ev->kind) {
    case EV_WAKE: {
        struct client *c = &S.cl[ev->a];
        if (ev->t != c->wake_t || client_paused(ev->a))
            return; /* a paused client ticks when it runs again */
        c->wake_t = -1;
        rlc_engine_tick(c->e, local_now(c));
        service(ev->a);
        break;
    }
    case EV_CONNECT: {
        struct pipe *pp = &S.pipes[ev->a];
        if (defer_if_paused(ev, pp->client))
            return;
        struct client *c = &S.cl[pp->client];
        if (pp->state == P_CUT || c->pipe[pp->conn] != ev->a)
            return; /* EV_NOTIFY tells the client */
        if ((!S.quiet && S.cfg.faults && chance(0.05)) || S.node_down[pp->node] > S.now) {
            trace("c%d conn%d could not connect", pp->client, pp->conn);
            pp->state = P_CUT;
            pp->told = true;
            c->pipe[pp->conn] = -1;
            rlc_engine_closed(c->e, pp->conn, local_now(c));
        } else {
            pp->state = P_OPEN;
            if (S.verbose > 1)
                trace("c%d conn%d connected", pp->client, pp->conn);
            rlc_engine_connected(c->e, pp->conn, local_now(c));
        }
        service(pp->client);
        break;
    }
    case EV_FWD:
        on_fwd(ev->a);
        break;
    case EV_BACK:
        if (defer_if_paused(ev, S.pipes[ev->a].client))
            return;
        on_back(ev->a);
        break;
    case EV_NOTIFY: {
        struct pipe *pp = &S.pipes[ev->a];
        if (defer_if_paused(ev, pp->client))
            return;
        struct client *c = &S.cl[pp->client];
        if (pp->told || c->pipe[pp->conn] != ev->a)
            return;
        pp->told = true;
        c->pipe[pp->conn] = -1;
        if (S.verbose > 1)
            trace("c%d conn%d: the client learns it is closed", pp->client, pp->conn);
        rlc_engine_closed(c->e, pp->conn, local_now(c));
        service(pp->client);
        break;
    }
    case EV_APP:
        if (defer_if_paused(ev, ev->a))
            return;
        app_step(ev->a, ev->b);
        break;
    case EV_CANCEL: {
        if (defer_if_paused(ev, ev->a))
            return;
        struct client *c = &S.cl[ev->a];
        if (c->task[ev->b].op != ev->op || S.quiet)
            return;
        int rc = rlc_engine_cancel(c->e, ev->op, local_now(c));
        trace("c%d cancel op%" PRIu64 " -> %d", ev->a, ev->op, rc);
        service(ev->a);
        break;
    }
    case EV_RESUME:
        on_resume(ev->a);
        break;
    case EV_FAULT:
        fault();
        break;
    case EV_QUIET:
        go_quiet();
        break;
    case EV_CLUSTER:
        cluster_step(ev);
        break;
    }
}

static bool all_idle(void)
{
    for (int ci = 0; ci < S.cfg.clients; ci++)
        if (!rlc_engine_idle(S.cl[ci].e))
            return false;
    return true;
}

/* In the classic format an attempt that arrives after its undo takes the
 * key for the lease it carries (the format has no tombstone:
 * docs/design/classic.md); what must not be left is a key that outlives any lease
 * the engines gave, so it is looked for once the longest has run out. */
/* Whether key is on node n at sim time `when`; a residue if so. */
static void check_gone(int n, const char *key, int64_t when)
{
    lua_getglobal(S.L, "exists");
    lua_pushinteger(S.L, n + 1);
    lua_pushstring(S.L, key);
    lua_pushinteger(S.L, when);
    lua_call(S.L, 3, 1);
    bool there = lua_toboolean(S.L, -1);
    lua_pop(S.L, 1);
    if (!there)
        return;
    S.st.residue++;
    if (S.verbose) {
        lua_getglobal(S.L, "dump");
        lua_pushinteger(S.L, n + 1);
        lua_pushstring(S.L, key);
        lua_pushinteger(S.L, S.now);
        lua_call(S.L, 3, 1);
        trace("RESIDUE n%d %s: %s", n, key, lua_tostring(S.L, -1));
        lua_pop(S.L, 1);
    }
}

/* A semaphore's residue, once every owner gave its permits back (or let
 * their lease run out) and every engine is idle: the count is what was set
 * (expirable: the count and the zset's members, whose leases all end
 * within the longest lease from now, so that once they end the count is
 * what was set); and no key under its try records' prefix
 * "redlockc_attempt:{name}:" lasts without a TTL (a try's record "r<n>" is
 * deleted by the undo or, after a grant, by the client; tombstones have a
 * TTL). A count never set is no residue if no set answered RLC_OK and no
 * grant came (every set call may have been lost to faults). */
static void check_semaphore(int l)
{
    char key[64];
    snprintf(key, sizeof key, "%s%s", S.cfg.prefix, lock_names[l]);
    size_t zlen = 0, plen;
    char *z = kind_of(l) == RLC_KIND_PSEMAPHORE
                  ? key_derived("", key, strlen(key), ":timeout", &zlen)
                  : NULL;
    char *pre = key_own("redlockc_attempt:", key, strlen(key), ":", &plen);
    int64_t count = -1, members = 0, last_end = 0, bare = 0;
    char first[200] = "";
    for (int n = 0; n < S.cfg.servers; n++) {
        lua_getglobal(S.L, "sem_state");
        lua_pushinteger(S.L, n + 1);
        lua_pushstring(S.L, key);
        lua_pushstring(S.L, z ? z : "");
        lua_pushstring(S.L, pre);
        lua_pushinteger(S.L, S.now);
        lua_call(S.L, 5, 5);
        if (lua_tointeger(S.L, -5) != -1)
            count = lua_tointeger(S.L, -5);
        members += lua_tointeger(S.L, -4);
        if (lua_tointeger(S.L, -3) > last_end)
            last_end = lua_tointeger(S.L, -3);
        bare += lua_tointeger(S.L, -2);
        if (!first[0])
            snprintf(first, sizeof first, "%s", lua_tostring(S.L, -1));
        lua_pop(S.L, 5);
    }
    int64_t set = S.cfg.sem_set[l];
    bool counted = count != -1 || S.sem_used[l];
    if (counted && (count + members != set || last_end > S.now + S.cfg.lease_max)) {
        S.st.residue++;
        trace("RESIDUE %s: count %" PRId64 " and %" PRId64 " permits under lease (the last "
              "ends at %" PRId64 "), the count set is %" PRId64, key, count, members, last_end,
              set);
    }
    if (bare > 0) {
        S.st.residue++;
        trace("RESIDUE %s: %" PRId64 " try records without a TTL (%s)", key, bare, first);
    }
    free(z);
    free(pre);
}

static void check_residue(void)
{
    int64_t when = S.now;
    for (int l = 0; l < S.cfg.locks; l++)
        if (is_sem(l))
            check_semaphore(l);
    if (S.cfg.classic)
        when += (S.cfg.lease_max > S.cfg.watchdog ? S.cfg.lease_max : S.cfg.watchdog) + 1;
    for (int n = 0; n < S.cfg.servers; n++)
        for (int l = 0; l < S.cfg.locks; l++) {
            if (is_sem(l))
                continue; /* check_semaphore */
            char key[64];
            snprintf(key, sizeof key, "%s%s", S.cfg.prefix, lock_names[l]);
            check_gone(n, key, when);
            size_t len;
            if (kind_of(l) == RLC_KIND_FAIR && !S.cfg.faults) {
                const char *fair[2] = {"redisson_lock_queue:", "redisson_lock_timeout:"};
                for (int k = 0; k < 2; k++) {
                    char *q = key_derived(fair[k], key, strlen(key), "", &len);
                    check_gone(n, q, when);
                    free(q);
                }
            }
            if (kind_of(l) != RLC_KIND_WRITE)
                continue;
            /* a waiting writer's place: withdrawn when its acquire ended; a
             * try the node ran late (a paused node, a cut connection) may
             * register it again, for its registration time at most */
            char *q = key_own("redlockc_rwlock_writers:", key, strlen(key), "", &len);
            check_gone(n, q, S.now + LOCK_WRITER_INTENT_MS + 1);
            free(q);
            /* a reader's timeout keys "{name}:<field>:rwlock_timeout:<n>" go
             * with its levels */
            char *aux = key_derived("", key, strlen(key), ":", &len);
            lua_getglobal(S.L, "keys_of");
            lua_pushinteger(S.L, n + 1);
            lua_pushinteger(S.L, when);
            lua_call(S.L, 2, 1);
            for (lua_Integer i = 1; lua_rawgeti(S.L, -1, i) == LUA_TSTRING; i++) {
                const char *k = lua_tostring(S.L, -1);
                if (strncmp(k, aux, len) == 0 && strstr(k, ":rwlock_timeout:"))
                    check_gone(n, k, when);
                lua_pop(S.L, 1);
            }
            lua_pop(S.L, 2);
            free(aux);
        }
}

/* Whether schedule `seed` has a cluster: a quarter of them (cluster=0|1:
 * none, all), told by the seed alone, not by the schedule's random stream,
 * so that the others are the very schedules they were before clusters. */
static bool cluster_schedule(uint64_t seed)
{
    if (S.cluster_mode >= 0)
        return S.cluster_mode == 1;
    uint64_t z = seed * 0xbf58476d1ce4e5b9ULL + 0x94d049bb133111ebULL;
    z = (z ^ (z >> 31)) * 0x9e3779b97f4a7c15ULL;
    return ((z ^ (z >> 29)) & 3) == 0;
}

/* A fifth of the seeds run the classic format (told by the seed alone, in a
 * draw of its own, so no other schedule changes). */
static bool classic_schedule(uint64_t seed)
{
    if (S.classic_mode >= 0)
        return S.classic_mode == 1;
    uint64_t z = (seed + 0x632be59bd9b4e019ULL) * 0xd6e8feb86659fd93ULL;
    z ^= z >> 32;
    return z % 5 == 0;
}

/* A sixth of the seeds that are not classic have write locks (told by the
 * seed alone, in a draw of its own). */
static bool write_schedule(uint64_t seed)
{
    if (S.write_mode >= 0)
        return S.write_mode == 1;
    uint64_t z = (seed + 0x3c6ef372fe94f82bULL) * 0xa0761d6478bd642fULL;
    z ^= z >> 29;
    return z % 6 == 0;
}

/* Which names are read-write (or, on one node, fair) locks: each at even
 * odds, at least one (drawn only in such a schedule: the others keep their
 * random stream). */
static void pick_kinds(struct config *g)
{
    memset(g->kind, 0, sizeof g->kind);
    g->writes = !g->classic && write_schedule(S.seed);
    if (!g->writes)
        return;
    int any = 0;
    g->thread_wait = rnd(50, 1000);
    for (int l = 0; l < g->locks; l++) {
        g->kind[l] = chance(0.5)                          ? RLC_KIND_LOCK
                     : g->nodes == 1 && chance(0.5)       ? RLC_KIND_FAIR
                                                          : RLC_KIND_WRITE;
        any += g->kind[l] != RLC_KIND_LOCK;
    }
    if (!any)
        g->kind[rnd(0, g->locks - 1)] = RLC_KIND_WRITE;
}

/* Half the write schedules of one node may have semaphores (told by the
 * seed alone, in a draw of its own; sem=0|1: none, every one of one node). */
static bool sem_schedule(uint64_t seed)
{
    if (S.sem_mode >= 0)
        return S.sem_mode == 1;
    uint64_t z = (seed + 0x5be0cd19137e2179ULL) * 0x9fb21c651e98df25ULL;
    z ^= z >> 31;
    return z % 2 == 0;
}

/* A semaphore schedule: its last name is a semaphore of either kind and, of
 * 3 names, the middle one at even odds the other kind (the engine refuses a
 * semaphore over N nodes, so one node only); each gets the count of 1-3 its
 * owners set. The first name stays what pick_kinds made it: owners of locks
 * run beside. Drawn only in such a schedule: the others keep their stream. */
static void pick_semaphores(struct config *g)
{
    memset(g->sem_set, 0, sizeof g->sem_set);
    g->sems = g->writes && g->nodes == 1 && sem_schedule(S.seed);
    if (!g->sems)
        return;
    int last = g->locks - 1, kind = chance(0.5) ? RLC_KIND_SEMAPHORE : RLC_KIND_PSEMAPHORE;
    g->kind[last] = kind;
    g->sem_set[last] = rnd(1, 3);
    if (g->locks == 3 && chance(0.5)) {
        g->kind[1] = kind == RLC_KIND_SEMAPHORE ? RLC_KIND_PSEMAPHORE : RLC_KIND_SEMAPHORE;
        g->sem_set[1] = rnd(1, 3);
    }
}

static void make_config(void)
{
    struct config *g = &S.cfg;
    static const int node_counts[] = {1, 1, 2, 3, 3, 3, 5};
    g->nodes = node_counts[rnd(0, 6)];
    g->clients = (int)rnd(2, MAX_CLIENTS);
    g->locks = (int)rnd(1, MAX_LOCKS);
    g->io = rnd(20, 200);
    g->node_timeout = rnd(10, g->io); /* above the round trip without faults (<= 7 ms) */
    g->connect = rnd(20, 200);
    g->watchdog = rnd(150, 1500);
    g->jitter = rnd(0, 50);
    g->lease_max = rnd(100, 1500);
    g->hold_max = g->lease_max / 2;
    g->rounds = (int)rnd(1, 3);
    g->faults = chance(0.85);
    g->prefix = chance(0.3) ? "app:" : "";
    g->password = chance(0.3);
    g->quiet_at = g->faults ? rnd(0, 3000) : 0;
    g->fencing = chance(0.5);
    g->classic = classic_schedule(S.seed);
    if (g->classic)
        g->fencing = false; /* refused with the classic format */
    g->settled_at = g->faults ? g->quiet_at + 2 * g->lease_max + 2 * (g->io + g->connect) + 100 : 0;
    g->cluster = g->redis7 = g->tagged = false;
    g->servers = g->first_master = g->nodes;
    g->masters = 0;
    lock_names = plain_names;
    if (!cluster_schedule(S.seed))
        return;
    /* node 0 is a cluster of 2-3 masters; at times 2 standalone nodes beside
     * it (a Redlock of 3 votes, one of them the cluster) */
    g->cluster = true;
    g->masters = (int)rnd(2, 3);
    g->first_master = chance(0.3) ? 2 : 0;
    g->nodes = 1 + g->first_master;
    g->servers = g->first_master + g->masters;
    g->redis7 = chance(0.6);
    g->tagged = chance(0.5);
    if (g->tagged)
        lock_names = tagged_names;
}

/* Runs schedule `seed`: 0 when every rule held. */
static int schedule(uint64_t seed)
{
    memset(&S.st, 0, sizeof S.st);
    rng_state = seed * 0x2545f4914f6cdd1dULL + 1;
    S.seed = seed;
    S.now = 0;
    S.seq = 0;
    S.nheap = 0;
    S.quiet = false;
    S.digest = 0xcbf29ce484222325ULL;
    memset(S.node_paused, 0, sizeof S.node_paused);
    memset(S.node_down, 0, sizeof S.node_down);
    memset(S.node_runs, 0, sizeof S.node_runs);
    memset(S.last_token, 0, sizeof S.last_token);
    fifo_reset();
    make_config();
    struct config *g = &S.cfg;
    pick_kinds(g);
    pick_semaphores(g);
    memset(S.sem_used, 0, sizeof S.sem_used);
    for (int n = 0; n < g->servers; n++)
        S.node_scripts[n] = 0;
    lua_getglobal(S.L, "reset");
    lua_pushinteger(S.L, g->servers);
    lua_call(S.L, 1, 0);

    char nodes[512] = "", options[512];
    if (g->cluster) {
        S.st.cluster_schedules++;
        cluster_init();
        snprintf(nodes, sizeof nodes, "redis-cluster://%s", g->password ? ":s3cret@" : "");
        for (int j = 0; j < g->masters; j++)
            snprintf(nodes + strlen(nodes), sizeof nodes - strlen(nodes), "%s10.0.1.%d:6379",
                     j ? "," : "", j + 1);
    }
    for (int n = 0; n < g->first_master; n++) {
        char one[64];
        snprintf(one, sizeof one, "%sredis://%s10.0.0.%d:6379%s", n || g->cluster ? "," : "",
                 g->password ? ":s3cret@" : "", n + 1, g->password ? "/3" : "");
        strcat(nodes, one);
    }
    snprintf(options, sizeof options,
             "watchdog_timeout_ms=%" PRId64 ";io_timeout_ms=%" PRId64 ";node_timeout_ms=%" PRId64
             ";connect_timeout_ms=%" PRId64 ";retry_jitter_ms=%" PRId64 ";drift_factor=0.01%s%s%s%s",
             g->watchdog, g->io, g->node_timeout, g->connect, g->jitter,
             g->fencing ? ";fencing=1" : "", g->classic ? ";format=classic" : "",
             *g->prefix ? ";key_prefix=" : "", g->prefix);
    trace("schedule seed=%" PRIu64 ": %d nodes%s, %d clients, %d locks, faults %s until %" PRId64
          ", %s", seed, g->nodes, g->password ? " (AUTH, SELECT 3)" : "", g->clients, g->locks,
          g->faults ? "on" : "off", g->quiet_at, options);
    for (int l = 0; g->writes && l < g->locks; l++)
        if (kind_of(l) != RLC_KIND_LOCK)
            trace("  %s is a %s", lock_names[l],
                  kind_of(l) == RLC_KIND_FAIR        ? "fair lock"
                  : kind_of(l) == RLC_KIND_SEMAPHORE ? "semaphore"
                  : kind_of(l) == RLC_KIND_PSEMAPHORE ? "permit-expirable semaphore"
                                                      : "read-write lock");
    for (int l = 0; g->sems && l < g->locks; l++)
        if (is_sem(l))
            trace("  %s: its owners set the count to %" PRId64, lock_names[l], g->sem_set[l]);
    if (g->cluster)
        trace("  node 0 is a cluster of %d masters (n%d..n%d, Redis %d rules), names %s: %s",
              g->masters, g->first_master, g->servers - 1, g->redis7 ? 7 : 6,
              g->tagged ? "in one slot" : "in their own slots", nodes);
    S.tasks_left = 0;
    int failed_setup = 0;
    for (int ci = 0; ci < g->clients; ci++) {
        struct client *c = &S.cl[ci];
        memset(c, 0, sizeof *c);
        snprintf(c->uuid, sizeof c->uuid, "%08x-0000-4000-8000-%012" PRIx64, ci + 1,
                 (uint64_t)(rng_next() & 0xffffffffffffULL));
        c->clk_off = rnd(0, 1000000000);
        c->clk_ppm = rnd(-8000, 8000); /* within drift_factor 0.01 */
        c->wake_t = -1;
        for (int k = 0; k < MAX_CONNS; k++)
            c->pipe[k] = -1;
        if (rlc_engine_new(&c->e, nodes, c->uuid, options) != RLC_OK) {
            fprintf(stderr, "sim: rlc_engine_new: %s\n", rlc_errmsg());
            failed_setup = 1;
            c->e = NULL;
            continue;
        }
        c->ntasks = (int)rnd(1, MAX_TASKS);
        for (int ti = 0; ti < c->ntasks; ti++) {
            struct task *t = &c->task[ti];
            t->owner = (uint64_t)(ti + 1) * 7;
            t->rounds = g->rounds;
            /* a cluster's multi-lock needs its names in one slot */
            t->multi = chance(0.25) && (!g->cluster || g->tagged) && !g->writes;
            t->st = T_IDLE;
            S.tasks_left++;
            app_next(ci, ti, rnd(0, 20));
        }
    }
    if (failed_setup) {
        for (int ci = 0; ci < g->clients; ci++)
            rlc_engine_free(S.cl[ci].e);
        return 1;
    }
    if (g->faults)
        at(rnd(0, 20), EV_FAULT, 0, 0, 0);
    at(g->quiet_at, EV_QUIET, 0, 0, 0);

    /* Once quiet, everything left must finish within the bound: each round
     * of each owner may wait for every other hold and a leftover lease. */
    int64_t work = (int64_t)S.tasks_left * g->rounds;
    int64_t bound = g->quiet_at + 10000 +
                    work * (g->hold_max * 3 + g->lease_max + g->watchdog + 6 * g->io + g->connect);
    bool finished = false;
    long steps = 0;
    while (S.nheap > 0 && S.now <= bound && steps < 5000000) {
        struct event ev = pop();
        S.now = ev.t;
        dispatch(&ev);
        steps++;
        if (S.tasks_left == 0 && S.quiet && all_idle()) {
            finished = true;
            break;
        }
    }
    if (finished) {
        check_residue();
    } else {
        S.st.liveness++;
        trace("LIVENESS: not finished by %" PRId64 " (%d owners left, engines %s)", bound,
              S.tasks_left, all_idle() ? "idle" : "busy");
        for (int ci = 0; ci < g->clients; ci++) {
            struct client *c = &S.cl[ci];
            for (int k = 0; k < rlc_engine_conns(c->e); k++) {
                const char *d;
                int p = c->pipe[k];
                size_t n = rlc_engine_pending(c->e, k, &d);
                trace("  c%d conn%d: want_open %d, pipe %s, %zu bytes pending", ci, k,
                      rlc_engine_want_open(c->e, k),
                      p < 0 ? "none" : S.pipes[p].state == P_OPEN ? "open"
                                     : S.pipes[p].state == P_CUT ? "cut" : "connecting", n);
            }
            trace("  c%d: idle %d, deadline %" PRId64 " (local now %" PRId64 ")", ci,
                  rlc_engine_idle(c->e), rlc_engine_deadline(c->e), local_now(c));
        }
        for (int ci = 0; ci < g->clients; ci++)
            for (int ti = 0; ti < S.cl[ci].ntasks; ti++) {
                struct task *t = &S.cl[ci].task[ti];
                if (t->st != T_DONE)
                    trace("  c%d/o%" PRIu64 " state %d op%" PRIu64 " since %" PRId64
                          " levels %" PRId64 "/%" PRId64 "/%" PRId64 " in %d units",
                          ci, t->owner, t->st, t->op, t->op_start, t->h[0].levels,
                          t->h[1].levels, t->h[2].levels, t->nunits);
            }
    }
    trace("end of schedule at %" PRId64 " digest %016" PRIx64, S.now, S.digest);
    for (int ci = 0; ci < g->clients; ci++)
        rlc_engine_free(S.cl[ci].e);
    pipes_free();
    const struct stats *s = &S.st;
    return s->overlaps + s->tokens + s->residue + s->liveness + s->protocol + s->contract +
               s->fifo + s->permits > 0;
}

/* ------------------------------------------------------------ mutations */

/* A mutation breaks one rule of the protocol on purpose: the run must then
 * find violations, which shows the checks can fail. */
static char *replace(const char *src, const char *from, const char *to)
{
    const char *at_ = strstr(src, from);
    if (!at_) {
        fprintf(stderr, "sim: mutation anchor not found: %s\n", from);
        exit(2);
    }
    size_t a = (size_t)(at_ - src), fl = strlen(from), tl = strlen(to), sl = strlen(src);
    char *out = xmalloc(sl - fl + tl + 1);
    memcpy(out, src, a);
    memcpy(out + a, to, tl);
    memcpy(out + a + tl, at_ + fl, sl - a - fl + 1);
    return out;
}

static void mutate(const char *m)
{
    if (!m || !*m)
        return;
    if (strcmp(m, "notombstone") == 0)
        script_acquire.source = replace(script_acquire.source,
                                        "  if got[1] then return {-1, 0} end",
                                        "  if false then return {-1, 0} end");
    else if (strcmp(m, "noupto") == 0)
        script_release.source =
            replace(script_release.source, "if seq and upto and seq <= upto", "if seq");
    else if (strcmp(m, "verifygone") == 0) /* loss push's verify says "gone" of every hold */
        script_verify.source =
            replace(script_verify.source,
                    "(mine and redis.pcall('hexists', KEYS[i], ARGV[i]) == 1) and 1 or 0", "0");
    else if (strcmp(m, "noexclusion") == 0)
        script_acquire.source = replace(script_acquire.source,
                                        "    if pttl ~= -2 then", "    if false then");
    else if (strcmp(m, "multinotombstone") == 0) /* a late multi-lock runs after its undo */
        script_multi_acquire.source =
            replace(script_multi_acquire.source,
                    "if redis.call('hexists', KEYS[m + i], ARGV[3]) == 1 then", "if false then");
    else if (strcmp(m, "multinoexclusion") == 0) /* a multi-lock takes names others hold */
        script_multi_acquire.source =
            replace(script_multi_acquire.source,
                    "redis.call('exists', KEYS[i]) == 1 and redis.call('hexists', KEYS[i], "
                    "ARGV[2]) == 0",
                    "false");
    else if (strcmp(m, "releaseanylife") == 0) /* an inner release skips the epoch test */
        script_release.source = replace(script_release.source,
                                        "if rec and #ARGV == 4 and parse(rec) == e then",
                                        "if rec and #ARGV == 4 then");
    else if (strcmp(m, "releasenoguard") == 0) /* keeps the field its HINCRBY made */
        script_release.source = replace(script_release.source,
                                        "    if n < 0 then\n      redis.call('hdel', KEYS[1], ARGV[2])",
                                        "    if n < 0 then\n      redis.call('exists', KEYS[1])");
    else if (strcmp(m, "classicnoexclusion") == 0) /* SET without NX: takes a held lock */
        script_classic_acquire.source =
            replace(script_classic_acquire.source, "ARGV[2], 'NX', 'PX'", "ARGV[2], 'PX'");
    else if (strcmp(m, "classicreleaseany") == 0) /* deletes whoever's value it finds */
        script_classic_release.source =
            replace(script_classic_release.source,
                    "if redis.pcall('get', KEYS[1]) ~= ARGV[1] then return -1 end",
                    "if redis.call('exists', KEYS[1]) == 0 then return -1 end");
    else if (strcmp(m, "classicrenewany") == 0) /* renews a key another holder took */
        script_classic_renew.source =
            replace(script_classic_renew.source, "if redis.pcall('get', KEYS[i]) == ARGV[1 + i] then",
                    "if redis.call('exists', KEYS[i]) == 1 then");
    else if (strcmp(m, "readbesidewriter") == 0) /* a reader joins a writer's hash */
        fscript_read_acquire.source =
            replace(fscript_read_acquire.source, "elseif mode == 'read' or writing then",
                    "elseif true then");
    else if (strcmp(m, "writebesideany") == 0) /* a writer joins any holder's hash */
        fscript_write_acquire.source = replace(
            fscript_write_acquire.source,
            "elseif mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then",
            "elseif true then");
    else if (strcmp(m, "writereleasenotomb") == 0) /* a late write try runs after the release */
        fscript_write_release.source =
            replace(fscript_write_release.source, "  elseif not rec then", "  elseif false then");
    else if (strcmp(m, "readreleasenotomb") == 0) /* a late read try runs after the release */
        fscript_read_release.source =
            replace(fscript_read_release.source, "  elseif not rec then", "  elseif false then");
    else if (strcmp(m, "fairbesideany") == 0) /* a fair try joins another owner's hash */
        fscript_fair_acquire.source =
            replace(fscript_fair_acquire.source,
                    "elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then", "elseif true then");
    else if (strcmp(m, "fairjoinfront") == 0) /* a new waiter joins the queue at its head */
        fscript_fair_acquire.source =
            replace(fscript_fair_acquire.source, "redis.call('rpush', KEYS[2], ARGV[2])",
                    "redis.call('lpush', KEYS[2], ARGV[2])");
    else if (strcmp(m, "fairbargein") == 0) /* a first try takes a free lock past the queue */
        fscript_fair_acquire.source = replace(
            fscript_fair_acquire.source,
            "if redis.call('exists', KEYS[1]) == 0 and (not first or first == ARGV[2]) then\n"
            "  if first then redis.call('lpop', KEYS[2]) end\n",
            "if redis.call('exists', KEYS[1]) == 0 and (not first or first == ARGV[2] or "
            "ARGV[5] == '0') then\n"
            "  if first == ARGV[2] then redis.call('lpop', KEYS[2]) end\n");
    else if (strcmp(m, "fairplacelapses") == 0) /* a live waiter's place times out */
        fscript_fair_acquire.source =
            replace(fscript_fair_acquire.source, "local wait = tonumber(ARGV[4])\n",
                    "local wait = tonumber(ARGV[4]) / 8\n");
    else if (strcmp(m, "fairreleasenotomb") == 0) /* a late fair try runs after the release */
        fscript_fair_release.source =
            replace(fscript_fair_release.source, "  elseif not rec then", "  elseif false then");
    else if (strcmp(m, "fairundonotomb") == 0) /* a late fair try runs after its undo */
        fscript_fair_undo.source =
            replace(fscript_fair_undo.source, "  tombstone(KEYS[2], ARGV[1], ARGV[3])\n  return 0",
                    "  return 0");
    else if (strcmp(m, "rwundonotomb") == 0) /* a late read or write try runs after its undo */
        fscript_rw_undo.source =
            replace(fscript_rw_undo.source, "  tombstone(KEYS[2], ARGV[1], ARGV[3])\n  return 0",
                    "  return 0");
    else if (strcmp(m, "semnotomb") == 0) /* a plain try that arrives after its undo takes */
        fscript_sem_acquire.source =
            replace(fscript_sem_acquire.source,
                    "if redis.call('exists', KEYS[2]) == 1 then return {-1, 0} end",
                    "if false then return {-1, 0} end");
    else if (strcmp(m, "semnocount") == 0) /* a plain try takes permits that are not free */
        fscript_sem_acquire.source = replace(fscript_sem_acquire.source,
                                             "if v >= tonumber(ARGV[1]) then", "if true then");
    else if (strcmp(m, "semundoargv") == 0) /* an undo gives back ARGV's count (0), not the
                                               record's */
        fscript_sem_release.source =
            replace(fscript_sem_release.source, "  n = tonumber(string.sub(rec, 2)) or 0\n", "");
    else if (strcmp(m, "semundonotomb") == 0) /* an undo before its try leaves no tombstone */
        fscript_sem_release.source =
            replace(fscript_sem_release.source,
                    "  if rec == false then\n    redis.call('set', KEYS[3], 'd', 'px', ARGV[2])\n",
                    "  if rec == false then\n");
    else if (strcmp(m, "semreleasetwice") == 0) /* a release sent again gives back again */
        fscript_sem_release.source = replace(fscript_sem_release.source,
                                             "elseif rec ~= false then\n  return 0\n",
                                             "elseif false then\n");
    else if (strcmp(m, "semnoforget") == 0) {
        /* the client does not delete a granted try's record: node_exec
         * answers its DEL without deleting (the engine's side, not a script) */
    } else if (strcmp(m, "psemnocount") == 0) /* an expirable try takes permits not free */
        fscript_psem_acquire.source =
            replace(fscript_psem_acquire.source, "if v >= n then", "if true then");
    else if (strcmp(m, "psemreleaseany") == 0) /* n back whether or not the members were there */
        fscript_psem_release.source =
            replace(fscript_psem_release.source,
                    "for i = 1, n do back = back + redis.call('zrem', KEYS[2], member(ARGV[2], i)) "
                    "end",
                    "for i = 1, n do redis.call('zrem', KEYS[2], member(ARGV[2], i)); back = back "
                    "+ 1 end");
    else if (strcmp(m, "psemshortlease") == 0) /* the server ends a lease before its grant's
                                                  validity */
        fscript_psem_acquire.source =
            replace(fscript_psem_acquire.source, "now + tonumber(ARGV[2]), member(ARGV[3], i)",
                    "now + tonumber(ARGV[2]) // 2, member(ARGV[3], i)");
    else if (strcmp(m, "psemreclaimlost") == 0) /* an ended lease's permits do not go back */
        fscript_psem_acquire.source =
            replace(fscript_psem_acquire.source, "local v = redis.call('incrby', k, #gone)",
                    "local v = redis.call('get', k)");
    else {
        fprintf(stderr, "sim: unknown mutation %s\n", m);
        exit(2);
    }
}


/* ------------------------------------------------------------ self-test */

/* The node side on its own: RESP in, scripts on simulated time, RESP out,
 * pub/sub. Feeds commands as a client would and compares the bytes back. */
static int st_fail;

static void st_send(int p, const char *const *argv, int argc)
{
    struct buf b = {0};
    buf_printf(&b, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++)
        buf_bulk(&b, argv[i], strlen(argv[i]));
    struct pipe *pp = &S.pipes[p];
    struct seg *s = seg_new(b.p, b.len, S.now);
    if (pp->ft)
        pp->ft->next = s;
    else
        pp->fh = s;
    pp->ft = s;
    free(b.p);
    on_fwd(p);
}

static void st_expect(int p, const char *want, const char *what)
{
    struct pipe *pp = &S.pipes[p];
    struct buf got = {0};
    for (struct seg *s = pp->bh; s; s = s->next)
        buf_add(&got, s->data, s->len);
    segs_free(pp->bh);
    pp->bh = pp->bt = NULL;
    if (!got.p || strcmp(got.p, want) != 0) {
        printf("selftest FAILED %s:\n  want %s\n  got  %s\n", what, want, got.p ? got.p : "");
        st_fail++;
    } else {
        printf("selftest ok  %s\n", what);
    }
    free(got.p);
}

/* A cluster of two masters: MOVED, then a migration of lk0's slot from
 * master 0 to master 1 (ASK, ASKING, TRYAGAIN), then its end. */
static void selftest_cluster(void)
{
    S.cfg = (struct config){.cluster = true, .masters = 2, .servers = 2, .nodes = 1,
                            .redis7 = true, .locks = 1, .prefix = ""};
    S.now = 0;
    lock_names = plain_names;
    lua_getglobal(S.L, "reset");
    lua_pushinteger(S.L, 2);
    lua_call(S.L, 1, 0);
    memset(&CL, 0, sizeof CL); /* every slot master 0's */
    int m0 = pipe_new(0, 0), m1 = pipe_new(0, 2);
    S.pipes[m1].node = 1;
    S.pipes[m0].state = S.pipes[m1].state = P_OPEN;
    unsigned slot = slot_of("lk0", 3);
    char want[160];
    const char *slots[] = {"CLUSTER", "SLOTS"};
    st_send(m1, slots, 2);
    st_expect(m1, "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$8\r\n10.0.1.1\r\n:6379\r\n$40\r\n"
                  "0000000000000000000000000000000000000001\r\n", "CLUSTER SLOTS: one range");
    const char *pttl[] = {"PTTL", "lk0"};
    st_send(m1, pttl, 2);
    snprintf(want, sizeof want, "-MOVED %u 10.0.1.1:6379\r\n", slot);
    st_expect(m1, want, "a key of another master's slot: MOVED");
    const char *acq[] = {"EVAL", script_acquire.source, "3", "lk0", "redlockc_attempts:{lk0}",
                         "redisson_lock_token:{lk0}", "500", "u1:7", "u1:1", ""};
    st_send(m0, acq, 10);
    st_expect(m0, "*4\r\n:1\r\n:1700000000000000\r\n:0\r\n:0\r\n", "acquire on the owner");
    CL.mig = CL.importing = true;
    CL.stage = 1;
    CL.mslot = slot;
    CL.mfrom = 0;
    CL.mto = 1;
    st_send(m0, pttl, 2);
    st_expect(m0, ":500\r\n", "migrating, the key still on the source: it runs there");
    migrate_one_key(); /* lk0, first in byte order */
    st_send(m0, pttl, 2);
    snprintf(want, sizeof want, "-ASK %u 10.0.1.2:6379\r\n", slot);
    st_expect(m0, want, "the key moved: ASK");
    st_send(m1, pttl, 2);
    snprintf(want, sizeof want, "-MOVED %u 10.0.1.1:6379\r\n", slot);
    st_expect(m1, want, "on the importing target without ASKING: MOVED back");
    const char *asking[] = {"ASKING"};
    st_send(m1, asking, 1);
    st_send(m1, pttl, 2);
    st_expect(m1, "+OK\r\n:500\r\n", "ASKING, then the key runs on the target with its TTL");
    st_send(m1, pttl, 2);
    st_expect(m1, want, "ASKING holds for one command");
    st_send(m0, acq, 10);
    st_expect(m0, "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
              "a script with keys on both sides, on the source: TRYAGAIN");
    st_send(m1, asking, 1);
    st_send(m1, acq, 10);
    st_expect(m1, "+OK\r\n-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
              "and on the target after ASKING: TRYAGAIN");
    while (migrate_one_key())
        ;
    target_owns();
    source_gives_up();
    all_know();
    const char *acq2[] = {"EVAL", script_acquire.source, "3", "lk0", "redlockc_attempts:{lk0}",
                          "redisson_lock_token:{lk0}", "500", "u2:7", "u2:1", "", "1"};
    st_send(m1, acq2, 11);
    st_expect(m1, "*3\r\n:0\r\n:500\r\n$4\r\nu1:7\r\n",
              "the slot moved: the hold is on the new owner (busy for another attempt)");
    st_send(m0, pttl, 2);
    snprintf(want, sizeof want, "-MOVED %u 10.0.1.2:6379\r\n", slot);
    st_expect(m0, want, "and the old owner answers MOVED");
    S.cfg = (struct config){0};
    pipes_free();
}

static int selftest(void)
{
    S.cfg.nodes = 1;
    S.cfg.faults = false;
    S.quiet = true;
    lua_getglobal(S.L, "reset");
    lua_pushinteger(S.L, 1);
    lua_call(S.L, 1, 0);
    int a = pipe_new(0, 0), sub = pipe_new(1, 1);
    S.pipes[a].state = S.pipes[sub].state = P_OPEN;
    const char *acq_sha = script_acquire.sha, *rel_sha = script_release.sha;
    const char *k_acq[] = {"EVALSHA", acq_sha, "3", "lk0", "redlockc_attempts:{lk0}",
                           "redisson_lock_token:{lk0}", "500", "u1:7", "u1:1", ""};
    st_send(a, k_acq, 10);
    st_expect(a, "-NOSCRIPT No matching script. Please use EVAL.\r\n", "EVALSHA before any EVAL is NOSCRIPT");
    k_acq[0] = "EVAL";
    k_acq[1] = script_acquire.source;
    st_send(a, k_acq, 10);
    /* a new counter starts at the node's clock: simulated time 0 from the
     * nodes' epoch (node.lua), in whole ms counted in microseconds */
    st_expect(a, "*4\r\n:1\r\n:1700000000000000\r\n:0\r\n:0\r\n",
              "EVAL acquire: a new hold, its counter started at the node's clock");
    const char *sub_cmd[] = {"SUBSCRIBE", "redisson_lock__channel:{lk0}"};
    st_send(sub, sub_cmd, 2);
    st_expect(sub, "*3\r\n$9\r\nsubscribe\r\n$28\r\nredisson_lock__channel:{lk0}\r\n:1\r\n",
              "SUBSCRIBE replies subscribe, channel, count");
    const char *k_acq2[] = {"EVALSHA", acq_sha, "3", "lk0", "redlockc_attempts:{lk0}",
                            "redisson_lock_token:{lk0}", "500", "u2:7", "u2:1", "", "1"};
    S.now = 100;
    st_send(a, k_acq2, 11);
    st_expect(a, "*3\r\n:0\r\n:400\r\n$4\r\nu1:7\r\n", "EVALSHA acquire by another owner: busy, pttl, holder");
    const char *load[] = {"SCRIPT", "LOAD", script_release.source};
    st_send(a, load, 3);
    char want[64];
    snprintf(want, sizeof want, "$40\r\n%s\r\n", rel_sha);
    st_expect(a, want, "SCRIPT LOAD answers the SHA");
    const char *k_rel[] = {"EVALSHA", rel_sha, "3", "lk0", "redisson_lock__channel:{lk0}",
                           "redlockc_attempts:{lk0}", "500", "u1:7", "u1:1", "1"};
    st_send(a, k_rel, 10);
    st_expect(a, ":0\r\n", "release of the last level: freed");
    st_expect(sub, "*3\r\n$7\r\nmessage\r\n$28\r\nredisson_lock__channel:{lk0}\r\n$1\r\n0\r\n",
              "the release publishes 0 to the subscriber");
    st_send(a, k_acq2, 11);
    st_expect(a, "*4\r\n:1\r\n:1700000000000001\r\n:0\r\n:0\r\n", "the next owner gets the next token");
    S.now = 700;
    const char *k_acq3[] = {"EVALSHA", acq_sha, "3", "lk0", "redlockc_attempts:{lk0}",
                            "redisson_lock_token:{lk0}", "500", "u3:7", "u3:1", ""};
    st_send(a, k_acq3, 10);
    st_expect(a, "*4\r\n:1\r\n:1700000000000002\r\n:0\r\n:0\r\n",
              "after the lease on simulated time the key expired");
    const char *flush[] = {"SCRIPT", "FLUSH"};
    st_send(a, flush, 2);
    st_expect(a, "+OK\r\n", "SCRIPT FLUSH");
    st_send(a, k_acq3, 10);
    st_expect(a, "-NOSCRIPT No matching script. Please use EVAL.\r\n", "EVALSHA after SCRIPT FLUSH is NOSCRIPT");
    const char *get[] = {"GET", "x"};
    st_send(sub, get, 2);
    st_expect(sub, "-ERR Can't execute 'GET': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / "
                   "QUIT / RESET are allowed in this context\r\n", "a subscriber runs no other command");
    const char *unsub[] = {"UNSUBSCRIBE"};
    st_send(sub, unsub, 1);
    st_expect(sub, "*3\r\n$11\r\nunsubscribe\r\n$28\r\nredisson_lock__channel:{lk0}\r\n:0\r\n",
              "UNSUBSCRIBE of all channels");
    const char *ping[] = {"PING"};
    st_send(sub, ping, 1);
    st_expect(sub, "+PONG\r\n", "PING");
    /* the multi-lock's script: all names or none, one attempt id for all */
    /* (without fencing: no token counters named, ARGV[4] empty) */
    const char *m_acq[] = {"EVAL", script_multi_acquire.source, "4", "lk1", "lk2",
                           "redlockc_attempts:{lk1}", "redlockc_attempts:{lk2}", "500", "u4:7",
                           "u4:1", ""};
    st_send(a, m_acq, 11);
    st_expect(a, "*3\r\n:1\r\n:0\r\n:0\r\n", "multi-lock of two free names: granted");
    const char *m_busy[] = {"EVAL", script_multi_acquire.source, "6", "lk1", "lk0",
                            "redlockc_attempts:{lk1}", "redlockc_attempts:{lk0}",
                            "redisson_lock_token:{lk1}", "redisson_lock_token:{lk0}", "500", "u4:7",
                            "u4:2", "1"};
    st_send(a, m_busy, 13);
    st_expect(a, "*3\r\n:0\r\n:500\r\n:2\r\n",
              "multi-lock with another owner's name: busy, its pttl and index");
    st_send(a, m_acq, 11);
    st_expect(a, "*2\r\n:-1\r\n:0\r\n", "multi-lock of an attempt already there: nothing");
    const char *m_rel[] = {"EVAL", script_release.source, "3", "lk2", "redisson_lock__channel:{lk2}",
                           "redlockc_attempts:{lk2}", "500", "u4:7", "u4:1", "1"};
    st_send(a, m_rel, 10);
    st_expect(a, ":0\r\n", "the release script frees one name of a multi-lock");
    S.st.protocol = 0;
    pipes_free();
    selftest_cluster();
    printf("selftest: %s\n", st_fail ? "FAILED" : "passed");
    return st_fail ? 1 : 0;
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    uint64_t seed = 1;
    long count = 1000;
    S.cluster_mode = -1;
    S.classic_mode = -1;
    S.write_mode = -1;
    S.sem_mode = -1;
    int replay = 0, self = 0, expect_violations = 0, found = 0;
    const char *lua_path = SIM_NODE_LUA;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "seed=", 5) == 0)
            seed = strtoull(a + 5, NULL, 10);
        else if (strncmp(a, "schedules=", 10) == 0)
            count = strtol(a + 10, NULL, 10);
        else if (strncmp(a, "verbose=", 8) == 0)
            S.verbose = atoi(a + 8);
        else if (strncmp(a, "mutate=", 7) == 0)
            S.mutate = a + 7;
        else if (strncmp(a, "replay=", 7) == 0)
            replay = atoi(a + 7);
        else if (strcmp(a, "flush=0") == 0)
            S.no_flush = 1;
        else if (strncmp(a, "cluster=", 8) == 0)
            S.cluster_mode = atoi(a + 8) ? 1 : 0;
        else if (strncmp(a, "classic=", 8) == 0)
            S.classic_mode = atoi(a + 8) ? 1 : 0;
        else if (strncmp(a, "write=", 6) == 0)
            S.write_mode = atoi(a + 6) ? 1 : 0;
        else if (strncmp(a, "sem=", 4) == 0)
            S.sem_mode = atoi(a + 4) ? 1 : 0;
        else if (strcmp(a, "expect=violations") == 0)
            expect_violations = 1;
        else if (strcmp(a, "selftest") == 0)
            self = 1;
        else if (strncmp(a, "lua=", 4) == 0)
            lua_path = a + 4;
        else {
            fprintf(stderr, "usage: %s [seed=N] [schedules=N] [verbose=0|1|2] [mutate=NAME] "
                            "[replay=1] [expect=violations] [lua=node.lua] [cluster=0|1] [classic=0|1] [write=0|1] "
                            "[sem=0|1] | selftest\n", argv[0]);
            return 2;
        }
    }
    mutate(S.mutate);
    scripts_init();
    S.L = luaL_newstate();
    luaL_openlibs(S.L);
    lua_register(S.L, "sim_publish", lua_publish);
    lua_register(S.L, "sim_spublish", lua_spublish);
    lua_register(S.L, "sim_touch", lua_touch);
    if (luaL_dofile(S.L, lua_path) != LUA_OK) {
        fprintf(stderr, "sim: %s\n", lua_tostring(S.L, -1));
        return 2;
    }
    const struct script *all[] = {&script_acquire, &script_release, &script_undo,
                                  &script_renew, &script_force_release, &script_token_floor,
                                  &script_multi_acquire};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        script_add(all[i]->source, strlen(all[i]->source), all[i]->name);
    if (self) {
        int rc = selftest();
        lua_close(S.L);
        return rc;
    }

    struct stats tot = {0};
    long bad = 0, nondet = 0;
    char failures[20][200];
    clock_t t0 = clock();
    for (long k = 0; k < count; k++) {
        uint64_t sd = seed + (uint64_t)k;
        int rc = schedule(sd);
        uint64_t digest = S.digest;
        struct stats st = S.st;
        if (replay) {
            int v = S.verbose;
            S.verbose = 0;
            int rc2 = schedule(sd);
            S.verbose = v;
            if (rc2 != rc || S.digest != digest) {
                nondet++;
                fprintf(stderr, "sim: seed=%" PRIu64 " does not replay the same\n", sd);
            }
        }
        long *a = (long *)&tot, *b = (long *)&st;
        for (size_t i = 0; i < sizeof tot / sizeof(long); i++)
            a[i] += b[i];
        if (rc && expect_violations &&
            st.overlaps + st.tokens + st.residue + st.liveness + st.fifo + st.permits > 0) {
            printf("sim_engine: seed=%" PRIu64 " broke a rule, as expected of mutation %s: "
                   "overlaps %ld tokens %ld residue %ld liveness %ld fifo %ld permits %ld\n", sd,
                   S.mutate ? S.mutate : "(none)", st.overlaps, st.tokens, st.residue, st.liveness,
                   st.fifo, st.permits);
            found = 1;
            count = k + 1;
            break;
        }
        if (rc) {
            if (bad < 20)
                snprintf(failures[bad], sizeof failures[bad],
                         "seed=%" PRIu64 " nodes=%d%s clients=%d: overlaps %ld tokens %ld residue %ld "
                         "liveness %ld protocol %ld contract %ld fifo %ld permits %ld", sd,
                         S.cfg.nodes, S.cfg.cluster ? " (cluster)" : "", S.cfg.clients,
                         st.overlaps, st.tokens, st.residue, st.liveness, st.protocol, st.contract,
                         st.fifo, st.permits);
            bad++;
        }
    }
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("sim_engine: seeds %" PRIu64 "..%" PRIu64 " (%ld schedules%s) in %.1f s cpu, %.0f "
           "schedules/s%s%s\n", seed, seed + (uint64_t)count - 1, count,
           replay ? ", each run twice" : "", secs, secs > 0 ? count * (replay ? 2 : 1) / secs : 0,
           S.mutate && *S.mutate ? ", mutation " : "", S.mutate ? S.mutate : "");
    printf("sim_engine: grants %ld, busy %ld, failed %ld, canceled %ld, lost %ld, extends %ld, "
           "releases %ld, events %ld, validity claims checked %ld\n", tot.grants, tot.busy,
           tot.failed, tot.canceled, tot.lost, tot.extends, tot.releases, tot.events, tot.claims);
    printf("sim_engine: multi-locks: grants %ld, busy %ld, failed %ld, canceled %ld\n",
           tot.multi_grants, tot.multi_busy, tot.multi_failed, tot.multi_canceled);
    printf("sim_engine: queries %ld, answered %ld\n", tot.queries, tot.query_answers);
    printf("sim_engine: commands %ld, unlock messages %ld, invalidations %ld, NOSCRIPT %ld, cuts "
           "%ld, stalls %ld, node pauses %ld, node restarts %ld, client pauses %ld, script "
           "flushes %ld, short writes %ld, fencing counters lost %ld\n", tot.commands,
           tot.messages, tot.invalidations, tot.noscript, tot.cuts, tot.stalls, tot.node_pauses,
           tot.restarts, tot.client_pauses, tot.flushes, tot.short_writes, tot.counters_lost);
    printf("sim_engine: SCRIPT LOAD %ld, refused %ld\n", tot.loads, tot.loads_refused);
    printf("sim_engine: fair grants to live waiters %ld (with other live waiters queued %ld)\n",
           tot.fair_grants, tot.fair_behind);
    printf("sim_engine: semaphores: counts set %ld, grants %ld, releases %ld, leases left to "
           "run out %ld\n", tot.sem_sets, tot.sem_grants, tot.sem_releases, tot.sem_lapsed);
    printf("sim_engine: overlaps %ld, token regressions %ld, residue %ld, liveness %ld, "
           "protocol %ld, contract %ld, fifo %ld, permits %ld%s\n", tot.overlaps, tot.tokens,
           tot.residue, tot.liveness, tot.protocol, tot.contract, tot.fifo, tot.permits,
           replay ? (nondet ? ", NOT DETERMINISTIC" : ", every seed replayed the same") : "");
    printf("sim_engine: cluster schedules %ld: MOVED %ld, ASK %ld (ASKING %ld), TRYAGAIN %ld, "
           "CLUSTERDOWN %ld, CLUSTER SLOTS %ld, migrations %ld (keys moved %ld), sunsubscribes "
           "%ld\n", tot.cluster_schedules, tot.moved, tot.ask, tot.asking, tot.tryagain,
           tot.clusterdown, tot.slot_maps, tot.migrations, tot.keys_migrated, tot.sunsubscribes);
    if (S.unknown[0])
        printf("sim_engine: commands the node does not know: %s\n", S.unknown);
    for (long i = 0; i < bad && i < 20; i++)
        printf("sim_engine: FAILED %s\n", failures[i]);
    if (bad)
        printf("sim_engine: %ld of %ld schedules failed; replay one with seed=N schedules=1 "
               "verbose=1 (verbose=2 shows every command)\n", bad, count);
    free(S.heap);
    free(S.pipes);
    lua_close(S.L);
    for (int i = 0; i < S.nscripts; i++)
        free(S.scripts[i].source);
    if (expect_violations) {
        if (found)
            return 0;
        printf("sim_engine: expected a broken rule (expect=violations) and found none\n");
        return 1;
    }
    return bad || nondet ? 1 : 0;
}
