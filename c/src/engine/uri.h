/*
 * uri.h - node URIs -> addresses. Parsing only: no sockets, no DNS.
 */
#ifndef RLC_URI_H
#define RLC_URI_H

#define RLC_MAX_NODES 64

struct node_addr {
    int is_unix;
    int tls;         /* rediss://: the driver speaks TLS to it (the engine sees plain RESP) */
    char *host;      /* TCP: name or address (IPv6 without brackets) */
    int port;        /* TCP */
    char *path;      /* unix socket path */
    char *user;      /* ACL user, or NULL */
    char *password;  /* NULL: no AUTH */
    int db;          /* SELECT when non-zero */
    char label[160]; /* "127.0.0.1:6379" or the socket path: for messages, no secrets */
    struct resolver *resolver; /* TCP: the client's lookups (resolve.h); not the parser's */
};

/* Parses "uri[,uri...]". On success *out is an array of *count addresses.
 * On failure returns RLC_E_INVAL (or RLC_E_NOMEM) and sets the thread's
 * message; the message shows a URI with its password replaced by "***". */
int uri_parse_list(const char *nodes, struct node_addr **out, int *count);

void uri_free_list(struct node_addr *nodes, int count);

#endif
