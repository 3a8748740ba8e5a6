/*
 * child.c - CMD in a process group of its own.
 *
 * Why a group: when the lock is lost, everything CMD started must stop, not
 * only CMD (a shell script's children would otherwise go on working without
 * the lock). Signalling the group reaches them all.
 *
 * Why the terminal dance: a process group that is not the terminal's
 * foreground group cannot read from it, and Ctrl-C/Ctrl-Z would reach only
 * redlockc. So when redlockc is itself in the foreground of a terminal, CMD's
 * group is made the foreground one (as a shell does for a job), and when CMD
 * stops on Ctrl-Z, redlockc takes the terminal back and stops too, so the
 * shell sees its job stop; "fg" or "bg" continues redlockc, which continues
 * CMD. While both are stopped nothing renews the lock: if it expires, the
 * watchdog reports it lost on continue and CMD is stopped before it works
 * on unprotected.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

const int cli_forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
const int cli_nforwarded = sizeof cli_forwarded / sizeof cli_forwarded[0];

/* Our stdin, if it is a terminal whose foreground group is ours. */
static int foreground_tty(void)
{
    if (!isatty(STDIN_FILENO))
        return -1;
    return tcgetpgrp(STDIN_FILENO) == getpgrp() ? STDIN_FILENO : -1;
}

/* In the child, between fork and exec: async-signal-safe calls only (the
 * parent has other threads, whose locks the child may have copied held). */
static void exec_child(int tty, int report_fd, char **argv, char **env,
                       const sigset_t *orig_mask)
{
    setpgid(0, 0);
    if (tty >= 0)
        tcsetpgrp(tty, getpid()); /* SIGTTOU is still blocked here */
    sigprocmask(SIG_SETMASK, orig_mask, NULL);
    execvpe(argv[0], argv, env);
    int e = errno;
    if (write(report_fd, &e, sizeof e) < 0) {
        /* nothing more to do: the exit status tells the parent */
    }
    _exit(e == ENOENT ? CLI_NOTFOUND : CLI_NOEXEC);
}

int child_start(struct child *ch, char **argv, char **env, const sigset_t *orig_mask)
{
    memset(ch, 0, sizeof *ch);
    ch->tty = foreground_tty();
    /* exec closes the pipe (O_CLOEXEC); a failed exec writes its errno. */
    int report[2];
    if (pipe2(report, O_CLOEXEC) < 0) {
        cli_err("pipe: %s", strerror(errno));
        return CLI_INTERNAL;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        cli_err("fork: %s", strerror(errno));
        close(report[0]);
        close(report[1]);
        return CLI_INTERNAL;
    }
    if (pid == 0)
        exec_child(ch->tty, report[1], argv, env, orig_mask);

    close(report[1]);
    ch->pid = pid;
    /* Also here, so that neither side races the other (as shells do). */
    setpgid(pid, pid);
    if (ch->tty >= 0)
        tcsetpgrp(ch->tty, pid);
    int e = 0;
    ssize_t n;
    do
        n = read(report[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(report[0]);
    if (n != (ssize_t)sizeof e)
        return 0;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    ch->ended = 1;
    child_done(ch);
    cli_err("%s: %s", argv[0], strerror(e));
    return e == ENOENT ? CLI_NOTFOUND : CLI_NOEXEC;
}

void child_signal(const struct child *ch, int sig)
{
    if (ch->pid > 0 && !ch->ended)
        killpg(ch->pid, sig);
}

/* CMD stopped (Ctrl-Z, or SIGTTIN in the background): stop with it. */
static void follow_stop(struct child *ch)
{
    tcsetpgrp(ch->tty, getpgrp());
    kill(getpid(), SIGSTOP); /* returns once "fg" or "bg" continued us */
    if (tcgetpgrp(ch->tty) == getpgrp())
        tcsetpgrp(ch->tty, ch->pid);
    killpg(ch->pid, SIGCONT);
}

void child_poll(struct child *ch)
{
    /* Stops matter only when CMD has the terminal; otherwise whoever stopped
     * it will continue it. */
    int flags = WNOHANG | (ch->tty >= 0 ? WUNTRACED : 0);
    while (!ch->ended) {
        int st;
        pid_t r = waitpid(ch->pid, &st, flags);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return;
        if (WIFSTOPPED(st)) {
            follow_stop(ch);
            continue;
        }
        if (WIFEXITED(st) || WIFSIGNALED(st)) {
            ch->status = st;
            ch->ended = 1;
        }
    }
}

void child_done(struct child *ch)
{
    if (ch->tty >= 0)
        tcsetpgrp(ch->tty, getpgrp());
    ch->tty = -1;
}

int child_exit_status(const struct child *ch)
{
    if (WIFSIGNALED(ch->status))
        return CLI_SIGNAL_BASE + WTERMSIG(ch->status);
    return WEXITSTATUS(ch->status);
}
