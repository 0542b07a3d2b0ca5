#!/usr/bin/env bash
# Runs the Python library benchmark (bench.py) against the broker of KSIDECAR_TEST_BOOTSTRAP,
# in the tests' venv with confluent-kafka added:
#
#   tests/kafka/kafka.sh run tests/bench/clients/python/run.sh [--runs R] [--records N]
#       [--keys 0,1000] [--clients ksidecar-iterator,ksidecar-callback,ksidecar-asyncio,ck-tuned]
#
# Each run takes a topic without keys and one with 1,000 keys (--keys) with every client,
# alternating, and prints each one's rate, CPU a record and ratio to tuned confluent-kafka,
# then a summary of the ratios. The library runs its C extension's per-record path;
# KSIDECAR_TEST_PURE_PYTHON=1 runs its pure-Python one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
: "${KSIDECAR_TEST_BOOTSTRAP:?is not set: run this under tests/kafka/kafka.sh run}"
VENV="$("$ROOT/tests/clients/python_env.sh" confluent-kafka)"
cd "$ROOT"
# The output also becomes RESULTS.md's block clients/python (not for --one, one run for a
# caller to read; KSIDECAR_BENCH_NO_RESULTS=1 writes nothing).
case " $* " in *" --one "*) exec "$VENV/bin/python" tests/bench/clients/python/bench.py "$@" ;; esac
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
"$VENV/bin/python" tests/bench/clients/python/bench.py "$@" | tee "$OUT"
python3 tests/bench/results_md.py clients/python "tests/bench/clients/python/run.sh $*" --text <"$OUT"
