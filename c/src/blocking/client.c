/*
 * client.c - a client's life: its nodes, its engine, its end.
 *
 * A client is reference counted: the caller holds one reference, every lock
 * handle one, every call in flight one. So rlc_client_free can close the
 * client while handles (or a binding's garbage collector) still point at
 * it: later calls get RLC_E_CLOSED, nothing dangles.
 *
 * Every lock kind runs in the engine (c/src/engine), driven by the blocking
 * driver (engine_driver.c): acquires, releases, renewals, loss push, the
 * restart guard, queries, force release, fenced writes, the read-write and
 * fair locks, the semaphores. A client runs the driver's two threads (the
 * background leader and the loss thread, where on_lost callbacks run:
 * callbacks.c) and one command connection per node, whatever it uses.
 *
 * This file is the top of the blocking driver's includes: it puts together
 * the modules a client is made of, and none of them includes it (state.h).
 */
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "callbacks.h"
#include "engine_driver.h"
#include "error.h"
#include "handle_levels.h"
#include "metrics.h"
#include "quorum.h"
#include "scripts.h"

const char *rlc_version(void)
{
    return RLC_VERSION_STRING;
}

const char *rlc_client_uuid(const rlc_client *c)
{
    return c ? c->uuid : NULL;
}

static void destroy(rlc_client *c)
{
    bool child = client_forked(c);
    /* the last reference: no call runs in the engine any more; releases
     * and undos still on the wire go out first, for a bounded time (an
     * acquire that lands late must find its tombstone) */
    edrv_free(c->drv, 0); /* rlc_client_free freed it; a forked child's copy here */
    client_drop_lost_queue(c);
    metrics_free(c->metrics);
    if (!child) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->callback_done);
    }
    uri_free_list(c->nodes, c->n_nodes);
    options_free(&c->opts);
    free(c);
}

/* The nodes and options, as the engine reads them too (rlc_engine_new
 * checks what only it needs: TLS and sentinel options, the topologies). */
static int init_nodes(rlc_client *c, const char *nodes, const char *options)
{
    int rc = uri_parse_list(nodes, &c->nodes, &c->n_nodes);
    if (rc != RLC_OK)
        return rc;
    if ((rc = options_parse(options, &c->opts)) != RLC_OK)
        return rc;
    for (int i = 0; i < c->n_nodes; i++) {
        struct node_addr *n = &c->nodes[i];
        if (n->topology == RLC_TOPO_SENTINEL) /* messages name the master */
            snprintf(n->label, sizeof n->label, "master '%.100s' (sentinels %s%s)",
                     n->master_name, n->seeds[0].label, n->n_seeds > 1 ? ",..." : "");
    }
    c->quorum = quorum_of(c->n_nodes);
    c->call_timeout_ms = c->n_nodes == 1 ? c->opts.io_timeout_ms : c->opts.node_timeout_ms;
    return RLC_OK;
}

/* A hold the engine found lost (a renewal's quorum said gone, or loss
 * push), on the driver's loss thread, never under its lock. Every handle
 * through which that owner holds the name hears of it once: its on_lost
 * runs here, after the others found lost before it (callbacks.c); a caller
 * that learned of it from a return code already is not told again. The
 * reference keeps c while a callback frees it (rlc_client_free). */
static void engine_lost(void *user, int kind, const char *name, size_t len, uint64_t owner,
                        int status, const char *message)
{
    rlc_client *c = user;
    (void)message;
    client_ref(c);
    pthread_mutex_lock(&c->mu);
    for (rlc_lock *l = c->handles; l; l = l->hnext) {
        if (l->kind != kind || l->name_len != len || memcmp(l->name, name, len) != 0)
            continue;
        struct handle_hold *h = hh_find(l, owner);
        if (!h || h->count <= 0 || h->lost)
            continue;
        h->lost = status;
        client_queue_lost(c, l, owner, status);
    }
    client_run_lost(c);
    pthread_mutex_unlock(&c->mu);
    metrics_flush_log(c);
    client_unref(c);
}

/* The engine's log lines (under the driver's lock): only queued here. */
static void engine_log(void *user, int level, const char *line)
{
    metrics_log(user, level, line);
}

int rlc_client_new(rlc_client **out, const char *nodes, const char *options)
{
    if (!out)
        return rlc_fail(RLC_E_INVAL, "out pointer is NULL");
    *out = NULL;
    scripts_init();

    rlc_client *c = calloc(1, sizeof *c);
    if (!c)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    atomic_init(&c->refs, 1);
    c->destroy = destroy;
    c->fork_generation = owner_fork_generation();
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->callback_done, NULL);

    int rc = init_nodes(c, nodes, options);
    if (rc != RLC_OK)
        goto fail;
    if (owner_new_uuid(c->uuid) != 0) {
        rc = rlc_fail(RLC_E_NOMEM, "getrandom() failed: %s", strerror(errno));
        goto fail;
    }
    c->metrics = metrics_new(c);
    if (!c->metrics) {
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto fail;
    }
    /* The engine gets the same nodes, options and UUID: one client. */
    if ((rc = edrv_new(&c->drv, nodes, c->uuid, options, engine_lost, c)) != RLC_OK)
        goto fail;
    edrv_set_log(c->drv, engine_log, c);
    *out = c;
    return RLC_OK;

fail:
    destroy(c);
    return rc;
}

void rlc_client_free(rlc_client *c)
{
    if (!c)
        return;
    if (client_forked(c)) {
        /* No thread of the parent's was copied into this process, so only
         * the caller's reference goes; and the parent's sockets are not
         * ours to use, only to close. */
        if (!atomic_exchange(&c->closed, true))
            client_unref(c);
        return;
    }
    if (atomic_exchange(&c->closed, true)) /* freed twice: only the first counts */
        return;
    edrv_close(c->drv); /* its waiters end RLC_E_CLOSED; no new call starts */
    metrics_close(c);
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->stopping, true); /* no queued callback runs after this */
    pthread_mutex_unlock(&c->mu);
    /* Calls still inside end soon: waits were ended (edrv_close), a release
     * or an undo ends at its call deadline. Then the engine lets go, its
     * releases and undos on the wire first, for a bounded time (an acquire
     * that lands late must find its tombstone). A callback running now
     * ends before the engine is freed (its thread is joined), unless it is
     * the one freeing the client. */
    for (int i = 0; i < 60000 && atomic_load(&c->calls) > 0; i++) {
        struct timespec pause = {0, 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (atomic_load(&c->calls) == 0) {
        metrics_keep_engine(c);
        edrv_free(c->drv, c->opts.connect_timeout_ms + c->call_timeout_ms);
        c->drv = NULL;
    } /* else a call that never ends: the engine is left, never freed under it */
    client_unref(c);
}
