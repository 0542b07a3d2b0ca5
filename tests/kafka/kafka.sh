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
# Cluster mode: KSIDECAR_TEST_KAFKA_NODES=3 kafka.sh run CMD starts N combined controller+broker
# KRaft nodes (a static quorum of all N, each on its own loopback ports with its own log dir in
# DIR/nID), replication factor N (offsets and transaction topics too, capped at 3) and
# min.insync.replicas=2, bounded by KSIDECAR_TEST_KAFKA_START_TIMEOUT seconds (120), and gives CMD
# KSIDECAR_TEST_BOOTSTRAP (every broker), KSIDECAR_TEST_KAFKA_DIR and KSIDECAR_TEST_KAFKA_NODES.
#   kafka.sh cluster N DIR         start such a cluster in DIR; prints its bootstrap list
#   kafka.sh node ACTION ID [DIR]  one node of the cluster in DIR ($KSIDECAR_TEST_KAFKA_DIR):
#                                  stop (TERM, then KILL), kill (-9), start (waits until it
#                                  answers), pause (SIGSTOP), resume (SIGCONT), pid, bootstrap
#   kafka.sh quorum-leader [DIR]   the node id of the active controller
#   kafka.sh teardown DIR          kill every node of the cluster in DIR and remove DIR
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

# The broker's log4j2 file: warnings and worse, into DIR/broker.log.
write_log4j() {
  cat > "$1/log4j2.properties" <<PROPS
rootLogger.level=WARN
rootLogger.appenderRef.f.ref=F
appender.f.type=File
appender.f.name=F
appender.f.fileName=$1/broker.log
appender.f.layout.type=PatternLayout
appender.f.layout.pattern=[%d] %p %m (%c)%n
PROPS
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
  write_log4j "$dir"
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

# ---- cluster mode ----

cluster_props() {
  local dir="$1" id="$2" n="$3" bport="$4" cport="$5" voters="$6"
  local rf=$((n < 3 ? n : 3)) isr=$((n < 2 ? 1 : 2))
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$bport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$bport
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=24
PROPS
  write_log4j "$dir"
}

NODE_JOPTS=(-Xms256m -Xmx768m -XX:+UseG1GC -XX:TieredStopAtLevel=1)

# Starts node DIR's JVM in the background, its own process group (its data kept).
node_spawn() {
  local dir="$1"
  local java; java="$(java_bin)"
  setsid "$java" "${NODE_JOPTS[@]}" -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" >>"$dir/broker.out" 2>&1 < /dev/null &
  echo $! > "$dir/pid"
}

# Waits until node DIR answers a metadata request, or DEADLINE (epoch seconds) passes.
node_wait() {
  local dir="$1" deadline="$2"
  local java; java="$(java_bin)"
  local b; b="$(cat "$dir/bootstrap")"
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "kafka.sh: node $dir exited during start-up; its output:" >&2
      tail -n 40 "$dir/broker.out" "$dir/broker.log" >&2 || true
      return 1
    fi
    if (exec 3<>"/dev/tcp/${b%:*}/${b##*:}") 2>/dev/null \
       && timeout 30 "$java" -Xmx256m -XX:TieredStopAtLevel=1 -cp "$LIBS/*" \
            -Dlog4j2.configurationFile="$dir/log4j2.properties" \
            org.apache.kafka.tools.TopicCommand --bootstrap-server "$b" --list \
            >/dev/null 2>>"$dir/broker.log"; then
      return 0
    fi
    sleep 0.5
  done
  echo "kafka.sh: node $dir did not become ready in time" >&2
  return 1
}

cluster_timeout() { echo $(( $(date +%s) + ${KSIDECAR_TEST_KAFKA_START_TIMEOUT:-120} )); }

cluster() {
  local n="$1" dir="$2"
  fetch
  local java; java="$(java_bin)"
  mkdir -p "$dir"
  local i ports=() voters=""
  # 2N distinct free ports.
  while [ "${#ports[@]}" -lt $((2 * n)) ]; do
    local p; p="$(free_port)"
    case " ${ports[*]} " in *" $p "*) ;; *) ports+=("$p") ;; esac
  done
  for i in $(seq 1 "$n"); do
    voters="${voters:+$voters,}$i@127.0.0.1:${ports[$((2 * i - 1))]}"
  done
  local uuid
  uuid="$("$java" -Xmx256m -Dlog4j2.configurationFile=/dev/null -cp "$LIBS/*" \
    kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n1)"
  local boots=""
  for i in $(seq 1 "$n"); do
    local nd="$dir/n$i"
    mkdir -p "$nd/data"
    cluster_props "$nd" "$i" "$n" "${ports[$((2 * i - 2))]}" "${ports[$((2 * i - 1))]}" "$voters"
    echo "127.0.0.1:${ports[$((2 * i - 2))]}" > "$nd/bootstrap"
    boots="${boots:+$boots,}$(cat "$nd/bootstrap")"
    "$java" -Xmx256m -Dlog4j2.configurationFile="$nd/log4j2.properties" -cp "$LIBS/*" \
      kafka.tools.StorageTool format -t "$uuid" -c "$nd/server.properties" \
      >>"$nd/broker.log" 2>&1 &
  done
  wait
  echo "$n" > "$dir/nodes"
  echo "$boots" > "$dir/bootstrap"
  # A static quorum: every node must run before any becomes ready.
  for i in $(seq 1 "$n"); do node_spawn "$dir/n$i"; done
  local deadline; deadline="$(cluster_timeout)"
  for i in $(seq 1 "$n"); do node_wait "$dir/n$i" "$deadline" || return 1; done
  cat "$dir/bootstrap"
}

node() {
  local action="$1" id="$2" dir="${3:-${KSIDECAR_TEST_KAFKA_DIR:-}}"
  local nd="$dir/n$id"
  [ -f "$nd/server.properties" ] || { echo "kafka.sh: no node $id in '$dir'" >&2; return 2; }
  local pid; pid="$(cat "$nd/pid" 2>/dev/null || echo 0)"
  case "$action" in
    pid) echo "$pid" ;;
    bootstrap) cat "$nd/bootstrap" ;;
    kill) kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
          while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done ;;
    stop)
      kill -CONT -- "-$pid" 2>/dev/null || true
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      local i
      for i in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL -- "-$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done ;;
    start)
      fetch
      if kill -0 "$pid" 2>/dev/null; then echo "kafka.sh: node $id is running" >&2; return 1; fi
      node_spawn "$nd"
      node_wait "$nd" "$(cluster_timeout)" ;;
    pause) kill -STOP -- "-$pid" 2>/dev/null || kill -STOP "$pid" ;;
    resume) kill -CONT -- "-$pid" 2>/dev/null || kill -CONT "$pid" ;;
    *) echo "kafka.sh: node stop|kill|start|pause|resume|pid|bootstrap ID [DIR]" >&2; return 2 ;;
  esac
}

quorum_leader() {
  local dir="${1:-${KSIDECAR_TEST_KAFKA_DIR:-}}"
  fetch
  local java; java="$(java_bin)"
  timeout 60 "$java" -Xmx256m -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile=/dev/null \
    -cp "$LIBS/*" org.apache.kafka.tools.MetadataQuorumCommand \
    --bootstrap-server "$(cat "$dir/bootstrap")" describe --status 2>/dev/null \
    | sed -n 's/^LeaderId:[[:space:]]*//p'
}

teardown() {
  local dir="$1" i pid
  for i in $(seq 1 "$(cat "$dir/nodes" 2>/dev/null || echo 0)"); do
    pid="$(cat "$dir/n$i/pid" 2>/dev/null || echo 0)"
    [ "$pid" -gt 0 ] || continue
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  done
  for i in $(seq 1 "$(cat "$dir/nodes" 2>/dev/null || echo 0)"); do
    pid="$(cat "$dir/n$i/pid" 2>/dev/null || echo 0)"
    while [ "$pid" -gt 0 ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  done
  rm -rf "$dir"
}

run_cluster() {
  local n="$1"; shift
  RUN_DIR="$(mktemp -d /tmp/ksidecar-kafka.XXXXXX)"
  trap 'teardown "$RUN_DIR"' EXIT
  trap 'exit 130' INT TERM
  KSIDECAR_TEST_BOOTSTRAP="$(cluster "$n" "$RUN_DIR")"
  export KSIDECAR_TEST_BOOTSTRAP KSIDECAR_TEST_KAFKA_DIR="$RUN_DIR" KSIDECAR_TEST_KAFKA_NODES="$n"
  echo "kafka.sh: $n-node cluster up at $KSIDECAR_TEST_BOOTSTRAP" >&2
  local rc=0
  "$@" || rc=$?
  return $rc
}

run() {
  if [ "${KSIDECAR_TEST_KAFKA_NODES:-1}" -gt 1 ]; then
    run_cluster "$KSIDECAR_TEST_KAFKA_NODES" "$@"
    return
  fi
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
  cluster) cluster "$1" "$2" ;;
  node) node "$@" ;;
  quorum-leader) quorum_leader "$@" ;;
  teardown) teardown "$1" ;;
  *) sed -n '2,22p' "$0" >&2; exit 2 ;;
esac
