/*
 * child.c - running a peer (redis-benchmark, node, python) as a child.
 *
 * Each child gets its own process group, so that a timed-out child is ended
 * with everything it started (a Python driver may start servers of its own),
 * and dies with the driver (PR_SET_PDEATHSIG) if the driver dies first.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

static void exec_child(const char *const *argv, const char *const *env, int out_fd, int err_fd,
                       pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
        dup2(devnull, STDIN_FILENO);
    for (int i = 0; env && env[i]; i++)
        putenv((char *)env[i]);
    execvp(argv[0], (char *const *)argv);
    _exit(127);
}

/* Appends what is readable on fd to *buf; false at EOF or error. */
static int drain(int fd, char **buf, size_t *len, size_t *cap)
{
    char tmp[8192];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR)
        return 1;
    if (n <= 0)
        return 0;
    if (*len + (size_t)n + 1 > *cap) {
        size_t c = *cap ? *cap * 2 : 16384;
        while (c < *len + (size_t)n + 1)
            c *= 2;
        char *p = realloc(*buf, c);
        if (!p)
            return 0;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, tmp, (size_t)n);
    *len += (size_t)n;
    (*buf)[*len] = '\0';
    return 1;
}

int run_child(const char *const *argv, const char *const *env, double timeout_s, char **out,
              FILE *log, int64_t *cpu_ns)
{
    int pfd[2];
    *out = NULL;
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return -1;
    int err_fd = log ? fileno(log) : open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (log)
        fflush(log);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0)
        exec_child(argv, env, pfd[1], err_fd, parent);
    close(pfd[1]);
    if (!log && err_fd >= 0)
        close(err_fd);
    if (pid < 0) {
        close(pfd[0]);
        return -1;
    }
    setpgid(pid, pid); /* also here: no race with the child's own call */

    char *buf = NULL;
    size_t len = 0, cap = 0;
    int64_t deadline = now_ns() + (int64_t)(timeout_s * 1e9);
    int killed = 0;
    for (;;) {
        int64_t left = deadline - now_ns();
        if (left <= 0) {
            note("%s ran past %.0f s: killed", argv[0], timeout_s);
            kill(-pid, SIGKILL);
            killed = 1;
            break;
        }
        struct pollfd p = {pfd[0], POLLIN, 0};
        int ms = left / 1000000 > 1000 ? 1000 : (int)(left / 1000000) + 1;
        if (poll(&p, 1, ms) > 0 && !drain(pfd[0], &buf, &len, &cap))
            break;
    }
    close(pfd[0]);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    /* EOF came first; the exit follows at once (bounded: 5 s, then SIGKILL). */
    pid_t got = 0;
    for (int i = 0; i < 500 && (got = wait4(pid, &status, WNOHANG, &ru)) == 0; i++)
        sleep_ns(10 * 1000000LL);
    if (got == 0) {
        kill(-pid, SIGKILL);
        killed = 1;
        wait4(pid, &status, 0, &ru);
    }
    if (cpu_ns)
        *cpu_ns = ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
                  ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
    *out = buf ? buf : calloc(1, 1);
    if (killed || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}
