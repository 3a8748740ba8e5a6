/*
 * tls_env.h - a redis-server with a TLS port beside its plain one, and the
 * certificates tests/tls/make_certs.sh makes for it in a temporary
 * directory (the test's executable is built with RLC_SOURCE_DIR). Used by
 * the TLS cases of the blocking API and of the blocking driver.
 */
#ifndef RLC_TEST_TLS_ENV_H
#define RLC_TEST_TLS_ENV_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis_server.h"

#define PASSWORD "tls-Pa55-not-for-logs"

struct tls_env {
    char dir[64];
    char ca[128], other_ca[128], cert[128], key[128], client_pem[128];
    char tls_port_s[16];
    int tls_port;
    struct redis_server s;
    char uri[160];      /* rediss://:pw@127.0.0.1:<tls port> */
    char opts[512];     /* tls_ca_file=<ca> and wide time bounds */
};

/* Certificates, then a server with a TLS port: 0, or -1 (the case fails). */
static inline int env_start(struct tls_env *e, bool client_auth, bool password)
{
    memset(e, 0, sizeof *e);
    snprintf(e->dir, sizeof e->dir, "/tmp/rlc-tls-XXXXXX");
    if (!mkdtemp(e->dir))
        return -1;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/tls/make_certs.sh' '%s'", RLC_SOURCE_DIR, e->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "make_certs.sh failed\n");
        return -1;
    }
    snprintf(e->ca, sizeof e->ca, "%s/ca.crt", e->dir);
    snprintf(e->other_ca, sizeof e->other_ca, "%s/other-ca.crt", e->dir);
    snprintf(e->cert, sizeof e->cert, "%s/server.crt", e->dir);
    snprintf(e->key, sizeof e->key, "%s/server.key", e->dir);
    snprintf(e->client_pem, sizeof e->client_pem, "%s/client.pem", e->dir);
    e->tls_port = rs_free_port();
    snprintf(e->tls_port_s, sizeof e->tls_port_s, "%d", e->tls_port);
    const char *extra[] = {"--tls-port", e->tls_port_s, "--tls-cert-file", e->cert,
                           "--tls-key-file", e->key, "--tls-ca-cert-file", e->ca,
                           "--tls-auth-clients", client_auth ? "yes" : "no",
                           password ? "--requirepass" : NULL, PASSWORD, NULL};
    if (rs_start(&e->s, extra) != 0) {
        fprintf(stderr, "redis-server with --tls-port did not start\n");
        return -1;
    }
    snprintf(e->uri, sizeof e->uri, "rediss://%s127.0.0.1:%d", password ? ":" PASSWORD "@" : "",
             e->tls_port);
    /* Wide time bounds: under valgrind, or on a loaded machine, a TLS
     * handshake alone can outlast the default 1 s io timeout. A refused
     * handshake is answered at once whatever the bound. */
    snprintf(e->opts, sizeof e->opts, "tls_ca_file=%s;io_timeout_ms=20000;connect_timeout_ms=20000",
             e->ca);
    return 0;
}

static inline void env_stop(struct tls_env *e)
{
    if (e->s.pid > 0)
        rs_stop(&e->s);
    char cmd[128];
    if (e->dir[0] && strncmp(e->dir, "/tmp/rlc-tls-", 13) == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", e->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", e->dir);
    }
}

#endif
