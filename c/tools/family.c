/*
 * family.c - "redlockc --read|--write|--fair|--permits N|--name A --name B
 * ... -- CMD": CMD under a lock of the family (docs/FAMILY.md).
 *
 *   redlockc --read  config -- ./reader.sh          many at once
 *   redlockc --write config -- ./writer.sh          alone
 *   redlockc --fair  queue  -- ./job.sh             first come, first served
 *   redlockc --permits 1 --total 3 pool -- ./x.sh   at most 3 at once
 *   redlockc --name a --name b -- ./both.sh         a and b, all or none
 *
 * main() hands the whole command line here when one of these options stands
 * before NAME (cli_is_family). They are taken out, the rest goes through the
 * ordinary parser (cli_parse), so --wait, --lease, --kill-after, --nodes,
 * --options and --verbose mean what they mean for a plain lock.
 *
 * Waiting is one library call, as for a plain lock (run.c): a signal ends
 * it at once through the handle's cancel (rlc_rwlock_cancel, ...; see
 * sigcancel.c), and the cancelled acquire keeps nothing: a fair waiter
 * leaves the queue, a waiting writer's hold on new readers goes. A
 * permit-expirable semaphore waits in calls of at most SLICE_MS: its lease
 * began on the server within the call that took it, and the end of the
 * lease stops CMD.
 *
 * Losing the hold: a multi-name lock hears on_lost of each name; a read,
 * write or fair hold is looked at every LOOK_MS (its hold count drops to 0
 * when the watchdog finds it gone: no network I/O); a fixed --lease, and
 * every expirable permit, ends at its deadline. Then CMD is stopped as for a
 * plain lock (exit 79).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "sigcancel.h"

#define SLICE_MS 250
#define LOOK_MS 200
#define MAX_NAMES 64

extern char **environ;

enum fmode { F_NONE, F_READ, F_WRITE, F_FAIR, F_PERMITS, F_MULTI };

struct fam {
    enum fmode mode;
    int64_t permits, total;
    const char *names[MAX_NAMES];
    int nnames;
    const struct cli_args *a;
    rlc_rwlock *rw;
    rlc_fairlock *fair;
    rlc_semaphore *sem;
    rlc_psemaphore *psem;
    rlc_multilock *multi;
    char permit_id[RLC_PERMIT_ID_LEN + 1];
    char msg[256];        /* rlc_errmsg() of a failed acquire */
    int64_t slice_start;  /* when the acquire that took it began */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int ours(const char *arg)
{
    return strcmp(arg, "--read") == 0 || strcmp(arg, "--write") == 0 ||
           strcmp(arg, "--fair") == 0 || strncmp(arg, "--permits", 9) == 0 ||
           strncmp(arg, "--total", 7) == 0 || strncmp(arg, "--name", 6) == 0;
}

/* Options of the main parser whose value is the next word. */
static int takes_value(const char *arg)
{
    static const char *const with_value[] = {"--wait", "--lease", "--kill-after", "--nodes",
                                             "--options", "-w", "-l", "-k"};
    for (size_t i = 0; i < sizeof with_value / sizeof with_value[0]; i++)
        if (strcmp(arg, with_value[i]) == 0)
            return 1;
    return 0;
}

int cli_is_family(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-' || strcmp(argv[i], "--") == 0)
            return 0;
        if (ours(argv[i]))
            return 1;
        i += takes_value(argv[i]);
    }
    return 0;
}

static int usage(const char *fmt, const char *what)
{
    fputs("redlockc: ", stderr);
    fprintf(stderr, fmt, what);
    fputs("\nTry 'redlockc --help'.\n", stderr);
    return CLI_USAGE;
}

static int count_arg(const char *opt, const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long n = v ? strtoll(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || n < 1 || n > (1LL << 40))
        return usage("%s wants a whole number from 1 to 2^40", opt);
    *out = n;
    return 0;
}

/* One of ours at argv[*i]: noted in f; *i moves past its value. */
static int take(struct fam *f, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const char *val = eq ? eq + 1 : NULL;
    enum fmode m = F_NONE;
    if (len == 6 && strncmp(arg, "--read", 6) == 0)
        m = F_READ;
    else if (len == 7 && strncmp(arg, "--write", 7) == 0)
        m = F_WRITE;
    else if (len == 6 && strncmp(arg, "--fair", 6) == 0)
        m = F_FAIR;
    else if ((len == 9 && strncmp(arg, "--permits", 9) == 0) ||
             (len == 7 && strncmp(arg, "--total", 7) == 0) ||
             (len == 6 && strncmp(arg, "--name", 6) == 0)) {
        if (!val && *i + 1 < argc)
            val = argv[++*i];
        if (!val)
            return usage("option %s wants a value", arg);
        if (arg[2] == 'n') {
            if (!*val)
                return usage("%s", "--name wants a lock name");
            if (f->nnames == MAX_NAMES)
                return usage("at most %s names", "64");
            f->names[f->nnames++] = val;
            return 0;
        }
        if (arg[2] == 't')
            return count_arg("--total", val, &f->total);
        m = F_PERMITS;
        if (count_arg("--permits", val, &f->permits))
            return CLI_USAGE;
    } else {
        return usage("unknown option %s", arg);
    }
    if (val && m != F_PERMITS)
        return usage("%s takes no value", arg);
    if (f->mode != F_NONE && f->mode != m)
        return usage("%s", "--read, --write, --fair and --permits exclude each other");
    f->mode = m;
    return 0;
}

/* argv without our options; with --name, the first name as NAME. */
static int strip(struct fam *f, int argc, char **argv, char **out, int *outc)
{
    int n = 0, i;
    out[n++] = argv[0];
    for (i = 1; i < argc; i++) {
        if (argv[i][0] != '-' || strcmp(argv[i], "--") == 0)
            break;
        if (ours(argv[i])) {
            int rc = take(f, argc, argv, &i);
            if (rc)
                return rc;
            continue;
        }
        out[n++] = argv[i];
        if (takes_value(argv[i]) && i + 1 < argc)
            out[n++] = argv[++i];
    }
    if (f->nnames > 0) {
        if (f->mode != F_NONE)
            return usage("%s", "--name (several names) goes with a plain lock only");
        out[n++] = (char *)f->names[0];
        out[n++] = "--";
        if (i < argc && strcmp(argv[i], "--") == 0)
            i++;
        f->mode = F_MULTI;
    } else if (f->total && f->mode != F_PERMITS) {
        return usage("%s", "--total goes with --permits");
    }
    for (; i < argc; i++)
        out[n++] = argv[i];
    out[n] = NULL;
    *outc = n;
    return 0;
}

/* ---- the family's verbs -------------------------------------------------------- */

static int fam_acquire(struct fam *f, int64_t wait)
{
    int64_t lease = f->a->lease_ms;
    switch (f->mode) {
    case F_READ: return rlc_rwlock_read_acquire(f->rw, wait, lease);
    case F_WRITE: return rlc_rwlock_write_acquire(f->rw, wait, lease);
    case F_FAIR: return rlc_fairlock_acquire(f->fair, wait, lease);
    case F_MULTI: return rlc_multilock_acquire(f->multi, wait, lease);
    default:
        if (f->psem)
            return rlc_psemaphore_acquire(f->psem, f->permits, wait, lease, f->permit_id);
        return rlc_semaphore_acquire(f->sem, f->permits, wait);
    }
}

static int fam_release(struct fam *f)
{
    switch (f->mode) {
    case F_READ: return rlc_rwlock_read_release(f->rw);
    case F_WRITE: return rlc_rwlock_write_release(f->rw);
    case F_FAIR: return rlc_fairlock_release(f->fair);
    case F_MULTI: return rlc_multilock_release(f->multi);
    default:
        if (f->psem)
            return rlc_psemaphore_release(f->psem, f->permit_id);
        return rlc_semaphore_release(f->sem, f->permits);
    }
}

/* 1 while the hold is still ours as far as the library knows (no I/O). */
static int fam_held(struct fam *f)
{
    int64_t n = 1;
    if (f->mode == F_READ || f->mode == F_WRITE)
        rlc_rwlock_hold_count(f->rw, f->mode == F_WRITE, &n);
    else if (f->mode == F_FAIR)
        rlc_fairlock_hold_count(f->fair, &n);
    return n > 0;
}

static int fam_new(struct fam *f, rlc_client *c)
{
    const char *name = f->a->name;
    /* An explicit owner: the hold is taken on the acquiring thread and
     * released on this one (the field is "<client uuid>:<pid>"). */
    uint64_t owner = (uint64_t)getpid();
    int set, rc;
    switch (f->mode) {
    case F_READ:
    case F_WRITE: return rlc_rwlock_new(c, name, owner, &f->rw);
    case F_FAIR: return rlc_fairlock_new(c, name, owner, 0, &f->fair);
    case F_MULTI: return rlc_multilock_new(c, f->names, f->nnames, owner, &f->multi);
    default:
        if (f->a->lease_ms > 0) {
            rc = rlc_psemaphore_new(c, name, &f->psem);
            if (rc == RLC_OK && f->total)
                rc = rlc_psemaphore_try_set_permits(f->psem, f->total, &set);
        } else {
            rc = rlc_semaphore_new(c, name, &f->sem);
            if (rc == RLC_OK && f->total)
                rc = rlc_semaphore_try_set_permits(f->sem, f->total, &set);
        }
        return rc;
    }
}

static void fam_free(struct fam *f)
{
    rlc_rwlock_free(f->rw);
    rlc_fairlock_free(f->fair);
    rlc_semaphore_free(f->sem);
    rlc_psemaphore_free(f->psem);
    rlc_multilock_free(f->multi);
}

/* ---- acquiring: one call that a signal cancels (sigcancel.c) ---------------------- */

static int wait_call(void *handle, int64_t wait)
{
    return fam_acquire(handle, wait);
}

static int cancel_call(void *handle)
{
    struct fam *f = handle;
    switch (f->mode) {
    case F_READ:
    case F_WRITE: return rlc_rwlock_cancel(f->rw);
    case F_FAIR: return rlc_fairlock_cancel(f->fair);
    case F_MULTI: return rlc_multilock_cancel(f->multi);
    default: return f->psem ? rlc_psemaphore_cancel(f->psem) : rlc_semaphore_cancel(f->sem);
    }
}

static int is_terminating(int sig)
{
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

/* Reads every pending signal (no CMD yet to pass them to); returns the last
 * terminating one, else 0. */
static int drain_signals(int sigfd)
{
    struct signalfd_siginfo si;
    int sig = 0;
    while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si)
        if (is_terminating((int)si.ssi_signo))
            sig = (int)si.ssi_signo;
    return sig;
}

/* Returns RLC_OK, a status, or CLI_SIGNAL_BASE + N (> 128) after a
 * terminating signal (then nothing is held). As run.c: a signal cancels the
 * wait; one that does not end redlockc lets it go on (a fair waiter then
 * queues again, at the back). Bounded by the deadline, or by "forever",
 * which --wait asked for. */
static int acquire(struct fam *f, int sigfd)
{
    struct sigcancel_wait w = {wait_call, cancel_call, f};
    int64_t wait = f->a->wait_ms, deadline = now_ms() + wait;
    for (;;) {
        int64_t left = wait < 0 ? -1 : deadline - now_ms();
        if (wait >= 0 && left < 0)
            left = 0;
        if (f->psem && (left < 0 || left > SLICE_MS))
            left = SLICE_MS; /* see the top of this file */
        f->slice_start = now_ms();
        int rc = sigcancel_wait(&w, sigfd, left, 0, NULL, NULL);
        snprintf(f->msg, sizeof f->msg, "%s", rc < 0 ? rlc_errmsg() : "");
        int sig = drain_signals(sigfd);
        if (sig) {
            if (rc == RLC_OK)
                fam_release(f); /* taken as the signal came: give it back */
            return CLI_SIGNAL_BASE + sig;
        }
        if (rc == RLC_E_CANCELED || (rc == RLC_NOT_ACQUIRED && f->psem && left != 0))
            continue;
        if (rc != RLC_NOT_ACQUIRED || (wait >= 0 && now_ms() >= deadline))
            return rc;
    }
}

/* ---- running CMD ------------------------------------------------------------------ */

static void on_lost(rlc_lock *l, int reason, void *user)
{
    (void)l;
    int fd = (int)(intptr_t)user;
    if (write(fd, &reason, sizeof reason) < 0) {
        /* non-blocking, nearly empty */
    }
}

static char **env_with(const char *label)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "REDLOCKC_LOCK=", 14) != 0)
            env[k++] = environ[i];
    if (asprintf(&env[k], "REDLOCKC_LOCK=%s", label) < 0) {
        free(env);
        return NULL;
    }
    return env;
}

struct sup {
    struct child ch;
    int lost;
    int64_t kill_at, lease_end;
};

static void begin_stop(struct sup *s, const struct cli_args *a, int reason, const char *why)
{
    if (s->lost)
        return;
    s->lost = reason;
    cli_err("lock '%s' was lost (%s); stopping CMD", a->name, why);
    if (a->kill_after_ms == 0) {
        child_signal(&s->ch, SIGKILL);
        return;
    }
    child_signal(&s->ch, SIGTERM);
    child_signal(&s->ch, SIGCONT);
    s->kill_at = now_ms() + a->kill_after_ms;
}

static void supervise(struct fam *f, struct sup *s, int sigfd, int lost_fd)
{
    const struct cli_args *a = f->a;
    struct pollfd pf[2] = {{sigfd, POLLIN, 0}, {lost_fd, POLLIN, 0}};
    for (;;) {
        child_poll(&s->ch);
        if (s->ch.ended)
            return;
        int64_t next = now_ms() + LOOK_MS;
        if (s->kill_at >= 0 && s->kill_at < next)
            next = s->kill_at;
        if (s->lease_end >= 0 && !s->lost && s->lease_end < next)
            next = s->lease_end;
        int64_t left = next - now_ms();
        poll(pf, 2, left < 0 ? 0 : (int)left);
        int reason;
        if (read(lost_fd, &reason, sizeof reason) == (ssize_t)sizeof reason)
            begin_stop(s, a, reason, rlc_strerror(reason));
        struct signalfd_siginfo si;
        while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si)
            if (si.ssi_signo != SIGCHLD)
                child_signal(&s->ch, (int)si.ssi_signo);
        int64_t now = now_ms();
        if (!fam_held(f))
            begin_stop(s, a, RLC_E_LOST, "the watchdog found it gone");
        if (s->lease_end >= 0 && now >= s->lease_end)
            begin_stop(s, a, RLC_E_LOST, "its fixed --lease ended");
        if (s->kill_at >= 0 && now >= s->kill_at) {
            child_signal(&s->ch, SIGKILL);
            s->kill_at = -1;
        }
    }
}

static int64_t validity_ms(struct fam *f)
{
    int64_t v = f->a->lease_ms;
    if (f->mode == F_READ || f->mode == F_WRITE)
        rlc_rwlock_validity_ms(f->rw, f->mode == F_WRITE, &v);
    else if (f->mode == F_FAIR)
        rlc_fairlock_validity_ms(f->fair, &v);
    else if (f->mode == F_MULTI) {
        rlc_lock *l = NULL;
        if (rlc_multilock_lock_at(f->multi, 0, &l) == RLC_OK)
            rlc_lock_validity_ms(l, &v);
    }
    return v;
}

static int run_cmd(struct fam *f, int sigfd, const sigset_t *orig)
{
    const struct cli_args *a = f->a;
    struct sup s = {.kill_at = -1, .lease_end = -1};
    int lost_pipe[2] = {-1, -1};
    if (pipe2(lost_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
        cli_err("pipe: %s", strerror(errno));
        fam_release(f);
        return CLI_INTERNAL;
    }
    int n = 0;
    if (f->multi && rlc_multilock_size(f->multi, &n) == RLC_OK)
        for (int i = 0; i < n; i++) {
            rlc_lock *l = NULL;
            if (rlc_multilock_lock_at(f->multi, i, &l) == RLC_OK)
                rlc_lock_on_lost(l, on_lost, (void *)(intptr_t)lost_pipe[1]);
        }
    if (f->psem) /* the permit's lease began on the server during that call */
        s.lease_end = f->slice_start + a->lease_ms - a->lease_ms / 100;
    else if (a->lease_ms > 0)
        s.lease_end = now_ms() + validity_ms(f);
    if (a->verbose)
        cli_err("acquired '%s'%s%s", a->name, f->psem ? ", permit " : "",
                f->psem ? f->permit_id : "");
    char label[512];
    if (f->multi) {
        size_t k = 0;
        label[0] = '\0';
        for (int i = 0; i < f->nnames && k + 1 < sizeof label; i++)
            k += (size_t)snprintf(label + k, sizeof label - k, "%s%s", i ? "," : "", f->names[i]);
    } else {
        snprintf(label, sizeof label, "%s", a->name);
    }
    char **env = env_with(label);
    int status = env ? child_start(&s.ch, a->cmd, env, orig) : CLI_INTERNAL;
    if (env) {
        size_t k = 0;
        while (env[k])
            k++;
        free(env[k - 1]);
        free(env);
    }
    if (status != 0) {
        fam_release(f); /* CMD never ran */
    } else {
        supervise(f, &s, sigfd, lost_pipe[0]);
        child_done(&s.ch);
        status = child_exit_status(&s.ch);
        int rc = fam_release(f);
        if (s.lost) {
            cli_err("CMD ended with status %d after the lock was lost", status);
            status = CLI_LOST;
        } else if (rc == RLC_E_LOST || rc == RLC_E_NOT_OWNER) {
            cli_err("'%s' was lost while CMD ran: %s", a->name, rlc_errmsg());
            status = CLI_LOST;
        } else if (rc != RLC_OK) {
            cli_err("could not release '%s' (%s)", a->name, rlc_errmsg());
        } else if (a->verbose) {
            cli_err("released '%s'", a->name);
        }
    }
    if (n > 0)
        for (int i = 0; i < n; i++) {
            rlc_lock *l = NULL;
            if (rlc_multilock_lock_at(f->multi, i, &l) == RLC_OK)
                rlc_lock_on_lost(l, NULL, NULL);
        }
    /* lost_pipe stays open until exit, as in run.c */
    return status;
}

int cli_family(int argc, char **argv)
{
    static struct fam f; /* zeroed; one per process */
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) {
        cli_err("out of memory");
        return CLI_INTERNAL;
    }
    int nargs = 0, rc = strip(&f, argc, argv, args, &nargs);
    if (rc)
        return rc;
    struct cli_args a;
    if ((rc = cli_parse(nargs, args, &a)) >= 0)
        return rc;
    if (a.command != CLI_RUN)
        return usage("%s", "--read, --write, --fair, --permits and --name run a command: "
                           "status and release take a plain lock");
    f.a = &a;

    sigset_t block, orig;
    sigemptyset(&block);
    for (int i = 0; i < cli_nforwarded; i++)
        sigaddset(&block, cli_forwarded[i]);
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &block, &orig);
    int sigfd = signalfd(-1, &block, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd < 0) {
        cli_err("signalfd: %s", strerror(errno));
        return CLI_INTERNAL;
    }

    rlc_client *c = NULL;
    rc = rlc_client_new(&c, a.nodes, a.options);
    if (rc != RLC_OK) {
        cli_err("bad --nodes or --options: %s", rlc_errmsg());
        return cli_status_exit(rc);
    }
    if ((rc = fam_new(&f, c)) != RLC_OK) {
        cli_err("%s", rlc_errmsg());
        fam_free(&f);
        rlc_client_free(c);
        return cli_status_exit(rc);
    }
    int status;
    rc = acquire(&f, sigfd);
    if (rc > CLI_SIGNAL_BASE) {
        status = rc;
    } else if (rc != RLC_OK) {
        if (rc == RLC_NOT_ACQUIRED)
            cli_err("'%s' is busy: the wait ran out", a.name);
        else
            cli_err("cannot take '%s': %s", a.name, f.msg);
        status = cli_status_exit(rc);
    } else {
        status = run_cmd(&f, sigfd, &orig);
    }
    fam_free(&f);
    rlc_client_free(c);
    free(args);
    return status;
}
