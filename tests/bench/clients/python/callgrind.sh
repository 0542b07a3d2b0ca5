#!/usr/bin/env bash
# Instructions a record of the Python process, counted by callgrind (no clock: fine on a loaded
# machine), for bench.py's clients on a topic without keys and one with 1,000 keys:
#
#   tests/kafka/kafka.sh run tests/bench/clients/python/callgrind.sh [--records N]
#       [--keys 0,1000] [--clients ksidecar-iterator,...] [--python VENV/bin/python]
#
# Per topic (8 partitions of 100 B records, made here) and client, runs
# `bench.py --one CLIENT --topic T --records N` and `... --records N/2` under
# `valgrind --tool=callgrind --separate-threads=yes` and prints (all threads' instructions at N
# less at N/2) / (N - N/2): start-up, imports and the group's join cancel out. --python runs
# another interpreter (a venv with another build of the library: its "before"); the default is
# the tests' venv with confluent-kafka. KSIDECAR_TEST_PURE_PYTHON=1 measures the library's
# pure-Python path. The callgrind files stay in a directory it names.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
: "${KSIDECAR_TEST_BOOTSTRAP:?is not set: run this under tests/kafka/kafka.sh run}"
records=100000 keys=0,1000 clients=ksidecar-iterator py=""
while [ $# -gt 0 ]; do
  case "$1" in
    --records) records=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    *) echo "callgrind.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 2; }
[ -n "$py" ] || py="$("$ROOT/tests/clients/python_env.sh" confluent-kafka)/bin/python"
KSTOOL="${KSIDECAR_TEST_KSTOOL:-$ROOT/build/kstool}"
B="$KSIDECAR_TEST_BOOTSTRAP"
out="$(mktemp -d /tmp/ksidecar-pycallgrind.XXXXXX)"
echo "# callgrind of $py, $records less $((records / 2)) records; files in $out"
topics=()
trap 'for t in "${topics[@]}"; do "$KSTOOL" delete -b "$B" -t "$t" >/dev/null 2>&1 || true; done' EXIT
for k in ${keys//,/ }; do
  t="pycg-k$k-$RANDOM$RANDOM"
  topics+=("$t")
  "$KSTOOL" create -b "$B" -t "$t" -p 8 >/dev/null
  if [ "$k" = 0 ]; then kk=(-N); else kk=(-k "$k"); fi
  "$KSTOOL" produce -b "$B" -t "$t" -n "$records" -p 8 -s 100 "${kk[@]}" >/dev/null
  for c in ${clients//,/ }; do
    for n in "$records" "$((records / 2))"; do
      d="$out/$c-k$k-n$n"
      mkdir -p "$d"
      # ksidecar may be slow to answer on a loaded machine: one more try.
      for try in 1 2; do
        rm -f "$d"/cg.*
        if (cd "$d" && valgrind --tool=callgrind --separate-threads=yes \
              --callgrind-out-file="$d/cg.%p" "$py" "$ROOT/tests/bench/clients/python/bench.py" \
              --one "$c" --topic "$t" --records "$n" >out.json 2>err.log); then
          break
        fi
        [ "$try" = 2 ] && { echo "callgrind.sh: $c on $n records failed: $d/err.log" >&2; exit 1; }
      done
    done
    python3 - "$out/$c-k$k-n$records" "$out/$c-k$k-n$((records / 2))" "$c" "$k" <<'PY'
import glob, json, re, sys
def total(d):
    n = 0
    for f in glob.glob(d + "/cg.*"):
        m = re.search(r"^(?:summary|totals): (\d+)", open(f, errors="replace").read(), re.M)
        n += int(m.group(1)) if m else 0
    # The records it handled (the callback form's workers may take a few past N).
    return n, json.loads(open(d + "/out.json").read().strip().splitlines()[-1])["records"]
(full, nf), (half, nh) = total(sys.argv[1]), total(sys.argv[2])
client, keys = sys.argv[3], sys.argv[4]
keys = "no keys" if keys == "0" else f"{int(keys):,} keys"
print(f"{client:18s} {keys:10s} {(full - half) / (nf - nh):>9,.0f} instructions a record")
PY
  done
done
