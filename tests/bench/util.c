/*
 * util.c - clocks, CPU accounting, latency samples and the row stream.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void sleep_ns(int64_t ns)
{
    if (ns <= 0)
        return;
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    nanosleep(&ts, NULL);
}

int64_t self_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* utime + stime from /proc/<pid>/stat (fields 14 and 15, in clock ticks). */
int64_t pid_cpu_ns(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces; fields are counted after its ')'. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    long hz = sysconf(_SC_CLK_TCK);
    return (int64_t)((ut + st) * (1000000000ULL / (unsigned long long)(hz > 0 ? hz : 100)));
}

void samples_init(struct samples *s, size_t limit)
{
    memset(s, 0, sizeof *s);
    s->limit = limit;
}

void samples_add(struct samples *s, int64_t ns)
{
    s->total++;
    if (s->n == s->cap) {
        if (s->cap >= s->limit)
            return;
        size_t cap = s->cap ? s->cap * 2 : 4096;
        if (cap > s->limit)
            cap = s->limit;
        int64_t *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = ns;
}

void samples_merge(struct samples *dst, const struct samples *src)
{
    for (size_t i = 0; i < src->n; i++)
        samples_add(dst, src->v[i]);
    dst->total += src->total - src->n; /* the ones src only counted */
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

double samples_quantile_us(struct samples *s, double q)
{
    if (s->n == 0)
        return -1;
    qsort(s->v, s->n, sizeof *s->v, cmp_i64);
    size_t i = (size_t)(q * (double)(s->n - 1) + 0.5);
    return (double)s->v[i] / 1000.0;
}

void samples_free(struct samples *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* ---- rows ----------------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

void row_begin(struct bench *b, const char *name)
{
    fprintf(b->out, "{\"rep\":%d,\"src\":\"c\",\"row\":", b->rep);
    json_str(b->out, name);
}

void row_num(struct bench *b, const char *key, double v)
{
    fputc(',', b->out);
    json_str(b->out, key);
    fprintf(b->out, ":%.6g", v);
}

void row_str(struct bench *b, const char *key, const char *v)
{
    fputc(',', b->out);
    json_str(b->out, key);
    fputc(':', b->out);
    json_str(b->out, v);
}

void row_end(struct bench *b)
{
    fputs("}\n", b->out);
    fflush(b->out);
}

int forward_rows(struct bench *b, const char *src, const char *text)
{
    int n = 0;
    const char *line = text;
    while (line && *line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > 2 && line[0] == '{' && line[len - 1] == '}') {
            /* {"a":1} -> {"rep":N,"src":"x","a":1} */
            fprintf(b->out, "{\"rep\":%d,\"src\":", b->rep);
            json_str(b->out, src);
            fputc(',', b->out);
            fwrite(line + 1, 1, len - 1, b->out);
            fputc('\n', b->out);
            n++;
        }
        line = end ? end + 1 : NULL;
    }
    fflush(b->out);
    return n;
}

void cpu_begin(struct bench *b, struct cpu_window *w, int nsrv)
{
    w->nsrv = nsrv;
    w->wall0 = now_ns();
    w->self0 = self_cpu_ns();
    for (int i = 0; i < nsrv; i++)
        w->srv0[i] = pid_cpu_ns(b->srv[i].pid);
}

void cpu_end(struct bench *b, struct cpu_window *w)
{
    double wall = (double)(now_ns() - w->wall0);
    double self = (double)(self_cpu_ns() - w->self0), srv = 0;
    for (int i = 0; i < w->nsrv; i++) {
        double d = (double)(pid_cpu_ns(b->srv[i].pid) - w->srv0[i]);
        if (d > srv)
            srv = d;
    }
    row_num(b, "client_cpu_pct", 100.0 * self / wall);
    row_num(b, "server_cpu_pct", 100.0 * srv / wall);
}

void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("rlc_bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
