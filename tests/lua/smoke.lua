-- smoke.lua URI NAME [OPTIONS] - an installed module's first use: take a
-- lock, look, give it back. Prints "acquired, owned=true, count=1, released".
local redlockc = require "redlockc"
local uri, name, options = ...
local client = assert(redlockc.client(uri, options))
local lock <close> = assert(client:lock(name))
assert(lock:acquire{ wait_ms = 1000 })
local owned, count = lock:owned(), lock:hold_count()
assert(lock:release())
print(string.format("acquired, owned=%s, count=%s, released", owned, count))
