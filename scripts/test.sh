#!/usr/bin/env bash
# Quick start, command 2: install what is missing, build, and run the whole test suite:
# the format check, the unit tests (ctest + cmocka), and the integration tests (pytest)
# against a real Apache Kafka broker that this script starts and always stops.
# KSIDECAR_BUILD_SANITIZE=1 builds and runs everything with ASan+UBSan.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/install-deps.sh --test
tests/kafka/kafka.sh fetch

echo "== format check (.clang-format)"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find proxy api tests -name '*.[ch]')
if ! clang-format --dry-run --Werror $files; then
  echo "format check failed: run clang-format -i on the files above" >&2
  exit 1
fi

echo "== build"
scripts/build.sh
dir=build
[ "${KSIDECAR_BUILD_SANITIZE:-0}" = 1 ] && dir=build-asan
export KSIDECAR_TEST_BIN="$PWD/$dir/ksidecar" KSIDECAR_TEST_KSTOOL="$PWD/$dir/kstool"
cache="${KSIDECAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ksidecar}"
KSIDECAR_TEST_GRPCURL="$(command -v grpcurl || echo "$cache/bin/grpcurl")"
export KSIDECAR_TEST_GRPCURL

echo "== unit tests"
(cd "$dir" && ctest --output-on-failure)

echo "== integration tests (real Kafka broker)"
tests/kafka/kafka.sh run python3 -m pytest -v -p no:cacheprovider tests/integration "$@"

echo "== client libraries (Python, Go, Node) against the real binary and a real broker"
tests/kafka/kafka.sh run tests/clients/all.sh
