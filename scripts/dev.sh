#!/usr/bin/env bash
# Quick start, command 1: install what is missing, build, and run `ksidecar --dev`
# (an in-process mock Kafka cluster with a demo topic, HTTP on 127.0.0.1:8080).
# Extra arguments go to ksidecar, e.g. scripts/dev.sh --http.listen=127.0.0.1:9090
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/install-deps.sh
scripts/build.sh >&2
exec build/ksidecar --dev "$@"
