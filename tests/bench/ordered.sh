#!/usr/bin/env bash
# The ordered-delivery benchmark (issue 22): every client, every ordering row, beside the
# same client with ordering=none and beside its language's own Kafka client, on the same
# records, against a broker started here. Prints the table and the exact commands; asserts
# no timing (it fails only when a run loses records or does not commit).
#
#   tests/bench/ordered.sh            # the full run: 30,000 records a topic (machine idle)
#   tests/bench/ordered.sh --smoke    # 2,000 records: checks that every row and client works
#
# KSIDECAR_TEST_BIN, KSIDECAR_TEST_KSTOOL and KSIDECAR_TEST_KSBENCH name the binaries; when
# any is unset, scripts/build.sh builds build/ and it is taken from there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
if [ -z "${KSIDECAR_TEST_BIN:-}" ] || [ -z "${KSIDECAR_TEST_KSTOOL:-}" ] || [ -z "${KSIDECAR_TEST_KSBENCH:-}" ]; then
  scripts/build.sh >/dev/null
fi
export KSIDECAR_TEST_BIN="${KSIDECAR_TEST_BIN:-$ROOT/build/ksidecar}"
export KSIDECAR_TEST_KSTOOL="${KSIDECAR_TEST_KSTOOL:-$ROOT/build/kstool}"
export KSIDECAR_TEST_KSBENCH="${KSIDECAR_TEST_KSBENCH:-$ROOT/build/ksbench}"

# Each language's bench program, made ready once: the Python venv (with confluent-kafka),
# the Go program, the Node program's packages.
ORDERED_BENCH_PYTHON="$("$ROOT/tests/clients/python_env.sh" confluent-kafka)/bin/python"
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
(cd "$ROOT/clients/go" && go generate ./...)
ORDERED_BENCH_GO="${TMPDIR:-/tmp}/ksidecar-gobench-ordered"
(cd "$ROOT/tests/bench/clients/go" && go build -o "$ORDERED_BENCH_GO" .)
(cd "$ROOT/tests/bench/clients/node" &&
  { [ -d node_modules/kafkajs ] && [ -d node_modules/ksidecar ] || npm install --no-audit --no-fund --loglevel=error; })
# The Node library's own packages, as tests/clients/node.sh installs them (same stamp).
(cd "$ROOT/clients/node" &&
  lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)" &&
  if [ "$(cat node_modules/.ksidecar-lock 2>/dev/null)" != "$lock_sum" ]; then
    npm ci --no-audit --no-fund --loglevel=error && echo "$lock_sum" > node_modules/.ksidecar-lock
  fi &&
  node scripts/copy-proto.js >/dev/null)
export ORDERED_BENCH_PYTHON ORDERED_BENCH_GO
# ksidecar refuses a KSIDECAR_* variable that is not one of its config keys.
unset KSIDECAR_PY_VENV

echo "command: tests/bench/ordered.sh $*" >&2
# A full run's output also becomes RESULTS.md's block ordered (KSIDECAR_BENCH_NO_RESULTS=1: not).
case " $* " in *" --smoke "*) exec tests/kafka/kafka.sh run "$ORDERED_BENCH_PYTHON" tests/bench/ordered.py "$@" ;; esac
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
tests/kafka/kafka.sh run "$ORDERED_BENCH_PYTHON" tests/bench/ordered.py "$@" | tee "$OUT"
python3 tests/bench/results_md.py ordered "tests/bench/ordered.sh $*" --text <"$OUT"
