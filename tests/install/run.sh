#!/usr/bin/env bash
# The install test: psr built and installed into a temporary prefix, as a
# package would ship it, then used the two ways an application finds it.
#  - The installed files: headers, library (soname by the rule of docs/api.md,
#    "Compatibility"), psr.pc, the CMake package, the manual page, the docs.
#  - libpsr needs no CLBlast (readelf -d), psr.pc requires none.
#  - tests/install/app.c built with `pkg-config --cflags --libs psr`, and
#    with CMake's find_package(psr) (tests/install/CMakeLists.txt) from a
#    copy of the prefix moved elsewhere; each run with CLBlast present and
#    absent (PSR_CLBLAST_LIBRARY=/nonexistent).
#  - find_package(psr) refuses a version with another ABI.
# The build uses -Dclblast=disabled: the LM head must work from run-time
# loading alone, without CLBlast's header at build time.
#
# Usage: tests/install/run.sh [--require-clblast] [meson setup options]
#   --require-clblast  fail, rather than skip the runs with CLBlast present,
#                      where CLBlast is not installed (CI)
# Needs what tools/bootstrap.sh installs (cmake among it) and an OpenCL
# device (PoCL's will do). Temporary files go under $TMPDIR (default /tmp),
# and are kept when a step fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$PWD

require_clblast=0
if [ "${1:-}" = "--require-clblast" ]; then
  require_clblast=1
  shift
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/psr-install.XXXXXX")
trap 'echo "install test FAILED (files kept in $tmp)" >&2' ERR
step() { printf '\n== %s\n' "$*"; }
die() { printf 'FAIL: %s\ninstall test FAILED (files kept in %s)\n' "$*" "$tmp" >&2; exit 1; }

# The runs never touch the user's caches.
export PSR_CACHE_DIR="$tmp/psr-cache"
export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$tmp/pocl-cache}"

step "build and install into $tmp/prefix"
prefix="$tmp/prefix"
meson setup "$tmp/build" --prefix "$prefix" -Dtests=disabled -Dclblast=disabled "$@" >"$tmp/setup.log" ||
  { cat "$tmp/setup.log"; die "meson setup"; }
meson compile -C "$tmp/build" >"$tmp/compile.log" || { cat "$tmp/compile.log"; die "meson compile"; }
meson install -C "$tmp/build" --no-rebuild >"$tmp/install.log" || { cat "$tmp/install.log"; die "meson install"; }

pc=$(find "$prefix" -name psr.pc)
[ -n "$pc" ] || die "no psr.pc installed"
libdir=$(dirname "$(dirname "$pc")")
version=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --modversion psr)
IFS=. read -r major minor _ <<<"$version"
if [ "$major" = 0 ]; then soname="libpsr.so.$major.$minor"; else soname="libpsr.so.$major"; fi
echo "psr $version, libdir ${libdir#"$prefix"/}, soname $soname"

step "installed files"
for f in include/psr/psr.h include/psr/psr_version.h include/psr/psr_experimental.h \
         "${libdir#"$prefix"/}/libpsr.so.$version" "${libdir#"$prefix"/}/$soname" \
         "${libdir#"$prefix"/}/libpsr.so" \
         "${libdir#"$prefix"/}/cmake/psr/psrConfig.cmake" \
         "${libdir#"$prefix"/}/cmake/psr/psrConfigVersion.cmake" \
         share/man/man1/psr.1 share/doc/psr/api.md bin/psr; do
  [ -e "$prefix/$f" ] || die "not installed: $f"
  echo "ok $f"
done
if command -v man >/dev/null && [ "$(man -l "$prefix/share/man/man1/psr.1" 2>/dev/null | grep -c 'PSR_CLBLAST_LIBRARY')" -eq 0 ]; then
  die "psr.1 does not render (or lacks PSR_CLBLAST_LIBRARY)"
fi

step "readelf -d libpsr: its soname, and no CLBlast"
dyn=$(readelf -d "$libdir/libpsr.so.$version")
echo "$dyn" | grep -E 'NEEDED|SONAME'
echo "$dyn" | grep -q "Library soname: \[$soname\]" || die "soname is not $soname"
if echo "$dyn" | grep -qi clblast; then die "libpsr links CLBlast"; fi

step "pkg-config"
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
sed -n '/^Requires/p;/^Libs/p;/^Cflags/p' "$pc"
if pkg-config --print-requires --print-requires-private psr | grep -qi clblast ||
   pkg-config --libs --static psr | grep -qi clblast; then
  die "psr.pc names CLBlast"
fi
pkg-config --print-requires psr | grep -q OpenCL || die "psr.pc does not require OpenCL"

# CLBlast present: is it installed for the dynamic linker? (The list is
# read whole first: grep -q stops reading at its match, and under pipefail
# the writer's SIGPIPE would fail the test.)
clblast_here=0
linker_libs=$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null || true)
if grep -q 'libclblast\.so' <<<"$linker_libs"; then
  clblast_here=1
elif [ "$require_clblast" = 1 ]; then
  die "CLBlast is not installed (Debian: libclblast1), and --require-clblast"
else
  echo "note: CLBlast is not installed here: the runs with CLBlast present are skipped"
fi

# run NAME EXE: the app with CLBlast absent, then present; prints its tokens line.
run_app() {
  local name=$1 exe=$2 out
  out=$(PSR_CLBLAST_LIBRARY=/nonexistent "$exe" lm-head-not-supported) ||
    { echo "$out"; die "$name, CLBlast absent"; }
  sed "s/^/  $name, absent: /" <<<"$out" >&2
  echo "$out" | grep -q 'PSR_ERR_NOT_SUPPORTED.*/nonexistent' ||
    die "$name: the NOT_SUPPORTED detail does not name /nonexistent"
  echo "$out" | grep '^tokens:' >"$tmp/$name.absent"
  if [ "$clblast_here" = 1 ]; then
    out=$(env -u PSR_CLBLAST_LIBRARY "$exe" lm-head-ok) || { echo "$out"; die "$name, CLBlast present"; }
    sed "s/^/  $name, present: /" <<<"$out" >&2
    echo "$out" | grep '^tokens:' >"$tmp/$name.present"
    cmp -s "$tmp/$name.absent" "$tmp/$name.present" || die "$name: tokens differ with CLBlast"
  fi
  cat "$tmp/$name.absent"
}

step "app through pkg-config"
cc=${CC:-cc}
# shellcheck disable=SC2046  # pkg-config's output is meant to be split
$cc -std=c11 -Wall -Wextra -Werror "$src/tests/install/app.c" -o "$tmp/app-pkgconfig" \
  $(pkg-config --cflags --libs psr) -lm
readelf -d "$tmp/app-pkgconfig" | grep -q "Shared library: \[$soname\]" || die "app does not need $soname"
tokens_pc=$(LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run_app pkgconfig "$tmp/app-pkgconfig")

step "app through CMake, from the prefix moved to $tmp/moved"
mv "$prefix" "$tmp/moved"
cmake -S "$src/tests/install" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/moved" \
  -DPSR_REQUEST="$major.$minor" -DCMAKE_BUILD_TYPE=Release >"$tmp/cmake.log" ||
  { cat "$tmp/cmake.log"; die "cmake configure"; }
grep 'psr .* from' "$tmp/cmake.log"
cmake --build "$tmp/cmake-build" >"$tmp/cmake-build.log" || { cat "$tmp/cmake-build.log"; die "cmake build"; }
tokens_cmake=$(run_app cmake "$tmp/cmake-build/app")
[ "$tokens_pc" = "$tokens_cmake" ] || die "tokens differ: pkg-config $tokens_pc, CMake $tokens_cmake"

step "find_package(psr) refuses another ABI"
others=("$major.$((minor + 1))" "$((major + 1)).0")
if [ "$major" = 0 ] && [ "$minor" -gt 0 ]; then others+=("0.$((minor - 1))"); fi
for other in "${others[@]}"; do
  if cmake -S "$src/tests/install" -B "$tmp/cmake-other" -DCMAKE_PREFIX_PATH="$tmp/moved" \
       -DPSR_REQUEST="$other" >"$tmp/cmake-other.log" 2>&1; then
    die "find_package(psr $other) accepted psr $version"
  fi
  echo "ok: psr $other refused"
  rm -rf "$tmp/cmake-other"
done

trap - ERR
rm -rf "$tmp"
printf '\ninstall test passed: psr %s, %s\n' "$version" "$tokens_pc"
