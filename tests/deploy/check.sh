#!/usr/bin/env bash
# check.sh: checks the deploy files of docker/ without a Docker engine or a cluster: the
# Kubernetes manifests against Kubernetes' schemas, the Dockerfile with hadolint and its COPY
# sources, the compose file as YAML, the compose file and the manifest against the image
# (tests/deploy/match_image.py: ports, environment, config, probes asked of a running ksidecar),
# the systemd unit with systemd-analyze verify. The unit's ExecStart run under a notify socket
# is tests/integration/test_sd_notify.py; the image built and run is tests/deploy/image.sh.
# Usage: tests/deploy/check.sh [BUILD_DIR] (default build/: the binary the unit names and
# match_image.py runs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD="${1:-build}"
fail=0

echo "-- kubernetes-validate (strict, Kubernetes 1.29, the first with native sidecars, and its own latest)"
for v in 1.29.0 ""; do
  kubernetes-validate --strict --quiet ${v:+-k "$v"} docker/k8s/*.yaml || fail=1
done

echo "-- hadolint docker/Dockerfile"
hadolint docker/Dockerfile || fail=1

echo "-- every COPY source of docker/Dockerfile exists (the build context is the repository, less .dockerignore)"
while read -r src; do
  if [ ! -e "$src" ]; then
    echo "docker/Dockerfile copies $src, which does not exist" >&2
    fail=1
  fi
  while read -r pat; do
    case "$pat" in "" | "#"*) continue ;; esac
    case "$src/" in "${pat%/}/"*)
      echo "docker/Dockerfile copies $src, which .dockerignore leaves out ($pat)" >&2
      fail=1
      ;;
    esac
  done <.dockerignore
done < <(awk 'toupper($1) == "COPY" && $2 !~ /^--from=/ {
  for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' docker/Dockerfile)

echo "-- docker/compose.yaml: YAML whose build context and mounted files exist"
python3 - <<'PY' || fail=1
import os, sys, yaml
doc = yaml.safe_load(open("docker/compose.yaml"))
bad = []
for name, svc in doc["services"].items():
    b = svc.get("build")
    if b:
        ctx = os.path.normpath(os.path.join("docker", b["context"]))
        if not os.path.isfile(os.path.join(ctx, b["dockerfile"])):
            bad.append(f"{name}: no {b['dockerfile']} in context {ctx}")
    for v in svc.get("volumes", []):
        src = v.split(":")[0]
        if src.startswith(".") and not os.path.exists(os.path.join("docker", src)):
            bad.append(f"{name}: mounts {src}, which does not exist")
    for d in svc.get("depends_on", []):
        if d not in doc["services"]:
            bad.append(f"{name}: depends on unknown service {d}")
for b in bad:
    print("docker/compose.yaml:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY

echo "-- docker/compose.yaml and docker/k8s/sidecar.yaml held to the image ($BUILD/ksidecar says what they mean)"
python3 tests/deploy/match_image.py "$BUILD/ksidecar" || fail=1

echo "-- systemd-analyze verify docker/ksidecar.service (ExecStart's binary: $BUILD/ksidecar)"
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd-analyze is not installed: that step is skipped (scripts/install-deps.sh installs systemd)"
else
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  sed "s#/usr/local/bin/ksidecar#$PWD/$BUILD/ksidecar#" docker/ksidecar.service >"$tmp/ksidecar.service"
  # verify exits 0 on a key it ignores, so any message fails the check.
  if ! out=$(systemd-analyze verify "$tmp/ksidecar.service" 2>&1) || [ -n "$out" ]; then
    echo "$out" >&2
    fail=1
  fi
fi

if [ "$fail" -ne 0 ]; then
  echo "deploy checks: FAILED" >&2
  exit 1
fi
echo "deploy checks: passed"
