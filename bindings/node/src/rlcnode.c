/*
 * rlcnode.c - the Node binding's helper library (librlcnode.so), built by
 * build.js with cc. It adds no feature to libredlockc and uses only
 * redlockc.h.
 *
 * Everything the Node package does runs on the engine: every lock kind
 * (Lock, ReadWriteLock, FairLock, MultiLock), the semaphores and fencedSet.
 * rlcnode_engine.c wraps the engine for koffi where it needs out-pointers
 * or structs, and lib/engine_driver.js moves its bytes on net.Sockets and
 * its time with one timer. Every function here is called on the JS thread:
 * the helper starts no thread, and makes no blocking client.
 *
 * A call's failure detail (rlc_errmsg(), the calling thread's) is copied
 * into a struct rlcn_record right after the call.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <redlockc.h>

#define API __attribute__((visibility("default")))

/* The out-buffer of a call: its status, an answer and the failure detail.
 * lib/engine_driver.js reads it at these offsets. */
struct rlcn_record {
    uint64_t unused;
    int64_t value; /* an answer (a port) */
    int32_t rc;    /* status */
    int32_t pad;
    char msg[232]; /* rlc_errmsg() of the failing call, or a string answer */
};
_Static_assert(sizeof(struct rlcn_record) == 256, "record layout is read by lib/engine_driver.js");

static void set_msg(struct rlcn_record *r, int rc)
{
    if (rc < 0)
        snprintf(r->msg, sizeof r->msg, "%s", rlc_errmsg());
    else
        r->msg[0] = '\0';
}

#include "rlcnode_engine.c" /* the engine, driven from JS (no thread) */

API const char *rlcn_version(void) { return rlc_version(); }
API const char *rlcn_strerror(int rc) { return rlc_strerror(rc); }
API int rlcn_record_size(void) { return (int)sizeof(struct rlcn_record); }
