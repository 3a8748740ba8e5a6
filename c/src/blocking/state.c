/*
 * state.c - the calls every module makes on a client (see state.h): names
 * of owners and attempts, the connection of an owner, waking the client's
 * thread, and the reference count that keeps a client alive while a call
 * or a handle uses it.
 */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "cmd.h"
#include "engine_driver.h"
#include "error.h"
#include "lock_calls.h"
#include "state.h"

int client_field(const rlc_client *c, uint64_t owner, char *buf, size_t size)
{
    return cmd_tagged_u64(c->uuid, owner ? owner : owner_thread_number(), 10, buf, size);
}

struct mux *client_mux(rlc_client *c, int node, uint64_t owner)
{
    int pool = (int)c->opts.pool_size;
    int slot = pool == 1 ? 0 : (int)(owner % (uint64_t)pool);
    return &c->muxes[node * pool + slot];
}

uint64_t client_new_attempt(rlc_client *c)
{
    return edrv_new_attempt(c->drv);
}

int client_attempt_name(const rlc_client *c, uint64_t attempt, char *buf, size_t size)
{
    return lock_attempt_id(c->uuid, attempt, buf, size);
}

void client_wake_thread(rlc_client *c)
{
    uint64_t one = 1;
    while (write(c->wake_fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

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

