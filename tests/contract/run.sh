#!/bin/bash
# tests/contract/run.sh: schemathesis against the real binary and a real broker: every
# operation of api/openapi.yaml (as the binary serves it) with generated input; fails on a
# 5xx, a status or a body the spec does not allow, a hang, or the process not alive and
# exiting 0 on SIGTERM at the end. Run it under tests/kafka/kafka.sh run (which sets
# KSIDECAR_TEST_BOOTSTRAP); KSIDECAR_TEST_BIN is the binary (default build/ksidecar).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/install-deps.sh --test
BIN=${KSIDECAR_TEST_BIN:-$PWD/build/ksidecar}
: "${KSIDECAR_TEST_BOOTSTRAP:?run under tests/kafka/kafka.sh run}"
MAX_EXAMPLES=${CONTRACT_EXAMPLES:-40}
WALL_S=${CONTRACT_SECONDS:-180} # the whole run; .ci/run must stay under 60 min
out=$(mktemp -d)
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
HTTP=$(port)
GRPC=$(port)
# The generated fetches lease records nobody acks: a real stall, which /readyz?group= answers
# with a 503 as it should; not_a_server_error counts every 5xx, so health.stall_ms is set
# past the run (tests/integration/test_stall_detect.py covers the 503).
"$BIN" --kafka.bootstrap.servers="$KSIDECAR_TEST_BOOTSTRAP" --http.listen=127.0.0.1:$HTTP \
  --grpc.listen=127.0.0.1:$GRPC --commit.interval_ms=200 --fetch.max_wait_ms=5000 \
  --health.stall_ms=86400000 --push.allowed_urls=http://127.0.0.1:9/ >"$out/ksidecar.log" 2>&1 &
pid=$!
cleanup() { kill -9 "$pid" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 100); do
  curl -sf -o /dev/null "http://127.0.0.1:$HTTP/openapi.yaml" && break
  sleep 0.2
done
# The record stream (GET /v1/groups/{group}/stream) answers with a response that never ends
# by design (records, then heartbeats until the client leaves): every request to it would
# run into the request timeout, so it is left out here; tests/integration/test_http_stream.py
# covers it. wait_ms is bounded by the request timeout through fetch.max_wait_ms.
# A produce's own deadline (timeout_ms, as small as 1 ms) is answered 504 DEADLINE_EXCEEDED
# by design when it passes; not_a_server_error takes the 504 as expected there only.
cat >"$out/schemathesis.toml" <<'TOML'
[[operations]]
include-name = "POST /v1/topics/{topic}/records"
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "504"]
TOML
rc=0
# (From $out: schemathesis keeps its example database and reads schemathesis.toml there.)
(cd "$out" && timeout -k 10 "$WALL_S" st run "http://127.0.0.1:$HTTP/openapi.yaml" \
  --url "http://127.0.0.1:$HTTP" \
  --checks not_a_server_error,response_schema_conformance,status_code_conformance \
  --exclude-path /v1/groups/{group}/stream \
  --max-examples "$MAX_EXAMPLES" --request-timeout 15 --workers 1 \
  --wait-for-schema 10 --max-time "$((WALL_S - 20))" --seed 1 --no-color --warnings off \
  >"$out/schemathesis.log" 2>&1) || rc=$?
tail -n 60 "$out/schemathesis.log"
if ! kill -0 "$pid" 2>/dev/null; then
  echo "contract: ksidecar died during the run; its log:"
  tail -n 40 "$out/ksidecar.log"
  exit 1
fi
kill -TERM "$pid"
st=0
wait "$pid" || st=$?
trap - EXIT
if [ "$st" -ne 0 ]; then
  echo "contract: ksidecar exited $st on SIGTERM; its log:"
  tail -n 40 "$out/ksidecar.log"
  exit 1
fi
[ "$rc" -eq 124 ] && echo "contract: schemathesis ran past ${WALL_S}s (a hang?)"
[ "$rc" -eq 0 ] && rm -rf "$out"
exit "$rc"
