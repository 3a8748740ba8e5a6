/*
 * fuzz_options.c - libFuzzer target for option strings (c/src/options.c).
 *
 * A finding is a crash, a leak, a status other than OK/INVAL/NOMEM, an
 * empty or unbounded message, or an accepted string whose values break the
 * documented ranges (README "Options"). An accepted string is also written
 * back out as "name=value;..." and parsed again: both parses must agree, so
 * the parser cannot accept something it then reads differently.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redlockc.h"
#include "options.h"

static void finding(const char *what, const char *input, const char *detail)
{
    fprintf(stderr, "FINDING: %s\ninput: '%s'\ndetail: %s\n", what, input, detail);
    abort();
}

static void check_ranges(const struct rlc_options *o, const char *input)
{
    int ok = o->watchdog_timeout_ms >= 10 && o->watchdog_timeout_ms <= 86400000 &&
             o->io_timeout_ms >= 1 && o->io_timeout_ms <= 3600000 &&
             o->node_timeout_ms >= 1 && o->node_timeout_ms <= 3600000 &&
             o->connect_timeout_ms >= 1 && o->connect_timeout_ms <= 3600000 &&
             o->retry_jitter_ms >= 0 && o->retry_jitter_ms <= 60000 &&
             o->pool_size >= 1 && o->pool_size <= 64 && isfinite(o->drift_factor) &&
             o->drift_factor >= 0 && o->drift_factor <= 0.5 &&
             (o->tls_verify == 0 || o->tls_verify == 1) &&
             (!o->tls_key_file || o->tls_cert_file);
    if (!ok)
        finding("accepted value out of its documented range", input, "");
    if (!o->key_prefix || strlen(o->key_prefix) > 1024)
        finding("key_prefix NULL or longer than 1024 bytes", input, "");
}

/* Text options as given, or NULL; NULL and NULL are the same. */
static int same_text(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* "name=value;" for a text option that was given (a ';' in it cannot be
 * written back: such input was cut there and never holds one). */
static size_t put_text(char *s, size_t size, const char *name, const char *v)
{
    return v ? (size_t)snprintf(s, size, "%s=%s;", name, v) : 0;
}

/* The options written back in the grammar they were read from. */
static char *format(const struct rlc_options *o)
{
    size_t size = strlen(o->key_prefix) + 5 * 4200 + 512;
    char *s = malloc(size);
    if (!s)
        return NULL;
    size_t n = 0;
    n += put_text(s + n, size - n, "tls_ca_file", o->tls_ca_file);
    n += put_text(s + n, size - n, "tls_ca_dir", o->tls_ca_dir);
    n += put_text(s + n, size - n, "tls_cert_file", o->tls_cert_file);
    n += put_text(s + n, size - n, "tls_key_file", o->tls_key_file);
    n += put_text(s + n, size - n, "tls_server_name", o->tls_server_name);
    snprintf(s + n, size - n,
             "tls_verify=%lld;watchdog_timeout_ms=%lld;io_timeout_ms=%lld;node_timeout_ms=%lld;"
             "connect_timeout_ms=%lld;retry_jitter_ms=%lld;drift_factor=%.17f;"
             "pool_size=%lld;key_prefix=%s",
             (long long)o->tls_verify, (long long)o->watchdog_timeout_ms,
             (long long)o->io_timeout_ms, (long long)o->node_timeout_ms,
             (long long)o->connect_timeout_ms, (long long)o->retry_jitter_ms, o->drift_factor,
             (long long)o->pool_size, o->key_prefix);
    return s;
}

static void round_trip(const struct rlc_options *o, const char *input)
{
    char *text = format(o);
    if (!text)
        return;
    struct rlc_options again;
    int rc = options_parse(text, &again);
    if (rc == RLC_E_NOMEM) {
        free(text);
        return;
    }
    if (rc != RLC_OK)
        finding("accepted options do not parse again when written out", input, text);
    int same = again.watchdog_timeout_ms == o->watchdog_timeout_ms &&
               again.io_timeout_ms == o->io_timeout_ms &&
               again.node_timeout_ms == o->node_timeout_ms &&
               again.connect_timeout_ms == o->connect_timeout_ms &&
               again.retry_jitter_ms == o->retry_jitter_ms && again.pool_size == o->pool_size &&
               fabs(again.drift_factor - o->drift_factor) <= 1e-16 &&
               strcmp(again.key_prefix, o->key_prefix) == 0 &&
               again.tls_verify == o->tls_verify && same_text(again.tls_ca_file, o->tls_ca_file) &&
               same_text(again.tls_ca_dir, o->tls_ca_dir) &&
               same_text(again.tls_cert_file, o->tls_cert_file) &&
               same_text(again.tls_key_file, o->tls_key_file) &&
               same_text(again.tls_server_name, o->tls_server_name);
    if (!same)
        finding("options read back differently", input, text);
    options_free(&again);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0'; /* the API takes C strings: a NUL ends the input */
    struct rlc_options o;
    int rc = options_parse(s, &o);
    if (rc == RLC_OK) {
        check_ranges(&o, s);
        round_trip(&o, s);
        options_free(&o);
    } else if (rc != RLC_E_INVAL && rc != RLC_E_NOMEM) {
        finding("unexpected status", s, rlc_strerror(rc));
    } else {
        const char *msg = rlc_errmsg();
        if (!msg[0] || strlen(msg) >= 1024)
            finding("empty or unbounded message", s, msg);
        if (rc == RLC_E_INVAL && strncmp(msg, "option ", 7) != 0 &&
            strncmp(msg, "unknown option '", 16) != 0)
            finding("message does not name the option", s, msg);
    }
    free(s);
    return 0;
}
