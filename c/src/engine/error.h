/*
 * error.h - setting the calling thread's detail message.
 *
 * Every failing public call leaves one line in a thread-local buffer that
 * rlc_errmsg() returns. Messages name the node and the key, never a password:
 * callers format nodes with node_label(), which has none.
 */
#ifndef RLC_ERROR_H
#define RLC_ERROR_H

#include <stddef.h>

#if defined(__GNUC__)
#define RLC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RLC_PRINTF(a, b)
#endif

/* Sets the detail and returns status, so that `return rlc_fail(...)` reads well. */
int rlc_fail(int status, const char *fmt, ...) RLC_PRINTF(2, 3);

/* Sets the detail to a copy of msg (NULL: the status' own phrase). */
int rlc_fail_msg(int status, const char *msg);

/* Writes at most n bytes of s into a message, as 'abc...' if it is longer:
 * a 1 MiB lock name must not flood a message. */
const char *rlc_clip(const char *s, char *buf, size_t bufsize);

/* A lock name as a message shows it (the blocking API's lock_shown): whole
 * up to 79 bytes, else its first 76 and "...". Never cut silently: a name
 * cut short can be another lock's. The buffer lives in the enclosing block. */
#define RLC_SHOWN(s) rlc_clip((s), (char[80]){0}, 80)

#endif
