# Sourced by tests/openresty/run.sh (its expect_eq, free_port, stop_nginx,
# $work, $user, $LIB, $REDIS_PORT, $TOP): bindings/luajit/README.md's nginx
# example, cut out of the README (tests/packaging/readme_blocks.py), is the
# whole nginx.conf of a fresh nginx: no -p prefix, no template. Changed in it
# only what names this machine: redis' port (6379), the listen port (8080),
# and resty.redlockc from the source tree ahead of /usr/share/lua/5.1 (where
# the Debian package puts it). Prepended, as nginx.conf settings of this run:
# the worker's user (as root), the foreground, the pid file and the error log.
readme_snippet() {
  local dir=$work/readme port i code body
  mkdir -p "$dir"
  port=$(free_port) || return 1
  {
    echo "$user"
    echo "daemon off; pid $dir/nginx.pid; error_log $dir/error.log notice;"
    /usr/bin/python3 "$TOP/tests/packaging/readme_blocks.py" "$TOP/bindings/luajit/README.md" nginx |
      sed -e "s|redis://127.0.0.1:6379|redis://127.0.0.1:$REDIS_PORT|" -e "s|listen 8080;|listen 127.0.0.1:$port;|" \
        -e "s|\"/usr/share/lua/5.1/?.lua;;\"|\"$TOP/bindings/luajit/?.lua;/usr/share/lua/5.1/?.lua;;\"|"
  } >"$dir/nginx.conf" || return 1
  REDLOCKC_LIB=$LIB nginx -c "$dir/nginx.conf" -e "$dir/error.log" &
  README_PID=$!
  code=
  for i in $(seq 100); do # 10 s, until nginx answers
    kill -0 "$README_PID" 2>/dev/null || break
    code=$(curl -s -o "$dir/body" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/pay?id=rm1")
    [ "$code" = 200 ] && break
    sleep 0.1
  done
  expect_eq "GET /pay?id=rm1 on the README's nginx.conf" "200 paid order rm1" "$code $(cat "$dir/body" 2>/dev/null)"
  # Held by another (Redisson-format) owner: the request waits wait_ms, then 409.
  redis-cli -p "$REDIS_PORT" hset order:rm2 "other-owner:1" 1 >/dev/null
  redis-cli -p "$REDIS_PORT" pexpire order:rm2 30000 >/dev/null
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 "http://127.0.0.1:$port/pay?id=rm2")
  expect_eq "GET /pay on a lock held elsewhere: 409 once wait_ms ran out" 409 "$code"
  redis-cli -p "$REDIS_PORT" del order:rm2 >/dev/null
  stop_nginx README_PID
  expect_eq "no error lines in the README nginx's log" "" \
    "$(grep -E '\[(error|crit|alert|emerg)\]' "$dir/error.log")"
}
