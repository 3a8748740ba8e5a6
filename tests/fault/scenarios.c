/*
 * scenarios.c - the fault steps of each scenario, run by the orchestrator
 * while the workers keep contending for the lock.
 *
 * Every step is bounded: load runs for a set time (that is the experiment,
 * not a synchronisation), and every "until" (a section after a restart, the
 * victim holding) is a polled condition with a deadline. A node that loses
 * its data (SIGKILL, no persistence) comes back only after one lease, the
 * delayed restart Redlock prescribes: locks it granted have expired
 * everywhere by then, so its empty keyspace cannot grant a second holder.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "fault.h"

#define GRACE_MS 500 /* replies sent before a fault may still be read after it */

static int fail(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct run *r, const char *fmt, ...)
{
    if (!r->failure[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->failure, sizeof r->failure, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Reaps children that ended; one ending while load runs is a failure. */
static int reap(struct run *r)
{
    for (int i = 0; i < r->npids; i++) {
        int status;
        if (r->exited[i] || waitpid(r->pid[i], &status, WNOHANG) != r->pid[i])
            continue;
        r->exited[i] = true;
        r->exit_status[i] = status;
        if (atomic_load(&r->sh->phase) == PHASE_RUN && i < r->procs)
            return fail(r, "worker %d ended while load ran (status 0x%x)", i, status);
    }
    return 0;
}

static int check_time(struct run *r)
{
    if (now_ns() > r->deadline_ns)
        return fail(r, "the scenario ran past its time bound");
    return reap(r);
}

int run_load(struct run *r, int64_t ms)
{
    int64_t until = now_ns() + ms * 1000000LL;
    while (now_ns() < until) {
        if (check_time(r) != 0)
            return -1;
        sleep_ms(20);
    }
    return 0;
}

/* Polls cond(r, arg) every 2 ms for at most timeout_ms. */
static int await(struct run *r, bool (*cond)(struct run *, int64_t), int64_t arg,
                 int64_t timeout_ms, const char *what)
{
    int64_t until = now_ns() + timeout_ms * 1000000LL;
    for (int i = 0; !cond(r, arg); i++) {
        if (now_ns() > until)
            return fail(r, "%s: not within %lld ms", what, (long long)timeout_ms);
        if (i % 10 == 0 && check_time(r) != 0)
            return -1;
        sleep_ms(2);
    }
    return 0;
}

static bool completed_at_least(struct run *r, int64_t k)
{
    return atomic_load(&r->sh->completed) >= (uint64_t)k;
}

int await_sections(struct run *r, uint64_t k, int64_t timeout_ms)
{
    int64_t target = (int64_t)(atomic_load(&r->sh->completed) + k);
    return await(r, completed_at_least, target, timeout_ms, "sections to complete");
}

static bool entered_after(struct run *r, int64_t t)
{
    return atomic_load(&r->sh->last_enter_ns) > t;
}

/* What each reachable node holds for the lock: when no holder comes, the
 * fields and leases say who blocks whom. */
static void dump_lock_state(struct run *r)
{
    for (int i = 0; i < r->n_nodes; i++) {
        if (r->node[i].pid <= 0 || r->paused[i]) {
            fprintf(stderr, "    node %d: %s\n", i + 1, r->paused[i] ? "paused" : "down");
            continue;
        }
        redisReply *h = rs_cmd(&r->node[i], "HGETALL %s", FAULT_LOCK);
        fprintf(stderr, "    node %d: pttl %lld, fields:", i + 1,
                rs_int(&r->node[i], "PTTL %s", FAULT_LOCK));
        for (size_t k = 0; h && h->type == REDIS_REPLY_ARRAY && k + 1 < h->elements; k += 2)
            fprintf(stderr, " %s=%s", h->element[k]->str, h->element[k + 1]->str);
        fprintf(stderr, "\n");
        if (h)
            freeReplyObject(h);
    }
}

int await_enter_after(struct run *r, int64_t t, int64_t timeout_ms)
{
    int rc = await(r, entered_after, t, timeout_ms, "a holder after the fault");
    if (rc != 0) {
        fprintf(stderr, "  no holder since %.2f s; the lock on each node:\n",
                (double)(t - r->t0_ns) / 1e9);
        dump_lock_state(r);
    }
    return rc;
}

static int64_t last_event_ns(const struct run *r)
{
    return r->sh->events[r->sh->nevents - 1].t_ns;
}

/* ---- one node: restart --------------------------------------------------------- */

static int single_restart(struct run *r)
{
    for (int c = 0; c < r->cycles; c++) {
        if (run_load(r, r->load_ms) != 0)
            return -1;
        rs_kill(&r->node[0]);
        event_add(r, EV_OUTAGE, "kill the node (SIGKILL)");
        if (run_load(r, r->lease_ms + 500) != 0)
            return -1;
        /* The event first: a worker may get in as soon as the port is bound. */
        event_add(r, EV_HEAL, "restart the node (empty)");
        if (rs_restart(&r->node[0]) != 0)
            return fail(r, "the node did not restart");
        if (await_enter_after(r, last_event_ns(r), 15000) != 0)
            return -1;
    }
    return run_load(r, r->load_ms);
}

/* ---- Redlock over 5 ---------------------------------------------------------------- */

static int redlock_kill(struct run *r)
{
    for (int c = 0; c < r->cycles; c++) {
        int a = (2 * c) % 5, b = (2 * c + 1) % 5;
        if (run_load(r, r->load_ms) != 0)
            return -1;
        rs_kill(&r->node[a]);
        event_add(r, EV_FAULT, "kill node %d of 5 (4 left)", a + 1);
        if (await_enter_after(r, last_event_ns(r), 10000) != 0 || run_load(r, r->load_ms) != 0)
            return -1;
        rs_kill(&r->node[b]);
        event_add(r, EV_FAULT, "kill node %d of 5 (3 left)", b + 1);
        if (await_enter_after(r, last_event_ns(r), 10000) != 0 || run_load(r, r->load_ms) != 0)
            return -1;
        /* Two empty nodes and three holding: a quorum still needs one of the
         * three, so they may come back at once. */
        event_add(r, EV_HEAL, "restart nodes %d and %d (empty)", a + 1, b + 1);
        if (rs_restart(&r->node[a]) != 0 || rs_restart(&r->node[b]) != 0)
            return fail(r, "nodes did not restart");
        if (await_enter_after(r, last_event_ns(r), 10000) != 0)
            return -1;
    }
    return run_load(r, r->load_ms);
}

static int redlock_no_quorum(struct run *r)
{
    for (int c = 0; c < r->cycles; c++) {
        int first = c % 5;
        if (run_load(r, r->load_ms) != 0)
            return -1;
        for (int k = 0; k < 3; k++)
            rs_kill(&r->node[(first + k) % 5]);
        event_add(r, EV_OUTAGE, "kill nodes %d,%d,%d of 5 (2 left: no quorum)", first + 1,
                  (first + 1) % 5 + 1, (first + 2) % 5 + 1);
        if (run_load(r, r->lease_ms + 500) != 0)
            return -1;
        event_add(r, EV_HEAL, "restart the 3 nodes (empty, after one lease)");
        for (int k = 0; k < 3; k++)
            if (rs_restart(&r->node[(first + k) % 5]) != 0)
                return fail(r, "node %d did not restart", (first + k) % 5 + 1);
        if (await_enter_after(r, last_event_ns(r), 15000) != 0)
            return -1;
    }
    return run_load(r, r->load_ms);
}

/* Pauses `count` nodes (from node first+1) per cycle; returns 0 or -1. */
static int pause_nodes(struct run *r, int c, int count)
{
    int first = c % 5;
    if (run_load(r, r->load_ms) != 0)
        return -1;
    for (int k = 0; k < count; k++) {
        rs_pause(&r->node[(first + k) % 5]);
        r->paused[(first + k) % 5] = true;
    }
    event_add(r, EV_FAULT, "SIGSTOP %d node(s) from node %d", count, first + 1);
    if (await_enter_after(r, last_event_ns(r), 10000) != 0 || run_load(r, r->load_ms) != 0)
        return -1;
    event_add(r, EV_HEAL, "SIGCONT the paused node(s)");
    for (int k = 0; k < count; k++) {
        rs_resume(&r->node[(first + k) % 5]);
        r->paused[(first + k) % 5] = false;
    }
    return await_enter_after(r, last_event_ns(r), 10000);
}

static int redlock_pause(struct run *r)
{
    for (int c = 0; c < r->cycles; c++)
        if (pause_nodes(r, c, 1) != 0)
            return -1;
    return run_load(r, r->load_ms);
}

/* Two silent nodes leave exactly a quorum: every attempt needs all three
 * others, and waits node_timeout_ms for the silent two before it knows. */
static int redlock_pause_two(struct run *r)
{
    for (int c = 0; c < r->cycles; c++)
        if (pause_nodes(r, c, 2) != 0)
            return -1;
    return run_load(r, r->load_ms);
}

/* ---- one node: connections killed by the server ---------------------------------- */

static int client_kill(struct run *r)
{
    int64_t loop_ms = r->long_profile ? 30000 : 6000;
    for (int c = 0; c < r->cycles; c++) {
        if (run_load(r, r->load_ms) != 0)
            return -1;
        event_add(r, EV_FAULT, "CLIENT KILL TYPE normal every 100 ms for %lld ms",
                  (long long)loop_ms);
        int64_t until = now_ns() + loop_ms * 1000000LL;
        for (int round = 0; now_ns() < until; round++) {
            /* Every fourth round also the subscribers, so waiters resubscribe. */
            long long k = rs_int(&r->node[0], "CLIENT KILL TYPE %s",
                                 round % 4 == 3 ? "pubsub" : "normal");
            r->kills += k > 0 ? k : 0;
            if (run_load(r, 100) != 0)
                return -1;
        }
        event_add(r, EV_HEAL, "stop killing (%lld connections killed so far)", r->kills);
        if (await_enter_after(r, last_event_ns(r), 10000) != 0)
            return -1;
    }
    return run_load(r, r->load_ms);
}

static void verify_client_kill(struct run *r, const struct section *log, size_t n,
                               const struct figures *f)
{
    (void)f;
    size_t during = 0;
    for (int i = 0; i + 1 < r->sh->nevents; i++) {
        const struct event *e = &r->sh->events[i];
        if (e->kind != EV_FAULT)
            continue;
        for (size_t j = 0; j < n; j++)
            during += log[j].enter_ns > e->t_ns && log[j].enter_ns < r->sh->events[i + 1].t_ns;
    }
    fprintf(stderr, "  %-22s %lld connections killed, %zu sections while killing\n",
            "client kill", r->kills, during);
    EXPECT(r->kills > 0, "expected the server to kill connections, seen %lld", r->kills);
    EXPECT(during > 0, "expected work to go on between kills, seen %zu sections", during);
}

static void verify_no_quorum(struct run *r, const struct section *log, size_t n,
                             const struct figures *f)
{
    (void)r;
    (void)log;
    (void)n;
    uint64_t nq = f->acquire[status_index(RLC_E_NO_QUORUM)];
    EXPECT(nq > 0, "expected acquires to fail with RLC_E_NO_QUORUM while 3 of 5 were down, "
                   "seen %llu", (unsigned long long)nq);
}

/* ---- one node: the holder frozen past its lease ---------------------------------- */

static bool victim_in(struct run *r, int64_t state)
{
    int s = atomic_load(&r->sh->victim.state);
    return s == state || s == ROLE_FAILED;
}

static bool witness_in(struct run *r, int64_t state)
{
    int s = atomic_load(&r->sh->witness.state);
    return s == state || s == ROLE_FAILED;
}

static bool victim_field_gone(struct run *r, int64_t unused)
{
    (void)unused;
    return rs_int(&r->node[0], "HEXISTS %s %s", FAULT_LOCK, r->sh->victim.field) == 0;
}

static bool workers_exited(struct run *r, int64_t unused)
{
    (void)unused;
    reap(r);
    for (int i = 0; i < r->procs; i++)
        if (!r->exited[i])
            return false;
    return true;
}

static int holder_pause(struct run *r)
{
    struct victim_report *v = &r->sh->victim;
    struct witness_report *w = &r->sh->witness;
    pid_t victim = r->pid[r->procs];
    if (run_load(r, r->load_ms) != 0)
        return -1;
    atomic_store(&v->go_on, 1);
    if (await(r, victim_in, ROLE_HOLDING, 15000, "the victim to hold the lock") != 0)
        return -1;
    if (atomic_load(&v->state) != ROLE_HOLDING)
        return fail(r, "the victim could not take the lock");
    kill(victim, SIGSTOP);
    v->pause_ns = now_ns();
    event_add(r, EV_FAULT, "SIGSTOP the holder (token %llu) between its read and its write",
              (unsigned long long)v->token);
    if (await(r, victim_field_gone, 0, r->lease_ms + 5000, "the frozen holder's lease to end") != 0)
        return -1;
    event_add(r, EV_NOTE, "the frozen holder's lease ended on the server");
    if (await_enter_after(r, last_event_ns(r), 10000) != 0 || await_sections(r, 20, 15000) != 0)
        return -1;

    /* Quiet the others, and let the witness hold the lock while the victim
     * wakes up and releases. */
    atomic_store(&r->sh->phase, PHASE_STOP);
    if (await(r, workers_exited, 0, 20000, "workers to stop") != 0)
        return -1;
    atomic_store(&w->go, 1);
    if (await(r, witness_in, ROLE_HOLDING, 15000, "the witness to hold the lock") != 0)
        return -1;
    if (atomic_load(&w->state) != ROLE_HOLDING)
        return fail(r, "the witness could not take the lock (rc %d)", w->acquire_rc);
    /* A note, not a recovery: the others have stopped by now. */
    event_add(r, EV_NOTE, "SIGCONT the frozen holder (the witness holds the lock)");
    v->resume_ns = now_ns();
    kill(victim, SIGCONT);
    atomic_store(&v->go_on, 2);
    if (await(r, victim_in, ROLE_DONE, 15000, "the victim to finish") != 0)
        return -1;
    w->intact = rs_int(&r->node[0], "HEXISTS %s %s", FAULT_LOCK, w->field) == 1;
    atomic_store(&w->release_now, 1);
    return await(r, witness_in, ROLE_DONE, 10000, "the witness to release");
}

static void verify_holder_pause(struct run *r, const struct section *log, size_t n,
                                const struct figures *f)
{
    const struct victim_report *v = &r->sh->victim;
    const struct witness_report *w = &r->sh->witness;
    int64_t period_ms = r->lease_ms / 3;
    int64_t cb_ms = v->lost_ns ? (v->lost_ns - v->resume_ns) / 1000000LL : -1;
    size_t others = 0;
    for (size_t i = 0; i < n; i++)
        others += log[i].enter_ns > v->pause_ns && log[i].enter_ns < v->resume_ns;
    fprintf(stderr,
            "  %-22s paused %.2f s; %zu sections by others meanwhile; on_lost %lld ms after "
            "SIGCONT (reason %d); stale write %s; release %d (%s); witness intact %d\n",
            "frozen holder", (double)(v->resume_ns - v->pause_ns) / 1e9, others,
            (long long)cb_ms, v->lost_reason,
            v->write_result == 0 ? "fenced out" : v->write_result == 1 ? "APPLIED" : "error",
            v->release_rc, rlc_strerror(v->release_rc), w->intact);
    EXPECT(others > 0, "expected others to acquire while the holder was frozen, seen %zu", others);
    EXPECT(atomic_load(&v->lost_seen) && v->lost_reason == RLC_E_LOST,
           "expected on_lost with RLC_E_LOST (%d), seen fired=%d reason=%d", RLC_E_LOST,
           atomic_load(&v->lost_seen), v->lost_reason);
    EXPECT(cb_ms >= 0 && cb_ms <= period_ms,
           "expected on_lost within one renewal period (%lld ms) of SIGCONT, seen %lld ms",
           (long long)period_ms, (long long)cb_ms);
    EXPECT(v->release_rc == RLC_E_LOST, "expected release %d (RLC_E_LOST), seen %d",
           RLC_E_LOST, v->release_rc);
    EXPECT(w->intact == 1, "expected the witness's field to survive the late release, seen %d",
           w->intact);
    EXPECT(w->held_before_release == 1 && w->release_rc == RLC_OK,
           "expected the witness to still hold (1) and release (0), seen %d and %d",
           w->held_before_release, w->release_rc);
    EXPECT(v->write_result == 0, "expected the stale write to be fenced out (0), seen %d",
           v->write_result);
    EXPECT(v->validity_exit_ms == 0 && v->held_exit == 0,
           "expected the resumed holder to see validity 0 and is_held 0, seen %d and %d",
           v->validity_exit_ms, v->held_exit);
    /* The checker must see what happened: the frozen section spans others. */
    EXPECT(f->overlaps_all >= 1, "expected the frozen holder's section to overlap others, "
                                 "seen %zu overlaps", f->overlaps_all);
}

const struct scenario fault_scenarios[] = {
    {"single_restart", "one node: SIGKILL, then a restart one lease later", 1, false, false,
     false, single_restart, NULL},
    {"redlock_kill", "Redlock 5: kill 1, then 2 nodes; restart them", 5, false, true, false,
     redlock_kill, NULL},
    {"redlock_no_quorum", "Redlock 5: kill 3 (no quorum); restart them one lease later", 5,
     false, false, false, redlock_no_quorum, verify_no_quorum},
    {"redlock_pause", "Redlock 5: SIGSTOP a node, then SIGCONT", 5, false, true, false,
     redlock_pause, NULL},
    {"redlock_pause_two", "Redlock 5: SIGSTOP two nodes (3 left = quorum), then SIGCONT", 5,
     false, true, false, redlock_pause_two, NULL},
    {"holder_pause", "one node: the holder frozen (SIGSTOP) past its lease", 1, true, true, true,
     holder_pause, verify_holder_pause},
    {"client_kill", "one node: CLIENT KILL of the clients' connections in a loop", 1, false,
     true, false, client_kill, verify_client_kill},
};
const int fault_nscenarios = sizeof fault_scenarios / sizeof fault_scenarios[0];
