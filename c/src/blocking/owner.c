/*
 * owner.c - client UUIDs, thread owner numbers and fork detection.
 *
 * A thread's owner number comes from a process-wide counter, not from its
 * Linux TID: TIDs are reused after a thread exits, and a new thread must never
 * inherit a dead thread's hold on a lock (its field in the lock's hash).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/random.h>

#include "redlockc.h"
#include "owner.h"

/* Thread owners live above RLC_THREAD_OWNER_BASE and explicit owners below
 * it, so a thread can never share a hold with an explicit owner id; both
 * still fit a signed 64-bit integer (Lua, Java). */
static atomic_uint_fast64_t next_thread_number = RLC_THREAD_OWNER_BASE + 1;
static __thread uint64_t my_thread_number;

static atomic_uint fork_generation;
static pthread_once_t fork_hook_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    atomic_fetch_add(&fork_generation, 1);
}

static void install_fork_hook(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

unsigned owner_fork_generation(void)
{
    pthread_once(&fork_hook_once, install_fork_hook);
    return atomic_load(&fork_generation);
}

uint64_t owner_thread_number(void)
{
    if (my_thread_number == 0)
        my_thread_number = atomic_fetch_add(&next_thread_number, 1);
    return my_thread_number;
}

uint64_t rlc_thread_owner(void)
{
    return owner_thread_number();
}

int owner_random(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int owner_new_uuid(char out[RLC_UUID_LEN + 1])
{
    unsigned char b[16];
    if (owner_random(b, sizeof b) != 0)
        return -1;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    snprintf(out, RLC_UUID_LEN + 1,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
             b[11], b[12], b[13], b[14], b[15]);
    return 0;
}
