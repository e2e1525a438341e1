#!/usr/bin/env bash
# Installs what psr needs on Debian/Ubuntu and builds it into ./build
# (g++ and cmake: the header and install tests, tests/header, tests/install;
# numpy, pytest and PyOpenCL: the Python package's suite, tests/python).
# Usage: tools/bootstrap.sh [extra meson setup options]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential g++ pkg-config python3 meson ninja-build cmake
  ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-c-headers
  pocl-opencl-icd clinfo
  librandom123-dev libclblast-dev libcmocka-dev
  python3-numpy python3-pytest python3-pyopencl
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ -d build ]; then
  meson setup --reconfigure build "$@"
else
  meson setup build "$@"
fi
meson compile -C build
