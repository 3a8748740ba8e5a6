/*
 * rt_serve.c - real redis-server processes for the runtime suites, started
 * and stopped by tests/support/redis_server.c (free loopback port, nothing
 * on disk, PR_SET_PDEATHSIG so a server never outlives this process).
 *
 *   rt_serve N REPORT_PATH
 *
 * Starts N servers, appends one line "uri1,uri2,... PID" to REPORT_PATH (a
 * FIFO the caller reads), then waits for SIGTERM or SIGINT (at most an hour)
 * and stops its servers by pid. The caller stops it with kill -TERM PID.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"

#define MAX_SERVERS 8

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[1]) < 1 || atoi(argv[1]) > MAX_SERVERS) {
        fprintf(stderr, "usage: rt_serve N(1-%d) REPORT_PATH\n", MAX_SERVERS);
        return 2;
    }
    int n = atoi(argv[1]);
    struct redis_server s[MAX_SERVERS];
    char uris[MAX_SERVERS * 64] = "";
    int started = 0, rc = 0;
    for (; started < n; started++) {
        if (rs_start(&s[started], NULL) != 0) {
            fprintf(stderr, "rt_serve: redis-server %d did not start\n", started + 1);
            rc = 1;
            goto out;
        }
        if (started)
            strcat(uris, ",");
        strcat(uris, s[started].uri);
    }
    /* Blocked only now: a forked server would inherit the mask and ignore
     * rs_stop's SIGTERM. A stop signal before this point kills us, and
     * PR_SET_PDEATHSIG takes the servers along. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigprocmask(SIG_BLOCK, &stop, NULL);
    FILE *report = fopen(argv[2], "a");
    if (!report || fprintf(report, "%s %d\n", uris, (int)getpid()) < 0 || fclose(report) != 0) {
        fprintf(stderr, "rt_serve: cannot write %s\n", argv[2]);
        rc = 1;
        goto out;
    }
    struct timespec limit = {3600, 0};
    if (sigtimedwait(&stop, NULL, &limit) < 0) {
        fprintf(stderr, "rt_serve: not stopped within an hour; stopping\n");
        rc = 1;
    }
out:
    while (started > 0)
        rs_stop(&s[--started]);
    return rc;
}
