/*
 * hold.c - bookkeeping of holds; the caller holds client->mu.
 */
#include <stdlib.h>

#include "hold.h"

struct hold *hold_find(rlc_lock *l, uint64_t owner)
{
    for (struct hold *h = l->holds; h; h = h->next)
        if (h->owner == owner)
            return h;
    return NULL;
}

struct hold *hold_create(rlc_lock *l, uint64_t owner)
{
    struct hold *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->lock = l;
    h->owner = owner;
    h->id = ++l->client->next_hold_id;
    h->next = l->holds;
    l->holds = h;
    return h;
}

void hold_set_watchdog(rlc_client *c, struct hold *h, bool on)
{
    if (h->watchdog == on)
        return;
    h->watchdog = on;
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
    h->dead = true;
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
