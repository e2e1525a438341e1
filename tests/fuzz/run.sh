#!/usr/bin/env bash
# Runs every libFuzzer target of a -Dfuzz=enabled build for SECONDS each,
# starting from its seed corpus (a scratch copy: the repository's corpus
# holds only seeds and the inputs that crashed a target once).
# Usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]
# A crash fails the run and names its input: add that file to
# tests/fuzz/corpus/TARGET/ with the fix, and the unit test `fuzz_TARGET`
# replays it in every build from then on.
set -uo pipefail
build=$1 seconds=${2:-45}
here="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
failed=0
for exe in "$build"/tests/fuzz/fuzz_*; do
  [ -x "$exe" ] && [ -f "$exe" ] || continue
  target=${exe##*/fuzz_}
  mkdir -p "$work/$target/corpus" "$work/$target/crashes"
  cp "$here/corpus/$target"/* "$work/$target/corpus/"
  if "$exe" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/$target/crashes/" \
       "$work/$target/corpus" > "$work/$target/log" 2>&1; then
    echo "fuzz $target: $(grep -o 'number_of_executed_units: [0-9]*' "$work/$target/log" | awk '{print $2}') inputs in ${seconds} s, no crash"
  else
    failed=1
    echo "fuzz $target: FAILED; the input: $(ls "$work/$target/crashes/"* 2>/dev/null | head -1)"
    grep -E "ERROR|SUMMARY|runtime error" "$work/$target/log" | head -20
  fi
done
[ "$failed" -eq 0 ] && rm -rf "$work"
exit "$failed"
