/*
 * uri.h - node URIs -> addresses. Parsing only: no sockets, no DNS.
 */
#ifndef RLC_URI_H
#define RLC_URI_H

#define RLC_MAX_NODES 64
#define RLC_MAX_SEEDS 64

/* What a node URI names: one server, a Redis Cluster (through its seeds), or
 * a master that Redis Sentinel watches (through the sentinels). */
#define RLC_TOPO_STANDALONE 0
#define RLC_TOPO_CLUSTER 1
#define RLC_TOPO_SENTINEL 2

/* One host:port of a cluster's seed list or a sentinel list. */
struct seed_addr {
    char *host;      /* name or address (IPv6 without brackets) */
    int port;
    char label[160]; /* "host:port" or "[v6]:port": for messages */
};

struct node_addr {
    int topology;    /* RLC_TOPO_*: redis(s)://, unix:// are STANDALONE */
    /* CLUSTER: the seed nodes; SENTINEL: the sentinels; in the order given.
     * NULL and 0 for STANDALONE. host, port and label below are seeds[0]'s. */
    struct seed_addr *seeds;
    int n_seeds;
    char *master_name; /* SENTINEL: the monitored master's name; else NULL */
    int is_unix;
    int tls;         /* rediss://, rediss-cluster://, rediss-sentinel://: the driver speaks TLS to it (the engine sees plain RESP) */
    char *host;      /* TCP: name or address (IPv6 without brackets) */
    int port;        /* TCP */
    char *path;      /* unix socket path */
    char *user;      /* ACL user, or NULL (CLUSTER/SENTINEL: of the data nodes) */
    char *password;  /* NULL: no AUTH */
    int db;          /* SELECT when non-zero (SENTINEL: on the master) */
    char label[160]; /* "127.0.0.1:6379" or the socket path: for messages, no secrets */
};

/* Parses "uri[,uri...]". On success *out is an array of *count addresses.
 * On failure returns RLC_E_INVAL (or RLC_E_NOMEM) and sets the thread's
 * message; the message shows a URI with its password replaced by "***". */
int uri_parse_list(const char *nodes, struct node_addr **out, int *count);

void uri_free_list(struct node_addr *nodes, int count);

#endif
