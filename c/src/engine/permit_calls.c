/*
 * permit_calls.c - a semaphore's calls and answers (permit_calls.h).
 */
#include <stdlib.h>
#include <string.h>

#include "redlockc.h"
#include "cmd.h"
#include "permit_calls.h"
#include "scripts_family.h"
#include "sha1.h"

static bool expirable(const struct lock_names *n)
{
    return n->kind == RLC_KIND_PSEMAPHORE;
}

/* A try's record key: the prefix and the attempt id, in rec (room for
 * the name and an id). */
static char *record_key(const struct lock_names *n, const char *uuid, uint64_t attempt,
                        size_t *len)
{
    char id[LOCK_ATTEMPT_ID_MAX];
    int id_len = lock_attempt_id(uuid, attempt, id, sizeof id);
    char *rec = id_len > 0 ? malloc(n->attempts_key_len + (size_t)id_len + 1) : NULL;
    if (!rec)
        return NULL;
    memcpy(rec, n->attempts_key, n->attempts_key_len);
    memcpy(rec + n->attempts_key_len, id, (size_t)id_len + 1);
    *len = n->attempts_key_len + (size_t)id_len;
    return rec;
}

static void permit_base(const char *uuid, uint64_t attempt, uint8_t base[14])
{
    char id[LOCK_ATTEMPT_ID_MAX], hex[41];
    int len = lock_attempt_id(uuid, attempt, id, sizeof id);
    sha1_hex(id, len > 0 ? (size_t)len : 0, hex);
    for (int i = 0; i < 14; i++) {
        int hi = hex[2 * i] <= '9' ? hex[2 * i] - '0' : hex[2 * i] - 'a' + 10;
        int lo = hex[2 * i + 1] <= '9' ? hex[2 * i + 1] - '0' : hex[2 * i + 1] - 'a' + 10;
        base[i] = (uint8_t)(hi << 4 | lo);
    }
}

/* The plain semaphore's release script under a record: mode "u" an undo
 * (it gives back what the record says), "r" a release of permits. */
static struct rlc_cmd *sem_release(const struct lock_names *n, const char *rec, size_t rlen,
                                   int64_t permits, int64_t tomb_ms, const char *mode)
{
    char n_s[24], t_s[24];
    const char *argv[6] = {n->key, n->channel, rec, n_s, t_s, mode};
    size_t lens[6] = {n->key_len, n->channel_len, rlen, cmd_i64(n_s, permits),
                      cmd_i64(t_s, tomb_ms), 1};
    return cmd_evalsha(&fscript_sem_release, 3, 3, argv, lens);
}

struct rlc_cmd *call_permits_acquire(const struct lock_names *n, const char *uuid,
                                     uint64_t attempt, int64_t permits, int64_t lease_ms,
                                     int64_t tomb_ms)
{
    size_t rlen;
    char *rec = record_key(n, uuid, attempt, &rlen);
    if (!rec)
        return NULL;
    char n_s[24], l_s[24], t_s[24];
    struct rlc_cmd *cmd;
    if (expirable(n)) {
        uint8_t base[14];
        permit_base(uuid, attempt, base);
        const char *argv[7] = {n->key, n->aux, n->channel, rec, n_s, l_s, (const char *)base};
        size_t lens[7] = {n->key_len, n->aux_len, n->channel_len, rlen, cmd_i64(n_s, permits),
                          cmd_i64(l_s, lease_ms), 14};
        cmd = cmd_evalsha(&fscript_psem_acquire, 4, 3, argv, lens);
    } else {
        const char *argv[4] = {n->key, rec, n_s, t_s};
        size_t lens[4] = {n->key_len, rlen, cmd_i64(n_s, permits), cmd_i64(t_s, tomb_ms)};
        cmd = cmd_evalsha(&fscript_sem_acquire, 2, 2, argv, lens);
    }
    free(rec);
    return cmd;
}

struct rlc_cmd *call_permits_undo(const struct lock_names *n, const char *uuid,
                                  uint64_t attempt, int64_t permits, int64_t tomb_ms)
{
    size_t rlen;
    char *rec = record_key(n, uuid, attempt, &rlen);
    if (!rec)
        return NULL;
    char n_s[24], t_s[24];
    struct rlc_cmd *cmd;
    if (expirable(n)) {
        uint8_t base[14];
        permit_base(uuid, attempt, base);
        const char *argv[8] = {n->key, n->aux, n->channel, rec, n_s, (const char *)base, t_s, "1"};
        size_t lens[8] = {n->key_len, n->aux_len, n->channel_len, rlen, cmd_i64(n_s, permits),
                          14, cmd_i64(t_s, tomb_ms), 1};
        cmd = cmd_evalsha(&fscript_psem_release, 4, 4, argv, lens);
    } else {
        /* the record says what the try took: the count given is not used */
        cmd = sem_release(n, rec, rlen, 0, tomb_ms, "u");
    }
    free(rec);
    return cmd;
}

struct rlc_cmd *call_permits_forget(const struct lock_names *n, const char *uuid,
                                    uint64_t attempt)
{
    size_t rlen;
    char *rec = record_key(n, uuid, attempt, &rlen);
    if (!rec)
        return NULL;
    const char *argv[2] = {"DEL", rec};
    size_t lens[2] = {3, rlen};
    struct rlc_cmd *cmd = cmd_format(2, argv, lens);
    free(rec);
    return cmd;
}

struct rlc_cmd *call_permits_release(const struct lock_names *n, const char *uuid,
                                     uint64_t attempt, int64_t permits, int64_t tomb_ms)
{
    size_t rlen;
    char *rec = record_key(n, uuid, attempt, &rlen);
    if (!rec)
        return NULL;
    struct rlc_cmd *cmd = sem_release(n, rec, rlen, permits, tomb_ms, "r");
    free(rec);
    return cmd;
}

struct rlc_cmd *call_permits_give_back(const struct lock_names *n, const uint8_t id[16])
{
    char n_s[24];
    /* KEYS[4], an undo's record, is not touched by a release; the count's
     * key stands in, since every key of a call must be in the name's hash
     * slot on a cluster */
    const char *argv[8] = {n->key, n->aux, n->channel, n->key, n_s, (const char *)id, "0", "0"};
    size_t lens[8] = {n->key_len, n->aux_len, n->channel_len, n->key_len,
                      cmd_i64(n_s, (int64_t)id[14] << 8 | id[15]), 14, 1, 1};
    return cmd_evalsha(&fscript_psem_release, 4, 4, argv, lens);
}

struct rlc_cmd *call_permits_set(const struct lock_names *n, int64_t permits)
{
    char v[24];
    const char *argv[3] = {"SETNX", n->key, v};
    size_t lens[3] = {5, n->key_len, cmd_i64(v, permits)};
    return cmd_format(3, argv, lens);
}

struct rlc_cmd *call_permits_available(const struct lock_names *n)
{
    if (expirable(n)) {
        const char *argv[3] = {n->key, n->aux, n->channel};
        size_t lens[3] = {n->key_len, n->aux_len, n->channel_len};
        return cmd_evalsha(&fscript_psem_available, 3, 0, argv, lens);
    }
    const char *argv[2] = {"GET", n->key};
    size_t lens[2] = {3, n->key_len};
    return cmd_format(2, argv, lens);
}

bool answer_permits(const redisReply *r, struct acquire_answer *a)
{
    memset(a, 0, sizeof *a);
    a->holder = "";
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER)
        return false;
    a->count = r->element[0]->integer;
    a->x = r->element[1]->integer;
    return a->count >= -1 && a->count <= 1;
}

bool permit_id(const char *uuid, uint64_t attempt, int64_t permits, char *buf, size_t size)
{
    static const char d[] = "0123456789abcdef";
    if (!buf || size < PERMIT_ID_HEX + 1 || permits < 1 || permits > PERMITS_MAX)
        return false;
    uint8_t id[16];
    permit_base(uuid, attempt, id);
    id[14] = (uint8_t)(permits >> 8);
    id[15] = (uint8_t)permits;
    for (int i = 0; i < 16; i++) {
        buf[2 * i] = d[id[i] >> 4];
        buf[2 * i + 1] = d[id[i] & 15];
    }
    buf[PERMIT_ID_HEX] = '\0';
    return true;
}

bool permit_id_parse(const char *id, uint8_t raw[16])
{
    if (!id || strnlen(id, PERMIT_ID_HEX + 1) != PERMIT_ID_HEX)
        return false;
    for (int i = 0; i < 16; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char ch = id[2 * i + k];
            int x = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
            if (x < 0)
                return false;
            v = v * 16 + x;
        }
        raw[i] = (uint8_t)v;
    }
    int permits = raw[14] << 8 | raw[15];
    return permits >= 1;
}
