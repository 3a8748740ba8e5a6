/*
 * sha1.h - SHA-1, only to name Lua scripts for EVALSHA (not for security).
 */
#ifndef RLC_SHA1_H
#define RLC_SHA1_H

#include <stddef.h>

/* Writes the 40 lowercase hex digits of SHA-1(data) and a NUL into hex. */
void sha1_hex(const void *data, size_t len, char hex[41]);

#endif
