/*
 * args.c - the command line of redlockc, and its --help text.
 *
 * Four forms:
 *   redlockc [OPTIONS] NAME [--] CMD [ARGS...]
 *   redlockc [OPTIONS] status [--json] NAME
 *   redlockc [OPTIONS] watch NAME
 *   redlockc [OPTIONS] release --force NAME
 * Options before NAME are ours; everything after NAME belongs to CMD, so
 * the first pass stops at the first word that is not an option ("+").
 * "status", "watch" and "release" are subcommands unless "--" stands right before
 * them or right after them, which is how to run a command under a lock
 * that happens to be called "status". Subcommands take their options
 * anywhere ("release NAME --force" too).
 *
 * The help text is the reference that redlockc.1 and the README copy; a
 * test checks that they name the same options and exit codes.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DEFAULT_NODES "redis://127.0.0.1:6379"
#define DEFAULT_KILL_AFTER_MS 5000
#define MAX_SECS 1e9 /* ~31 years: anything longer is a typo */

static const char usage_text[] =
    "Usage: redlockc [OPTIONS] NAME [--] CMD [ARGS...]\n"
    "       redlockc [OPTIONS] status [--json] NAME\n"
    "       redlockc [OPTIONS] watch NAME\n"
    "       redlockc [OPTIONS] release --force NAME\n"
    "       redlockc [OPTIONS] --name NAME --name NAME... [--] CMD [ARGS...]\n"
    "       redlockc [--nodes URI] fenced-set KEY VALUE --token N\n"
    "\n"
    "Runs CMD while holding the distributed lock NAME on Redis (renewed by a\n"
    "watchdog), releases it when CMD exits, and exits with CMD's status.\n"
    "  status NAME           print whether NAME is locked and the lease it has left\n"
    "                        (on a quorum of nodes), as the library's queries say\n"
    "  watch NAME            follow NAME live (taken, free, its lease set again),\n"
    "                        until SIGINT or SIGTERM\n"
    "  release --force NAME  delete the lock NAME whoever holds it\n"
    "\n"
    "DURATION: a number with a unit, 500ms, 5s, 2m, 1h (fractions allowed); a\n"
    "bare number is in seconds.\n"
    "\n"
    "Options:\n"
    "  -w, --wait DURATION   wait at most this long for the lock; 0: fail at once\n"
    "                        if it is busy; default: forever. Redis unreachable\n"
    "                        meanwhile is retried (with backoff) until it ends\n"
    "  -n, --nonblock        fail at once if the lock is busy (--wait 0)\n"
    "  -E, --conflict-exit-code CODE\n"
    "                        exit with CODE (0-255) when the lock is busy\n"
    "                        (default 75)\n"
    "  -l, --lease DURATION  fixed lease, not renewed; if CMD still runs when it\n"
    "                        ends, that is a lost lock; default: watchdog\n"
    "      --nodes URIS      redis://[[user]:password@]host[:port][/db] or\n"
    "                        unix://[[user]:password@]/path.sock[?db=N] or\n"
    "                        redis-sentinel://[[user]:password@]host:port\n"
    "                        [,host:port...]/master[/db] or\n"
    "                        redis-cluster://[[user]:password@]host:port\n"
    "                        [,host:port...] (seed nodes of a cluster),\n"
    "                        comma-separated; 2 or more nodes lock by Redlock;\n"
    "                        default: $REDLOCKC_NODES, else " DEFAULT_NODES "\n"
    "      --options OPTS    library options \"name=value;...\", e.g.\n"
    "                        \"watchdog_timeout_ms=10000;io_timeout_ms=500\"\n"
    "  -k, --kill-after DURATION\n"
    "                        when the lock is lost, CMD's process group gets\n"
    "                        SIGTERM, then SIGKILL this much later (default 5s;\n"
    "                        0: SIGKILL at once)\n"
    "  -f, --force           (release) delete the lock whoever holds it\n"
    "  -j, --json            (status) print one JSON object\n"
    "  -v, --verbose         on stderr: what it waits for and since when,\n"
    "                        connection retries, acquire and release, and the\n"
    "                        library's log\n"
    "  -h, --help            print this help and exit\n"
    "  -V, --version         print the versions and exit\n"
    "Lock family options (before NAME; docs/FAMILY.md):\n"
    "      --read            hold NAME as a reader of a read-write lock\n"
    "      --write           hold NAME as its writer (readers wait; the writer\n"
    "                        waiting holds back new readers)\n"
    "      --fair            a fair lock: waiters get it in arrival order\n"
    "      --permits N       take N permits of the semaphore NAME; with --lease,\n"
    "                        of the permit-expirable semaphore (permits expire)\n"
    "      --total M         (with --permits) set M permits if NAME has none\n"
    "      --name NAME       repeatable, instead of NAME: hold every name, all\n"
    "                        or none (a multi-name lock)\n"
    "\n"
    "CMD runs in its own process group; SIGINT, SIGTERM, SIGHUP, SIGQUIT,\n"
    "SIGUSR1 and SIGUSR2 sent to redlockc are passed on to it. Its environment\n"
    "has REDLOCKC_LOCK (the name) and, with --options fencing=1,\n"
    "REDLOCKC_FENCING_TOKEN (a number that grows with each new holder of the\n"
    "lock; fencing keeps one counter key per name on the server).\n"
    "\n"
    "Exit status:\n"
    "  CMD's     CMD ran to its end holding the lock\n"
    "  128+N     CMD was killed by signal N (also while waiting: redlockc itself)\n"
    "  64        usage: bad option, --nodes or --options\n"
    "  69        unavailable: Redis unreachable, no quorum, auth or server error\n"
    "  70        internal: could not start CMD, out of memory\n"
    "  75        busy: another owner holds the lock and --wait ran out (-E)\n"
    "  79        lost: the lock was lost while CMD ran; CMD was stopped\n"
    "  126       CMD could not be executed\n"
    "  127       CMD was not found\n"
    "  status: 0 locked, 1 not locked; release --force: 0 done (or 64, 69)\n";

void cli_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("redlockc: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void cli_err_lock(const char *what, const char *name, const char *msg)
{
    char quoted[600];
    snprintf(quoted, sizeof quoted, "'%s'", name);
    if (strstr(msg, quoted)) /* the library's message names the lock already */
        cli_err("%s: %s", what, msg);
    else
        cli_err("%s %s: %s", what, quoted, msg);
}

static int usage_error(const char *fmt, const char *what)
{
    fputs("redlockc: ", stderr);
    fprintf(stderr, fmt, what);
    fputs("\nTry 'redlockc --help'.\n", stderr);
    return CLI_USAGE;
}

/* A duration -> milliseconds: a decimal (fractions allowed) with a unit,
 * ms, s, m or h; a bare number is seconds (the unit these options always
 * had). A negative value is allowed only where it means "forever" (--wait). */
static int parse_secs(const char *s, const char *opt, int negative_ok, int64_t *ms)
{
    static const struct { const char *unit; double ms; } units[] = {
        {"", 1000}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double scale = -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (end != s && strcmp(end, units[i].unit) == 0)
            scale = units[i].ms;
    if (errno || end == s || scale < 0 || !isfinite(v) || v * scale > MAX_SECS * 1000.0 ||
        (v < 0 && !negative_ok)) {
        fputs("redlockc: ", stderr);
        fprintf(stderr, "%s wants a duration%s like 500ms, 5s, 2m or 1h (a bare number is "
                "seconds), not '%s'\nTry 'redlockc --help'.\n", opt,
                negative_ok ? "" : " >= 0", s);
        return CLI_USAGE;
    }
    *ms = v < 0 ? -1 : llround(v * scale);
    return 0;
}

static const struct option long_opts[] = {
    {"wait", required_argument, NULL, 'w'},
    {"nonblock", no_argument, NULL, 'n'},
    {"conflict-exit-code", required_argument, NULL, 'E'},
    {"json", no_argument, NULL, 'j'},
    {"lease", required_argument, NULL, 'l'},
    {"nodes", required_argument, NULL, 'N'},
    {"options", required_argument, NULL, 'O'},
    {"kill-after", required_argument, NULL, 'k'},
    {"force", no_argument, NULL, 'f'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

/* One getopt pass; "+" in optstring stops at the first non-option. */
static int parse_options(int argc, char **argv, const char *optstring, struct cli_args *a)
{
    int c, rc;
    opterr = 0; /* our own messages: getopt's would print argv[0] as a path */
    optind = 0; /* GNU: start over, also for the second pass */
    while ((c = getopt_long(argc, argv, optstring, long_opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            if ((rc = parse_secs(optarg, "--wait", 1, &a->wait_ms)))
                return rc;
            break;
        case 'n':
            a->wait_ms = 0;
            break;
        case 'E': {
            char *end;
            errno = 0;
            long code = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || code < 0 || code > 255)
                return usage_error("-E/--conflict-exit-code wants an exit status 0-255, not '%s'",
                                   optarg);
            a->conflict_exit = (int)code;
            break;
        }
        case 'j':
            a->json = 1;
            break;
        case 'l':
            /* One message for every lease that is not positive, 0 and -1 alike. */
            if ((rc = parse_secs(optarg, "--lease", 1, &a->lease_ms)))
                return rc;
            if (a->lease_ms <= 0)
                return usage_error("%s wants a duration > 0", "--lease");
            break;
        case 'k':
            if ((rc = parse_secs(optarg, "--kill-after", 0, &a->kill_after_ms)))
                return rc;
            break;
        case 'N':
            a->nodes = optarg;
            break;
        case 'O':
            a->options = optarg;
            break;
        case 'f':
            a->force = 1;
            break;
        case 'v':
            a->verbose = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case 'V':
            printf("redlockc %s (libredlockc %s)\n", RLC_CLI_VERSION, rlc_version());
            return 0;
        case ':':
            return usage_error("option %s wants a value", argv[optind - 1]);
        default:
            return usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    return -1;
}

static int is_subcommand(char **pos, int npos, int after_dashes)
{
    if (after_dashes || (npos >= 2 && strcmp(pos[1], "--") == 0))
        return 0;
    return strcmp(pos[0], "status") == 0 || strcmp(pos[0], "release") == 0 ||
           strcmp(pos[0], "watch") == 0;
}

/* "status NAME", "release --force NAME": options may stand anywhere. */
static int parse_subcommand(int npos, char **pos, struct cli_args *a)
{
    a->command = strcmp(pos[0], "status") == 0 ? CLI_STATUS
                 : strcmp(pos[0], "watch") == 0  ? CLI_WATCH
                                                 : CLI_RELEASE;
    int rc = parse_options(npos, pos, ":w:l:k:E:nfjvhV", a);
    if (rc >= 0)
        return rc;
    if (optind != npos - 1)
        return usage_error("%s takes exactly one lock name", pos[0]);
    a->name = pos[optind];
    if (a->json && a->command != CLI_STATUS)
        return usage_error("%s", "--json belongs to 'status --json NAME'");
    if (a->command == CLI_RELEASE && !a->force)
        return usage_error("%s",
                           "release deletes the lock whoever holds it: say 'release --force NAME'");
    return -1;
}

int cli_parse(int argc, char **argv, struct cli_args *a)
{
    memset(a, 0, sizeof *a);
    a->wait_ms = -1;
    a->kill_after_ms = DEFAULT_KILL_AFTER_MS;
    a->conflict_exit = CLI_BUSY;

    int rc = parse_options(argc, argv, "+:w:l:k:E:nfjvhV", a);
    if (rc >= 0)
        return rc;
    int npos = argc - optind;
    char **pos = argv + optind;
    int after_dashes = optind > 1 && strcmp(argv[optind - 1], "--") == 0;
    if (npos == 0)
        return usage_error("%s", "missing the lock name");

    if (is_subcommand(pos, npos, after_dashes)) {
        rc = parse_subcommand(npos, pos, a);
    } else {
        a->command = CLI_RUN;
        a->name = pos[0];
        int first = npos >= 2 && strcmp(pos[1], "--") == 0 ? 2 : 1;
        if (first >= npos)
            return usage_error("missing the command to run under lock '%s'", a->name);
        a->cmd = pos + first;
        if (a->force)
            return usage_error("%s", "--force belongs to 'release --force NAME'");
        if (a->json)
            return usage_error("%s", "--json belongs to 'status --json NAME'");
    }
    if (rc >= 0)
        return rc;
    if (!*a->name)
        return usage_error("%s", "the lock name is empty");
    if (!a->nodes || !*a->nodes)
        a->nodes = getenv("REDLOCKC_NODES");
    if (!a->nodes || !*a->nodes)
        a->nodes = DEFAULT_NODES;
    return -1;
}
