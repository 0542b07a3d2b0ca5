#!/usr/bin/env bash
# profile.sh: the repeatable figures behind HISTORY.md's memory section.
#   profile.sh callgrind BINARY TOPIC  instructions of ksidecar serving 200,000 records of
#                                      TOPIC (8 partitions) to one gRPC stream
#   profile.sh callgrind-http BINARY TOPIC  the same over HTTP long-poll (fetch max 5000,
#                                      acks by POST)
#   profile.sh callgrind-stream BINARY TOPIC  the same over the HTTP NDJSON stream
#                                      (max_in_flight 20000, acks of 5000 by POST)
#   profile.sh callgrind-push BINARY TOPIC  the same by push delivery: a static group of
#                                      TOPIC pushing to build/push_app in batches of 500, 16
#                                      requests in flight (the bench's push row), until the
#                                      app has every record and the group committed them all
#   profile.sh callgrind-push1 BINARY TOPIC  the same, one record a request, 64 in flight
#                                      (PUSH_BATCH and PUSH_CONCURRENCY set others)
#   profile.sh massif BINARY TOPIC     ksidecar's heap by allocation site once its windows
#                                      hold TOPIC's backlog (e.g. 8 x 20,000 records)
# KSIDECAR_ARGS adds ksidecar options, KSBENCH_ARGS client options.
# Needs valgrind, a broker at $KSIDECAR_TEST_BOOTSTRAP and a build (build/ksbench, and
# build/push_app and build/kstool for push).
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
case $MODE in
callgrind-push | callgrind-push1)
  # The app answers 200 at once, as in bench.py's push rows; the group is the config's.
  PB=500 PC=16
  [ "$MODE" = callgrind-push1 ] && PB=1 PC=64
  PB=${PUSH_BATCH:-$PB} PC=${PUSH_CONCURRENCY:-$PC}
  AP=$(port) PG=prof-push-$RANDOM
  "$ROOT/build/push_app" "$AP" >"$OUT.app" &
  APP=$!
  for _ in $(seq 1 100); do grep -q listening "$OUT.app" 2>/dev/null && break; sleep 0.1; done
  # Partitions, records, and the sum of their end offsets: what the group's commits reach.
  read -r NP WANT ENDS < <("$ROOT/build/kstool" watermarks -b "$BOOT" -t "$TOPIC" |
    awk '{ n++; r += $3 - $2; e += $3 } END { print n, r, e }')
  EXTRA="--groups.static=[{\"name\":\"$PG\",\"topics\":[\"$TOPIC\"],\"push\":{\"url\":\"http://127.0.0.1:$AP/in\",\"batch\":$PB,\"concurrency\":$PC}}]"
  ;;
esac
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
if [ -n "${APP:-}" ]; then
  # Pushing starts with ksidecar. Wait for the app to have every record, then for the
  # group's commits to reach the topic's end, so that every run does the same work.
  stats() { curl -s "http://127.0.0.1:$AP/stats"; }
  committed() {
    "$ROOT/build/kstool" committed -b "$BOOT" -t "$TOPIC" -g "$PG" -p "$NP" |
      awk '{ if ($2 > 0) s += $2 } END { print s + 0 }'
  }
  for _ in $(seq 1 36000); do
    got=$(stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["records"])' || echo 0)
    [ "${got:-0}" -ge "$WANT" ] && break
    sleep 0.1
  done
  for _ in $(seq 1 600); do [ "$(committed)" -ge "$ENDS" ] && break; sleep 0.1; done
  echo "push batch=$PB concurrency=$PC group=$PG app=$(stats | tr -d '\n') committed=$(committed)/$ENDS"
  kill -TERM $VP; wait $VP || true
  kill -TERM $APP; wait $APP || true
  callgrind_annotate "$OUT" | grep -m1 "PROGRAM TOTALS" || true
elif [ "$TOOL" = callgrind ]; then
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
