/*
 * rlcnode_family.c - the lock family (REDLOCKC_1.1) for the Node helper,
 * #included at the end of rlcnode.c (one translation unit, one .so).
 *
 * Every blocking family call is a job of the same cached thread pool, with
 * op >= OP_FAMILY. Its target is a struct rlcn_fcall made on the JS thread
 * for this one job (the handle, up to three integers, a string) and freed by
 * the job, so two calls in flight on one handle never share arguments. A
 * permit id comes back in the record's msg (32 hex digits) with RLC_OK.
 * Handles are made and freed on the JS thread: no network I/O there.
 */

enum fop {
    OP_FAMILY = 100,
    FOP_RW_READ_ACQUIRE = OP_FAMILY, FOP_RW_READ_RELEASE, FOP_RW_WRITE_ACQUIRE,
    FOP_RW_WRITE_RELEASE, FOP_RW_MODE,
    FOP_FAIR_ACQUIRE, FOP_FAIR_RELEASE,
    FOP_SEM_SET, FOP_SEM_AVAILABLE, FOP_SEM_ACQUIRE, FOP_SEM_RELEASE,
    FOP_PSEM_SET, FOP_PSEM_AVAILABLE, FOP_PSEM_ACQUIRE, FOP_PSEM_RELEASE,
    FOP_MULTI_ACQUIRE, FOP_MULTI_RELEASE
};

struct rlcn_fcall {
    void *h;
    int64_t a, b, c;
    char s[];
};

/* One job's arguments; NULL when out of memory. s may be NULL. */
API struct rlcn_fcall *rlcn_fcall_new(void *h, int64_t a, int64_t b, int64_t c, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    struct rlcn_fcall *f = malloc(sizeof *f + n + 1);
    if (!f)
        return NULL;
    f->h = h;
    f->a = a;
    f->b = b;
    f->c = c;
    memcpy(f->s, s ? s : "", n + 1);
    return f;
}

/* Runs a family job on a pool thread and frees its target. */
static void family_run(int op, struct rlcn_fcall *f, struct rlcn_record *r)
{
    int v = 0;
    char id[RLC_PERMIT_ID_LEN + 1] = "";
    switch (op) {
    case FOP_RW_READ_ACQUIRE: r->rc = rlc_rwlock_read_acquire(f->h, f->a, f->b); break;
    case FOP_RW_READ_RELEASE: r->rc = rlc_rwlock_read_release(f->h); break;
    case FOP_RW_WRITE_ACQUIRE: r->rc = rlc_rwlock_write_acquire(f->h, f->a, f->b); break;
    case FOP_RW_WRITE_RELEASE: r->rc = rlc_rwlock_write_release(f->h); break;
    case FOP_RW_MODE: r->rc = rlc_rwlock_mode(f->h, &v); r->value = v; break;
    case FOP_FAIR_ACQUIRE: r->rc = rlc_fairlock_acquire(f->h, f->a, f->b); break;
    case FOP_FAIR_RELEASE: r->rc = rlc_fairlock_release(f->h); break;
    case FOP_SEM_SET: r->rc = rlc_semaphore_try_set_permits(f->h, f->a, &v); r->value = v; break;
    case FOP_SEM_AVAILABLE: r->rc = rlc_semaphore_available(f->h, &r->value); break;
    case FOP_SEM_ACQUIRE: r->rc = rlc_semaphore_acquire(f->h, f->a, f->b); break;
    case FOP_SEM_RELEASE: r->rc = rlc_semaphore_release(f->h, f->a); break;
    case FOP_PSEM_SET: r->rc = rlc_psemaphore_try_set_permits(f->h, f->a, &v); r->value = v; break;
    case FOP_PSEM_AVAILABLE: r->rc = rlc_psemaphore_available(f->h, &r->value); break;
    case FOP_PSEM_ACQUIRE: r->rc = rlc_psemaphore_acquire(f->h, f->a, f->b, f->c, id); break;
    case FOP_PSEM_RELEASE: r->rc = rlc_psemaphore_release(f->h, f->s); break;
    case FOP_MULTI_ACQUIRE: r->rc = rlc_multilock_acquire(f->h, f->a, f->b); break;
    case FOP_MULTI_RELEASE: r->rc = rlc_multilock_release(f->h); break;
    default:
        r->rc = RLC_E_INVAL;
        snprintf(r->msg, sizeof r->msg, "unknown family op %d", op);
        free(f);
        return;
    }
    set_msg(r, r->rc); /* same thread, right after the call */
    if (op == FOP_PSEM_ACQUIRE && r->rc == RLC_OK)
        snprintf(r->msg, sizeof r->msg, "%s", id);
    free(f);
}

/* ---- handles (JS thread) --------------------------------------------------- */

API void *rlcn_rwlock_new(rlc_client *c, const char *name, uint64_t owner, struct rlcn_record *res)
{
    rlc_rwlock *l = NULL;
    res->rc = rlc_rwlock_new(c, name, owner, &l);
    set_msg(res, res->rc);
    return l;
}

API void *rlcn_fairlock_new(rlc_client *c, const char *name, uint64_t owner, int64_t thread_wait_ms,
                            struct rlcn_record *res)
{
    rlc_fairlock *l = NULL;
    res->rc = rlc_fairlock_new(c, name, owner, thread_wait_ms, &l);
    set_msg(res, res->rc);
    return l;
}

API void *rlcn_semaphore_new(rlc_client *c, const char *name, struct rlcn_record *res)
{
    rlc_semaphore *s = NULL;
    res->rc = rlc_semaphore_new(c, name, &s);
    set_msg(res, res->rc);
    return s;
}

API void *rlcn_psemaphore_new(rlc_client *c, const char *name, struct rlcn_record *res)
{
    rlc_psemaphore *s = NULL;
    res->rc = rlc_psemaphore_new(c, name, &s);
    set_msg(res, res->rc);
    return s;
}

/* names: n names, each ended by a NUL, one after another. */
API void *rlcn_multilock_new(rlc_client *c, const char *names, int n, uint64_t owner,
                             struct rlcn_record *res)
{
    rlc_multilock *m = NULL;
    const char **v = n > 0 ? calloc((size_t)n, sizeof *v) : NULL;
    if (n > 0 && !v) {
        res->rc = RLC_E_NOMEM;
        snprintf(res->msg, sizeof res->msg, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        v[i] = names;
        names += strlen(names) + 1;
    }
    res->rc = rlc_multilock_new(c, v, n, owner, &m);
    set_msg(res, res->rc);
    free(v);
    return m;
}

/* kind: 0 rwlock, 1 fair, 2 semaphore, 3 psemaphore, 4 multilock. */
API void rlcn_family_free(int kind, void *h)
{
    switch (kind) {
    case 0: rlc_rwlock_free(h); break;
    case 1: rlc_fairlock_free(h); break;
    case 2: rlc_semaphore_free(h); break;
    case 3: rlc_psemaphore_free(h); break;
    case 4: rlc_multilock_free(h); break;
    default: break;
    }
}

/* Ends the acquires waiting on h on pool threads (RLC_E_CANCELED, nothing
 * kept): an AbortSignal's abort. No I/O; JS thread. An acquire that starts
 * after the call is not affected, so lib/family.js calls it again until the
 * job has settled. kind as for rlcn_family_free. */
API int rlcn_family_cancel(int kind, void *h)
{
    switch (kind) {
    case 0: return rlc_rwlock_cancel(h);
    case 1: return rlc_fairlock_cancel(h);
    case 2: return rlc_semaphore_cancel(h);
    case 3: return rlc_psemaphore_cancel(h);
    case 4: return rlc_multilock_cancel(h);
    default: return RLC_E_INVAL;
    }
}

/* No network I/O: levels held through the handle, and their validity. */
API int rlcn_family_local(int what, void *h, int write, struct rlcn_record *res)
{
    int v = 0;
    switch (what) {
    case 0: res->rc = rlc_rwlock_hold_count(h, write, &res->value); break;
    case 1: res->rc = rlc_rwlock_validity_ms(h, write, &res->value); break;
    case 2: res->rc = rlc_fairlock_hold_count(h, &res->value); break;
    case 3: res->rc = rlc_fairlock_validity_ms(h, &res->value); break;
    case 4: res->rc = rlc_multilock_size(h, &v); res->value = v; break;
    default: res->rc = RLC_E_INVAL; break;
    }
    set_msg(res, res->rc);
    return res->rc;
}
