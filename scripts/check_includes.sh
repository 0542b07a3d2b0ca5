#!/usr/bin/env bash
# check_includes.sh: fails (exit 1) when the include graph of proxy/, api/ and daemon/ has a
# cycle, and prints each cycle found.
#
# The graph is one of modules, not files: foo.c and foo.h are one module "foo" (a private
# header foo_int.h belongs to module "foo" too), and module A depends on B when a file of A
# has #include "b.h" naming a header of B. So engine.c including group_loop.h while
# group_loop.h included engine.h was a cycle, though no header included itself. Only quoted
# includes that name a file of these directories count (generated and system headers do not).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 - "$@" <<'PY'
import os, re, sys

dirs = [d for d in ("proxy", "proxy/internal", "api", "daemon") if os.path.isdir(d)]
files = {}  # basename -> path
for d in dirs:
    for f in sorted(os.listdir(d)):
        if f.endswith((".c", ".h")):
            files.setdefault(f, os.path.join(d, f))

def module(name):
    base = name.rsplit(".", 1)[0]
    return base[:-4] if base.endswith("_int") else base

inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
deps = {}  # module -> {module: "file includes header"}
for name, path in files.items():
    m = module(name)
    deps.setdefault(m, {})
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            hit = inc.match(line)
            if not hit:
                continue
            target = os.path.basename(hit.group(1))
            if target not in files:
                continue
            t = module(target)
            if t != m:
                deps[m].setdefault(t, "%s includes %s" % (path, files[target]))

# Depth-first search; a back edge closes a cycle. Each cycle is reported once, from its
# smallest module name.
cycles = set()
state = {}  # module -> 1 on the stack, 2 done
stack = []

def visit(m):
    state[m] = 1
    stack.append(m)
    for t in sorted(deps.get(m, {})):
        if state.get(t) == 1:
            cyc = stack[stack.index(t):]
            i = cyc.index(min(cyc))
            cycles.add(tuple(cyc[i:] + cyc[:i]))
        elif t not in state:
            visit(t)
    stack.pop()
    state[m] = 2

for m in sorted(deps):
    if m not in state:
        visit(m)

if not cycles:
    print("check_includes: no include cycle among %d modules of %s" % (len(deps), ", ".join(dirs)))
    sys.exit(0)
for cyc in sorted(cycles):
    ring = list(cyc) + [cyc[0]]
    print("include cycle: " + " -> ".join(ring))
    for a, b in zip(ring, ring[1:]):
        print("    " + deps[a][b])
sys.exit(1)
PY
