/*
 * restart_rule.c - the node-restart guard's rule (restart_rule.h).
 *
 * Redlock's safety over N nodes rests on every node keeping its keys. A
 * node restarted without persistence forgets the locks it granted, and its
 * vote can make a second quorum while the first holder is still valid. The
 * cure antirez gives is a delayed restart: keep a restarted node out for the
 * longest lease. The client does it itself, from what INFO server says.
 *
 * Limit: a client that never saw the node before its restart cannot tell a
 * restart from a first start, and does not guard it (docs/design/redlock.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "restart_rule.h"

bool restart_rule_on(int64_t option, int n_nodes)
{
    return n_nodes > 1 && (option == 1 || (option < 0 && n_nodes >= 3));
}

struct rlc_cmd *restart_rule_info(void)
{
    const char *argv[2] = {"INFO", "server"};
    size_t lens[2] = {4, 6};
    return cmd_format(2, argv, lens);
}

/* "name:value\r\n" of an INFO reply: the value's start, or NULL. */
static const char *field(const char *info, const char *name, size_t *len)
{
    size_t n = strlen(name);
    for (const char *p = info; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            *len = strcspn(v, "\r\n");
            return v;
        }
    }
    return NULL;
}

void restart_rule_observe(struct node_life *life, const char *info, int64_t now_ms)
{
    size_t idlen = 0, uplen = 0;
    const char *id = info ? field(info, "run_id", &idlen) : NULL;
    const char *up = id ? field(info, "uptime_in_seconds", &uplen) : NULL;
    if (!id || !up || idlen >= sizeof life->run_id)
        return;
    if (life->run_id[0] &&
        (strlen(life->run_id) != idlen || memcmp(life->run_id, id, idlen) != 0)) {
        life->restarted_ms = now_ms - strtoll(up, NULL, 10) * 1000;
        if (life->restarted_ms == 0)
            life->restarted_ms = -1; /* 0 means none */
    }
    memcpy(life->run_id, id, idlen);
    life->run_id[idlen] = '\0';
}

int64_t restart_rule_left_ms(struct node_life *life, int64_t max_lease_ms, int64_t now_ms)
{
    if (life->restarted_ms == 0)
        return 0;
    int64_t left = life->restarted_ms + max_lease_ms - now_ms;
    if (left <= 0)
        life->restarted_ms = 0;
    return left > 0 ? left : 0;
}

size_t restart_rule_why(char *why, size_t size, size_t len, const char *label,
                        const struct node_life *life, int64_t left_ms, int64_t now_ms)
{
    if (len >= size)
        return len;
    int w = snprintf(why + len, size - len,
                     "%s%s restarted %lld ms ago (new run_id), not counted for %lld ms more",
                     len ? "; " : "", label, (long long)(now_ms - life->restarted_ms),
                     (long long)left_ms);
    return w < 0 ? len : len + (size_t)w;
}
