-- tls_app.lua - resty.redlockc over rediss:// (tests/openresty/run.sh, the
-- TLS nginx: nginx_tls.conf.in, whose lua_ssl_trusted_certificate is the
-- tests' CA).
--   /tls/try?nodes=&options=&lock=   a client of its own for this request:
--       acquire (wait 2 s), a second owner's try (busy), release, close.
--       Says "ok token=<n> second=busy" or "<step> failed: <err> (<code>)";
--       the client has fencing=1 (after the options given), for the token.
local redlockc = require "resty.redlockc"

local _M = {}

function _M.try()
  local args = ngx.req.get_uri_args()
  local options = (args.options and args.options ~= "" and args.options .. ";" or "") ..
                  "fencing=1"
  local c, err, code = redlockc.client(args.nodes, options)
  if not c then
    ngx.say("client failed: ", err, " (", redlockc.errname(code), ")")
    return
  end
  local lock = assert(c:lock(args.lock))
  local other = assert(c:lock(args.lock, 7))
  local ok
  ok, err, code = lock:acquire{ wait_ms = 2000 }
  if not ok then
    c:close()
    ngx.say("acquire failed: ", err, " (", redlockc.errname(code), ")")
    return
  end
  local token = lock:fencing_token()
  local _, second = other:acquire{ wait_ms = 0 }
  ok, err, code = lock:release()
  c:close()
  if not ok then
    ngx.say("release failed: ", err, " (", redlockc.errname(code), ")")
    return
  end
  ngx.say("ok token=", type(token) == "number" and string.format("%d", token) or tostring(token),
          " second=", tostring(second))
end

return _M
