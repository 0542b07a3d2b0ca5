#!/usr/bin/env bash
# Runs the Node client's tests (node --test) against the real broker and ksidecar binary.
#
#   tests/kafka/kafka.sh run tests/clients/node.sh
#
# kafka.sh exports KSIDECAR_TEST_BOOTSTRAP; KSIDECAR_TEST_BIN and KSIDECAR_TEST_KSTOOL default
# to build/ksidecar and build/kstool. Installs clients/node's dependencies and copies proto/
# into the package (node_env.sh). Type-checks index.d.ts against examples/types.ts (npm run typecheck)
# before the tests. Exits non-zero when that or a test fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PKG="$ROOT/clients/node"
: "${KSIDECAR_TEST_BOOTSTRAP:?run under tests/kafka/kafka.sh run, which starts a broker}"
export KSIDECAR_TEST_BIN="${KSIDECAR_TEST_BIN:-$ROOT/build/ksidecar}"
export KSIDECAR_TEST_KSTOOL="${KSIDECAR_TEST_KSTOOL:-$ROOT/build/kstool}"
for b in "$KSIDECAR_TEST_BIN" "$KSIDECAR_TEST_KSTOOL"; do
  [ -x "$b" ] || { echo "node.sh: $b is not an executable (build first, or set KSIDECAR_TEST_BIN/KSTOOL)" >&2; exit 1; }
done
"$ROOT/tests/clients/node_env.sh"
cd "$PKG"
npm run --silent typecheck # tsc --noEmit: index.d.ts against an example using all it exports

start=$(date +%s)
node --test --test-concurrency=1 --test-timeout=300000 --test-reporter=spec test/
echo "node.sh: the Node client's tests passed in $(( $(date +%s) - start )) s"
