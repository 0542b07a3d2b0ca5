#!/usr/bin/env bash
# Runs the Go client library's tests (clients/go) against the real ksidecar binary and broker.
#
#   tests/kafka/kafka.sh run tests/clients/go.sh [go test flags, e.g. -run TestOrdered]
#
# kafka.sh exports KSIDECAR_TEST_BOOTSTRAP; KSIDECAR_TEST_BIN and KSIDECAR_TEST_KSTOOL default
# to build/ksidecar and build/kstool. Installs what is missing (Go from /usr/local/go or PATH,
# protoc from Debian, the protoc plugins from the Go module proxy), regenerates the committed
# stubs (kspb/) with go generate and fails if that changed them, and runs go vet and go test.
# Exits non-zero when anything fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${KSIDECAR_TEST_BOOTSTRAP:?run under tests/kafka/kafka.sh run, which starts a broker and sets it}"
export KSIDECAR_TEST_BIN="${KSIDECAR_TEST_BIN:-$ROOT/build/ksidecar}"
export KSIDECAR_TEST_KSTOOL="${KSIDECAR_TEST_KSTOOL:-$ROOT/build/kstool}"
for f in "$KSIDECAR_TEST_BIN" "$KSIDECAR_TEST_KSTOOL"; do
  [ -x "$f" ] || { echo "go.sh: $f is missing: build first (scripts/build.sh)" >&2; exit 1; }
done

if ! command -v go >/dev/null; then
  if [ -x /usr/local/go/bin/go ]; then
    export PATH="$PATH:/usr/local/go/bin"
  else
    echo "go.sh: no Go toolchain (go1.23 or newer) on PATH or in /usr/local/go" >&2
    exit 1
  fi
fi
if ! command -v protoc >/dev/null; then
  SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi

cd "$ROOT/clients/go"
start=$(date +%s)
go generate ./...
# kspb/ is committed for go get; it must be what gen.sh makes from proto/ now.
if [ -n "$(git status --porcelain -- kspb)" ]; then
  git status --short -- kspb >&2
  git --no-pager diff --stat -- kspb >&2
  echo "go.sh: go generate changed clients/go/kspb: commit what it generated from proto/" >&2
  exit 1
fi
go vet ./...
rc=0
go test -count=1 -timeout 15m -v "$@" ./... || rc=$?
echo "go.sh: go test exited $rc after $(( $(date +%s) - start )) s"
exit "$rc"
