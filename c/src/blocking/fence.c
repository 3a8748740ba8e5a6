/*
 * fence.c - fencing tokens that hold end to end.
 *
 * A token is only worth something if every later holder gets a larger one
 * and the resource refuses a write with a smaller one. Two halves:
 *
 *   - The token is a quorum register: the engine stores a new hold's token
 *     on a quorum of the granting nodes before the acquire returns
 *     (engine_acquire.c, token_floor). docs/DESIGN.md, "Fencing tokens",
 *     has the argument.
 *
 *   - rlc_fenced_set writes a key only if the caller's token is at least the
 *     one stored with it, in one script: the value stays a plain string at
 *     the key, its fence is the companion key "redlockc_fence:{key}" in the
 *     same hash slot. docs/FENCING.md has the recipe for PostgreSQL.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cmd.h"
#include "error.h"
#include "mux.h"
#include "state.h"
#include "quorum.h"
#include "scripts.h"
#include "sha1.h"

#define MAX_KEY_LEN (512 * 1024 * 1024)

/* ---- fenced writes ----------------------------------------------------------- */

/* KEYS: the key, its fence. ARGV: value, token (decimal, no leading zeros).
 * -> {1, fence before} written, {0, fence} refused: a larger token is stored.
 * Tokens are compared as decimal strings (length, then bytes), so every
 * uint64 compares exactly; Lua's numbers are doubles. A fence that is not a
 * number fails the script before it writes anything. */
static struct script script_fenced_set = {
    "fenced_set",
    "local f = redis.call('get', KEYS[2]) or '0'\n"
    "if not string.match(f, '^%d+$') then\n"
    "  return redis.error_reply('ERR fence key ' .. KEYS[2] .. ' holds no token; nothing was "
    "written')\n"
    "end\n"
    "local t = ARGV[2]\n"
    "local older = #t < #f or (#t == #f and t < f)\n"
    "if older then return {0, f} end\n"
    "redis.call('set', KEYS[1], ARGV[1])\n"
    "if t ~= f then redis.call('set', KEYS[2], t) end\n"
    "return {1, f}\n",
    "", NULL};

static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

static void compute_sha(void)
{
    sha1_hex(script_fenced_set.source, strlen(script_fenced_set.source), script_fenced_set.sha);
}

/* "redlockc_fence:{key}", or "redlockc_fence:key" when the key names its
 * hash slot itself (Redisson's brace rule, as for a lock's channel). */
static char *fence_key(const char *key, size_t key_len, size_t *len)
{
    static const char prefix[] = "redlockc_fence:";
    bool braced = memchr(key, '{', key_len) != NULL;
    *len = sizeof prefix - 1 + key_len + (braced ? 0 : 2);
    char *s = malloc(*len + 1);
    if (!s)
        return NULL;
    snprintf(s, *len + 1, braced ? "%s%.*s" : "%s{%.*s}", prefix, (int)key_len, key);
    return s;
}

int rlc_fenced_set(rlc_client *c, const char *key, const char *value, size_t value_len,
                   uint64_t token, int *applied)
{
    if (!c)
        return rlc_fail(RLC_E_INVAL, "client is NULL");
    if (!applied)
        return rlc_fail(RLC_E_INVAL, "applied pointer is NULL");
    if (!key || !*key)
        return rlc_fail(RLC_E_INVAL, "key is NULL or empty");
    if (!value && value_len > 0)
        return rlc_fail(RLC_E_INVAL, "value is NULL");
    if (token == 0)
        return rlc_fail(RLC_E_INVAL, "fencing token 0: tokens of held locks start at 1");
    int rc = client_enter(c);
    if (rc != RLC_OK)
        return rc;
    if (c->n_nodes != 1) {
        rc = rlc_fail(RLC_E_INVAL,
                      "fenced writes go to one Redis, the resource; this client has %d nodes "
                      "(make a client with the resource's node alone)", c->n_nodes);
        goto out;
    }
    size_t key_len = strnlen(key, MAX_KEY_LEN + 1), fence_len;
    if (key_len > MAX_KEY_LEN) {
        rc = rlc_fail(RLC_E_INVAL, "key is longer than 512 MiB");
        goto out;
    }
    char *fence = fence_key(key, key_len, &fence_len);
    if (!fence) {
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    pthread_once(&sha_once, compute_sha);

    char tok[24];
    const char *argv[4] = {key, fence, value ? value : "", tok};
    size_t lens[4] = {key_len, fence_len, value_len,
                      (size_t)snprintf(tok, sizeof tok, "%llu", (unsigned long long)token)};
    struct rlc_cmd *cmd = cmd_evalsha(&script_fenced_set, 2, 2, argv, lens);
    free(fence);
    if (!cmd) {
        rc = rlc_fail(RLC_E_NOMEM, "out of memory");
        goto out;
    }
    struct mux_req *req =
        mux_send(client_mux(c, 0, owner_thread_number()), cmd, &script_fenced_set,
                 c->call_timeout_ms);
    struct mux_result res;
    mux_wait(&req, 1, &res);
    cmd_unref(cmd);

    const redisReply *r = res.reply;
    char shown[80];
    rlc_clip(key, shown, sizeof shown);
    if (res.status != RLC_OK)
        rc = rlc_fail(res.status, "%s for key '%s'", res.err[0] ? res.err : c->nodes[0].label,
                      shown);
    else if (r->type == REDIS_REPLY_ERROR)
        rc = rlc_fail(strncmp(r->str, "NOPERM", 6) == 0 || strncmp(r->str, "NOAUTH", 6) == 0
                          ? RLC_E_AUTH
                          : RLC_E_SERVER,
                      "%s at %s for key '%s'", r->str, c->nodes[0].label, shown);
    else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
             r->element[0]->type != REDIS_REPLY_INTEGER)
        rc = rlc_fail(RLC_E_PROTOCOL, "unexpected reply from %s", c->nodes[0].label);
    else
        *applied = r->element[0]->integer == 1;
    if (res.reply)
        freeReplyObject(res.reply);
out:
    client_leave(c);
    return rc;
}
