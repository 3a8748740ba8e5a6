/*
 * cli.h - what the parts of the redlockc command-line tool share.
 *
 * The tool links the public API (redlockc.h) only. Its parts:
 *   args.c    command line -> struct cli_args, and the --help text
 *   redlockc.c  main: client and lock handle, dispatch, exit status
 *   run.c     "NAME -- CMD": acquire, run CMD under the lock, release
 *   child.c   starting CMD in its own process group, signals, terminal
 *   query.c   "release --force NAME"
 *   inspect.c "status NAME" and "watch NAME": the library's queries
 */
#ifndef REDLOCKC_CLI_H
#define REDLOCKC_CLI_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include "redlockc.h"

/* Exit statuses of the tool itself. They sit in the sysexits(3) band, away
 * from what commands commonly return (0, 1, 2), from timeout(1)'s 124-127
 * and from a shell's 128+N, so a caller can tell "CMD said so" from "the
 * lock said so". Keep --help, redlockc.1 and the README table in step. */
enum {
    CLI_USAGE = 64,       /* bad command line, bad --nodes or --options (EX_USAGE) */
    CLI_UNAVAILABLE = 69, /* Redis unreachable, no quorum, auth or server error */
    CLI_INTERNAL = 70,    /* could not start CMD (fork), out of memory */
    CLI_BUSY = 75,        /* held by another owner and --wait ran out (EX_TEMPFAIL) */
    CLI_LOST = 79,        /* the lock was lost while CMD ran; CMD was stopped */
    CLI_NOEXEC = 126,     /* CMD found but could not be executed (as a shell) */
    CLI_NOTFOUND = 127,   /* CMD not found (as a shell) */
    CLI_SIGNAL_BASE = 128 /* CMD killed by signal N -> 128+N (as a shell) */
};

enum cli_command { CLI_RUN, CLI_STATUS, CLI_RELEASE, CLI_WATCH };

struct cli_args {
    enum cli_command command;
    const char *nodes;   /* never printed: it may hold a password */
    const char *options; /* NULL: library defaults */
    const char *name;
    char **cmd;          /* CLI_RUN: NULL-terminated argv of CMD */
    int64_t wait_ms;     /* < 0 forever (default), 0 try once */
    int64_t lease_ms;    /* <= 0 watchdog (default), > 0 fixed lease */
    int64_t kill_after_ms;
    int verbose;
    int force;
    int json;            /* status --json */
    int conflict_exit;   /* -E CODE: the exit status when busy (default CLI_BUSY) */
};

/* Parses argv into *a. Returns -1 to go on, else the exit status to end
 * with at once (0 after --help/--version, CLI_USAGE after an error, which
 * it has printed). */
int cli_parse(int argc, char **argv, struct cli_args *a);

/* fenced.c: "fenced-set KEY VALUE --token N", parsed and run on its own. */
int cli_is_fenced_set(int argc, char **argv);
int cli_fenced_set(int argc, char **argv);

/* family.c: --read/--write/--fair/--permits/--name, parsed and run on its own. */
int cli_is_family(int argc, char **argv);
int cli_family(int argc, char **argv);

/* Prints "redlockc: " + the formatted message + newline to stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A failed call on lock name: "redlockc: cannot lock 'NAME': msg", without
 * the name when the library's msg says it already (each fact once). */
void cli_err_lock(const char *what, const char *name, const char *msg);

/* The exit status for a failed library call (CLI_UNAVAILABLE, ...). */
int cli_status_exit(int rc);

/* The subcommands; each returns the tool's exit status. */
int cli_run(rlc_lock *l, const struct cli_args *a, const sigset_t *orig_mask);
int cli_status(rlc_lock *l, const struct cli_args *a);
int cli_release(rlc_lock *l, const struct cli_args *a);
int cli_watch(rlc_lock *l, const struct cli_args *a);

/* ---- child.c: CMD in its own process group ------------------------------- */

struct child {
    pid_t pid;    /* also its process group id */
    int tty;      /* the terminal it was given (our stdin), or -1 */
    int status;   /* wait status, once it ended */
    int ended;
};

/* The signals redlockc passes on to CMD's process group. */
extern const int cli_forwarded[];
extern const int cli_nforwarded;

/* Starts argv[0] with env as its environment, in a new process group, with
 * orig_mask as its signal mask. If we are the terminal's foreground process,
 * CMD's group is made the foreground one. Returns 0, or the exit status
 * (CLI_NOTFOUND, CLI_NOEXEC, CLI_INTERNAL) after printing why. */
int child_start(struct child *ch, char **argv, char **env, const sigset_t *orig_mask);

/* Sends sig to CMD's whole process group (what it started too). */
void child_signal(const struct child *ch, int sig);

/* Reaps CMD if it ended; follows it if it stopped (Ctrl-Z): stops this
 * process too, so the shell sees the job stop, and continues CMD with it. */
void child_poll(struct child *ch);

/* Takes the terminal back after CMD ended. */
void child_done(struct child *ch);

/* CMD's wait status as a shell's exit status: code, or 128+signal. */
int child_exit_status(const struct child *ch);

#endif
