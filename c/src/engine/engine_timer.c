/*
 * engine_timer.c - every timed thing of an engine in one min-heap.
 *
 * A timer lives in its object (an op, a lock's waiter timer, a hold, a
 * connection) and points at a slot in the heap. Changing or clearing it
 * disowns the old slot (obj = NULL) and, for a change, pushes a new one;
 * disowned slots are freed when they reach the top. So a change costs
 * O(log n), nothing searches the heap, and an object may be freed at any
 * time once its timer is cleared.
 *
 * A disowned slot can be far from the top: a watchdog hold's renewal timer
 * is 10 s away, and a hold released at once leaves its slot behind for
 * those 10 s. At 30,000 cycles a second that was 300,000 dead slots under
 * a few hundred live ones, and sifting through them the engine's largest
 * cost. So when the dead outnumber the living, the heap is rebuilt without
 * them (O(n), paid for by the n/2 clears that made them).
 */
#include <stdlib.h>

#include "engine_int.h"

struct tslot {
    int64_t at;
    int kind;
    void *obj;          /* NULL: disowned */
    struct timer *timer; /* the owner's timer, which points back here */
};

static void swap(struct tslot **a, struct tslot **b)
{
    struct tslot *t = *a;
    *a = *b;
    *b = t;
}

static void sift_down(struct tslot **h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l]->at < h[m]->at)
            m = l;
        if (r < n && h[r]->at < h[m]->at)
            m = r;
        if (m == i)
            return;
        swap(&h[i], &h[m]);
        i = m;
    }
}

static void pop_top(rlc_engine *e)
{
    e->heap[0] = e->heap[--e->heap_len];
    sift_down(e->heap, e->heap_len, 0);
}

static void compact(rlc_engine *e)
{
    size_t n = 0;
    for (size_t i = 0; i < e->heap_len; i++) {
        if (e->heap[i]->obj)
            e->heap[n++] = e->heap[i];
        else
            free(e->heap[i]);
    }
    e->heap_len = n;
    e->heap_dead = 0;
    for (size_t i = n / 2; i-- > 0;)
        sift_down(e->heap, n, i);
}

void timer_clear(rlc_engine *e, struct timer *t)
{
    if (t->slot) {
        t->slot->obj = NULL;
        if (++e->heap_dead > 64 && e->heap_dead > e->heap_len / 2)
            compact(e);
    }
    t->slot = NULL;
    t->at = -1;
}

void timer_set(rlc_engine *e, struct timer *t, int kind, void *obj, int64_t at)
{
    if (t->slot && t->at == at)
        return;
    timer_clear(e, t);
    if (at < 0)
        return;
    struct tslot *s = malloc(sizeof *s);
    if (!s || (e->heap_len == e->heap_cap && !(e->heap_cap = e->heap_cap ? e->heap_cap * 2 : 64,
                                                e->heap = realloc(e->heap, e->heap_cap *
                                                                               sizeof *e->heap))))
        abort(); /* a timer that cannot be kept would hang an operation forever */
    *s = (struct tslot){at, kind, obj, t};
    t->slot = s;
    t->at = at;
    size_t i = e->heap_len++;
    e->heap[i] = s;
    while (i > 0 && e->heap[i]->at < e->heap[(i - 1) / 2]->at) {
        swap(&e->heap[i], &e->heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
}

int64_t timer_next(const rlc_engine *e)
{
    rlc_engine *m = (rlc_engine *)e; /* dropping disowned slots changes nothing visible */
    while (m->heap_len > 0 && !m->heap[0]->obj) {
        free(m->heap[0]);
        pop_top(m);
        m->heap_dead--;
    }
    return m->heap_len ? m->heap[0]->at : -1;
}

int timer_pop(rlc_engine *e, int64_t now, int *kind, void **obj)
{
    int64_t at = timer_next(e);
    if (at < 0 || at > now)
        return 0;
    struct tslot *s = e->heap[0];
    pop_top(e);
    *kind = s->kind;
    *obj = s->obj;
    /* the owner's timer no longer points here */
    s->timer->slot = NULL;
    s->timer->at = -1;
    free(s);
    return 1;
}

void timer_free_all(rlc_engine *e)
{
    for (size_t i = 0; i < e->heap_len; i++)
        free(e->heap[i]);
    free(e->heap);
    e->heap = NULL;
    e->heap_len = e->heap_cap = e->heap_dead = 0;
}
