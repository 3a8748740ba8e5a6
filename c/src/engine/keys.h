/*
 * keys.h - the names a lock derives from its key: Redisson's for the keys
 * Redisson shares with us, our own for the keys only this library writes.
 */
#ifndef RLC_KEYS_H
#define RLC_KEYS_H

#include <stddef.h>

/* prefix + "{" key "}" + suffix, or prefix + key + suffix when the key has a
 * '{' already: Redisson's rule, for the names Redisson reads or writes too
 * (channels, the token counter, the fair lock's queue...). It is not
 * injective ("x" and "{x}" give one name) and keeps the key's slot only for
 * most keys; Redisson's names are what they are. Freshly allocated,
 * NUL-terminated; *len its length; NULL out of memory. */
char *key_derived(const char *prefix, const char *key, size_t key_len, const char *suffix,
                  size_t *len);

/* The name of a key only this library writes (redlockc_attempts:,
 * redlockc_rwlock_writers:...), for a prefix without braces:
 *   prefix "{" key "}"             a key without braces ("orders"): the same
 *                                  name as key_derived gives;
 *   prefix "=" key                 a key with a hash tag ("{x}", "a{b}c");
 *   prefix "#{" n "}:" key         any other key ("x}", "{}", "{x"): n is the
 *                                  smallest decimal number in the key's slot;
 * then the suffix. Distinct keys get distinct names, each in its key's hash
 * slot (keys.c has the argument). Allocation as for key_derived. */
char *key_own(const char *prefix, const char *key, size_t key_len, const char *suffix,
              size_t *len);

/* The smallest number whose decimal digits hash to slot (< RLC_SLOTS):
 * key_own's tag for the keys of the third kind. */
unsigned key_slot_number(unsigned slot);

#endif
