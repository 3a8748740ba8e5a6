/*
 * hold.c - bookkeeping of holds; the caller holds client->mu.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "hold.h"

struct hold *hold_find(rlc_lock *l, uint64_t owner)
{
    for (struct hold *h = l->holds; h; h = h->next)
        if (h->owner == owner)
            return h;
    return NULL;
}

bool hold_push_attempt(struct hold *h, uint64_t attempt)
{
    if (h->n_attempts == h->attempts_cap) {
        int64_t cap = h->attempts_cap ? h->attempts_cap * 2 : 4;
        uint64_t *a = realloc(h->attempts, sizeof *a * (size_t)cap);
        if (!a)
            return false;
        h->attempts = a;
        h->attempts_cap = cap;
    }
    h->attempts[h->n_attempts++] = attempt;
    return true;
}

uint64_t hold_pop_attempt(struct hold *h)
{
    return h->n_attempts > 0 ? h->attempts[--h->n_attempts] : 0;
}

static size_t bucket(const rlc_lock *l, uint64_t owner)
{
    uint64_t x = 1469598103934665603ULL ^ owner; /* FNV-1a over the key */
    for (size_t i = 0; i < l->key_len; i++)
        x = (x ^ (unsigned char)l->key[i]) * 1099511628211ULL;
    return (size_t)(x % RLC_HOLD_BUCKETS);
}

static bool same_lock(const rlc_lock *a, const rlc_lock *b)
{
    return a == b || (a->key_len == b->key_len && memcmp(a->key, b->key, a->key_len) == 0);
}

struct levels hold_levels(const rlc_client *c, const rlc_lock *l, uint64_t owner)
{
    struct levels v = {0, 0};
    for (const struct hold *h = c->hold_index[bucket(l, owner)]; h; h = h->index_next)
        if (h->owner == owner && !h->lost && same_lock(h->lock, l)) {
            v.count += h->count;
            v.pending += h->pending;
        }
    return v;
}

struct hold *hold_find_levels(rlc_client *c, rlc_lock *l, uint64_t owner)
{
    struct hold *own = hold_find(l, owner);
    if (own && (own->lost || own->count > 0))
        return own;
    for (struct hold *h = c->hold_index[bucket(l, owner)]; h; h = h->index_next)
        if (h->owner == owner && !h->lost && h->n_attempts > 0 && same_lock(h->lock, l))
            return h;
    return own;
}

struct hold *hold_by_id(rlc_client *c, const rlc_lock *l, uint64_t owner, uint64_t id)
{
    for (struct hold *h = c->hold_index[bucket(l, owner)]; h; h = h->index_next)
        if (h->id == id)
            return h;
    return NULL;
}

struct hold *hold_create(rlc_lock *l, uint64_t owner)
{
    struct hold *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    rlc_client *c = l->client;
    h->lock = l;
    h->owner = owner;
    h->id = ++c->next_hold_id;
    h->next = l->holds;
    l->holds = h;
    size_t b = bucket(l, owner);
    h->index_next = c->hold_index[b];
    c->hold_index[b] = h;
    return h;
}

void hold_set_watchdog(rlc_client *c, struct hold *h, bool on)
{
    if (h->watchdog == on)
        return;
    h->watchdog = on;
    if (on && c->opts.loss_push) {
        /* tracking.c registers the key once the grace is over (hold.h). One
         * planned wake serves every hold taken before it comes (then the
         * thread plans one for those still held), so a stream of brief
         * holds wakes the thread once per grace, not once per hold. */
        int64_t now = rlc_now_ns();
        h->track_after_ns = rlc_deadline_after_ms(now, HOLD_TRACK_GRACE_MS);
        if (c->track_wake_ns <= now) {
            c->track_wake_ns = h->track_after_ns;
            if (c->track_wake_ns < c->watchdog_wake_ns) {
                c->watchdog_wake_ns = c->track_wake_ns;
                client_wake_thread(c);
            }
        }
    }
    if (on) {
        h->wd_prev = NULL;
        h->wd_next = c->renewing;
        if (c->renewing)
            c->renewing->wd_prev = h;
        c->renewing = h;
    } else {
        if (h->wd_prev)
            h->wd_prev->wd_next = h->wd_next;
        else
            c->renewing = h->wd_next;
        if (h->wd_next)
            h->wd_next->wd_prev = h->wd_prev;
        h->wd_prev = h->wd_next = NULL;
    }
}

void hold_drop(rlc_client *c, struct hold *h)
{
    hold_set_watchdog(c, h, false);
    for (struct hold **p = &h->lock->holds; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            break;
        }
    for (struct hold **p = &c->hold_index[bucket(h->lock, h->owner)]; *p; p = &(*p)->index_next)
        if (*p == h) {
            *p = h->index_next;
            break;
        }
    h->dead = true;
    free(h->attempts);
    h->attempts = NULL;
    h->n_attempts = h->attempts_cap = 0;
    if (c->round_busy) {
        h->grave_next = c->graveyard;
        c->graveyard = h;
    } else {
        free(h);
    }
}

void hold_drop_all(rlc_client *c, rlc_lock *l)
{
    while (l->holds)
        hold_drop(c, l->holds);
}

void hold_free_graveyard(rlc_client *c)
{
    while (c->graveyard) {
        struct hold *h = c->graveyard;
        c->graveyard = h->grave_next;
        free(h);
    }
}

void hold_note_late(struct hold *h, int64_t lease)
{
    if (h->late_lease_ms == 0 || lease < h->late_lease_ms)
        h->late_lease_ms = lease;
}

int64_t hold_claim_lease(const struct hold *h, int64_t lease)
{
    return h->late_lease_ms > 0 && h->late_lease_ms < lease ? h->late_lease_ms : lease;
}
