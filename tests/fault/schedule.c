/*
 * schedule.c - fault_schedule: a randomized, seeded fault schedule on real
 * TCP against real redis-servers, and a checker of what must hold.
 *
 *   fault_schedule [short|long] [SEED]      (or RLC_SCHEDULE_SEED=SEED)
 *   fault_schedule one SEED                 replay a single schedule
 *
 * The seed is printed first; schedule i of a run uses seed+i, printed with
 * it, so any schedule replays alone with `one`. Each schedule draws:
 * 1 or 3 nodes, pool_size 1 or 4, per thread a fixed lease (1-3 s) or the
 * watchdog (1500 ms), nesting depth 1-3 per hold. The orchestrator (this
 * process, inside a network namespace it made, with no thread of its own)
 * starts the nodes, a stall/cut proxy in front of each (clients connect to
 * the proxies), forks P processes of T threads (explicit owners, one per
 * thread, clients made after the fork), and while they loop
 * acquire (nested) -> critical section -> release, it injects faults at
 * random: stall one connection / all of a node (bytes delivered late),
 * cut one connection (RST), nftables drop of one client port (TCP
 * retransmits late) or reset of it, SCRIPT FLUSH on a node.
 *
 * Then it heals everything, stops the workers, waits for quiescence (every
 * proxied connection closed, late bytes delivered) and checks:
 *   (a) overlaps: two critical sections of different owners that overlap in
 *       time while each holder's rlc_lock_validity_ms at its exit was > 0
 *       (the same sweep as checker.c: sorted by enter, against the latest
 *       exit so far) - must be 0;
 *   (b) left behind: a lock field remaining on a node whose owner released
 *       every level it was told it held, and whose last acquire attempt
 *       reported failure (the failed acquire, after its undo, left a lock) -
 *       must be 0;
 *   (c) orphans: a remaining field of an owner whose last release returned
 *       RLC_OK and whose last acquire succeeded (a level no release will
 *       remove) - must be 0.
 * Fields of an owner whose process had to be killed, or whose release kept
 * failing with an I/O status, are "explained" (they expire with their lease)
 * and reported apart.
 *
 * The lock family (sched_family.c) runs beside the rlc_lock owners, in the
 * same processes and clients, under the same faults; each process adds one
 * owner per kind the schedule runs: a writer and a reader of one rwlock
 * (RW_NAME), a fair-lock owner (one node only), a semaphore owner (one node
 * only; the orchestrator sets its permits, 1 or 2, before the workers
 * start). Which kinds run is drawn from the seed: seed % 3 == 1 runs on one
 * node with fair and semaphore owners, seed % 3 == 2 runs the rwlock, and
 * seed % 3 == 0 draws each kind; the others of each schedule are drawn too.
 * So any 3 consecutive seeds (every short run) run every kind. Checks:
 *   (d) rw_overlaps: a writer's section overlapping another writer's or a
 *       reader's, both valid at exit (rlc_rwlock_validity_ms(l, write) > 0);
 *       readers' sections may overlap each other (their peak is reported);
 *   (e) fair_overlaps: two fair holders' sections overlapping, both valid
 *       at exit (rlc_fairlock_validity_ms > 0) - as (a);
 *   (f) sem_excess: more than `permits` semaphore sections inside at once.
 *       The semaphore has no validity; a section runs from its acquire's
 *       RLC_OK to the call of its release, which lies inside the time its
 *       permit was really out (taken before the grant was heard, given back
 *       no earlier than the release is sent), whatever the release returns.
 *       So every section counts, also those whose release failed: more at
 *       once than the permits means a permit was handed out twice;
 *   (g) family leftovers after quiescence, classified as in (b)(c)
 *       (fam_left_behind, fam_orphans): an owner field of the rwlock's hash
 *       (the "mode" field aside) or the fair lock's hash;
 *   (h) permits: the semaphore's count back to `permits`. Above is
 *       permit_extra (a permit given back twice); below is permit_lost,
 *       less one permit per owner whose process was killed or whose last
 *       release ended with an I/O status (reported as explained).
 * Waiters left in the fair queue are reported (fair_queue_left), not
 * checked. Exit status 1 if any of (a)-(h) > 0.
 *
 * Everything is bounded: each schedule's load phase, every wait (polled
 * conditions with deadlines), the whole run (short: 170 s, long: 60 min).
 */
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "netfault.h"
#include "sched_family.h"

enum { F_STALL1, F_STALLALL, F_CUT, F_DROP, F_RESET, F_FLUSH, F_NKINDS };
static const char *fault_names[F_NKINDS] = {"stall_conn", "stall_node", "cut_conn",
                                            "nft_drop",   "nft_reset",  "script_flush"};

struct shared *sh;
static char ns[40];

/* ---- workers ---------------------------------------------------------------- */

struct wthread {
    rlc_client *c;
    const struct config *cfg;
    int proc, thread;
};

static void *worker_thread(void *p)
{
    struct wthread *w = p;
    int id = w->proc * THREADS + w->thread;
    struct owner_state *o = &sh->owner[id];
    uint64_t rs = splitmix(w->cfg->seed * 1000003 + (uint64_t)id);
    rlc_lock *l = NULL;
    if (rlc_lock_new(w->c, LOCK_NAME, (uint64_t)id + 1, &l) != RLC_OK)
        return NULL;
    snprintf(o->field, sizeof o->field, "%s:%d", rlc_client_uuid(w->c), id + 1);
    int64_t lease = w->cfg->lease[id];
    while (!atomic_load(&sh->stop)) {
        int depth = (int)rnd_in(&rs, 1, 3);
        int rc = rlc_lock_acquire(l, 300, lease);
        if (rc != RLC_OK) {
            atomic_store(&o->last_acquire_failed, rc != RLC_NOT_ACQUIRED);
            o->acquire_failed += rc != RLC_NOT_ACQUIRED;
            continue;
        }
        atomic_store(&o->last_acquire_failed, 0);
        o->acquired++;
        int levels = 1;
        for (int k = 1; k < depth; k++) {
            rc = rlc_lock_acquire(l, 0, lease);
            if (rc == RLC_OK) {
                levels++;
                o->nested++;
            } else {
                atomic_store(&o->last_acquire_failed, 1);
                o->acquire_failed++;
            }
        }
        atomic_store(&o->levels, levels);
        struct sec s = {.owner = (int16_t)id, .kind = K_LOCK};
        s.enter_ns = now_ns();
        int64_t v = 0;
        section_pause(&rs);
        rlc_lock_validity_ms(l, &v);
        s.exit_ns = now_ns();
        s.v_exit_ms = (int32_t)v;
        log_section(&s);
        for (; levels > 0; levels--) {
            rc = RLC_E_TIMEOUT;
            for (int k = 0; k < 3 && (rc == RLC_E_TIMEOUT || rc == RLC_E_CONNECT ||
                                      rc == RLC_E_NO_QUORUM); k++)
                rc = rlc_lock_release(l);
            if (rc == RLC_E_LOST || rc == RLC_E_NOT_OWNER) {
                o->lost++;
                break;
            }
            if (rc != RLC_OK) {
                o->release_failed++;
                atomic_store(&o->release_error, 1);
                break;
            }
            atomic_store(&o->release_error, 0);
        }
        atomic_store(&o->levels, 0);
    }
    rlc_lock_free(l);
    return NULL;
}

static void worker_process(const struct config *cfg, int proc)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    rlc_client *c = NULL;
    if (rlc_client_new(&c, cfg->uris, cfg->options) != RLC_OK) {
        fprintf(stderr, "worker %d: rlc_client_new: %s\n", proc, rlc_errmsg());
        _exit(1);
    }
    pthread_t t[THREADS + FAM_THREADS];
    struct wthread w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct wthread){c, cfg, proc, i};
        pthread_create(&t[i], NULL, worker_thread, &w[i]);
    }
    int n = THREADS + fam_start(c, cfg, proc, t + THREADS);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    rlc_client_free(c);
    _exit(0);
}

/* ---- faults ------------------------------------------------------------------- */

struct heal {
    int64_t at_ns;
    int kind, node, conn, port;
};

struct sched {
    struct config cfg;
    struct redis_server node[MAXN];
    struct nf_proxy proxy[MAXN];
    pid_t pid[PROCS];
    bool killed[PROCS];
    struct heal heal[64];
    int nheal;
    uint64_t faults[F_NKINDS];
};

/* A random open connection of the node's proxy: its number and client port. */
static int pick_conn(struct nf_proxy *p, uint64_t *rs, int *port)
{
    char reply[8192];
    if (proxy_cmd(p, reply, sizeof reply, "list") != 0)
        return -1;
    int ids[256], ports[256], n = 0;
    char *save;
    for (char *tok = strtok_r(reply + 2, " ", &save); tok && n < 256;
         tok = strtok_r(NULL, " ", &save)) {
        int id, pt;
        char st[16];
        long h;
        if (sscanf(tok, "%d:%d:%15[a-z]:%ld", &id, &pt, st, &h) == 4 && strcmp(st, "open") == 0) {
            ids[n] = id;
            ports[n++] = pt;
        }
    }
    if (n == 0)
        return -1;
    int k = (int)(rnd(rs) % (uint64_t)n);
    *port = ports[k];
    return ids[k];
}

static void do_heal(struct sched *s, const struct heal *h)
{
    switch (h->kind) {
    case F_STALL1: proxy_release(&s->proxy[h->node], h->conn); break;
    case F_STALLALL: proxy_release(&s->proxy[h->node], -1); break;
    case F_DROP:
    case F_RESET: nft_accept_port(ns, h->port); break;
    default: break;
    }
}

static void inject(struct sched *s, uint64_t *rs)
{
    int kind = (int)(rnd(rs) % F_NKINDS);
    int node = (int)(rnd(rs) % (uint64_t)s->cfg.nodes);
    struct nf_proxy *p = &s->proxy[node];
    int64_t hold_ms = rnd_in(rs, 100, 1500);
    struct heal h = {now_ns() + hold_ms * 1000000, kind, node, -1, 0};
    if (s->nheal >= 64)
        return;
    switch (kind) {
    case F_STALL1:
    case F_CUT:
    case F_DROP:
    case F_RESET:
        h.conn = pick_conn(p, rs, &h.port);
        if (h.conn < 0)
            return;
        if (kind == F_STALL1 && proxy_stall(p, h.conn) != 0)
            return;
        if (kind == F_CUT) {
            if (proxy_cut(p, h.conn) == 0)
                s->faults[kind]++;
            return;
        }
        if (kind == F_DROP && nft_drop_port(ns, h.port) != 0)
            return;
        if (kind == F_RESET) {
            if (nft_reset_port(ns, h.port) != 0)
                return;
            h.at_ns = now_ns() + 100 * 1000000LL;
        }
        break;
    case F_STALLALL:
        if (proxy_stall(p, -1) != 0)
            return;
        break;
    case F_FLUSH: {
        redisReply *r = rs_cmd(&s->node[node], "SCRIPT FLUSH");
        if (r)
            freeReplyObject(r);
        s->faults[kind]++;
        return;
    }
    }
    s->faults[kind]++;
    s->heal[s->nheal++] = h;
}

static void heal_due(struct sched *s, bool all)
{
    int64_t t = now_ns();
    for (int i = 0; i < s->nheal;) {
        if (all || s->heal[i].at_ns <= t) {
            do_heal(s, &s->heal[i]);
            s->heal[i] = s->heal[--s->nheal];
        } else {
            i++;
        }
    }
}

/* ---- the checks ------------------------------------------------------------------ */


static int by_enter(const void *a, const void *b)
{
    const struct sec *x = a, *y = b;
    return x->enter_ns < y->enter_ns ? -1 : x->enter_ns > y->enter_ns;
}

/* Sorts the log by enter time and runs every kind's checks over it
 * (sched_family.c: the rlc_lock's sweep is one of them). */
static void check_sections(const struct config *cfg, struct totals *tot)
{
    size_t n = atomic_load(&sh->nsec);
    if (n > LOG_CAP)
        n = LOG_CAP;
    qsort(sh->log, n, sizeof sh->log[0], by_enter);
    fam_check_sections(cfg, sh->log, n, tot);
}

/* Remaining fields on every node, classified by their owner's last outcome;
 * then what the family left. */
static void leftovers(struct sched *s, struct totals *tot)
{
    for (int i = 0; i < s->cfg.nodes; i++)
        hash_leftovers(&s->node[i], i, LOCK_NAME, &s->cfg, s->killed, &tot->explained,
                       &tot->left_behind, &tot->orphans);
    fam_leftovers(s->node, &s->cfg, s->killed, tot);
}

/* ---- one schedule ------------------------------------------------------------------ */

static int run_schedule(uint64_t seed, int64_t load_ms, struct totals *tot)
{
    struct sched *s = calloc(1, sizeof *s);
    uint64_t rs = splitmix(seed);
    int rc = -1, started = 0, proxies = 0, forked = 0;
    s->cfg.seed = seed;
    s->cfg.nodes = rnd(&rs) % 2 ? 3 : 1;
    if (seed % 3 == 1)
        s->cfg.nodes = 1; /* fair and semaphore owners run on one node only */
    s->cfg.pool = rnd(&rs) % 2 ? 4 : 1;
    for (int i = 0; i < PROCS * THREADS; i++)
        s->cfg.lease[i] = rnd(&rs) % 2 ? 0 : rnd_in(&rs, 1000, 3000);
    fam_plan(&s->cfg);
    snprintf(s->cfg.options, sizeof s->cfg.options,
             "watchdog_timeout_ms=1500;io_timeout_ms=%d;connect_timeout_ms=300;pool_size=%d;"
             "fencing=1",
             s->cfg.nodes == 1 ? 300 : 500, s->cfg.pool);
    memset(sh, 0, sizeof *sh);
    for (; started < s->cfg.nodes; started++)
        if (rs_start(&s->node[started], NULL) != 0)
            goto out;
    size_t len = 0;
    for (; proxies < s->cfg.nodes; proxies++) {
        if (proxy_start(&s->proxy[proxies], s->node[proxies].port, load_ms + 120000) != 0)
            goto out;
        len += (size_t)snprintf(s->cfg.uris + len, sizeof s->cfg.uris - len, "%sredis://127.0.0.1:%d",
                                proxies ? "," : "", s->proxy[proxies].port);
    }
    printf("schedule seed=%" PRIu64 ": nodes=%d pool_size=%d leases=", seed, s->cfg.nodes,
           s->cfg.pool);
    for (int i = 0; i < PROCS * THREADS; i++)
        printf("%s%s", i ? "," : "", s->cfg.lease[i] ? "fixed" : "wd");
    printf(" family=");
    for (int k = K_WRITE, sep = 0; k < K_NKINDS; k++)
        if (s->cfg.run[k])
            printf("%s%s", sep++ ? "," : "", kind_names[k]);
    if (s->cfg.run[K_SEM])
        printf(" permits=%d", s->cfg.permits);
    printf("\n");
    fflush(stdout);
    if (fam_setup(&s->node[0], &s->cfg) != 0)
        goto out;
    for (; forked < PROCS; forked++) {
        pid_t pid = fork();
        if (pid < 0)
            goto out;
        if (pid == 0)
            worker_process(&s->cfg, forked);
        s->pid[forked] = pid;
    }
    int64_t end = now_ns() + load_ms * 1000000;
    while (now_ns() < end) {
        heal_due(s, false);
        inject(s, &rs);
        sleep_ms(rnd_in(&rs, 50, 400));
    }
    heal_due(s, true);
    nft_accept(ns);
    for (int i = 0; i < s->cfg.nodes; i++)
        proxy_release(&s->proxy[i], -1);
    atomic_store(&sh->stop, 1);
    /* Workers end within a few io timeouts; bounded 20 s, then SIGKILL. */
    int64_t until = now_ns() + 20000000000LL;
    for (int i = 0; i < forked; i++) {
        int st;
        while (waitpid(s->pid[i], &st, WNOHANG) == 0 && now_ns() < until)
            sleep_ms(10);
        if (waitpid(s->pid[i], &st, WNOHANG) == 0) {
            kill(s->pid[i], SIGKILL);
            waitpid(s->pid[i], &st, 0);
            s->killed[i] = true;
            printf("note seed=%" PRIu64 ": worker %d killed after 20 s\n", seed, i);
        }
        s->pid[i] = 0;
    }
    /* Quiescence: every proxied connection closed (late bytes delivered and
     * run), bounded 10 s. */
    until = now_ns() + 10000000000LL;
    for (int i = 0; i < s->cfg.nodes; i++)
        while (proxy_open(&s->proxy[i]) > 0 && now_ns() < until)
            sleep_ms(10);
    for (int i = 0; i < s->cfg.nodes; i++)
        if (proxy_open(&s->proxy[i]) > 0)
            printf("note seed=%" PRIu64 ": node %d still has %d proxied connections\n", seed, i,
                   proxy_open(&s->proxy[i]));

    struct totals before = *tot;
    check_sections(&s->cfg, tot);
    leftovers(s, tot);
    uint64_t acq = 0, kacq[K_NKINDS] = {0};
    for (int i = 0; i < OWNERS; i++) {
        struct owner_state *o = &sh->owner[i];
        int kind = i < FAM_BASE ? K_LOCK : K_WRITE + (i - FAM_BASE) % FAM_THREADS;
        kacq[kind] += o->acquired;
        tot->kind_acquired[kind] += o->acquired;
        if (kind == K_LOCK) {
            acq += o->acquired;
            tot->acquired += o->acquired;
        }
        tot->nested += o->nested;
        tot->acquire_failed += o->acquire_failed;
        tot->release_failed += o->release_failed;
        tot->lost += o->lost;
    }
    tot->sections += atomic_load(&sh->nsec);
    for (int k = 0; k < F_NKINDS; k++)
        tot->faults[k] += s->faults[k];
    tot->schedules++;
    printf("  seed=%" PRIu64 ": %" PRIu64 " acquisitions, faults", seed, acq);
    for (int k = 0; k < F_NKINDS; k++)
        printf(" %s=%" PRIu64, fault_names[k], s->faults[k]);
    printf(", overlaps=%" PRIu64, tot->overlaps - before.overlaps);
    for (int k = K_WRITE; k < K_NKINDS; k++)
        if (s->cfg.run[k])
            printf(", %s=%" PRIu64, kind_names[k], kacq[k]);
    printf(" (rw_overlaps=%" PRIu64 " fair_overlaps=%" PRIu64 " sem_excess=%" PRIu64 ")\n",
           tot->rw_overlaps - before.rw_overlaps, tot->fair_overlaps - before.fair_overlaps,
           tot->sem_excess - before.sem_excess);
    rc = 0;
out:
    if (rc != 0)
        printf("schedule seed=%" PRIu64 ": setup failed\n", seed);
    atomic_store(&sh->stop, 1);
    for (int i = 0; i < forked; i++)
        if (s->pid[i] > 0) {
            kill(s->pid[i], SIGKILL);
            waitpid(s->pid[i], NULL, 0);
        }
    for (int i = 0; i < proxies; i++)
        proxy_stop(&s->proxy[i]);
    for (int i = 0; i < started; i++)
        rs_stop(&s->node[i]);
    fflush(stdout);
    free(s);
    return rc;
}

int main(int argc, char **argv)
{
    const char *profile = argc > 1 ? argv[1] : "short";
    bool one = strcmp(profile, "one") == 0, lng = strcmp(profile, "long") == 0;
    if (!one && !lng && strcmp(profile, "short") != 0) {
        fprintf(stderr, "usage: %s [short|long] [SEED] | one SEED\n", argv[0]);
        return 2;
    }
    uint64_t seed;
    const char *env = getenv("RLC_SCHEDULE_SEED");
    if (argc > 2)
        seed = strtoull(argv[2], NULL, 10);
    else if (env && *env)
        seed = strtoull(env, NULL, 10);
    else
        seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
    int nsched = one ? 1 : lng ? 120 : 6;
    int64_t load_ms = lng ? 25000 : 12000;
    int64_t bound_ns = (lng ? 3600LL : 170LL) * 1000000000LL;
    printf("fault_schedule %s seed=%" PRIu64 " (replay: RLC_SCHEDULE_SEED=%" PRIu64
           " or `fault_schedule one <schedule seed>`)\n",
           profile, seed, seed);
    fflush(stdout);

    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 2;
    if (netns_create(ns, sizeof ns) != 0 || netns_enter(ns, NULL) != 0) {
        fprintf(stderr, "fault_schedule: no network namespace (root and iproute2 + nftables needed)\n");
        return 2;
    }
    struct totals tot = {0};
    int64_t t0 = now_ns();
    for (int i = 0; i < nsched; i++) {
        if (now_ns() - t0 + (load_ms + 8000) * 1000000LL > bound_ns) {
            printf("time bound reached after %d schedules\n", i);
            break;
        }
        if (run_schedule(seed + (uint64_t)i, load_ms, &tot) != 0)
            break;
    }
    netns_destroy(ns);

    printf("FIGURES schedules=%" PRIu64 " acquisitions=%" PRIu64 " nested=%" PRIu64
           " sections=%" PRIu64 " acquire_failed=%" PRIu64 " release_failed=%" PRIu64
           " lost=%" PRIu64,
           tot.schedules, tot.acquired, tot.nested, tot.sections, tot.acquire_failed,
           tot.release_failed, tot.lost);
    for (int k = 0; k < F_NKINDS; k++)
        printf(" %s=%" PRIu64, fault_names[k], tot.faults[k]);
    printf(" overlaps=%" PRIu64 " left_behind=%" PRIu64 " orphans=%" PRIu64 " explained=%" PRIu64
           " wall_s=%.0f",
           tot.overlaps, tot.left_behind, tot.orphans, tot.explained, (double)(now_ns() - t0) / 1e9);
    fam_figures(&tot);
    printf("\n");
    if (tot.schedules == 0)
        return 2;
    return tot.overlaps || tot.left_behind || tot.orphans || tot.rw_overlaps ||
                   tot.fair_overlaps || tot.sem_excess || tot.fam_left_behind || tot.fam_orphans ||
                   tot.permit_lost || tot.permit_extra
               ? 1
               : 0;
}
