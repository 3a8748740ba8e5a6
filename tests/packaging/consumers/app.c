/*
 * app.c - a program outside the tree that uses the installed library the
 * ordinary way: #include <redlockc.h>, link -lredlockc (pkg-config or
 * find_package). It takes a lock on the Redis at argv[1], checks that it is
 * held, releases it, and prints what it saw; exit 0 only if all went right.
 *
 *   app redis://127.0.0.1:PORT LOCKNAME
 */
#include <stdio.h>

#include <redlockc.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: app URI LOCKNAME\n");
        return 2;
    }
    rlc_client *c = NULL;
    rlc_lock *l = NULL;
    int held = -1, rc;
    if ((rc = rlc_client_new(&c, argv[1], NULL)) != RLC_OK ||
        (rc = rlc_lock_new(c, argv[2], 0, &l)) != RLC_OK ||
        (rc = rlc_lock_acquire(l, 0, 10000)) != RLC_OK ||
        (rc = rlc_lock_is_held(l, &held)) != RLC_OK || held != 1 ||
        (rc = rlc_lock_release(l)) != RLC_OK) {
        fprintf(stderr, "app: status %d (%s), held %d: %s\n", rc, rlc_strerror(rc), held,
                rlc_errmsg());
        rc = 1;
    } else {
        printf("app: libredlockc %s: acquired, held=%d, released '%s'\n", rlc_version(), held,
               argv[2]);
    }
    rlc_lock_free(l);
    rlc_client_free(c);
    return rc == RLC_OK ? 0 : 1;
}
