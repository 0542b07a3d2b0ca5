#!/usr/bin/env bash
# Runs every client library's test suite (tests/clients/<language>.sh) against the broker of
# KSIDECAR_TEST_BOOTSTRAP, one after another; scripts/test.sh runs it under kafka.sh run.
# Exits non-zero if any suite failed, after running them all.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rc=0
for lang in python go node; do
  [ -x "$here/$lang.sh" ] || continue
  echo "== client library: $lang"
  start=$(date +%s)
  if ! "$here/$lang.sh"; then
    echo "client library $lang: tests failed" >&2
    rc=1
  fi
  echo "client library $lang: $(($(date +%s) - start)) s"
done
exit $rc
