/*
 * engine_warn.c - what the engine would log, kept for its driver.
 *
 * The engine has no logger and must not call out of its own accord (it is
 * driven, never driving), so a warning is queued and the driver takes it
 * with rlc_engine_next_warning() after its calls, as it takes the events.
 * Few ever come (a node that refuses loss push, once per connection pair),
 * so the queue is small and bounded: past ENG_WARNINGS the newest are
 * dropped, and the next one taken says how many were.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

void eng_warn(rlc_engine *e, const char *fmt, ...)
{
    if (e->n_warn == ENG_WARNINGS) {
        e->warn_dropped++;
        return;
    }
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *copy = strdup(buf);
    if (!copy) {
        e->warn_dropped++;
        return;
    }
    e->warn[(e->warn_head + e->n_warn) % ENG_WARNINGS] = copy;
    e->n_warn++;
}

void eng_warn_free(rlc_engine *e)
{
    while (e->n_warn > 0) {
        free(e->warn[e->warn_head]);
        e->warn_head = (e->warn_head + 1) % ENG_WARNINGS;
        e->n_warn--;
    }
}

/* The text the oldest warning is taken as (with the drop count on the last
 * one). */
static int render(const rlc_engine *e, char *buf, size_t size)
{
    const char *w = e->warn[e->warn_head];
    if (e->n_warn == 1 && e->warn_dropped > 0)
        return snprintf(buf, size, "%s (and %llu more warnings, dropped)", w,
                        (unsigned long long)e->warn_dropped);
    return snprintf(buf, size, "%s", w);
}

size_t rlc_engine_next_warning(rlc_engine *e, char *buf, size_t size)
{
    if (!e || e->n_warn == 0)
        return 0;
    if (!buf || size == 0) {
        int n = render(e, NULL, 0); /* its length; it stays queued */
        return n > 0 ? (size_t)n : 0;
    }
    int n = render(e, buf, size);
    if (e->n_warn == 1)
        e->warn_dropped = 0;
    free(e->warn[e->warn_head]);
    e->warn_head = (e->warn_head + 1) % ENG_WARNINGS;
    e->n_warn--;
    return n > 0 ? (size_t)n : 0;
}
