#!/usr/bin/env bash
# Runs a real schema registry on loopback for the tests: Apicurio Registry (pom.xml names the
# version), in-memory storage, its Confluent-compatible API at /apis/ccompat/v7.
#
#   registry.sh fetch              resolve the app named in pom.xml into the cache and unpack it once
#   registry.sh start DIR          start a registry whose state lives in DIR; prints its ccompat URL
#   registry.sh stop DIR           stop it (TERM, then KILL) and remove DIR
#   registry.sh run CMD [ARGS...]  start one, run CMD with KSIDECAR_TEST_REGISTRY set, always stop it
#
# Needs Maven and Java 21 or later (JAVA_HOME, a JDK under /usr/lib/jvm, or java on PATH).
# KSIDECAR_REGISTRY_START_S bounds the start (default 60 s).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' "$HERE/pom.xml")"
CACHE="${KSIDECAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ksidecar}/apicurio-$VERSION"
APP="$CACHE/app"
START_S="${KSIDECAR_REGISTRY_START_S:-60}"

fetch() {
  if [ -f "$APP/.complete" ]; then return 0; fi
  rm -rf "$APP" "$CACHE/dl"
  mkdir -p "$APP" "$CACHE/dl"
  echo "registry.sh: resolving Apicurio Registry $VERSION into $APP" >&2
  mvn -q -B -f "$HERE/pom.xml" dependency:copy-dependencies -DexcludeTransitive=true \
    -DoutputDirectory="$CACHE/dl" >&2
  tar -xzf "$CACHE/dl/apicurio-registry-app-$VERSION-all.tar.gz" -C "$APP"
  [ -f "$APP/quarkus-run.jar" ] || { echo "registry.sh: no quarkus-run.jar in the archive" >&2; return 1; }
  rm -rf "$CACHE/dl"
  touch "$APP/.complete"
}

# The major version of java binary $1 ("25.0.3" -> 25, "1.8.0" -> 8), or nothing.
java_major() {
  "$1" -version 2>&1 | sed -n '1s/.*version "\([0-9][0-9.]*\).*/\1/p' |
    awk -F. '{ print ($1 == 1 ? $2 : $1) }'
}

java_bin() {
  local j m
  for j in "${JAVA_HOME:-/nonexistent}/bin/java" /usr/lib/jvm/*/bin/java "$(command -v java || true)"; do
    [ -x "$j" ] || continue
    m="$(java_major "$j")"
    if [ -n "$m" ] && [ "$m" -ge 21 ]; then echo "$j"; return 0; fi
  done
  echo "registry.sh: Apicurio Registry $VERSION needs Java 21 or later, and none was found" \
    "(looked at \$JAVA_HOME, /usr/lib/jvm/*, java on PATH); set JAVA_HOME to one" >&2
  return 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start() {
  local dir="$1"
  fetch
  local java; java="$(java_bin)"
  mkdir -p "$dir"
  local port mport
  port="$(free_port)"; mport="$(free_port)"
  while [ "$mport" = "$port" ]; do mport="$(free_port)"; done
  local url="http://127.0.0.1:$port/apis/ccompat/v7"
  # In-memory H2 storage; the management interface (health, metrics: 9000 on every address by
  # default, and it cannot be turned off at run time) on a free loopback port too, so several
  # registries can run at once.
  (cd "$dir" && exec setsid "$java" -Xms128m -Xmx512m -XX:+UseSerialGC \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$port" \
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$mport" \
    -Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2 \
    -Dquarkus.log.level=WARN -Dquarkus.log.category.\"io.apicurio\".level=INFO \
    -jar "$APP/quarkus-run.jar" >>"$dir/registry.log" 2>&1 </dev/null) &
  echo $! > "$dir/pid"
  echo "$url" > "$dir/url"
  # Ready means the ccompat API answers.
  local deadline=$((SECONDS + START_S))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "registry.sh: the registry exited during start-up; its output:" >&2
      tail -n 40 "$dir/registry.log" >&2 || true
      return 1
    fi
    if curl -sf -m 2 "$url/subjects" >/dev/null 2>&1; then
      echo "$url"
      return 0
    fi
    sleep 0.25
  done
  echo "registry.sh: the registry did not answer within $START_S s; its output:" >&2
  tail -n 40 "$dir/registry.log" >&2 || true
  return 1
}

stop() {
  local dir="$1"
  [ -f "$dir/pid" ] || { rm -rf "$dir"; return 0; }
  local pid; pid="$(cat "$dir/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

# What the registry was doing when a run failed or was stopped from outside: its log's end and,
# from a thread dump (SIGQUIT to the JVM), the threads that were serving a request.
report() {
  local dir="$1" pid
  [ -f "$dir/registry.log" ] || return 0
  pid="$(cat "$dir/pid" 2>/dev/null || true)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -QUIT "$pid" 2>/dev/null || true
    sleep 1
  fi
  echo "registry.sh: the registry's log (last 30 lines before any thread dump):" >&2
  sed '/^Full thread dump/,$d' "$dir/registry.log" | tail -n 30 >&2 || true
  echo "registry.sh: its threads inside the registry's own code or blocked:" >&2
  awk 'function flush() { if (blk ~ /io\.apicurio|State: BLOCKED/) printf "%s", blk; blk = "" }
       /^"/ { flush() } /^"/, /^$/ { blk = blk $0 "\n" } END { flush() }' "$dir/registry.log" |
    head -n 150 >&2 || true
}

run() {
  RUN_DIR="$(mktemp -d /tmp/ksidecar-registry.XXXXXX)"
  trap 'stop "$RUN_DIR"' EXIT
  trap 'report "$RUN_DIR"; exit 130' INT TERM
  local t0=$SECONDS
  KSIDECAR_TEST_REGISTRY="$(start "$RUN_DIR")"
  export KSIDECAR_TEST_REGISTRY KSIDECAR_TEST_REGISTRY_DIR="$RUN_DIR"
  echo "registry.sh: registry up at $KSIDECAR_TEST_REGISTRY in $((SECONDS - t0)) s" >&2
  local rc=0
  "$@" || rc=$?
  [ "$rc" -eq 0 ] || report "$RUN_DIR"
  return $rc
}

cmd="${1:-}"; shift || true
case "$cmd" in
  fetch) fetch ;;
  start) start "$1" ;;
  stop) stop "$1" ;;
  run) run "$@" ;;
  *) sed -n '2,11p' "$0" >&2; exit 2 ;;
esac
