/*
 * victim.c - the two extra processes of the holder-pause scenario.
 *
 * The victim takes the lock, reads the counter, and is then frozen whole
 * (SIGSTOP: its watchdog thread too) for longer than its lease, as a GC
 * pause or a swapped-out process would be. It is stopped between its read
 * and its write, the worst place: when it resumes it writes at once,
 * without looking at its validity, so only the storage's fencing check
 * stands between its stale write and the counter.
 *
 * The witness holds the lock while the victim resumes and releases, so the
 * orchestrator can see that the late release did not delete another
 * owner's lock.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "fault.h"

#define ROLE_WAIT_MS 120000 /* bound on any wait for the orchestrator */

static bool await_flag(atomic_int *flag, int value, int64_t timeout_ms)
{
    int64_t until = now_ns() + timeout_ms * 1000000LL;
    while (atomic_load(flag) != value && now_ns() < until)
        sleep_ms(1);
    return atomic_load(flag) == value;
}

static void victim_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    struct victim_report *v = user;
    v->lost_reason = reason;
    v->lost_ns = now_ns();
    atomic_store(&v->lost_seen, 1);
}

static void field_of(rlc_client *c, char *buf, size_t size)
{
    snprintf(buf, size, "%s:%llu", rlc_client_uuid(c), (unsigned long long)rlc_thread_owner());
}

static void victim_hold(const struct run *r, rlc_client *c, rlc_lock *l, int proc)
{
    struct shared *sh = r->sh;
    struct victim_report *v = &sh->victim;
    struct thread_stats *st = &sh->stats[proc][0];
    struct section s;
    memset(&s, 0, sizeof s);
    s.proc = (int8_t)proc;

    int rc = rlc_lock_acquire(l, 10000, -1);
    st->acquire[status_index(rc)]++;
    if (rc != RLC_OK) {
        fprintf(stderr, "victim: acquire returned %d: %s\n", rc, rlc_errmsg());
        return;
    }
    s.enter_ns = v->enter_ns = now_ns();
    rlc_lock_fencing_token(l, &s.token);
    v->token = s.token;
    int64_t ms = 0;
    rlc_lock_validity_ms(l, &ms);
    s.validity_enter_ms = (int32_t)ms;
    field_of(c, v->field, sizeof v->field);

    struct storage *storage = storage_open(r->storage.port);
    long long counter = 0;
    if (!storage || storage_get(storage, &counter) != 0) {
        fprintf(stderr, "victim: cannot read the counter\n");
        storage_close(storage);
        return;
    }
    atomic_store(&v->state, ROLE_HOLDING);
    /* Frozen here by SIGSTOP; the orchestrator says go on after SIGCONT. */
    if (!await_flag(&v->go_on, 2, ROLE_WAIT_MS)) {
        storage_close(storage);
        return;
    }
    v->write_result = storage_put(storage, counter + 1, s.token);
    s.wrote = v->write_result == 1;
    st->writes += v->write_result == 1;
    st->fenced_out += v->write_result == 0;
    st->storage_errors += v->write_result < 0;
    s.exit_ns = now_ns();
    storage_close(storage);

    rlc_lock_validity_ms(l, &ms);
    s.validity_exit_ms = v->validity_exit_ms = (int32_t)ms;
    int held = -1;
    s.held_exit = rlc_lock_is_held(l, &held) == RLC_OK ? (int8_t)held : -1;
    v->held_exit = s.held_exit;
    /* The watchdog, running again, finds the field gone: on_lost. */
    await_flag(&v->lost_seen, 1, 5000);
    s.lost = (int8_t)atomic_load(&v->lost_seen);
    if (s.lost) {
        st->lost_callbacks++;
        st->lost_reason[status_index(v->lost_reason)]++;
    }
    v->release_rc = rlc_lock_release(l);
    s.release_rc = (int8_t)v->release_rc;
    st->release[status_index(v->release_rc)]++;
    struct section *slot = log_slot(sh);
    if (slot) {
        *slot = s;
        log_done(sh, slot);
    }
}

void victim_process(const struct run *r, int proc)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct victim_report *v = &r->sh->victim;
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    if (rlc_client_new(&c, r->uris, r->options) != RLC_OK ||
        rlc_lock_new(c, FAULT_LOCK, 0, &l) != RLC_OK) {
        fprintf(stderr, "victim: %s\n", rlc_errmsg());
        atomic_store(&v->state, ROLE_FAILED);
        _exit(3);
    }
    rlc_lock_on_lost(l, victim_lost, v);
    atomic_store(&v->state, ROLE_READY);
    if (await_flag(&v->go_on, 1, ROLE_WAIT_MS))
        victim_hold(r, c, l, proc);
    int ok = atomic_load(&v->state) == ROLE_HOLDING;
    atomic_store(&v->state, ok ? ROLE_DONE : ROLE_FAILED);
    rlc_lock_free(l);
    rlc_client_free(c);
    _exit(ok ? 0 : 5);
}

void witness_process(const struct run *r)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct witness_report *w = &r->sh->witness;
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    if (rlc_client_new(&c, r->uris, r->options) != RLC_OK ||
        rlc_lock_new(c, FAULT_LOCK, 0, &l) != RLC_OK) {
        fprintf(stderr, "witness: %s\n", rlc_errmsg());
        atomic_store(&w->state, ROLE_FAILED);
        _exit(3);
    }
    atomic_store(&w->state, ROLE_READY);
    int ok = 0;
    if (await_flag(&w->go, 1, ROLE_WAIT_MS)) {
        w->acquire_rc = rlc_lock_acquire(l, 10000, -1);
        if (w->acquire_rc == RLC_OK) {
            field_of(c, w->field, sizeof w->field);
            atomic_store(&w->state, ROLE_HOLDING);
            if (await_flag(&w->release_now, 1, ROLE_WAIT_MS)) {
                int held = -1;
                w->held_before_release = rlc_lock_is_held(l, &held) == RLC_OK ? held : -1;
                w->release_rc = rlc_lock_release(l);
                ok = 1;
            }
        }
    }
    atomic_store(&w->state, ok ? ROLE_DONE : ROLE_FAILED);
    rlc_lock_free(l);
    rlc_client_free(c);
    _exit(ok ? 0 : 5);
}
