/*
 * sentinel_tls.h - a sentinel asked over TLS (a sentinel_tls_fn, resolve.h).
 */
#ifndef RLC_SENTINEL_TLS_H
#define RLC_SENTINEL_TLS_H

#include <stddef.h>

#include "resolve.h"

int sentinel_tls_ask(const struct sentinel_tls_query *q, struct redisReply **reply, char *why,
                     size_t why_len);

#endif
