#!/usr/bin/env bash
# Runs a real single-node Apache Kafka (KRaft, broker+controller) on loopback for the tests.
#
#   kafka.sh fetch                 resolve the jars named in pom.xml into the cache
#   kafka.sh start DIR             start a broker whose state lives in DIR; prints its bootstrap address
#   kafka.sh stop DIR              stop it (TERM, then KILL) and remove DIR
#   kafka.sh restart DIR           start DIR's broker again, same ports and data (after a kill -9)
#   kafka.sh run CMD [ARGS...]     start a broker, run CMD with KSIDECAR_TEST_BOOTSTRAP set, always stop it
#   kafka.sh groups ARGS...        Kafka's ConsumerGroupCommand (e.g. --bootstrap-server B --describe --group G)
#
# Java 17 and Maven come from scripts/install-deps.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$HERE/pom.xml")"
CACHE="${KSIDECAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ksidecar}/kafka-$KAFKA_VERSION"
LIBS="$CACHE/libs"

fetch() {
  if [ -f "$LIBS/.complete" ]; then return 0; fi
  mkdir -p "$LIBS"
  echo "kafka.sh: resolving Apache Kafka $KAFKA_VERSION jars into $LIBS" >&2
  mvn -q -B -f "$HERE/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$LIBS" -DincludeScope=runtime >&2
  touch "$LIBS/.complete"
}

java_bin() {
  local j
  for j in "${JAVA_HOME:-}/bin/java" /usr/lib/jvm/java-17-openjdk-amd64/bin/java "$(command -v java || true)"; do
    if [ -x "$j" ] && "$j" -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then
      echo "$j"; return 0
    fi
  done
  echo "kafka.sh: no Java 17 or later found" >&2; return 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start() {
  local dir="$1"
  fetch
  local java; java="$(java_bin)"
  mkdir -p "$dir/data"
  local bport cport
  bport="$(free_port)"; cport="$(free_port)"
  while [ "$cport" = "$bport" ]; do cport="$(free_port)"; done
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$bport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$bport
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=24
PROPS
  cat > "$dir/log4j2.properties" <<PROPS
rootLogger.level=WARN
rootLogger.appenderRef.f.ref=F
appender.f.type=File
appender.f.name=F
appender.f.fileName=$dir/broker.log
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=[%d] %p %m (%c)%n
PROPS
  local cp="$LIBS/*"
  local jopts=(-Xms512m -Xmx1g -XX:+UseG1GC -Dlog4j2.configurationFile="$dir/log4j2.properties")
  local uuid
  uuid="$("$java" "${jopts[@]}" -cp "$cp" kafka.tools.StorageTool random-uuid 2>>"$dir/broker.log" | tail -n1)"
  "$java" "${jopts[@]}" -cp "$cp" kafka.tools.StorageTool format -t "$uuid" \
    -c "$dir/server.properties" --standalone >>"$dir/broker.log" 2>&1
  echo "127.0.0.1:$bport" > "$dir/bootstrap"
  launch "$dir"
}

# Starts the broker configured in DIR (its data kept) and waits until it is ready.
launch() {
  local dir="$1"
  local java; java="$(java_bin)"
  local cp="$LIBS/*"
  local jopts=(-Xms512m -Xmx1g -XX:+UseG1GC -Dlog4j2.configurationFile="$dir/log4j2.properties")
  local bport; bport="$(sed 's/.*://' "$dir/bootstrap")"
  setsid "$java" "${jopts[@]}" -cp "$cp" kafka.Kafka "$dir/server.properties" \
    >>"$dir/broker.out" 2>&1 < /dev/null &
  echo $! > "$dir/pid"
  # Ready means the broker answers a metadata request and has registered itself.
  local i
  for i in $(seq 1 120); do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "kafka.sh: broker exited during start-up; its output:" >&2
      tail -n 40 "$dir/broker.out" "$dir/broker.log" >&2 || true
      return 1
    fi
    if grep -q "Kafka Server started\|\[KafkaRaftServer nodeId=1\] Kafka Server started" "$dir/broker.out" "$dir/broker.log" 2>/dev/null \
       || (exec 3<>"/dev/tcp/127.0.0.1/$bport") 2>/dev/null && [ "$i" -gt 3 ]; then
      if "$java" -Xmx256m -cp "$cp" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
           org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$bport" --list >/dev/null 2>>"$dir/broker.log"; then
        cat "$dir/bootstrap"
        return 0
      fi
    fi
    sleep 0.5
  done
  echo "kafka.sh: broker did not become ready" >&2
  return 1
}

stop() {
  local dir="$1"
  [ -f "$dir/pid" ] || { rm -rf "$dir"; return 0; }
  local pid; pid="$(cat "$dir/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

run() {
  RUN_DIR="$(mktemp -d /tmp/ksidecar-kafka.XXXXXX)"
  local dir="$RUN_DIR"
  trap 'stop "$RUN_DIR"' EXIT
  trap 'exit 130' INT TERM
  KSIDECAR_TEST_BOOTSTRAP="$(start "$dir")"
  export KSIDECAR_TEST_BOOTSTRAP KSIDECAR_TEST_KAFKA_DIR="$dir"
  echo "kafka.sh: broker up at $KSIDECAR_TEST_BOOTSTRAP" >&2
  local rc=0
  "$@" || rc=$?
  return $rc
}

groups() {
  fetch
  local java; java="$(java_bin)"
  "$java" -Xmx256m -Dlog4j2.configurationFile=/dev/null -cp "$LIBS/*" \
    org.apache.kafka.tools.consumer.group.ConsumerGroupCommand "$@" 2> >(grep -v '^SLF4J' >&2)
}

cmd="${1:-}"; shift || true
case "$cmd" in
  fetch) fetch ;;
  start) start "$1" ;;
  stop) stop "$1" ;;
  restart) fetch; launch "$1" ;;
  run) run "$@" ;;
  groups) groups "$@" ;;
  *) sed -n '2,10p' "$0" >&2; exit 2 ;;
esac
