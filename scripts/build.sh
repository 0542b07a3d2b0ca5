#!/usr/bin/env bash
# Configures and builds ksidecar into build/ (or build-asan/ with KSIDECAR_BUILD_SANITIZE=1,
# build-tsan/ with KSIDECAR_BUILD_TSAN=1): every target, or those named as arguments
# (scripts/build.sh ksidecar). CI=true turns warnings into errors. KSIDECAR_BUILD_TESTS=0
# leaves the unit tests out, so cmocka need not be installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dir=build
opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${KSIDECAR_BUILD_SANITIZE:-0}" = 1 ]; then
  dir=build-asan
  opts=(-DCMAKE_BUILD_TYPE=Debug -DKSIDECAR_SANITIZE=ON)
fi
if [ "${KSIDECAR_BUILD_TSAN:-0}" = 1 ]; then
  dir=build-tsan
  opts=(-DCMAKE_BUILD_TYPE=Debug -DKSIDECAR_TSAN=ON)
fi
if [ "${KSIDECAR_BUILD_TESTS:-1}" = 0 ]; then
  opts+=(-DKSIDECAR_TESTS=OFF)
else
  opts+=(-DKSIDECAR_TESTS=ON)
fi
if [ "${CI:-}" = true ] || [ "${KSIDECAR_BUILD_WERROR:-0}" = 1 ]; then
  opts+=(-DKSIDECAR_WERROR=ON)
fi
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S . -B "$dir" "${gen[@]}" "${opts[@]}" >/dev/null
else
  cmake -S . -B "$dir" "${opts[@]}" >/dev/null
fi
targets=()
[ "$#" -gt 0 ] && targets=(--target "$@")
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
