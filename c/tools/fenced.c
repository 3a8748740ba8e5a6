/*
 * fenced.c - "fenced-set KEY VALUE --token N": a write at the resource that
 * a stale lock holder cannot make (rlc_fenced_set).
 *
 *   token=$(...)   # the fencing token of the hold, from the program holding it
 *   redlockc --nodes redis://store:6379 fenced-set balance:42 100 --token "$token"
 *
 * Exit status: 0 written, 1 refused (a larger token is stored; nothing was
 * written), 64 usage, 69 Redis unreachable or refusing.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DEFAULT_NODES "redis://127.0.0.1:6379"

/* Options of the main parser that take a value (their value is not the
 * subcommand's name). */
static int takes_value(const char *arg)
{
    static const char *const with_value[] = {"--wait", "--lease", "--kill-after", "--nodes",
                                             "--options", "-w", "-l", "-k"};
    for (size_t i = 0; i < sizeof with_value / sizeof with_value[0]; i++)
        if (strcmp(arg, with_value[i]) == 0)
            return 1;
    return 0;
}

int cli_is_fenced_set(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (argv[i][0] == '-') {
            i += takes_value(argv[i]);
            continue;
        }
        return strcmp(argv[i], "fenced-set") == 0;
    }
    return 0;
}

int cli_fenced_set(int argc, char **argv)
{
    static const struct option opts[] = {
        {"token", required_argument, NULL, 't'}, {"nodes", required_argument, NULL, 'N'},
        {"options", required_argument, NULL, 'O'}, {NULL, 0, NULL, 0}};
    const char *nodes = NULL, *options = NULL, *token_s = NULL;
    int c;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, ":t:", opts, NULL)) != -1) {
        switch (c) {
        case 't': token_s = optarg; break;
        case 'N': nodes = optarg; break;
        case 'O': options = optarg; break;
        default:
            cli_err("fenced-set: bad option %s (it takes --token N, --nodes, --options)",
                    argv[optind - 1]);
            return CLI_USAGE;
        }
    }
    /* argv[optind] is "fenced-set" (getopt moved the positionals last). */
    if (argc - optind != 3) {
        cli_err("usage: redlockc [--nodes URI] fenced-set KEY VALUE --token N");
        return CLI_USAGE;
    }
    const char *key = argv[optind + 1], *value = argv[optind + 2];
    char *end;
    errno = 0;
    unsigned long long token = token_s && *token_s != '-' ? strtoull(token_s, &end, 10) : 0;
    if (!token_s || errno || *end || token == 0) {
        cli_err("fenced-set wants --token N, the lock's fencing token (1 .. 2^64-1)");
        return CLI_USAGE;
    }
    if (!nodes || !*nodes)
        nodes = getenv("REDLOCKC_NODES");
    rlc_client *client = NULL;
    int rc = rlc_client_new(&client, nodes && *nodes ? nodes : DEFAULT_NODES, options);
    int applied = 0;
    if (rc == RLC_OK)
        rc = rlc_fenced_set(client, key, value, strlen(value), token, &applied);
    if (rc != RLC_OK)
        cli_err("fenced-set '%s': %s", key, rlc_errmsg());
    else if (!applied)
        fprintf(stderr, "redlockc: fenced-set '%s' refused: a larger token than %llu is stored\n",
                key, token);
    rlc_client_free(client);
    return rc != RLC_OK ? cli_status_exit(rc) : applied ? 0 : 1;
}
