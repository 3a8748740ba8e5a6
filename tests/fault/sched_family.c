/*
 * sched_family.c - the lock family's owners in the randomized fault
 * schedule (schedule.c), and their checkers. The rules they check are
 * written in schedule.c's header comment; this file is how.
 *
 * Owners run beside the rlc_lock owners, in the same worker processes, on
 * the same clients, through the same faulted proxies:
 *   - writers and readers of one rlc_rwlock (RW_NAME), nested 1-3 levels;
 *   - fair-lock owners (FAIR_NAME), nested 1-3 levels, one node only;
 *   - semaphore owners (SEM_NAME), one permit per acquire, one node only.
 * Each logs its critical sections in the shared log with its kind; the
 * checks run over that log and over what the servers hold at quiescence.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_family.h"

const char *const kind_names[K_NKINDS] = {"lock", "write", "read", "fair", "sem"};

/* ---- the plan --------------------------------------------------------------- */

void fam_plan(struct config *cfg)
{
    /* Its own stream, so the nodes, pool and lock leases of a seed stay
     * what they were before the family came. Every draw is made whatever
     * the outcome, so one draw never shifts the next. */
    uint64_t fs = splitmix(cfg->seed ^ 0xFA3117C0FFEEULL);
    bool d_rw = rnd(&fs) % 2, d_fair = rnd(&fs) % 2, d_sem = rnd(&fs) % 2;
    int plan = (int)(cfg->seed % 3);
    bool one = cfg->nodes == 1;
    cfg->run[K_LOCK] = true;
    cfg->run[K_WRITE] = cfg->run[K_READ] = plan == 2 || d_rw;
    cfg->run[K_FAIR] = one && (plan == 1 || d_fair);
    cfg->run[K_SEM] = one && (plan == 1 || d_sem);
    cfg->permits = (int)rnd_in(&fs, 1, 2);
    for (int id = FAM_BASE; id < OWNERS; id++) {
        int64_t fixed = rnd_in(&fs, 1000, 3000);
        cfg->lease[id] = rnd(&fs) % 2 ? 0 : fixed;
    }
}

int fam_setup(const struct redis_server *node0, const struct config *cfg)
{
    if (!cfg->run[K_SEM])
        return 0;
    /* Redisson's layout: the free count is a string at the name. */
    redisReply *r = rs_cmd(node0, "SET %s %d", SEM_NAME, cfg->permits);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* ---- owners ------------------------------------------------------------------ */

struct fam_worker {
    rlc_client *c;
    const struct config *cfg;
    int proc, kind, id;
    rlc_rwlock *rw;
    rlc_fairlock *fair;
    rlc_semaphore *sem;
};

static int h_acquire(struct fam_worker *w, int64_t wait_ms, int64_t lease_ms)
{
    switch (w->kind) {
    case K_WRITE: return rlc_rwlock_write_acquire(w->rw, wait_ms, lease_ms);
    case K_READ: return rlc_rwlock_read_acquire(w->rw, wait_ms, lease_ms);
    default: return rlc_fairlock_acquire(w->fair, wait_ms, lease_ms);
    }
}

static int h_release(struct fam_worker *w)
{
    switch (w->kind) {
    case K_WRITE: return rlc_rwlock_write_release(w->rw);
    case K_READ: return rlc_rwlock_read_release(w->rw);
    default: return rlc_fairlock_release(w->fair);
    }
}

static int64_t h_validity(struct fam_worker *w)
{
    int64_t v = 0;
    if (w->kind == K_FAIR)
        rlc_fairlock_validity_ms(w->fair, &v);
    else
        rlc_rwlock_validity_ms(w->rw, w->kind == K_WRITE, &v);
    return v;
}

/* One call per level, never a second one for the same level: the handle
 * drops a level from its count whatever the outcome and sends a release
 * that got no answer again by itself, so calling again would release the
 * next level. A lost hold answers RLC_E_LOST once per counted level; all
 * are released, so that the next acquire starts a new hold. */
static void release_levels(struct fam_worker *w, struct owner_state *o, int levels)
{
    bool io = false, lost = false;
    for (; levels > 0; levels--) {
        int rc = h_release(w);
        if (rc == RLC_E_NOT_OWNER)
            break;
        if (rc == RLC_E_LOST) {
            lost = true;
        } else if (rc != RLC_OK) {
            o->release_failed++;
            io = true;
        }
    }
    o->lost += lost;
    atomic_store(&o->release_error, io);
    atomic_store(&o->levels, 0);
}

/* acquire (nested 1-3) -> critical section -> release, as the lock owners. */
static void hold_loop(struct fam_worker *w)
{
    struct owner_state *o = &sh->owner[w->id];
    uint64_t rs = splitmix(w->cfg->seed * 1000003 + (uint64_t)w->id);
    int64_t lease = w->cfg->lease[w->id];
    while (!atomic_load(&sh->stop)) {
        int depth = (int)rnd_in(&rs, 1, 3);
        int rc = h_acquire(w, 300, lease);
        if (rc != RLC_OK) {
            atomic_store(&o->last_acquire_failed, rc != RLC_NOT_ACQUIRED);
            o->acquire_failed += rc != RLC_NOT_ACQUIRED;
            continue;
        }
        atomic_store(&o->last_acquire_failed, 0);
        o->acquired++;
        int levels = 1;
        for (int k = 1; k < depth; k++) {
            rc = h_acquire(w, 0, lease);
            if (rc == RLC_OK) {
                levels++;
                o->nested++;
            } else {
                atomic_store(&o->last_acquire_failed, 1);
                o->acquire_failed++;
            }
        }
        atomic_store(&o->levels, levels);
        struct sec s = {.owner = (int16_t)w->id, .kind = (int8_t)w->kind};
        s.enter_ns = now_ns();
        section_pause(&rs);
        s.v_exit_ms = (int32_t)h_validity(w);
        s.exit_ns = now_ns();
        log_section(&s);
        release_levels(w, o, levels);
        /* Writers rest between holds: a waiting writer holds back new
         * readers, and three writers that never rest would leave readers
         * (and so writer-reader overlaps) almost no turn. */
        if (w->kind == K_WRITE)
            sleep_ms(rnd_in(&rs, 20, 150));
    }
}

/* acquire(1) -> section -> release(1). A release is called once: one that
 * got no answer is sent again by the library, named by its record so that
 * it adds once; a second call would be a second release. */
static void sem_loop(struct fam_worker *w)
{
    struct owner_state *o = &sh->owner[w->id];
    uint64_t rs = splitmix(w->cfg->seed * 1000003 + (uint64_t)w->id);
    while (!atomic_load(&sh->stop)) {
        int rc = rlc_semaphore_acquire(w->sem, 1, 300);
        if (rc != RLC_OK) {
            atomic_store(&o->last_acquire_failed, rc != RLC_NOT_ACQUIRED);
            o->acquire_failed += rc != RLC_NOT_ACQUIRED;
            continue;
        }
        atomic_store(&o->last_acquire_failed, 0);
        o->acquired++;
        atomic_store(&o->levels, 1);
        struct sec s = {.owner = (int16_t)w->id, .kind = K_SEM, .v_exit_ms = 1};
        s.enter_ns = now_ns();
        section_pause(&rs);
        s.exit_ns = now_ns();
        log_section(&s);
        rc = rlc_semaphore_release(w->sem, 1);
        o->release_failed += rc != RLC_OK;
        atomic_store(&o->release_error, rc != RLC_OK);
        atomic_store(&o->levels, 0);
    }
}

static void *fam_thread(void *p)
{
    struct fam_worker *w = p;
    struct owner_state *o = &sh->owner[w->id];
    const char *uuid = rlc_client_uuid(w->c);
    uint64_t owner = (uint64_t)w->id + 1;
    int rc;
    switch (w->kind) {
    case K_WRITE:
    case K_READ:
        rc = rlc_rwlock_new(w->c, RW_NAME, owner, &w->rw);
        snprintf(o->field, sizeof o->field, "%s:%" PRIu64 "%s", uuid, owner,
                 w->kind == K_WRITE ? ":write" : "");
        break;
    case K_FAIR:
        rc = rlc_fairlock_new(w->c, FAIR_NAME, owner, 1000, &w->fair);
        snprintf(o->field, sizeof o->field, "%s:%" PRIu64, uuid, owner);
        break;
    default: rc = rlc_semaphore_new(w->c, SEM_NAME, &w->sem); break;
    }
    if (rc != RLC_OK) {
        fprintf(stderr, "%s owner %d: new: %s\n", kind_names[w->kind], w->id, rlc_errmsg());
        return NULL;
    }
    if (w->kind == K_SEM)
        sem_loop(w);
    else
        hold_loop(w);
    rlc_rwlock_free(w->rw);
    rlc_fairlock_free(w->fair);
    rlc_semaphore_free(w->sem);
    return NULL;
}

int fam_start(rlc_client *c, const struct config *cfg, int proc, pthread_t *t)
{
    static struct fam_worker w[FAM_THREADS]; /* one set per worker process */
    int n = 0;
    for (int k = K_WRITE; k <= K_SEM; k++) {
        if (!cfg->run[k])
            continue;
        struct fam_worker *fw = &w[k - K_WRITE];
        *fw = (struct fam_worker){c, cfg, proc, k, FAM_BASE + proc * FAM_THREADS + (k - K_WRITE),
                                  NULL, NULL, NULL};
        if (pthread_create(&t[n], NULL, fam_thread, fw) == 0)
            n++;
    }
    return n;
}

/* ---- the checks over the sections --------------------------------------------- */

/* Which kinds may not overlap (different names never conflict). */
static const bool conflicts[K_NKINDS][K_NKINDS] = {
    [K_LOCK][K_LOCK] = true,  [K_WRITE][K_WRITE] = true, [K_WRITE][K_READ] = true,
    [K_READ][K_WRITE] = true, [K_FAIR][K_FAIR] = true,
};

/* Sections sorted by enter: for each valid one, the latest exit so far of
 * every conflicting kind (valid sections only) tells whether an earlier one
 * was still inside when it entered (checker.c's sweep, per kind). Counts
 * per kind of the later section into ov[]. */
static void exclusive_sweep(uint64_t seed, const struct sec *log, size_t n, uint64_t *ov)
{
    int64_t max_exit[K_NKINDS] = {0};
    int max_owner[K_NKINDS];
    for (int k = 0; k < K_NKINDS; k++)
        max_owner[k] = -1;
    for (size_t i = 0; i < n; i++) {
        const struct sec *s = &log[i];
        if (s->exit_ns < s->enter_ns || s->v_exit_ms <= 0 || s->kind == K_SEM)
            continue;
        for (int k = 0; k < K_NKINDS; k++) {
            if (!conflicts[s->kind][k] || s->enter_ns >= max_exit[k] || s->owner == max_owner[k])
                continue;
            uint64_t *c = &ov[s->kind == K_READ ? K_WRITE : s->kind];
            if (*c < 5)
                printf("VIOLATION seed=%" PRIu64 " kind=%s %s owner %d entered %.3f ms before "
                       "%s owner %d left; validity at exit %d ms\n",
                       seed, s->kind == K_LOCK ? "overlap" : s->kind == K_FAIR ? "fair_overlap" : "rw_overlap",
                       kind_names[s->kind], s->owner, (double)(max_exit[k] - s->enter_ns) / 1e6,
                       kind_names[k], max_owner[k], s->v_exit_ms);
            (*c)++;
        }
        if (s->exit_ns > max_exit[s->kind]) {
            max_exit[s->kind] = s->exit_ns;
            max_owner[s->kind] = s->owner;
        }
    }
}

struct edge {
    int64_t t;
    int d; /* +1 enter, -1 exit */
};

static int by_time(const void *a, const void *b)
{
    const struct edge *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->d - y->d; /* exits first at the same instant */
}

/* The most sections of a kind inside at once, and how often an entry made
 * them more than `limit` (printed as a violation; limit < 0: no limit).
 * For the semaphore: each section runs from its acquire's RLC_OK to its
 * release call, inside the time its permit was really out whatever the
 * release's outcome, so more than `permits` at once is a permit too many. */
static uint64_t concurrency(uint64_t seed, const struct sec *log, size_t n, int kind, int limit,
                            int *peak)
{
    *peak = 0;
    struct edge *e = malloc(2 * (n ? n : 1) * sizeof *e);
    size_t m = 0;
    for (size_t i = 0; e && i < n; i++)
        if (log[i].kind == kind && log[i].exit_ns >= log[i].enter_ns) {
            e[m++] = (struct edge){log[i].enter_ns, 1};
            e[m++] = (struct edge){log[i].exit_ns, -1};
        }
    if (!e)
        return 0;
    qsort(e, m, sizeof *e, by_time);
    uint64_t k = 0;
    int in = 0;
    for (size_t i = 0; i < m; i++) {
        in += e[i].d;
        if (in > *peak)
            *peak = in;
        if (e[i].d > 0 && limit >= 0 && in > limit) {
            if (k < 5)
                printf("VIOLATION seed=%" PRIu64 " kind=sem_excess %d semaphore holders at once "
                       "(permits %d), %.3f ms into the log\n",
                       seed, in, limit, (double)(e[i].t - e[0].t) / 1e6);
            k++;
        }
    }
    free(e);
    return k;
}

void fam_check_sections(const struct config *cfg, const struct sec *log, size_t n,
                        struct totals *tot)
{
    uint64_t ov[K_NKINDS] = {0};
    exclusive_sweep(cfg->seed, log, n, ov);
    tot->overlaps += ov[K_LOCK];
    tot->rw_overlaps += ov[K_WRITE];
    tot->fair_overlaps += ov[K_FAIR];
    for (size_t i = 0; i < n; i++)
        tot->kind_sections[log[i].kind]++;
    int peak;
    if (cfg->run[K_READ]) {
        concurrency(cfg->seed, log, n, K_READ, -1, &peak);
        printf("  seed=%" PRIu64 ": at most %d readers at once\n", cfg->seed, peak);
        tot->readers_peak = (uint64_t)peak > tot->readers_peak ? (uint64_t)peak : tot->readers_peak;
    }
    if (cfg->run[K_SEM]) {
        tot->sem_excess += concurrency(cfg->seed, log, n, K_SEM, cfg->permits, &peak);
        printf("  seed=%" PRIu64 ": semaphore permits=%d, at most %d holders at once\n",
               cfg->seed, cfg->permits, peak);
    }
    for (int k = 0; k < K_NKINDS; k++)
        tot->ran[k] += cfg->run[k];
}

/* ---- what the servers hold after quiescence -------------------------------------- */

static int owner_proc(int id)
{
    return id < FAM_BASE ? id / THREADS : (id - FAM_BASE) / FAM_THREADS;
}

void hash_leftovers(const struct redis_server *node, int node_i, const char *key,
                    const struct config *cfg, const bool *killed, uint64_t *explained,
                    uint64_t *left_behind, uint64_t *orphans)
{
    redisReply *r = rs_cmd(node, "HGETALL %s", key);
    long long pttl = rs_int(node, "PTTL %s", key);
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k + 1 < r->elements; k += 2) {
        const char *field = r->element[k]->str, *count = r->element[k + 1]->str;
        if (strcmp(field, "mode") == 0)
            continue; /* the rwlock's mode, not an owner */
        int id = -1;
        for (int o = 0; o < OWNERS; o++)
            if (sh->owner[o].field[0] && strcmp(sh->owner[o].field, field) == 0)
                id = o;
        const struct owner_state *o = id >= 0 ? &sh->owner[id] : NULL;
        const char *kind;
        if (o && (killed[owner_proc(id)] || atomic_load(&o->release_error))) {
            kind = "explained";
            (*explained)++;
        } else if (!o || atomic_load(&o->last_acquire_failed)) {
            kind = "left_behind";
            (*left_behind)++;
        } else {
            kind = "orphan";
            (*orphans)++;
        }
        printf("%s seed=%" PRIu64 " kind=%s key=%s node=%d field=%s count=%s pttl=%lld ms "
               "(nodes=%d pool=%d lease=%s acquired=%" PRIu64 " release_failed=%" PRIu64 ")\n",
               strcmp(kind, "explained") ? "VIOLATION" : "note", cfg->seed, kind, key, node_i,
               field, count, pttl, cfg->nodes, cfg->pool,
               id >= 0 ? (cfg->lease[id] ? "fixed" : "watchdog") : "?", o ? o->acquired : 0,
               o ? o->release_failed : 0);
    }
    if (r)
        freeReplyObject(r);
}

/* The free count must be back to the permits: above is a permit given back
 * twice (always a violation); below is a permit nobody gave back, explained
 * only by an owner whose process was killed or whose last release ended
 * with an I/O status (its resend may have been pending when its client was
 * freed): one permit per such owner. An earlier release without an answer
 * is no excuse: the library sends it again on the next connection, which
 * the owner's later calls show was there. */
static void permit_leftovers(const struct redis_server *node, const struct config *cfg,
                             const bool *killed, struct totals *tot)
{
    long long count = -1;
    redisReply *r = rs_cmd(node, "GET %s", SEM_NAME);
    if (r && r->type == REDIS_REPLY_STRING)
        count = strtoll(r->str, NULL, 10);
    if (r)
        freeReplyObject(r);
    long long excused = 0;
    uint64_t failed_acq = 0, failed_rel = 0;
    for (int p = 0; p < PROCS; p++) {
        const struct owner_state *o = &sh->owner[FAM_BASE + p * FAM_THREADS + (K_SEM - K_WRITE)];
        excused += killed[p] || atomic_load(&o->release_error);
        failed_acq += o->acquire_failed;
        failed_rel += o->release_failed;
    }
    if (count == cfg->permits)
        return;
    long long missing = cfg->permits - count;
    const char *kind = missing < 0 ? "permit_extra" : missing <= excused ? "explained" : "permit_lost";
    if (missing < 0)
        tot->permit_extra += (uint64_t)-missing;
    else if (missing <= excused)
        tot->permit_explained += (uint64_t)missing;
    else
        tot->permit_lost += (uint64_t)(missing - excused);
    printf("%s seed=%" PRIu64 " kind=%s key=%s count=%lld permits=%d (owners excused %lld; "
           "acquires / releases that failed with an I/O status: %" PRIu64 " / %" PRIu64 ")\n",
           strcmp(kind, "explained") ? "VIOLATION" : "note", cfg->seed, kind, SEM_NAME, count,
           cfg->permits, excused, failed_acq, failed_rel);
}

/* Waiters still queued: a waiter that gave up withdraws itself, a dead one
 * is pruned 2 x thread_wait after its last try. Reported, not checked. */
static void fair_queue_leftovers(const struct redis_server *node, const struct config *cfg,
                                 struct totals *tot)
{
    redisReply *r = rs_cmd(node, "LRANGE %s 0 -1", FAIR_QUEUE);
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        printf("note seed=%" PRIu64 " kind=fair_queue_left key=%s waiter=%s\n", cfg->seed,
               FAIR_QUEUE, r->element[k]->str);
        tot->fair_queue_left++;
    }
    if (r)
        freeReplyObject(r);
}

void fam_leftovers(const struct redis_server *nodes, const struct config *cfg, const bool *killed,
                   struct totals *tot)
{
    if (cfg->run[K_WRITE] || cfg->run[K_READ])
        for (int i = 0; i < cfg->nodes; i++)
            hash_leftovers(&nodes[i], i, RW_NAME, cfg, killed, &tot->fam_explained,
                           &tot->fam_left_behind, &tot->fam_orphans);
    if (cfg->run[K_FAIR]) {
        hash_leftovers(&nodes[0], 0, FAIR_NAME, cfg, killed, &tot->fam_explained,
                       &tot->fam_left_behind, &tot->fam_orphans);
        fair_queue_leftovers(&nodes[0], cfg, tot);
    }
    if (cfg->run[K_SEM])
        permit_leftovers(&nodes[0], cfg, killed, tot);
}

void fam_figures(const struct totals *tot)
{
    printf(" kinds_run=write:%" PRIu64 ",read:%" PRIu64 ",fair:%" PRIu64 ",sem:%" PRIu64,
           tot->ran[K_WRITE], tot->ran[K_READ], tot->ran[K_FAIR], tot->ran[K_SEM]);
    for (int k = K_WRITE; k < K_NKINDS; k++)
        printf(" %s_acquisitions=%" PRIu64 " %s_sections=%" PRIu64, kind_names[k],
               tot->kind_acquired[k], kind_names[k], tot->kind_sections[k]);
    printf(" readers_peak=%" PRIu64 " rw_overlaps=%" PRIu64 " fair_overlaps=%" PRIu64 " sem_excess=%" PRIu64
           " fam_left_behind=%" PRIu64 " fam_orphans=%" PRIu64 " fam_explained=%" PRIu64
           " permit_lost=%" PRIu64 " permit_extra=%" PRIu64 " permit_explained=%" PRIu64
           " fair_queue_left=%" PRIu64,
           tot->readers_peak, tot->rw_overlaps, tot->fair_overlaps, tot->sem_excess,
           tot->fam_left_behind,
           tot->fam_orphans, tot->fam_explained, tot->permit_lost, tot->permit_extra,
           tot->permit_explained, tot->fair_queue_left);
}
