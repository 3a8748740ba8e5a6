/*
 * check.c - runs the named case (or all) and reports.
 */
#include <stdio.h>
#include <string.h>

#include "check.h"

int check_main(int argc, char **argv, const struct check_case *cases, int n)
{
    int ran = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
            continue;
        check_failed = 0;
        int64_t t0 = check_now_ms();
        cases[i].fn();
        fprintf(stderr, "%s %s (%lld ms)\n", check_failed ? "FAIL" : "ok  ", cases[i].name,
                (long long)(check_now_ms() - t0));
        failed += check_failed;
        ran++;
    }
    if (ran == 0) {
        fprintf(stderr, "no test named '%s'\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    return failed ? 1 : 0;
}
