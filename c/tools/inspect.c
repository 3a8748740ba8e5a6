/*
 * inspect.c - "status NAME" and "watch NAME": what an operator wants to see
 * of a lock, asked through the library's queries.
 *
 * Both ask what the library's own calls decide, on the connections the
 * library makes, so they work on every URI form it takes (redis://,
 * rediss://, unix://, redis-sentinel://, redis-cluster://, N masters):
 *   rlc_lock_is_locked   locked or not (over N nodes: on a quorum)
 *   rlc_lock_ttl_ms      the lease left, as a quorum of nodes still has it
 *                        (-1 no expiry, -2 no key)
 * Nothing is ever written. The holders, the fencing counter and the waiters
 * are not shown: no public query reads them (a holder's own handle knows
 * its token: rlc_lock_fencing_token).
 *
 * watch asks the same two every WATCH_POLL_MS and prints a line for each
 * change: held, free, the lease set again (a renewal, an extend, or a new
 * holder that took the lock between two looks: these are not told apart),
 * or the servers not answering, until SIGINT, SIGTERM or SIGHUP.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define WATCH_POLL_MS 100

/* What the queries said of the lock at one look. */
struct look {
    int rc;         /* RLC_OK, or why the servers could not be asked */
    char err[512];  /* rc's message */
    int locked;
    int64_t pttl;   /* -2 no key, -1 no expiry */
};

static void look_at(rlc_lock *l, struct look *s)
{
    memset(s, 0, sizeof *s);
    s->pttl = -2;
    s->rc = rlc_lock_is_locked(l, &s->locked);
    if (s->rc == RLC_OK)
        s->rc = rlc_lock_ttl_ms(l, &s->pttl);
    if (s->rc != RLC_OK)
        snprintf(s->err, sizeof s->err, "%s", rlc_errmsg());
}

/* JSON string: the bytes as they are, with the escapes JSON requires. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

int cli_status(rlc_lock *l, const struct cli_args *a)
{
    struct look s;
    look_at(l, &s);
    if (s.rc != RLC_OK) {
        cli_err_lock("cannot query lock", a->name, s.err);
        return cli_status_exit(s.rc);
    }
    if (a->json) {
        printf("{\"name\":");
        json_str(stdout, a->name);
        printf(",\"locked\":%s,\"pttl_ms\":%" PRId64 "}\n", s.locked ? "true" : "false", s.pttl);
    } else {
        printf("name: %s\nlocked: %s\n", a->name, s.locked ? "yes" : "no");
        if (s.pttl != -2)
            printf("pttl_ms: %" PRId64 "\n", s.pttl);
    }
    return s.locked ? 0 : 1;
}

/* ---- watch ------------------------------------------------------------- */

static void stamp(char *buf, size_t len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, len, "%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03ld", ts.tv_nsec / 1000000);
}

/* The line for look s after look was, or "" when nothing changed that an
 * operator would want a line for (the lease running down is not). */
static void change(const struct look *was, const struct look *s, bool first, char *buf,
                   size_t len)
{
    buf[0] = '\0';
    if (s->rc != RLC_OK) {
        if (first || was->rc != s->rc || strcmp(was->err, s->err) != 0)
            snprintf(buf, len, "cannot ask: %s", s->err);
        return;
    }
    bool was_held = !first && was->rc == RLC_OK && was->locked;
    if (!s->locked) {
        if (first || was->rc != RLC_OK || was_held)
            snprintf(buf, len, "free");
        return;
    }
    /* A lease only runs down on the server: one that grew was set again. */
    bool again = was_held && s->pttl >= 0 && (was->pttl < 0 || s->pttl > was->pttl);
    bool forever = s->pttl == -1 && (!was_held || was->pttl != -1);
    if (forever)
        snprintf(buf, len, "held, no expiry");
    else if (!was_held)
        snprintf(buf, len, "held, lease %" PRId64 " ms left", s->pttl);
    else if (again)
        snprintf(buf, len, "lease set again: %" PRId64 " ms left (renewed, extended, or a new "
                 "holder)", s->pttl);
}

static void say(const char *what)
{
    char when[32];
    stamp(when, sizeof when);
    printf("%s %s\n", when, what);
    fflush(stdout);
}

int cli_watch(rlc_lock *l, const struct cli_args *a)
{
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    int sigfd = signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0) {
        cli_err("watch: %s", strerror(errno));
        return CLI_INTERNAL;
    }
    char line[700];
    snprintf(line, sizeof line, "watching lock '%s' (Ctrl-C ends)", a->name);
    say(line);
    struct look was, now;
    memset(&was, 0, sizeof was);
    /* Bounded by the signals that end it; the count is a backstop only. */
    for (long turn = 0; turn < 1L << 40; turn++) {
        look_at(l, &now);
        change(&was, &now, turn == 0, line, sizeof line);
        if (line[0])
            say(line);
        was = now;
        struct pollfd pf = {sigfd, POLLIN, 0};
        if (poll(&pf, 1, WATCH_POLL_MS) < 0 && errno != EINTR)
            break;
        struct signalfd_siginfo si;
        if (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
            snprintf(line, sizeof line, "stopped by signal %u", si.ssi_signo);
            say(line);
            break;
        }
    }
    close(sigfd);
    return 0;
}
