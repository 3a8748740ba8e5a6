/*
 * test_bad_input.c - what the API does with input it should refuse or
 * survive: NULL handles and pointers, lock names at and past their limits
 * and full of odd bytes, owner ids and times at their extremes, calls in the
 * wrong order, calls after rlc_client_free, and passwords that must never be
 * shown (rlc_errmsg, and the redlockc command's output).
 *
 * Every row checks the documented status and a fragment of rlc_errmsg().
 * This suite runs plain, with clang, under ASan+UBSan, TSan and valgrind
 * (tests/c/run.sh): "none crashes" is checked by those runs. URI and option
 * grammars have their own tables in test_parsers.c.
 *
 * Use after close through a binding: bindings/python tests its own layer;
 * here the C side of it (handles outliving their client get RLC_E_CLOSED).
 */
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "redis_server.h"

/* A server for this case; without one the case fails at once. */
#define START(s, ...)                                                         \
    struct redis_server s;                                                    \
    if (rs_start(&s, (const char *const[]){__VA_ARGS__ NULL}) != 0) {         \
        fprintf(stderr, "redis-server did not start\n");                     \
        check_failed = 1;                                                     \
        return;                                                               \
    }

/* One row: a call's status and message against what the header documents.
 * A failing row is reported and the case goes on with the next row. */
#define ROW(expr, want_rc, want_msg)                                           \
    row(#expr, (expr), (want_rc), (want_msg), __LINE__)

static void row(const char *what, int rc, int want_rc, const char *want_msg, int line)
{
    const char *msg = rlc_errmsg();
    if (rc == want_rc && (!want_msg || strstr(msg, want_msg)))
        return;
    fprintf(stderr, "line %d: %s returned %d (%s), expected %d (%s)%s%s%s; errmsg: %s\n", line,
            what, rc, rlc_strerror(rc), want_rc, rlc_strerror(want_rc),
            want_msg ? " with message containing '" : "", want_msg ? want_msg : "",
            want_msg ? "'" : "", msg);
    check_failed = 1;
}

static rlc_client *client(const char *uri, const char *opts)
{
    rlc_client *c = NULL;
    if (rlc_client_new(&c, uri, opts) != RLC_OK)
        fprintf(stderr, "rlc_client_new(%s): %s\n", uri, rlc_errmsg());
    return c;
}

static rlc_lock *lock(rlc_client *c, const char *name, uint64_t owner)
{
    rlc_lock *l = NULL;
    if (rlc_lock_new(c, name, owner, &l) != RLC_OK)
        fprintf(stderr, "rlc_lock_new: %s\n", rlc_errmsg());
    return l;
}

/* ---- NULL everywhere ------------------------------------------------------ */

TEST(null_handles_and_out_pointers_are_inval)
{
    /* No server: nothing here may get as far as the network. */
    rlc_client *c = client("redis://127.0.0.1:1", NULL);
    rlc_lock *l = lock(c, "n", 0);
    CHECK(c && l, "client and lock for the dead-port node");
    int v;
    int64_t i64;
    uint64_t u64;

    rlc_client *out = (rlc_client *)&out;
    ROW(rlc_client_new(NULL, "redis://h", NULL), RLC_E_INVAL, "out pointer is NULL");
    ROW(rlc_client_new(&out, NULL, NULL), RLC_E_INVAL, "no node URI given");
    CHECK(out == NULL, "*out is NULL after a failed rlc_client_new");
    rlc_lock *lout = (rlc_lock *)&lout;
    ROW(rlc_lock_new(NULL, "x", 0, &lout), RLC_E_INVAL, "client is NULL");
    CHECK(lout == NULL, "*out is NULL after a failed rlc_lock_new");
    ROW(rlc_lock_new(c, NULL, 0, &lout), RLC_E_INVAL, "lock name is NULL or empty");
    ROW(rlc_lock_new(c, "x", 0, NULL), RLC_E_INVAL, "out pointer is NULL");

    ROW(rlc_lock_acquire(NULL, 0, -1), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_release(NULL), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_extend(NULL, 1000), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_force_release(NULL), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_on_lost(NULL, NULL, NULL), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_is_locked(NULL, &v), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_is_held(NULL, &v), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_hold_count(NULL, &i64), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_ttl_ms(NULL, &i64), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_validity_ms(NULL, &i64), RLC_E_INVAL, "lock handle is NULL");
    ROW(rlc_lock_fencing_token(NULL, &u64), RLC_E_INVAL, "lock handle is NULL");

    ROW(rlc_lock_is_locked(l, NULL), RLC_E_INVAL, "out pointer is NULL");
    ROW(rlc_lock_is_held(l, NULL), RLC_E_INVAL, "out pointer is NULL");
    ROW(rlc_lock_hold_count(l, NULL), RLC_E_INVAL, "out pointer is NULL");
    ROW(rlc_lock_ttl_ms(l, NULL), RLC_E_INVAL, "out pointer is NULL");
    ROW(rlc_lock_validity_ms(l, NULL), RLC_E_INVAL, "out pointer is NULL");
    ROW(rlc_lock_fencing_token(l, NULL), RLC_E_INVAL, "out pointer is NULL");
    /* NULL callback is documented: it removes the callback. */
    ROW(rlc_lock_on_lost(l, NULL, NULL), RLC_OK, NULL);

    CHECK(rlc_client_uuid(NULL) == NULL, "rlc_client_uuid(NULL) is NULL");
    rlc_client_free(NULL);
    rlc_lock_free(NULL);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
}

TEST(strerror_and_errmsg_are_never_null)
{
    static const int codes[] = {RLC_OK,          RLC_NOT_ACQUIRED, RLC_E_INVAL,   RLC_E_NOMEM,
                                RLC_E_CONNECT,   RLC_E_TIMEOUT,    RLC_E_NOT_OWNER, RLC_E_LOST,
                                RLC_E_NO_QUORUM, RLC_E_SERVER,     RLC_E_PROTOCOL, RLC_E_CLOSED,
                                RLC_E_AUTH,      RLC_E_CANCELED,   2,             -13,
                                INT_MIN,         INT_MAX};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = rlc_strerror(codes[i]);
        CHECK(s && *s, "rlc_strerror(%d) is NULL or empty", codes[i]);
        bool known = i < 14;
        CHECK(known == (strcmp(s, "unknown status") != 0), "rlc_strerror(%d) = '%s'", codes[i],
              s);
    }
    CHECK(rlc_errmsg() != NULL, "rlc_errmsg() is NULL");
    CHECK(rlc_version() && strcmp(rlc_version(), "1.0.0") >= 0, "rlc_version() = %s",
          rlc_version() ? rlc_version() : "(null)");
done:;
}

/* ---- lock names ----------------------------------------------------------- */

TEST(lock_names_at_and_past_their_limits)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = NULL;
    char *name = malloc((1 << 20) + 1);
    CHECK(c && name, "client and buffer");

    ROW(rlc_lock_new(c, "", 0, &l), RLC_E_INVAL, "lock name is NULL or empty");
    CHECK(l == NULL, "no handle for an empty name");

    const size_t sizes[] = {1, 65536, 65537, 1 << 20};
    for (size_t k = 0; k < 4; k++) {
        size_t n = sizes[k];
        memset(name, 'n', n);
        name[n] = '\0';
        int rc = rlc_lock_new(c, name, 0, &l);
        if (n <= 65536) {
            ROW(rc, RLC_OK, NULL);
            CHECK(l != NULL, "handle for a %zu-byte name", n);
            ROW(rlc_lock_acquire(l, 0, -1), RLC_OK, NULL);
            CHECK(rs_int(&s, "HLEN %b", name, n) == 1, "the %zu-byte key holds one field", n);
            ROW(rlc_lock_release(l), RLC_OK, NULL);
            CHECK(rs_int(&s, "EXISTS %b", name, n) == 0, "the %zu-byte key is gone", n);
            rlc_lock_free(l);
            l = NULL;
        } else {
            ROW(rc, RLC_E_INVAL, "lock name is longer than 65536 bytes");
            CHECK(l == NULL, "no handle for a %zu-byte name", n);
            CHECK(strlen(rlc_errmsg()) < 200, "message of %zu bytes", strlen(rlc_errmsg()));
        }
    }
done:
    free(name);
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* Token key per the brace rule: "redisson_lock_token:{name}", or without the
 * added braces when the name has a '{'. */
static void token_key(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, strchr(name, '{') ? "redisson_lock_token:%s" : "redisson_lock_token:{%s}",
             name);
}

TEST(odd_lock_names_are_exact_keys_of_their_own)
{
    static const char *const names[] = {
        "{orders}", "a{b", "}{", "{}", "{a}{b}", "with space", " lead and trail ",
        "tab\there", "line\r\nbreak", "\xff\xfe\x80", "\xc3\x28", "caf\xc3\xa9", "%s%n%x",
        "*", "?", "\x01\x02\x7f", "redisson_lock__channel:{x}", "a\"b'c\\",
    };
    START(s);
    rlc_client *a = client(s.uri, "fencing=1"), *b = client(s.uri, "fencing=1");
    CHECK(a && b, "clients");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *n = names[i];
        size_t len = strlen(n);
        rlc_lock *la = lock(a, n, 0), *lb = lock(b, n, 0);
        char tk[128];
        token_key(n, tk, sizeof tk);
        ROW(rlc_lock_acquire(la, 0, -1), RLC_OK, NULL);
        if (rs_int(&s, "EXISTS %b", n, len) != 1 || rs_int(&s, "EXISTS %s", tk) != 1) {
            fprintf(stderr, "name #%zu: key or token key '%s' missing\n", i, tk);
            check_failed = 1;
        }
        ROW(rlc_lock_acquire(lb, 0, -1), RLC_NOT_ACQUIRED, "is held by another owner");
        ROW(rlc_lock_release(la), RLC_OK, NULL);
        if (rs_int(&s, "EXISTS %b", n, len) != 0) {
            fprintf(stderr, "name #%zu: key left after release\n", i);
            check_failed = 1;
        }
        rlc_lock_free(la);
        rlc_lock_free(lb);
    }
    /* Names differing in one byte are different locks. */
    rlc_lock *x = lock(a, "a b", 0), *y = lock(b, "a  b", 0), *z = lock(b, "A b", 0);
    ROW(rlc_lock_acquire(x, 0, -1), RLC_OK, NULL);
    ROW(rlc_lock_acquire(y, 0, -1), RLC_OK, NULL);
    ROW(rlc_lock_acquire(z, 0, -1), RLC_OK, NULL);
    ROW(rlc_lock_release(x), RLC_OK, NULL);
    ROW(rlc_lock_release(y), RLC_OK, NULL);
    ROW(rlc_lock_release(z), RLC_OK, NULL);
    rlc_lock_free(x);
    rlc_lock_free(y);
    rlc_lock_free(z);
done:
    rlc_client_free(a);
    rlc_client_free(b);
    rs_stop(&s);
}

/* ---- owners and times ----------------------------------------------------- */

TEST(owner_ids_at_their_limits)
{
    START(s);
    rlc_client *c = client(s.uri, NULL);
    rlc_lock *l = NULL;
    const uint64_t top = (UINT64_C(1) << 62) - 1;
    CHECK(c != NULL, "client");
    ROW(rlc_lock_new(c, "o", UINT64_C(1) << 62, &l), RLC_E_INVAL, "explicit owner id");
    ROW(rlc_lock_new(c, "o", UINT64_MAX, &l), RLC_E_INVAL, "is too large");
    CHECK(l == NULL, "no handle for a thread-range owner");
    ROW(rlc_lock_new(c, "o", top, &l), RLC_OK, NULL);
    ROW(rlc_lock_acquire(l, 0, -1), RLC_OK, NULL);
    char field[96];
    snprintf(field, sizeof field, "%s:%llu", rlc_client_uuid(c), (unsigned long long)top);
    CHECK(rs_int(&s, "HEXISTS o %s", field) == 1, "field %s", field);
    ROW(rlc_lock_release(l), RLC_OK, NULL);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(lease_extremes_are_watchdog_or_inval)
{
    START(s);
    rlc_client *c = client(s.uri, "watchdog_timeout_ms=20000");
    rlc_lock *l = lock(c, "t", 0);
    const int64_t year = 366LL * 24 * 3600 * 1000;
    CHECK(c && l, "client and lock");

    /* lease <= 0: the watchdog's lease, however negative. */
    const int64_t watchdog[] = {INT64_MIN, -1, 0};
    for (int k = 0; k < 3; k++) {
        ROW(rlc_lock_acquire(l, 0, watchdog[k]), RLC_OK, NULL);
        long long pttl = rs_int(&s, "PTTL t");
        CHECK(pttl > 19000 && pttl <= 20000, "lease %lld: PTTL %lld, expected the watchdog's",
              (long long)watchdog[k], pttl);
        ROW(rlc_lock_release(l), RLC_OK, NULL);
    }
    /* Fixed leases: above the drift allowance (lease * 0.01 + 2 ms) plus the
     * shortest round trip (1 ms), up to a year. */
    ROW(rlc_lock_acquire(l, 0, 1), RLC_E_INVAL, "shorter than the clock drift allowance");
    ROW(rlc_lock_acquire(l, 0, 3), RLC_E_INVAL, "shorter than the clock drift allowance");
    ROW(rlc_lock_acquire(l, 0, 4), RLC_E_INVAL, "shorter than the clock drift allowance");
    ROW(rlc_lock_acquire(l, 0, year + 1), RLC_E_INVAL, "longer than 366 days");
    ROW(rlc_lock_acquire(l, 0, INT64_MAX), RLC_E_INVAL, "longer than 366 days");
    CHECK(rs_int(&s, "EXISTS t") == 0, "refused leases touched nothing");
    ROW(rlc_lock_acquire(l, 0, year), RLC_OK, NULL);
    CHECK(rs_int(&s, "PTTL t") > year - 5000, "a year's lease: PTTL %lld", rs_int(&s, "PTTL t"));
    ROW(rlc_lock_extend(l, INT64_MAX), RLC_E_INVAL, "longer than 366 days");
    ROW(rlc_lock_extend(l, 2), RLC_E_INVAL, "shorter than the clock drift allowance");
    ROW(rlc_lock_extend(l, INT64_MIN), RLC_OK, NULL); /* back to the watchdog */
    CHECK(rs_int(&s, "PTTL t") <= 20000, "extend(<=0) set the watchdog lease");
    /* The shortest legal lease. It leaves about 3 ms of validity, and a round
     * trip slower than that (a loaded CI machine) makes the extend report the
     * lock lost, by design: both answers are right, nothing else is. */
    int rc5 = rlc_lock_extend(l, 5);
    CHECK(rc5 == RLC_OK || (rc5 == RLC_E_LOST && strstr(rlc_errmsg(), "ran out")),
          "extend(5) returned %d (%s), expected ok, or lost because its lease ran out", rc5,
          rlc_errmsg());
    CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS t") == 0, 2000), "the 5 ms lease ended");
    if (rc5 == RLC_OK)
        ROW(rlc_lock_release(l), RLC_E_LOST, "was lost");
    else
        CHECK(rlc_lock_release(l) < 0, "releasing a lock already reported lost fails");

    /* A larger drift factor raises the floor: 5 <= ceil(5 * 0.5) + 2 + 1. (A
     * lease just above the floor leaves a few ms of validity, which a slow
     * round trip, e.g. under valgrind, uses up: not granted, by design.) */
    rlc_client *d = client(s.uri, "drift_factor=0.5");
    rlc_lock *ld = lock(d, "t2", 0);
    ROW(rlc_lock_acquire(ld, 0, 4), RLC_E_INVAL, "shorter than the clock drift allowance");
    ROW(rlc_lock_acquire(ld, 0, 5), RLC_E_INVAL, "shorter than the clock drift allowance");
    ROW(rlc_lock_acquire(ld, 0, 6), RLC_E_INVAL, "shorter than the clock drift allowance");
    ROW(rlc_lock_acquire(ld, 0, 1000), RLC_OK, NULL);
    CHECK(rs_int(&s, "PTTL t2") <= 1000, "PTTL %lld for a 1000 ms lease", rs_int(&s, "PTTL t2"));
    rlc_lock_free(ld);
    rlc_client_free(d);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

struct waiter_arg {
    rlc_lock *l;
    int64_t wait_ms;
    atomic_int rc;
    atomic_bool done;
};

static void *waiter(void *p)
{
    struct waiter_arg *a = p;
    int rc = rlc_lock_acquire(a->l, a->wait_ms, -1);
    if (rc == RLC_OK)
        rlc_lock_release(a->l);
    atomic_store(&a->rc, rc);
    atomic_store(&a->done, true);
    return NULL;
}

TEST(huge_and_negative_waits_mean_wait_and_still_wake)
{
    START(s);
    rlc_client *h = client(s.uri, NULL), *w = client(s.uri, NULL);
    rlc_lock *lh = lock(h, "w", 0), *lw = lock(w, "w", 0);
    CHECK(h && w && lh && lw, "clients and locks");
    /* Free lock: any wait returns at once. */
    const int64_t waits[] = {INT64_MIN, -1, INT64_MAX};
    for (int k = 0; k < 3; k++) {
        ROW(rlc_lock_acquire(lw, waits[k], -1), RLC_OK, NULL);
        ROW(rlc_lock_release(lw), RLC_OK, NULL);
    }
    /* Busy lock: a huge or negative wait must neither overflow into "give
     * up now" nor miss the release. */
    for (int k = 0; k < 3; k++) {
        ROW(rlc_lock_acquire(lh, 0, -1), RLC_OK, NULL);
        struct waiter_arg a = {.l = lw, .wait_ms = waits[k]};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, waiter, &a) == 0, "thread");
        bool early = WAIT_UNTIL(atomic_load(&a.done), 300);
        ROW(rlc_lock_release(lh), RLC_OK, NULL);
        bool woke = WAIT_UNTIL(atomic_load(&a.done), 10000);
        if (!woke) { /* a stuck waiter: closing its client ends the wait */
            rlc_client_free(w);
            w = NULL;
        }
        pthread_join(t, NULL);
        CHECK(!early, "wait %lld returned while the lock was busy (rc %d)", (long long)waits[k],
              atomic_load(&a.rc));
        CHECK(woke, "wait %lld did not return within 10 s of the release", (long long)waits[k]);
        ROW(atomic_load(&a.rc), RLC_OK, NULL);
    }
done:
    rlc_lock_free(lh);
    rlc_lock_free(lw);
    rlc_client_free(h);
    rlc_client_free(w);
    rs_stop(&s);
}

/* ---- calls in the wrong order ----------------------------------------------- */

TEST(release_and_queries_without_acquire)
{
    START(s);
    rlc_client *c = client(s.uri, "fencing=1");
    rlc_lock *l = lock(c, "never", 0);
    int v = -1;
    int64_t n = -1;
    uint64_t token = 7;
    CHECK(c && l, "client and lock");
    ROW(rlc_lock_release(l), RLC_E_NOT_OWNER, "is not held by");
    ROW(rlc_lock_extend(l, 1000), RLC_E_NOT_OWNER, "is not held by");
    ROW(rlc_lock_extend(l, -1), RLC_E_NOT_OWNER, "is not held by");
    ROW(rlc_lock_fencing_token(l, &token), RLC_E_NOT_OWNER, "is not held through this handle");
    CHECK(token == 7, "fencing_token wrote %llu on failure", (unsigned long long)token);
    ROW(rlc_lock_validity_ms(l, &n), RLC_OK, NULL);
    CHECK(n == 0, "validity %lld without a hold", (long long)n);
    ROW(rlc_lock_hold_count(l, &n), RLC_OK, NULL);
    CHECK(n == 0, "hold count %lld without a hold", (long long)n);
    ROW(rlc_lock_ttl_ms(l, &n), RLC_OK, NULL);
    CHECK(n == -2, "ttl %lld for no lock", (long long)n);
    ROW(rlc_lock_is_held(l, &v), RLC_OK, NULL);
    CHECK(v == 0, "is_held %d", v);
    ROW(rlc_lock_force_release(l), RLC_OK, NULL);
    CHECK(rs_int(&s, "EXISTS never") == 0, "nothing was created");

    /* One acquire, two releases: the second is refused and touches nothing. */
    ROW(rlc_lock_acquire(l, 0, -1), RLC_OK, NULL);
    ROW(rlc_lock_release(l), RLC_OK, NULL);
    ROW(rlc_lock_release(l), RLC_E_NOT_OWNER, "is not held by");
    /* Another owner's hold is not ours to release. */
    rlc_lock *other = lock(c, "never", 42);
    ROW(rlc_lock_acquire(other, 0, -1), RLC_OK, NULL);
    ROW(rlc_lock_release(l), RLC_E_NOT_OWNER, "is not held by");
    CHECK(rs_int(&s, "EXISTS never") == 1, "the other owner's lock is intact");
    ROW(rlc_lock_release(other), RLC_OK, NULL);
    rlc_lock_free(other);
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

TEST(freeing_in_either_order_and_freeing_null)
{
    START(s);
    rlc_client_free(NULL);
    rlc_lock_free(NULL);
    /* Lock first, then client; and client first, then lock, while held. */
    for (int order = 0; order < 2; order++) {
        rlc_client *c = client(s.uri, NULL);
        rlc_lock *l = lock(c, "f", 0);
        CHECK(c && l, "client and lock");
        ROW(rlc_lock_acquire(l, 0, 3000), RLC_OK, NULL);
        if (order == 0) {
            rlc_lock_free(l);
            rlc_client_free(c);
        } else {
            rlc_client_free(c);
            rlc_lock_free(l);
        }
        CHECK(rs_int(&s, "EXISTS f") == 1, "freeing releases nothing on the server");
        CHECK(WAIT_UNTIL(rs_int(&s, "EXISTS f") == 0, 6000), "the lease ran out");
    }
done:
    rs_stop(&s);
}

static atomic_int lost_calls;

static void count_lost(rlc_lock *l, int reason, void *user)
{
    (void)l, (void)reason, (void)user;
    atomic_fetch_add(&lost_calls, 1);
}

TEST(every_call_after_client_free_is_closed)
{
    START(s);
    rlc_client *c = client(s.uri, NULL), *h = client(s.uri, NULL);
    rlc_lock *l = lock(c, "closed", 0), *busy = lock(c, "busy", 0), *lh = lock(h, "busy", 0);
    pthread_t t;
    bool started = false;
    struct waiter_arg a = {.l = busy, .wait_ms = -1};
    CHECK(c && h && l && busy && lh, "clients and locks");
    ROW(rlc_lock_acquire(l, 0, -1), RLC_OK, NULL);
    ROW(rlc_lock_on_lost(l, count_lost, NULL), RLC_OK, NULL);
    /* A waiter that would wait forever: closing must wake it. */
    ROW(rlc_lock_acquire(lh, 0, -1), RLC_OK, NULL);
    CHECK(pthread_create(&t, NULL, waiter, &a) == 0, "thread");
    started = true;
    CHECK(!WAIT_UNTIL(atomic_load(&a.done), 200), "the waiter is waiting");

    rlc_client_free(c);
    CHECK(WAIT_UNTIL(atomic_load(&a.done), 5000), "the waiter did not wake on rlc_client_free");
    ROW(atomic_load(&a.rc), RLC_E_CLOSED, NULL);

    int v;
    int64_t n;
    uint64_t u;
    ROW(rlc_lock_acquire(l, 0, -1), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_release(l), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_extend(l, 1000), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_force_release(l), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_on_lost(l, NULL, NULL), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_is_locked(l, &v), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_is_held(l, &v), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_hold_count(l, &n), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_ttl_ms(l, &n), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_validity_ms(l, &n), RLC_E_CLOSED, "client closed");
    ROW(rlc_lock_fencing_token(l, &u), RLC_E_CLOSED, "client closed");
    CHECK(rs_int(&s, "EXISTS closed") == 1, "closing released nothing on the server");
    CHECK(atomic_load(&lost_calls) == 0, "on_lost ran %d times for a closed client",
          atomic_load(&lost_calls));
done:
    if (started)
        pthread_join(t, NULL);
    rlc_lock_free(l);
    rlc_lock_free(busy);
    rlc_lock_free(lh);
    rlc_client_free(h);
    rs_stop(&s);
}

/* ---- passwords ---------------------------------------------------------------- */

#define PASSWORD "Pa55w0rd-not-for-logs"

TEST(server_errors_never_show_the_password)
{
    START(s, "--requirepass", PASSWORD, );
    char uri[160];
    rlc_client *c = NULL;
    rlc_lock *l = NULL;

    snprintf(uri, sizeof uri, "redis://:%s-wrong@127.0.0.1:%d", PASSWORD, s.port);
    c = client(uri, NULL);
    l = lock(c, "p", 0);
    ROW(rlc_lock_acquire(l, 0, -1), RLC_E_AUTH, "AUTH refused by 127.0.0.1");
    CHECK(!strstr(rlc_errmsg(), PASSWORD), "the message shows the password: %s", rlc_errmsg());
    rlc_lock_free(l);
    rlc_client_free(c);

    snprintf(uri, sizeof uri, "redis://someone:%s@127.0.0.1:%d", PASSWORD, s.port);
    c = client(uri, NULL);
    l = lock(c, "p", 0);
    ROW(rlc_lock_acquire(l, 0, -1), RLC_E_AUTH, NULL);
    CHECK(!strstr(rlc_errmsg(), PASSWORD), "the message shows the password: %s", rlc_errmsg());
    rlc_lock_free(l);
    rlc_client_free(c);

    /* Over several nodes the message lists each node's failure. */
    snprintf(uri, sizeof uri, "redis://:%s@127.0.0.1:%d,unix://:%s@/nonexistent/a.sock,"
             "unix://u:%s@/nonexistent/b.sock", PASSWORD "x", s.port, PASSWORD "y",
             PASSWORD "z");
    c = client(uri, "node_timeout_ms=200");
    l = lock(c, "p", 0);
    int rc = rlc_lock_acquire(l, 0, -1);
    CHECK(rc == RLC_E_NO_QUORUM || rc == RLC_E_AUTH || rc == RLC_E_SERVER, "rc %d", rc);
    CHECK(!strstr(rlc_errmsg(), PASSWORD), "the message shows the password: %s", rlc_errmsg());
    rlc_lock_free(l);
    rlc_client_free(c);
    c = NULL;
    l = NULL;
done:
    rlc_lock_free(l);
    rlc_client_free(c);
    rs_stop(&s);
}

/* The redlockc command built beside this test: <build>/c/tools/redlockc. */
static int cli_path(char *buf, size_t size)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    snprintf(buf, size, "%s/../c/tools/redlockc", self);
    return access(buf, X_OK);
}

/* Runs argv with env, stdout and stderr into out; waits at most 20 s.
 * Returns the exit status, or -1. */
static int run_capture(char *const *argv, char *const *env, char *out, size_t size)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        execve(argv[0], argv, env);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    int64_t end = check_now_ms() + 20000;
    for (;;) {
        struct pollfd p = {fds[0], POLLIN, 0};
        int left = (int)(end - check_now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        ssize_t n = read(fds[0], out + got, size - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == size - 1)
            break;
    }
    out[got] = '\0';
    close(fds[0]);
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == 0) {
        int64_t until = check_now_ms() + 2000;
        while (waitpid(pid, &status, WNOHANG) == 0 && check_now_ms() < until)
            check_sleep_ms(5);
        if (kill(pid, 0) == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

struct cli_row {
    const char *what;
    bool live;           /* against the running server, else a dead port */
    const char *nodes;   /* printf format: %d is the port; NULL: use REDLOCKC_NODES */
    const char *env_nodes;
    const char *args[8]; /* after the options, NULL-terminated */
    int exit;
};

TEST(cli_never_prints_a_password)
{
    START(s, "--requirepass", PASSWORD, );
    char exe[4096];
    CHECK(cli_path(exe, sizeof exe) == 0, "redlockc not found at %s (built with RLC_CLI=ON?)",
          exe);
    int dead = rs_free_port();
    const struct cli_row rows[] = {
        {"dead port", false, "redis://:" PASSWORD "@127.0.0.1:%d", NULL,
         {"-w", "0", "n", "--", "true"}, 69},
        /* An unreachable node is retried until the wait ends (with -v: said so). */
        {"dead port, verbose", false, "redis://u:" PASSWORD "@127.0.0.1:%d", NULL,
         {"-v", "-w", "1s", "n", "--", "true"}, 69},
        {"bad port", false, "redis://:" PASSWORD "@127.0.0.1:0", NULL, {"n", "--", "true"}, 64},
        {"rediss, dead port", false, "rediss://:" PASSWORD "@127.0.0.1:%d", NULL,
         {"-w", "0", "n", "--", "true"}, 69},
        {"rediss, unreadable CA", false, "rediss://:" PASSWORD "@127.0.0.1:%d", NULL,
         {"--options", "tls_ca_file=/nonexistent/ca.pem", "n", "--", "true"}, 64},
        {"tls options, no rediss", false, "redis://:" PASSWORD "@127.0.0.1:%d", NULL,
         {"--options", "tls_verify=0", "n", "--", "true"}, 64},
        {"bad scheme", false, "http://:" PASSWORD "@127.0.0.1:%d", NULL, {"n", "--", "true"},
         64},
        {"comma in the password", false, "redis://:Pa55,w0rd-not-for-logs@127.0.0.1:%d", NULL,
         {"n", "--", "true"}, 64},
        {"bad option", false, "redis://:" PASSWORD "@127.0.0.1:%d", NULL,
         {"--options", "nope=1", "n", "--", "true"}, 64},
        {"status, dead port", false, "redis://:" PASSWORD "@127.0.0.1:%d", NULL, {"status", "n"},
         69},
        {"release, dead port", false, "redis://:" PASSWORD "@127.0.0.1:%d", NULL,
         {"release", "--force", "n"}, 69},
        {"from the environment", false, NULL, "redis://:" PASSWORD "@127.0.0.1:%d",
         {"-w", "500ms", "n", "--", "true"}, 69},
        {"wrong password", true, "redis://:" PASSWORD "-bad@127.0.0.1:%d", NULL,
         {"-v", "n", "--", "true"}, 69},
        /* With the right password the command runs; its environment (printed
         * by env) must not carry --nodes either. */
        {"success, verbose", true, "redis://:" PASSWORD "@127.0.0.1:%d", NULL,
         {"-v", "n", "--", "/usr/bin/env"}, 0},
        {"status, live", true, "redis://:" PASSWORD "@127.0.0.1:%d", NULL, {"-v", "status", "n"},
         1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct cli_row *r = &rows[i];
        int port = r->live ? s.port : dead;
        char nodes[256], env_nodes[300], out[65536];
        char *argv[16];
        int k = 0;
        argv[k++] = exe;
        if (r->nodes) {
            snprintf(nodes, sizeof nodes, r->nodes, port);
            argv[k++] = "--nodes";
            argv[k++] = nodes;
        }
        for (int j = 0; r->args[j]; j++)
            argv[k++] = (char *)r->args[j];
        argv[k] = NULL;
        /* A bare environment, plus the sanitizers' settings of this run. */
        char *env[8] = {"PATH=/usr/bin:/bin"};
        int e = 1;
        static const char *const keep[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"};
        char keep_buf[3][512];
        for (int j = 0; j < 3; j++)
            if (getenv(keep[j])) {
                snprintf(keep_buf[j], sizeof keep_buf[j], "%s=%s", keep[j], getenv(keep[j]));
                env[e++] = keep_buf[j];
            }
        if (r->env_nodes) {
            snprintf(env_nodes, sizeof env_nodes, "REDLOCKC_NODES=");
            snprintf(env_nodes + 15, sizeof env_nodes - 15, r->env_nodes, port);
            env[e++] = env_nodes;
        }
        env[e] = NULL;
        int status = run_capture(argv, env, out, sizeof out);
        bool leaked = strstr(out, "Pa55") || strstr(out, "w0rd-not-for-logs");
        if (status != r->exit || leaked || (!out[0] && r->exit != 1)) {
            fprintf(stderr, "row '%s': exit %d (expected %d)%s; output:\n%s\n", r->what, status,
                    r->exit, leaked ? ", PASSWORD SHOWN" : "", out);
            check_failed = 1;
        }
    }
done:
    rs_stop(&s);
}

/* ---- randomness of the lock values --------------------------------------------- */

TEST(client_uuids_are_distinct_random_v4)
{
    enum { N = 32 };
    char seen[N][37];
    for (int i = 0; i < N; i++) {
        rlc_client *c = client("redis://127.0.0.1:1", NULL);
        CHECK(c != NULL, "client %d", i);
        const char *u = rlc_client_uuid(c);
        snprintf(seen[i], sizeof seen[i], "%s", u);
        rlc_client_free(c);
        CHECK(strlen(seen[i]) == 36 && seen[i][8] == '-' && seen[i][13] == '-' &&
                  seen[i][18] == '-' && seen[i][23] == '-',
              "uuid '%s' is not 8-4-4-4-12", seen[i]);
        CHECK(seen[i][14] == '4', "uuid '%s' is not version 4", seen[i]);
        CHECK(strchr("89ab", seen[i][19]) != NULL, "uuid '%s' is not the RFC 4122 variant",
              seen[i]);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(seen[i], seen[j]) != 0, "uuid %s came twice", seen[i]);
    }
done:;
}

RUN_TESTS(CASE(null_handles_and_out_pointers_are_inval),
          CASE(strerror_and_errmsg_are_never_null),
          CASE(lock_names_at_and_past_their_limits),
          CASE(odd_lock_names_are_exact_keys_of_their_own),
          CASE(owner_ids_at_their_limits),
          CASE(lease_extremes_are_watchdog_or_inval),
          CASE(huge_and_negative_waits_mean_wait_and_still_wake),
          CASE(release_and_queries_without_acquire),
          CASE(freeing_in_either_order_and_freeing_null),
          CASE(every_call_after_client_free_is_closed),
          CASE(server_errors_never_show_the_password),
          CASE(cli_never_prints_a_password),
          CASE(client_uuids_are_distinct_random_v4))
