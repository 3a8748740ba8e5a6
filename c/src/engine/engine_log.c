/*
 * engine_log.c - what the engine would log, kept for its driver.
 *
 * The engine has no logger and must not call out of its own accord (it is
 * driven, never driving), so a line is queued with its level and the driver
 * takes it with rlc_engine_next_log() after its calls, as it takes the
 * events. Few ever come (a node that refuses loss push, once per connection
 * pair; a command connection made again; a node that lost the scripts),
 * so the queue is small and bounded: past ENG_LOG_LINES the newest are
 * dropped, and the next one taken says how many were.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

void eng_log(rlc_engine *e, int level, const char *fmt, ...)
{
    if (e->n_log == ENG_LOG_LINES) {
        e->log_dropped++;
        return;
    }
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char *copy = strdup(buf);
    if (!copy) {
        e->log_dropped++;
        return;
    }
    struct log_line *ln = &e->log[(e->log_head + e->n_log) % ENG_LOG_LINES];
    ln->level = level;
    ln->text = copy;
    e->n_log++;
}

void eng_log_free(rlc_engine *e)
{
    while (e->n_log > 0) {
        free(e->log[e->log_head].text);
        e->log_head = (e->log_head + 1) % ENG_LOG_LINES;
        e->n_log--;
    }
}

/* The text the oldest line is taken as (with the drop count on the last
 * one). */
static int render(const rlc_engine *e, char *buf, size_t size)
{
    const char *w = e->log[e->log_head].text;
    if (e->n_log == 1 && e->log_dropped > 0)
        return snprintf(buf, size, "%s (and %llu more log lines, dropped)", w,
                        (unsigned long long)e->log_dropped);
    return snprintf(buf, size, "%s", w);
}

size_t rlc_engine_next_log(rlc_engine *e, int *level, char *buf, size_t size)
{
    if (!e || e->n_log == 0)
        return 0;
    if (level)
        *level = e->log[e->log_head].level;
    if (!buf || size == 0) {
        int n = render(e, NULL, 0); /* its length; it stays queued */
        return n > 0 ? (size_t)n : 0;
    }
    int n = render(e, buf, size);
    if (e->n_log == 1)
        e->log_dropped = 0;
    free(e->log[e->log_head].text);
    e->log_head = (e->log_head + 1) % ENG_LOG_LINES;
    e->n_log--;
    return n > 0 ? (size_t)n : 0;
}
