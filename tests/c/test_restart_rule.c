/*
 * test_restart_rule.c - the node-restart guard's rule (c/src/engine/
 * restart_rule.c) alone: pure functions, no Redis. Both drivers keep a
 * restarted node's grants out of the quorum by this rule; these cases pin
 * what an INFO server answer means and for how long.
 */
#include <string.h>

#include "check.h"
#include "cmd.h"
#include "restart_rule.h"

#define RUN_A "1111111111111111111111111111111111111111"
#define RUN_B "2222222222222222222222222222222222222222"
#define LEASE 30000

static const char *info(const char *run_id, int uptime_s)
{
    static char buf[256];
    snprintf(buf, sizeof buf,
             "# Server\r\nredis_version:7.0.15\r\nrun_id:%s\r\ntcp_port:6379\r\n"
             "uptime_in_seconds:%d\r\n", run_id, uptime_s);
    return buf;
}

TEST(on_by_default_for_three_nodes_never_for_one)
{
    CHECK(!restart_rule_on(-1, 1) && !restart_rule_on(-1, 2), "default: off below three");
    CHECK(restart_rule_on(-1, 3) && restart_rule_on(-1, 5), "default: on from three");
    CHECK(restart_rule_on(1, 2) && !restart_rule_on(0, 5), "the option decides");
    CHECK(!restart_rule_on(1, 1), "one node: nothing to outvote");
done:;
}

TEST(a_first_look_is_not_a_restart_and_the_same_run_is_not_either)
{
    struct node_life life = {{0}, 0};
    restart_rule_observe(&life, info(RUN_A, 1), 100000);
    CHECK(strcmp(life.run_id, RUN_A) == 0, "recorded %s", life.run_id);
    CHECK(restart_rule_left_ms(&life, LEASE, 100000) == 0, "a first start is not guarded");
    restart_rule_observe(&life, info(RUN_A, 5), 104000);
    CHECK(restart_rule_left_ms(&life, LEASE, 104000) == 0, "same run_id: counted");
done:;
}

TEST(a_new_run_id_keeps_the_node_out_for_the_lease_from_its_restart)
{
    struct node_life life = {{0}, 0};
    restart_rule_observe(&life, info(RUN_A, 100), 100000);
    /* seen again 10 s later: it restarted 2 s ago */
    restart_rule_observe(&life, info(RUN_B, 2), 110000);
    CHECK(life.restarted_ms == 108000, "restarted at %lld", (long long)life.restarted_ms);
    CHECK(restart_rule_left_ms(&life, LEASE, 110000) == 28000, "left %lld",
          (long long)restart_rule_left_ms(&life, LEASE, 110000));
    char why[200];
    size_t len = restart_rule_why(why, sizeof why, 0, "10.0.0.3:6379", &life, 28000, 110000);
    CHECK(len == strlen(why) && strstr(why, "10.0.0.3:6379 restarted 2000 ms ago") &&
              strstr(why, "28000 ms more"), "why: %s", why);
    len = restart_rule_why(why, sizeof why, len, "n2", &life, 5, 110000);
    CHECK(strstr(why, "; n2 restarted"), "two nodes are joined: %s", why);
    /* the lease has passed since the restart: counted again, record cleared */
    CHECK(restart_rule_left_ms(&life, LEASE, 138000) == 0, "counted at the lease's end");
    CHECK(life.restarted_ms == 0, "cleared");
    CHECK(restart_rule_left_ms(&life, LEASE, 120000) == 0, "stays cleared");
done:;
}

TEST(an_answer_it_cannot_read_changes_nothing)
{
    struct node_life life = {{0}, 0};
    restart_rule_observe(&life, info(RUN_A, 100), 100000);
    restart_rule_observe(&life, NULL, 101000); /* no answer, or an error */
    restart_rule_observe(&life, "# Server\r\nuptime_in_seconds:1\r\n", 101000);
    restart_rule_observe(&life, "# Server\r\nrun_id:" RUN_B "\r\n", 101000); /* no uptime */
    char long_id[80];
    memset(long_id, '3', 60);
    long_id[60] = '\0';
    restart_rule_observe(&life, info(long_id, 1), 101000);
    CHECK(strcmp(life.run_id, RUN_A) == 0 && life.restarted_ms == 0, "kept %s, %lld",
          life.run_id, (long long)life.restarted_ms);
done:;
}

TEST(the_command_is_info_server)
{
    struct rlc_cmd *cmd = restart_rule_info();
    CHECK(cmd && cmd->len == strlen("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n") &&
              memcmp(cmd->data, "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n", cmd->len) == 0,
          "bytes");
done:
    if (cmd)
        cmd_unref(cmd);
}

RUN_TESTS(CASE(on_by_default_for_three_nodes_never_for_one),
          CASE(a_first_look_is_not_a_restart_and_the_same_run_is_not_either),
          CASE(a_new_run_id_keeps_the_node_out_for_the_lease_from_its_restart),
          CASE(an_answer_it_cannot_read_changes_nothing), CASE(the_command_is_info_server))
