/*
 * scripts.c - the lock scripts, in Redisson's data layout.
 *
 * A lock is a hash at the lock's name; the field "<client-uuid>:<owner>"
 * holds the owner's reentrancy count; the key's PTTL is the lease. Unlocking
 * publishes "0" (Redisson's UNLOCK_MESSAGE) on the lock's channel, which is
 * what wakes a Redisson waiter as well as ours. These are our own scripts;
 * only the data they leave behind has to match Redisson's.
 *
 * They are loaded with SCRIPT LOAD on every command connection, right after
 * its handshake and before any call (scripts_engine() lists them), and run
 * by EVALSHA. Redis 7.4+ and Valkey 8 keep at most 500 scripts that came by
 * EVAL and evict the oldest; a loaded script stays until SCRIPT FLUSH or a
 * restart, so another client's EVALs cannot evict ours. A node that answers
 * NOSCRIPT anyway (flushed mid-connection) gets the scripts loaded again and
 * the same EVALSHA; a second NOSCRIPT for one call, or a node that refuses
 * SCRIPT LOAD (an ACL), gets the call as EVAL, which needs no cache. Undos
 * and loss push's verify always go as EVAL (engine_conn.c, lock_calls.c:
 * a re-send would be out of order); their scripts are loaded all the same,
 * and an EVAL of a loaded script leaves it loaded.
 */
#include <pthread.h>
#include <string.h>

#include "scripts.h"
#include "scripts_family.h"
#include "sha1.h"

/* parse: a record's epoch, owner field and pttl before (nil for a
 * tombstone; before only where the record has one). */
#define PARSE                                                                    \
    "local function parse(rec)\n"                                               \
    "  local a = string.find(rec, '|', 1, true)\n"                              \
    "  if not a then return nil end\n"                                          \
    "  local b = string.find(rec, '|', a + 1, true)\n"                          \
    "  if not b then return string.sub(rec, 1, a - 1), string.sub(rec, a + 1) end\n" \
    "  return string.sub(rec, a + 1, b - 1), string.sub(rec, b + 1),\n"        \
    "    tonumber(string.sub(rec, 1, a - 1))\n"                                 \
    "end\n"

/* The next fencing token of counter key k: one more than it holds (one
 * call, the usual case), or, when the counter did not exist (INCR gave 1: a
 * new name, or a node that lost it: restarted without persistence, flushed,
 * evicted), the node's clock (TIME) in whole milliseconds, counted in
 * microseconds. Every token a counter gave was at most the node's clock in
 * microseconds when it was given (it starts at or below the clock and moves
 * by one per hold, and no node runs two scripts in one microsecond), so a
 * counter started again a millisecond or more later starts above every
 * token given before, on any node whose clock is close enough
 * (docs/design/fencing.md). Whole milliseconds, so that the nodes
 * of one Redlock round mostly start a new name's counter at one value (else
 * the acquire raises the others: token_floor). The value is built as a
 * string: a Lua number would reach Redis in exponent form. A value that is
 * not an integer fails the call (pcall: the caller says why, before writing
 * anything). */
#define NEXT_TOKEN                                                               \
    "local function next_token(k)\n"                                            \
    "  local n = redis.pcall('incr', k)\n"                                       \
    "  if n ~= 1 then return n end\n"                                            \
    "  local t = redis.call('time')\n"                                           \
    "  local ms = string.format('%03d', math.floor(tonumber(t[2]) / 1000))\n"    \
    "  local v = t[1] .. ms .. '000'\n"                                          \
    "  redis.call('set', k, v)\n"                                                \
    "  return tonumber(v)\n"                                                     \
    "end\n"

/* Sets the attempts hash att's TTL for a lock whose TTL was just set to
 * ms: to ms when it holds no tombstone (`flag`: its field "t", nil), since
 * then nothing in it must outlive the lock; else to at least ms, never
 * shorter, as a tombstone must live its own time (tomb). */
#define RAISE                                                                    \
    "local function raise(att, flag, ms)\n"                                      \
    "  if not flag or redis.call('pttl', att) < tonumber(ms) then\n"           \
    "    redis.call('pexpire', att, ms)\n"                                      \
    "  end\n"                                                                  \
    "end\n"

/* Writes attempt id's tombstone in att and flags att as holding one ("t":
 * its TTL only ever grows from now on), to live at least keep ms. */
#define TOMB                                                                     \
    "local function tomb(att, id, keep)\n"                                       \
    "  redis.call('hset', att, id, 'u', 't', 1)\n"                               \
    "  if redis.call('pttl', att) < keep then redis.call('pexpire', att, keep) end\n" \
    "end\n"

/* Frees the lock when the owner's last level goes: DEL, since the hash
 * holds that owner's field alone (every script here, and Redisson's, adds an
 * owner's field only to a hash that does not exist or already has it); the
 * attempts hash keeps its tombstones but forgets the epoch, and loses
 * `record` too when one is given (one HDEL for both). */
#define FREE_LOCK                                                                \
    "local function free_lock(key, att, record)\n"                               \
    "  redis.call('del', key)\n"                                                 \
    "  if record then redis.call('hdel', att, record, 'e')\n"                    \
    "  else redis.call('hdel', att, 'e') end\n"                                  \
    "end\n"

/*
 * Attempts. Every acquire carries an attempt id ("<client-uuid>:<seq>", never
 * reused) and leaves a record in the lock's attempts hash
 * "redlockc_attempts:{name}" (the lock's hash slot): field <attempt id> =
 * "<epoch>|<owner field>" once it ran, or "u" once it was undone first (a
 * tombstone; field "t" then says the hash holds one, see RAISE). Field "e"
 * is the epoch: the id of the attempt that created the
 * current hash, so a record says in which life of the lock its level was
 * taken. Every script that takes a level back (undo, release, renew) checks
 * the record against the epoch, so nothing sent late, on whatever connection,
 * can touch a later life of the lock; and an acquire that finds its own
 * tombstone does nothing. docs/design/attempts.md argues it.
 *
 * A nested acquire names (ARGV[4]) one level of the hold it nests in; the
 * reply's 4th element says whether that level is in the lock's current
 * life. If it is not on a quorum, the outer hold was lost (it expired, and
 * this acquire made a new one): the caller must not count it as nested.
 *
 * Fencing tokens are taken only when the call names the token counter as
 * KEYS[3] (the client's option fencing=1); otherwise no key but the lock's
 * and its attempts hash is touched, so a released lock leaves no key
 * behind, and the reply's token is 0. (A key named but unused would still
 * count in a migrating slot: TRYAGAIN until it moved.) The token counter
 * only moves when a new hold begins (NEXT_TOKEN), so while an owner holds
 * the lock the counter's value is that owner's token. The INCR comes first:
 * a token key that is not an integer fails the script before it has
 * written anything.
 *
 * The first call asks whether the lock or its attempts hash exists (EXISTS
 * of both): where neither does, as for a name taken anew after a clean
 * release, there is no tombstone and no record to read, and a new hold is
 * 5 calls (EXISTS, HSET, HSET, PEXPIRE, PEXPIRE). Otherwise the owner's
 * field (HEXISTS) says nested, and else the lock's PTTL says busy (-2: only
 * the attempts hash is there). A refused try costs what Redisson's does
 * (EXISTS, HEXISTS, PTTL) and comes before the script defines anything: it
 * reads no attempt record, since it writes nothing (a late, undone attempt
 * that finds the lock busy is a no-op either way). It names the holder (HKEYS: an RLock's
 * hash has one field) only when ARGV[5] asks, over N nodes, where a split
 * vote is told apart from one holder's quorum by it; else its answer is
 * the pttl alone, an integer: a table built and sent back cost the server
 * about a third of the refused try (tests/bench/README.md).
 * Where either exists, one HMGET reads the attempt's own field (a
 * tombstone, or its record: it ran already), the epoch, the nested-in
 * level's record and the tombstone flag "t" that says whether the attempts
 * hash's TTL may be set (RAISE): a nested level runs 7 calls (EXISTS,
 * HEXISTS, HMGET, HINCRBY, HSET, PEXPIRE, PEXPIRE). Only a try made
 * as a new hold (ARGV[4] "") that finds the owner's field there keeps the
 * lock's PTTL before in its record, for its undo (script_undo).
 */
struct script script_acquire = {
    "acquire",
    "local there, got = false, {false, false, false, false}\n"
    "if redis.call('exists', KEYS[1], KEYS[2]) > 0 then\n"
    "  there = redis.call('hexists', KEYS[1], ARGV[2]) == 1\n"
    "  if not there then\n"
    "    local pttl = redis.call('pttl', KEYS[1])\n"
    "    if pttl ~= -2 then\n"
    "      if ARGV[5] then return {0, pttl, redis.call('hkeys', KEYS[1])[1] or ''} end\n"
    "      return pttl\n"
    "    end\n"
    "  end\n"
    "  got = redis.call('hmget', KEYS[2], ARGV[3], 'e', ARGV[4], 't')\n"
    "  if got[1] then return {-1, 0} end\n"
    "end\n"
    PARSE
    NEXT_TOKEN
    RAISE
    "local epoch = got[2] or ''\n"
    "local n, token, inner = 1, 0, 0\n"
    "local fenced = KEYS[3] ~= nil\n"
    "if not there then\n"
    "  if fenced then\n"
    "    local t = next_token(KEYS[3])\n"
    "    if type(t) == 'table' and t.err then\n"
    "      return redis.error_reply('ERR token key ' .. KEYS[3] .. ' is unusable (' ..\n"
    "        t.err .. '); nothing was written')\n"
    "    end\n"
    "    token = t\n"
    "  end\n"
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"
    "  redis.call('hset', KEYS[2], 'e', ARGV[3], ARGV[3], ARGV[3] .. '|' .. ARGV[2])\n"
    "else\n"
    "  n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"
    "  if fenced then\n"
    "    local v = redis.call('get', KEYS[3])\n"
    "    if v then token = tonumber(v) or 0 else token = next_token(KEYS[3]) end\n"
    "  end\n"
    "  local rec = epoch .. '|' .. ARGV[2]\n"
    "  if ARGV[4] == '' then\n"
    "    rec = redis.call('pttl', KEYS[1]) .. '|' .. rec\n"
    "  elseif got[3] and parse(got[3]) == epoch then\n"
    "    inner = 1\n"
    "  end\n"
    "  redis.call('hset', KEYS[2], ARGV[3], rec)\n"
    "end\n"
    "redis.call('pexpire', KEYS[1], ARGV[1])\n"
    "raise(KEYS[2], got[4], ARGV[1])\n"
    "return {n, token, 0, inner}\n",
    "", NULL};

/* The release of one level, the one taken by attempt ARGV[3]. ARGV[4] is
 * "" or, for the client's last level, the newest attempt id (hex) the client
 * had made when it sent this: the release then also takes every level of
 * the owner that an attempt up to that one took in this life (an acquire
 * whose undo is late), so no level is orphaned, while a level taken by a
 * later attempt (this release was delayed) stays.
 * Where the level's attempt has not run (a Redlock node that did not answer
 * in time), a tombstone keeps it from running later; so does one for each
 * further attempt id in ARGV[5..] (the other levels of a lost hold, given
 * up without their own releases).
 * A refused PUBLISH (an ACL without channel rights) does not undo a release
 * that happened: the reply says so (-2) and the caller reports success.
 * A release sets no TTL: the levels left keep the lease their acquire or
 * the last renewal gave them, which is all the client counts on (E8).
 *
 * An inner level (ARGV[4] "") whose record names this life is the common
 * case and takes 3 calls: HMGET (the epoch and the record), HDEL of the
 * record, HINCRBY -1. A record of this life means the owner's field is in
 * the lock's hash, unless the lock ended since (expired with its attempts
 * hash still there for a moment, or force-released): HINCRBY then answers
 * below 0, having made the field, and the HDEL that follows leaves the hash
 * as it was (or gone, if it was), all inside this one script. Every other
 * case reads the count first (HGET). The epoch and the level's record come
 * in one read (HMGET, or for the client's last level the HGETALL that finds
 * its late levels too: the tombstones written below are never levels, so
 * reading before them is the same). When the lock goes, the attempts hash
 * goes with it in one DEL, unless it holds a tombstone (its "t", or one
 * written here), which must live its own time: then only the epoch and the
 * record leave, in one HDEL. A last release runs 4 calls: HGETALL, HGET,
 * DEL, PUBLISH. */
struct script script_release = {
    "release",
    PARSE FREE_LOCK TOMB
    "local function freed()\n"
    "  local p = redis.pcall('publish', KEYS[2], 0)\n"
    "  if type(p) == 'table' and p.err then return -2 end\n"
    "  return 0\n"
    "end\n"
    "local all, e, rec, tombs = nil, '', false, false\n"
    "if ARGV[4] ~= '' then\n"
    "  all = redis.call('hgetall', KEYS[3])\n"
    "  for i = 1, #all, 2 do\n"
    "    if all[i] == 'e' then e = all[i + 1] elseif all[i] == ARGV[3] then rec = all[i + 1]\n"
    "    elseif all[i] == 't' or all[i + 1] == 'u' then tombs = true end\n"
    "  end\n"
    "else\n"
    "  local got = redis.call('hmget', KEYS[3], 'e', ARGV[3])\n"
    "  e, rec = got[1] or '', got[2]\n"
    "  if rec and #ARGV == 4 and parse(rec) == e then\n"
    "    redis.call('hdel', KEYS[3], ARGV[3])\n"
    "    local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)\n"
    "    if n > 0 then return n end\n"
    "    if n < 0 then\n"
    "      redis.call('hdel', KEYS[1], ARGV[2])\n"
    "      return -1\n"
    "    end\n"
    "    free_lock(KEYS[1], KEYS[3])\n"
    "    return freed()\n"
    "  end\n"
    "end\n"
    "local count = redis.call('hget', KEYS[1], ARGV[2])\n"
    "local held = count ~= false\n"
    "local mine, drop = false, nil\n"
    "if rec then\n"
    "  local epoch = parse(rec)\n"
    "  mine = epoch ~= nil and epoch == e\n"
    "  if rec ~= 'u' then drop = ARGV[3] end\n"
    "else\n"
    "  if all then mine = held and #all == 0\n"
    "  else mine = held and redis.call('exists', KEYS[3]) == 0 end\n"
    "  tomb(KEYS[3], ARGV[3], tonumber(ARGV[1]) + 60000)\n"
    "  tombs = true\n"
    "end\n"
    "for i = 5, #ARGV do\n"
    "  if redis.call('hexists', KEYS[3], ARGV[i]) == 0 then\n"
    "    tomb(KEYS[3], ARGV[i], tonumber(ARGV[1]) + 60000)\n"
    "    tombs = true\n"
    "  end\n"
    "end\n"
    "local n = tonumber(count) or 0\n"
    "local took = 0\n"
    "if held and mine then n, took = n - 1, 1 end\n"
    "if held and all then\n"
    "  local prefix = string.match(ARGV[3], '^(.*:)')\n"
    "  local upto = tonumber(ARGV[4], 16)\n"
    "  for i = 1, #all, 2 do\n"
    "    local id = all[i]\n"
    "    if id ~= ARGV[3] and prefix and string.sub(id, 1, #prefix) == prefix then\n"
    "      local seq = tonumber(string.sub(id, #prefix + 1), 16)\n"
    "      local epoch, field = parse(all[i + 1])\n"
    "      if seq and upto and seq <= upto and epoch == e and field == ARGV[2] then\n"
    "        redis.call('hdel', KEYS[3], id)\n"
    "        n, took = n - 1, took + 1\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if took > 0 and n <= 0 then\n"
    "  if all and not tombs then redis.call('del', KEYS[1], KEYS[3])\n"
    "  else free_lock(KEYS[1], KEYS[3], drop) end\n"
    "  return freed()\n"
    "end\n"
    "if drop then redis.call('hdel', KEYS[3], drop) end\n"
    "if took == 0 then return -1 end\n"
    "redis.call('hset', KEYS[1], ARGV[2], n)\n"
    "return n\n",
    "", NULL};

/* Takes back what attempt ARGV[1] took, if it ran in the lock's current
 * life; if it has not run yet, a tombstone makes it do nothing when it
 * arrives. A try the client made as a new hold that found the owner's field
 * there (a stale partial hold of an earlier Redlock round) recorded the
 * PTTL it replaced; its undo puts that back if it is shorter than what is
 * left, so the owner's own failing retries cannot keep a stale partial hold
 * alive (two contenders would each keep theirs, and neither reach a
 * quorum). A nested level's undo leaves the PTTL its try set: the owner
 * holds the lock, and the try lengthened it by one lease at most. The
 * HINCRBY below 0 is the release's case: the lock ended since (see there). Publishes nothing: a level that was never reported taken
 * frees nothing anybody waits for that the holder's own release will not
 * announce. */
struct script script_undo = {
    "undo",
    PARSE FREE_LOCK TOMB
    "local got = redis.call('hmget', KEYS[2], ARGV[1], 'e')\n"
    "local rec = got[1]\n"
    "if not rec then\n"
    "  tomb(KEYS[2], ARGV[1], tonumber(ARGV[3]))\n"
    "  return 0\n"
    "end\n"
    "if rec == 'u' then return 0 end\n"
    "redis.call('hdel', KEYS[2], ARGV[1])\n"
    "local epoch, _, before = parse(rec)\n"
    "if epoch ~= (got[2] or '') then return 0 end\n"
    "local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)\n"
    "if n > 0 then\n"
    "  if before and before > 0 and before < redis.call('pttl', KEYS[1]) then\n"
    "    redis.call('pexpire', KEYS[1], before)\n"
    "  end\n"
    "  return 1\n"
    "end\n"
    "if n < 0 then\n"
    "  redis.call('hdel', KEYS[1], ARGV[2])\n"
    "  return 0\n"
    "end\n"
    "free_lock(KEYS[1], KEYS[2])\n"
    "return 1\n",
    "", NULL};

/* Is hold i's level (its attempt id in ID) recorded in the lock's current
 * life (epoch 'e' of its attempts hash)? -> `mine`. A renewal renews only
 * then, and loss push's verify asks exactly this: one text for both, so the
 * verify can never judge a hold by another rule than the renewal. */
#define LIFE_TEST(ID)                                                                    \
    "  local att = KEYS[m + i]\n"                                                        \
    "  local got = redis.pcall('hmget', att, " ID ", 'e', 't')\n"                        \
    "  local mine, flag = false, nil\n"                                                  \
    "  if type(got) == 'table' and not got.err then\n"                                   \
    "    local rec = got[1]\n"                                                           \
    "    flag = got[3]\n"                                                                \
    "    if rec then\n"                                                                  \
    "      local a = string.find(rec, '|', 1, true)\n"                                   \
    "      local b = a and string.find(rec, '|', a + 1, true)\n"                         \
    "      local ep = b and string.sub(rec, a + 1, b - 1) or a and string.sub(rec, 1, a - 1)\n" \
    "      mine = ep and (got[2] or '') == ep or false\n"                                \
    "    else\n"                                                                         \
    "      mine = redis.pcall('exists', att) == 0\n"                                     \
    "    end\n"                                                                          \
    "  end\n"

/* KEYS: m locks, then their m attempts hashes. ARGV: lease, m fields, m
 * attempt ids (one level of each hold). A hold is renewed only in the life
 * its level was taken in. pcall: a key someone overwrote with another type is
 * simply not ours any more (0), and must not fail the rest of the batch. */
struct script script_renew = {
    "renew",
    RAISE
    "local m = #KEYS / 2\n"
    "local out = {}\n"
    "for i = 1, m do\n"
    LIFE_TEST("ARGV[m + 1 + i]")
    "  if mine and redis.pcall('hexists', KEYS[i], ARGV[i + 1]) == 1 then\n"
    "    redis.call('pexpire', KEYS[i], ARGV[1])\n"
    "    raise(att, flag, ARGV[1])\n"
    "    out[i] = 1\n"
    "  else\n"
    "    out[i] = 0\n"
    "  end\n"
    "end\n"
    "return out\n",
    "", NULL};

/* The renewal script's test without its writes (loss push: a verify round,
 * tracking.c and engine_track.c). KEYS: m locks, m attempts hashes; ARGV: m
 * fields, m attempt ids. It writes nothing, so it never causes the
 * invalidation it answers. -> {1 still ours | 0 gone, ...} */
struct script script_verify = {
    "verify",
    "local m = #KEYS / 2\n"
    "local out = {}\n"
    "for i = 1, m do\n"
    LIFE_TEST("ARGV[m + i]")
    "  out[i] = (mine and redis.pcall('hexists', KEYS[i], ARGV[i]) == 1) and 1 or 0\n"
    "end\n"
    "return out\n",
    "", NULL};

struct script script_force_release = {
    "force_release",
    "if redis.call('del', KEYS[1]) == 1 then\n"
    "  redis.pcall('publish', KEYS[2], 0)\n"
    "  return 1\n"
    "end\n"
    "return 0\n",
    "", NULL};

struct script script_fenced_set = {
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
    "", NULL};

/* A multi-lock's try: all of the names or none. First every name is
 * checked, then, if every one is free or the owner's, each gets exactly what
 * the acquire script above would give it (one level more, the same attempt
 * record), with one attempt id for all, so the release, undo, renew and
 * verify scripts work on each name alone. No token is taken: a multi-lock
 * has no fencing token (with fencing on, ARGV[4] "1", its counter is still
 * raised, as the acquire's is). ARGV[4 + i]: a level of the hold name i
 * nests in ("" or none: a new hold); the answer names the first whose level is not in this life of
 * its lock (it expired meanwhile: the caller undoes the try, as the
 * acquire's "inner" says for one name). */
struct script script_multi_acquire = {
    "multi_acquire",
    PARSE
    NEXT_TOKEN
    "local function in_life(att, id)\n"
    "  local got = redis.call('hmget', att, id, 'e')\n"
    "  return got[1] ~= false and parse(got[1]) == (got[2] or '')\n"
    "end\n"
    "local fenced = ARGV[4] == '1'\n"
    "local m = #KEYS / (fenced and 3 or 2)\n"
    "for i = 1, m do\n"
    "  if redis.call('hexists', KEYS[m + i], ARGV[3]) == 1 then return {-1, 0} end\n"
    "end\n"
    "for i = 1, m do\n"
    "  if redis.call('exists', KEYS[i]) == 1 and redis.call('hexists', KEYS[i], ARGV[2]) == 0 then\n"
    "    return {0, redis.call('pttl', KEYS[i]), i}\n"
    "  end\n"
    "end\n"
    "for i = 1, fenced and m or 0 do\n"
    "  local t = redis.pcall('get', KEYS[2 * m + i])\n"
    "  if type(t) == 'table' or (t and not tonumber(t)) then\n"
    "    return redis.error_reply('ERR token key ' .. KEYS[2 * m + i] .. ' is unusable; nothing was written')\n"
    "  end\n"
    "end\n"
    "local gone = 0\n"
    "for i = 1, m do\n"
    "  local outer = ARGV[4 + i]\n"
    "  if gone == 0 and outer and outer ~= '' and (redis.call('exists', KEYS[i]) == 0 or\n"
    "      not in_life(KEYS[m + i], outer)) then\n"
    "    gone = i\n"
    "  end\n"
    "end\n"
    "for i = 1, m do\n"
    "  local key, tok, att = KEYS[i], KEYS[2 * m + i], KEYS[m + i]\n"
    "  local before\n"
    "  if redis.call('exists', key) == 0 then\n"
    "    if fenced then next_token(tok) end\n"
    "    redis.call('hset', key, ARGV[2], 1)\n"
    "    redis.call('hset', att, 'e', ARGV[3])\n"
    "  else\n"
    "    if (ARGV[4 + i] or '') == '' then before = redis.call('pttl', key) end\n"
    "    redis.call('hincrby', key, ARGV[2], 1)\n"
    "  end\n"
    "  redis.call('pexpire', key, ARGV[1])\n"
    "  local rec = (redis.call('hget', att, 'e') or '') .. '|' .. ARGV[2]\n"
    "  if before then rec = before .. '|' .. rec end\n"
    "  redis.call('hset', att, ARGV[3], rec)\n"
    "  if redis.call('pttl', att) < tonumber(ARGV[1]) then redis.call('pexpire', att, ARGV[1]) end\n"
    "end\n"
    "return {1, 0, gone}\n",
    "", NULL};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Twins made from the scripts' own text at init, so they cannot drift. */
static struct script script_release_sharded = {"release_sharded", NULL, "", NULL};
static struct script script_force_release_sharded = {"force_release_sharded", NULL, "", NULL};

/* src with every 'publish' call spelled 'spublish', into out (static
 * storage: a library that is unloaded, as Lua unloads its modules, must
 * leave nothing allocated behind). NULL if it does not fit. */
static char *with_spublish(const char *src, char *out, size_t size)
{
    static const char from[] = "'publish'";
    char *o = out, *end = out + size;
    for (const char *p = src;;) {
        const char *q = strstr(p, from);
        size_t k = q ? (size_t)(q - p) : strlen(p);
        if ((size_t)(end - o) < k + 11)
            return NULL;
        memcpy(o, p, k);
        o += k;
        if (!q)
            break;
        memcpy(o, "'spublish'", 10);
        o += 10;
        p = q + sizeof from - 1;
    }
    *o = '\0';
    return out;
}

const struct script *script_sharded_twin(const struct script *s)
{
    scripts_init();
    return s ? s->sharded : NULL;
}

size_t script_make_sharded(struct script *s, struct script *twin, char *buf, size_t size)
{
    if (!strstr(s->source, "'publish'") || !with_spublish(s->source, buf, size))
        return 0;
    if (!twin->name)
        twin->name = s->name;
    twin->source = buf;
    sha1_hex(buf, strlen(buf), twin->sha);
    s->sharded = twin;
    return strlen(buf) + 1;
}

/* The scripts of each format: what a connection loads. */
static struct script *const redisson_scripts[] = {
    &script_acquire, &script_release, &script_undo, &script_renew,
    &script_verify, &script_force_release, &script_token_floor, &script_multi_acquire};
static struct script *const classic_scripts[] = {
    &script_classic_acquire, &script_classic_release, &script_classic_undo,
    &script_classic_renew, &script_classic_verify, &script_force_release,
    &script_classic_multi_acquire};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void compute_shas(void)
{
    static char release_src[8192], force_src[1024], classic_release_src[1024];
    static struct script classic_release_sharded = {"classic_release_sharded", NULL, "", NULL};
    script_make_sharded(&script_release, &script_release_sharded, release_src,
                        sizeof release_src);
    script_make_sharded(&script_force_release, &script_force_release_sharded, force_src,
                        sizeof force_src);
    script_make_sharded(&script_classic_release, &classic_release_sharded,
                        classic_release_src, sizeof classic_release_src);
    for (size_t i = 0; i < COUNT(redisson_scripts); i++)
        sha1_hex(redisson_scripts[i]->source, strlen(redisson_scripts[i]->source),
                 redisson_scripts[i]->sha);
    for (size_t i = 0; i < COUNT(classic_scripts); i++)
        sha1_hex(classic_scripts[i]->source, strlen(classic_scripts[i]->source),
                 classic_scripts[i]->sha);
    /* loaded where it is first called (a NOSCRIPT there): it writes the
     * resource, not a lock, and most connections never call it */
    sha1_hex(script_fenced_set.source, strlen(script_fenced_set.source), script_fenced_set.sha);
    /* the family's, with the SPUBLISH twins of those that publish: without
     * them a waiter on a sharded cluster (SSUBSCRIBEd) hears no release and
     * only finds the lock free at its next poll. Static storage: a library
     * that is unloaded leaves nothing behind. */
    struct script *const *family;
    size_t nf = scripts_family(&family);
    static struct script family_twins[24];
    static char family_pool[64 * 1024];
    size_t used = 0;
    for (size_t i = 0; i < nf && i < COUNT(family_twins); i++) {
        sha1_hex(family[i]->source, strlen(family[i]->source), family[i]->sha);
        used += script_make_sharded(family[i], &family_twins[i], family_pool + used,
                                    sizeof family_pool - used);
    }
}

/* The lock family's kinds the engine runs (lock_calls.c): their scripts are
 * loaded beside the lock's. */
static const struct script *const engine_family[] = {
    &fscript_read_acquire, &fscript_read_release, &fscript_write_acquire,
    &fscript_write_release, &fscript_rw_undo, &fscript_rw_renew, &fscript_write_withdraw,
    &fscript_fair_acquire, &fscript_fair_release, &fscript_fair_withdraw, &fscript_fair_undo,
    &fscript_fair_renew, &fscript_sem_acquire, &fscript_sem_release, &fscript_psem_acquire,
    &fscript_psem_release, &fscript_psem_available};

size_t scripts_engine(const struct script **out, bool twins, bool classic)
{
    struct script *const *all = classic ? classic_scripts : redisson_scripts;
    size_t count = classic ? COUNT(classic_scripts) : COUNT(redisson_scripts);
    size_t n = 0;
    scripts_init();
    for (size_t i = 0; i < count; i++) {
        out[n++] = all[i];
        if (twins && all[i]->sharded)
            out[n++] = all[i]->sharded;
    }
    for (size_t i = 0; !classic && i < COUNT(engine_family); i++) {
        out[n++] = engine_family[i];
        if (twins && engine_family[i]->sharded)
            out[n++] = engine_family[i]->sharded;
    }
    return n;
}

void scripts_init(void)
{
    pthread_once(&init_once, compute_shas);
}
