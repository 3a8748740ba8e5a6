/*
 * scripts.c - the lock scripts, in Redisson's data layout.
 *
 * A lock is a hash at the lock's name; the field "<client-uuid>:<owner>"
 * holds the owner's reentrancy count; the key's PTTL is the lease. Unlocking
 * publishes "0" (Redisson's UNLOCK_MESSAGE) on the lock's channel, which is
 * what wakes a Redisson waiter as well as ours. These are our own scripts;
 * only the data they leave behind has to match Redisson's.
 *
 * They run by EVALSHA; a node that answers NOSCRIPT (restarted, SCRIPT
 * FLUSH) gets the same call as EVAL, which also caches the source again.
 */
#include <pthread.h>
#include <string.h>

#include "scripts.h"
#include "sha1.h"

/* The token counter only moves when a new hold begins (0 -> 1), so while an
 * owner holds the lock the counter's value is that owner's token.
 * ARGV[3] is "1" when this client holds no level of the lock for this owner
 * and has no other acquire of it in flight: a field of ours found then is a
 * leftover (a release whose reply was lost), and nesting into it would keep
 * it alive forever; it starts over at 1, as a new hold.
 * A nested acquire also returns the PTTL it replaced: if the caller has to
 * undo it (a failed Redlock round), the undo puts that PTTL back instead of
 * extending the older hold, which could otherwise be kept alive forever by
 * its owner's own failing retries. */
struct script script_acquire = {
    "acquire",
    "if redis.call('exists', KEYS[1]) == 0 then\n"
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return {1, redis.call('incr', KEYS[2]), -2}\n"
    "end\n"
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
    "  if ARGV[3] == '1' then\n"
    "    redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "    redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "    return {1, redis.call('incr', KEYS[2]), -2}\n"
    "  end\n"
    "  local before = redis.call('pttl', KEYS[1])\n"
    "  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return {n, tonumber(redis.call('get', KEYS[2]) or '0'), before}\n"
    "end\n"
    "return {0, redis.call('pttl', KEYS[1])}\n",
    ""};

struct script script_release = {
    "release",
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then\n"
    "  return -1\n"
    "end\n"
    "local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)\n"
    "if n > 0 then\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  return n\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('publish', KEYS[2], 0)\n"
    "return 0\n",
    ""};

/* pcall: a key someone overwrote with another type is simply not ours any
 * more (0), and must not fail the renewal of every other key in the batch. */
struct script script_renew = {
    "renew",
    "local out = {}\n"
    "for i = 1, #KEYS do\n"
    "  if redis.pcall('hexists', KEYS[i], ARGV[i + 1]) == 1 then\n"
    "    redis.call('pexpire', KEYS[i], ARGV[1])\n"
    "    out[i] = 1\n"
    "  else\n"
    "    out[i] = 0\n"
    "  end\n"
    "end\n"
    "return out\n",
    ""};

struct script script_force_release = {
    "force_release",
    "if redis.call('del', KEYS[1]) == 1 then\n"
    "  redis.call('publish', KEYS[2], 0)\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
    ""};

/* Raises a node's token counter to at least ARGV[1]. Over N nodes a new
 * holder's token is the largest counter of the nodes that said yes; raising
 * the others to it means any later quorum, which shares a node with this
 * one, counts on from at least this token. */
struct script script_token_floor = {
    "token_floor",
    "local v = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "if v < tonumber(ARGV[1]) then\n"
    "  redis.call('set', KEYS[1], ARGV[1])\n"
    "end\n"
    "return 1\n",
    ""};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void compute_shas(void)
{
    struct script *all[] = {&script_acquire, &script_release, &script_renew,
                            &script_force_release, &script_token_floor};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sha1_hex(all[i]->source, strlen(all[i]->source), all[i]->sha);
}

void scripts_init(void)
{
    pthread_once(&init_once, compute_shas);
}
