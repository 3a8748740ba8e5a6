-- LuaRocks build of the Lua 5.4 module (require "redlockc"): SWIG generates
-- redlockc_core from bindings/swig/redlockc.i and it is compiled against an
-- installed libredlockc (the libredlockc-dev package, or `cmake --install`
-- into a prefix given as REDLOCKC_DIR=<prefix>). From a checkout:
--   luarocks --lua-version 5.4 make packaging/redlockc-1.1.0-1.rockspec [REDLOCKC_DIR=<prefix>]
-- From the source archive the build makes (scripts/lua_source_archive.sh, or
-- `cmake --build <build> --target lua_source_archive`, into
-- <build>/packaging/lua, with a copy of this rockspec naming the archive by
-- its file:// URL, and the two packed into a .src.rock):
--   luarocks --lua-version 5.4 install <dir>/redlockc-1.1.0-1.src.rock [REDLOCKC_DIR=<prefix>]
--   luarocks --lua-version 5.4 install <dir>/redlockc-1.1.0-1.rockspec [REDLOCKC_DIR=<prefix>]
-- Needs swig (4.x) and a C compiler. The C module gets an absolute RUNPATH to
-- the libredlockc it was built against (LuaRocks moves the module, so the
-- $ORIGIN-relative RUNPATH of the CMake install would not hold).
rockspec_format = "3.0"
package = "redlockc"
version = "1.1.0-1"

source = {
  -- The archive scripts/lua_source_archive.sh makes, beside this rockspec
  -- (a relative file URL: luarocks resolves it in the directory it runs in).
  -- `luarocks make` builds the checkout it runs in and reads no archive.
  url = "redlockc-1.1.0.tar.gz",
  dir = "redlockc-1.1.0",
}

description = {
  summary = "Distributed locks on Redis: Redisson-compatible reentrant locks and Redlock",
  detailed = [[
Lua 5.4 binding of libredlockc: reentrant locks in Redisson's data layout,
kept alive by a watchdog, and the Redlock algorithm over N Redis masters.
Expected failures return nil, err, code; counts and milliseconds are integers.]],
  license = "MIT",
  labels = { "redis", "lock", "redlock", "redisson" },
}

dependencies = {
  "lua >= 5.4, < 5.5",
}

external_dependencies = {
  REDLOCKC = { header = "redlockc.h", library = "redlockc" },
}

build = {
  type = "command",
  build_command = [[
mkdir -p build.luarocks &&
swig -lua -nomoduleglobal -no-old-metatable-bindings -I"$(REDLOCKC_INCDIR)" -o build.luarocks/redlockc_core_wrap.c bindings/swig/redlockc.i &&
$(CC) $(CFLAGS) -fvisibility=hidden -I"$(LUA_INCDIR)" -I"$(REDLOCKC_INCDIR)" $(LIBFLAG) -o build.luarocks/redlockc_core.so build.luarocks/redlockc_core_wrap.c -L"$(REDLOCKC_LIBDIR)" -lredlockc -Wl,-rpath,"$(REDLOCKC_LIBDIR)"
]],
  install = {
    lua = { redlockc = "bindings/lua/redlockc.lua" },
    lib = { redlockc_core = "build.luarocks/redlockc_core.so" },
  },
}
