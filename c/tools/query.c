/*
 * query.c - "status NAME" and "release --force NAME".
 *
 * status prints what any client can see: whether the lock is held (by a
 * quorum, over N nodes) and its PTTL. It does not list the holders' fields:
 * the public API has no call for that, and the tool uses nothing else.
 */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"

int cli_status(rlc_lock *l, const struct cli_args *a)
{
    int locked = 0;
    int64_t pttl = -2;
    int rc = rlc_lock_is_locked(l, &locked);
    if (rc == RLC_OK && locked)
        rc = rlc_lock_ttl_ms(l, &pttl);
    if (rc != RLC_OK) {
        cli_err("cannot query lock '%s': %s", a->name, rlc_errmsg());
        return cli_status_exit(rc);
    }
    printf("name: %s\n", a->name);
    printf("locked: %s\n", locked ? "yes" : "no");
    /* Redis's meaning: -2 no such key, -1 no expiry (not a lock we wrote). */
    if (locked)
        printf("pttl_ms: %" PRId64 "\n", pttl);
    return locked ? 0 : 1;
}

int cli_release(rlc_lock *l, const struct cli_args *a)
{
    int was = 0;
    int rc = rlc_lock_is_locked(l, &was);
    if (rc == RLC_OK)
        rc = rlc_lock_force_release(l);
    if (rc != RLC_OK) {
        cli_err("cannot release lock '%s': %s", a->name, rlc_errmsg());
        return cli_status_exit(rc);
    }
    printf(was ? "released lock '%s'\n" : "lock '%s' was not held\n", a->name);
    return 0;
}
