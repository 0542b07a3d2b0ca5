#!/usr/bin/env bash
# ThreadSanitizer run: builds build-tsan/, then runs the unit tests and the gRPC and HTTP
# integration tests against the TSan ksidecar. Fails if TSan reports anything.
#   tests/tsan/run.sh                 (needs KSIDECAR_TEST_BOOTSTRAP, or runs its own broker)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
KSIDECAR_BUILD_TSAN=1 scripts/build.sh
reports="$PWD/build-tsan/tsan-reports"
rm -rf "$reports"
mkdir -p "$reports"
supp="$PWD/build-tsan/tsan-suppressions.txt"
cp tests/tsan/suppressions.txt "$supp"
ldd build-tsan/ksidecar | awk '$1 ~ /^libabsl_/ {print "called_from_lib:" $1}' >>"$supp"
export TSAN_OPTIONS="log_path=$reports/tsan suppressions=$supp second_deadlock_stack=1"

echo "== unit tests under TSan"
(cd build-tsan && ctest --output-on-failure)

echo "== gRPC and HTTP integration tests against the TSan binary"
cache="${KSIDECAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ksidecar}"
export KSIDECAR_TEST_BIN="$PWD/build-tsan/ksidecar" KSIDECAR_TEST_KSTOOL="$PWD/build-tsan/kstool"
KSIDECAR_TEST_GRPCURL="$(command -v grpcurl || echo "$cache/bin/grpcurl")"
export KSIDECAR_TEST_GRPCURL
tests=(tests/integration/test_grpc.py tests/integration/test_http_api.py tests/integration/test_rotation.py)
if [ -n "${KSIDECAR_TEST_BOOTSTRAP:-}" ]; then
  python3 -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"
else
  tests/kafka/kafka.sh run python3 -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"
fi

if compgen -G "$reports/tsan.*" >/dev/null; then
  echo "ThreadSanitizer reported problems:" >&2
  cat "$reports"/tsan.* >&2
  exit 1
fi
echo "TSan: no reports"
