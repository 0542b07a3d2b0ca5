#!/usr/bin/env bash
# Runs the ksidecar Python library's tests (pytest, clients/python/tests) against the real
# ksidecar binary and the broker of KSIDECAR_TEST_BOOTSTRAP. CI runs it as
#
#   tests/kafka/kafka.sh run tests/clients/python.sh [PYTEST ARGS...]
#
# KSIDECAR_TEST_BIN and KSIDECAR_TEST_KSTOOL default to build/ksidecar and build/kstool.
# First builds the wheel (pip wheel ./clients/python) and fails unless it holds py.typed, the
# generated stubs and the C extension; installs it in a fresh venv (python3 -m venv) and runs
# python_wheel_smoke.py there (the extension imported, records taken and acked through it).
# Then runs the suite twice: on the extension's path, and on the pure-Python one
# (KSIDECAR_TEST_PURE_PYTHON=1). Exits non-zero when any of it fails.
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
if not any(n.startswith("ksidecar/_speedups.") and n.endswith((".so", ".pyd")) for n in names):
    missing.append("the C extension ksidecar/_speedups (was Python.h there? see pip wheel -v)")
if missing:
    sys.exit(f"python.sh: the wheel lacks {', '.join(missing)}")
print(f"python.sh: the wheel holds py.typed, the generated stubs and the C extension "
      f"({len(names)} files)")
PY
# The wheel in a fresh venv, with nothing but it and its dependencies.
fresh="$whl_dir/venv"
"${PYTHON:-python3}" -m venv "$fresh"
"$fresh/bin/python" -m pip install -q --disable-pip-version-check "$whl_dir"/ksidecar-*.whl >&2
(cd "$whl_dir" && "$fresh/bin/python" "$ROOT/tests/clients/python_wheel_smoke.py" \
  "$KSIDECAR_TEST_BOOTSTRAP" "$KSIDECAR_TEST_BIN" "$KSIDECAR_TEST_KSTOOL")

# From the repository root, so that the installed package (not clients/python/ksidecar,
# which has no stubs) is the one imported. test_speedups.py fails, not skips, without the
# extension.
export KSIDECAR_TEST_REQUIRE_SPEEDUPS=1
rc=0
echo "python.sh: the suite on the C extension's path" >&2
KSIDECAR_TEST_PURE_PYTHON=0 "$VENV/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests "$@" || rc=1
echo "python.sh: the suite on the pure-Python path (KSIDECAR_TEST_PURE_PYTHON=1)" >&2
KSIDECAR_TEST_PURE_PYTHON=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests "$@" || rc=1
exit "$rc"
