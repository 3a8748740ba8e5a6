/*
 * fault_proxy - the stall/cut proxy as a program, controlled on stdin.
 *
 *   fault_proxy TARGET_PORT [LISTEN_PORT] [LIFETIME_S]
 *
 * Prints "listening <port>" and then one reply line per command read from
 * stdin (proxy.c lists them: stall/release/cut N|all, cutonreply N, list,
 * count, quit). Exits on EOF of stdin, "quit", or after LIFETIME_S
 * (default 600). Example, from a shell:
 *
 *   coproc P { fault_proxy 6379; }; read -r _ port <&"${P[0]}"
 *   echo "stall 0" >&"${P[1]}"; read -r reply <&"${P[0]}"
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "netfault.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TARGET_PORT [LISTEN_PORT] [LIFETIME_S]\n", argv[0]);
        return 2;
    }
    int port = 0;
    int lfd = nf_listen(argc > 2 ? atoi(argv[2]) : 0, &port);
    if (lfd < 0) {
        perror("listen");
        return 1;
    }
    printf("listening %d\n", port);
    fflush(stdout);
    long life = argc > 3 ? atol(argv[3]) : 600;
    return proxy_serve(lfd, atoi(argv[1]), 0, 1, (int64_t)life * 1000);
}
