#!/usr/bin/env bash
# image.sh: builds docker/Dockerfile for real and runs the image, with podman and neither a
# Docker engine nor an image registry. The debian:12 and debian:12-slim base is made by
# mmdebstrap once and cached; podman keeps the build stage's package layer between runs.
#
# It fails unless:
#  - the image builds, runs as a non-root USER, and is closed: ldd of the binary finds every
#    library in the image, each package the Dockerfile installs holds one of them (but
#    ca-certificates), and nothing but the binary comes from the build stage;
#  - its ENV and EXPOSE are what `ksidecar --print-config` reads in the image;
#  - with the image's own environment (and --dev, without a network) the HEALTHCHECK, run as
#    the image declares it, turns healthy;
#  - against the test broker, with KSIDECAR_CONFIG naming a mounted file and the listen
#    addresses set through the environment: /healthz, gRPC health, a produce, a fetch and an
#    ack over HTTP with curl, the HEALTHCHECK healthy and failing when pointed elsewhere, and
#    a stop that drains and exits 0.
#
# Usage: tests/deploy/image.sh (as root; installs podman, runc and mmdebstrap when missing).
# KSIDECAR_IMAGE_KEEP=1 leaves the containers for a look after a failure.
#
# Containers on this machine kind: crun 1.8 refuses its cgroup layout (v1 controllers beside
# a cgroup2 mount that holds one: "cgroups in hybrid mode not supported", with or without
# --cgroups=disabled), and podman's default rlimits (1,048,576 open files and processes) are
# above the hard limits of a process without CAP_SYS_RESOURCE. So containers run with runc and
# with limits under those.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
CACHE="${KSIDECAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ksidecar}/image"
IMAGE=localhost/ksidecar:ci
# The base's name says how it is made: a change to the mmdebstrap line below renames it.
BASE_ID=debian-12-minbase-slim-1
BASE_TAR="$CACHE/$BASE_ID.tar"
T0=$SECONDS
step() { echo "-- [$((SECONDS - T0)) s] $*"; }
die() {
  echo "image.sh: $*" >&2
  exit 1
}

step "podman, runc and mmdebstrap"
need=()
for p in podman runc mmdebstrap; do command -v "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ "${#need[@]}" -gt 0 ]; then
  echo "image.sh: installing ${need[*]} with apt" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${need[@]}" >/dev/null
fi
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=$(cat /proc/sys/fs/nr_open)
[ "$nofile" -gt 1048576 ] && nofile=1048576
# A sidecar's threads are a few dozen; podman itself ran with a lower RLIMIT_NPROC than its
# shell here (32768 against 96367), so a modest bound rather than the shell's.
RUN=(podman --runtime runc run --ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)
# podman runs a HEALTHCHECK from a systemd timer, and there is no systemd here: each start and
# removal of a container says so. The checks below run it themselves (podman healthcheck run).
podman() { command podman "$@" 2> >(grep -v "unable to get systemd connection" >&2); }

step "the Debian 12 base ($BASE_TAR)"
mkdir -p "$CACHE"
if [ ! -s "$BASE_TAR" ]; then
  # minbase with the three suites of Debian's own images, and without the documentation,
  # manual pages and translations that its slim variant leaves out.
  tmp_tar="$CACHE/partial-$BASE_ID.tar"
  mmdebstrap --quiet --variant=minbase \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    bookworm "$tmp_tar" "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main"
  mv "$tmp_tar" "$BASE_TAR"
fi
base_label() { podman image inspect --format '{{index .Labels "ksidecar.base"}}' "$1" 2>/dev/null; }
if [ "$(base_label docker.io/library/debian:12-slim)" != "$BASE_ID" ] ||
  [ "$(base_label docker.io/library/debian:12)" != "$BASE_ID" ]; then
  podman import --quiet --change "LABEL ksidecar.base=$BASE_ID" --change 'CMD ["bash"]' \
    "$BASE_TAR" docker.io/library/debian:12-slim >/dev/null
  podman tag docker.io/library/debian:12-slim docker.io/library/debian:12
fi

step "podman build -f docker/Dockerfile (its log: $CACHE/build.log)"
TMP=$(mktemp -d /tmp/ksidecar-image.XXXXXX)
CONTAINERS=()
KAFKA_DIR=""
cleanup() {
  if [ "${KSIDECAR_IMAGE_KEEP:-0}" != 1 ]; then
    for c in "${CONTAINERS[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  fi
  [ -n "$KAFKA_DIR" ] && tests/kafka/kafka.sh stop "$KAFKA_DIR"
  rm -rf "$TMP"
}
trap cleanup EXIT
# The build stage is built and tagged first: a tagged image keeps its layers (the packages the
# build stage installs) out of the prune below, which drops the layers of earlier builds.
# docker format: OCI image configs have no HEALTHCHECK, and podman would drop it.
build() { # tag, podman build's other arguments; STEP lines of the log get the seconds so far
  echo "== podman build -t $*" >>"$CACHE/build.log"
  # pipefail: a failed build fails the pipeline.
  timeout 1200 podman build --pull=never --network=host --isolation=chroot --format docker \
    --layers -f docker/Dockerfile -t "$@" . 2>&1 |
    while IFS= read -r l; do
      case "$l" in STEP* | *" STEP "*) l="[$((SECONDS - T0)) s] $l" ;; esac
      printf '%s\n' "$l"
    done >>"$CACHE/build.log"
}
: >"$CACHE/build.log"
if ! build "$IMAGE-build" --target build || ! build "$IMAGE"; then
  tail -n 30 "$CACHE/build.log" >&2
  die "docker/Dockerfile does not build"
fi
grep -E '^\[[0-9]+ s\]' "$CACHE/build.log" | cut -c1-110 | sed 's/^/   /'
podman image prune -f >/dev/null

step "the image: user, environment, ports, libraries, packages"
user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
uid=${user%%:*}
case "$uid" in
  "" | 0 | root) die "the image runs as root (USER '$user')" ;;
esac
podman image inspect "$IMAGE" |
  python3 -c 'import json, sys; json.dump(json.load(sys.stdin)[0], sys.stdout)' >"$TMP/image.json"
"${RUN[@]}" --rm --network=none "$IMAGE" --print-config >"$TMP/print-config.json" ||
  die "ksidecar --print-config does not run in the image"
python3 - "$TMP/image.json" "$TMP/print-config.json" <<'PY' || exit 1
import json, sys
image, printed = (json.load(open(p)) for p in sys.argv[1:])
conf = image["Config"]
by_env = {"KSIDECAR_" + k.upper().replace(".", "_"): k for k in printed}
env = dict(e.split("=", 1) for e in conf["Env"])
bad, ports = [], set()
for name, value in env.items():
    if not name.startswith("KSIDECAR_"):
        continue
    key = by_env.get(name)
    if key is None:
        bad.append(f"ENV {name} is no ksidecar config key")
    elif printed[key] != value:
        bad.append(f"ENV {name}={value}, but ksidecar reads {key} = {printed[key]!r}")
    elif key.endswith("listen") and value:
        ports.add(value.rsplit(":", 1)[1] + "/tcp")
if not printed["config"]:
    bad.append("the image names no config file (KSIDECAR_CONFIG)")
exposed = set(conf.get("ExposedPorts") or {})
if exposed != ports:
    bad.append(f"EXPOSE {sorted(exposed)}, but the listen addresses are on {sorted(ports)}")
if not (image.get("Healthcheck") or {}).get("Test"):
    bad.append("the image has no HEALTHCHECK")
for b in bad:
    print("image.sh:", b, file=sys.stderr)
print("image ENV read as:", {k: v for k, v in env.items() if k.startswith("KSIDECAR_")})
sys.exit(1 if bad else 0)
PY
# One container lists what the closed-image checks need: ldd's answer, the files of each
# package installed by name, and /usr/local.
"${RUN[@]}" --rm --network=none --entrypoint /bin/sh "$IMAGE" -c '
  ldd /usr/local/bin/ksidecar | sed "s/^/ldd /"
  for p in $(apt-mark showmanual); do dpkg-query -L "$p" | sed "s|^|pkg $p |"; done
  find /usr/local -type f | sed "s/^/local /"' >"$TMP/inside.txt"
"${RUN[@]}" --rm --network=none --entrypoint apt-mark docker.io/library/debian:12-slim \
  showmanual >"$TMP/base-manual.txt"
python3 - "$TMP/inside.txt" "$TMP/base-manual.txt" <<'PY' || exit 1
import os, sys
lines = [l.rstrip("\n").split(" ", 2) for l in open(sys.argv[1]) if " " in l]
base = set(open(sys.argv[2]).read().split())
bad = []
libs = set()
for kind, *rest in lines:
    if kind == "ldd":
        text = " ".join(rest)
        if "not found" in text:
            bad.append(f"ldd: {text.strip()}")
        elif "=>" in text:
            libs.add(os.path.basename(text.split("=>")[1].split()[0]))
files = {}
for kind, *rest in lines:
    if kind == "pkg" and rest[0] not in base:
        files.setdefault(rest[0], set()).add(os.path.basename(rest[1]))
# ca-certificates is data: TLS to Kafka and to a push app checks against it.
for pkg, names in sorted(files.items()):
    if pkg != "ca-certificates" and not names & libs:
        bad.append(f"the Dockerfile installs {pkg}, which holds none of the binary's libraries")
local = sorted(rest[0] for kind, *rest in lines if kind == "local")
if local != ["/usr/local/bin/ksidecar"]:
    bad.append(f"/usr/local holds {local}, not the binary alone")
for b in bad:
    print("image.sh:", b, file=sys.stderr)
print(f"closed: ldd finds all {len(libs)} libraries; installed by name: {sorted(files)}")
sys.exit(1 if bad else 0)
PY
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
base_size=$(podman image inspect --format '{{.Size}}' docker.io/library/debian:12-slim)
echo "size: $((size / 1000000)) MB, of which the debian:12-slim base (mmdebstrap minbase)" \
  "$((base_size / 1000000)) MB: $(((size - base_size) / 1000000)) MB added"

wait_healthy() { # container, seconds: runs the image's HEALTHCHECK until it passes
  local i
  for i in $(seq 1 "$2"); do
    podman healthcheck run "$1" >/dev/null 2>&1 && return 0
    sleep 1
  done
  podman healthcheck run "$1" || true
  podman logs --tail 30 "$1" >&2 || true
  die "the HEALTHCHECK of $1 did not pass within $2 s"
}

step "the image's own environment with --dev, no network: the HEALTHCHECK as declared"
CONTAINERS+=(ksidecar-ci-dev-$$)
"${RUN[@]}" -d --name "ksidecar-ci-dev-$$" --network=none "$IMAGE" --dev >/dev/null
wait_healthy "ksidecar-ci-dev-$$" 60
pid=$(podman inspect --format '{{.State.Pid}}' "ksidecar-ci-dev-$$")
proc_uid=$(awk '/^Uid:/{print $2}' "/proc/$pid/status")
[ "$proc_uid" = "$uid" ] || die "ksidecar runs as uid $proc_uid, not the image's USER $uid"
echo "healthy; ksidecar runs as uid $proc_uid; health: $(podman inspect \
  --format '{{.State.Health.Status}}' "ksidecar-ci-dev-$$")"
podman rm -f -t 0 "ksidecar-ci-dev-$$" >/dev/null

step "the test broker"
KAFKA_DIR="$TMP/kafka"
boot=$(tests/kafka/kafka.sh start "$KAFKA_DIR")

step "against the broker ($boot): KSIDECAR_CONFIG and the listen addresses from the environment"
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
http=$(free_port) grpc=$(free_port) health=$(free_port) unused=$(free_port)
# The broker's address is in the mounted file only: records fetched mean the file was read.
printf '{"kafka": {"bootstrap.servers": "%s"}, "groups": {"allowed": ["ci-*"]},
 "log": {"format": "json"}}\n' "$boot" >"$TMP/ci.json"
chmod 644 "$TMP/ci.json"
c=ksidecar-ci-$$
CONTAINERS+=("$c")
"${RUN[@]}" -d --name "$c" --network=host -v "$TMP/ci.json:/etc/ksidecar/ci.json:ro" \
  -e KSIDECAR_CONFIG=/etc/ksidecar/ci.json -e "KSIDECAR_HTTP_LISTEN=127.0.0.1:$http" \
  -e "KSIDECAR_GRPC_LISTEN=127.0.0.1:$grpc" -e "KSIDECAR_HTTP_HEALTH_LISTEN=127.0.0.1:$health" \
  "$IMAGE" >/dev/null
wait_healthy "$c" 60
curl -fsS "http://127.0.0.1:$health/healthz"
curl -fsS "http://127.0.0.1:$http/healthz"
GRPCURL=$(command -v grpcurl || echo "${XDG_CACHE_HOME:-$HOME/.cache}/ksidecar/bin/grpcurl")
[ -x "$GRPCURL" ] || die "no grpcurl (scripts/install-deps.sh builds it)"
"$GRPCURL" -plaintext "127.0.0.1:$grpc" grpc.health.v1.Health/Check | tr -d ' \n'
echo
topic=ci-image-$$-$RANDOM group=ci-image-$$
curl -fsS -X POST "http://127.0.0.1:$http/v1/topics/$topic/records" \
  -H 'Content-Type: application/json' \
  -d '{"records":[{"key":"a","value":"one"},{"key":"b","value":"two"},{"key":"c","value":"three"}]}'
echo
ids=""
for _ in $(seq 1 12); do
  curl -fsS "http://127.0.0.1:$http/v1/groups/$group/records?topic=$topic&max=10&wait_ms=5000" \
    >>"$TMP/fetched.json"
  echo >>"$TMP/fetched.json"
  ids=$(python3 -c 'import json, sys
ids = [r["ack_id"] for l in open(sys.argv[1]) if l.strip() for r in json.loads(l)["records"]]
print(json.dumps(ids) if len(ids) >= 3 else "")' "$TMP/fetched.json")
  [ -n "$ids" ] && break
done
[ -n "$ids" ] || die "three records were not fetched within a minute: $(cat "$TMP/fetched.json")"
echo "fetched: $ids"
acked=$(curl -fsS -X POST -H 'Content-Type: application/json' -d "{\"ack_ids\":$ids}" \
  "http://127.0.0.1:$http/v1/groups/$group/acks?wait=commit&timeout_ms=10000")
echo "$acked"
python3 -c 'import json, sys; a = json.loads(sys.argv[1]); sys.exit(a["acked"] != 3)' "$acked" ||
  die "the ack did not ack the three records"
# The HEALTHCHECK's own command can fail: pointed at a port nobody serves, it says so.
mapfile -t hc < <(python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))["Healthcheck"]["Test"]
print("\n".join(t[1:] if t[0] == "CMD" else ["/bin/sh", "-c", t[1]]))' "$TMP/image.json")
if podman exec -e "KSIDECAR_HTTP_HEALTH_LISTEN=127.0.0.1:$unused" "$c" "${hc[@]}"; then
  die "the HEALTHCHECK (${hc[*]}) passed with nothing listening on its port"
fi
podman stop -t 30 "$c" >/dev/null
code=$(podman inspect --format '{{.State.ExitCode}}' "$c")
[ "$code" = 0 ] || { podman logs --tail 30 "$c" >&2; die "ksidecar exited $code on podman stop"; }
podman logs "$c" 2>&1 | grep -q '"stopped"' || die "no 'stopped' in the container's log"
echo "podman stop: drained, exit 0"

step "image.sh: passed"
