/*
 * options.c - parsing "name=value;name=value".
 *
 * One table lists every option with its type and range, so the parser, the
 * defaults and the error messages cannot drift apart. Values are strict:
 * decimal integers for *_ms and pool_size, a decimal fraction for
 * drift_factor; anything else is an error that names the option.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "redlockc.h"
#include "error.h"
#include "options.h"

enum kind { INT, FRACTION, TEXT, CHOICE };

struct option_spec {
    const char *name;
    enum kind kind;
    size_t offset;
    double min, max; /* INT and FRACTION: inclusive range; TEXT: length range */
    const char *const *choices; /* CHOICE: the words, stored as their index */
};

static const char *const formats[] = {"redisson", "classic", NULL};

#define FIELD(f) offsetof(struct rlc_options, f)

static const struct option_spec specs[] = {
    {"watchdog_timeout_ms", INT, FIELD(watchdog_timeout_ms), 10, 86400000, NULL},
    {"io_timeout_ms", INT, FIELD(io_timeout_ms), 1, 3600000, NULL},
    {"node_timeout_ms", INT, FIELD(node_timeout_ms), 1, 3600000, NULL},
    {"connect_timeout_ms", INT, FIELD(connect_timeout_ms), 1, 3600000, NULL},
    {"retry_jitter_ms", INT, FIELD(retry_jitter_ms), 0, 60000, NULL},
    {"drift_factor", FRACTION, FIELD(drift_factor), 0, 0.5, NULL},
    {"pool_size", INT, FIELD(pool_size), 1, 64, NULL}, /* unused since 1.2 (redlockc.h) */
    {"key_prefix", TEXT, FIELD(key_prefix), 0, 1024, NULL},
    {"restart_guard", INT, FIELD(restart_guard), 0, 1, NULL},
    {"loss_push", INT, FIELD(loss_push), 0, 1, NULL},
    {"fencing", INT, FIELD(fencing), 0, 1, NULL},
    {"format", CHOICE, FIELD(format), 0, 1, formats},
    /* replica-synced writes (WAIT) */
    {"sync_replicas", INT, FIELD(sync_replicas), 0, 64, NULL},
    {"sync_timeout_ms", INT, FIELD(sync_timeout_ms), 1, 3600000, NULL},
    /* TLS to rediss:// nodes (the driver's) */
    {"tls_ca_file", TEXT, FIELD(tls_ca_file), 1, 4096, NULL},
    {"tls_ca_dir", TEXT, FIELD(tls_ca_dir), 1, 4096, NULL},
    {"tls_cert_file", TEXT, FIELD(tls_cert_file), 1, 4096, NULL},
    {"tls_key_file", TEXT, FIELD(tls_key_file), 1, 4096, NULL},
    {"tls_server_name", TEXT, FIELD(tls_server_name), 1, 253, NULL},
    {"tls_verify", INT, FIELD(tls_verify), 0, 1, NULL},
    /* AUTH to the sentinels of redis-sentinel:// nodes */
    {"sentinel_user", TEXT, FIELD(sentinel_user), 1, 256, NULL},
    {"sentinel_password", TEXT, FIELD(sentinel_password), 1, 4096, NULL},
};

#define NSPECS (sizeof specs / sizeof specs[0])
_Static_assert(NSPECS <= 32, "options: 'seen' and 'given' hold 32");

static void set_defaults(struct rlc_options *o)
{
    memset(o, 0, sizeof *o);
    o->watchdog_timeout_ms = 30000;
    o->io_timeout_ms = 1000;
    o->node_timeout_ms = 50;
    o->connect_timeout_ms = 1000;
    o->sync_replicas = 0;
    o->sync_timeout_ms = 1000;
    o->retry_jitter_ms = 50;
    o->drift_factor = 0.01;
    o->pool_size = 1;
    o->key_prefix = NULL;
    o->restart_guard = -1;
    o->loss_push = 1;
    o->tls_verify = 1;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t';
}

static void trim(const char **s, const char **e)
{
    while (*s < *e && is_space(**s))
        (*s)++;
    while (*e > *s && is_space((*e)[-1]))
        (*e)--;
}

static int out_of_range(const struct option_spec *sp)
{
    if (sp->kind == INT)
        return rlc_fail(RLC_E_INVAL, "option %s must be an integer from %.0f to %.0f",
                        sp->name, sp->min, sp->max);
    return rlc_fail(RLC_E_INVAL, "option %s must be a number from %g to %g", sp->name,
                    sp->min, sp->max);
}

/* A CHOICE: the index of the word v names, or an error listing them. */
static int choose(const struct option_spec *sp, const char *v, size_t len, char *field)
{
    for (int64_t i = 0; sp->choices[i]; i++) {
        if (strlen(sp->choices[i]) == len && memcmp(sp->choices[i], v, len) == 0) {
            memcpy(field, &i, sizeof i);
            return RLC_OK;
        }
    }
    char words[128] = "";
    for (int i = 0; sp->choices[i]; i++) {
        size_t at = strlen(words);
        snprintf(words + at, sizeof words - at, "%s%s", i ? " or " : "", sp->choices[i]);
    }
    return rlc_fail(RLC_E_INVAL, "option %s must be %s", sp->name, words);
}

static int apply(const struct option_spec *sp, const char *v, size_t len, struct rlc_options *o)
{
    char *field = (char *)o + sp->offset;
    if (sp->kind == CHOICE)
        return choose(sp, v, len, field);
    if (sp->kind == TEXT) {
        if (len > (size_t)sp->max)
            return rlc_fail(RLC_E_INVAL, "option %s is longer than %.0f bytes", sp->name, sp->max);
        if (len < (size_t)sp->min)
            return rlc_fail(RLC_E_INVAL, "option %s must not be empty", sp->name);
        char *copy = strndup(v, len);
        if (!copy)
            return rlc_fail(RLC_E_NOMEM, "out of memory");
        memcpy(field, &copy, sizeof copy);
        return RLC_OK;
    }

    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return out_of_range(sp);
    memcpy(buf, v, len);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        int ok = (c >= '0' && c <= '9') || (sp->kind == FRACTION && c == '.');
        if (!ok)
            return out_of_range(sp);
    }
    char *end;
    errno = 0;
    if (sp->kind == INT) {
        long long x = strtoll(buf, &end, 10);
        if (errno || *end || x < sp->min || x > sp->max)
            return out_of_range(sp);
        int64_t val = x;
        memcpy(field, &val, sizeof val);
    } else {
        double x = strtod(buf, &end);
        if (errno || *end || !isfinite(x) || x < sp->min || x > sp->max)
            return out_of_range(sp);
        memcpy(field, &x, sizeof x);
    }
    return RLC_OK;
}

static int parse_into(const char *s, struct rlc_options *o)
{
    unsigned seen = 0;
    while (s && *s) {
        const char *end = strchr(s, ';');
        if (!end)
            end = s + strlen(s);
        const char *a = s, *b = end;
        s = *end ? end + 1 : end;
        /* Only the name and numbers are trimmed: a text value (key_prefix)
         * is taken as written, trailing spaces included. */
        const char *ta = a, *tb = b;
        trim(&ta, &tb);
        if (ta == tb)
            continue; /* "a=1;" or ";;": nothing to set */
        a = ta;

        const char *eq = memchr(a, '=', (size_t)(b - a));
        if (!eq)
            return rlc_fail(RLC_E_INVAL, "option '%.*s' has no '=value'", (int)(tb - a), a);
        const char *name = a, *name_end = eq;
        trim(&name, &name_end);
        size_t nlen = (size_t)(name_end - name);
        const struct option_spec *sp = NULL;
        for (size_t i = 0; i < NSPECS; i++)
            if (strlen(specs[i].name) == nlen && memcmp(specs[i].name, name, nlen) == 0)
                sp = &specs[i];
        if (!sp)
            return rlc_fail(RLC_E_INVAL, "unknown option '%.*s'", (int)(nlen > 64 ? 64 : nlen),
                            name);
        unsigned bit = 1u << (sp - specs);
        if (seen & bit)
            return rlc_fail(RLC_E_INVAL, "option %s given twice", sp->name);
        seen |= bit;

        const char *v = eq + 1, *v_end = b;
        if (sp->kind != TEXT)
            trim(&v, &v_end);
        int rc = apply(sp, v, (size_t)(v_end - v), o);
        if (rc != RLC_OK)
            return rc;
        if (!(o->given[sp - specs] = strndup(v, (size_t)(v_end - v))))
            return rlc_fail(RLC_E_NOMEM, "out of memory");
    }
    if (o->tls_key_file && !o->tls_cert_file)
        return rlc_fail(RLC_E_INVAL, "option tls_key_file needs tls_cert_file (the client "
                                     "certificate it belongs to)");
    if (o->fencing && o->format == RLC_FORMAT_CLASSIC)
        return rlc_fail(RLC_E_INVAL, "option fencing=1 needs format=redisson: the classic "
                                     "format's key holds a random value and no token");
    if (!o->key_prefix && !(o->key_prefix = strdup("")))
        return rlc_fail(RLC_E_NOMEM, "out of memory");
    return RLC_OK;
}

int options_parse(const char *s, struct rlc_options *o)
{
    set_defaults(o);
    int rc = parse_into(s, o);
    if (rc != RLC_OK)
        options_free(o);
    return rc;
}

/* Does not leave a secret lying in freed heap memory. */
static void free_secret(char *s)
{
    if (!s)
        return;
    for (volatile char *p = s; *p; p++)
        *p = 0;
    free(s);
}

void options_free(struct rlc_options *o)
{
    for (size_t i = 0; i < NSPECS; i++) {
        if (specs[i].kind == TEXT) {
            char **field = (char **)((char *)o + specs[i].offset);
            if (strstr(specs[i].name, "password")) {
                free_secret(*field);
                free_secret(o->given[i]);
                *field = NULL;
                o->given[i] = NULL;
            }
            free(*field);
            *field = NULL;
        }
        free(o->given[i]);
        o->given[i] = NULL;
    }
}

/* "name kind range default" of spec i, written into buf. */
static void describe(const struct option_spec *sp, const struct rlc_options *d, char *buf,
                     size_t size)
{
    const char *field = (const char *)d + sp->offset;
    int64_t iv;
    double fv;
    char range[96] = "", def[64] = "";
    switch (sp->kind) {
    case INT:
        memcpy(&iv, field, sizeof iv);
        snprintf(range, sizeof range, "%.0f..%.0f", sp->min, sp->max);
        snprintf(def, sizeof def, iv < 0 ? "auto" : "%lld", (long long)iv);
        break;
    case FRACTION:
        memcpy(&fv, field, sizeof fv);
        snprintf(range, sizeof range, "%g..%g", sp->min, sp->max);
        snprintf(def, sizeof def, "%g", fv);
        break;
    case TEXT:
        snprintf(range, sizeof range, "%.0f..%.0f", sp->min, sp->max);
        snprintf(def, sizeof def, "-"); /* none: the library's own choice */
        break;
    case CHOICE:
        memcpy(&iv, field, sizeof iv);
        for (int i = 0; sp->choices[i]; i++) {
            size_t at = strlen(range);
            snprintf(range + at, sizeof range - at, "%s%s", i ? "|" : "", sp->choices[i]);
        }
        snprintf(def, sizeof def, "%s", sp->choices[iv]);
        break;
    }
    static const char *const kinds[] = {"int", "fraction", "text", "choice"};
    snprintf(buf, size, "%s %s %s %s", sp->name, kinds[sp->kind], range, def);
}

#define DESCRIBED 160
static char described[NSPECS][DESCRIBED];
static pthread_once_t described_once = PTHREAD_ONCE_INIT;

static void describe_all(void)
{
    struct rlc_options d;
    set_defaults(&d);
    for (size_t i = 0; i < NSPECS; i++)
        describe(&specs[i], &d, described[i], DESCRIBED);
}

const char *rlc_option_describe(int i)
{
    if (i < 0 || (size_t)i >= NSPECS)
        return NULL;
    pthread_once(&described_once, describe_all);
    return described[i];
}

const char *options_given(const struct rlc_options *o, const char *name)
{
    if (!o || !name)
        return NULL;
    for (size_t i = 0; i < NSPECS; i++)
        if (strcmp(specs[i].name, name) == 0)
            return o->given[i];
    return NULL;
}

int options_any_tls(const struct rlc_options *o)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (o->given[i] && strncmp(specs[i].name, "tls_", 4) == 0)
            return 1;
    return 0;
}
