#!/usr/bin/env bash
# Runs every benchmark against a real Kafka broker on this machine and rewrites the headline
# block of tests/bench/RESULTS.md (or, with --smoke, a small run that only checks they work,
# written to build/bench-smoke.md); --only latency,groups runs and rewrites only those
# sections. No timing is asserted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
scripts/install-deps.sh --test
scripts/build.sh >/dev/null
exec tests/kafka/kafka.sh run python3 tests/bench/bench.py "$@"
