#!/usr/bin/env bash
# Fuzzes the two parsers with libFuzzer, a bounded run that must find nothing.
#   bash tests/fuzz/run.sh [SECS]     SECS per target (default 60); both run at once
# The targets are built here with Debian's clang straight from c/src/uri.c,
# options.c and error.c (the parsers do no I/O), under ASan and UBSan, into
# $RLC_BUILD_DIR/fuzz. Each run starts from the seed corpus in
# tests/fuzz/corpus (copied, so the repository's seeds stay as they are);
# a crash leaves its input in $RLC_BUILD_DIR/fuzz/artifacts-<target>/.
# To keep an input as a new seed: cp it into tests/fuzz/corpus/<target>/.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-60}
BUILD=${RLC_BUILD_DIR:-$PWD/build}
OUT=$BUILD/fuzz
CC=${FUZZ_CC:-clang}
TARGETS=(uri options)

if ! [[ $SECS =~ ^[0-9]+$ ]] || ((SECS < 1)); then
  echo "usage: $0 [SECONDS per target]" >&2
  exit 64
fi
mkdir -p "$OUT"

echo "--- building fuzz targets with $CC"
for t in "${TARGETS[@]}"; do
  "$CC" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra -Werror -D_GNU_SOURCE -Ic/include -Ic/src/engine \
    "tests/fuzz/fuzz_$t.c" c/src/engine/uri.c c/src/engine/options.c c/src/engine/error.c -lm \
    -o "$OUT/fuzz_$t"
done

echo "--- fuzzing each target for $SECS s"
pids=()
for t in "${TARGETS[@]}"; do
  work=$OUT/corpus-$t
  rm -rf "$work" "$OUT/artifacts-$t"
  mkdir -p "$work" "$OUT/artifacts-$t"
  cp tests/fuzz/corpus/$t/* "$work"/
  # -timeout: one input taking > 10 s is a hang; -rss_limit_mb: a blow-up.
  "$OUT/fuzz_$t" "$work" -dict="tests/fuzz/$t.dict" -max_total_time="$SECS" \
    -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="$OUT/artifacts-$t/" >"$OUT/fuzz_$t.log" 2>&1 &
  pids+=($!)
done

fail=0
for i in "${!TARGETS[@]}"; do
  t=${TARGETS[$i]}
  rc=0
  wait "${pids[$i]}" || rc=$?
  log=$OUT/fuzz_$t.log
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
  findings=$(find "$OUT/artifacts-$t" -type f | wc -l)
  echo "fuzz_$t: ${execs:-?} execs in $SECS s, coverage ${cov:-?} edges, ${ft:-?} features," \
    "corpus ${corp:-?} (from $(ls tests/fuzz/corpus/$t | wc -l) seeds), findings $findings, exit $rc"
  if ((rc != 0 || findings != 0)); then
    fail=1
    echo "fuzz_$t FOUND something; log tail:"
    tail -40 "$log"
    for f in "$OUT/artifacts-$t"/*; do
      [ -e "$f" ] && echo "reproduce: $OUT/fuzz_$t $f"
    done
  fi
done
exit $fail
