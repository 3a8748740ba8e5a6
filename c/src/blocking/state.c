/*
 * state.c - the calls every module makes on a client (see state.h): names
 * of owners and attempts, and the reference count that keeps a client
 * alive while a call or a handle uses it.
 */
#include <stdio.h>

#include "cmd.h"
#include "engine_driver.h"
#include "error.h"
#include "lock_calls.h"
#include "state.h"

bool client_forked(const rlc_client *c)
{
    return c->fork_generation != owner_fork_generation();
}

void client_ref(rlc_client *c)
{
    atomic_fetch_add(&c->refs, 1);
}

void client_unref(rlc_client *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        c->destroy(c);
}

int client_enter(rlc_client *c)
{
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    if (client_forked(c))
        return rlc_fail(RLC_E_CLOSED,
                        "this client was created before fork(); create a new client in "
                        "the child process");
    client_ref(c);
    atomic_fetch_add(&c->calls, 1); /* before the check: rlc_client_free waits for it */
    if (atomic_load(&c->closed)) {
        atomic_fetch_sub(&c->calls, 1);
        client_unref(c);
        return rlc_fail(RLC_E_CLOSED, "client closed");
    }
    return RLC_OK;
}

void client_leave(rlc_client *c)
{
    atomic_fetch_sub(&c->calls, 1);
    client_unref(c);
}

