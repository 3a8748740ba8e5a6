/*
 * main.c - fault_check: one scenario of the mutual-exclusion checker.
 *
 *   fault_check SCENARIO [short|long]    run it; exit 0 if every check held
 *   fault_check selftest                 the checker on synthetic logs
 *   fault_check list                     the scenarios
 *
 * The orchestrator (this process) starts the servers, forks the workers
 * before it has any thread (a child may only use clients made after the
 * fork), lets the scenario inject its faults, stops the workers, and hands
 * the log to the checker. It never uses the library itself: what it knows
 * of the lock it learns from the servers with raw commands.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault.h"

#define SHORT_BOUND_S 150 /* hard bound on one scenario, short profile */
#define LONG_BOUND_S 1800

int fault_failures;

static const struct scenario *find(const char *name)
{
    for (int i = 0; i < fault_nscenarios; i++)
        if (strcmp(fault_scenarios[i].name, name) == 0)
            return &fault_scenarios[i];
    return NULL;
}

static int start_servers(struct run *r)
{
    if (rs_start(&r->storage, NULL) != 0)
        return -1;
    size_t len = 0;
    r->uris[0] = '\0';
    for (int i = 0; i < r->n_nodes; i++) {
        if (rs_start(&r->node[i], NULL) != 0)
            return -1;
        len += (size_t)snprintf(r->uris + len, sizeof r->uris - len, "%s%s", i ? "," : "",
                                r->node[i].uri);
    }
    return 0;
}

static void stop_servers(struct run *r)
{
    for (int i = 0; i < r->n_nodes; i++)
        if (r->node[i].dir[0])
            rs_stop(&r->node[i]);
    if (r->storage.dir[0])
        rs_stop(&r->storage);
}

static pid_t spawn(struct run *r, int role, int proc)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    if (role == 0)
        worker_process(r, proc);
    else if (role == 1)
        victim_process(r, proc);
    witness_process(r);
}

static int start_children(struct run *r)
{
    for (int p = 0; p < r->procs; p++)
        if ((r->pid[r->npids++] = spawn(r, 0, p)) < 0)
            return -1;
    if (r->sc->victim) {
        if ((r->pid[r->npids++] = spawn(r, 1, r->procs)) < 0 ||
            (r->pid[r->npids++] = spawn(r, 2, 0)) < 0)
            return -1;
    }
    /* Every worker thread has its client and handle before the clock starts. */
    int64_t until = now_ns() + 30000 * 1000000LL;
    while (atomic_load(&r->sh->ready) < r->procs * r->threads && now_ns() < until)
        sleep_ms(5);
    return atomic_load(&r->sh->ready) == r->procs * r->threads ? 0 : -1;
}

/* Stops the load and waits, bounded, for every child; stragglers are killed. */
static void stop_children(struct run *r)
{
    atomic_store(&r->sh->phase, PHASE_STOP);
    int64_t until = now_ns() + 30000 * 1000000LL;
    for (int i = 0; i < r->npids; i++) {
        while (!r->exited[i] && r->pid[i] > 0) {
            int status;
            if (waitpid(r->pid[i], &status, WNOHANG) == r->pid[i]) {
                r->exited[i] = true;
                r->exit_status[i] = status;
            } else if (now_ns() > until) {
                fprintf(stderr, "child %d (pid %d) did not stop: SIGKILL\n", i, (int)r->pid[i]);
                kill(r->pid[i], SIGKILL);
                waitpid(r->pid[i], &status, 0);
                r->exited[i] = true;
                r->exit_status[i] = -1;
            } else {
                sleep_ms(5);
            }
        }
    }
}

static long long final_counter(struct run *r)
{
    redisReply *rep = rs_cmd(&r->storage, "GET %s", FAULT_COUNTER);
    long long v = rep && rep->type == REDIS_REPLY_STRING ? atoll(rep->str)
                  : rep && rep->type == REDIS_REPLY_NIL  ? 0
                                                         : LLONG_MIN;
    if (rep)
        freeReplyObject(rep);
    return v;
}

/* No section may begin while no quorum exists (after a grace for replies
 * already on their way when the fault came). */
static size_t entered_in_outages(const struct run *r, const struct section *log, size_t n)
{
    size_t k = 0;
    for (int i = 0; i < r->sh->nevents; i++) {
        const struct event *e = &r->sh->events[i];
        if (e->kind != EV_OUTAGE)
            continue;
        int64_t from = e->t_ns + 500 * 1000000LL, to = INT64_MAX;
        for (int j = i + 1; j < r->sh->nevents && to == INT64_MAX; j++)
            if (r->sh->events[j].kind == EV_HEAL)
                to = r->sh->events[j].t_ns;
        for (size_t s = 0; s < n; s++)
            k += log[s].enter_ns > from && log[s].enter_ns < to;
    }
    return k;
}

static void common_checks(struct run *r, const struct section *log, size_t n,
                          const struct figures *f)
{
    for (int i = 0; i < r->npids; i++)
        EXPECT(r->exited[i] && WIFEXITED(r->exit_status[i]) &&
                   WEXITSTATUS(r->exit_status[i]) == 0,
               "expected child %d to exit 0, seen status 0x%x%s", i, r->exit_status[i],
               WIFSIGNALED(r->exit_status[i]) ? " (killed by a signal)" : "");
    EXPECT(f->sections > 0, "expected critical sections, seen none");
    EXPECT(atomic_load(&r->sh->nsections) <= FAULT_LOG_CAP, "the log overflowed (%d sections)",
           FAULT_LOG_CAP);
    EXPECT(f->overlaps_valid == 0, "expected 0 overlaps among valid holders, seen %zu",
           f->overlaps_valid);
    EXPECT(f->lost_updates == 0 && f->storage_errors == 0,
           "expected 0 lost updates and 0 storage errors, seen %lld and %llu", f->lost_updates,
           (unsigned long long)f->storage_errors);
    /* One node answering "no such field" while the library still claims
     * validity means the key vanished under a valid holder. Over N nodes it
     * can also mean a node that held part of the quorum died (Redlock's
     * validity assumes no node loses data within a lease), so there it is a
     * figure only. */
    if (r->n_nodes == 1)
        EXPECT(f->validity_contradicted == 0,
               "expected no section where the library claimed validity but the server had "
               "no field, seen %zu", f->validity_contradicted);
    /* on_lost promises a hold that "can no longer be renewed"; a hold whose
     * release then succeeded was not lost: the callback was a false alarm. */
    EXPECT(f->spurious_lost == 0,
           "expected no on_lost during a release that then succeeded, seen %llu",
           (unsigned long long)f->spurious_lost);
    if (r->sc->tokens_monotonic)
        EXPECT(f->tokens_out_of_order_valid == 0,
               "expected fencing tokens to grow with each new holder (redlockc.h), seen %zu "
               "out of order among valid holders",
               f->tokens_out_of_order_valid);
    size_t in_outage = entered_in_outages(r, log, n);
    EXPECT(in_outage == 0, "expected no section to begin without a quorum, seen %zu",
           in_outage);
}

static int run_scenario(const struct scenario *sc, bool long_profile)
{
    struct run *r = calloc(1, sizeof *r);
    if (!r)
        return 2;
    r->sc = sc;
    r->long_profile = long_profile;
    r->cycles = long_profile ? 6 : 1;
    r->load_ms = long_profile ? 15000 : 2000;
    r->lease_ms = 1500;
    r->n_nodes = sc->nodes;
    r->procs = sc->victim ? 3 : 4;
    r->threads = 4;
    snprintf(r->options, sizeof r->options,
             "watchdog_timeout_ms=%lld;io_timeout_ms=500;connect_timeout_ms=500;fencing=1",
             (long long)r->lease_ms);
    fprintf(stderr, "=== %s: %s\n", sc->name, sc->what);

    int rc = 2;
    r->sh = shared_new();
    if (!r->sh || start_servers(r) != 0) {
        fprintf(stderr, "FAIL could not start redis-server processes\n");
        goto out;
    }
    if (start_children(r) != 0) {
        fprintf(stderr, "FAIL workers did not get ready\n");
        stop_children(r);
        goto out;
    }
    r->t0_ns = now_ns();
    r->deadline_ns = r->t0_ns + (long_profile ? LONG_BOUND_S : SHORT_BOUND_S) * 1000000000LL;
    atomic_store(&r->sh->phase, PHASE_RUN);
    event_add(r, EV_NOTE, "load starts: %d x %d threads on %d node(s)", r->procs, r->threads,
              r->n_nodes);
    int frc = sc->faults(r);
    stop_children(r);
    event_add(r, EV_NOTE, "load stopped");
    if (frc != 0)
        fprintf(stderr, "FAIL scenario steps: %s\n", r->failure);
    fault_failures += frc != 0;

    size_t n = atomic_load(&r->sh->nsections);
    if (n > FAULT_LOG_CAP)
        n = FAULT_LOG_CAP;
    struct figures f;
    analyse(r, r->sh->log, n, final_counter(r), &f); /* sorts the log */
    report(r, r->sh->log, n, &f);
    common_checks(r, r->sh->log, f.sections, &f);
    if (sc->verify)
        sc->verify(r, r->sh->log, f.sections, &f);
    rc = fault_failures ? 1 : 0;
    fprintf(stderr, "RESULT %s %s\n", sc->name, rc ? "FAIL" : "ok");
out:
    stop_servers(r);
    shared_free(r->sh);
    free(r);
    return rc;
}

int main(int argc, char **argv)
{
    setvbuf(stderr, NULL, _IOLBF, 0);
    if (argc >= 2 && strcmp(argv[1], "selftest") == 0) {
        int rc = checker_selftest();
        fprintf(stderr, "RESULT selftest %s\n", rc ? "FAIL" : "ok");
        return rc ? 1 : 0;
    }
    if (argc >= 2 && strcmp(argv[1], "list") == 0) {
        for (int i = 0; i < fault_nscenarios; i++)
            printf("%s\n", fault_scenarios[i].name);
        return 0;
    }
    const struct scenario *sc = argc >= 2 ? find(argv[1]) : NULL;
    const char *profile = argc >= 3 ? argv[2] : "short";
    if (!sc || (strcmp(profile, "short") != 0 && strcmp(profile, "long") != 0)) {
        fprintf(stderr, "usage: fault_check SCENARIO [short|long] | selftest | list\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    return run_scenario(sc, strcmp(profile, "long") == 0);
}
