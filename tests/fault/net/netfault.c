/*
 * netfault.c - namespaces, nftables rules and the proxy process (netfault.h).
 *
 * Commands run by fork + exec (never a shell), each bounded: a command that
 * has not finished in 10 s is killed. Namespaces this process made are
 * recorded and deleted at exit and on a terminating signal, so a failed
 * test leaves none behind.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "netfault.h"

#define MAXNS 8

static char made[MAXNS][40];
static pid_t maker;

static void nf_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Runs argv (bounded 10 s); 0 if it exited 0. Quiet unless it failed. */
static int run_argv(char *const argv[], bool quiet)
{
    int errpipe[2];
    if (pipe(errpipe) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(errpipe[1], 2);
        dup2(errpipe[1], 1);
        close(errpipe[0]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(errpipe[1]);
    fcntl(errpipe[0], F_SETFL, O_NONBLOCK);
    char out[1024];
    size_t olen = 0;
    int status = -1;
    for (int i = 0; i < 2000; i++) { /* 10 s */
        ssize_t r = read(errpipe[0], out + olen, sizeof out - 1 - olen);
        if (r > 0)
            olen += (size_t)r;
        if (waitpid(pid, &status, WNOHANG) == pid)
            break;
        if (i == 1999) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            status = -1;
        }
        nf_sleep_ms(5);
    }
    ssize_t r;
    while (olen < sizeof out - 1 && (r = read(errpipe[0], out + olen, sizeof out - 1 - olen)) > 0)
        olen += (size_t)r;
    close(errpipe[0]);
    out[olen] = '\0';
    bool ok = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && !quiet) {
        fprintf(stderr, "netfault: command failed:");
        for (int i = 0; argv[i]; i++)
            fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "\n%s", out);
    }
    return ok ? 0 : -1;
}

/* `ip netns exec ns nft <args split on spaces>`. */
int nft_run(const char *ns, const char *args)
{
    char copy[512];
    snprintf(copy, sizeof copy, "%s", args);
    char *argv[64] = {"ip", "netns", "exec", (char *)ns, "nft"};
    int n = 5;
    for (char *save, *t = strtok_r(copy, " ", &save); t && n < 63; t = strtok_r(NULL, " ", &save))
        argv[n++] = t;
    argv[n] = NULL;
    return run_argv(argv, false);
}

static void destroy_all(void)
{
    if (getpid() != maker)
        return;
    for (int i = 0; i < MAXNS; i++)
        if (made[i][0])
            netns_destroy(made[i]);
}

static void on_signal(int sig)
{
    destroy_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

int netns_create(char *name, size_t size)
{
    static int seq;
    const char *prefix = getenv("RLC_NETNS_PREFIX");
    char def[32];
    if (!prefix || !*prefix) {
        snprintf(def, sizeof def, "rlcf%d_", (int)getpid());
        prefix = def;
    }
    int slot = -1;
    for (int i = 0; i < MAXNS && slot < 0; i++)
        if (!made[i][0])
            slot = i;
    if (slot < 0) {
        fprintf(stderr, "netfault: too many namespaces\n");
        return -1;
    }
    snprintf(name, size, "%s%d", prefix, seq++);
    if (maker != getpid()) {
        maker = getpid();
        atexit(destroy_all);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        signal(SIGHUP, on_signal);
    }
    char *add[] = {"ip", "netns", "add", name, NULL};
    if (run_argv(add, false) != 0)
        return -1;
    snprintf(made[slot], sizeof made[slot], "%s", name);
    char *lo[] = {"ip", "netns", "exec", name, "ip", "link", "set", "lo", "up", NULL};
    if (run_argv(lo, false) != 0 || nft_run(name, "add table inet rlc") != 0 ||
        nft_run(name, "add chain inet rlc in { type filter hook input priority 0 ; }") != 0 ||
        nft_run(name, "add set inet rlc drop_ports { type inet_service ; }") != 0 ||
        nft_run(name, "add set inet rlc reset_ports { type inet_service ; }") != 0 ||
        nft_run(name, "add set inet rlc ddrop_ports { type inet_service ; }") != 0 ||
        nft_run(name, "add counter inet rlc dropped") != 0 ||
        nft_run(name, "add counter inet rlc resets") != 0 ||
        nft_run(name, "add rule inet rlc in tcp sport @drop_ports counter name dropped drop") != 0 ||
        nft_run(name, "add rule inet rlc in tcp dport @ddrop_ports counter name dropped drop") != 0 ||
        nft_run(name, "add rule inet rlc in tcp sport @reset_ports counter name resets reject with tcp reset") != 0) {
        netns_destroy(name);
        return -1;
    }
    return 0;
}

void netns_destroy(const char *name)
{
    char copy[40];
    snprintf(copy, sizeof copy, "%s", name);
    for (int i = 0; i < MAXNS; i++)
        if (strcmp(made[i], copy) == 0)
            made[i][0] = '\0';
    char path[80];
    snprintf(path, sizeof path, "/run/netns/%s", copy);
    if (access(path, F_OK) != 0)
        return;
    char *del[] = {"ip", "netns", "del", copy, NULL};
    run_argv(del, false);
}

int netns_enter(const char *name, int *old)
{
    if (old)
        *old = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    char path[80];
    snprintf(path, sizeof path, "/run/netns/%s", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "netfault: cannot enter %s: %s\n", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

int netns_leave(int old)
{
    if (old < 0)
        return -1;
    int rc = setns(old, CLONE_NEWNET);
    close(old);
    return rc;
}

int netns_private_resolv(const char *content)
{
    char path[] = "/tmp/rlc-resolv-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    if (write(fd, content, strlen(content)) < 0) {
        close(fd);
        return -1;
    }
    close(fd);
    int rc = -1;
    if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
        mount(path, "/etc/resolv.conf", NULL, MS_BIND, NULL) == 0)
        rc = 0;
    else
        fprintf(stderr, "netfault: private resolv.conf: %s\n", strerror(errno));
    unlink(path); /* the bind mount keeps the inode */
    return rc;
}

static int set_elem(const char *ns, const char *verb, const char *set, int port)
{
    char args[128];
    snprintf(args, sizeof args, "%s element inet rlc %s { %d }", verb, set, port);
    return nft_run(ns, args);
}

int nft_drop_port(const char *ns, int sport) { return set_elem(ns, "add", "drop_ports", sport); }
int nft_reset_port(const char *ns, int sport) { return set_elem(ns, "add", "reset_ports", sport); }
int nft_drop_dport(const char *ns, int dport) { return set_elem(ns, "add", "ddrop_ports", dport); }

int nft_accept_port(const char *ns, int sport)
{
    /* "delete" fails for a port not in the set: ignore, either way it passes. */
    char a1[96], a2[96];
    snprintf(a1, sizeof a1, "%d", sport);
    char *d1[] = {"ip", "netns", "exec", (char *)ns, "nft", "delete", "element", "inet", "rlc",
                  "drop_ports", "{", a1, "}", NULL};
    char *d2[] = {"ip", "netns", "exec", (char *)ns, "nft", "delete", "element", "inet", "rlc",
                  "reset_ports", "{", a1, "}", NULL};
    snprintf(a2, sizeof a2, "%s", a1);
    run_argv(d1, true);
    run_argv(d2, true);
    return 0;
}

int nft_accept(const char *ns)
{
    int rc = nft_run(ns, "flush set inet rlc drop_ports");
    rc |= nft_run(ns, "flush set inet rlc reset_ports");
    rc |= nft_run(ns, "flush set inet rlc ddrop_ports");
    return rc ? -1 : 0;
}

long long nft_count(const char *ns, const char *which)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ip netns exec %s nft list counter inet rlc %s", ns, which);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    char line[256];
    long long v = -1;
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, "packets ");
        if (p)
            v = atoll(p + 8);
    }
    pclose(f);
    return v;
}

/* ---- proxy ---------------------------------------------------------------- */

int nf_listen(int port, int *bound)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        close(fd);
        return -1;
    }
    if (bound)
        *bound = ntohs(sa.sin_port);
    return fd;
}

int proxy_start(struct nf_proxy *p, int target_port, int64_t lifetime_ms)
{
    memset(p, 0, sizeof *p);
    p->pid = 0;
    p->ctl_w = p->ctl_r = -1;
    int lfd = nf_listen(0, &p->port);
    int to[2], from[2];
    if (lfd < 0 || pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0) {
        fprintf(stderr, "netfault: proxy: %s\n", strerror(errno));
        return -1;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        close(to[1]);
        close(from[0]);
        _exit(proxy_serve(lfd, target_port, to[0], from[1], lifetime_ms));
    }
    close(lfd);
    close(to[0]);
    close(from[1]);
    p->pid = pid;
    p->target_port = target_port;
    p->ctl_w = to[1];
    p->ctl_r = from[0];
    return 0;
}

void proxy_stop(struct nf_proxy *p)
{
    if (p->pid <= 0)
        return;
    char reply[64];
    proxy_cmd(p, reply, sizeof reply, "quit");
    close(p->ctl_w);
    close(p->ctl_r);
    for (int i = 0; i < 300; i++) { /* 3 s */
        if (waitpid(p->pid, NULL, WNOHANG) == p->pid) {
            p->pid = 0;
            return;
        }
        nf_sleep_ms(10);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}

int proxy_cmd(struct nf_proxy *p, char *reply, size_t size, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    reply[0] = '\0';
    if (p->pid <= 0 || n < 0)
        return -1;
    line[n++] = '\n';
    if (write(p->ctl_w, line, (size_t)n) != n)
        return -1;
    /* One reply line; bounded by the proxy's poll period (200 ms) + slack. */
    size_t len = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (len < size - 1) {
        struct timeval tv = {5, 0};
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(p->ctl_r, &rd);
        if (select(p->ctl_r + 1, &rd, NULL, NULL, &tv) <= 0)
            return -1;
        ssize_t r = read(p->ctl_r, reply + len, 1);
        if (r <= 0)
            return -1;
        if (reply[len] == '\n')
            break;
        len++;
    }
    reply[len] = '\0';
    return strncmp(reply, "ok", 2) == 0 ? 0 : -1;
}

static int conn_verb(struct nf_proxy *p, const char *verb, int conn)
{
    char reply[256];
    int rc = conn < 0 ? proxy_cmd(p, reply, sizeof reply, "%s all", verb)
                      : proxy_cmd(p, reply, sizeof reply, "%s %d", verb, conn);
    if (rc != 0)
        fprintf(stderr, "netfault: proxy %s %d: %s\n", verb, conn, reply);
    return rc;
}

int proxy_stall(struct nf_proxy *p, int conn) { return conn_verb(p, "stall", conn); }
int proxy_release(struct nf_proxy *p, int conn) { return conn_verb(p, "release", conn); }
int proxy_cut(struct nf_proxy *p, int conn) { return conn_verb(p, "cut", conn); }
int proxy_cut_on_reply(struct nf_proxy *p, int conn) { return conn_verb(p, "cutonreply", conn); }

static int count(struct nf_proxy *p, int which)
{
    char reply[128];
    int acc, open;
    if (proxy_cmd(p, reply, sizeof reply, "count") != 0 ||
        sscanf(reply, "ok %d %d", &acc, &open) != 2)
        return -1;
    return which ? open : acc;
}

int proxy_accepted(struct nf_proxy *p) { return count(p, 0); }
int proxy_open(struct nf_proxy *p) { return count(p, 1); }

int proxy_conn_info(struct nf_proxy *p, int conn, int *port, int *open, long *held)
{
    char reply[8192];
    if (proxy_cmd(p, reply, sizeof reply, "list") != 0)
        return -1;
    char *save, *tok = strtok_r(reply + 2, " ", &save);
    for (; tok; tok = strtok_r(NULL, " ", &save)) {
        int id, pt;
        char st[16];
        long h;
        if (sscanf(tok, "%d:%d:%15[a-z]:%ld", &id, &pt, st, &h) == 4 && id == conn) {
            if (port)
                *port = pt;
            if (open)
                *open = strcmp(st, "open") == 0;
            if (held)
                *held = h;
            return 0;
        }
    }
    return -1;
}
