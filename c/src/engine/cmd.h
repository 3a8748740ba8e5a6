/*
 * cmd.h - Redis commands as shareable byte strings.
 *
 * A command is formatted once in RESP and sent to every node of a Redlock
 * fan-out, so it is reference counted: a request that outlives its caller
 * (the caller's deadline passed) keeps its bytes alive on its own.
 */
#ifndef RLC_CMD_H
#define RLC_CMD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct script;

struct rlc_cmd {
    atomic_int refs;
    /* the script an EVALSHA calls (for its EVAL and SPUBLISH forms), else NULL */
    const struct script *script;
    size_t len;
    char data[];
};

/* Formats argv (binary-safe: lens gives each length) as a RESP array. */
struct rlc_cmd *cmd_format(int argc, const char *const *argv, const size_t *lens);
/* The same for NUL-terminated words (at most 8): "SENTINEL", "ASKING"... */
struct rlc_cmd *cmd_words(int argc, const char *const *argv);

/* EVALSHA <sha> <nkeys> keys... args...; argv holds keys then args. */
struct rlc_cmd *cmd_evalsha(const struct script *s, int nkeys, int nargs,
                            const char *const *argv, const size_t *lens);

/* The same call as EVAL <source> ..., for a node that answered NOSCRIPT. */
struct rlc_cmd *cmd_evalsha_to_eval(const struct rlc_cmd *evalsha, const struct script *s);

/* SCRIPT LOAD of s: what every connection sends so that EVALSHA finds s
 * (a loaded script stays until SCRIPT FLUSH or a restart; EVAL's cache is
 * evicted on Redis 7.4+ and Valkey 8). */
struct rlc_cmd *cmd_script_load(const struct script *s);

/* The same EVALSHA naming script `to` instead of `from` (the SHA-1 names
 * have one length, so only those 40 bytes change); NULL without memory or
 * if cmd does not name `from`. */
struct rlc_cmd *cmd_with_script(const struct rlc_cmd *cmd, const struct script *from,
                                const struct script *to);

/* Writes v at buf in base 10 or 16 (lower case), NUL-terminated; returns
 * the digits' count. buf holds at least CMD_U64_MAX bytes. Not snprintf:
 * a lock cycle formats some forty numbers, and printf's machinery was a
 * quarter of the blocking API's user CPU per cycle. */
#define CMD_U64_MAX 21
size_t cmd_u64(char *buf, uint64_t v, unsigned base);
/* The same for a signed value in base 10 (CMD_U64_MAX + 1 bytes). */
size_t cmd_i64(char *buf, int64_t v);
/* "<prefix>:<v>" (v in base 10 or 16) at buf, cut short to size like
 * snprintf; returns the full length: a client's field, an attempt's id. */
int cmd_tagged_u64(const char *prefix, uint64_t v, unsigned base, char *buf, size_t size);

struct rlc_cmd *cmd_ref(struct rlc_cmd *c);
void cmd_unref(struct rlc_cmd *c);

#endif
