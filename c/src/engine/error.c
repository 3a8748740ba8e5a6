/*
 * error.c - status phrases and the thread-local detail message.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "redlockc.h"
#include "error.h"

static __thread char errbuf[1024];

const char *rlc_strerror(int status)
{
    switch (status) {
    case RLC_OK: return "ok";
    case RLC_NOT_ACQUIRED: return "lock not acquired: held by another owner";
    case RLC_E_INVAL: return "invalid argument";
    case RLC_E_NOMEM: return "out of memory";
    case RLC_E_CONNECT: return "cannot connect to Redis";
    case RLC_E_TIMEOUT: return "Redis did not answer in time";
    case RLC_E_NOT_OWNER: return "not held by this owner";
    case RLC_E_LOST: return "lock lost: it expired or was taken";
    case RLC_E_NO_QUORUM: return "no quorum: too few Redis nodes answered";
    case RLC_E_SERVER: return "Redis replied an error";
    case RLC_E_PROTOCOL: return "unexpected reply from Redis";
    case RLC_E_CLOSED: return "client closed";
    case RLC_E_AUTH: return "Redis authentication failed";
    case RLC_E_CANCELED: return "cancelled";
    default: return "unknown status";
    }
}

const char *rlc_errmsg(void)
{
    return errbuf[0] ? errbuf : "no error";
}

int rlc_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return status;
}

int rlc_fail_msg(int status, const char *msg)
{
    snprintf(errbuf, sizeof errbuf, "%s", msg ? msg : rlc_strerror(status));
    return status;
}

const char *rlc_clip(const char *s, char *buf, size_t bufsize)
{
    size_t n = strlen(s);
    if (n < bufsize) {
        memcpy(buf, s, n + 1);
    } else {
        memcpy(buf, s, bufsize - 4);
        memcpy(buf + bufsize - 4, "...", 4);
    }
    return buf;
}
