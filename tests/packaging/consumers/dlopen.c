/*
 * dlopen.c - a consumer that neither includes redlockc.h nor links the
 * library, as an FFI runtime does: it dlopen()s "libredlockc.so.1", resolves
 * each function by name and version node (dlvsym, REDLOCKC_1.0), declares
 * the signatures itself, and takes and releases a lock.
 *
 *   app-dlopen redis://127.0.0.1:PORT LOCKNAME
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

/* What an FFI declares: opaque pointers, ints, int64 milliseconds. */
typedef const char *(*version_fn)(void);
typedef const char *(*errmsg_fn)(void);
typedef int (*client_new_fn)(void **out, const char *nodes, const char *options);
typedef void (*client_free_fn)(void *c);
typedef int (*lock_new_fn)(void *c, const char *name, uint64_t owner, void **out);
typedef void (*lock_free_fn)(void *l);
typedef int (*acquire_fn)(void *l, int64_t wait_ms, int64_t lease_ms);
typedef int (*release_fn)(void *l);
typedef int (*is_held_fn)(void *l, int *out);

static void *lib;

static void *need(const char *name)
{
    void *p = dlvsym(lib, name, "REDLOCKC_1.0");
    if (!p)
        fprintf(stderr, "dlopen app: %s@REDLOCKC_1.0 not found: %s\n", name, dlerror());
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: app-dlopen URI LOCKNAME\n");
        return 2;
    }
    lib = dlopen("libredlockc.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen app: %s\n", dlerror());
        return 1;
    }
    version_fn version = (version_fn)need("rlc_version");
    errmsg_fn errmsg = (errmsg_fn)need("rlc_errmsg");
    client_new_fn client_new = (client_new_fn)need("rlc_client_new");
    client_free_fn client_free = (client_free_fn)need("rlc_client_free");
    lock_new_fn lock_new = (lock_new_fn)need("rlc_lock_new");
    lock_free_fn lock_free = (lock_free_fn)need("rlc_lock_free");
    acquire_fn acquire = (acquire_fn)need("rlc_lock_acquire");
    release_fn release = (release_fn)need("rlc_lock_release");
    is_held_fn is_held = (is_held_fn)need("rlc_lock_is_held");
    if (!version || !errmsg || !client_new || !client_free || !lock_new || !lock_free ||
        !acquire || !release || !is_held)
        return 1;

    void *c = NULL, *l = NULL;
    int held = -1, ok = 0;
    if (client_new(&c, argv[1], NULL) == 0 && lock_new(c, argv[2], 0, &l) == 0 &&
        acquire(l, 0, 10000) == 0 && is_held(l, &held) == 0 && held == 1 && release(l) == 0)
        ok = 1;
    if (ok)
        printf("dlopen app: libredlockc %s: acquired, held=%d, released '%s'\n", version(),
               held, argv[2]);
    else
        fprintf(stderr, "dlopen app: failed (held %d): %s\n", held, errmsg());
    lock_free(l);
    client_free(c);
    dlclose(lib);
    return ok ? 0 : 1;
}
