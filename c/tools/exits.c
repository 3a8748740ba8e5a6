/*
 * exits.c - the exit status of the redlockc command for a library status:
 * one table, shared by every subcommand (cli.h lists the codes).
 */
#include "cli.h"

int cli_status_exit(int rc)
{
    switch (rc) {
    case RLC_NOT_ACQUIRED:
        return CLI_BUSY;
    case RLC_E_INVAL:
        return CLI_USAGE;
    case RLC_E_NOMEM:
        return CLI_INTERNAL;
    case RLC_E_LOST:
    case RLC_E_NOT_OWNER:
        return CLI_LOST;
    default: /* connect, timeout, no quorum, server, protocol, auth, closed */
        return CLI_UNAVAILABLE;
    }
}
