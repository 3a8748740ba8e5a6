/*
 * driver_rows.h - the blocking driver of the engine against today's
 * blocking API (api = true), measured the same way (driver_rows.c).
 */
#ifndef RLC_BENCH_DRIVER_ROWS_H
#define RLC_BENCH_DRIVER_ROWS_H

#include <stdbool.h>

/* cycles/s of `threads` threads, each on its own name, for `seconds`. */
double driver_cycles(const char *uri, bool api, int threads, double seconds, long *errors);

/* Hand-off p50 (and *p99) in us between two clients, over `rounds`. */
double driver_handoff_us(const char *uri, bool api, int rounds, int settle_ms, double *p99);

#endif
