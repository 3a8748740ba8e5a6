/*
 * scripts_classic.c - the lock scripts of the classic format (format=classic).
 *
 * The classic format is the layout redis-py's Lock, node-redlock, redsync and
 * pottery keep: the lock is a string at the lock's name whose value is a
 * random token, taken with SET NX PX, given back by deleting it only while it
 * holds that token, and extended by PEXPIRE under the same test. Our token is
 * the attempt id ("<client-uuid>:<seq>", never reused), so the value names
 * the one try that took the lock: a late undo, renewal or release names its
 * own attempt and can never touch a later holder's life of the key, which the
 * Redisson format needs its attempts hash for. What the format cannot give
 * (docs/design/classic.md): reentrancy (one value, one level),
 * fencing tokens, and a tombstone for an attempt undone before it arrived
 * (it takes the lock when it lands and holds it for its lease).
 *
 * Each answers in the shape of its Redisson-format twin (scripts.h), so the
 * engine reads both alike. KEYS never name anything but the locks (and the
 * release's channel): a classic lock leaves no other key.
 */
#include "scripts.h"

/* KEYS: lock. ARGV: lease ms, attempt id, and "1" to name the holder.
 * -> {1, 0, -2, 0} taken (a copy of this very attempt that ran before it,
 *    on a connection that dropped, counts as taken), {0, pttl, holder}
 *    busy (without ARGV[3]: the pttl alone, an integer, as script_acquire's). GET is a pcall: a key of another type (a Redisson lock on the same
 *    name) is simply busy, with no holder to name. */
struct script script_classic_acquire = {
    "classic_acquire",
    "if redis.call('set', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[1]) then\n"
    "  return {1, 0, -2, 0}\n"
    "end\n"
    "local v = redis.pcall('get', KEYS[1])\n"
    "if v == ARGV[2] then return {1, 0, -2, 0} end\n"
    "local pttl = redis.call('pttl', KEYS[1])\n"
    "if ARGV[3] then\n"
    "  if type(v) ~= 'string' then v = '' end\n"
    "  return {0, pttl, v}\n"
    "end\n"
    "return pttl\n",
    "", NULL};

/* KEYS: lock, channel. ARGV: attempt id of the hold's level.
 * -> 0 freed (deleted and published), -2 freed but PUBLISH was refused,
 *    -1 the key does not hold that id (gone, or another holder's). */
struct script script_classic_release = {
    "classic_release",
    "if redis.pcall('get', KEYS[1]) ~= ARGV[1] then return -1 end\n"
    "redis.call('del', KEYS[1])\n"
    "local p = redis.pcall('publish', KEYS[2], 0)\n"
    "if type(p) == 'table' and p.err then return -2 end\n"
    "return 0\n",
    "", NULL};

/* KEYS: lock. ARGV: attempt id. Deletes the key if that attempt holds it.
 * -> 1 taken back, 0 nothing to take back. Publishes nothing, as the
 * Redisson format's undo: nobody was told this level was taken. */
struct script script_classic_undo = {
    "classic_undo",
    "if redis.pcall('get', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('del', KEYS[1])\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
    "", NULL};

/* KEYS: m locks. ARGV: lease ms, m attempt ids. -> {1 renewed | 0 gone, ...} */
struct script script_classic_renew = {
    "classic_renew",
    "local out = {}\n"
    "for i = 1, #KEYS do\n"
    "  if redis.pcall('get', KEYS[i]) == ARGV[1 + i] then\n"
    "    redis.call('pexpire', KEYS[i], ARGV[1])\n"
    "    out[i] = 1\n"
    "  else\n"
    "    out[i] = 0\n"
    "  end\n"
    "end\n"
    "return out\n",
    "", NULL};

/* KEYS: m locks. ARGV: m attempt ids. The renewal's test alone, writing
 * nothing (loss push's verify). -> {1 ours | 0 gone, ...} */
struct script script_classic_verify = {
    "classic_verify",
    "local out = {}\n"
    "for i = 1, #KEYS do\n"
    "  out[i] = redis.pcall('get', KEYS[i]) == ARGV[i] and 1 or 0\n"
    "end\n"
    "return out\n",
    "", NULL};

/* KEYS: m locks. ARGV: lease ms, attempt id. Every name or none, each with
 * the attempt id as its value. -> {1, 0, 0} all taken, {0, pttl, i} name i
 * (1-based) busy; nothing written unless every name was free (or already
 * this attempt's: a copy that ran before it). */
struct script script_classic_multi_acquire = {
    "classic_multi_acquire",
    "for i = 1, #KEYS do\n"
    "  if redis.call('exists', KEYS[i]) == 1 and redis.pcall('get', KEYS[i]) ~= ARGV[2] then\n"
    "    return {0, redis.call('pttl', KEYS[i]), i}\n"
    "  end\n"
    "end\n"
    "for i = 1, #KEYS do\n"
    "  redis.call('set', KEYS[i], ARGV[2], 'PX', ARGV[1])\n"
    "end\n"
    "return {1, 0, 0}\n",
    "", NULL};
