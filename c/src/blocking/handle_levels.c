/*
 * handle_levels.c - the levels each owner took through a handle
 * (handle_levels.h).
 */
#include <stdlib.h>
#include <string.h>

#include "engine_driver.h"
#include "handle_levels.h"

struct handle_hold *hh_find(const rlc_lock *l, uint64_t owner)
{
    for (struct handle_hold *h = l->holds; h; h = h->next)
        if (h->owner == owner)
            return h;
    return NULL;
}

struct handle_hold *hh_get(rlc_lock *l, uint64_t owner)
{
    struct handle_hold *h = hh_find(l, owner);
    if (h || !(h = calloc(1, sizeof *h)))
        return h;
    h->owner = owner;
    h->lock = l;
    h->next = l->holds;
    l->holds = h;
    return h;
}

struct handle_hold *hh_for_release(rlc_client *c, rlc_lock *l, uint64_t owner)
{
    struct handle_hold *h = hh_find(l, owner);
    if (h && h->count > 0)
        return h;
    for (rlc_lock *o = c->handles; o; o = o->hnext) {
        if (o == l || o->kind != l->kind || o->key_len != l->key_len ||
            memcmp(o->key, l->key, l->key_len) != 0)
            continue;
        struct handle_hold *k = hh_find(o, owner);
        if (k && k->count > 0)
            return k;
    }
    return h;
}

void hh_grant(struct handle_hold *h, uint64_t token)
{
    if (h->lost) {
        h->count = 0;
        h->lost = 0;
    }
    if (h->count == 0)
        h->token = token;
    h->count++;
}

void hh_drop_if_idle(struct handle_hold *h)
{
    if (h->count > 0)
        return;
    for (struct handle_hold **p = &h->lock->holds; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            free(h);
            return;
        }
}

void hh_free_all(rlc_lock *l)
{
    while (l->holds) {
        struct handle_hold *h = l->holds;
        l->holds = h->next;
        free(h);
    }
}

struct handle_hold *hh_detach_all(rlc_client *c, rlc_lock *l)
{
    struct handle_hold *list = l->holds;
    l->holds = NULL;
    for (struct handle_hold *h = list; h; h = h->next) {
        h->forget = h->count > 0;
        for (rlc_lock *o = c->handles; o && h->forget; o = o->hnext) {
            if (o == l || o->kind != l->kind || o->key_len != l->key_len ||
                memcmp(o->key, l->key, l->key_len) != 0)
                continue;
            struct handle_hold *k = hh_find(o, h->owner);
            if (k && k->count > 0)
                h->forget = false; /* the other handle's levels go on */
        }
    }
    return list;
}

void hh_forget_detached(rlc_client *c, rlc_lock *l, struct handle_hold *list)
{
    while (list) {
        struct handle_hold *h = list;
        list = h->next;
        if (h->forget && c && c->drv)
            edrv_forget_kind(c->drv, l->kind, l->name, l->name_len, h->owner);
        free(h);
    }
}
