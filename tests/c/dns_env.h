/*
 * dns_env.h - a DNS server of the test's own, in a network namespace of its
 * own, for the cases that show a name lookup never blocks a call past its
 * bounds (the blocking API's and the blocking driver's). The scenario runs
 * in a forked child that enters the namespace: needs CAP_SYS_ADMIN, and
 * says 77 (skipped) without it.
 */
#ifndef RLC_TEST_DNS_ENV_H
#define RLC_TEST_DNS_ENV_H

#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* A DNS server on 127.0.0.1:53 of the test's network namespace: while
 * `answering`, every A query gets 127.0.0.1 (AAAA: no records); otherwise
 * queries are dropped, as by a resolver that does not answer. */
struct dns {
    int fd;
    atomic_int answering, stop, queries;
};

static inline void dns_answer(int fd, const unsigned char *q, ssize_t n, struct sockaddr_in *from)
{
    if (n < 12 + 5)
        return;
    ssize_t at = 12;
    while (at < n && q[at] != 0)
        at += q[at] + 1;
    if (at + 5 > n)
        return;
    int qtype = q[at + 1] << 8 | q[at + 2];
    at += 5;
    unsigned char r[600];
    if (at + 16 > (ssize_t)sizeof r)
        return;
    memcpy(r, q, (size_t)at);
    r[2] = 0x81; /* QR, RD */
    r[3] = 0x80; /* RA, NOERROR */
    r[4] = 0, r[5] = 1, r[6] = 0, r[7] = qtype == 1, r[8] = r[9] = r[10] = r[11] = 0;
    if (qtype == 1) {
        static const unsigned char a[16] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4,
                                            127, 0, 0, 1};
        memcpy(r + at, a, sizeof a);
        at += sizeof a;
    }
    sendto(fd, r, (size_t)at, 0, (struct sockaddr *)from, sizeof *from);
}

static inline void *dns_main(void *arg)
{
    struct dns *d = arg;
    while (!atomic_load(&d->stop)) {
        struct pollfd p = {d->fd, POLLIN, 0};
        if (poll(&p, 1, 20) <= 0)
            continue;
        unsigned char q[512];
        struct sockaddr_in from;
        socklen_t len = sizeof from;
        ssize_t n = recvfrom(d->fd, q, sizeof q, 0, (struct sockaddr *)&from, &len);
        if (n > 0)
            atomic_fetch_add(&d->queries, 1);
        if (n > 0 && atomic_load(&d->answering))
            dns_answer(d->fd, q, n, &from);
    }
    return NULL;
}

/* In a new network and mount namespace: loopback up, and /etc/resolv.conf
 * naming 127.0.0.1 with one 4 s try. 0, or 77 without the privilege. */
static inline int enter_dns_namespace(void)
{
    if (unshare(CLONE_NEWNET | CLONE_NEWNS) != 0) {
        fprintf(stderr, "SKIP: unshare(CLONE_NEWNET|CLONE_NEWNS): %s\n", strerror(errno));
        return 77;
    }
    if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) != 0)
        return 1;
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) != 0)
        return 1;
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0)
        return 1;
    close(fd);
    char path[] = "/tmp/rlc-resolv-XXXXXX";
    int tfd = mkstemp(path);
    const char conf[] = "nameserver 127.0.0.1\noptions timeout:4 attempts:1\n";
    if (tfd < 0 || write(tfd, conf, sizeof conf - 1) != (ssize_t)(sizeof conf - 1))
        return 1;
    close(tfd);
    int rc = mount(path, "/etc/resolv.conf", "none", MS_BIND, NULL);
    unlink(path); /* the mount keeps it */
    return rc == 0 ? 0 : 1;
}

/* Starts answering on 127.0.0.1:53 (in the namespace): 0, or -1. */
static inline int dns_serve(struct dns *d, pthread_t *t)
{
    memset(d, 0, sizeof *d);
    d->fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (d->fd < 0 || bind(d->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        return -1;
    atomic_store(&d->answering, 1);
    return pthread_create(t, NULL, dns_main, d) == 0 ? 0 : -1;
}

/* Runs scenario in a forked child (it enters the namespace itself) and
 * returns its exit status: 0 passed, 77 skipped, else failed (killed after
 * 60 s: 1). */
static inline int dns_scenario_in_child(int (*scenario)(void))
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(scenario());
    if (pid < 0)
        return 1;
    int status = 0;
    int64_t until = check_now_ms() + 60000;
    pid_t w;
    while ((w = waitpid(pid, &status, WNOHANG)) == 0 && check_now_ms() < until)
        check_sleep_ms(10);
    if (w == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fprintf(stderr, "the namespace scenario did not end within 60 s\n");
        return 1;
    }
    if (!WIFEXITED(status)) {
        fprintf(stderr, "the namespace scenario died (status %d)\n", status);
        return 1;
    }
    return WEXITSTATUS(status);
}

#endif
