#!/usr/bin/env bash
# Runs the Node client's tests (node --test) against the real broker and ksidecar binary.
#
#   tests/kafka/kafka.sh run tests/clients/node.sh
#
# kafka.sh exports KSIDECAR_TEST_BOOTSTRAP; KSIDECAR_TEST_BIN and KSIDECAR_TEST_KSTOOL default
# to build/ksidecar and build/kstool. Installs clients/node's dependencies with npm (npm ci
# from package-lock.json, skipped when node_modules was installed from the same lock); the install's
# prepare step copies proto/ into the package, which loads it at run time (nothing
# generated is committed). Type-checks index.d.ts against examples/types.ts (npm run typecheck)
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
command -v node >/dev/null || { echo "node.sh: node (20 or later) is not installed" >&2; exit 1; }
command -v npm >/dev/null || { echo "node.sh: npm is not installed" >&2; exit 1; }

cd "$PKG"
# Reinstall only when package-lock.json changed since the last install here (a stamp in
# node_modules), or proto/ is missing.
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ "$(cat node_modules/.ksidecar-lock 2>/dev/null)" != "$lock_sum" ] \
   || [ ! -f proto/ksidecar/v1/consumer.proto ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_sum" > node_modules/.ksidecar-lock
fi
node scripts/copy-proto.js >/dev/null # the .proto files as they are in this checkout
npm run --silent typecheck # tsc --noEmit: index.d.ts against an example using all it exports

start=$(date +%s)
node --test --test-concurrency=1 --test-timeout=300000 --test-reporter=spec test/
echo "node.sh: the Node client's tests passed in $(( $(date +%s) - start )) s"
