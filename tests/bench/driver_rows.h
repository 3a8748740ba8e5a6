/*
 * driver_rows.h - the blocking API (the blocking driver of the engine),
 * measured for rlc_bench_engine (driver_rows.c).
 */
#ifndef RLC_BENCH_DRIVER_ROWS_H
#define RLC_BENCH_DRIVER_ROWS_H

/* cycles/s of `threads` threads, each on its own name, for `seconds`. */
double driver_cycles(const char *uri, int threads, double seconds, long *errors);

/* Hand-off p50 (and *p99) in us between two clients, over `rounds`. */
double driver_handoff_us(const char *uri, int rounds, int settle_ms, double *p99);

#endif
