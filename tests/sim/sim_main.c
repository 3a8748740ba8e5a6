/*
 * sim_main.c - host of the deterministic simulation (sim.lua).
 *
 * It hands the library's own Lua scripts (c/src/scripts.c, compiled in) to
 * an embedded Lua 5.4, which runs simulated Redis nodes, a simulated network
 * and clients that follow the library's protocol, all on simulated time.
 *
 *   sim_redlockc SIM.LUA [seed=N] [schedules=N] [profile=short|long] [mutate=NAME]
 *
 * Exits 0 when every schedule kept every invariant, 1 otherwise; a failing
 * schedule prints its seed, and seed=N schedules=1 replays it exactly.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>

#include "scripts.h"

static void push_script(lua_State *L, const struct script *s)
{
    lua_pushstring(L, s->source);
    lua_setfield(L, -2, s->name);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s sim.lua [name=value ...]\n", argv[0]);
        return 2;
    }
    lua_State *L = luaL_newstate();
    if (!L)
        return 2;
    luaL_openlibs(L);
    lua_newtable(L);
    push_script(L, &script_acquire);
    push_script(L, &script_release);
    push_script(L, &script_undo);
    push_script(L, &script_renew);
    push_script(L, &script_force_release);
    push_script(L, &script_token_floor);
    lua_setglobal(L, "SCRIPTS");
    lua_newtable(L);
    for (int i = 2; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    int rc = 2;
    if (luaL_dofile(L, argv[1]) != LUA_OK)
        fprintf(stderr, "sim: %s\n", lua_tostring(L, -1));
    else
        rc = (int)lua_tointeger(L, -1);
    lua_close(L);
    return rc;
}
