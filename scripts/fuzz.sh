#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz, clang, ASan+UBSan) into build-fuzz/ and runs
# them one after another: scripts/fuzz.sh [target|all] [seconds per target, default 60].
# Seeds come from tests/fuzz/corpus/<target>/; what the fuzzer adds goes to
# build-fuzz/corpus/<target>/ and crashes to build-fuzz/artifacts/<target>/, never into the
# repo. Exits non-zero if any harness fails (a crash, a sanitizer report, a hang or a leak).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TARGETS=(ack_id commit_meta config auth http_body grpc_ack http_url push_answer avro json_schema protobuf)
which="${1:-all}"
secs="${2:-60}"
if [ "$which" = all ]; then
  run=("${TARGETS[@]}")
elif printf '%s\n' "${TARGETS[@]}" | grep -qx "$which"; then
  run=("$which")
else
  echo "fuzz.sh: unknown target \"$which\" (known: all ${TARGETS[*]})" >&2
  exit 2
fi

dir=build-fuzz
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
if [ ! -f "$dir/CMakeCache.txt" ]; then
  CC=clang cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKSIDECAR_FUZZ=ON \
    -DKSIDECAR_TESTS=OFF >/dev/null
fi
cmake --build "$dir" -j "$(nproc)" --target "${run[@]/#/fuzz_}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=()
for t in "${run[@]}"; do
  mkdir -p "$dir/corpus/$t" "$dir/artifacts/$t"
  echo "== fuzz_$t for ${secs} s"
  # One process, one job: the machine is shared. New inputs go to the first (build) corpus
  # directory; the seeds are only read.
  if ! "$dir/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t/" \
    "$dir/corpus/$t" "tests/fuzz/corpus/$t" 2>"$dir/fuzz_$t.log"; then
    failed+=("$t")
    tail -n 60 "$dir/fuzz_$t.log" >&2
    echo "fuzz_$t FAILED; the input is in $dir/artifacts/$t/, the log in $dir/fuzz_$t.log" >&2
  else
    grep -E '^stat::(number_of_executed_units|new_units_added)|^Done' "$dir/fuzz_$t.log" || true
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]}" >&2
  exit 1
fi
