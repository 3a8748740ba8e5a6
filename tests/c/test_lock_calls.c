/*
 * test_lock_calls.c - the script calls and answers (c/src/engine/lock_calls.c)
 * alone, no Redis: the exact bytes each call puts on the wire (the engine,
 * the blocking API and the family all send these), and how answers read.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cmd.h"
#include "lock_calls.h"
#include "scripts.h"
#include "scripts_family.h"

static const struct lock_names NAMES = {"k", "redisson_lock_token:{k}", "redlockc_attempts:{k}",
                                        "redisson_lock__channel:{k}", 1, 23, 21, 26, false,
                                        RLC_KIND_LOCK, NULL, 0, NULL, 0, 0};

/* The command as a string (its bytes are not NUL-terminated). */
static const char *text(const struct rlc_cmd *c)
{
    static char buf[4096];
    size_t n = c->len < sizeof buf - 1 ? c->len : sizeof buf - 1;
    memcpy(buf, c->data, n);
    buf[n] = 0;
    return buf;
}

/* The RESP array after "EVALSHA <sha>": what the script is given. */
static const char *args_of(const struct rlc_cmd *c, const struct script *s)
{
    const char *t = text(c), *at = strstr(t, s->sha);
    return at ? at + 40 + 2 : "";
}

TEST(acquire_call_names_keys_and_attempts_in_the_scripts_order)
{
    scripts_init();
    struct rlc_cmd *c = call_acquire(&NAMES, "U", 30000, "U:7", 3, 0x1f, 0, true, false, false);
    CHECK(c && strncmp(text(c), "*10\r\n$7\r\nEVALSHA\r\n", 18) == 0, "head %.20s", text(c));
    const char *want = "$1\r\n3\r\n$1\r\nk\r\n$21\r\nredlockc_attempts:{k}\r\n"
                       "$23\r\nredisson_lock_token:{k}\r\n$5\r\n30000\r\n$3\r\nU:7\r\n"
                       "$4\r\nU:1f\r\n$0\r\n\r\n";
    CHECK(strcmp(args_of(c, &script_acquire), want) == 0, "args %s", args_of(c, &script_acquire));
    cmd_unref(c);
    c = call_acquire(&NAMES, "U", 500, "U:7", 3, 2, 1, false, false, false);
    CHECK(strstr(text(c), "$3\r\nU:2\r\n$3\r\nU:1\r\n") != NULL, "nested names its outer level");
    CHECK(strncmp(text(c), "*9\r\n", 4) == 0 && !strstr(text(c), "redisson_lock_token"),
          "without fencing the counter is not named: %s", text(c));
    cmd_unref(c);
done:;
}

TEST(renew_of_one_is_the_batch_of_one)
{
    scripts_init();
    struct rlc_cmd *one = call_renew(&NAMES, "U", 9000, "U:7", 3, 5);
    const char *field = "U:7";
    size_t flen = 3;
    uint64_t level = 5;
    struct rlc_cmd *many = call_renew_many(1, &NAMES, "U", 9000, &field, &flen, &level);
    CHECK(one && many && one->len == many->len && memcmp(one->data, many->data, one->len) == 0,
          "same bytes");
    const char *want = "$1\r\n2\r\n$1\r\nk\r\n$21\r\nredlockc_attempts:{k}\r\n$4\r\n9000\r\n"
                       "$3\r\nU:7\r\n$3\r\nU:5\r\n";
    CHECK(strcmp(args_of(one, &script_renew), want) == 0, "args %s", args_of(one, &script_renew));
    cmd_unref(one);
    cmd_unref(many);
done:;
}

/* Loss push's two commands: EXISTS of the keys, then the verify as EVAL of
 * its source (never EVALSHA: a NOSCRIPT re-send would answer out of order). */
TEST(verify_is_an_eval_of_the_renewal_test_after_an_exists)
{
    scripts_init();
    const char *fields[2] = {"U:7", "U:8"};
    size_t flens[2] = {3, 3};
    uint64_t levels[2] = {5, 0x1a};
    struct lock_names two[2] = {NAMES, NAMES};
    struct rlc_cmd *ex = call_exists_many(2, two);
    CHECK(ex && strcmp(text(ex), "*3\r\n$6\r\nEXISTS\r\n$1\r\nk\r\n$1\r\nk\r\n") == 0,
          "exists %s", ex ? text(ex) : "NULL");
    struct rlc_cmd *v = call_verify_many(2, two, "U", fields, flens, levels);
    CHECK(v && strncmp(text(v), "*11\r\n$4\r\nEVAL\r\n", 15) == 0, "head %.20s", text(v));
    CHECK(strstr(text(v), script_verify.source) != NULL, "the verify script's source");
    const char *want = "$1\r\n4\r\n$1\r\nk\r\n$1\r\nk\r\n$21\r\nredlockc_attempts:{k}\r\n"
                       "$21\r\nredlockc_attempts:{k}\r\n$3\r\nU:7\r\n$3\r\nU:8\r\n"
                       "$3\r\nU:5\r\n$4\r\nU:1a\r\n";
    const char *args = strstr(text(v), script_verify.source);
    args = args ? args + strlen(script_verify.source) + 2 : "";
    CHECK(strcmp(args, want) == 0, "args %s", args);
    cmd_unref(ex);
    cmd_unref(v);
done:;
}

TEST(release_names_its_level_upto_and_the_remains)
{
    scripts_init();
    uint64_t extra[2] = {3, 4};
    struct rlc_cmd *c = call_release(&NAMES, "U", 100, "U:7", 3, 2, 0x10, extra, 2);
    const char *want = "$1\r\n3\r\n$1\r\nk\r\n$26\r\nredisson_lock__channel:{k}\r\n"
                       "$21\r\nredlockc_attempts:{k}\r\n$3\r\n100\r\n$3\r\nU:7\r\n$3\r\nU:2\r\n"
                       "$2\r\n10\r\n$3\r\nU:3\r\n$3\r\nU:4\r\n";
    CHECK(c && strcmp(args_of(c, &script_release), want) == 0, "args %s",
          c ? args_of(c, &script_release) : "(null)");
    cmd_unref(c);
    c = call_release(&NAMES, "U", 100, "U:7", 3, 0, 0, NULL, 0);
    CHECK(c && strstr(text(c), "$3\r\nU:7\r\n$0\r\n\r\n$0\r\n\r\n") != NULL,
          "no level and no upto are empty");
    cmd_unref(c);
done:;
}

TEST(undo_carries_a_tombstone_that_outlives_a_late_acquire)
{
    scripts_init();
    CHECK(lock_undo_tomb_ms(1000, 3000, 2000) == 1000 + 2 * 5000 + 60000, "tomb");
    struct rlc_cmd *c = call_undo(&NAMES, "U", 9, "U:7", 3, 71000);
    const char *want = "$1\r\n2\r\n$1\r\nk\r\n$21\r\nredlockc_attempts:{k}\r\n$3\r\nU:9\r\n"
                       "$3\r\nU:7\r\n$5\r\n71000\r\n";
    CHECK(c && strcmp(args_of(c, &script_undo), want) == 0, "args %s",
          c ? args_of(c, &script_undo) : "(null)");
    cmd_unref(c);
done:;
}

/* The number writers replaced snprintf on this path: they must write what
 * it wrote, edges included, and cut short where it cut short. */
TEST(numbers_are_written_as_snprintf_wrote_them)
{
    char got[CMD_U64_MAX + 1], want[64];
    const int64_t sv[] = {0, 7, -1, 30000, INT64_MAX, INT64_MIN, -9223372036854775807LL};
    for (size_t i = 0; i < sizeof sv / sizeof sv[0]; i++) {
        size_t n = cmd_i64(got, sv[i]);
        snprintf(want, sizeof want, "%lld", (long long)sv[i]);
        CHECK(strcmp(got, want) == 0 && n == strlen(want), "%lld: got %s", (long long)sv[i], got);
    }
    const uint64_t uv[] = {0, 9, 10, 0x1f, UINT64_MAX, 4611686018427387905ULL};
    for (size_t i = 0; i < sizeof uv / sizeof uv[0]; i++) {
        cmd_u64(got, uv[i], 10);
        snprintf(want, sizeof want, "%llu", (unsigned long long)uv[i]);
        CHECK(strcmp(got, want) == 0, "%s: got %s", want, got);
        cmd_u64(got, uv[i], 16);
        snprintf(want, sizeof want, "%llx", (unsigned long long)uv[i]);
        CHECK(strcmp(got, want) == 0, "%s: got %s", want, got);
    }
    /* "<prefix>:<v>" in every buffer size from none to ample */
    for (size_t size = 0; size <= 12; size++) {
        char buf[16] = "untouched", ref[16] = "untouched";
        int n = cmd_tagged_u64("abcd", 0x1f2e, 16, buf, size);
        int m = snprintf(ref, size, "%s:%llx", "abcd", 0x1f2eULL);
        CHECK(n == m && memcmp(buf, ref, sizeof buf) == 0, "size %zu: got '%s' (%d), want '%s' (%d)",
              size, buf, n, ref, m);
    }
    CHECK(lock_attempt_id("U", 0xab, want, sizeof want) == 4 && strcmp(want, "U:ab") == 0,
          "attempt id %s", want);
done:;
}

static redisReply *integer(long long v)
{
    redisReply *r = calloc(1, sizeof *r);
    r->type = REDIS_REPLY_INTEGER;
    r->integer = v;
    return r;
}

static redisReply *array(size_t n, redisReply **el)
{
    redisReply *r = calloc(1, sizeof *r);
    r->type = REDIS_REPLY_ARRAY;
    r->elements = n;
    r->element = el;
    return r;
}

TEST(answers_read_as_the_scripts_write_them)
{
    redisReply *holder = calloc(1, sizeof *holder);
    holder->type = REDIS_REPLY_STRING;
    holder->str = "X:1";
    holder->len = 3;
    redisReply *busy_el[3] = {integer(0), integer(1234), holder};
    redisReply *busy = array(3, busy_el);
    struct acquire_answer a;
    CHECK(answer_acquire(busy, RLC_KIND_LOCK, &a) && a.count == 0 && a.x == 1234 && a.holder_len == 3 &&
              memcmp(a.holder, "X:1", 3) == 0 && !a.inner, "busy");
    redisReply *held_el[4] = {integer(2), integer(77), integer(-2), integer(1)};
    redisReply *held = array(4, held_el);
    CHECK(answer_acquire(held, RLC_KIND_LOCK, &a) && a.count == 2 && a.x == 77 && a.inner && a.holder_len == 0,
          "held, nested in this life");
    CHECK(answer_acquire(held_el[0], RLC_KIND_LOCK, &a) && a.count == 0 && a.x == 2 && a.holder_len == 0 &&
              !a.inner, "an integer is a busy answer's pttl (the holder not asked for)");
    CHECK(!answer_acquire(holder, RLC_KIND_LOCK, &a), "a string is not an acquire answer");
    redisReply *ren_el[2] = {integer(1), integer(0)};
    redisReply *ren = array(2, ren_el);
    CHECK(answer_renew(ren, 0) == 1 && answer_renew(ren, 1) == 0 && answer_renew(ren, 2) == -1,
          "renew answers");
    CHECK(answer_renew(holder, 0) == -1, "a string is not a renew answer");
    CHECK(answer_renew(held_el[0], 1) == -1 && answer_renew(ren_el[0], 0) == 1 &&
              answer_renew(ren_el[1], 0) == 0, "one integer answers one renewal (the family's)");
    for (int i = 0; i < 3; i++)
        free(busy_el[i]);
    for (int i = 0; i < 4; i++)
        free(held_el[i]);
    free(ren_el[0]);
    free(ren_el[1]);
    free(busy);
    free(held);
    free(ren);
done:;
}

/* The read, write and fair locks' calls go to the family's scripts in their order
 * (scripts_family.h), and their answers read as the lock's. */
static const struct lock_names WNAMES = {"k", "redisson_lock_token:{k}", "redlockc_attempts:{k}",
                                         "redisson_rwlock:{k}", 1, 23, 21, 19, false,
                                         RLC_KIND_WRITE, "redlockc_rwlock_writers:{k}", 27,
                                         NULL, 0, 0};
static const struct lock_names FNAMES = {"k", "redisson_lock_token:{k}", "redlockc_attempts:{k}",
                                         "redisson_lock__channel:{k}", 1, 23, 21, 26, false,
                                         RLC_KIND_FAIR, "redisson_lock_queue:{k}", 23,
                                         "redisson_lock_timeout:{k}", 25, 5000};
static const struct lock_names RNAMES = {"k", "redisson_lock_token:{k}", "redlockc_attempts:{k}",
                                         "redisson_rwlock:{k}", 1, 23, 21, 19, false,
                                         RLC_KIND_READ, "redlockc_rwlock_writers:{k}", 27,
                                         "{k}", 3, 0};

TEST(family_kinds_call_the_family_scripts_and_read_their_answers)
{
    scripts_init();
    struct rlc_cmd *c = call_acquire(&WNAMES, "U", 500, "U:7:write", 9, 2, 1, true, true, true);
    const char *want = "$1\r\n3\r\n$1\r\nk\r\n$21\r\nredlockc_attempts:{k}\r\n"
                       "$27\r\nredlockc_rwlock_writers:{k}\r\n$3\r\n500\r\n$9\r\nU:7:write\r\n"
                       "$3\r\nU:2\r\n$4\r\n3000\r\n$3\r\nU:1\r\n";
    CHECK(c && strcmp(args_of(c, &fscript_write_acquire), want) == 0, "waiting try %s",
          c ? args_of(c, &fscript_write_acquire) : "NULL");
    cmd_unref(c);
    c = call_acquire(&WNAMES, "U", 500, "U:7:write", 9, 2, 0, false, false, false);
    CHECK(c && strstr(args_of(c, &fscript_write_acquire), "$1\r\n0\r\n$0\r\n\r\n"),
          "a try that does not wait registers nothing: %s", args_of(c, &fscript_write_acquire));
    cmd_unref(c);
    c = call_undo(&WNAMES, "U", 2, "U:7:write", 9, 90000);
    CHECK(c && strcmp(args_of(c, &fscript_rw_undo),
                      "$1\r\n2\r\n$1\r\nk\r\n$21\r\nredlockc_attempts:{k}\r\n"
                      "$3\r\nU:2\r\n$9\r\nU:7:write\r\n$5\r\n90000\r\n") == 0,
          "undo %s", c ? args_of(c, &fscript_rw_undo) : "NULL");
    cmd_unref(c);
    c = call_renew(&WNAMES, "U", 500, "U:7:write", 9, 2);
    CHECK(c && strcmp(args_of(c, &fscript_rw_renew),
                      "$1\r\n2\r\n$1\r\nk\r\n$21\r\nredlockc_attempts:{k}\r\n"
                      "$3\r\n500\r\n$9\r\nU:7:write\r\n$3\r\nU:2\r\n") == 0,
          "renew %s", c ? args_of(c, &fscript_rw_renew) : "NULL");
    cmd_unref(c);
    c = call_release(&WNAMES, "U", 500, "U:7:write", 9, 2, 9, NULL, 0);
    CHECK(c && strcmp(args_of(c, &fscript_write_release),
                      "$1\r\n3\r\n$1\r\nk\r\n$19\r\nredisson_rwlock:{k}\r\n"
                      "$21\r\nredlockc_attempts:{k}\r\n$3\r\n500\r\n$9\r\nU:7:write\r\n"
                      "$3\r\nU:2\r\n") == 0,
          "release %s", c ? args_of(c, &fscript_write_release) : "NULL");
    cmd_unref(c);
    c = call_withdraw(&WNAMES, "U:7:write", 9);
    CHECK(c && strcmp(args_of(c, &fscript_write_withdraw),
                      "$1\r\n1\r\n$27\r\nredlockc_rwlock_writers:{k}\r\n$9\r\nU:7:write\r\n") == 0,
          "withdraw %s", c ? args_of(c, &fscript_write_withdraw) : "NULL");
    cmd_unref(c);
    c = NULL;
    CHECK(call_withdraw(&NAMES, "U:7", 3) == NULL, "a lock keeps no place to withdraw");
    CHECK(call_withdraw(&RNAMES, "U:7", 3) == NULL, "a reader keeps no place to withdraw");
    c = call_acquire(&RNAMES, "U", 500, "U:7", 3, 2, 1, true, true, true);
    CHECK(c && strcmp(args_of(c, &fscript_read_acquire),
                      "$1\r\n4\r\n$1\r\nk\r\n$22\r\n{k}:U:7:rwlock_timeout\r\n"
                      "$21\r\nredlockc_attempts:{k}\r\n$27\r\nredlockc_rwlock_writers:{k}\r\n"
                      "$3\r\n500\r\n$3\r\nU:7\r\n$9\r\nU:7:write\r\n$3\r\nU:2\r\n"
                      "$3\r\nU:1\r\n") == 0,
          "read try %s", c ? args_of(c, &fscript_read_acquire) : "NULL");
    cmd_unref(c);
    c = call_undo(&RNAMES, "U", 2, "U:7", 3, 90000);
    CHECK(c && strcmp(args_of(c, &fscript_rw_undo),
                      "$1\r\n3\r\n$1\r\nk\r\n$21\r\nredlockc_attempts:{k}\r\n"
                      "$22\r\n{k}:U:7:rwlock_timeout\r\n$3\r\nU:2\r\n$3\r\nU:7\r\n"
                      "$5\r\n90000\r\n") == 0,
          "read undo %s", c ? args_of(c, &fscript_rw_undo) : "NULL");
    cmd_unref(c);
    c = call_acquire(&FNAMES, "U", 500, "U:7", 3, 2, 0, true, true, true);
    CHECK(c && strcmp(args_of(c, &fscript_fair_acquire),
                      "$1\r\n4\r\n$1\r\nk\r\n$23\r\nredisson_lock_queue:{k}\r\n"
                      "$25\r\nredisson_lock_timeout:{k}\r\n$21\r\nredlockc_attempts:{k}\r\n"
                      "$3\r\n500\r\n$3\r\nU:7\r\n$3\r\nU:2\r\n$4\r\n5000\r\n$1\r\n1\r\n"
                      "$0\r\n\r\n") == 0,
          "fair try %s", c ? args_of(c, &fscript_fair_acquire) : "NULL");
    cmd_unref(c);
    uint64_t more = 3;
    c = call_release(&FNAMES, "U", 500, "U:7", 3, 2, 9, &more, 1);
    CHECK(c && strcmp(args_of(c, &fscript_fair_release),
                      "$1\r\n5\r\n$1\r\nk\r\n$23\r\nredisson_lock_queue:{k}\r\n"
                      "$25\r\nredisson_lock_timeout:{k}\r\n$21\r\nredlockc_attempts:{k}\r\n"
                      "$26\r\nredisson_lock__channel:{k}\r\n$3\r\n500\r\n$3\r\nU:7\r\n"
                      "$3\r\nU:2\r\n$3\r\nU:3\r\n") == 0,
          "fair release %s", c ? args_of(c, &fscript_fair_release) : "NULL");
    cmd_unref(c);
    c = call_withdraw(&FNAMES, "U:7", 3);
    CHECK(c && strstr(args_of(c, &fscript_fair_withdraw), "$3\r\nU:7\r\n"), "fair withdraw");
    cmd_unref(c);
    c = call_release(&RNAMES, "U", 500, "U:7", 3, 2, 9, &more, 1);
    CHECK(c && strcmp(args_of(c, &fscript_read_release),
                      "$1\r\n5\r\n$1\r\nk\r\n$19\r\nredisson_rwlock:{k}\r\n"
                      "$22\r\n{k}:U:7:rwlock_timeout\r\n$21\r\nredlockc_attempts:{k}\r\n"
                      "$3\r\n{k}\r\n$3\r\n500\r\n$3\r\nU:7\r\n$3\r\nU:2\r\n$3\r\nU:3\r\n") == 0,
          "read release %s", c ? args_of(c, &fscript_read_release) : "NULL");
    cmd_unref(c);
    c = NULL;

    struct acquire_answer a;
    redisReply *grant_el[3] = {integer(2), integer(0), integer(812)};
    redisReply *grant = array(3, grant_el);
    CHECK(answer_acquire(grant, RLC_KIND_WRITE, &a) && a.count == 2 && a.x == 0 && a.inner,
          "a grant is in the life of the level it nests in");
    redisReply *gone_el[2] = {integer(-2), integer(0)};
    redisReply *gone = array(2, gone_el);
    CHECK(answer_acquire(gone, RLC_KIND_WRITE, &a) && a.count == 1 && !a.inner,
          "an outer level gone reads as a grant out of that life (A7)");
    redisReply *freed_el[2] = {integer(0), integer(1)};
    redisReply *freed = array(2, freed_el);
    int64_t n = 9;
    bool was_freed = false;
    CHECK(answer_release(freed, &n, &was_freed) && n == 0 && was_freed, "freed");
    CHECK(answer_release(gone_el[0], &n, &was_freed) && n == -2 && was_freed,
          "an integer release answer as it is (-2: freed, its message refused)");
    freed_el[1]->integer = 0;
    CHECK(answer_release(freed, &n, &was_freed) && n == 0 && !was_freed,
          "a reader's last level, other readers left: not freed");
    for (int i = 0; i < 3; i++)
        free(grant_el[i]);
    for (int i = 0; i < 2; i++)
        free(gone_el[i]), free(freed_el[i]);
    free(grant);
    free(gone);
    free(freed);
done:
    cmd_unref(c);
}

RUN_TESTS(CASE(acquire_call_names_keys_and_attempts_in_the_scripts_order),
          CASE(family_kinds_call_the_family_scripts_and_read_their_answers),
          CASE(renew_of_one_is_the_batch_of_one), CASE(release_names_its_level_upto_and_the_remains),
          CASE(verify_is_an_eval_of_the_renewal_test_after_an_exists),
          CASE(undo_carries_a_tombstone_that_outlives_a_late_acquire),
          CASE(answers_read_as_the_scripts_write_them),
          CASE(numbers_are_written_as_snprintf_wrote_them))
