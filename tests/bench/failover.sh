#!/usr/bin/env bash
# Duplicates and the pause when the group coordinator's broker is killed at full speed
# (issue 38), on a three-broker cluster started here: before (no cap on unconfirmed acks,
# the former 10 s session timeout), the cap alone (at its default and at 2,000, with the
# 10 s session), and after (ksidecar's defaults). Prints one row each.
#
#   tests/bench/failover.sh [RECORDS]      # 200,000 records by default
#
# KSIDECAR_TEST_BIN and KSIDECAR_TEST_KSTOOL name the binaries (default: build/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
export KSIDECAR_TEST_BIN="${KSIDECAR_TEST_BIN:-$ROOT/build/ksidecar}"
export KSIDECAR_TEST_KSTOOL="${KSIDECAR_TEST_KSTOOL:-$ROOT/build/kstool}"
N="${1:-200000}"
KSIDECAR_TEST_KAFKA_NODES=3 tests/kafka/kafka.sh run bash -c "
  python3 tests/bench/failover.py --records $N --label before -- \
    --group.max_unconfirmed_acks=0 --kafka.session.timeout.ms=10000 &&
  python3 tests/bench/failover.py --records $N --label 'cap only' -- \
    --kafka.session.timeout.ms=10000 &&
  python3 tests/bench/failover.py --records $N --label 'cap 2000' -- \
    --group.max_unconfirmed_acks=2000 --kafka.session.timeout.ms=10000 &&
  python3 tests/bench/failover.py --records $N --label after"
