#!/usr/bin/env bash
# Go client benchmark: the library's natural use (a handler that acks each message) against
# franz-go in a group with manual commits, 2,000,000 x 100 B records over 8 partitions.
#
#   KSIDECAR_TEST_BOOTSTRAP=127.0.0.1:9092 tests/bench/clients/go/run.sh [-rounds 3] [flags]
#
# KSIDECAR_TEST_BIN and KSIDECAR_TEST_KSTOOL default to build/ksidecar and build/kstool; with
# KSIDECAR_TEST_KSBENCH (default build/ksbench, when built) the C client runs too, as the
# server's ceiling.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
: "${KSIDECAR_TEST_BOOTSTRAP:?set it to a Kafka broker (tests/kafka/kafka.sh run ... sets it)}"
export KSIDECAR_TEST_BIN="${KSIDECAR_TEST_BIN:-$ROOT/build/ksidecar}"
export KSIDECAR_TEST_KSTOOL="${KSIDECAR_TEST_KSTOOL:-$ROOT/build/kstool}"
if [ -z "${KSIDECAR_TEST_KSBENCH:-}" ] && [ -x "$ROOT/build/ksbench" ]; then export KSIDECAR_TEST_KSBENCH="$ROOT/build/ksbench"; fi
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
(cd "$ROOT/clients/go" && go generate ./...)
cd "$ROOT/tests/bench/clients/go"
go build -o "${TMPDIR:-/tmp}/ksidecar-gobench" .
echo "command: tests/bench/clients/go/run.sh $*" >&2
# The output also becomes RESULTS.md's block clients/go (not with -json, lines for a caller
# to read; KSIDECAR_BENCH_NO_RESULTS=1 writes nothing).
case " $* " in *" -json "* | *" --json "*) exec "${TMPDIR:-/tmp}/ksidecar-gobench" "$@" ;; esac
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
"${TMPDIR:-/tmp}/ksidecar-gobench" "$@" | tee "$OUT"
python3 "$ROOT/tests/bench/results_md.py" clients/go "tests/bench/clients/go/run.sh $*" --text <"$OUT"
