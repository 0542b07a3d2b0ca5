#!/usr/bin/env bash
# Installs the bench's dependencies (KafkaJS, and the Node client from clients/node) and runs bench.js.
#   KSIDECAR_TEST_BOOTSTRAP=host:port tests/bench/clients/node/run.sh [--records N] [--rounds R]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
[ -d node_modules/kafkajs ] && [ -d node_modules/ksidecar ] || npm install --no-audit --no-fund --loglevel=error
exec node bench.js "$@"
