/*
 * test_slot.c - the hash slot of a key, against Redis's documented values
 * and against a real cluster-enabled server's CLUSTER KEYSLOT.
 */
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

RUN_TESTS(CASE(crc16_and_slots_match_redis_documented_values),
          CASE(a_locks_derived_names_share_its_slot),
          CASE(slots_match_a_real_servers_cluster_keyslot))
