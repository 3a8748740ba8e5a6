/*
 * owner.h - who holds a lock: client UUIDs, thread owner numbers, randomness,
 * and the fork generation that tells a child process from its parent.
 */
#ifndef RLC_OWNER_H
#define RLC_OWNER_H

#include <stddef.h>
#include <stdint.h>

#define RLC_UUID_LEN 36

/* Explicit owner ids are 1 .. BASE-1; thread owners are BASE+1, BASE+2, ... */
#define RLC_THREAD_OWNER_BASE (UINT64_C(1) << 62)

/* Fills out[37] with a random v4 UUID from the OS CSPRNG (getrandom). */
int owner_new_uuid(char out[RLC_UUID_LEN + 1]);

/* Fills buf with n bytes from the OS CSPRNG. 0 on success, -1 on failure. */
int owner_random(void *buf, size_t n);

/* The calling thread's owner number (BASE+1, BASE+2, ...), assigned on first use. */
uint64_t owner_thread_number(void);

/* Bumped in every child after fork(): a client remembers the value it was
 * created under and refuses to run in a process where it differs. */
unsigned owner_fork_generation(void);

#endif
