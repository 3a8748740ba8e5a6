/*
 * redis_server.c - starting and stopping real redis-server processes.
 */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"

int rs_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return ntohs(sa.sin_port);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int ping_ok(const struct redis_server *s)
{
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    int ok = 0;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        redisReply *r = redisCommand(c, "PING");
        /* PONG, or NOAUTH from a server started with --requirepass: up. */
        ok = r && ((r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0) ||
                   (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOAUTH", 6) == 0));
        if (r)
            freeReplyObject(r);
    }
    if (c)
        redisFree(c);
    return ok;
}

static int spawn(struct redis_server *s)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    const char *common[] = {"--port", port, "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--daemonize", "no",
                            "--dir", s->dir, "--unixsocket", s->socket,
                            "--unixsocketperm", "700", "--logfile", "redis.log",
                            "--protected-mode", "no", NULL};
    /* RLC_SERVER names the server to test against (valkey-server; the
     * suites run on both, tests/run_all.sh's "valkey" suite) */
    const char *bin = getenv("RLC_SERVER");
    if (!bin || !*bin)
        bin = "redis-server";
    const char *argv[48] = {bin};
    int n = 1;
    if (s->conf[0]) { /* the config file must come first */
        argv[n++] = s->conf;
        argv[n++] = "--sentinel";
    }
    for (int i = 0; common[i]; i++)
        argv[n++] = common[i];
    for (int i = 0; s->extra[i] && n < 46; i++)
        argv[n++] = s->extra[i];
    argv[n] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        execvp(bin, (char *const *)argv);
        _exit(127);
    }
    s->pid = pid;
    /* Bounded: 10 s for the server to answer PING. */
    for (int i = 0; i < 1000; i++) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            s->pid = 0;
            return -1;
        }
        if (ping_ok(s))
            return 0;
        sleep_ms(10);
    }
    rs_kill(s);
    return -1;
}

int rs_start(struct redis_server *s, const char *const *extra)
{
    memset(s, 0, sizeof *s);
    for (int i = 0; extra && extra[i] && i < 15; i++)
        s->extra[i] = extra[i];
    snprintf(s->dir, sizeof s->dir, "/tmp/rlc-test-XXXXXX");
    if (!mkdtemp(s->dir))
        return -1;
    snprintf(s->socket, sizeof s->socket, "%s/redis.sock", s->dir);
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = rs_free_port();
        if (s->port <= 0)
            continue;
        snprintf(s->uri, sizeof s->uri, "redis://127.0.0.1:%d", s->port);
        if (spawn(s) == 0)
            return 0;
    }
    return -1;
}

int rs_start_sentinel(struct redis_server *s, const char *conf_text)
{
    memset(s, 0, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/rlc-test-XXXXXX");
    if (!mkdtemp(s->dir))
        return -1;
    snprintf(s->socket, sizeof s->socket, "%s/redis.sock", s->dir);
    snprintf(s->conf, sizeof s->conf, "%s/sentinel.conf", s->dir);
    FILE *f = fopen(s->conf, "w");
    if (!f)
        return -1;
    fputs(conf_text, f);
    fclose(f);
    for (int attempt = 0; attempt < 5; attempt++) {
        s->port = rs_free_port();
        if (s->port <= 0)
            continue;
        snprintf(s->uri, sizeof s->uri, "127.0.0.1:%d", s->port);
        if (spawn(s) == 0)
            return 0;
    }
    return -1;
}

int rs_restart(struct redis_server *s)
{
    if (s->pid > 0)
        rs_kill(s);
    /* The old process is reaped; its port may linger in TIME_WAIT, which
     * redis-server tolerates (SO_REUSEADDR). Try a few times. */
    for (int attempt = 0; attempt < 20; attempt++) {
        if (spawn(s) == 0)
            return 0;
        sleep_ms(50);
    }
    return -1;
}

void rs_kill(struct redis_server *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGCONT);
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

void rs_stop(struct redis_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGCONT);
        kill(s->pid, SIGTERM);
        for (int i = 0; i < 300; i++) { /* 3 s */
            if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
                s->pid = 0;
                break;
            }
            sleep_ms(10);
        }
        rs_kill(s);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/redis.log", s->dir);
    unlink(path);
    if (s->conf[0])
        unlink(s->conf);
    unlink(s->socket);
    rmdir(s->dir);
}

void rs_pause(struct redis_server *s)
{
    if (s->pid > 0)
        kill(s->pid, SIGSTOP);
}

void rs_resume(struct redis_server *s)
{
    if (s->pid > 0)
        kill(s->pid, SIGCONT);
}

redisContext *rs_connect(const struct redis_server *s)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    if (c && c->err) {
        redisFree(c);
        return NULL;
    }
    if (c)
        redisSetTimeout(c, tv);
    return c;
}

static redisReply *vcmd(const struct redis_server *s, const char *fmt, va_list ap)
{
    redisContext *c = rs_connect(s);
    if (!c)
        return NULL;
    redisReply *r = redisvCommand(c, fmt, ap);
    redisFree(c);
    return r;
}

redisReply *rs_cmd(const struct redis_server *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(s, fmt, ap);
    va_end(ap);
    return r;
}

long long rs_int(const struct redis_server *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(s, fmt, ap);
    va_end(ap);
    long long v = LLONG_MIN;
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r)
        freeReplyObject(r);
    return v;
}

long long rs_info_int(const struct redis_server *s, const char *section, const char *field)
{
    redisReply *r = rs_cmd(s, "INFO %s", section);
    size_t n = strlen(field);
    long long v = -1;
    for (const char *p = r && r->type == REDIS_REPLY_STRING ? r->str : NULL; p;
         p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, field, n) == 0 && (p[n] == ':' || p[n] == '=')) {
            v = atoll(p + n + 1);
            break;
        }
    if (r)
        freeReplyObject(r);
    return v;
}
