/*
 * keys.c - names derived from a lock's key (keys.h). No I/O.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"

char *key_derived(const char *prefix, const char *key, size_t key_len, const char *suffix,
                  size_t *len)
{
    bool braced = memchr(key, '{', key_len) != NULL;
    size_t plen = strlen(prefix), slen = strlen(suffix);
    *len = plen + key_len + (braced ? 0 : 2) + slen;
    char *s = malloc(*len + 1);
    if (!s)
        return NULL;
    char *p = s;
    memcpy(p, prefix, plen);
    p += plen;
    if (!braced)
        *p++ = '{';
    memcpy(p, key, key_len);
    p += key_len;
    if (!braced)
        *p++ = '}';
    memcpy(p, suffix, slen + 1);
    return s;
}
