/*
 * test_keys_left.c - no key of the library outlives its lock by default;
 * with fencing=1 each name keeps exactly its token counter (docs/FENCING.md,
 * "What fencing keeps on the server"). Real servers (RLC_SERVER picks
 * valkey-server as well).
 *
 * Before fencing was opt-in, every name ever locked left its counter
 * redisson_lock_token:{name} behind, without a TTL: 10,000 names, 10,000
 * keys.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fixture.h"

/* The count; under valgrind the time bound stops it earlier (the
 * count reached is printed): what is checked is that nothing is left. */
#define NAMES 10000
#define NAMES_MS 20000

static long long dbsize(const struct redis_server *s)
{
    return rs_int(s, "DBSIZE");
}

/* Every kind of cycle the lock has: a new hold, a nested level, another
 * owner's refused try, a fixed lease and a watchdog, and a multi-lock of
 * two names, on distinct names. Returns the number of names used, or -1 on
 * a call that did not answer as it must. */
static long cycles(rlc_client *c, long want, int64_t ms)
{
    int64_t end = check_now_ms() + ms;
    long i = 0;
    for (; i < want && check_now_ms() < end; i++) {
        char name[40], name2[40];
        snprintf(name, sizeof name, "order:%ld", i);
        rlc_lock *l = lock(c, name, 1), *other = lock(c, name, 2);
        int rc = l && other ? RLC_OK : RLC_E_NOMEM;
        int64_t lease = i % 2 ? 30000 : -1;
        if (rc == RLC_OK)
            rc = rlc_lock_acquire(l, 0, lease);
        if (rc == RLC_OK && i % 3 == 0) {
            rc = rlc_lock_acquire(l, 0, lease);
            if (rc == RLC_OK)
                rc = rlc_lock_release(l);
        }
        if (rc == RLC_OK && i % 5 == 0)
            rc = rlc_lock_acquire(other, 0, 30000) == RLC_NOT_ACQUIRED ? RLC_OK : RLC_E_PROTOCOL;
        if (rc == RLC_OK)
            rc = rlc_lock_release(l);
        rlc_lock_free(l);
        rlc_lock_free(other);
        if (rc == RLC_OK && i % 10 == 0) {
            snprintf(name2, sizeof name2, "order:%ld:b", i);
            const char *both[2] = {name, name2};
            rlc_multilock *m = NULL;
            rc = rlc_multilock_new(c, both, 2, 1, &m);
            if (rc == RLC_OK)
                rc = rlc_multilock_acquire(m, 0, 30000);
            if (rc == RLC_OK)
                rc = rlc_multilock_release(m);
            rlc_multilock_free(m);
        }
        if (rc != RLC_OK) {
            fprintf(stderr, "name %s: %d (%s)\n", name, rc, rlc_errmsg());
            return -1;
        }
    }
    return i;
}

TEST(distinct_names_leave_no_key_without_fencing)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    CHECK(c, "client");
    long n = cycles(c, NAMES, NAMES_MS);
    CHECK(n > 0, "cycles");
    printf("%ld distinct names (of %d) acquired and released\n", n, NAMES);
    long long left = dbsize(&s);
    if (left) {
        redisReply *r = rs_cmd(&s, "SCAN 0 COUNT 5");
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
            for (size_t k = 0; k < r->element[1]->elements; k++)
                fprintf(stderr, "left: %s\n", r->element[1]->element[k]->str);
        if (r)
            freeReplyObject(r);
    }
    CHECK(left == 0, "%lld keys left after %ld names (want 0)", left, n);
done:
    rlc_client_free(c);
    rs_stop(&s);
}

/* With fencing=1 what stays is what is documented: one counter per name,
 * without a TTL (a counter that expired could start again below a token it
 * gave), holding the last token; nothing else. */
TEST(with_fencing_each_name_keeps_only_its_counter)
{
    enum { N = 200 };
    START(s);
    rlc_client *c = client(s.uri, "fencing=1");
    CHECK(c, "client");
    uint64_t last = 0;
    for (int i = 0; i < N; i++) {
        char name[40];
        snprintf(name, sizeof name, "fenced:%d", i);
        rlc_lock *l = lock(c, name, 1);
        CHECK_RC(rlc_lock_acquire(l, 0, 30000), RLC_OK);
        uint64_t t = 0;
        int rc = rlc_lock_fencing_token(l, &t);
        int rel = rlc_lock_release(l);
        rlc_lock_free(l);
        CHECK_RC(rc, RLC_OK);
        CHECK_RC(rel, RLC_OK);
        CHECK(t >= 1, "token %llu", (unsigned long long)t);
        if (i == N - 1)
            last = t;
    }
    CHECK(dbsize(&s) == N, "%lld keys for %d fenced names (one counter each)", dbsize(&s), N);
    char key[64];
    snprintf(key, sizeof key, "redisson_lock_token:{fenced:%d}", N - 1);
    CHECK(rs_int(&s, "TTL %s", key) == -1, "the counter has no TTL");
    redisReply *r = rs_cmd(&s, "GET %s", key);
    uint64_t held = r && r->type == REDIS_REPLY_STRING ? strtoull(r->str, NULL, 10) : 0;
    if (r)
        freeReplyObject(r);
    CHECK(held == last, "the counter holds %llu, the last token was %llu",
          (unsigned long long)held, (unsigned long long)last);
    CHECK(rs_int(&s, "EXISTS fenced:0 redlockc_attempts:{fenced:0}") == 0, "nothing else");
done:
    rlc_client_free(c);
    rs_stop(&s);
}

/* Without fencing the token query is refused with a message naming the
 * option, not answered 0: a program that fences writes must not think it
 * has a token. */
TEST(the_token_query_without_fencing_names_the_option)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = lock(c, "plain", 1);
    CHECK(c && l, "client");
    CHECK_RC(rlc_lock_acquire(l, 0, 30000), RLC_OK);
    uint64_t t = 7;
    CHECK_RC(rlc_lock_fencing_token(l, &t), RLC_E_INVAL);
    CHECK(strstr(rlc_errmsg(), "fencing=1"), "errmsg: %s", rlc_errmsg());
    CHECK(t == 7, "nothing written on failure");
    CHECK(rs_int(&s, "EXISTS redisson_lock_token:{plain}") == 0, "no counter");
    CHECK_RC(rlc_lock_release(l), RLC_OK);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

RUN_TESTS(CASE(distinct_names_leave_no_key_without_fencing),
          CASE(with_fencing_each_name_keeps_only_its_counter),
          CASE(the_token_query_without_fencing_names_the_option))
