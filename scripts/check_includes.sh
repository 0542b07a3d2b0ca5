#!/usr/bin/env bash
# check_includes.sh: fails (exit 1) when the include graph of proxy/, api/, codec/ and daemon/
# breaks its rules: a cycle among modules (a transport's folder counts as one), a cycle among
# the files of one transport's folder, a transport including another's header, the engine
# including an edge's, or libmicrohttpd named outside its adapter (api/http/http_mhd.c). The rules and how includes are resolved: scripts/check_includes.py.
# --self-test: each rule shown failing on a fault added on purpose to a copy of the tree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 scripts/check_includes.py "$@"
