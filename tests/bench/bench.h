/*
 * bench.h - the benchmark driver's shared pieces.
 *
 * The driver (rlc_bench) measures; it never judges. Every figure it takes is
 * printed as one JSON object per line ("rows"), and tests/bench/table.py
 * turns the rows of all repeats into the table with medians, spreads and the
 * targets of DESIGN.md section 7. Peers (redis-benchmark, node-redlock,
 * the Python driver) run as child processes against the same servers, in the
 * same run, and their rows are merged into the same stream.
 */
#ifndef RLC_BENCH_H
#define RLC_BENCH_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "redis_server.h"

#define BENCH_NODES 5
#define MAX_POOLS 8

/* What one run of the driver is asked to do. */
struct bench {
    double seconds;        /* per measured workload */
    double wd_seconds;     /* the watchdog hold window */
    int wd_locks;
    int repeats;
    const char *node_dir;  /* a directory with node_modules/{redlock,ioredis}, or NULL */
    const char *node_js;   /* tests/bench/node/bench.js */
    const char *py_script; /* tests/bench/bench_python.py, or NULL */
    const char *py_path;   /* PYTHONPATH for it */
    const char *only;      /* run only workloads whose name contains this, or NULL */
    int pools[MAX_POOLS];  /* pool_size values for extra 16-thread rows */
    int npools;
    FILE *out;             /* rows go here */
    FILE *log;             /* children's stderr goes here (or NULL: dropped) */
    struct redis_server srv[BENCH_NODES];
    char uris[BENCH_NODES * 64]; /* all nodes, comma-separated */
    int rep;               /* the current repeat, from 1 */
};

/* ---- time and CPU ------------------------------------------------------- */

int64_t now_ns(void);
void sleep_ns(int64_t ns);
/* CPU time (user+system) of this process, and of another process by pid. */
int64_t self_cpu_ns(void);
int64_t pid_cpu_ns(pid_t pid);

/* ---- latency samples ---------------------------------------------------- */

/* A bounded vector of latencies in ns; past its cap it only counts. */
struct samples {
    int64_t *v;
    size_t n, cap, limit;
    uint64_t total;
};

void samples_init(struct samples *s, size_t limit);
void samples_add(struct samples *s, int64_t ns);
/* Appends every sample of src to dst (dst keeps its own limit). */
void samples_merge(struct samples *dst, const struct samples *src);
/* The q-quantile (0..1) in microseconds; sorts in place. -1 when empty. */
double samples_quantile_us(struct samples *s, double q);
void samples_free(struct samples *s);

/* ---- rows -------------------------------------------------------------- */

/* Starts a row {"rep":N,"src":"c","row":name; then fields; then row_end. */
void row_begin(struct bench *b, const char *name);
void row_num(struct bench *b, const char *key, double v);
void row_str(struct bench *b, const char *key, const char *v);
void row_end(struct bench *b);

/* CPU% of the client and of the node(s) over a measured window. */
struct cpu_window {
    int64_t wall0, self0, srv0[BENCH_NODES];
    int nsrv;
};
void cpu_begin(struct bench *b, struct cpu_window *w, int nsrv);
/* Adds "client_cpu_pct" and "server_cpu_pct" (the busiest node) to the row. */
void cpu_end(struct bench *b, struct cpu_window *w);

/* ---- the workloads ----------------------------------------------------- */

/* The commands a lock cycle sends, read off the wire (capture.c): for each
 * script, the SHA, the key count and every argument after it, as the library
 * sent them, except that the captured lock name is replaced by CMD_NAME
 * wherever it appears (also inside the other keys' braces), the attempt id by
 * CMD_ATTEMPT, and the release's `upto` by "" (a plain level release). */
#define CMD_NAME '\x01'
#define CMD_ATTEMPT '\x02'
#define CMD_MAX_ARGS 16
#define CMD_ARG_LEN 256

struct script_cmd {
    char sha[41];
    int numkeys;
    int nargs; /* keys + ARGV */
    char args[CMD_MAX_ARGS][CMD_ARG_LEN];
};

struct cycle_cmds {
    struct script_cmd acquire, release;
    char uuid[96]; /* the capturing client's uuid: its attempt ids are "<uuid>:<hex>" */
};

/* The argument vector of one call: EVALSHA sha numkeys args..., for lock
 * `name` and attempt id `attempt`. The strings live in cv. */
struct cmd_vec {
    int argc;
    const char *argv[CMD_MAX_ARGS + 3];
    size_t lens[CMD_MAX_ARGS + 3];
    char buf[CMD_MAX_ARGS + 3][2 * CMD_ARG_LEN];
};
/* Returns 0, or -1 when an argument does not fit. */
int cmd_build(const struct script_cmd *sc, const char *name, const char *attempt,
              struct cmd_vec *cv);
/* One argument (i: 0 = KEYS[1]) of sc for lock `name`, into buf. */
int cmd_arg(const struct script_cmd *sc, int i, const char *name, const char *attempt, char *buf,
            size_t size);

int capture_cycle(struct bench *b, struct cycle_cmds *cc);
void run_ping(struct bench *b);
void run_limit(struct bench *b, const struct cycle_cmds *cc, int conns);
void run_fanout_limit(struct bench *b, const struct cycle_cmds *cc, int nodes);
void run_cycles(struct bench *b, const char *row, int nodes, int threads, const char *opts);
void run_handoff(struct bench *b, int threads);
void run_watchdog(struct bench *b);
void run_node(struct bench *b);
void run_python(struct bench *b);

/* Flushes every node's data (not its scripts) between workloads. */
void flush_nodes(struct bench *b);

/* ---- child processes ----------------------------------------------------- */

/* Runs argv with extra environment (NULL-terminated "K=V" list, may be NULL),
 * kills it (by its pid) after timeout_s, and collects its stdout into *out
 * (malloc'd, NUL-terminated). Its stderr goes to log (or is dropped).
 * Returns the exit status (0..255), or -1 when it could not run or was killed.
 * If cpu_ns is not NULL it receives the child's CPU time. */
int run_child(const char *const *argv, const char *const *env, double timeout_s, char **out,
              FILE *log, int64_t *cpu_ns);

/* Copies the JSON-object lines of a child's output into the row stream,
 * tagged with the repeat and src; returns how many were copied. */
int forward_rows(struct bench *b, const char *src, const char *text);

/* Writes a message for the person running the benchmark (stderr). */
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
