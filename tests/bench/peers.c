/*
 * peers.c - the drivers of other clients, run against the same servers.
 *
 *   node-redlock v5 + ioredis: tests/bench/node/bench.js, with node_modules
 *     installed by run.sh into a temporary directory (never committed).
 *   Python (redlockc vs redis-py's Lock): tests/bench/bench_python.py, owned
 *     by the Python binding; called with --seconds, and the servers in
 *     RLC_BENCH_NODES in case it wants them.
 *
 * Both print one JSON object per line; those lines become rows. When a peer
 * cannot run, its row says "not_run" and why: never a made-up figure.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static void not_run(struct bench *b, const char *row, const char *why)
{
    row_begin(b, row);
    row_str(b, "not_run", why);
    row_end(b);
}

/* Runs a peer and forwards its rows; says why not when none came. */
static void run_peer(struct bench *b, const char *row, const char *src, const char *const *argv,
                     const char *const *env, double timeout_s)
{
    char *out = NULL;
    int st = run_child(argv, env, timeout_s, &out, b->log, NULL);
    int rows = forward_rows(b, src, out);
    if (st != 0 || rows == 0) {
        char why[160];
        snprintf(why, sizeof why, "%s exited with status %d after %d rows%s", argv[1], st, rows,
                 b->log ? " (see the log)" : "");
        not_run(b, row, why);
        if (b->log && out)
            fprintf(b->log, "---- %s stdout ----\n%s\n", argv[1], out);
    }
    free(out);
}

void run_node(struct bench *b)
{
    if (!b->node_dir) {
        not_run(b, "node", "npm could not install redlock@5 and ioredis");
        return;
    }
    char node_path[512], secs[32];
    snprintf(node_path, sizeof node_path, "NODE_PATH=%s/node_modules", b->node_dir);
    snprintf(secs, sizeof secs, "%g", b->seconds);
    const char *argv[] = {"node", b->node_js, "--nodes", b->uris, "--seconds", secs, NULL};
    const char *env[] = {node_path, NULL};
    /* Five workloads of b->seconds each, plus start-up: bounded well above. */
    run_peer(b, "node", "node", argv, env, b->seconds * 10 + 60);
}

void run_python(struct bench *b)
{
    if (!b->py_script || access(b->py_script, R_OK) != 0) {
        not_run(b, "python", "tests/bench/bench_python.py does not exist yet");
        return;
    }
    char py_path[600], nodes[sizeof b->uris + 32], node[96], secs[32];
    snprintf(py_path, sizeof py_path, "PYTHONPATH=%s", b->py_path ? b->py_path : "");
    snprintf(nodes, sizeof nodes, "RLC_BENCH_NODES=%s", b->uris);
    snprintf(node, sizeof node, "RLC_BENCH_NODE=%s", b->srv[0].uri);
    snprintf(secs, sizeof secs, "%g", b->seconds);
    const char *argv[] = {"/usr/bin/python3", b->py_script, "--seconds", secs, NULL};
    const char *env[] = {py_path, nodes, node, NULL};
    run_peer(b, "python", "python", argv, env, b->seconds * 30 + 120);
}
