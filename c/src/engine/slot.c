/*
 * slot.c - which of Redis Cluster's 16384 slots a key lives in.
 *
 * A table-driven CRC16: one table lookup per byte. The table is computed on
 * first use rather than written out, so that its values visibly come from
 * the polynomial (and a test checks the result against Redis's own
 * documented value, CRC16("123456789") = 0x31C3).
 */
#include <pthread.h>
#include <string.h>

#include "slot.h"

static uint16_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void)
{
    for (unsigned i = 0; i < 256; i++) {
        uint16_t crc = (uint16_t)(i << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
        table[i] = crc;
    }
}

uint16_t slot_crc16(const char *buf, size_t len)
{
    pthread_once(&table_once, make_table);
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ table[((crc >> 8) ^ (unsigned char)buf[i]) & 0xff]);
    return crc;
}

unsigned slot_of(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(key + from, '}', len - from);
        /* "{}" (an empty tag) hashes the whole key, as in Redis. */
        if (close && close > key + from)
            key += from, len = (size_t)(close - key);
    }
    return slot_crc16(key, len) & (RLC_SLOTS - 1);
}
