/*
 * lock_calls.c - each lock script's call and answer (lock_calls.h).
 */
#include <stdlib.h>
#include <string.h>

#include "redlockc.h"
#include "cmd.h"
#include "lock_calls.h"
#include "scripts.h"
#include "scripts_family.h"

int lock_attempt_id(const char *uuid, uint64_t attempt, char *buf, size_t size)
{
    return cmd_tagged_u64(uuid, attempt, 16, buf, size);
}

/* ---- the classic format's calls (scripts_classic.c has their layout) ---- */

static struct rlc_cmd *classic_acquire(const struct lock_names *n, const char *uuid,
                                       int64_t lease_ms, uint64_t attempt, bool name_holder)
{
    char lease[24], id[LOCK_ATTEMPT_ID_MAX];
    const char *argv[4] = {n->key, lease, id, "1"};
    size_t lens[4] = {n->key_len, cmd_i64(lease, lease_ms),
                      (size_t)lock_attempt_id(uuid, attempt, id, sizeof id), 1};
    return cmd_evalsha(&script_classic_acquire, 1, name_holder ? 3 : 2, argv, lens);
}

/* KEYS: the lock (and with channel its channel); ARGV: one attempt id. */
static struct rlc_cmd *classic_one(const struct script *s, const struct lock_names *n,
                                   bool channel, const char *uuid, uint64_t attempt)
{
    char id[LOCK_ATTEMPT_ID_MAX];
    size_t id_len = attempt ? (size_t)lock_attempt_id(uuid, attempt, id, sizeof id) : 0;
    const char *argv[3] = {n->key, n->channel, id};
    size_t lens[3] = {n->key_len, n->channel_len, id_len};
    if (!channel)
        argv[1] = id, lens[1] = id_len;
    return cmd_evalsha(s, channel ? 2 : 1, 1, argv, lens);
}

/* KEYS: m locks; ARGV: [lease, when lease_ms >= 0] m attempt ids. */
static struct rlc_cmd *classic_many(const struct script *s, int m, const struct lock_names *names,
                                    const char *uuid, int64_t lease_ms, const uint64_t *levels)
{
    int head = lease_ms >= 0 ? 1 : 0;
    const char **argv = malloc(sizeof *argv * (size_t)(2 * m + 1));
    size_t *lens = malloc(sizeof *lens * (size_t)(2 * m + 1));
    char (*ids)[LOCK_ATTEMPT_ID_MAX] = malloc(LOCK_ATTEMPT_ID_MAX * (size_t)m);
    struct rlc_cmd *cmd = NULL;
    if (argv && lens && ids) {
        char lease[24];
        if (head)
            argv[m] = lease, lens[m] = cmd_i64(lease, lease_ms);
        for (int j = 0; j < m; j++) {
            argv[j] = names[j].key, lens[j] = names[j].key_len;
            argv[m + head + j] = ids[j];
            lens[m + head + j] =
                levels[j] ? (size_t)lock_attempt_id(uuid, levels[j], ids[j], LOCK_ATTEMPT_ID_MAX)
                          : 0;
        }
        cmd = cmd_evalsha(s, m, m + head, argv, lens);
    }
    free(argv);
    free(lens);
    free(ids);
    return cmd;
}

static struct rlc_cmd *classic_multi(int m, const struct lock_names *names, const char *uuid,
                                     int64_t lease_ms, uint64_t attempt)
{
    const char **argv = malloc(sizeof *argv * (size_t)(m + 2));
    size_t *lens = malloc(sizeof *lens * (size_t)(m + 2));
    struct rlc_cmd *cmd = NULL;
    if (argv && lens) {
        char lease[24], id[LOCK_ATTEMPT_ID_MAX];
        for (int j = 0; j < m; j++)
            argv[j] = names[j].key, lens[j] = names[j].key_len;
        argv[m] = lease, lens[m] = cmd_i64(lease, lease_ms);
        argv[m + 1] = id, lens[m + 1] = (size_t)lock_attempt_id(uuid, attempt, id, sizeof id);
        cmd = cmd_evalsha(&script_classic_multi_acquire, m, 2, argv, lens);
    }
    free(argv);
    free(lens);
    return cmd;
}

/* ---- the read-write lock's calls (scripts_family.h has their layout) ---- */

/* A reader's names beside the lock's: its timeout keys' prefix
 * "{name}:<field>:rwlock_timeout" and its owner's write field
 * "<field>:write" (a write holder may take read levels). */
struct reader_names {
    char *prefix, *wfield;
    size_t prefix_len, wfield_len;
};

static bool reader_names(const struct lock_names *n, const char *field, size_t field_len,
                         struct reader_names *r)
{
    static const char tail[] = ":rwlock_timeout", w[] = ":write";
    r->prefix_len = n->aux_len + 1 + field_len + sizeof tail - 1;
    r->wfield_len = field_len + sizeof w - 1;
    r->prefix = malloc(r->prefix_len + 1);
    r->wfield = malloc(r->wfield_len + 1);
    if (!r->prefix || !r->wfield) {
        free(r->prefix);
        free(r->wfield);
        return false;
    }
    char *p = r->prefix;
    memcpy(p, n->aux, n->aux_len);
    p[n->aux_len] = ':';
    memcpy(p + n->aux_len + 1, field, field_len);
    memcpy(p + n->aux_len + 1 + field_len, tail, sizeof tail);
    memcpy(r->wfield, field, field_len);
    memcpy(r->wfield + field_len, w, sizeof w);
    return true;
}

static void reader_names_free(struct reader_names *r)
{
    free(r->prefix);
    free(r->wfield);
}

static struct rlc_cmd *read_acquire(const struct lock_names *n, const char *uuid,
                                    int64_t lease_ms, const char *field, size_t field_len,
                                    uint64_t attempt, uint64_t outer_level)
{
    struct reader_names rn;
    if (!reader_names(n, field, field_len, &rn))
        return NULL;
    char lease[24], id[LOCK_ATTEMPT_ID_MAX], in[LOCK_ATTEMPT_ID_MAX];
    const char *argv[9] = {n->key, rn.prefix, n->attempts_key, n->queue, lease, field,
                           rn.wfield, id, in};
    size_t lens[9] = {
        n->key_len, rn.prefix_len, n->attempts_key_len, n->queue_len, cmd_i64(lease, lease_ms),
        field_len, rn.wfield_len, (size_t)lock_attempt_id(uuid, attempt, id, sizeof id),
        outer_level ? (size_t)lock_attempt_id(uuid, outer_level, in, sizeof in) : 0};
    struct rlc_cmd *cmd = cmd_evalsha(&fscript_read_acquire, 4, 5, argv, lens);
    reader_names_free(&rn);
    return cmd;
}

static struct rlc_cmd *write_acquire(const struct lock_names *n, const char *uuid,
                                     int64_t lease_ms, const char *field, size_t field_len,
                                     uint64_t attempt, uint64_t outer_level, bool waiting)
{
    char lease[24], id[LOCK_ATTEMPT_ID_MAX], in[LOCK_ATTEMPT_ID_MAX], intent[24];
    const char *argv[8] = {n->key, n->attempts_key, n->queue, lease, field, id, intent, in};
    size_t lens[8] = {
        n->key_len, n->attempts_key_len, n->queue_len, cmd_i64(lease, lease_ms), field_len,
        (size_t)lock_attempt_id(uuid, attempt, id, sizeof id),
        cmd_i64(intent, waiting ? LOCK_WRITER_INTENT_MS : 0),
        outer_level ? (size_t)lock_attempt_id(uuid, outer_level, in, sizeof in) : 0};
    return cmd_evalsha(&fscript_write_acquire, 3, 5, argv, lens);
}

/* KEYS: lock, attempts, and a read level's timeout prefix (none for a
 * write level); ARGV: the level's attempt id, field, and the undo's
 * tombstone ms; or (ms_first) the renewal's lease, field, attempt id:
 * rw_renew's order. */
static struct rlc_cmd *rw_level(const struct script *s, const struct lock_names *n,
                                const char *uuid, uint64_t attempt, const char *field,
                                size_t field_len, int64_t ms, bool ms_first)
{
    struct reader_names rn = {NULL, NULL, 0, 0};
    bool read = n->kind == RLC_KIND_READ;
    if (read && !reader_names(n, field, field_len, &rn))
        return NULL;
    char id[LOCK_ATTEMPT_ID_MAX], num[24];
    size_t id_len = attempt ? (size_t)lock_attempt_id(uuid, attempt, id, sizeof id) : 0;
    size_t num_len = cmd_i64(num, ms);
    int nk = read ? 3 : 2;
    const char *argv[6] = {n->key, n->attempts_key, rn.prefix};
    size_t lens[6] = {n->key_len, n->attempts_key_len, rn.prefix_len};
    const char **av = argv + nk;
    size_t *al = lens + nk;
    av[0] = ms_first ? num : id, al[0] = ms_first ? num_len : id_len;
    av[1] = field, al[1] = field_len;
    av[2] = ms_first ? id : num, al[2] = ms_first ? id_len : num_len;
    struct rlc_cmd *cmd = cmd_evalsha(s, nk, 3, argv, lens);
    reader_names_free(&rn);
    return cmd;
}

/* KEYS: lock, channel, attempts (write); lock, channel, timeout prefix,
 * attempts, "{name}" (read); ARGV: lease, field, the level, then the extra
 * levels (a lost hold's remains). */
static struct rlc_cmd *rw_release(const struct lock_names *n, const char *uuid,
                                  int64_t lease_ms, const char *field, size_t field_len,
                                  uint64_t level, const uint64_t *extra, int64_t n_extra)
{
    bool read = n->kind == RLC_KIND_READ;
    struct reader_names rn = {NULL, NULL, 0, 0};
    if (read && !reader_names(n, field, field_len, &rn))
        return NULL;
    int nk = read ? 5 : 3;
    int64_t argc = nk + 3 + n_extra;
    const char **argv = malloc(sizeof *argv * (size_t)argc);
    size_t *lens = malloc(sizeof *lens * (size_t)argc);
    char (*ids)[LOCK_ATTEMPT_ID_MAX] = malloc(LOCK_ATTEMPT_ID_MAX * (size_t)(n_extra + 1));
    struct rlc_cmd *cmd = NULL;
    if (argv && lens && ids) {
        char lease[24];
        argv[0] = n->key, lens[0] = n->key_len;
        argv[1] = n->channel, lens[1] = n->channel_len;
        if (read) {
            argv[2] = rn.prefix, lens[2] = rn.prefix_len;
            argv[3] = n->attempts_key, lens[3] = n->attempts_key_len;
            argv[4] = n->aux, lens[4] = n->aux_len;
        } else {
            argv[2] = n->attempts_key, lens[2] = n->attempts_key_len;
        }
        argv[nk] = lease, lens[nk] = cmd_i64(lease, lease_ms);
        argv[nk + 1] = field, lens[nk + 1] = field_len;
        for (int64_t k = 0; k <= n_extra; k++) {
            uint64_t id = k == 0 ? level : extra[k - 1];
            argv[nk + 2 + k] = ids[k];
            lens[nk + 2 + k] =
                id ? (size_t)lock_attempt_id(uuid, id, ids[k], LOCK_ATTEMPT_ID_MAX) : 0;
        }
        cmd = cmd_evalsha(read ? &fscript_read_release : &fscript_write_release, nk,
                          (int)(argc - nk), argv, lens);
    }
    free(argv);
    free(lens);
    free(ids);
    reader_names_free(&rn);
    return cmd;
}

struct rlc_cmd *call_withdraw(const struct lock_names *n, const char *field, size_t field_len)
{
    if (n->kind == RLC_KIND_FAIR) {
        const char *argv[5] = {n->key, n->queue, n->aux, n->channel, field};
        size_t lens[5] = {n->key_len, n->queue_len, n->aux_len, n->channel_len, field_len};
        return cmd_evalsha(&fscript_fair_withdraw, 4, 1, argv, lens);
    }
    if (n->kind != RLC_KIND_WRITE)
        return NULL;
    const char *argv[2] = {n->queue, field};
    size_t lens[2] = {n->queue_len, field_len};
    return cmd_evalsha(&fscript_write_withdraw, 1, 1, argv, lens);
}

/* ---- the fair lock's calls (scripts_family.h has their layout) ---- */

static struct rlc_cmd *fair_acquire(const struct lock_names *n, const char *uuid,
                                    int64_t lease_ms, const char *field, size_t field_len,
                                    uint64_t attempt, uint64_t outer_level, bool join)
{
    char lease[24], id[LOCK_ATTEMPT_ID_MAX], in[LOCK_ATTEMPT_ID_MAX], wait[24];
    const char *argv[10] = {n->key, n->queue, n->aux, n->attempts_key, lease, field, id, wait,
                            join ? "1" : "0", in};
    size_t lens[10] = {
        n->key_len, n->queue_len, n->aux_len, n->attempts_key_len, cmd_i64(lease, lease_ms),
        field_len, (size_t)lock_attempt_id(uuid, attempt, id, sizeof id),
        cmd_i64(wait, n->thread_wait), 1,
        outer_level ? (size_t)lock_attempt_id(uuid, outer_level, in, sizeof in) : 0};
    return cmd_evalsha(&fscript_fair_acquire, 4, 6, argv, lens);
}

/* KEYS: lock, attempts; ARGV: the level's attempt id, field, the undo's
 * tombstone ms; or (ms_first) the renewal's lease, field, attempt id. */
static struct rlc_cmd *fair_level(const struct script *s, const struct lock_names *n,
                                  const char *uuid, uint64_t attempt, const char *field,
                                  size_t field_len, int64_t ms, bool ms_first)
{
    char id[LOCK_ATTEMPT_ID_MAX], num[24];
    size_t id_len = attempt ? (size_t)lock_attempt_id(uuid, attempt, id, sizeof id) : 0;
    size_t num_len = cmd_i64(num, ms);
    const char *argv[5] = {n->key, n->attempts_key, ms_first ? num : id, field,
                           ms_first ? id : num};
    size_t lens[5] = {n->key_len, n->attempts_key_len, ms_first ? num_len : id_len, field_len,
                      ms_first ? id_len : num_len};
    return cmd_evalsha(s, 2, 3, argv, lens);
}

/* KEYS: lock, queue, timeouts, attempts, channel prefix; ARGV: lease,
 * field, the level, then the extra levels. */
static struct rlc_cmd *fair_release(const struct lock_names *n, const char *uuid,
                                    int64_t lease_ms, const char *field, size_t field_len,
                                    uint64_t level, const uint64_t *extra, int64_t n_extra)
{
    int64_t argc = 8 + n_extra;
    const char **argv = malloc(sizeof *argv * (size_t)argc);
    size_t *lens = malloc(sizeof *lens * (size_t)argc);
    char (*ids)[LOCK_ATTEMPT_ID_MAX] = malloc(LOCK_ATTEMPT_ID_MAX * (size_t)(n_extra + 1));
    struct rlc_cmd *cmd = NULL;
    if (argv && lens && ids) {
        char lease[24];
        argv[0] = n->key, lens[0] = n->key_len;
        argv[1] = n->queue, lens[1] = n->queue_len;
        argv[2] = n->aux, lens[2] = n->aux_len;
        argv[3] = n->attempts_key, lens[3] = n->attempts_key_len;
        argv[4] = n->channel, lens[4] = n->channel_len;
        argv[5] = lease, lens[5] = cmd_i64(lease, lease_ms);
        argv[6] = field, lens[6] = field_len;
        for (int64_t k = 0; k <= n_extra; k++) {
            uint64_t id = k == 0 ? level : extra[k - 1];
            argv[7 + k] = ids[k];
            lens[7 + k] = id ? (size_t)lock_attempt_id(uuid, id, ids[k], LOCK_ATTEMPT_ID_MAX) : 0;
        }
        cmd = cmd_evalsha(&fscript_fair_release, 5, (int)(argc - 5), argv, lens);
    }
    free(argv);
    free(lens);
    free(ids);
    return cmd;
}

/* ---- the lock's calls ---- */

struct rlc_cmd *call_acquire(const struct lock_names *n, const char *uuid, int64_t lease_ms,
                             const char *field, size_t field_len, uint64_t attempt,
                             uint64_t outer_level, bool fencing, bool name_holder, bool waiting)
{
    if (n->kind == RLC_KIND_WRITE)
        return write_acquire(n, uuid, lease_ms, field, field_len, attempt, outer_level,
                             waiting);
    if (n->kind == RLC_KIND_READ)
        return read_acquire(n, uuid, lease_ms, field, field_len, attempt, outer_level);
    if (n->kind == RLC_KIND_FAIR)
        return fair_acquire(n, uuid, lease_ms, field, field_len, attempt, outer_level, waiting);
    if (n->classic)
        return classic_acquire(n, uuid, lease_ms, attempt, name_holder);
    char lease[24], id[LOCK_ATTEMPT_ID_MAX], in[LOCK_ATTEMPT_ID_MAX];
    /* KEYS: lock, attempts, and the token counter only with fencing (a key
     * named is a key that counts in a migrating slot, used or not) */
    const char *keys[3] = {n->key, n->attempts_key, n->token_key};
    size_t key_lens[3] = {n->key_len, n->attempts_key_len, n->token_key_len};
    int nkeys = fencing ? 3 : 2;
    const char *argv[8];
    size_t lens[8];
    for (int i = 0; i < nkeys; i++)
        argv[i] = keys[i], lens[i] = key_lens[i];
    const char *args[5] = {lease, field, id, in, "1"};
    size_t arg_lens[5] = {
        cmd_i64(lease, lease_ms), field_len, (size_t)lock_attempt_id(uuid, attempt, id, sizeof id),
        outer_level ? (size_t)lock_attempt_id(uuid, outer_level, in, sizeof in) : 0, 1};
    int nargs = name_holder ? 5 : 4;
    for (int i = 0; i < nargs; i++)
        argv[nkeys + i] = args[i], lens[nkeys + i] = arg_lens[i];
    return cmd_evalsha(&script_acquire, nkeys, nargs, argv, lens);
}

struct rlc_cmd *call_undo(const struct lock_names *n, const char *uuid, uint64_t attempt,
                          const char *field, size_t field_len, int64_t tomb_ms)
{
    if (n->kind == RLC_KIND_FAIR)
        return fair_level(&fscript_fair_undo, n, uuid, attempt, field, field_len, tomb_ms, false);
    if (n->kind != RLC_KIND_LOCK)
        return rw_level(&fscript_rw_undo, n, uuid, attempt, field, field_len, tomb_ms, false);
    if (n->classic)
        return classic_one(&script_classic_undo, n, false, uuid, attempt);
    char id[LOCK_ATTEMPT_ID_MAX], ttl[24];
    const char *argv[5] = {n->key, n->attempts_key, id, field, ttl};
    size_t lens[5] = {n->key_len, n->attempts_key_len,
                      (size_t)lock_attempt_id(uuid, attempt, id, sizeof id), field_len,
                      cmd_i64(ttl, tomb_ms)};
    return cmd_evalsha(&script_undo, 2, 3, argv, lens);
}

int64_t lock_undo_tomb_ms(int64_t lease_ms, int64_t call_timeout_ms, int64_t connect_timeout_ms)
{
    return lease_ms + 2 * (call_timeout_ms + connect_timeout_ms) + 60000;
}

struct rlc_cmd *call_renew(const struct lock_names *n, const char *uuid, int64_t lease_ms,
                           const char *field, size_t field_len, uint64_t level)
{
    if (n->kind == RLC_KIND_FAIR)
        return fair_level(&fscript_fair_renew, n, uuid, level, field, field_len, lease_ms, true);
    if (n->kind != RLC_KIND_LOCK)
        return rw_level(&fscript_rw_renew, n, uuid, level, field, field_len, lease_ms, true);
    return call_renew_many(1, n, uuid, lease_ms, &field, &field_len, &level);
}

struct rlc_cmd *call_renew_many(int m, const struct lock_names *names, const char *uuid,
                                int64_t lease_ms, const char *const *fields,
                                const size_t *field_lens, const uint64_t *levels)
{
    if (m > 0 && names[0].classic)
        return classic_many(&script_classic_renew, m, names, uuid, lease_ms, levels);
    /* KEYS: m locks, m attempts hashes; ARGV: lease, m fields, m level ids */
    const char **argv = malloc(sizeof *argv * (size_t)(4 * m + 1));
    size_t *lens = malloc(sizeof *lens * (size_t)(4 * m + 1));
    char (*ids)[LOCK_ATTEMPT_ID_MAX] = malloc(LOCK_ATTEMPT_ID_MAX * (size_t)m);
    struct rlc_cmd *cmd = NULL;
    if (argv && lens && ids) {
        char lease[24];
        argv[2 * m] = lease, lens[2 * m] = cmd_i64(lease, lease_ms);
        for (int j = 0; j < m; j++) {
            argv[j] = names[j].key, lens[j] = names[j].key_len;
            argv[m + j] = names[j].attempts_key, lens[m + j] = names[j].attempts_key_len;
            argv[2 * m + 1 + j] = fields[j], lens[2 * m + 1 + j] = field_lens[j];
            argv[3 * m + 1 + j] = ids[j];
            lens[3 * m + 1 + j] =
                levels[j] ? (size_t)lock_attempt_id(uuid, levels[j], ids[j], LOCK_ATTEMPT_ID_MAX)
                          : 0;
        }
        cmd = cmd_evalsha(&script_renew, 2 * m, 2 * m + 1, argv, lens);
    }
    free(argv);
    free(lens);
    free(ids);
    return cmd;
}

struct rlc_cmd *call_verify_many(int m, const struct lock_names *names, const char *uuid,
                                 const char *const *fields, const size_t *field_lens,
                                 const uint64_t *levels)
{
    if (m > 0 && names[0].classic) {
        struct rlc_cmd *sha = classic_many(&script_classic_verify, m, names, uuid, -1, levels);
        struct rlc_cmd *cmd = sha ? cmd_evalsha_to_eval(sha, &script_classic_verify) : NULL;
        cmd_unref(sha);
        return cmd;
    }
    /* KEYS: m locks, m attempts hashes; ARGV: m fields, m level ids */
    const char **argv = malloc(sizeof *argv * (size_t)(4 * m));
    size_t *lens = malloc(sizeof *lens * (size_t)(4 * m));
    char (*ids)[LOCK_ATTEMPT_ID_MAX] = malloc(LOCK_ATTEMPT_ID_MAX * (size_t)m);
    struct rlc_cmd *sha = NULL, *cmd = NULL;
    if (argv && lens && ids) {
        for (int j = 0; j < m; j++) {
            argv[j] = names[j].key, lens[j] = names[j].key_len;
            argv[m + j] = names[j].attempts_key, lens[m + j] = names[j].attempts_key_len;
            argv[2 * m + j] = fields[j], lens[2 * m + j] = field_lens[j];
            argv[3 * m + j] = ids[j];
            lens[3 * m + j] =
                levels[j] ? (size_t)lock_attempt_id(uuid, levels[j], ids[j], LOCK_ATTEMPT_ID_MAX)
                          : 0;
        }
        sha = cmd_evalsha(&script_verify, 2 * m, 2 * m, argv, lens);
        /* as EVAL: a NOSCRIPT answer re-sent would come back out of order,
         * and a verify's answers pair with its chunk by order */
        cmd = sha ? cmd_evalsha_to_eval(sha, &script_verify) : NULL;
    }
    cmd_unref(sha);
    free(argv);
    free(lens);
    free(ids);
    return cmd;
}

struct rlc_cmd *call_exists_many(int m, const struct lock_names *names)
{
    const char **argv = malloc(sizeof *argv * (size_t)(m + 1));
    size_t *lens = malloc(sizeof *lens * (size_t)(m + 1));
    struct rlc_cmd *cmd = NULL;
    if (argv && lens) {
        argv[0] = "EXISTS", lens[0] = 6;
        for (int j = 0; j < m; j++)
            argv[1 + j] = names[j].key, lens[1 + j] = names[j].key_len;
        cmd = cmd_format(m + 1, argv, lens);
    }
    free(argv);
    free(lens);
    return cmd;
}

struct rlc_cmd *call_release(const struct lock_names *n, const char *uuid, int64_t lease_ms,
                             const char *field, size_t field_len, uint64_t level, uint64_t upto,
                             const uint64_t *extra, int64_t n_extra)
{
    /* one value, one level: nothing of an earlier attempt can be held beside
     * it (upto), and there are no tombstones to leave (extra) */
    if (n->classic)
        return classic_one(&script_classic_release, n, true, uuid, level);
    /* a read or write release takes its one level (and a lost hold's
     * remains): a level of an earlier attempt whose undo is late is taken
     * by that undo */
    if (n->kind == RLC_KIND_FAIR)
        return fair_release(n, uuid, lease_ms, field, field_len, level, extra, n_extra);
    if (n->kind != RLC_KIND_LOCK)
        return rw_release(n, uuid, lease_ms, field, field_len, level, extra, n_extra);
    /* KEYS lock, channel, attempts; ARGV lease, field, the level, upto, then
     * the extra levels */
    int64_t argc = 7 + n_extra;
    const char **argv = malloc(sizeof *argv * (size_t)argc);
    size_t *lens = malloc(sizeof *lens * (size_t)argc);
    char (*ids)[LOCK_ATTEMPT_ID_MAX] = malloc(LOCK_ATTEMPT_ID_MAX * (size_t)(n_extra + 1));
    struct rlc_cmd *cmd = NULL;
    if (argv && lens && ids) {
        char lease[24], up[CMD_U64_MAX] = "";
        argv[0] = n->key, lens[0] = n->key_len;
        argv[1] = n->channel, lens[1] = n->channel_len;
        argv[2] = n->attempts_key, lens[2] = n->attempts_key_len;
        argv[3] = lease, lens[3] = cmd_i64(lease, lease_ms);
        argv[4] = field, lens[4] = field_len;
        argv[5] = ids[0],
        lens[5] = level ? (size_t)lock_attempt_id(uuid, level, ids[0], LOCK_ATTEMPT_ID_MAX) : 0;
        argv[6] = up,
        lens[6] = upto ? cmd_u64(up, upto, 16) : 0;
        for (int64_t k = 0; k < n_extra; k++) {
            argv[7 + k] = ids[k + 1];
            lens[7 + k] = (size_t)lock_attempt_id(uuid, extra[k], ids[k + 1],
                                                  LOCK_ATTEMPT_ID_MAX);
        }
        cmd = cmd_evalsha(&script_release, 3, (int)(argc - 3), argv, lens);
    }
    free(argv);
    free(lens);
    free(ids);
    return cmd;
}

struct rlc_cmd *call_token_floor(const struct lock_names *n, uint64_t token)
{
    char floor[24];
    const char *argv[2] = {n->token_key, floor};
    size_t lens[2] = {n->token_key_len, cmd_u64(floor, token, 10)};
    return cmd_evalsha(&script_token_floor, 1, 1, argv, lens);
}

struct rlc_cmd *call_multi_acquire(int m, const struct lock_names *names, const char *uuid,
                                   int64_t lease_ms, const char *field, size_t field_len,
                                   uint64_t attempt, const uint64_t *outer, bool fencing)
{
    if (m > 0 && names[0].classic)
        return classic_multi(m, names, uuid, lease_ms, attempt);
    /* KEYS: m locks, m attempts, with fencing m token counters; ARGV:
     * lease, field, id, fencing, and with outer, m nested-in levels */
    int nargv = 4 + (outer ? m : 0), nkeys = (fencing ? 3 : 2) * m;
    const char **argv = malloc(sizeof *argv * (size_t)(3 * m + nargv));
    size_t *lens = malloc(sizeof *lens * (size_t)(3 * m + nargv));
    char (*ids)[LOCK_ATTEMPT_ID_MAX] = malloc(LOCK_ATTEMPT_ID_MAX * (size_t)(m + 1));
    struct rlc_cmd *cmd = NULL;
    if (argv && lens && ids) {
        char lease[24];
        for (int j = 0; j < m; j++) {
            argv[j] = names[j].key, lens[j] = names[j].key_len;
            argv[m + j] = names[j].attempts_key, lens[m + j] = names[j].attempts_key_len;
            argv[2 * m + j] = names[j].token_key, lens[2 * m + j] = names[j].token_key_len;
        }
        const char **av = argv + nkeys;
        size_t *al = lens + nkeys;
        av[0] = lease, al[0] = cmd_i64(lease, lease_ms);
        av[1] = field, al[1] = field_len;
        av[2] = ids[m], al[2] = (size_t)lock_attempt_id(uuid, attempt, ids[m], LOCK_ATTEMPT_ID_MAX);
        av[3] = "1", al[3] = fencing ? 1 : 0;
        for (int j = 0; outer && j < m; j++) {
            av[4 + j] = ids[j];
            al[4 + j] = outer[j] ? (size_t)lock_attempt_id(uuid, outer[j], ids[j],
                                                           LOCK_ATTEMPT_ID_MAX)
                                 : 0;
        }
        cmd = cmd_evalsha(&script_multi_acquire, nkeys, nargv, argv, lens);
    }
    free(argv);
    free(lens);
    free(ids);
    return cmd;
}

int answer_multi_name(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[2]->type != REDIS_REPLY_INTEGER)
        return 0;
    return (int)r->element[2]->integer;
}

/* The family's acquire answers (scripts_family.h): {n, 0, before} granted,
 * {0, pttl, holder} busy, {-1, 0} undone, {-2, 0} nested in a level that is
 * gone. */
static bool family_acquire(const redisReply *r, struct acquire_answer *a)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER)
        return false;
    a->count = r->element[0]->integer;
    a->x = r->element[1]->integer;
    a->inner = a->count >= 1;
    if (a->count == -2) {
        a->count = 1;
        a->x = 0;
    } else if (a->count >= 1) {
        a->x = 0; /* no fencing token: element 1 is 0 */
    }
    if (a->count == 0 && r->elements == 3 && r->element[2]->type == REDIS_REPLY_STRING) {
        a->holder = r->element[2]->str;
        a->holder_len = r->element[2]->len;
    }
    return true;
}

bool answer_release(const redisReply *r, int64_t *n, bool *freed)
{
    if (r->type == REDIS_REPLY_INTEGER) {
        *n = r->integer;
        *freed = *n == 0 || *n == -2;
        return true;
    }
    /* the family's: {n left, freed} */
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER)
        return false;
    *n = r->element[0]->integer;
    *freed = r->element[1]->integer == 1;
    return true;
}

bool answer_acquire(const redisReply *r, int kind, struct acquire_answer *a)
{
    a->holder = "";
    a->holder_len = 0;
    a->inner = false;
    if (kind != RLC_KIND_LOCK)
        return family_acquire(r, a);
    a->holder = "";
    a->holder_len = 0;
    a->inner = false;
    if (r->type == REDIS_REPLY_INTEGER) { /* busy, the holder not asked for */
        a->count = 0;
        a->x = r->integer;
        return true;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->elements > 4 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER)
        return false;
    a->count = r->element[0]->integer;
    a->x = r->element[1]->integer;
    a->inner = r->elements == 4 && r->element[3]->type == REDIS_REPLY_INTEGER &&
               r->element[3]->integer == 1;
    a->holder = "";
    a->holder_len = 0;
    if (r->elements == 3 && r->element[2]->type == REDIS_REPLY_STRING) {
        a->holder = r->element[2]->str;
        a->holder_len = r->element[2]->len;
    }
    return true;
}

int answer_renew(const redisReply *r, size_t j)
{
    if (r->type == REDIS_REPLY_INTEGER && j == 0)
        return r->integer == 1;
    if (r->type != REDIS_REPLY_ARRAY || j >= r->elements ||
        r->element[j]->type != REDIS_REPLY_INTEGER)
        return -1;
    return r->element[j]->integer == 1;
}
