/*
 * engine_op.c - the life of an operation, and the events that tell of it.
 *
 * An operation belongs to its hold's queue (E6); it starts when it reaches
 * the head, hears its replies and its timer through its class (acquire,
 * release, extend, renew: the op_class tables of their own files), and ends
 * with one DONE event, after which the next op of the hold starts. This file
 * knows an op's shape, never what a kind of op does: it calls the kinds only
 * through op->cls, so the kinds sit above it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "engine_int.h"

struct pending_event {
    struct pending_event *next;
    rlc_engine_event ev;
    char *name;
    char *message;
};

/* ---- events: owned copies, handed out one at a time ---------------------------- */

static void push_event(rlc_engine *e, const rlc_engine_event *ev, const char *msg)
{
    struct pending_event *p = calloc(1, sizeof *p);
    if (!p || !(p->name = malloc(ev->name_len + 1)) || !(p->message = strdup(msg ? msg : "")))
        abort(); /* an event that cannot be kept would leave its caller waiting */
    p->ev = *ev;
    memcpy(p->name, ev->name, ev->name_len);
    p->name[ev->name_len] = '\0';
    if (e->ev_tail)
        e->ev_tail->next = p;
    else
        e->ev_head = p;
    e->ev_tail = p;
}

void eng_event_done(rlc_engine *e, struct eng_op *op, int status, const char *fmt, ...)
{
    char msg[512] = "";
    if (status != RLC_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    const struct hold *h = op->hold;
    rlc_engine_event ev = {0};
    ev.type = RLC_EV_DONE;
    ev.status = status;
    ev.op = op->id;
    ev.owner = h->owner;
    ev.name = h->lock->name;
    ev.name_len = h->lock->name_len;
    ev.kind = h->lock->kind;
    bool permits = op->kind == OP_ACQUIRE && kind_permits(h->lock->kind);
    ev.count = op->kind == OP_QUERY ? op->query_out : permits ? op->permits : h->count;
    if (status == RLC_OK && op->kind == OP_ACQUIRE)
        ev.token = permits ? op->token : h->token; /* a grant of permits: its attempt */
    if (status == RLC_OK &&
        (op->kind == OP_ACQUIRE || op->kind == OP_MULTI || op->kind == OP_EXTEND))
        ev.validity_ms = op->validity_out;
    if (op->kind == OP_ACQUIRE || op->kind == OP_MULTI)
        eng_count_acquire(e, op, status);
    push_event(e, &ev, msg);
}

void eng_event_lost(rlc_engine *e, struct hold *h, int status, const char *why)
{
    rlc_engine_event ev = {0};
    ev.type = RLC_EV_LOST;
    ev.status = status;
    ev.owner = h->owner;
    ev.name = h->lock->name;
    ev.name_len = h->lock->name_len;
    ev.kind = h->lock->kind;
    ev.token = h->token;
    ev.count = h->count;
    push_event(e, &ev, why);
}

static void free_event(struct pending_event *p)
{
    if (!p)
        return;
    free(p->name);
    free(p->message);
    free(p);
}

void eng_events_free(rlc_engine *e)
{
    struct pending_event *p = e->ev_head;
    while (p) {
        struct pending_event *n = p->next;
        free_event(p);
        p = n;
    }
    e->ev_head = e->ev_tail = NULL;
    free_event(e->ev_current);
    e->ev_current = NULL;
}

int eng_event_pop(rlc_engine *e, rlc_engine_event *ev)
{
    free_event(e->ev_current);
    e->ev_current = e->ev_head;
    if (!e->ev_current)
        return 0;
    e->ev_head = e->ev_current->next;
    if (!e->ev_head)
        e->ev_tail = NULL;
    *ev = e->ev_current->ev;
    ev->name = e->ev_current->name;
    ev->message = e->ev_current->message;
    return 1;
}



size_t op_id_slot(uint64_t id)
{
    return (size_t)(id % ENG_BUCKETS);
}

void op_id_unlink(rlc_engine *e, struct eng_op *op)
{
    struct eng_op **pp = &e->ops_by_id[op_id_slot(op->id)];
    while (*pp && *pp != op)
        pp = &(*pp)->idnext;
    if (*pp)
        *pp = op->idnext;
}

/* One allocation: the op, then its per-node arrays. */
struct eng_op *op_alloc(const rlc_engine *e)
{
    size_t n = (size_t)e->n;
    size_t size = sizeof(struct eng_op) + n * (2 * sizeof(struct req *) +
                                               sizeof(struct node_reply) +
                                               sizeof(struct wire_pos) + sizeof(bool));
    struct eng_op *op = calloc(1, size);
    if (!op)
        return NULL;
    char *p = (char *)(op + 1);
    op->nn = e->n;
    op->rep = (struct node_reply *)p;
    p += n * sizeof(struct node_reply);
    op->pos = (struct wire_pos *)p;
    p += n * sizeof(struct wire_pos);
    op->reqs = (struct req **)p;
    p += n * sizeof(struct req *);
    op->syncs = (struct req **)p;
    p += n * sizeof(struct req *);
    op->granted = (bool *)p;
    op->timer.at = -1;
    return op;
}

void op_free(rlc_engine *e, struct eng_op *op)
{
    round_clear(op);
    timer_clear(e, &op->timer);
    free(op->members);
    free(op->places);
    free(op->floor_err);
    if (op->call)
        cmd_unref(op->call);
    free(op);
}

void op_start(rlc_engine *e, struct eng_op *op, int64_t now)
{
    op->cls->start(e, op, now);
}

/* Takes op off its hold's queue, or a query off the hold's list of them (a
 * query waits in no queue: engine_query.c). */
static void unlink_from_hold(struct hold *h, struct eng_op *op)
{
    bool queued = op->kind != OP_QUERY;
    struct eng_op **pp = queued ? &h->ops_head : &h->queries, *prev = NULL;
    while (*pp && *pp != op) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = op->next;
    if (queued && h->ops_tail == op)
        h->ops_tail = prev;
}

void op_finish(rlc_engine *e, struct eng_op *op, int64_t now)
{
    struct hold *h = op->hold;
    round_abandon(op);
    sub_leave(e, op);
    unlink_from_hold(h, op);
    op_id_unlink(e, op);
    e->n_ops--;
    op_free(e, op);
    struct eng_op *next = h->ops_head;
    if (next && next->phase == P_QUEUED) {
        op_start(e, next, now);
    } else {
        hold_prune_marks(e, h); /* frees h when nothing keeps it */
    }
}

/* A reply (or its absence: reply NULL, status why) reaches the round that
 * sent the request, or nobody (E1). The connections call this through
 * e->deliver, so they need not know what an operation is. */
void op_deliver(rlc_engine *e, struct req *r, const redisReply *reply, int status,
                const char *msg, int64_t now)
{
    struct eng_op *op = r->op;
    int node = r->node;
    r->op = NULL;
    if (op && op->syncs[node] == r) {
        round_sync_reply(e, op, node, reply);
        if (op->answered == e->n)
            op->cls->timer(e, op, now);
        return;
    }
    if (!op || op->reqs[node] != r)
        return; /* a reply of an earlier round */
    op->cls->reply(e, op, node, reply, status, msg, now);
}

void op_timer(rlc_engine *e, struct eng_op *op, int64_t now)
{
    op->cls->timer(e, op, now);
}

