#!/usr/bin/env bash
# Runs the same `psr bench` calls from two trees, alternately, on one
# device: the tree at a base commit (a `git archive` tarball) and this one.
# For the GPU machine, where .git does not travel: make the tarball here
# (git archive --format=tar -o .device/base.tar REV) and carry it.
# Usage: tools/compare_trees.sh BASE_TAR OUT_DIR [bench ...]
#        (default benches: sample verify filters logprobs)
# Then: python3 tools/compare_benches.py OUT_DIR/bench_base.txt OUT_DIR/bench_new.txt
set -uo pipefail
base_tar=$1 out=$2
shift 2
benches=${*:-sample verify filters logprobs}
mkdir -p "$out" /tmp/compare-base
tar -xf "$base_tar" -C /tmp/compare-base
(cd /tmp/compare-base && meson setup /tmp/compare-bb -Dtests=disabled >/dev/null && ninja -C /tmp/compare-bb >/dev/null) ||
  { echo "the base tree does not build"; exit 1; }
meson setup /tmp/compare-nb -Dtests=disabled >/dev/null && ninja -C /tmp/compare-nb >/dev/null ||
  { echo "this tree does not build"; exit 1; }
export PSR_CACHE_DIR=/tmp/compare-cache
for round in 1 2; do
  for tree in base new; do
    dir=/tmp/compare-bb
    [ "$tree" = new ] && dir=/tmp/compare-nb
    for b in $benches; do
      echo "== $tree round $round bench $b" >> "$out/bench_$tree.txt"
      timeout 300 "$dir/tools/psr" bench "$b" >> "$out/bench_$tree.txt" 2>&1
    done
  done
done
