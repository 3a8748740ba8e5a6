/*
 * counter.c - the C side of the cross-runtime mutual exclusion test (see
 * tests/runtimes/cross.sh). Every participant, whatever its language, runs
 * the same critical section on a file counter shared through DIR:
 *
 *   create DIR/inside with O_EXCL   (already there: someone else is inside)
 *   read DIR/counter, sleep 1 ms, write value+1 to DIR/counter.<label>,
 *   rename it over DIR/counter; remove DIR/inside
 *
 * Without mutual exclusion the sleep makes lost updates (and O_EXCL
 * failures) near certain, so the final count and the overlap count show it.
 *
 *   counter URI LOCK DIR ITERATIONS LABEL READY   take part, thread owner
 *   counter gate URI LOCK READY                   hold LOCK until SIGUSR1
 *
 * Each writes one line to READY (a FIFO the script reads) when it is about to
 * contend ("ready LABEL") or, for the gate, holds the lock ("held gate").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <redlockc.h>

static int say(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    int ok = fd >= 0 && write(fd, line, strlen(line)) == (ssize_t)strlen(line);
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

static rlc_lock *open_lock(const char *uri, const char *name, rlc_client **c)
{
    rlc_lock *l = NULL;
    if (rlc_client_new(c, uri, NULL) != RLC_OK || rlc_lock_new(*c, name, 0, &l) != RLC_OK) {
        fprintf(stderr, "c: cannot open lock %s at %s: %s\n", name, uri, rlc_errmsg());
        return NULL;
    }
    return l;
}

static int gate(const char *uri, const char *name, const char *ready)
{
    sigset_t go;
    sigemptyset(&go);
    sigaddset(&go, SIGUSR1);
    sigprocmask(SIG_BLOCK, &go, NULL);
    rlc_client *c = NULL;
    rlc_lock *l = open_lock(uri, name, &c);
    int rc;
    if (!l || (rc = rlc_lock_acquire(l, 0, -1)) != RLC_OK) {
        fprintf(stderr, "gate: could not take %s\n", name);
        return 1;
    }
    say(ready, "held gate\n");
    struct timespec limit = {120, 0};
    if (sigtimedwait(&go, NULL, &limit) < 0)
        fprintf(stderr, "gate: no SIGUSR1 within 120 s; releasing\n");
    rc = rlc_lock_release(l);
    rlc_lock_free(l);
    rlc_client_free(c);
    return rc == RLC_OK ? 0 : 1;
}

/* The critical section; returns 1 if someone else was inside, -1 on error. */
static int critical(const char *dir, const char *label)
{
    char inside[PATH_MAX], counter[PATH_MAX], tmp[PATH_MAX];
    snprintf(inside, sizeof inside, "%s/inside", dir);
    snprintf(counter, sizeof counter, "%s/counter", dir);
    snprintf(tmp, sizeof tmp, "%s/counter.%s", dir, label);
    int marker = open(inside, O_CREAT | O_EXCL | O_WRONLY, 0644);
    int overlap = marker < 0 && errno == EEXIST;
    if (marker < 0 && !overlap)
        return -1;
    long value = 0;
    FILE *f = fopen(counter, "r");
    if (f) {
        if (fscanf(f, "%ld", &value) != 1)
            value = 0;
        fclose(f);
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
    f = fopen(tmp, "w");
    if (!f || fprintf(f, "%ld\n", value + 1) < 0 || fclose(f) != 0 || rename(tmp, counter) != 0)
        return -1;
    if (marker >= 0) {
        close(marker);
        unlink(inside);
    }
    return overlap;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "gate") == 0)
        return gate(argv[2], argv[3], argv[4]);
    if (argc != 7) {
        fprintf(stderr, "usage: counter URI LOCK DIR ITERATIONS LABEL READY | gate URI LOCK READY\n");
        return 2;
    }
    const char *uri = argv[1], *name = argv[2], *dir = argv[3], *label = argv[5];
    int iterations = atoi(argv[4]), overlaps = 0, errors = 0;
    rlc_client *c = NULL;
    rlc_lock *l = open_lock(uri, name, &c);
    if (!l)
        return 1;
    char line[128];
    snprintf(line, sizeof line, "ready %s\n", label);
    say(argv[6], line);
    for (int i = 0; i < iterations; i++) {
        int rc = rlc_lock_acquire(l, 60000, -1);
        if (rc != RLC_OK) {
            fprintf(stderr, "%s: acquire %d: %s (%s)\n", label, i, rlc_strerror(rc), rlc_errmsg());
            errors++;
            continue;
        }
        int r = critical(dir, label);
        overlaps += r == 1;
        errors += r < 0;
        if ((rc = rlc_lock_release(l)) != RLC_OK) {
            fprintf(stderr, "%s: release %d: %s (%s)\n", label, i, rlc_strerror(rc), rlc_errmsg());
            errors++;
        }
    }
    printf("%s iterations=%d overlaps=%d errors=%d\n", label, iterations, overlaps, errors);
    rlc_lock_free(l);
    rlc_client_free(c);
    return overlaps == 0 && errors == 0 ? 0 : 1;
}
