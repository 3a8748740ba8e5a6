/*
 * redis_cluster.c - a 3 + 3 Redis Cluster made of real processes.
 *
 * redis-cli --cluster create does the slot assignment and the replica
 * pairing; what it leaves is the wait for every node to learn the whole
 * layout (gossip), which is awaited here: a test that starts while a node
 * still misses a peer sees spurious MOVEDs or CLUSTERDOWN.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_cluster.h"

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rc_forget_conf(const struct redis_server *s)
{
    char path[256];
    snprintf(path, sizeof path, "%s/nodes.conf", s->dir);
    unlink(path);
}

/* redis-cli --cluster create over every node, bounded to 60 s. */
static int create(struct redis_cluster *rc)
{
    char addr[RC_NODES][32];
    const char *argv[RC_NODES + 8];
    int n = 0;
    argv[n++] = "redis-cli";
    argv[n++] = "--cluster";
    argv[n++] = "create";
    for (int i = 0; i < rc->n; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", rc->node[i].port);
        argv[n++] = addr[i];
    }
    argv[n++] = "--cluster-replicas";
    argv[n++] = "1";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) {
            dup2(devnull, 1);
            dup2(devnull, 2);
        }
        execvp("redis-cli", (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    for (long long until = now_ms() + 60000; now_ms() < until; pause_ms(20))
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* The port of the master of slot in this node's CLUSTER SLOTS, or -1. */
static int master_port_seen(const struct redis_server *s, int slot)
{
    redisReply *r = rs_cmd(s, "CLUSTER SLOTS");
    int port = -1;
    for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        redisReply *e = r->element[k];
        if (e->type == REDIS_REPLY_ARRAY && e->elements >= 3 && e->element[0]->integer <= slot &&
            slot <= e->element[1]->integer)
            port = (int)e->element[2]->element[1]->integer;
    }
    if (r)
        freeReplyObject(r);
    return port;
}

int rc_master_of(const struct redis_cluster *rc, int slot)
{
    for (int i = 0; i < rc->n; i++) {
        if (rc->node[i].pid <= 0)
            continue;
        int port = master_port_seen(&rc->node[i], slot);
        for (int j = 0; j < rc->n; j++)
            if (rc->node[j].port == port)
                return j;
        return -1;
    }
    return -1;
}

static int stable(const struct redis_cluster *rc)
{
    static const int probes[] = {0, 5460, 5461, 10922, 10923, 16383, 12182, 3000};
    int first = -1;
    for (int i = 0; i < rc->n; i++) {
        if (rc->node[i].pid <= 0)
            continue;
        redisReply *r = rs_cmd(&rc->node[i], "CLUSTER INFO");
        int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") &&
                 strstr(r->str, "cluster_slots_ok:16384");
        if (r)
            freeReplyObject(r);
        if (!ok)
            return 0;
        if (first < 0)
            first = i;
        for (size_t p = 0; p < sizeof probes / sizeof probes[0]; p++) {
            int port = master_port_seen(&rc->node[i], probes[p]);
            if (port < 0 || port != master_port_seen(&rc->node[first], probes[p]))
                return 0;
        }
    }
    return first >= 0;
}

int rc_await_stable(const struct redis_cluster *rc, int timeout_ms)
{
    for (long long until = now_ms() + timeout_ms; now_ms() < until; pause_ms(50))
        if (stable(rc))
            return 0;
    return -1;
}

/* Every replica in sync with its master: a replica that never finished its
 * first sync refuses to fail over ("data too old"), which a failover test
 * started too early would meet. */
static int replicas_synced(const struct redis_cluster *rc)
{
    int replicas = 0;
    for (int i = 0; i < rc->n; i++) {
        redisReply *r = rs_cmd(&rc->node[i], "INFO replication");
        int ok = r && r->type == REDIS_REPLY_STRING;
        if (ok && strstr(r->str, "role:slave")) {
            ok = strstr(r->str, "master_link_status:up") != NULL &&
                 strstr(r->str, "master_sync_in_progress:0") != NULL;
            replicas++;
        }
        if (r)
            freeReplyObject(r);
        if (!ok)
            return 0;
    }
    return replicas == rc->n / 2;
}

int rc_start(struct redis_cluster *rc)
{
    memset(rc, 0, sizeof *rc);
    /* node-timeout 2000: a killed master is failed over in seconds. */
    for (int i = 0; i < RC_NODES; i++) {
        /* The bus port given, not port + 10000: that may be taken, or past
         * 65535 (redis-server would exit at start). */
        snprintf(rc->bus[i], sizeof rc->bus[i], "%d", rs_free_port());
        const char *args[] = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                              "--cluster-node-timeout", "2000", "--cluster-port", rc->bus[i],
                              NULL};
        if (rs_start(&rc->node[i], args) != 0)
            goto fail;
        rc->n++;
    }
    if (create(rc) != 0 || rc_await_stable(rc, 30000) != 0)
        goto fail;
    for (long long until = now_ms() + 30000; !replicas_synced(rc); pause_ms(50))
        if (now_ms() >= until)
            goto fail;
    snprintf(rc->uri, sizeof rc->uri, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d",
             rc->node[0].port, rc->node[1].port);
    return 0;
fail:
    rc_stop(rc);
    return -1;
}

void rc_stop(struct redis_cluster *rc)
{
    for (int i = 0; i < rc->n; i++) {
        rs_stop(&rc->node[i]);
        rc_forget_conf(&rc->node[i]);
        rmdir(rc->node[i].dir);
    }
    rc->n = 0;
}

void rc_node_id(const struct redis_server *s, char *id, size_t size)
{
    redisReply *r = rs_cmd(s, "CLUSTER MYID");
    snprintf(id, size, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "?");
    if (r)
        freeReplyObject(r);
}

int rc_migrate_keys(const struct redis_server *src, const struct redis_server *dst, int slot)
{
    int moved = 0;
    for (int round = 0; round < 100; round++) {
        redisReply *k = rs_cmd(src, "CLUSTER GETKEYSINSLOT %d 100", slot);
        if (!k || k->type != REDIS_REPLY_ARRAY) {
            if (k)
                freeReplyObject(k);
            return -1;
        }
        if (k->elements == 0) {
            freeReplyObject(k);
            return moved;
        }
        const char *argv[110];
        size_t lens[110];
        char port[16];
        snprintf(port, sizeof port, "%d", dst->port);
        int n = 0;
        const char *head[] = {"MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS"};
        for (int i = 0; i < 7; i++)
            argv[n] = head[i], lens[n++] = strlen(head[i]);
        for (size_t i = 0; i < k->elements; i++)
            argv[n] = k->element[i]->str, lens[n++] = k->element[i]->len;
        redisContext *c = rs_connect(src);
        redisReply *r = c ? redisCommandArgv(c, n, argv, lens) : NULL;
        int ok = r && r->type == REDIS_REPLY_STATUS;
        if (!ok)
            fprintf(stderr, "MIGRATE: %s\n", r && r->str ? r->str : "(no reply)");
        if (r)
            freeReplyObject(r);
        if (c)
            redisFree(c);
        moved += (int)k->elements;
        freeReplyObject(k);
        if (!ok)
            return -1;
    }
    return moved;
}

static bool status_ok(redisReply *r)
{
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    return ok;
}

int rc_begin_move(const struct redis_cluster *rc, int src, int dst, int slot)
{
    char src_id[64], dst_id[64];
    rc_node_id(&rc->node[src], src_id, sizeof src_id);
    rc_node_id(&rc->node[dst], dst_id, sizeof dst_id);
    if (!status_ok(rs_cmd(&rc->node[dst], "CLUSTER SETSLOT %d IMPORTING %s", slot, src_id)) ||
        !status_ok(rs_cmd(&rc->node[src], "CLUSTER SETSLOT %d MIGRATING %s", slot, dst_id)))
        return -1;
    return 0;
}

void rc_end_move(const struct redis_cluster *rc, int dst, int slot)
{
    char dst_id[64];
    rc_node_id(&rc->node[dst], dst_id, sizeof dst_id);
    for (int i = 0; i < RC_NODES; i++)
        status_ok(rs_cmd(&rc->node[i], "CLUSTER SETSLOT %d NODE %s", slot, dst_id)); /* replicas
                                                              refuse: they follow their master */
}

int rc_move_slot(const struct redis_cluster *rc, int src, int dst, int slot)
{
    if (rc_begin_move(rc, src, dst, slot) != 0)
        return -1;
    int moved = rc_migrate_keys(&rc->node[src], &rc->node[dst], slot);
    rc_end_move(rc, dst, slot);
    return moved;
}
