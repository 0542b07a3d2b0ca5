#!/usr/bin/env bash
# profile.sh: the repeatable figures behind HISTORY.md's memory section.
#   profile.sh callgrind BINARY TOPIC  instructions of ksidecar serving 200,000 records of
#                                      TOPIC (8 partitions) to one gRPC stream
#   profile.sh callgrind-http BINARY TOPIC  the same over HTTP long-poll (fetch max 5000,
#                                      acks by POST)
#   profile.sh callgrind-stream BINARY TOPIC  the same over the HTTP NDJSON stream
#                                      (max_in_flight 20000, acks of 5000 by POST)
#   profile.sh massif BINARY TOPIC     ksidecar's heap by allocation site once its windows
#                                      hold TOPIC's backlog (e.g. 8 x 20,000 records)
# KSIDECAR_ARGS adds ksidecar options, KSBENCH_ARGS client options.
# Needs valgrind, a broker at $KSIDECAR_TEST_BOOTSTRAP and a build (build/ksbench).
set -euo pipefail
MODE=$1 BIN=$2 TOPIC=$3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BOOT=${KSIDECAR_TEST_BOOTSTRAP:?set KSIDECAR_TEST_BOOTSTRAP}
OUT=${OUT:-/tmp/ksidecar-$MODE.$$}
port() { python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
HP=$(port) GP=$(port)
TOOL=${MODE%%-*}
EXTRA=--subscriber.max_credit_records=100000
case $MODE in callgrind-http | callgrind-stream) EXTRA=--subscriber.max_records=20000 ;; esac
# KSIDECAR_ARGS: more ksidecar options (e.g. --memory.max_bytes=2147483648); taken out of the
# environment, where ksidecar would refuse it as an unknown KSIDECAR_ variable.
KS_ARGS=${KSIDECAR_ARGS:-}
unset KSIDECAR_ARGS
# shellcheck disable=SC2086
valgrind --tool="$TOOL" --"$TOOL"-out-file="$OUT" "$BIN" --kafka.bootstrap.servers="$BOOT" \
  --http.listen=127.0.0.1:"$HP" --grpc.listen=127.0.0.1:"$GP" --log.level=warn \
  "$EXTRA" $KS_ARGS 2>"$OUT.log" &
VP=$!
for _ in $(seq 1 120); do curl -s -o /dev/null "http://127.0.0.1:$HP/healthz" && break; sleep 0.5; done
# The gRPC listener starts after the HTTP one, which under valgrind can be seconds later.
for _ in $(seq 1 120); do (exec 3<>"/dev/tcp/127.0.0.1/$GP") 2>/dev/null && break; sleep 0.5; done
if [ "$TOOL" = callgrind ]; then
  case $MODE in
  callgrind) CLIENT=(grpc --addr 127.0.0.1:"$GP" --credits 20000 --ack-batch 2000) ;;
  callgrind-http) CLIENT=(http --addr 127.0.0.1:"$HP" --fetch-max 5000) ;;
  callgrind-stream) CLIENT=(stream --addr 127.0.0.1:"$HP" --credits 20000 --ack-batch 5000) ;;
  *) echo "profile.sh: unknown mode $MODE" >&2; kill -TERM $VP; exit 2 ;;
  esac
  # KSBENCH_ARGS: more client options (e.g. --ack-ranges)
  # shellcheck disable=SC2086
  "$ROOT/build/ksbench" "${CLIENT[@]}" ${KSBENCH_ARGS:-} --topic "$TOPIC" --group "prof-$RANDOM" --count 200000 | tail -1
  kill -TERM $VP; wait $VP || true
  callgrind_annotate "$OUT" | grep -m1 "PROGRAM TOTALS" || true
else
  curl -s -o /dev/null "http://127.0.0.1:$HP/v1/groups/prof-$RANDOM/records?topic=$TOPIC&max=1&wait_ms=20000"
  sleep 35
  kill -TERM $VP; wait $VP || true
  ms_print "$OUT" | grep -E "rec_copy|ack_window.c|key_sched.c" | head -6 || true
fi
echo "output: $OUT (valgrind's and ksidecar's messages: $OUT.log)"
