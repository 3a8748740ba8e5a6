/*
 * redlockc.i - the one SWIG interface for every SWIG-generated binding.
 *
 * The generated module ("redlockc_core") is never used raw by callers: each
 * language wraps it in its own idioms (bindings/python/redlockc/,
 * bindings/lua/redlockc.lua). Shared here: the module, the header, opaque
 * handles. Language parts sit behind #ifdef SWIGPYTHON / #ifdef SWIGLUA:
 * typemaps that turn out-parameters into return values and status codes
 * into the language's error convention.
 */
%module redlockc_core

%{
#include "redlockc.h"
%}

%include <stdint.i>

#ifdef SWIGPYTHON
/* ---- Python (owned by bindings/python) ---- */
#endif

#ifdef SWIGLUA
/* ---- Lua 5.4 (owned by bindings/lua) ---- */
#endif

%include "redlockc.h"
