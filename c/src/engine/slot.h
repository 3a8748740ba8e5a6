/*
 * slot.h - Redis Cluster's hash slot of a key: CRC16 (XMODEM) of the key, or
 * of its hash tag, modulo 16384.
 */
#ifndef RLC_SLOT_H
#define RLC_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define RLC_SLOTS 16384

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis uses. */
uint16_t slot_crc16(const char *buf, size_t len);

/* The key's hash slot. When the key has a '{', a later '}', and something
 * between the two, only that part (the hash tag) is hashed: Redis's rule,
 * which keeps a lock's key, channel, token counter and attempts hash (all
 * named with the key in braces, keys.h) in one slot. */
unsigned slot_of(const char *key, size_t len);

#endif
