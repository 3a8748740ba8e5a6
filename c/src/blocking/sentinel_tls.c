/*
 * sentinel_tls.c - one question to a sentinel over TLS (rediss-sentinel://).
 *
 * hiredis 0.14 has no TLS, so the question goes through the client's own
 * connection code (conn.c, tls.c), blocking only the name-lookup thread
 * that asks, with AUTH in its handshake and the sentinel's host as the name
 * its certificate is checked against. resolve.c calls it through the
 * pointer client.c hands it (resolve.h): lookups sit below connections.
 */
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "redlockc.h"
#include "cmd.h"
#include "conn.h"
#include "resolve.h"
#include "sentinel_tls.h"
#include "uri.h"

int sentinel_tls_ask(const struct sentinel_tls_query *q, redisReply **reply, char *why,
                     size_t why_len)
{
    struct node_addr n;
    memset(&n, 0, sizeof n);
    n.host = (char *)q->host;
    n.port = q->port;
    n.tls = 1;
    n.tls_ctx = q->tls;
    n.user = (char *)q->user;
    n.password = (char *)q->password;
    snprintf(n.label, sizeof n.label, "sentinel %s:%d", q->host, q->port);
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", q->master};
    size_t lens[3] = {8, 23, strlen(q->master)};
    struct rlc_cmd *cmd = cmd_format(3, argv, lens);
    struct conn c;
    char err[RLC_ERRLEN] = "out of memory";
    int rc = RLC_E_NOMEM;
    *reply = NULL;
    conn_init(&c, &n, false);
    if (cmd && (n.resolver = resolver_new(n.host, n.port)) && conn_start(&c, err) == RLC_OK &&
        conn_queue(&c, cmd->data, cmd->len) == RLC_OK)
        rc = conn_exchange(&c, 1, reply, q->deadline_ns, err);
    conn_close(&c);
    cmd_unref(cmd);
    if (n.resolver)
        resolver_unref(n.resolver);
    if (rc != RLC_OK)
        /* conn.c's messages name "sentinel host:port" already. */
        snprintf(why, why_len, "%s%s", err,
                 rc == RLC_E_AUTH ? " (sentinel_user/sentinel_password)" : "");
    return rc;
}
