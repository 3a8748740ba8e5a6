/*
 * query.c - "release --force NAME" (status and watch are in inspect.c).
 */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"

int cli_release(rlc_lock *l, const struct cli_args *a)
{
    int was = 0;
    int rc = rlc_lock_is_locked(l, &was);
    if (rc == RLC_OK)
        rc = rlc_lock_force_release(l);
    if (rc != RLC_OK) {
        cli_err_lock("cannot release lock", a->name, rlc_errmsg());
        return cli_status_exit(rc);
    }
    printf(was ? "released lock '%s'\n" : "lock '%s' was not held\n", a->name);
    return 0;
}
