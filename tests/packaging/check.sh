# check.sh - assertions for the shell tests (sourced). Each says what it
# expected and what it saw; check_summary prints "N passed, N failed".

CHECK_PASSED=0
CHECK_FAILED=0

pass() {
  echo "ok   - $1"
  CHECK_PASSED=$((CHECK_PASSED + 1))
}

fail() { # DESC EXPECTED SEEN
  echo "FAIL - $1"
  echo "       expected: $2"
  echo "       seen:     $3"
  CHECK_FAILED=$((CHECK_FAILED + 1))
}

expect_eq() { # DESC EXPECTED SEEN
  if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "$2" "$3"; fi
}

expect_match() { # DESC REGEX SEEN
  if [[ $3 =~ $2 ]]; then pass "$1"; else fail "$1" "text matching /$2/" "$3"; fi
}

expect_no_match() { # DESC REGEX SEEN
  if [[ $3 =~ $2 ]]; then fail "$1" "nothing matching /$2/" "$3"; else pass "$1"; fi
}

expect_file() { # DESC PATH: a regular file, not a link
  if [ -f "$2" ] && [ ! -L "$2" ]; then pass "$1"; else fail "$1" "regular file $2" "$(ls -l "$2" 2>&1)"; fi
}

expect_link() { # DESC PATH TARGET
  expect_eq "$1" "$3" "$(readlink "$2" 2>&1)"
}

expect_run() { # DESC CMD...: exit 0; its output is shown if not
  local desc=$1 out rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  if [ $rc -eq 0 ]; then
    pass "$desc"
  else
    fail "$desc" "exit 0" "exit $rc"
    echo "$out" | tail -n 30 | sed 's/^/       | /'
  fi
  return $rc
}

expect_output() { # DESC REGEX CMD...: exit 0 and output matching REGEX
  local desc=$1 re=$2 out rc
  shift 2
  out=$("$@" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && [[ $out =~ $re ]]; then
    pass "$desc"
    echo "$out" | sed 's/^/       | /'
  else
    fail "$desc" "exit 0 and output matching /$re/" "exit $rc: $out"
  fi
}

check_summary() {
  echo "$CHECK_PASSED passed, $CHECK_FAILED failed"
  [ "$CHECK_FAILED" -eq 0 ]
}
