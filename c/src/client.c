/*
 * client.c - a client's life: nodes, connections, its background thread.
 *
 * A client is reference counted: the caller holds one reference, every lock
 * handle one, every call in flight one, the background thread one. So
 * rlc_client_free can close the client while handles (or a binding's garbage
 * collector) still point at it: later calls get RLC_E_CLOSED, nothing dangles.
 *
 * The background thread does the two things nobody's call can do: renew
 * watchdog locks (watchdog.c) and read unlock messages (pubsub.c). It sleeps
 * in one poll() over the subscriber sockets and an eventfd that wakes it
 * when its schedule changes.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "hold.h"
#include "metrics.h"
#include "pubsub.h"
#include "quorum.h"
#include "scripts.h"
#include "watchdog.h"

const char *rlc_version(void)
{
    return RLC_VERSION_STRING;
}

const char *rlc_client_uuid(const rlc_client *c)
{
    return c ? c->uuid : NULL;
}

int client_field(const rlc_client *c, uint64_t owner, char *buf, size_t size)
{
    return snprintf(buf, size, "%s:%llu", c->uuid,
                    (unsigned long long)(owner ? owner : owner_thread_number()));
}

struct mux *client_mux(rlc_client *c, int node)
{
    int pool = (int)c->opts.pool_size;
    int slot = pool == 1 ? 0 : (int)(owner_thread_number() % (uint64_t)pool);
    return &c->muxes[node * pool + slot];
}

void client_wake_thread(rlc_client *c)
{
    uint64_t one = 1;
    while (write(c->wake_fd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

static bool in_forked_child(const rlc_client *c)
{
    return c->fork_generation != owner_fork_generation();
}

static void destroy(rlc_client *c)
{
    int total = c->n_nodes * (int)c->opts.pool_size;
    bool child = in_forked_child(c);
    for (int i = 0; c->muxes && i < total; i++) {
        if (child) /* a vanished thread may hold the mutex: only close the fd */
            conn_close(&c->muxes[i].conn);
        else
            mux_destroy(&c->muxes[i]);
    }
    free(c->muxes);
    pubsub_free(c->pubsub);
    metrics_free(c->metrics);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    if (!child) {
        hold_free_graveyard(c);
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->callback_done);
    }
    uri_free_list(c->nodes, c->n_nodes);
    options_free(&c->opts);
    free(c);
}

void client_ref(rlc_client *c)
{
    atomic_fetch_add(&c->refs, 1);
}

void client_unref(rlc_client *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        destroy(c);
}

int client_enter(rlc_client *c)
{
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    if (in_forked_child(c))
        return rlc_fail(RLC_E_CLOSED,
                        "this client was created before fork(); create a new client in "
                        "the child process");
    client_ref(c);
    if (atomic_load(&c->closed)) {
        client_unref(c);
        return rlc_fail(RLC_E_CLOSED, "client closed");
    }
    return RLC_OK;
}

void client_leave(rlc_client *c)
{
    client_unref(c);
}

static void *thread_main(void *arg)
{
    rlc_client *c = arg;
    while (!atomic_load(&c->stopping)) {
        int64_t next = watchdog_run(c);
        metrics_flush_log(c);
        struct pollfd pfd[1 + RLC_MAX_NODES];
        pfd[0] = (struct pollfd){c->wake_fd, POLLIN, 0};
        int np = pubsub_prepare(c->pubsub, pfd + 1, RLC_MAX_NODES, &next);
        if (atomic_load(&c->stopping))
            break;
        int64_t now = rlc_now_ns();
        poll(pfd, (nfds_t)np + 1, next >= RLC_FOREVER_NS ? -1 : rlc_poll_ms_until(next, now));
        if (pfd[0].revents) {
            uint64_t v;
            while (read(c->wake_fd, &v, sizeof v) < 0 && errno == EINTR)
                ;
        }
        pubsub_service(c->pubsub, pfd + 1, np);
    }
    client_unref(c);
    return NULL;
}

static int init_nodes(rlc_client *c, const char *nodes, const char *options)
{
    int rc = uri_parse_list(nodes, &c->nodes, &c->n_nodes);
    if (rc != RLC_OK)
        return rc;
    if ((rc = options_parse(options, &c->opts)) != RLC_OK)
        return rc;
    c->quorum = quorum_of(c->n_nodes);
    c->call_timeout_ms = c->n_nodes == 1 ? c->opts.io_timeout_ms : c->opts.node_timeout_ms;
    int total = c->n_nodes * (int)c->opts.pool_size;
    c->muxes = calloc((size_t)total, sizeof *c->muxes);
    if (!c->muxes)
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    /* A connection whose oldest unanswered request is older than this is
     * given up (a hung server keeps the TCP connection open). */
    int64_t stale_ms = c->opts.io_timeout_ms > c->call_timeout_ms ? c->opts.io_timeout_ms
                                                                   : c->call_timeout_ms;
    for (int i = 0; i < total; i++)
        mux_init(&c->muxes[i], &c->nodes[i / c->opts.pool_size], c->opts.connect_timeout_ms,
                 stale_ms, c->n_nodes == 1);
    return RLC_OK;
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
    c->fork_generation = owner_fork_generation();
    c->wake_fd = -1;
    c->watchdog_wake_ns = RLC_FOREVER_NS;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->callback_done, NULL);

    int rc = init_nodes(c, nodes, options);
    if (rc != RLC_OK)
        goto fail;
    if (owner_new_uuid(c->uuid) != 0) {
        rc = rlc_fail(RLC_E_NOMEM, "getrandom() failed: %s", strerror(errno));
        goto fail;
    }
    c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    c->pubsub = pubsub_new(c);
    c->metrics = metrics_new(c);
    if (c->wake_fd < 0 || !c->pubsub) {
        rc = rlc_fail(RLC_E_NOMEM, "cannot create the client's eventfd or channel table");
        goto fail;
    }
    client_ref(c); /* the thread's */
    if (pthread_create(&c->thread, NULL, thread_main, c) != 0) {
        client_unref(c);
        rc = rlc_fail(RLC_E_NOMEM, "cannot start the watchdog thread");
        goto fail;
    }
    c->thread_started = true;
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
    if (in_forked_child(c)) {
        /* No watchdog thread was copied into this process, so its reference
         * goes with the caller's; and the parent's sockets are not ours to
         * use, only to close. */
        if (atomic_exchange(&c->closed, true))
            return;
        if (c->thread_started)
            client_unref(c);
        client_unref(c);
        return;
    }
    if (atomic_exchange(&c->closed, true)) /* freed twice: only the first counts */
        return;
    metrics_close(c);
    atomic_store(&c->stopping, true);
    client_wake_thread(c);
    if (pthread_equal(pthread_self(), c->thread))
        pthread_detach(c->thread); /* freed from an on_lost callback */
    else
        pthread_join(c->thread, NULL);
    pubsub_stop(c->pubsub);
    int total = c->n_nodes * (int)c->opts.pool_size;
    for (int i = 0; i < total; i++)
        mux_shutdown(&c->muxes[i]);
    client_unref(c);
}
