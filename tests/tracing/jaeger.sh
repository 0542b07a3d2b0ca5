#!/usr/bin/env bash
# Runs a real Jaeger (v2, memory storage) on loopback for the tracing tests.
#
#   jaeger.sh build               build Jaeger JAEGER_VERSION from the Go module proxy into the
#                                 cache (bounded; exit 1 with a message when it cannot finish)
#   jaeger.sh start DIR           start it with its state in DIR; prints "OTLP_HTTP QUERY_HTTP"
#   jaeger.sh stop DIR            stop it (TERM, then KILL) and remove DIR
#   jaeger.sh run CMD [ARGS...]   start one, run CMD with KSIDECAR_TEST_OTLP (http://host:port,
#                                 OTLP over HTTP) and KSIDECAR_TEST_JAEGER_QUERY (the query
#                                 API's base URL) set, always stop it
#
# Every port is a free one. Go comes from scripts/install-deps.sh.
set -euo pipefail

JAEGER_VERSION=v1.75.0
CACHE="${KSIDECAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ksidecar}"
BIN="$CACHE/bin/jaeger-$JAEGER_VERSION"

build() {
  if [ -x "$BIN" ]; then return 0; fi
  if ! command -v go >/dev/null 2>&1; then
    echo "jaeger.sh: no Go toolchain to build Jaeger with (scripts/install-deps.sh --test)" >&2
    return 1
  fi
  # Its go.mod has replace directives, so `go install pkg@version` refuses it: it is built
  # as a tool of a module of our own.
  local mod
  mod="$(mktemp -d)"
  # Bounded so that a fresh machine's .ci/run stays near its limit: past it the trace test
  # skips with its message, and Go's module and build caches keep what was done for the
  # next attempt.
  echo "jaeger.sh: building Jaeger $JAEGER_VERSION into $BIN (up to 25 minutes)" >&2
  mkdir -p "$CACHE/bin"
  if (cd "$mod" && go mod init ksidecar-jaeger-build >/dev/null 2>&1 &&
    timeout 600 go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION" &&
    timeout 900 go build -o "$BIN.tmp" github.com/jaegertracing/jaeger/cmd/jaeger); then
    mv "$BIN.tmp" "$BIN"
    rm -rf "$mod"
    return 0
  fi
  rm -rf "$mod" "$BIN.tmp"
  echo "jaeger.sh: Jaeger $JAEGER_VERSION did not build" >&2
  return 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start() {
  local dir="$1"
  build
  mkdir -p "$dir"
  local otlp query qgrpc health
  otlp="$(free_port)"; query="$(free_port)"; qgrpc="$(free_port)"; health="$(free_port)"
  cat > "$dir/config.yaml" <<YAML
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:$query
    grpc:
      endpoint: 127.0.0.1:$qgrpc
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:$health
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$otlp
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
YAML
  "$BIN" --config "$dir/config.yaml" >"$dir/jaeger.log" 2>&1 &
  echo $! >"$dir/pid"
  local i
  for i in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$query/api/services" >/dev/null 2>&1 &&
      curl -s -o /dev/null "http://127.0.0.1:$otlp/v1/traces" 2>/dev/null; then
      echo "$otlp $query"
      return 0
    fi
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "jaeger.sh: Jaeger did not come up; its log:" >&2
  tail -30 "$dir/jaeger.log" >&2
  stop "$dir"
  return 1
}

stop() {
  local dir="$1" pid i
  if [ -f "$dir/pid" ]; then
    pid="$(cat "$dir/pid")"
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

run() {
  local dir ports rc=0
  dir="$(mktemp -d)"
  ports="$(start "$dir")" || return 1
  export KSIDECAR_TEST_OTLP="http://127.0.0.1:${ports% *}"
  export KSIDECAR_TEST_JAEGER_QUERY="http://127.0.0.1:${ports#* }"
  echo "jaeger.sh: Jaeger up, OTLP at $KSIDECAR_TEST_OTLP, query at $KSIDECAR_TEST_JAEGER_QUERY" >&2
  "$@" || rc=$?
  stop "$dir"
  return "$rc"
}

case "${1:-}" in
  build) build ;;
  start) start "$2" ;;
  stop) stop "$2" ;;
  run) shift; run "$@" ;;
  *)
    echo "usage: jaeger.sh build|start DIR|stop DIR|run CMD..." >&2
    exit 2
    ;;
esac
