#!/usr/bin/env bash
# Installs the bench's dependencies (KafkaJS, and the Node client from clients/node) and runs bench.js.
#   KSIDECAR_TEST_BOOTSTRAP=host:port tests/bench/clients/node/run.sh [--records N] [--rounds R]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
[ -d node_modules/kafkajs ] && [ -d node_modules/ksidecar ] || npm install --no-audit --no-fund --loglevel=error
# The output also becomes RESULTS.md's block clients/node (not with --json or --child, lines
# for a caller to read; KSIDECAR_BENCH_NO_RESULTS=1 writes nothing).
case " $* " in *" --json "* | *" --child "*) exec node bench.js "$@" ;; esac
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
node bench.js "$@" | tee "$OUT"
python3 ../../results_md.py clients/node "tests/bench/clients/node/run.sh $*" --text <"$OUT"
