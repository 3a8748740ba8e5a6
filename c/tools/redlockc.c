/*
 * redlockc.c - the command-line tool: like flock(1), but the lock lives in
 * Redis, so it holds across machines.
 *
 *   redlockc nightly-report -- ./make-report.sh
 *
 * main() parses the command line, makes one client and one lock handle and
 * hands them to the subcommand. The signals that redlockc forwards to CMD
 * are blocked here, before the client exists, so that the library's
 * background thread inherits the mask and never takes them: run.c reads them
 * from a signalfd in its main loop instead of in a handler.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

/* -v: the library's own log lines (reconnects, lost holds...), from any
 * thread: one fprintf each, which stdio keeps whole. */
static void log_line(int level, const char *message, void *user)
{
    (void)user;
    static const char *const names[] = {"", "error", "warning", "info", "debug"};
    fprintf(stderr, "redlockc: %s: %s\n", level >= 1 && level <= 4 ? names[level] : "log", message);
}

int main(int argc, char **argv)
{
    if (cli_is_fenced_set(argc, argv))
        return cli_fenced_set(argc, argv);
    if (cli_is_family(argc, argv))
        return cli_family(argc, argv);
    struct cli_args a;
    int rc = cli_parse(argc, argv, &a);
    if (rc >= 0)
        return rc;

    sigset_t block, orig;
    sigemptyset(&block);
    for (int i = 0; i < cli_nforwarded; i++)
        sigaddset(&block, cli_forwarded[i]);
    sigaddset(&block, SIGCHLD);
    /* Taking the terminal back from CMD's group is done from the background:
     * tcsetpgrp() then raises SIGTTOU, unless it is blocked. */
    sigaddset(&block, SIGTTOU);
    if (a.command != CLI_RUN)
        sigemptyset(&block); /* a quick query: Ctrl-C may just end it */
    if (a.command == CLI_WATCH) {
        /* Read from a signalfd by watch, so no thread may take them. */
        sigaddset(&block, SIGINT);
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGHUP);
    }
    pthread_sigmask(SIG_BLOCK, &block, &orig);

    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    rc = rlc_client_new(&c, a.nodes, a.options);
    if (rc != RLC_OK) {
        /* The library's message never holds a password; --nodes itself may,
         * so it is not echoed. */
        cli_err("bad --nodes or --options: %s", rlc_errmsg());
        return cli_status_exit(rc);
    }
    if (a.verbose)
        rlc_client_set_log(c, RLC_LOG_INFO, log_line, NULL);
    rc = rlc_lock_new(c, a.name, 0, &l);
    if (rc != RLC_OK) {
        cli_err("%s", rlc_errmsg());
        rlc_client_free(c);
        return cli_status_exit(rc);
    }

    switch (a.command) {
    case CLI_RUN:
        rc = cli_run(l, &a, &orig);
        break;
    case CLI_STATUS:
        rc = cli_status(l, &a);
        break;
    case CLI_WATCH:
        rc = cli_watch(l, &a);
        break;
    default:
        rc = cli_release(l, &a);
        break;
    }
    rlc_lock_free(l);
    rlc_client_free(c);
    return rc;
}
