#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, and run `ksidecar --dev`
# (an in-process mock Kafka cluster with a demo topic, HTTP on 127.0.0.1:8080).
# Extra arguments go to ksidecar, e.g. scripts/dev.sh --http.listen=127.0.0.1:9090
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Only what building and running need: the test tooling comes with scripts/test.sh.
scripts/install-deps.sh
# cmocka and libyaml are test tooling: without them the unit tests are left out of the build.
pkg-config --exists cmocka yaml-0.1 2>/dev/null || export KSIDECAR_BUILD_TESTS=0
scripts/build.sh ksidecar >&2
exec build/ksidecar --dev "$@"
