/*
 * scripts_family.c - the lock family's scripts (see scripts_family.h for each one's
 * keys, arguments and reply, docs/FAMILY.md for the layouts and why).
 *
 * The attempt records are those of the RLock scripts (scripts.c): field
 * <attempt id> of "redlockc_attempts:{name}" holds "<pttl before>|<epoch>|
 * <field>", or "u" when the undo ran first; field "e" is the epoch, the id
 * of the attempt that created the current hash.
 */

#include "scripts_family.h"

/* now_ms: the server's clock (Redis 7 replicates scripts by effects, so
 * TIME is allowed). level_of: the pttl before of attempt id if it ran in
 * the current life of the hash, else nil. record: notes a granted level. */
#define HEAD                                                                    \
    "local function now_ms()\n"                                                 \
    "  local t = redis.call('time')\n"                                          \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"      \
    "end\n"                                                                     \
    "local function level_of(att, id)\n"                                        \
    "  local rec = redis.call('hget', att, id)\n"                               \
    "  if not rec then return nil end\n"                                        \
    "  local a = string.find(rec, '|', 1, true)\n"                              \
    "  local b = a and string.find(rec, '|', a + 1, true)\n"                    \
    "  if not b then return nil end\n"                                          \
    "  if (redis.call('hget', att, 'e') or '') ~= string.sub(rec, a + 1, b - 1) then\n" \
    "    return nil\n"                                                          \
    "  end\n"                                                                   \
    "  return tonumber(string.sub(rec, 1, a - 1)) or -2\n"                      \
    "end\n"                                                                     \
    "local function record(att, id, before, field, lease)\n"                    \
    "  local e = redis.call('hget', att, 'e') or ''\n"                          \
    "  redis.call('hset', att, id, before .. '|' .. e .. '|' .. field)\n"       \
    "  if redis.call('pttl', att) < tonumber(lease) then\n"                     \
    "    redis.call('pexpire', att, lease)\n"                                   \
    "  end\n"                                                                   \
    "end\n"                                                                     \
    "local function tombstone(att, id, ms)\n"                                   \
    "  redis.call('hset', att, id, 'u')\n"                                      \
    "  if redis.call('pttl', att) < tonumber(ms) then\n"                        \
    "    redis.call('pexpire', att, ms)\n"                                      \
    "  end\n"                                                                   \
    "end\n"                                                                     \
    /* the release's check: may this release take the level of attempt id? */  \
    "local function may_release(key, att, id, field)\n"                         \
    "  if redis.call('hexists', key, field) == 0 then\n"                        \
    "    redis.call('hdel', att, id)\n"                                         \
    "    return false\n"                                                        \
    "  end\n"                                                                   \
    "  if redis.call('hexists', att, id) == 1 then\n"                           \
    "    local ok = level_of(att, id)\n"                                        \
    "    redis.call('hdel', att, id)\n"                                         \
    "    return ok ~= nil\n"                                                    \
    "  end\n"                                                                   \
    "  return redis.call('exists', att) == 0\n"                                 \
    "end\n"

/* ---- read-write lock ------------------------------------------------------ */

/* A7 (docs/design/attempts.md): a nested acquire names one level of the hold it
 * nests in (ARGV "outer", "" for a new hold). That level is in the current
 * life when the owner's field is there and its record names the current
 * epoch (or the attempts hash is gone: then only the field can say). If it
 * is not, the hold expired or was taken, and the try refuses ({-2, 0}) and
 * writes nothing: counted as nested, its release would free the lock while
 * the owner still believes it holds its outer level. */
#define IN_LIFE                                                                 \
    "local function in_life(key, att, field, outer)\n"                         \
    "  if outer == '' then return true end\n"                                 \
    "  if redis.call('hexists', key, field) == 0 then return false end\n"     \
    "  if redis.call('exists', att) == 0 then return true end\n"              \
    "  return level_of(att, outer) ~= nil\n"                                  \
    "end\n"

/* A read level's timeout key is named by the owner's count, not by the
 * level, and the client's validity after a nested level covers the whole
 * hold. So when the count drops from n + 1 to n, key n keeps the later of
 * the two keys' ends: Redisson's PTTL recompute (the longest key) then
 * never cuts the hash below what the holder was promised. */
#define READ_DROP                                                               \
    "local function read_drop(prefix, n)\n"                                    \
    "  local top = prefix .. ':' .. (n + 1)\n"                                 \
    "  if n > 0 then\n"                                                       \
    "    local t = redis.call('pttl', top)\n"                                 \
    "    if t > 0 and t > redis.call('pttl', prefix .. ':' .. n) then\n"      \
    "      redis.call('set', prefix .. ':' .. n, 1, 'px', t)\n"               \
    "    end\n"                                                               \
    "  end\n"                                                                 \
    "  redis.call('del', top)\n"                                              \
    "end\n"

/* A reader that does not hold the lock yet is refused while a writer waits
 * (writer preference); the write holder may take read levels (Redisson's
 * rule); a reader already holding may nest. */
struct script fscript_read_acquire = {
    "read_acquire",
    HEAD IN_LIFE
    "if redis.call('hexists', KEYS[3], ARGV[4]) == 1 then return {-1, 0} end\n"
    "if not in_life(KEYS[1], KEYS[3], ARGV[2], ARGV[5]) then return {-2, 0} end\n"
    "redis.call('zremrangebyscore', KEYS[4], '-inf', now_ms())\n"
    "local mode = redis.call('hget', KEYS[1], 'mode')\n"
    "local reading = redis.call('hexists', KEYS[1], ARGV[2]) == 1\n"
    "local writing = mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1\n"
    "if not reading and not writing and redis.call('zcard', KEYS[4]) > 0 then\n"
    "  local w = redis.call('zrange', KEYS[4], 0, 0, 'withscores')\n"
    "  return {0, math.max(1, tonumber(w[2]) - now_ms()), 'writer waiting: ' .. w[1]}\n"
    "end\n"
    "local n, before\n"
    "if mode == false then\n"
    "  redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  redis.call('hset', KEYS[3], 'e', ARGV[4])\n"
    "  n, before = 1, -2\n"
    "elseif mode == 'read' or writing then\n"
    "  before = redis.call('pttl', KEYS[1])\n"
    "  n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  if before < tonumber(ARGV[1]) then redis.call('pexpire', KEYS[1], ARGV[1]) end\n"
    "else\n"
    "  local holder = ''\n"
    "  for _, f in ipairs(redis.call('hkeys', KEYS[1])) do\n"
    "    if f ~= 'mode' then holder = f break end\n"
    "  end\n"
    "  return {0, redis.call('pttl', KEYS[1]), holder}\n"
    "end\n"
    "redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])\n"
    "record(KEYS[3], ARGV[4], before, ARGV[2], ARGV[1])\n"
    "return {n, 0, before}\n",
    "", NULL};

/* A writer that has to wait (ARGV[4] > 0) registers in the writers zset,
 * scored with when its registration ends; it renews it on every try, and
 * withdraws it when it gets the lock or gives up. */
struct script fscript_write_acquire = {
    "write_acquire",
    HEAD IN_LIFE
    "if redis.call('hexists', KEYS[2], ARGV[3]) == 1 then return {-1, 0} end\n"
    "if not in_life(KEYS[1], KEYS[2], ARGV[2], ARGV[5]) then return {-2, 0} end\n"
    "local now = now_ms()\n"
    "redis.call('zremrangebyscore', KEYS[3], '-inf', now)\n"
    "local mode = redis.call('hget', KEYS[1], 'mode')\n"
    "local n, before\n"
    "if mode == false then\n"
    "  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  redis.call('hset', KEYS[2], 'e', ARGV[3])\n"
    "  n, before = 1, -2\n"
    "elseif mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
    "  before = redis.call('pttl', KEYS[1])\n"
    "  n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  if before < tonumber(ARGV[1]) then redis.call('pexpire', KEYS[1], ARGV[1]) end\n"
    "else\n"
    "  local intent = tonumber(ARGV[4])\n"
    "  if intent > 0 then\n"
    "    redis.call('zadd', KEYS[3], now + intent, ARGV[2])\n"
    "    if redis.call('pttl', KEYS[3]) < intent then redis.call('pexpire', KEYS[3], intent) end\n"
    "  end\n"
    "  local holder = ''\n"
    "  for _, f in ipairs(redis.call('hkeys', KEYS[1])) do\n"
    "    if f ~= 'mode' then holder = f break end\n"
    "  end\n"
    "  return {0, redis.call('pttl', KEYS[1]), holder}\n"
    "end\n"
    "redis.call('zrem', KEYS[3], ARGV[2])\n"
    "record(KEYS[2], ARGV[3], before, ARGV[2], ARGV[1])\n"
    "return {n, 0, before}\n",
    "", NULL};

/* The hash lives as long as the longest read level (Redisson's rule, from
 * the per-level timeout keys), or is deleted, which publishes 0. As the
 * write release: further ids are a lost hold's other levels, and a level
 * whose attempt has not run here gets a tombstone. */
struct script fscript_read_release = {
    "read_release",
    HEAD READ_DROP
    "local n, took = 1, 0\n"
    "for i = 3, #ARGV do\n"
    "  local rec = redis.call('hget', KEYS[4], ARGV[i])\n"
    "  if rec ~= 'u' and n > 0 and may_release(KEYS[1], KEYS[4], ARGV[i], ARGV[2]) then\n"
    "    n, took = redis.call('hincrby', KEYS[1], ARGV[2], -1), took + 1\n"
    "    read_drop(KEYS[3], n)\n"
    "  elseif not rec then\n"
    "    tombstone(KEYS[4], ARGV[i], tonumber(ARGV[1]) + 60000)\n"
    "  end\n"
    "end\n"
    "if took == 0 then return -1 end\n"
    "if n <= 0 then redis.call('hdel', KEYS[1], ARGV[2]) end\n"
    "local mode = redis.call('hget', KEYS[1], 'mode')\n"
    "if redis.call('hlen', KEYS[1]) > 1 then\n"
    "  if mode == 'write' then return {n, 0} end\n"
    "  local longest = -3\n"
    "  for _, f in ipairs(redis.call('hkeys', KEYS[1])) do\n"
    "    local c = tonumber(redis.call('hget', KEYS[1], f))\n"
    "    if c then\n"
    "      for i = c, 1, -1 do\n"
    "        longest = math.max(longest, redis.call('pttl', KEYS[5] .. ':' .. f .. ':rwlock_timeout:' .. i))\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  if longest > 0 then\n"
    "    redis.call('pexpire', KEYS[1], longest)\n"
    "    return {n, 0}\n"
    "  end\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('hdel', KEYS[4], 'e')\n"
    "redis.pcall('publish', KEYS[2], 0)\n"
    "return {n, 1}\n",
    "", NULL};

/* An inner write level only raises the hash's TTL to the lease (Redisson
 * sets it): the writer's own read levels may have been promised longer.
 * Further attempt ids (ARGV[4..]) are the other levels of a lost hold,
 * given up at once with its last release: each goes if it is of this life,
 * and nothing is raised then (nobody counts on the hold any more). A level
 * whose attempt has not run here (a node that did not answer in time) gets
 * a tombstone, as the lock's release gives it, so that its acquire does
 * nothing when it comes late; a tombstone already there stays (this
 * release sent again on a new connection must not take it away).
 * The write hold's last level: the hash goes (or turns to mode read when
 * the writer still holds read levels, as in Redisson); either way waiting
 * readers may come in, so it publishes 1, which wakes every Redisson
 * waiter, as Redisson's own write unlock does. */
struct script fscript_write_release = {
    "write_release",
    HEAD
    "local writing = redis.call('hget', KEYS[1], 'mode') == 'write'\n"
    "local n, took = 1, 0\n"
    "for i = 3, #ARGV do\n"
    "  local rec = redis.call('hget', KEYS[3], ARGV[i])\n"
    "  if rec ~= 'u' and writing and n > 0 and may_release(KEYS[1], KEYS[3], ARGV[i], ARGV[2]) then\n"
    "    n, took = redis.call('hincrby', KEYS[1], ARGV[2], -1), took + 1\n"
    "  elseif not rec then\n"
    "    tombstone(KEYS[3], ARGV[i], tonumber(ARGV[1]) + 60000)\n"
    "  end\n"
    "end\n"
    "if took == 0 then return -1 end\n"
    "if n > 0 then\n"
    "  if #ARGV == 3 and redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then\n"
    "    redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  end\n"
    "  return {n, 0}\n"
    "end\n"
    "redis.call('hdel', KEYS[1], ARGV[2])\n"
    "if redis.call('hlen', KEYS[1]) <= 1 then\n"
    "  redis.call('del', KEYS[1])\n"
    "  redis.call('hdel', KEYS[3], 'e')\n"
    "else\n"
    "  redis.call('hset', KEYS[1], 'mode', 'read')\n"
    "end\n"
    "redis.pcall('publish', KEYS[2], 1)\n"
    "return {0, 1}\n",
    "", NULL};

/* Takes back a level a try took in this life. It sets no TTL: the TTL the
 * try saw may be shorter than what a holder was promised since (another
 * reader came in), and the try lengthened it by one lease at most. */
struct script fscript_rw_undo = {
    "rw_undo",
    HEAD READ_DROP
    "local rec = redis.call('hget', KEYS[2], ARGV[1])\n"
    "if not rec then\n"
    "  tombstone(KEYS[2], ARGV[1], ARGV[3])\n"
    "  return 0\n"
    "end\n"
    "local before = level_of(KEYS[2], ARGV[1])\n"
    "if rec ~= 'u' then redis.call('hdel', KEYS[2], ARGV[1]) end\n"
    "if not before or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return 0 end\n"
    "local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)\n"
    "if KEYS[3] then read_drop(KEYS[3], n) end\n"
    "if n > 0 then return 1 end\n"
    "redis.call('hdel', KEYS[1], ARGV[2])\n"
    "if redis.call('hlen', KEYS[1]) <= 1 then\n"
    "  redis.call('del', KEYS[1])\n"
    "  redis.call('hdel', KEYS[2], 'e')\n"
    "elseif not KEYS[3] then\n"
    "  redis.call('hset', KEYS[1], 'mode', 'read')\n"
    "end\n"
    "return 1\n",
    "", NULL};

/* Renews the owner's levels: its read levels' timeout keys too, and the
 * hash to at least the lease. */
struct script fscript_rw_renew = {
    "rw_renew",
    HEAD
    "if not level_of(KEYS[2], ARGV[3]) and redis.call('exists', KEYS[2]) == 1 then return 0 end\n"
    "local c = tonumber(redis.call('hget', KEYS[1], ARGV[2]))\n"
    "if not c then return 0 end\n"
    "if KEYS[3] then\n"
    "  for i = 1, c do redis.call('pexpire', KEYS[3] .. ':' .. i, ARGV[1]) end\n"
    "end\n"
    "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then redis.call('pexpire', KEYS[1], ARGV[1]) end\n"
    "if redis.call('pttl', KEYS[2]) < tonumber(ARGV[1]) then redis.call('pexpire', KEYS[2], ARGV[1]) end\n"
    "return 1\n",
    "", NULL};

struct script fscript_write_withdraw = {
    "write_withdraw",
    "return redis.call('zrem', KEYS[1], ARGV[1])\n",
    "", NULL};

/* ---- fair lock --------------------------------------------------------------- */

/* Drops queued waiters from the head whose time ran out (Redisson's rule:
 * only the head is looked at; one behind a live waiter waits its turn). */
#define FAIR_PRUNE                                                              \
    "local function prune(q, z, now)\n"                                         \
    "  for _ = 1, 1000 do\n"                                                    \
    "    local first = redis.call('lindex', q, 0)\n"                            \
    "    if not first then return end\n"                                       \
    "    local t = redis.call('zscore', z, first)\n"                            \
    "    if t and tonumber(t) <= now then\n"                                    \
    "      redis.call('zrem', z, first)\n"                                      \
    "      redis.call('lpop', q)\n"                                             \
    "    else\n"                                                                \
    "      return\n"                                                            \
    "    end\n"                                                                 \
    "  end\n"                                                                   \
    "end\n"

/* The queue and the timeout set are Redisson's, and so is the pruning of
 * timed-out waiters from the head. Redisson scores a new waiter "previous
 * waiter's timeout (or now + the lock's pttl) + thread wait" and never
 * refreshes it; ours score themselves now + 2 thread waits and push that on
 * every try (at least once a second), so a live waiter keeps its place
 * however long the holder keeps the lock, and a dead one is dropped 2 thread
 * waits after its last try, even behind a long lease (docs/FAMILY.md). */
struct script fscript_fair_acquire = {
    "fair_acquire",
    HEAD IN_LIFE FAIR_PRUNE
    "if redis.call('hexists', KEYS[4], ARGV[3]) == 1 then return {-1, 0} end\n"
    "if not in_life(KEYS[1], KEYS[4], ARGV[2], ARGV[6]) then return {-2, 0} end\n"
    "local now = now_ms()\n"
    "local wait = tonumber(ARGV[4])\n"
    "prune(KEYS[2], KEYS[3], now)\n"
    "local first = redis.call('lindex', KEYS[2], 0)\n"
    "local n, before\n"
    "if redis.call('exists', KEYS[1]) == 0 and (not first or first == ARGV[2]) then\n"
    "  if first then redis.call('lpop', KEYS[2]) end\n"
    "  redis.call('zrem', KEYS[3], ARGV[2])\n"
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  redis.call('hset', KEYS[4], 'e', ARGV[3])\n"
    "  n, before = 1, -2\n"
    "elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"
    "  before = redis.call('pttl', KEYS[1])\n"
    "  n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  if before < tonumber(ARGV[1]) then redis.call('pexpire', KEYS[1], ARGV[1]) end\n"
    "else\n"
    "  local ttl = redis.call('pttl', KEYS[1])\n"
    "  if ARGV[5] == '1' then\n"
    "    local mine = redis.call('zscore', KEYS[3], ARGV[2])\n"
    "    if mine then\n"
    "      if tonumber(mine) < now + 2 * wait then\n"
    "        redis.call('zadd', KEYS[3], now + 2 * wait, ARGV[2])\n"
    "      end\n"
    "    else\n"
    "      redis.call('zadd', KEYS[3], now + 2 * wait, ARGV[2])\n"
    "      redis.call('rpush', KEYS[2], ARGV[2])\n"
    "    end\n"
    "  end\n"
    "  if ttl < 0 then\n"
    "    local t = first and redis.call('zscore', KEYS[3], first)\n"
    "    ttl = t and math.max(1, tonumber(t) - now) or -1\n"
    "  end\n"
    "  return {0, ttl, first or ''}\n"
    "end\n"
    "record(KEYS[4], ARGV[3], before, ARGV[2], ARGV[1])\n"
    "return {n, 0, before}\n",
    "", NULL};

struct script fscript_fair_release = {
    "fair_release",
    HEAD FAIR_PRUNE
    "local n, took = 1, 0\n"
    "for i = 3, #ARGV do\n"
    "  local rec = redis.call('hget', KEYS[4], ARGV[i])\n"
    "  if rec ~= 'u' and n > 0 and may_release(KEYS[1], KEYS[4], ARGV[i], ARGV[2]) then\n"
    "    n, took = redis.call('hincrby', KEYS[1], ARGV[2], -1), took + 1\n"
    "  elseif not rec then\n"
    "    tombstone(KEYS[4], ARGV[i], tonumber(ARGV[1]) + 60000)\n"
    "  end\n"
    "end\n"
    "if took == 0 then return -1 end\n"
    "if n > 0 then\n"
    "  if #ARGV == 3 and redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then\n"
    "    redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "  end\n"
    "  return {n, 0}\n"
    "end\n"
    "redis.call('hdel', KEYS[1], ARGV[2])\n"
    "if redis.call('hlen', KEYS[1]) > 0 then return {0, 0} end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('hdel', KEYS[4], 'e')\n"
    "prune(KEYS[2], KEYS[3], now_ms())\n"
    "local nxt = redis.call('lindex', KEYS[2], 0)\n"
    "if nxt then redis.pcall('publish', KEYS[5] .. ':' .. nxt, 0) end\n"
    "return {0, 1}\n",
    "", NULL};

struct script fscript_fair_withdraw = {
    "fair_withdraw",
    HEAD FAIR_PRUNE
    "local was_first = redis.call('lindex', KEYS[2], 0) == ARGV[1]\n"
    "redis.call('zrem', KEYS[3], ARGV[1])\n"
    "redis.call('lrem', KEYS[2], 0, ARGV[1])\n"
    "if was_first and redis.call('exists', KEYS[1]) == 0 then\n"
    "  prune(KEYS[2], KEYS[3], now_ms())\n"
    "  local nxt = redis.call('lindex', KEYS[2], 0)\n"
    "  if nxt then redis.pcall('publish', KEYS[4] .. ':' .. nxt, 0) end\n"
    "end\n"
    "return 1\n",
    "", NULL};

/* As rw_undo: sets no TTL. */
struct script fscript_fair_undo = {
    "fair_undo",
    HEAD
    "local rec = redis.call('hget', KEYS[2], ARGV[1])\n"
    "if not rec then\n"
    "  tombstone(KEYS[2], ARGV[1], ARGV[3])\n"
    "  return 0\n"
    "end\n"
    "local before = level_of(KEYS[2], ARGV[1])\n"
    "if rec ~= 'u' then redis.call('hdel', KEYS[2], ARGV[1]) end\n"
    "if not before or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return 0 end\n"
    "if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then return 1 end\n"
    "redis.call('hdel', KEYS[1], ARGV[2])\n"
    "if redis.call('hlen', KEYS[1]) == 0 then\n"
    "  redis.call('del', KEYS[1])\n"
    "  redis.call('hdel', KEYS[2], 'e')\n"
    "end\n"
    "return 1\n",
    "", NULL};

struct script fscript_fair_renew = {
    "fair_renew",
    HEAD
    "if not level_of(KEYS[2], ARGV[3]) and redis.call('exists', KEYS[2]) == 1 then return 0 end\n"
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return 0 end\n"
    "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then redis.call('pexpire', KEYS[1], ARGV[1]) end\n"
    "if redis.call('pttl', KEYS[2]) < tonumber(ARGV[1]) then redis.call('pexpire', KEYS[2], ARGV[1]) end\n"
    "return 1\n",
    "", NULL};

/* ---- semaphores --------------------------------------------------------------- */

/* Permits whose lease ran out go back first (Redisson's rule: one zset
 * member per permit, scored with its end of lease in ms). */
#define PSEM_RECLAIM                                                            \
    "local function reclaim(k, z, ch, now)\n"                                   \
    "  local gone = redis.call('zrangebyscore', z, 0, now, 'limit', 0, 1000)\n" \
    "  if #gone > 0 then\n"                                                     \
    "    redis.call('zrem', z, unpack(gone))\n"                                 \
    "    local v = redis.call('incrby', k, #gone)\n"                            \
    "    redis.pcall('publish', ch, v)\n"                                       \
    "  end\n"                                                                   \
    "end\n"                                                                     \
    "local function member(base, i)\n"                                          \
    "  return base .. string.char(math.floor(i / 256), i % 256)\n"             \
    "end\n"

struct script fscript_psem_acquire = {
    "psem_acquire",
    HEAD PSEM_RECLAIM
    "if redis.call('exists', KEYS[4]) == 1 then return {-1, 0} end\n"
    "local now = now_ms()\n"
    "reclaim(KEYS[1], KEYS[2], KEYS[3], now)\n"
    "local n = tonumber(ARGV[1])\n"
    "local v = tonumber(redis.call('get', KEYS[1]) or '0') or 0\n"
    "if v >= n then\n"
    "  redis.call('decrby', KEYS[1], n)\n"
    "  for i = 1, n do redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), member(ARGV[3], i)) end\n"
    "  return {1, 0}\n"
    "end\n"
    "local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')\n"
    "if first[2] then return {0, math.max(1, tonumber(first[2]) - now)} end\n"
    "return {0, -1}\n",
    "", NULL};

struct script fscript_psem_release = {
    "psem_release",
    HEAD PSEM_RECLAIM
    "local n = tonumber(ARGV[1])\n"
    "local back = 0\n"
    "for i = 1, n do back = back + redis.call('zrem', KEYS[2], member(ARGV[2], i)) end\n"
    "if back == 0 and ARGV[4] == '1' then\n"
    "  redis.call('set', KEYS[4], 'u', 'px', ARGV[3])\n"
    "end\n"
    "if back > 0 then\n"
    "  local v = redis.call('incrby', KEYS[1], back)\n"
    "  redis.pcall('publish', KEYS[3], v)\n"
    "end\n"
    "return back\n",
    "", NULL};

struct script fscript_psem_renew = {
    "psem_renew",
    HEAD PSEM_RECLAIM
    "local now = now_ms()\n"
    "local n = tonumber(ARGV[1])\n"
    "for i = 1, n do\n"
    "  local s = redis.call('zscore', KEYS[1], member(ARGV[2], i))\n"
    "  if not s or tonumber(s) <= now then return 0 end\n"
    "end\n"
    "for i = 1, n do redis.call('zadd', KEYS[1], 'xx', now + tonumber(ARGV[3]), member(ARGV[2], i)) end\n"
    "return 1\n",
    "", NULL};

struct script fscript_psem_available = {
    "psem_available",
    HEAD PSEM_RECLAIM
    "reclaim(KEYS[1], KEYS[2], KEYS[3], now_ms())\n"
    "return tonumber(redis.call('get', KEYS[1]) or '0') or 0\n",
    "", NULL};

/* A plain semaphore has no holders on the server, only a count. An acquire
 * that takes permits leaves the record "r<n>" with no expiry: its permits
 * never expire either, and an undo that comes after any outage must still
 * find what to give back (docs/FAMILY.md, S1). The client deletes the
 * record once it has heard the grant, since no undo follows then. An undo,
 * and each release, leaves "d" for the tombstone time, so that one sent
 * again acts once and an undo that overtakes its acquire stops it. */
struct script fscript_sem_acquire = {
    "sem_acquire",
    "if redis.call('exists', KEYS[2]) == 1 then return {-1, 0} end\n"
    "local v = tonumber(redis.call('get', KEYS[1]) or '0') or 0\n"
    "if v >= tonumber(ARGV[1]) then\n"
    "  redis.call('decrby', KEYS[1], ARGV[1])\n"
    "  redis.call('set', KEYS[2], 'r' .. ARGV[1])\n"
    "  return {1, 0}\n"
    "end\n"
    "return {0, -1}\n",
    "", NULL};

/* An undo gives back the n its record names: exactly what its try took. */
struct script fscript_sem_release = {
    "sem_release",
    "local rec = redis.call('get', KEYS[3])\n"
    "local n = tonumber(ARGV[1])\n"
    "if ARGV[3] == 'u' then\n"
    "  if rec == false then\n"
    "    redis.call('set', KEYS[3], 'd', 'px', ARGV[2])\n"
    "    return 0\n"
    "  end\n"
    "  if string.sub(rec, 1, 1) ~= 'r' then return 0 end\n"
    "  n = tonumber(string.sub(rec, 2)) or 0\n"
    "elseif rec ~= false then\n"
    "  return 0\n"
    "end\n"
    "redis.call('set', KEYS[3], 'd', 'px', ARGV[2])\n"
    "local v = redis.call('incrby', KEYS[1], n)\n"
    "redis.pcall('publish', KEYS[2], v)\n"
    "return n\n",
    "", NULL};

static struct script *const all[] = {
    &fscript_read_acquire, &fscript_write_acquire, &fscript_read_release,
    &fscript_write_release, &fscript_rw_undo, &fscript_rw_renew, &fscript_write_withdraw,
    &fscript_fair_acquire, &fscript_fair_release, &fscript_fair_withdraw,
    &fscript_fair_undo, &fscript_fair_renew, &fscript_psem_acquire, &fscript_psem_release,
    &fscript_psem_renew, &fscript_psem_available, &fscript_sem_acquire,
    &fscript_sem_release};
enum { N = sizeof all / sizeof all[0] };

size_t scripts_family(struct script *const **list)
{
    *list = all;
    return N;
}
