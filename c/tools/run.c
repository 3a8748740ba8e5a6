/*
 * run.c - "redlockc NAME -- CMD": acquire, run CMD, release.
 *
 * One thread does everything, in one poll() loop over two descriptors:
 *   - a signalfd with the signals main() blocked (SIGCHLD, and the ones to
 *     forward to CMD), so no signal handler runs anywhere;
 *   - a pipe that the lock's on_lost callback writes the reason into. The
 *     callback runs on the library's callback thread, so it only write()s:
 *     no locks, no stdio, nothing that could block that thread.
 * Deadlines (the SIGKILL after --kill-after, the end of a fixed --lease)
 * are the poll timeout.
 *
 * Waiting for a busy lock is one library call, which Ctrl-C (any signal)
 * ends at once through rlc_lock_cancel (sigcancel.c); the signal is read
 * afterwards, as every other one is.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "sigcancel.h"

#define REPORT_MS 10000

extern char **environ;

struct run {
    rlc_lock *l;
    const struct cli_args *a;
    int sigfd;
    int lost_pipe[2];
    struct child ch;
    int lost;             /* 0, or the reason the lock was lost */
    int64_t kill_at;      /* when to SIGKILL CMD's group; -1 never */
    int64_t lease_end;    /* fixed lease: when it ends; -1 watchdog */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* On the library's callback thread: hand the reason to the main loop, nothing more. */
static void on_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    int fd = (int)(intptr_t)user; /* the value itself: no pointer to outlive */
    if (write(fd, &reason, sizeof reason) < 0) {
        /* the pipe is non-blocking and nearly empty: cannot fail in practice */
    }
}

static int is_terminating(int sig)
{
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

/* Reads every pending signal; forwards or notes each. Returns the last
 * terminating signal seen (only meaningful before CMD runs), else 0. */
static int drain_signals(struct run *r, int started)
{
    struct signalfd_siginfo si;
    int terminating = 0;
    while (read(r->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD)
            continue; /* child_poll() looks at every loop turn */
        if (!started) {
            if (is_terminating(sig))
                terminating = sig;
            continue;
        }
        /* Always passed on, also when the terminal sent it (Ctrl-C): the
         * terminal signals only its foreground group, and CMD's group is
         * never ours, so if we got it, CMD did not. */
        child_signal(&r->ch, sig);
    }
    return terminating;
}

/* Failures worth another try while --wait lasts: Redis down or restarting,
 * not a refused password or a bad option. */
static int is_transient(int rc)
{
    return rc == RLC_E_CONNECT || rc == RLC_E_TIMEOUT || rc == RLC_E_NO_QUORUM;
}

/* Sleeps up to ms, or until a signal is pending on the signalfd. */
static void nap(const struct run *r, int64_t ms)
{
    struct pollfd pf = {r->sigfd, POLLIN, 0};
    if (ms > 0)
        poll(&pf, 1, ms > 60000 ? 60000 : (int)ms);
}

static void since_text(time_t t, char *buf, size_t len)
{
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

struct waiting {
    const struct cli_args *a;
    int64_t started;
    const char *since;
};

/* -v, every REPORT_MS of a wait (on sigcancel's thread: stdio only). */
static void still_waiting(void *user)
{
    const struct waiting *w = user;
    cli_err("still waiting for lock '%s' since %s (%.0f s)", w->a->name, w->since,
            (double)(now_ms() - w->started) / 1000.0);
}

/* Returns RLC_OK or a status; *sig is set if a terminating signal came
 * first (then nothing is held). While --wait lasts, a node that cannot be
 * reached is tried again with backoff (100 ms doubling to 2 s), so a cron
 * job that starts during a Redis restart waits instead of failing. The
 * first turn is one try, so that -v can say what it waits for. */
static int acquire(struct run *r, int *sig)
{
    int64_t wait = r->a->wait_ms;
    int64_t started = now_ms(), deadline = started + wait;
    int64_t backoff = 100;
    time_t since = time(NULL);
    char since_s[32];
    since_text(since, since_s, sizeof since_s);
    struct waiting w = {r->a, started, since_s};
    /* Bounded by the deadline (or by "forever", which --wait asked for). */
    for (uint64_t turn = 0;; turn++) {
        int64_t left = wait < 0 ? -1 : deadline - now_ms();
        if (wait >= 0 && left < 0)
            left = 0;
        int rc = turn == 0 || left == 0
                     ? rlc_lock_acquire(r->l, 0, r->a->lease_ms)
                     : sigcancel_acquire(r->l, r->sigfd, left, r->a->lease_ms,
                                         r->a->verbose ? REPORT_MS : 0, still_waiting, &w);
        if ((*sig = drain_signals(r, 0)) != 0) {
            if (rc == RLC_OK)
                rlc_lock_release(r->l);
            return rc;
        }
        if (rc == RLC_E_CANCELED)
            continue; /* a signal that does not end redlockc: wait on */
        int out_of_time = wait >= 0 && now_ms() >= deadline;
        if (is_transient(rc) && wait != 0 && !out_of_time) {
            int64_t pause = backoff;
            if (wait >= 0 && deadline - now_ms() < pause)
                pause = deadline - now_ms();
            if (r->a->verbose) {
                char what[300];
                snprintf(what, sizeof what, "cannot reach Redis; retrying in %" PRId64
                         " ms (waiting since %s)", pause, since_s);
                cli_err_lock(what, r->a->name, rlc_errmsg());
            }
            nap(r, pause);
            backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
            continue;
        }
        if (rc == RLC_OK && r->a->verbose && turn > 0)
            cli_err("got lock '%s' after waiting %.3f s (since %s)", r->a->name,
                    (double)(now_ms() - started) / 1000.0, since_s);
        if (rc != RLC_NOT_ACQUIRED || out_of_time)
            return rc;
        backoff = 100; /* reachable again */
        if (r->a->verbose && turn == 0) {
            int64_t ttl = -2;
            rlc_lock_ttl_ms(r->l, &ttl);
            cli_err("waiting for lock '%s' (held by another owner, lease left %" PRId64
                    " ms) since %s%s", r->a->name, ttl, since_s,
                    wait < 0 ? ", without limit" : "");
        }
    }
}

/* The environment of CMD: ours, plus the lock's name and, when the hold has
 * one (fencing=1), its fencing token. An inherited REDLOCKC_FENCING_TOKEN is
 * never passed on: it would be another hold's. */
static char **child_env(const char *name, uint64_t token)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 3, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "REDLOCKC_LOCK=", 14) != 0 &&
            strncmp(environ[i], "REDLOCKC_FENCING_TOKEN=", 23) != 0)
            env[k++] = environ[i];
    if (asprintf(&env[k], "REDLOCKC_LOCK=%s", name) < 0)
        env[k] = NULL;
    if (!env[k] ||
        (token && asprintf(&env[k + 1], "REDLOCKC_FENCING_TOKEN=%" PRIu64, token) < 0)) {
        free(env[k]);
        free(env);
        return NULL;
    }
    return env;
}

static void free_env(char **env)
{
    /* ours are the REDLOCKC_ ones (child_env left out the inherited ones);
     * the rest belong to environ */
    for (size_t i = 0; env[i]; i++)
        if (strncmp(env[i], "REDLOCKC_LOCK=", 14) == 0 ||
            strncmp(env[i], "REDLOCKC_FENCING_TOKEN=", 23) == 0)
            free(env[i]);
    free(env);
}

/* The lock is gone: CMD's group gets SIGTERM now and SIGKILL later. */
static void begin_stop(struct run *r, int reason, const char *why)
{
    if (r->lost)
        return;
    r->lost = reason;
    cli_err("lock '%s' was lost (%s); stopping CMD", r->a->name, why);
    if (r->a->kill_after_ms == 0) {
        child_signal(&r->ch, SIGKILL);
        return;
    }
    child_signal(&r->ch, SIGTERM);
    child_signal(&r->ch, SIGCONT); /* a stopped CMD must run to die */
    r->kill_at = now_ms() + r->a->kill_after_ms;
}

static int poll_timeout(const struct run *r)
{
    int64_t next = -1;
    if (r->kill_at >= 0)
        next = r->kill_at;
    if (r->lease_end >= 0 && !r->lost && (next < 0 || r->lease_end < next))
        next = r->lease_end;
    if (next < 0)
        return -1;
    int64_t left = next - now_ms();
    return left <= 0 ? 0 : left > 60000 ? 60000 : (int)left;
}

/* Until CMD ends: forward signals, watch for loss, enforce deadlines. */
static void supervise(struct run *r)
{
    struct pollfd pf[2] = {{r->sigfd, POLLIN, 0}, {r->lost_pipe[0], POLLIN, 0}};
    for (;;) {
        child_poll(&r->ch);
        if (r->ch.ended)
            return;
        if (poll(pf, 2, poll_timeout(r)) < 0 && errno != EINTR) {
            /* Never return (and release) while CMD runs: try again soon. */
            cli_err("poll: %s", strerror(errno));
            struct timespec pause = {0, 100 * 1000000L};
            nanosleep(&pause, NULL);
        }
        int reason;
        if (read(r->lost_pipe[0], &reason, sizeof reason) == (ssize_t)sizeof reason)
            begin_stop(r, reason, rlc_strerror(reason));
        drain_signals(r, 1);
        int64_t now = now_ms();
        if (r->lease_end >= 0 && now >= r->lease_end)
            begin_stop(r, RLC_E_LOST, "its fixed --lease ended");
        if (r->kill_at >= 0 && now >= r->kill_at) {
            child_signal(&r->ch, SIGKILL);
            r->kill_at = -1;
        }
    }
}

/* After CMD ended: release, and choose the exit status. */
static int finish(struct run *r)
{
    int cmd_status = child_exit_status(&r->ch);
    int rc = rlc_lock_release(r->l);
    if (r->lost) {
        cli_err("CMD ended with status %d after the lock was lost", cmd_status);
        return CLI_LOST;
    }
    if (rc == RLC_OK) {
        if (r->a->verbose)
            cli_err("released lock '%s'", r->a->name);
        return cmd_status;
    }
    if (rc == RLC_E_LOST || rc == RLC_E_NOT_OWNER) {
        cli_err("lock '%s' was lost while CMD ran: %s", r->a->name, rlc_errmsg());
        return CLI_LOST;
    }
    /* CMD finished under a hold the watchdog never reported lost; only
     * the release failed. The key expires with its lease. */
    cli_err("could not release lock '%s' (%s); it expires with its lease", r->a->name,
            rlc_errmsg());
    return cmd_status;
}

static int start_cmd(struct run *r, const sigset_t *orig_mask)
{
    uint64_t token = 0;
    if (rlc_lock_fencing_token(r->l, &token) != RLC_OK)
        token = 0; /* fencing is off (or a multi-name lock): no token to give */
    if (r->a->verbose && token)
        cli_err("acquired lock '%s' (fencing token %" PRIu64 ")", r->a->name, token);
    else if (r->a->verbose)
        cli_err("acquired lock '%s'", r->a->name);
    if (r->a->lease_ms > 0) {
        int64_t valid = 0;
        rlc_lock_validity_ms(r->l, &valid);
        r->lease_end = now_ms() + valid;
    }
    char **env = child_env(r->a->name, token);
    if (!env) {
        cli_err("out of memory");
        return CLI_INTERNAL;
    }
    int rc = child_start(&r->ch, r->a->cmd, env, orig_mask);
    free_env(env);
    return rc;
}

int cli_run(rlc_lock *l, const struct cli_args *a, const sigset_t *orig_mask)
{
    struct run r = {.l = l, .a = a, .sigfd = -1, .lost_pipe = {-1, -1}, .kill_at = -1,
                    .lease_end = -1};
    sigset_t mine;
    pthread_sigmask(SIG_SETMASK, NULL, &mine);
    r.sigfd = signalfd(-1, &mine, SFD_NONBLOCK | SFD_CLOEXEC);
    if (r.sigfd < 0 || pipe2(r.lost_pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
        cli_err("signalfd/pipe: %s", strerror(errno));
        if (r.sigfd >= 0)
            close(r.sigfd);
        return CLI_INTERNAL;
    }
    int status, sig = 0;
    rlc_lock_on_lost(l, on_lost, (void *)(intptr_t)r.lost_pipe[1]);
    int rc = acquire(&r, &sig);
    if (sig) {
        status = CLI_SIGNAL_BASE + sig; /* as if the signal had ended us */
    } else if (rc != RLC_OK) {
        if (rc == RLC_NOT_ACQUIRED) {
            cli_err("lock '%s' is busy: another owner holds it", a->name);
            status = a->conflict_exit;
        } else {
            cli_err_lock("cannot lock", a->name, rlc_errmsg());
            status = cli_status_exit(rc);
        }
    } else if ((status = start_cmd(&r, orig_mask)) == 0) {
        supervise(&r);
        child_done(&r.ch);
        status = finish(&r);
    } else {
        rlc_lock_release(l); /* CMD never ran */
    }
    rlc_lock_on_lost(l, NULL, NULL);
    close(r.sigfd);
    /* The lost pipe stays open until exit: a callback already running on
     * the callback thread may still write to it (rlc_lock_free() in main
     * waits for that), and a closed or reused descriptor must not get it. */
    return status;
}
