/*
 * checker.c - reading the log of critical sections after a run.
 *
 * Sections are sorted by the time they were entered. Sweeping in that
 * order, a section overlaps if it began before some earlier section ended
 * (the largest exit time so far): with a correct lock, a section begins
 * only after acquire returned, which is after the previous holder's release
 * was sent, which is after its exit time was taken. The sweep runs twice
 * over the same order: over all sections, and over the sections whose
 * holders were valid throughout (section_valid), which is the number that
 * must be 0. Fencing tokens must grow in the same order.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"

static int by_enter(const void *a, const void *b)
{
    const struct section *x = a, *y = b;
    if (x->enter_ns != y->enter_ns)
        return x->enter_ns < y->enter_ns ? -1 : 1;
    return x->exit_ns < y->exit_ns ? -1 : x->exit_ns > y->exit_ns;
}

static void add_stats(struct figures *f, const struct thread_stats *st)
{
    for (int k = 0; k < FAULT_NSTATUS; k++) {
        f->acquire[k] += st->acquire[k];
        f->release[k] += st->release[k];
        f->lost_reason[k] += st->lost_reason[k];
    }
    f->lost_callbacks += st->lost_callbacks;
    f->lost_in_release += st->lost_in_release;
    f->spurious_lost += st->spurious_lost;
    if (st->max_release_ms > f->max_release_ms)
        f->max_release_ms = st->max_release_ms;
    f->orphans += st->orphans;
    f->aborted_writes += st->aborted_writes;
    f->fenced_out += st->fenced_out;
    f->storage_errors += st->storage_errors;
    f->writes += (long long)st->writes;
}

/* Drops slots a dead process never finished, then sorts. Returns the count. */
static size_t tidy(struct section *log, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (log[i].enter_ns > 0 && log[i].exit_ns >= log[i].enter_ns)
            log[k++] = log[i];
    qsort(log, k, sizeof *log, by_enter);
    return k;
}

void analyse(const struct run *r, struct section *log, size_t n, long long counter,
             struct figures *f)
{
    memset(f, 0, sizeof *f);
    if (r)
        for (int p = 0; p < FAULT_MAX_PROCS; p++)
            for (int t = 0; t < FAULT_MAX_THREADS; t++)
                add_stats(f, &r->sh->stats[p][t]);
    n = tidy(log, n);
    f->sections = n;
    f->counter = counter;
    f->min_validity_enter_ms = INT64_MAX;

    int64_t max_exit_all = 0, max_exit_valid = 0;
    uint64_t last_token_all = 0, last_token_valid = 0;
    for (size_t i = 0; i < n; i++) {
        const struct section *s = &log[i];
        bool valid = section_valid(s);
        f->valid_sections += valid;
        if (i > 0 && s->enter_ns < max_exit_all)
            f->overlaps_all++;
        if (valid && s->enter_ns < max_exit_valid)
            f->overlaps_valid++;
        if (i > 0 && s->enter_ns - max_exit_all > f->longest_gap_ms * 1000000LL)
            f->longest_gap_ms = (s->enter_ns - max_exit_all) / 1000000LL;
        if (last_token_all && s->token <= last_token_all)
            f->tokens_out_of_order_all++;
        if (valid && last_token_valid && s->token <= last_token_valid)
            f->tokens_out_of_order_valid++;
        last_token_all = s->token;
        if (valid)
            last_token_valid = s->token;
        if (s->exit_ns > max_exit_all)
            max_exit_all = s->exit_ns;
        if (valid && s->exit_ns > max_exit_valid)
            max_exit_valid = s->exit_ns;
        if (s->validity_exit_ms > 0 && s->held_exit == 0 && !s->lost)
            f->validity_contradicted++;
        if (s->validity_enter_ms < f->min_validity_enter_ms)
            f->min_validity_enter_ms = s->validity_enter_ms;
    }
    if (!r) /* selftest: writes are the sections that wrote */
        for (size_t i = 0; i < n; i++)
            f->writes += log[i].wrote;
    f->lost_updates = f->writes - counter;
}

/* ---- printing ---------------------------------------------------------------- */

static double rel_s(const struct run *r, int64_t t)
{
    return (double)(t - r->t0_ns) / 1e9;
}

static void print_section(const struct run *r, const char *tag, const struct section *s)
{
    fprintf(stderr,
            "    %s proc %d thread %d token %" PRIu64 " [%.4f s .. %.4f s] validity %d..%d ms "
            "held %d lost %d wrote %d release %d\n",
            tag, s->proc, s->thread, s->token, rel_s(r, s->enter_ns), rel_s(r, s->exit_ns),
            s->validity_enter_ms, s->validity_exit_ms, s->held_exit, s->lost, s->wrote,
            s->release_rc);
}

/* The first few overlapping pairs, so that a failure can be read. */
static void print_overlaps(const struct run *r, const struct section *log, size_t n)
{
    int shown = 0;
    size_t holder = 0; /* the earlier section with the largest exit */
    for (size_t i = 1; i < n && shown < 6; i++) {
        if (log[i - 1].exit_ns > log[holder].exit_ns)
            holder = i - 1;
        if (log[i].enter_ns < log[holder].exit_ns) {
            fprintf(stderr, "  overlap %d:\n", ++shown);
            print_section(r, "earlier", &log[holder]);
            print_section(r, "later  ", &log[i]);
        }
    }
}

static const char *const status_name[FAULT_NSTATUS] = {
    "not_acquired", "ok", "inval", "nomem", "connect", "timeout", "not_owner",
    "lost", "no_quorum", "server", "protocol", "closed", "auth", "canceled"};

static void print_statuses(const char *what, const uint64_t *v)
{
    fprintf(stderr, "  %-22s", what);
    for (int k = 0; k < FAULT_NSTATUS; k++)
        if (v[k])
            fprintf(stderr, " %s %" PRIu64, status_name[k], v[k]);
    fprintf(stderr, "\n");
}

/* Sections where the library still claimed validity and the server (a
 * quorum of it) answered that the field was gone. */
static void print_contradicted(const struct run *r, const struct section *log, size_t n)
{
    int shown = 0;
    for (size_t i = 0; i < n && shown < 5; i++)
        if (log[i].validity_exit_ms > 0 && log[i].held_exit == 0 && !log[i].lost)
            print_section(r, "contradicted", &log[i]), shown++;
}

/* The first few tokens that did not grow, among valid holders. */
static void print_token_drops(const struct run *r, const struct section *log, size_t n)
{
    const struct section *prev = NULL;
    int shown = 0;
    for (size_t i = 0; i < n && shown < 5; i++) {
        if (!section_valid(&log[i]))
            continue;
        if (prev && log[i].token <= prev->token) {
            fprintf(stderr, "  token drop %d: %" PRIu64 " at %.4f s after %" PRIu64
                    " at %.4f s\n", ++shown, log[i].token, rel_s(r, log[i].enter_ns),
                    prev->token, rel_s(r, prev->enter_ns));
        }
        prev = &log[i];
    }
}

/* The first section entered after t: how long the lock stayed unusable. */
static int64_t next_enter_after(const struct section *log, size_t n, int64_t t)
{
    for (size_t i = 0; i < n; i++)
        if (log[i].enter_ns > t)
            return (log[i].enter_ns - t) / 1000000LL;
    return -1;
}

void report(const struct run *r, const struct section *log, size_t n, const struct figures *f)
{
    const struct scenario *sc = r->sc;
    fprintf(stderr, "--- figures: %s (%s profile)\n", sc->name, r->long_profile ? "long" : "short");
    fprintf(stderr, "  %-22s %d node(s), %d processes x %d threads, lease %lld ms, %.1f s\n",
            "setup", r->n_nodes, r->procs, r->threads, (long long)r->lease_ms,
            rel_s(r, now_ns()));
    print_statuses("acquire results", f->acquire);
    print_statuses("release results", f->release);
    fprintf(stderr, "  %-22s %zu logged, %zu valid throughout\n", "critical sections",
            f->sections, f->valid_sections);
    fprintf(stderr, "  %-22s %zu among valid holders, %zu overall\n", "overlaps",
            f->overlaps_valid, f->overlaps_all);
    fprintf(stderr, "  %-22s %lld (writes %lld, counter %lld, aborted %" PRIu64
            ", fenced out %" PRIu64 ", storage errors %" PRIu64 ")\n",
            "lost updates", f->lost_updates, f->writes, f->counter, f->aborted_writes,
            f->fenced_out, f->storage_errors);
    fprintf(stderr, "  %-22s %zu among valid holders, %zu overall\n", "tokens out of order",
            f->tokens_out_of_order_valid, f->tokens_out_of_order_all);
    print_statuses("lost callbacks", f->lost_reason);
    fprintf(stderr, "  %-22s %" PRIu64 " during a release, %" PRIu64
            " of them before a release that succeeded\n", "  of which", f->lost_in_release,
            f->spurious_lost);
    fprintf(stderr, "  %-22s %lld ms\n", "slowest release", (long long)f->max_release_ms);
    fprintf(stderr, "  %-22s %" PRIu64 "\n", "orphaned levels freed", f->orphans);
    fprintf(stderr, "  %-22s %zu\n", "validity contradicted", f->validity_contradicted);
    fprintf(stderr, "  %-22s %lld ms\n", "longest gap", (long long)f->longest_gap_ms);
    fprintf(stderr, "  %-22s %lld ms\n", "min validity at enter",
            (long long)(f->sections ? f->min_validity_enter_ms : 0));

    char recov[512] = "";
    size_t len = 0;
    for (int i = 0; i < r->sh->nevents; i++) {
        const struct event *e = &r->sh->events[i];
        if (e->kind == EV_NOTE)
            continue;
        int64_t next = next_enter_after(log, n, e->t_ns);
        fprintf(stderr, "  %-22s +%.2f s %s -> next section after %lld ms\n",
                e->kind == EV_HEAL ? "recovery" : "fault", rel_s(r, e->t_ns), e->what,
                (long long)next);
        if (e->kind == EV_HEAL && len < sizeof recov - 24)
            len += (size_t)snprintf(recov + len, sizeof recov - len, "%s%lld", len ? "," : "",
                                    (long long)next);
    }
    if (f->overlaps_all)
        print_overlaps(r, log, n);
    if (f->tokens_out_of_order_valid)
        print_token_drops(r, log, n);
    if (f->validity_contradicted)
        print_contradicted(r, log, n);
    fprintf(stderr,
            "FIGURES scenario=%s profile=%s acquisitions=%" PRIu64 " sections=%zu "
            "overlaps_valid=%zu overlaps_all=%zu lost_updates=%lld tokens_ooo_valid=%zu "
            "tokens_ooo_all=%zu no_quorum=%" PRIu64 " connect=%" PRIu64 " timeout=%" PRIu64
            " lost_callbacks=%" PRIu64 " spurious_lost=%" PRIu64 " orphans=%" PRIu64
            " longest_gap_ms=%lld max_release_ms=%lld recovery_ms=%s\n",
            sc->name, r->long_profile ? "long" : "short", f->acquire[status_index(RLC_OK)],
            f->sections, f->overlaps_valid, f->overlaps_all, f->lost_updates,
            f->tokens_out_of_order_valid, f->tokens_out_of_order_all,
            f->acquire[status_index(RLC_E_NO_QUORUM)], f->acquire[status_index(RLC_E_CONNECT)],
            f->acquire[status_index(RLC_E_TIMEOUT)], f->lost_callbacks, f->spurious_lost,
            f->orphans, (long long)f->longest_gap_ms, (long long)f->max_release_ms,
            len ? recov : "-");
}

/* ---- self test ------------------------------------------------------------------ */

static struct section sec(int64_t enter, int64_t exit, uint64_t token, bool valid, int wrote)
{
    struct section s;
    memset(&s, 0, sizeof s);
    s.enter_ns = enter * 1000000LL;
    s.exit_ns = exit * 1000000LL;
    s.token = token;
    s.validity_exit_ms = valid ? 100 : 0;
    s.held_exit = valid;
    s.wrote = (int8_t)wrote;
    return s;
}

int checker_selftest(void)
{
    struct figures f;
    int failures = fault_failures;

    /* In order, touching ends: no overlap, no token out of order. */
    struct section a[] = {sec(30, 40, 3, 1, 1), sec(10, 20, 1, 1, 1), sec(20, 30, 2, 1, 1)};
    analyse(NULL, a, 3, 3, &f);
    EXPECT(f.overlaps_all == 0 && f.overlaps_valid == 0, "seen %zu/%zu", f.overlaps_all,
           f.overlaps_valid);
    EXPECT(f.tokens_out_of_order_all == 0 && f.lost_updates == 0, "seen %zu, %lld",
           f.tokens_out_of_order_all, f.lost_updates);
    EXPECT(f.longest_gap_ms == 0, "gap %lld", (long long)f.longest_gap_ms);

    /* Two valid holders at once, and the lost update they cause. */
    struct section b[] = {sec(10, 20, 1, 1, 1), sec(15, 25, 2, 1, 1)};
    analyse(NULL, b, 2, 1, &f);
    EXPECT(f.overlaps_valid == 1 && f.overlaps_all == 1, "seen %zu/%zu", f.overlaps_valid,
           f.overlaps_all);
    EXPECT(f.lost_updates == 1, "expected 1 lost update, seen %lld", f.lost_updates);

    /* A paused holder (invalid at exit) spanning two valid ones. */
    struct section c[] = {sec(10, 100, 1, 0, 0), sec(40, 50, 2, 1, 1), sec(60, 70, 3, 1, 1)};
    analyse(NULL, c, 3, 2, &f);
    EXPECT(f.overlaps_valid == 0 && f.overlaps_all == 2, "seen %zu/%zu", f.overlaps_valid,
           f.overlaps_all);
    EXPECT(f.valid_sections == 2, "seen %zu", f.valid_sections);

    /* Tokens that go back: counted among valid ones too. */
    struct section d[] = {sec(10, 20, 5, 1, 1), sec(30, 40, 2, 1, 1), sec(50, 60, 6, 1, 1)};
    analyse(NULL, d, 3, 3, &f);
    EXPECT(f.tokens_out_of_order_valid == 1 && f.tokens_out_of_order_all == 1, "seen %zu/%zu",
           f.tokens_out_of_order_valid, f.tokens_out_of_order_all);
    EXPECT(f.longest_gap_ms == 10, "gap %lld", (long long)f.longest_gap_ms);

    /* A slot a crashed process never finished is ignored. */
    struct section e[] = {sec(10, 20, 1, 1, 1), sec(0, 0, 0, 0, 0)};
    analyse(NULL, e, 2, 1, &f);
    EXPECT(f.sections == 1, "seen %zu", f.sections);

    /* A lost holder (callback fired) is not valid even with validity left. */
    struct section g[] = {sec(10, 30, 1, 1, 1), sec(20, 40, 2, 1, 1)};
    g[0].lost = 1;
    analyse(NULL, g, 2, 2, &f);
    EXPECT(f.overlaps_valid == 0 && f.overlaps_all == 1, "seen %zu/%zu", f.overlaps_valid,
           f.overlaps_all);
    return fault_failures == failures ? 0 : -1;
}
