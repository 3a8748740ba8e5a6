/*
 * engine_lock.c - what the engine knows: lock names and their holds.
 *
 * A lock (one name) exists while it has holds; a hold (one owner of one
 * lock) exists while it has levels, an operation queued or running, or a
 * renewal in flight. Both are found by hashing: names by name, and again by
 * channel, which is how an unlock message finds its waiters.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "slot.h"
#include "keys.h"
#include "quorum.h"

/* xorshift64*: seeded from the client's UUID, so a simulation replays */
uint64_t eng_random(rlc_engine *e)
{
    e->rng ^= e->rng >> 12;
    e->rng ^= e->rng << 25;
    e->rng ^= e->rng >> 27;
    return e->rng * 0x2545F4914F6CDD1DULL;
}


static uint64_t hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void lock_free(struct eng_lock *l)
{
    free(l->queue);
    free(l->aux);
    free(l->pub);
    free(l->name);
    free(l->key);
    free(l->channel);
    free(l->token_key);
    free(l->attempts_key);
    free(l);
}

/* A name's locks of every kind share its bucket. */
struct eng_lock *lock_next_named(const rlc_engine *e, const struct eng_lock *after,
                                 const char *name, size_t len, int kind)
{
    for (struct eng_lock *l = after ? after->next : e->buckets[hash(name, len) % ENG_BUCKETS]; l;
         l = l->next)
        if (l->kind == kind && l->name_len == len && memcmp(l->name, name, len) == 0)
            return l;
    return NULL;
}

struct eng_lock *lock_find(const rlc_engine *e, const char *name, size_t len, int kind,
                           uint64_t owner)
{
    uint64_t who = kind == RLC_KIND_FAIR ? owner : 0;
    for (struct eng_lock *l = lock_next_named(e, NULL, name, len, kind); l;
         l = lock_next_named(e, l, name, len, kind))
        if (l->who == who)
            return l;
    return NULL;
}

/* A fair waiter's own channel: "<prefix>:<uuid>:<owner>" (Redisson's). */
static char *fair_channel(const rlc_engine *e, const struct eng_lock *l, size_t *len)
{
    char tail[96];
    int n = snprintf(tail, sizeof tail, ":%s:%llu", e->uuid, (unsigned long long)l->who);
    char *ch = malloc(l->pub_len + (size_t)n + 1);
    if (ch) {
        memcpy(ch, l->pub, l->pub_len);
        memcpy(ch + l->pub_len, tail, (size_t)n + 1);
        *len = l->pub_len + (size_t)n;
    }
    return ch;
}

/* Its names of its kind (keys.h): the lock's, a read or write lock's
 * (Redisson's RReadWriteLock: its channel and, for a reader, its timeout
 * keys' prefix; our waiting writers' zset), a fair lock's (Redisson's
 * RFairLock: its queue, its timeouts, the waiter's own channel) or a
 * semaphore's (permit_calls.h). Every one hashes to the key's slot. */
static bool lock_names_make(const rlc_engine *e, struct eng_lock *l)
{
    l->token_key = key_derived("redisson_lock_token:", l->key, l->key_len, "", &l->token_key_len);
    l->attempts_key =
        key_own("redlockc_attempts:", l->key, l->key_len, "", &l->attempts_key_len);
    if (l->kind == RLC_KIND_FAIR) {
        l->pub = key_derived("redisson_lock__channel:", l->key, l->key_len, "", &l->pub_len);
        l->queue = key_derived("redisson_lock_queue:", l->key, l->key_len, "", &l->queue_len);
        l->aux = key_derived("redisson_lock_timeout:", l->key, l->key_len, "", &l->aux_len);
        l->channel = l->pub ? fair_channel(e, l, &l->channel_len) : NULL;
        return l->token_key && l->attempts_key && l->pub && l->queue && l->aux && l->channel;
    }
    if (kind_permits(l->kind)) {
        /* Redisson's RSemaphore: the count at the key, its channel (and the
         * expirable kind's zset); ours: the prefix of a try's record */
        free(l->attempts_key);
        l->attempts_key =
            key_own("redlockc_attempt:", l->key, l->key_len, ":", &l->attempts_key_len);
        l->channel = key_derived("redisson_sc:", l->key, l->key_len, "", &l->channel_len);
        if (l->kind == RLC_KIND_PSEMAPHORE)
            l->aux = key_derived("", l->key, l->key_len, ":timeout", &l->aux_len);
        return l->token_key && l->attempts_key && l->channel &&
               (l->kind != RLC_KIND_PSEMAPHORE || l->aux);
    }
    if (l->kind == RLC_KIND_READ || l->kind == RLC_KIND_WRITE) {
        l->channel = key_derived("redisson_rwlock:", l->key, l->key_len, "", &l->channel_len);
        l->queue = key_own("redlockc_rwlock_writers:", l->key, l->key_len, "", &l->queue_len);
        if (l->kind == RLC_KIND_READ)
            l->aux = key_derived("", l->key, l->key_len, "", &l->aux_len);
        return l->token_key && l->attempts_key && l->channel && l->queue &&
               (l->kind != RLC_KIND_READ || l->aux);
    }
    l->channel = key_derived("redisson_lock__channel:", l->key, l->key_len, "", &l->channel_len);
    l->classic = e->opts.format == RLC_FORMAT_CLASSIC;
    return l->token_key && l->attempts_key && l->channel;
}

struct eng_lock *lock_by_channel(const rlc_engine *e, const char *ch, size_t len)
{
    for (struct eng_lock *l = e->cbuckets[hash(ch, len) % ENG_BUCKETS]; l; l = l->cnext)
        if (l->channel_len == len && memcmp(l->channel, ch, len) == 0)
            return l;
    return NULL;
}

struct eng_lock *lock_next_of_channel(const struct eng_lock *l)
{
    for (struct eng_lock *o = l->cnext; o; o = o->cnext)
        if (o->channel_len == l->channel_len && memcmp(o->channel, l->channel, l->channel_len) == 0)
            return o;
    return NULL;
}

struct eng_lock *lock_channel_peer(const rlc_engine *e, const struct eng_lock *l)
{
    for (struct eng_lock *o = lock_by_channel(e, l->channel, l->channel_len); o;
         o = lock_next_of_channel(o))
        if (o != l && o->subscribed)
            return o;
    return NULL;
}

struct eng_lock *lock_get(rlc_engine *e, const char *name, size_t len, int kind, uint64_t owner)
{
    struct eng_lock *l = lock_find(e, name, len, kind, owner);
    if (l)
        return l;
    l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->kind = kind;
    l->who = kind == RLC_KIND_FAIR ? owner : 0;
    l->timer.at = -1;
    l->timer_want = -1;
    size_t plen = strlen(e->opts.key_prefix);
    l->name = malloc(len + 1);
    l->key = malloc(plen + len + 1);
    if (l->name && l->key) {
        memcpy(l->name, name, len);
        l->name[len] = '\0';
        l->name_len = len;
        memcpy(l->key, e->opts.key_prefix, plen);
        memcpy(l->key + plen, name, len);
        l->key_len = plen + len;
        l->key[l->key_len] = '\0';
        l->slot = slot_of(l->key, l->key_len); /* all its names hash here */
    }
    if (!l->name || !l->key || !lock_names_make(e, l)) {
        lock_free(l);
        return NULL;
    }
    struct eng_lock **b = &e->buckets[hash(name, len) % ENG_BUCKETS];
    l->next = *b;
    *b = l;
    struct eng_lock **cb = &e->cbuckets[hash(l->channel, l->channel_len) % ENG_BUCKETS];
    l->cnext = *cb;
    *cb = l;
    return l;
}

static void unlink_lock(rlc_engine *e, struct eng_lock *l)
{
    struct eng_lock **pp = &e->buckets[hash(l->name, l->name_len) % ENG_BUCKETS];
    while (*pp && *pp != l)
        pp = &(*pp)->next;
    if (*pp)
        *pp = l->next;
    pp = &e->cbuckets[hash(l->channel, l->channel_len) % ENG_BUCKETS];
    while (*pp && *pp != l)
        pp = &(*pp)->cnext;
    if (*pp)
        *pp = l->cnext;
}

void lock_forget_if_idle(rlc_engine *e, struct eng_lock *l)
{
    if (l->holds || l->waiters)
        return;
    timer_clear(e, &l->timer);
    unlink_lock(e, l);
    lock_free(l);
}

static size_t hold_slot(const rlc_engine *e, const struct eng_lock *l, uint64_t owner)
{
    uint64_t k = (uint64_t)(uintptr_t)l * 0x9E3779B97F4A7C15ULL ^ owner * 0xC2B2AE3D27D4EB4FULL;
    return (size_t)((k ^ (k >> 29)) % e->hcap);
}

/* The table doubles when it is as full as it is long: chains stay short
 * with ten thousand waiting owners. */
static bool hold_table_grow(rlc_engine *e)
{
    size_t cap = e->hcap ? e->hcap * 2 : 256;
    struct hold **b = calloc(cap, sizeof *b);
    if (!b)
        return false;
    struct hold **old = e->hbuckets;
    size_t old_cap = e->hcap;
    e->hbuckets = b;
    e->hcap = cap;
    for (size_t i = 0; i < old_cap; i++)
        for (struct hold *h = old[i], *n; h; h = n) {
            n = h->hnext;
            size_t k = hold_slot(e, h->lock, h->owner);
            h->hnext = b[k];
            b[k] = h;
        }
    free(old);
    return true;
}

struct hold *hold_get(rlc_engine *e, struct eng_lock *l, uint64_t owner, bool create)
{
    if (e->hcap)
        for (struct hold *h = e->hbuckets[hold_slot(e, l, owner)]; h; h = h->hnext)
            if (h->owner == owner && h->lock == l)
                return h;
    if (!create)
        return NULL;
    if (e->n_holds >= e->hcap && !hold_table_grow(e))
        return NULL;
    struct hold *h = calloc(1, sizeof *h);
    /* Redisson's fields: a write lock's holder is "<uuid>:<owner>:write" */
    char field[96];
    int n = snprintf(field, sizeof field, "%s:%llu%s", e->uuid, (unsigned long long)owner,
                     l->kind == RLC_KIND_WRITE ? ":write" : "");
    if (!h || !(h->field = malloc((size_t)n + 1))) {
        free(h);
        return NULL;
    }
    memcpy(h->field, field, (size_t)n + 1);
    h->field_len = (size_t)n;
    h->lock = l;
    h->owner = owner;
    h->timer.at = -1;
    h->track_at = -1;
    h->next = l->holds;
    if (l->holds)
        l->holds->prev = h;
    l->holds = h;
    size_t k = hold_slot(e, l, owner);
    h->hnext = e->hbuckets[k];
    e->hbuckets[k] = h;
    e->n_holds++;
    return h;
}

void hold_mark_ttl(struct hold *h, struct req *r, int64_t ttl)
{
    struct ttl_mark *m = calloc(1, sizeof *m);
    if (!m)
        abort(); /* an untracked TTL change could outlive the validity we report */
    m->hold = h;
    m->req = r;
    m->ttl = ttl;
    m->answered_at = -1;
    m->node = r->node;
    m->next = h->marks;
    if (h->marks)
        h->marks->prev = m;
    h->marks = m;
    m->rnext = r->ttl;
    r->ttl = m;
}

/* Takes m off its request's list of marks (its hold goes first). */
static void mark_unlink_req(struct ttl_mark *m)
{
    struct ttl_mark **pp = &m->req->ttl;
    while (*pp && *pp != m)
        pp = &(*pp)->rnext;
    if (*pp)
        *pp = m->rnext;
    m->req = NULL;
}

static void mark_free(struct ttl_mark *m)
{
    struct hold *h = m->hold;
    if (m->prev)
        m->prev->next = m->next;
    else
        h->marks = m->next;
    if (m->next)
        m->next->prev = m->prev;
    free(m);
}

/* An answered mark still counts for every round that began before the
 * answer (the request may have run after the round's own); it goes once no
 * round of its hold is that old. A hold kept only for its marks goes with
 * the last of them. */
void hold_prune_marks(rlc_engine *e, struct hold *h)
{
    int64_t oldest = INT64_MAX;
    if (h->ops_head && h->ops_head->phase != P_QUEUED)
        oldest = h->ops_head->started;
    if (h->renewing && h->renewing->started < oldest)
        oldest = h->renewing->started;
    for (struct ttl_mark *m = h->marks, *next; m; m = next) {
        next = m->next;
        if (m->answered_at >= 0 && m->answered_at < oldest)
            mark_free(m);
    }
    if (!h->marks)
        hold_maybe_free(e, h);
}

static void mark_done(rlc_engine *e, struct ttl_mark *m, const struct req *r)
{
    m->answered_at = e->now;
    m->node = r->node;
    m->instance = r->resent ? 0 : r->instance;
    m->end_at = r->end_at;
    m->req = NULL;
    hold_prune_marks(e, m->hold);
}

void req_answered(rlc_engine *e, struct req *r)
{
    struct ttl_mark *m = r->ttl;
    r->ttl = NULL;
    while (m) {
        struct ttl_mark *next = m->rnext; /* m may be freed by mark_done */
        mark_done(e, m, r);
        m = next;
    }
}

/* The request is freed unanswered: if its bytes may have reached the
 * server, its mark stays (it may still run); if not, it never will. */
void req_gone(rlc_engine *e, struct req *r, bool reached)
{
    struct ttl_mark *m = r->ttl;
    r->ttl = NULL;
    while (m) {
        struct ttl_mark *next = m->rnext;
        if (reached) {
            m->req = NULL;
        } else {
            struct hold *h = m->hold;
            mark_free(m); /* it never reached a server: it never runs */
            if (!h->marks)
                hold_maybe_free(e, h);
        }
        m = next;
    }
}

/* m was answered on the connection instance that answered the round's
 * request to its node, and written there before it: it ran first (one
 * connection runs its commands in order), whenever its answer came. */
static bool ran_before(const struct ttl_mark *m, const struct wire_pos *pos)
{
    return pos && m->instance && m->instance == pos[m->node].instance &&
           m->end_at < pos[m->node].end_at;
}

int64_t hold_valid_until(const struct hold *h, int64_t started, const struct wire_pos *pos,
                         const bool *counted, int64_t lease, double drift)
{
    int64_t cap = lease;
    bool frozen = false;
    for (const struct ttl_mark *m = h->marks; m; m = m->next) {
        if (m->answered_at >= 0 && (m->answered_at < started || ran_before(m, pos)))
            continue; /* it ran before this round's own request */
        if (counted && !counted[m->node])
            continue; /* it acts on a node whose answer the claim does not count */
        if (m->ttl < 0)
            frozen = true;
        else if (m->ttl < cap)
            cap = m->ttl;
    }
    int64_t until = started + cap - quorum_drift_ms(cap, drift);
    /* An undo still on its way may put back the shorter PTTL its acquire
     * replaced: nothing raises a hold's validity until it has answered, and
     * a new hold gets none (its grant is undone and tried again). */
    if (frozen && h->count > 0 && until > h->valid_until)
        until = h->valid_until;
    else if (frozen && h->count == 0)
        until = started;
    return until;
}

static void hold_free(struct hold *h)
{
    while (h->marks) {
        if (h->marks->req)
            mark_unlink_req(h->marks);
        mark_free(h->marks);
    }
    free(h->levels);
    free(h->field);
    free(h);
}

void hold_maybe_free(rlc_engine *e, struct hold *h)
{
    /* A hold with marks stays: a request that has not answered (a try, a
     * renewal, an undo) may still run and set the TTL of the owner's next
     * hold of this lock (on the server, a level more of the same life) (E8). */
    if (h->count > 0 || h->ops_head || h->queries || h->renewing || h->marks ||
        h->track_dirty || h->verifying)
        return;
    struct eng_lock *l = h->lock;
    timer_clear(e, &h->timer);
    if (h->prev)
        h->prev->next = h->next;
    else
        l->holds = h->next;
    if (h->next)
        h->next->prev = h->prev;
    struct hold **pp = &e->hbuckets[hold_slot(e, l, h->owner)];
    while (*pp && *pp != h)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = h->hnext;
    e->n_holds--;
    hold_free(h);
    if (!l->holds && !l->waiters) {
        timer_clear(e, &l->timer);
        unlink_lock(e, l);
        lock_free(l);
    }
}

bool hold_push_level(struct hold *h, uint64_t attempt)
{
    if (h->n_levels == h->cap_levels) {
        int64_t cap = h->cap_levels ? h->cap_levels * 2 : 4;
        uint64_t *p = realloc(h->levels, (size_t)cap * sizeof *p);
        if (!p)
            return false;
        h->levels = p;
        h->cap_levels = cap;
    }
    h->levels[h->n_levels++] = attempt;
    return true;
}

uint64_t hold_pop_level(struct hold *h)
{
    return h->n_levels > 0 ? h->levels[--h->n_levels] : 0;
}

void lock_free_all(rlc_engine *e)
{
    for (int b = 0; b < ENG_BUCKETS; b++) {
        struct eng_lock *l = e->buckets[b];
        while (l) {
            struct eng_lock *next = l->next;
            struct hold *h = l->holds;
            while (h) {
                struct hold *hn = h->next;
                hold_free(h);
                h = hn;
            }
            lock_free(l);
            l = next;
        }
        e->buckets[b] = NULL;
        e->cbuckets[b] = NULL;
    }
    free(e->hbuckets);
    e->hbuckets = NULL;
    e->hcap = e->n_holds = 0;
}
