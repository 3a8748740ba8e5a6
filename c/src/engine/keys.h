/*
 * keys.h - the names a lock derives from its key, in Redisson's layout.
 */
#ifndef RLC_KEYS_H
#define RLC_KEYS_H

#include <stddef.h>

/* prefix + "{" key "}" + suffix, or prefix + key + suffix when the key has a
 * '{' already (a hash tag): Redisson's rule, which keeps every derived name
 * (channel, token counter, attempts hash...) in the key's cluster slot.
 * Freshly allocated, NUL-terminated; *len its length; NULL out of memory. */
char *key_derived(const char *prefix, const char *key, size_t key_len, const char *suffix,
                  size_t *len);

#endif
