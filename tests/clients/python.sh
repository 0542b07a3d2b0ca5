#!/usr/bin/env bash
# Runs the ksidecar Python library's tests (pytest, clients/python/tests) against the real
# ksidecar binary and the broker of KSIDECAR_TEST_BOOTSTRAP. CI runs it as
#
#   tests/kafka/kafka.sh run tests/clients/python.sh [PYTEST ARGS...]
#
# KSIDECAR_TEST_BIN and KSIDECAR_TEST_KSTOOL default to build/ksidecar and build/kstool.
# First builds the wheel (pip wheel ./clients/python) and fails unless it holds py.typed and
# the generated stubs. Exits non-zero when that or a test fails.
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

# The wheel users get, built from this tree (no build isolation: the venv has the build
# requirements): it must carry the PEP 561 marker and the stubs generated at build time.
whl_dir="$(mktemp -d)"
trap 'rm -rf "$whl_dir"' EXIT
"$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
  -w "$whl_dir" clients/python >&2
rm -rf clients/python/build clients/python/ksidecar.egg-info
"$VENV/bin/python" - "$whl_dir"/ksidecar-*.whl <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
want = ["ksidecar/py.typed"] + [f"ksidecar/v1/{p}_pb2{s}" for p in ("consumer", "producer")
                                for s in (".py", ".pyi", "_grpc.py")]
missing = [n for n in want if n not in names]
if missing:
    sys.exit(f"python.sh: the wheel lacks {', '.join(missing)}")
print(f"python.sh: the wheel holds py.typed and the generated stubs ({len(names)} files)")
PY
# From the repository root, so that the installed package (not clients/python/ksidecar,
# which has no stubs) is the one imported.
"$VENV/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests "$@"
