#!/usr/bin/env bash
# Installs clients/node's dependencies with npm (npm ci from package-lock.json, skipped when
# node_modules was installed from the same lock) and copies proto/ into the package, which
# loads it at run time (nothing generated is committed). node.sh and the registry tests run it.
#
#   tests/clients/node_env.sh
set -euo pipefail

PKG="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/clients/node"
command -v node >/dev/null || { echo "node_env.sh: node (20 or later) is not installed" >&2; exit 1; }
command -v npm >/dev/null || { echo "node_env.sh: npm is not installed" >&2; exit 1; }

cd "$PKG"
# Reinstall only when package-lock.json changed since the last install here (a stamp in
# node_modules), or proto/ is missing.
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ "$(cat node_modules/.ksidecar-lock 2>/dev/null)" != "$lock_sum" ] \
   || [ ! -f proto/ksidecar/v1/consumer.proto ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_sum" > node_modules/.ksidecar-lock
fi
node scripts/copy-proto.js >/dev/null # the .proto files as they are in this checkout
