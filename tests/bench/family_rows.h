/*
 * family_rows.h - rlc_bench_family's rows that are not one hand-off harness
 * over one handle kind (family_rows.c): the read-to-write hand-off, the bare
 * floor, and the server's script-call count that gives each row its tries.
 */
#ifndef RLC_BENCH_FAMILY_ROWS_H
#define RLC_BENCH_FAMILY_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "redis_server.h"
#include "redlockc.h"

/* One hand-off row of one repeat; every figure -1 when it did not run.
 * tries: acquire-script calls per granted acquire (see family.c). */
struct fam_result {
    double p50, p99, rate, tries;
};

int64_t fam_now_ns(void);

/* The q-quantile of v[0..n) in us (sorts v); -1 for n == 0. */
double fam_quantile_us(int64_t *v, size_t n, double q);

/* Script calls the server ran so far (EVAL, EVALSHA, FCALL; INFO
 * commandstats), or -1 if INFO could not be read. */
long long fam_script_calls(const struct redis_server *s);

/* Readers hold read levels of name, a writer waits; the time from the last
 * reader's release call to the writer's acquire returning. */
void fam_read_to_write(rlc_client *c, const struct redis_server *s, const char *name, double secs,
                       struct fam_result *out);

/* The floor of a hand-off with bare hiredis: a release script that
 * PUBLISHes, the subscriber's wake-up, one acquire EVAL round trip. */
void fam_bare_floor(const struct redis_server *s, const char *name, double secs,
                    struct fam_result *out);

#endif
