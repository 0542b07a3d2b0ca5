#!/bin/sh
# Generates the protobuf and gRPC stubs in kspb/ from the repository's proto/ (run by go generate).
# The two protoc plugins are installed (go install, pinned versions) into .bin/ once.
# kspb/ is committed (go get, go build and go vet need no protoc); tests/clients/go.sh checks
# that running this leaves it unchanged. The header line naming protoc's version is removed:
# the plugins are pinned here but protoc is whatever the system has, so that line alone
# would make the check fail on every other protoc release (a protoc that changed the
# descriptors themselves would still show in it).
set -eu
cd "$(dirname "$0")"
PROTO_DIR=${KSIDECAR_PROTO_DIR:-../../proto}
PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2
BIN=$PWD/.bin
mkdir -p "$BIN" kspb
rm -f kspb/*.pb.go # a stub whose proto is gone from the list below must not linger
have() { [ -x "$BIN/$1" ] && [ "$(cat "$BIN/$1.version" 2>/dev/null)" = "$2" ]; }
if ! have protoc-gen-go "$PROTOC_GEN_GO"; then
    GOBIN=$BIN go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO"
    echo "$PROTOC_GEN_GO" >"$BIN/protoc-gen-go.version"
fi
if ! have protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC"; then
    GOBIN=$BIN go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC"
    echo "$PROTOC_GEN_GO_GRPC" >"$BIN/protoc-gen-go-grpc.version"
fi
PROTOC=${PROTOC:-protoc}
command -v "$PROTOC" >/dev/null || { echo "gen.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
M=
for f in consumer producer; do
    M="$M --go_opt=Mksidecar/v1/$f.proto=ksidecar/clients/go/kspb;kspb"
    M="$M --go-grpc_opt=Mksidecar/v1/$f.proto=ksidecar/clients/go/kspb;kspb"
done
# shellcheck disable=SC2086
"$PROTOC" -I"$PROTO_DIR" --plugin=protoc-gen-go="$BIN/protoc-gen-go" \
    --plugin=protoc-gen-go-grpc="$BIN/protoc-gen-go-grpc" \
    --go_out=kspb --go_opt=module=ksidecar/clients/go/kspb \
    --go-grpc_out=kspb --go-grpc_opt=module=ksidecar/clients/go/kspb $M \
    ksidecar/v1/consumer.proto ksidecar/v1/producer.proto
for f in kspb/*.pb.go; do
    sed -E '/^\/\/[[:space:]-]*protoc[[:space:]]+v[0-9]/d' "$f" >"$f.tmp" && mv "$f.tmp" "$f"
done
