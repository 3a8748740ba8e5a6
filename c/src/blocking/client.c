/*
 * client.c - a client's life: nodes, connections, its background thread.
 *
 * A client is reference counted: the caller holds one reference, every lock
 * handle one, every call in flight one, the background thread one. So
 * rlc_client_free can close the client while handles (or a binding's garbage
 * collector) still point at it: later calls get RLC_E_CLOSED, nothing dangles.
 *
 * Every lock runs in the engine (c/src/engine), driven by the blocking
 * driver (engine_driver.c): acquire, release, extend, renewals, loss push,
 * the restart guard, queries, force release, fenced writes. The lock
 * family still runs on an older stack of its own (pooled connections,
 * pubsub.c, the sentinels' +switch-master watch) served by the client's
 * own thread; both are made with the first family handle, so a client that
 * only locks runs the engine's two threads and one command connection per
 * node. That thread sleeps in one poll() over those sockets and an eventfd
 * that wakes it when its schedule changes. on_lost callbacks run on a
 * callback thread (callbacks.c), fed from the engine's losses.
 *
 * This file is the top of the blocking driver's includes: it puts together
 * the modules a client is made of, and none of them includes it (state.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "callbacks.h"
#include "clock.h"
#include "cluster.h"
#include "engine_driver.h"
#include "error.h"
#include "handle_levels.h"
#include "metrics.h"
#include "pubsub.h"
#include "quorum.h"
#include "resolve.h"
#include "scripts.h"
#include "sentinel_tls.h"
#include "sentinel_watch.h"
#include "tls.h"

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
    int total = c->n_nodes * (int)c->opts.pool_size;
    bool child = client_forked(c);
    for (int i = 0; c->muxes && i < total; i++) {
        if (child) /* a vanished thread may hold the mutex: only close the fd */
            conn_close(&c->muxes[i].conn);
        else
            mux_destroy(&c->muxes[i]);
    }
    free(c->muxes);
    for (int i = 0; c->clusters && i < c->n_nodes; i++) {
        if (!child)
            cluster_shutdown(c->clusters[i]); /* a client that failed to start */
        cluster_free(c->clusters[i], child);
    }
    free(c->clusters);
    /* the last reference: no call runs in the engine any more; releases
     * and undos still on the wire go out first, for a bounded time (an
     * acquire that lands late must find its tombstone) */
    edrv_free(c->drv, 0); /* rlc_client_free freed it; a forked child's copy here */
    pubsub_free(c->pubsub);
    sentinel_watch_free(c->sentinel_watch);
    client_drop_lost_queue(c);
    metrics_free(c->metrics);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    if (!child) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->callback_done);
        pthread_cond_destroy(&c->lost_ready);
    }
    /* No mutex here, so a forked child may do it too. A lookup in flight
     * keeps its own reference (in a child, whose copy of that thread does
     * not exist, the resolver is then left behind). */
    for (int i = 0; c->nodes && i < c->n_nodes; i++)
        resolver_unref(c->nodes[i].resolver);
    uri_free_list(c->nodes, c->n_nodes);
    tls_ctx_free(c->tls); /* in a child: left behind (tls.h) */
    options_free(&c->opts);
    free(c);
}

static void *thread_main(void *arg)
{
    rlc_client *c = arg;
    (void)pthread_setname_np(pthread_self(), "rlc-client"); /* seen in top -H, gdb */
    while (!atomic_load(&c->stopping)) {
        int64_t next = RLC_FOREVER_NS;
        /* Detached work nobody else will move (a redo, an undo's reply); a
         * connection that waits out its reconnect backoff is looked at
         * again when the backoff ends (mux.h). */
        for (int i = 0; i < c->n_nodes * (int)c->opts.pool_size; i++)
            if (mux_push_detached(&c->muxes[i])) {
                int64_t at = mux_push_next_ns(&c->muxes[i], rlc_now_ns());
                if (at < next)
                    next = at;
            }
        metrics_flush_log(c);
        struct pollfd pfd[1 + 2 * RLC_MAX_NODES];
        pfd[0] = (struct pollfd){c->wake_fd, POLLIN, 0};
        int np = pubsub_prepare(c->pubsub, pfd + 1, RLC_MAX_NODES, &next);
        int ns = sentinel_watch_prepare(c->sentinel_watch, pfd + 1 + np, RLC_MAX_NODES, &next);
        if (atomic_load(&c->stopping))
            break;
        int64_t now = rlc_now_ns();
        poll(pfd, (nfds_t)(np + ns) + 1,
             next >= RLC_FOREVER_NS ? -1 : rlc_poll_ms_until(next, now));
        if (pfd[0].revents) {
            uint64_t v;
            while (read(c->wake_fd, &v, sizeof v) < 0 && errno == EINTR)
                ;
        }
        pubsub_service(c->pubsub, pfd + 1, np);
        sentinel_watch_service(c->sentinel_watch, pfd + 1 + np, ns);
    }
    client_unref(c);
    return NULL;
}

/* One TLS context for every rediss:// node of the client (tls.c): made
 * here, so an unreadable CA or key file fails rlc_client_new rather than
 * every connect. tls_* options without such a node are a mistake that would
 * send a password in clear to a server meant to be reached over TLS. */
static int init_tls(rlc_client *c)
{
    int any_tls = 0;
    for (int i = 0; i < c->n_nodes; i++)
        any_tls |= c->nodes[i].tls;
    if (!any_tls)
        return options_any_tls(&c->opts)
                   ? rlc_fail(RLC_E_INVAL, "tls_* options are given but no node is rediss:// "
                                           "(write rediss://host:port for a TLS node)")
                   : RLC_OK;
    int rc = tls_ctx_new(&c->opts, &c->tls);
    for (int i = 0; rc == RLC_OK && i < c->n_nodes; i++)
        if (c->nodes[i].tls)
            c->nodes[i].tls_ctx = c->tls;
    return rc;
}

static int init_nodes(rlc_client *c, const char *nodes, const char *options)
{
    int rc = uri_parse_list(nodes, &c->nodes, &c->n_nodes);
    if (rc != RLC_OK)
        return rc;
    if ((rc = options_parse(options, &c->opts)) != RLC_OK)
        return rc;
    int any_sentinel = 0;
    for (int i = 0; i < c->n_nodes; i++)
        any_sentinel |= c->nodes[i].topology == RLC_TOPO_SENTINEL;
    if (!any_sentinel && (c->opts.sentinel_user || c->opts.sentinel_password))
        return rlc_fail(RLC_E_INVAL, "sentinel_* options are given but no node is "
                                     "redis-sentinel://");
    if ((rc = init_tls(c)) != RLC_OK)
        return rc;
    for (int i = 0; i < c->n_nodes; i++) {
        struct node_addr *n = &c->nodes[i];
        if (n->topology == RLC_TOPO_SENTINEL) {
            /* Messages name the master, not whichever sentinel is first. */
            snprintf(n->label, sizeof n->label, "master '%.100s' (sentinels %s%s)",
                     n->master_name, n->seeds[0].label, n->n_seeds > 1 ? ",..." : "");
            n->resolver = resolver_new_sentinel(n, c->opts.sentinel_user,
                                                c->opts.sentinel_password,
                                                c->opts.connect_timeout_ms, c->opts.io_timeout_ms,
                                                sentinel_tls_ask);
        } else if (!n->is_unix) {
            n->resolver = resolver_new(n->host, n->port);
        }
        if (!n->is_unix && !n->resolver)
            return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    c->quorum = quorum_of(c->n_nodes);
    c->call_timeout_ms = c->n_nodes == 1 ? c->opts.io_timeout_ms : c->opts.node_timeout_ms;
    return RLC_OK;
}

/* The older blocking stack the lock family runs on: a pooled connection
 * per (node, pool slot), a cluster's slot map and its thread, the family's
 * pub/sub, the sentinels' +switch-master watch, and the client's thread
 * that serves them. Under c->mu. */
static int make_family_stack(rlc_client *c)
{
    int total = c->n_nodes * (int)c->opts.pool_size;
    c->muxes = calloc((size_t)total, sizeof *c->muxes);
    c->clusters = calloc((size_t)c->n_nodes, sizeof *c->clusters);
    if (!c->muxes || !c->clusters)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    /* A connection whose oldest unanswered request is older than this is
     * given up (a hung server keeps the TCP connection open). */
    int64_t stale_ms = c->opts.io_timeout_ms > c->call_timeout_ms ? c->opts.io_timeout_ms
                                                                   : c->call_timeout_ms;
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i].topology == RLC_TOPO_CLUSTER &&
            !(c->clusters[i] = cluster_new(c, i, c->opts.connect_timeout_ms, stale_ms,
                                           c->wake_fd)))
            return rlc_fail(RLC_E_NOMEM, "cannot start the thread of cluster %s",
                            c->nodes[i].label);
    /* after the clusters: a cluster node subscribes per master */
    c->pubsub = pubsub_new(c);
    c->sentinel_watch = sentinel_watch_new(c->nodes, c->n_nodes, c->opts.sentinel_user,
                                           c->opts.sentinel_password,
                                           c->opts.connect_timeout_ms);
    if (!c->pubsub || !c->sentinel_watch)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    for (int i = 0; i < total; i++) {
        int node = i / (int)c->opts.pool_size;
        if (c->clusters[node]) /* routes each command to its slot's master */
            mux_init_routing(&c->muxes[i], &c->nodes[node],
                             (struct route_to){c->clusters[node], &cluster_router},
                             i % (int)c->opts.pool_size);
        else
            mux_init(&c->muxes[i], &c->nodes[node], c->opts.connect_timeout_ms, stale_ms,
                     c->n_nodes == 1, c->wake_fd);
    }
    metrics_attach_muxes(c->metrics, c->muxes, total);
    client_ref(c); /* the thread's */
    if (pthread_create(&c->thread, NULL, thread_main, c) != 0) {
        client_unref(c);
        return rlc_fail(RLC_E_NOMEM, "cannot start the client's thread");
    }
    c->thread_started = true;
    return RLC_OK;
}

int client_start_family_stack(rlc_client *c)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->family_stack_rc;
    if (atomic_load(&c->stopping))
        rc = rlc_fail(RLC_E_CLOSED, "client closed");
    else if (!c->family_stack && rc == RLC_OK) {
        /* made once: a failure leaves what it made to destroy(), and every
         * later family handle is refused with the same status */
        rc = make_family_stack(c);
        c->family_stack = rc == RLC_OK;
        c->family_stack_rc = rc;
    } else if (rc != RLC_OK) {
        rc = rlc_fail(rc, "the lock family's connections could not be made (%s)",
                      rlc_strerror(rc));
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* A hold the engine found lost (a renewal's quorum said gone, or loss
 * push): on the driver's callback thread, never under its lock. Every
 * handle through which that owner holds the name hears of it once (its
 * on_lost, on the client's callback thread); a caller that learned of it
 * from a return code already is not told again. */
static void engine_lost(void *user, int kind, const char *name, size_t len, uint64_t owner,
                        int status, const char *message)
{
    rlc_client *c = user;
    (void)message;
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
    pthread_mutex_unlock(&c->mu);
    metrics_flush_log(c);
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
    c->wake_fd = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->callback_done, NULL);
    pthread_cond_init(&c->lost_ready, NULL);

    int rc;
    /* Before the nodes: every connection can wake the client's thread. */
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->wake_fd < 0) {
        rc = rlc_fail(RLC_E_NOMEM, "cannot create the client's eventfd");
        goto fail;
    }
    rc = init_nodes(c, nodes, options);
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
    /* The engine gets the same nodes, options and UUID: one client. The
     * lock family's stack is made with its first handle
     * (client_start_family_stack). */
    if ((rc = edrv_new(&c->drv, nodes, c->uuid, options, engine_lost, c)) != RLC_OK)
        goto fail;
    edrv_set_log(c->drv, engine_log, c);
    *out = c;
    return RLC_OK;

fail:
    destroy(c);
    return rc;
}

/* Stops the client's thread and lets the family's connections go: undos
 * and re-sent releases still queued go out (and are answered) first, for a
 * bounded time, so an acquire that failed and lands late finds its
 * tombstone, even when the process exits right after. */
static void stop_family_stack(rlc_client *c)
{
    client_wake_thread(c);
    if (c->thread_started)
        pthread_join(c->thread, NULL);
    /* A callback that waits for a lock wakes with RLC_E_CLOSED. */
    if (c->pubsub)
        pubsub_stop(c->pubsub);
    int total = c->muxes ? c->n_nodes * (int)c->opts.pool_size : 0;
    int64_t until = rlc_deadline_after_ms(rlc_now_ns(),
                                          c->opts.connect_timeout_ms + c->call_timeout_ms);
    for (;;) {
        bool left = false;
        for (int i = 0; i < total; i++)
            left = mux_push_detached(&c->muxes[i]) || left;
        if (!left || rlc_now_ns() >= until)
            break;
        struct timespec pause = {0, 2 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    for (int i = 0; i < total; i++)
        mux_shutdown(&c->muxes[i]);
}

void rlc_client_free(rlc_client *c)
{
    if (!c)
        return;
    if (client_forked(c)) {
        /* No watchdog thread was copied into this process, so its reference
         * goes with the caller's; and the parent's sockets are not ours to
         * use, only to close. */
        if (atomic_exchange(&c->closed, true))
            return;
        if (c->thread_started)
            client_unref(c);
        if (c->cb_started)
            client_unref(c);
        client_unref(c);
        return;
    }
    if (atomic_exchange(&c->closed, true)) /* freed twice: only the first counts */
        return;
    edrv_close(c->drv); /* its waiters end RLC_E_CLOSED; no new call starts */
    metrics_close(c);
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->stopping, true); /* no family stack is made after this */
    pthread_cond_broadcast(&c->lost_ready);
    bool cb_started = c->cb_started;
    bool family = c->family_stack || c->thread_started;
    pthread_mutex_unlock(&c->mu);
    if (family)
        stop_family_stack(c);
    /* Calls still inside end soon: waits were ended (edrv_close, the
     * muxes), a release or an undo ends at its call deadline. Then the
     * engine lets go, its releases and undos on the wire first, for a
     * bounded time (an acquire that lands late must find its tombstone). */
    for (int i = 0; i < 60000 && atomic_load(&c->calls) > 0; i++) {
        struct timespec pause = {0, 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (atomic_load(&c->calls) == 0) {
        metrics_keep_engine(c);
        edrv_free(c->drv, c->opts.connect_timeout_ms + c->call_timeout_ms);
        c->drv = NULL;
    } /* else a call that never ends: the engine is left, never freed under it */
    if (cb_started && pthread_equal(pthread_self(), c->cb_thread))
        pthread_detach(c->cb_thread); /* freed from an on_lost callback */
    else if (cb_started)
        pthread_join(c->cb_thread, NULL);
    client_unref(c);
}
