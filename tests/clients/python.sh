#!/usr/bin/env bash
# Runs the ksidecar Python library's tests (pytest, clients/python/tests) against the real
# ksidecar binary and the broker of KSIDECAR_TEST_BOOTSTRAP. CI runs it as
#
#   tests/kafka/kafka.sh run tests/clients/python.sh [PYTEST ARGS...]
#
# KSIDECAR_TEST_BIN and KSIDECAR_TEST_KSTOOL default to build/ksidecar and build/kstool.
# Exits non-zero when a test fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${KSIDECAR_TEST_BOOTSTRAP:?is not set: run this under tests/kafka/kafka.sh run}"
export KSIDECAR_TEST_BIN="${KSIDECAR_TEST_BIN:-$ROOT/build/ksidecar}"
export KSIDECAR_TEST_KSTOOL="${KSIDECAR_TEST_KSTOOL:-$ROOT/build/kstool}"
for b in "$KSIDECAR_TEST_BIN" "$KSIDECAR_TEST_KSTOOL"; do
  [ -x "$b" ] || { echo "python.sh: $b is missing: build first (scripts/build.sh)" >&2; exit 2; }
done

VENV="$("$ROOT/tests/clients/python_env.sh")"
cd "$ROOT"
# From the repository root, so that the installed package (not clients/python/ksidecar,
# which has no stubs) is the one imported.
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests "$@"
