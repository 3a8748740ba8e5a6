/*
 * test_slot.c - the hash slot of a key, against Redis's documented values
 * and against a real cluster-enabled server's CLUSTER KEYSLOT.
 */
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "fixture.h"
#include "redis_cluster.h"
#include "keys.h"
#include "slot.h"

TEST(crc16_and_slots_match_redis_documented_values)
{
    /* The Redis Cluster specification: CRC16 of "123456789" is 0x31C3. */
    CHECK(slot_crc16("123456789", 9) == 0x31C3, "crc16 0x%04x", slot_crc16("123456789", 9));
    CHECK(slot_of("foo", 3) == 12182, "foo -> %u", slot_of("foo", 3));
    CHECK(slot_of("{user1000}.following", 20) == slot_of("user1000", 8), "tag");
    CHECK(slot_of("{user1000}.followers", 20) == slot_of("user1000", 8), "tag");
    /* Only the first '{' and the first '}' after it count. */
    CHECK(slot_of("foo{}{bar}", 10) == slot_of("foo{}{bar}", 10) &&
              slot_of("foo{}{bar}", 10) != slot_of("bar", 3), "empty tag hashes the whole key");
    CHECK(slot_of("foo{{bar}}zap", 13) == slot_of("{bar", 4), "tag is '{bar'");
    CHECK(slot_of("foo{bar}{zap}", 13) == slot_of("bar", 3), "first tag only");
    CHECK(slot_of("{", 1) == slot_of("{", 1) && slot_of("a}b{", 4) == (slot_crc16("a}b{", 4) & 16383),
          "no closing brace");
done:;
}

/* Every name a lock derives (keys.c) lands in the key's own slot. */
TEST(a_locks_derived_names_share_its_slot)
{
    const char *names[] = {"orders", "a{b}c", "{x}", "plain:name:1", "{}odd"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t kl = strlen(names[i]), n = 0;
        char *ch = key_derived("redisson_lock__channel:", names[i], kl, "", &n);
        unsigned want = slot_of(names[i], kl), got = ch ? slot_of(ch, n) : 0;
        free(ch);
        /* An empty tag "{}" is Redisson's rule's one gap: the name is kept
         * as it is, and "{}" hashes whole keys, which differ. */
        CHECK(want == got || strstr(names[i], "{}") != NULL,
              "%s: key slot %u, channel slot %u", names[i], want, got);
    }
done:;
}

TEST(slots_match_a_real_servers_cluster_keyslot)
{
    START(s, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", );
    char key[64];
    for (int i = 0; i < 2000; i++) {
        int len = snprintf(key, sizeof key, i % 3 ? "lock:%d" : "{tag%d}:x", i);
        long long want = rs_int(&s, "CLUSTER KEYSLOT %b", key, (size_t)len);
        CHECK(want == (long long)slot_of(key, (size_t)len), "%s: server %lld, ours %u", key, want,
              slot_of(key, (size_t)len));
    }
done:
    rs_stop(&s);
    rc_forget_conf(&s);
    rmdir(s.dir);
}

/* Keys that try the rule's edges: empty tags, lone braces, '}' before '{',
 * nested and repeated tags. */
static const char *const tricky[] = {
    "orders", "x", "{x}", "{}", "{x", "x}", "{{x}}", "a{b}c", "{x}y", "}{x}", "}x{", "}{",
    "{}x}", "a}b{c}", "{x}}", "x}}", "{", "}", "", "{=x}", "=x", "#{1}:x", "{}{x}"};
#define N_TRICKY (sizeof tricky / sizeof tricky[0])

/* key_own's name for key; checks it is in the key's slot (fails the test if not). */
static char *own_checked(const char *key, size_t kl, const char *suffix, size_t *n)
{
    char *name = key_own("redlockc_attempts:", key, kl, suffix, n);
    if (!name) {
        fprintf(stderr, "key_own(%.*s): out of memory\n", (int)kl, key);
        check_failed = 1;
    } else if (slot_of(name, *n) != slot_of(key, kl)) {
        fprintf(stderr, "key %.*s (slot %u) -> %s (slot %u)\n", (int)kl, key, slot_of(key, kl),
                name, slot_of(name, *n));
        check_failed = 1;
    }
    return name;
}

static int by_bytes(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Issue 31: key_own gives every key a name of its own, in its own slot;
 * a key without braces keeps the name key_derived gives it. */
TEST(own_names_are_one_per_key_and_in_the_keys_slot)
{
    size_t n = 0;
    char *name = key_own("redlockc_attempts:", "orders", 6, "", &n);
    CHECK(name && strcmp(name, "redlockc_attempts:{orders}") == 0, "plain: %s", name);
    free(name);
    name = key_own("redlockc_attempts:", "{x}", 3, "", &n);
    CHECK(name && strcmp(name, "redlockc_attempts:={x}") == 0, "tagged: %s", name);
    free(name);
    char want[64];
    snprintf(want, sizeof want, "redlockc_attempt:#{%u}:x}:", key_slot_number(slot_of("x}", 2)));
    name = key_own("redlockc_attempt:", "x}", 2, ":", &n);
    CHECK(name && strcmp(name, want) == 0 && n == strlen(want), "other: %s", name);
    free(name);
    /* every slot has its number, and the number hashes there */
    for (unsigned sl = 0; sl < RLC_SLOTS; sl++) {
        char digits[16];
        int dl = snprintf(digits, sizeof digits, "%u", key_slot_number(sl));
        CHECK(slot_of(digits, (size_t)dl) == sl, "slot %u: number %s hashes to %u", sl, digits,
              slot_of(digits, (size_t)dl));
    }
    /* the tricky keys, then every key of up to 6 bytes over "{}x=": one
     * name each (sorted, no two equal), each in its key's slot */
    enum { MAXK = 6, ALL = 1 + 4 + 16 + 64 + 256 + 1024 + 4096 };
    static char *names[N_TRICKY + ALL];
    size_t count = 0;
    for (size_t i = 0; i < N_TRICKY; i++)
        names[count++] = own_checked(tricky[i], strlen(tricky[i]), "", &n);
    for (int len = 0; len <= MAXK; len++)
        for (unsigned code = 0; code < (1u << (2 * len)); code++) {
            char key[MAXK + 1];
            for (int j = 0; j < len; j++)
                key[j] = "{}x="[(code >> (2 * j)) & 3];
            key[len] = '\0';
            bool listed = false;
            for (size_t i = 0; i < N_TRICKY; i++)
                listed = listed || strcmp(tricky[i], key) == 0;
            char *own = own_checked(key, (size_t)len, "", &n);
            if (listed)
                free(own);
            else
                names[count++] = own;
        }
    CHECK(check_failed == 0, "a name left its key's slot");
    qsort(names, count, sizeof names[0], by_bytes);
    for (size_t i = 1; i < count; i++)
        CHECK(!names[i - 1] || strcmp(names[i - 1], names[i]) != 0, "two keys share %s",
              names[i]);
done:
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        free(names[i]), names[i] = NULL;
}

/* The same, against a real server: CLUSTER KEYSLOT of each tricky key and
 * of its own name agree. */
TEST(own_names_share_the_keys_slot_on_a_real_server)
{
    START(s, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", );
    for (size_t i = 0; i < N_TRICKY; i++) {
        size_t kl = strlen(tricky[i]), n = 0;
        char *name = key_own("redlockc_attempts:", tricky[i], kl, "", &n);
        CHECK(name, "out of memory");
        long long want = rs_int(&s, "CLUSTER KEYSLOT %b", tricky[i], kl);
        long long got = rs_int(&s, "CLUSTER KEYSLOT %b", name, n);
        CHECK(want == got, "key '%s' slot %lld, its name %s slot %lld", tricky[i], want, name, got);
        free(name);
    }
done:
    rs_stop(&s);
    rc_forget_conf(&s);
    rmdir(s.dir);
}

RUN_TESTS(CASE(crc16_and_slots_match_redis_documented_values),
          CASE(a_locks_derived_names_share_its_slot),
          CASE(slots_match_a_real_servers_cluster_keyslot),
          CASE(own_names_are_one_per_key_and_in_the_keys_slot),
          CASE(own_names_share_the_keys_slot_on_a_real_server))
