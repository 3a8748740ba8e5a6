/*
 * keys.c - names derived from a lock's key (keys.h). No I/O.
 *
 * Two rules. Names that Redisson reads or writes follow Redisson's rule
 * (key_derived): the key in braces, or the key as it is when it has a '{'.
 * That rule maps "x" and "{x}" to one name, and Redisson clients rely on
 * it, so those names stay as they are.
 *
 * Names only this library writes (key_own) must not be shared by two keys:
 * two locks sharing one attempts hash overwrite each other's epoch, and
 * the holders' releases then report a loss. They must also stay in the
 * key's hash slot, for Redis Cluster. key_own sorts keys into three kinds
 * and marks each kind by the byte after the prefix:
 *
 *   plain   the key has no '{' and no '}', and is not empty:
 *           prefix "{" key "}"        (the name key_derived gives as well)
 *   tagged  the key has a hash tag: a '{', a later '}', something between:
 *           prefix "=" key
 *   other   every other key ("", "x}", "{}", "{x", "}{x"):
 *           prefix "#{" n "}:" key    n = key_slot_number(slot of the key)
 *
 * followed by the suffix. The prefix has no braces.
 *
 * Injective. The byte after the prefix names the kind, and within a kind
 * the key is read back: it is what lies between the fixed parts, and for
 * "other" n's digits end at the first '}' (digits are no braces), after
 * which ":" and the key follow. So two keys with one name are one key.
 *
 * Same slot. Redis hashes the bytes between the first '{' and the first
 * '}' after it when there are any, else the whole name (slot.c).
 *   plain:  the first '{' is ours (the prefix has none); the key has no
 *           '}', so the first '}' after it is ours too; the tag is the key,
 *           not empty, and the key, with no tag of its own, hashes whole.
 *   tagged: the prefix and "=" have no braces, so the name's first '{' is
 *           the key's first '{', and the first '}' after it is the key's
 *           (the key's tag is not empty, so that '}' is in the key): the
 *           tag is the key's own.
 *   other:  the tag is n, chosen to hash to the key's slot.
 * In each kind the tag closes before the suffix, so the suffix never
 * matters. tests/c/test_slot.c checks both properties on tricky keys.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "slot.h"

/* One name from its parts, freshly allocated (NULL out of memory). */
static char *join(const char *const parts[], const size_t lens[], int n, size_t *len)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += lens[i];
    char *s = malloc(total + 1);
    if (!s)
        return NULL;
    char *p = s;
    for (int i = 0; i < n; i++) {
        memcpy(p, parts[i], lens[i]);
        p += lens[i];
    }
    *p = '\0';
    *len = total;
    return s;
}

char *key_derived(const char *prefix, const char *key, size_t key_len, const char *suffix,
                  size_t *len)
{
    bool braced = memchr(key, '{', key_len) != NULL;
    const char *parts[5] = {prefix, "{", key, "}", suffix};
    size_t lens[5] = {strlen(prefix), braced ? 0 : 1, key_len, braced ? 0 : 1, strlen(suffix)};
    return join(parts, lens, 5, len);
}

/* Has the key a hash tag, by Redis's rule (as slot_of reads it)? */
static bool has_tag(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (!open)
        return false;
    size_t from = (size_t)(open - key) + 1;
    const char *close = memchr(key + from, '}', len - from);
    return close && close > key + from;
}

/* Every slot's smallest decimal number: the largest is 109757, so the scan
 * below ends within its bound (test_slot checks every slot). Stored + 1,
 * so that 0 means none yet. Filled once, on the first key of the third
 * kind; most programs never touch it. */
#define SLOT_NUMBER_BOUND 200000u
static uint32_t slot_number[RLC_SLOTS];
static pthread_once_t slot_number_once = PTHREAD_ONCE_INIT;

static void fill_slot_numbers(void)
{
    unsigned found = 0;
    char digits[16];
    for (unsigned n = 0; n < SLOT_NUMBER_BOUND && found < RLC_SLOTS; n++) {
        int dl = snprintf(digits, sizeof digits, "%u", n);
        unsigned s = slot_crc16(digits, (size_t)dl) & (RLC_SLOTS - 1);
        if (slot_number[s] == 0) {
            slot_number[s] = n + 1;
            found++;
        }
    }
}

unsigned key_slot_number(unsigned slot)
{
    pthread_once(&slot_number_once, fill_slot_numbers);
    return slot_number[slot & (RLC_SLOTS - 1)] - 1;
}

char *key_own(const char *prefix, const char *key, size_t key_len, const char *suffix,
              size_t *len)
{
    bool braces = memchr(key, '{', key_len) || memchr(key, '}', key_len);
    if (key_len > 0 && !braces)
        return key_derived(prefix, key, key_len, suffix, len);
    if (has_tag(key, key_len)) {
        const char *parts[4] = {prefix, "=", key, suffix};
        size_t lens[4] = {strlen(prefix), 1, key_len, strlen(suffix)};
        return join(parts, lens, 4, len);
    }
    char number[16];
    int nl = snprintf(number, sizeof number, "#{%u}:", key_slot_number(slot_of(key, key_len)));
    const char *parts[4] = {prefix, number, key, suffix};
    size_t lens[4] = {strlen(prefix), (size_t)nl, key_len, strlen(suffix)};
    return join(parts, lens, 4, len);
}
