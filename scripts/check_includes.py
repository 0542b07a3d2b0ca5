#!/usr/bin/env python3
"""check_includes.py: the include graph's rules (scripts/check_includes.sh runs it).

Walks proxy/, api/, codec/ and daemon/ to any depth. A module is a .c/.h pair (foo.c, foo.h,
and a private foo_int.h, wherever it is, as proxy/internal/group_int.h), except that a transport's folder (api/grpc, api/http, api/push) is
one module, named for it. Module A depends on B when a file of A has #include "x.h" naming a
file of B: resolved as the compiler does, in the including file's own folder first, then on
the include path of the build (INCLUDE_PATH below). Fails (exit 1), printing each finding, on:
  - a cycle among modules;
  - a cycle among the files of one transport's folder (they form a chain, not a circle);
  - a transport including another transport's header;
  - proxy/ (the engine) including a header of api/ or codec/;
  - libmicrohttpd named (<microhttpd.h>, an MHD_ name) outside its adapter, api/http/http_mhd.c:
    the HTTP edge's handlers see only the neutral request and response (api/http/http_req.h).
--self-test runs the check on copies of the tree with each fault added on purpose, and fails
unless each is found and the tree as it is passes.
"""
import os, re, shutil, subprocess, sys, tempfile

ROOTS = ("proxy", "api", "codec", "daemon")
TRANSPORTS = ("api/grpc", "api/http", "api/push")
INCLUDE_PATH = ("proxy", "proxy/internal", "api", "codec", "daemon")
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# The one file that may name libmicrohttpd, and what naming it looks like.
MHD_ADAPTER = "api/http/http_mhd.c"
MHD_NAME = re.compile(r'<microhttpd\.h>|\bMHD_\w')


def walk(top):
    files = []
    for root in ROOTS:
        for d, _, names in os.walk(os.path.join(top, root)):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    files.append(os.path.relpath(os.path.join(d, n), top))
    return sorted(files)


def transport_of(path):
    for t in TRANSPORTS:
        if path.startswith(t + "/"):
            return t
    return None


def module(path):
    t = transport_of(path)
    if t:
        return t
    return file_module(path)  # proxy/internal/group_int.h is module group's, as group.c is


def file_module(path):
    """A file's own pair: foo.c, foo.h and foo_int.h are module foo."""
    base = os.path.basename(path).rsplit(".", 1)[0]
    return base[:-4] if base.endswith("_int") else base


def resolve(top, src, name, known):
    for d in (os.path.dirname(src),) + INCLUDE_PATH:
        p = os.path.normpath(os.path.join(d, name))
        if p in known:
            return p
    return None


def cycles_of(deps):
    found, state, stack = set(), {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(deps.get(m, {})):
            if state.get(t) == 1:
                cyc = stack[stack.index(t):]
                i = cyc.index(min(cyc))
                found.add(tuple(cyc[i:] + cyc[:i]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(deps):
        if m not in state:
            visit(m)
    return sorted(found)


def check(top):
    files = walk(top)
    known = set(files)
    deps, inner, problems = {}, {}, []
    for src in files:
        m = module(src)
        deps.setdefault(m, {})
        t = transport_of(src)
        with open(os.path.join(top, src), encoding="utf-8", errors="replace") as fh:
            for num, line in enumerate(fh, 1):
                if src != MHD_ADAPTER and MHD_NAME.search(line):
                    problems.append("libmicrohttpd outside its adapter (%s): %s:%d: %s"
                                    % (MHD_ADAPTER, src, num, line.strip()))
                hit = INC.match(line)
                if not hit:
                    continue
                dst = resolve(top, src, hit.group(1), known)
                if not dst:
                    continue  # a system, generated or test header
                why = "%s includes %s" % (src, dst)
                tm = module(dst)
                if tm != m:
                    deps[m].setdefault(tm, why)
                dt = transport_of(dst)
                if t and dt and dt != t:
                    problems.append("transport %s includes another transport's header: %s" % (t, why))
                if src.startswith("proxy/") and dst.startswith(("api/", "codec/")):
                    problems.append("the engine includes an edge's header: %s" % why)
                if t and dt == t:
                    a, b = file_module(src), file_module(dst)
                    if a != b:
                        inner.setdefault(t, {}).setdefault(a, {}).setdefault(b, why)
    for cyc in cycles_of(deps):
        ring = list(cyc) + [cyc[0]]
        problems.append("include cycle: " + " -> ".join(ring) + "".join(
            "\n    " + deps[a][b] for a, b in zip(ring, ring[1:])))
    for t in sorted(inner):
        for cyc in cycles_of(inner[t]):
            ring = list(cyc) + [cyc[0]]
            problems.append("include cycle inside %s: " % t + " -> ".join(ring) + "".join(
                "\n    " + inner[t][a][b] for a, b in zip(ring, ring[1:])))
    return len(deps), problems


def self_test(top):
    faults = [  # (file, line appended, what the finding must say)
        # a transport's private header is not on another's path: the compiler refuses it, and so
        # it is no edge of the graph
        ("api/push/push.c", '#include "http_int.h"\n', None),
        ("api/push/push.c", '#include "../http/http_api.h"\n', "includes another transport"),
        ("api/substream.c", '#include "edges.h"\n', "include cycle: "),
        ("proxy/engine.c", '#include "substream.h"\n', "the engine includes"),
        ("api/http/http_req.h", '#include "http_int.h"\n', "include cycle inside api/http"),
        ("api/http/http_routes.c", "#include <microhttpd.h>\n", "libmicrohttpd outside its adapter"),
        ("api/http/http_stream.c", "static int x = MHD_YES;\n", "libmicrohttpd outside its adapter"),
        ("codec/json_out.h", '#include "codec.h"\n', "include cycle: "),
    ]
    n, problems = check(top)
    if problems:
        print("check_includes self-test: the tree as it is fails:\n" + "\n".join(problems))
        return 1
    bad = 0
    for path, line, want in faults:
        tmp = tempfile.mkdtemp(prefix="ks-includes-")
        try:
            for r in ROOTS:
                shutil.copytree(os.path.join(top, r), os.path.join(tmp, r))
            with open(os.path.join(tmp, path), "a") as fh:
                fh.write(line)
            _, found = check(tmp)
            text = "\n".join(found)
            ok = (not found) if want is None else (want in text)
            print("self-test: %s + %s -> %s" % (path, line.strip(),
                                                  (text.splitlines() or ["no finding"])[0]))
            if not ok:
                print("  FAILED: expected %s" % (repr(want) if want else "no finding"))
                bad += 1
        finally:
            shutil.rmtree(tmp)
    print("check_includes self-test: %d passed, %d failed" % (len(faults) - bad, bad))
    return 1 if bad else 0


def main():
    top = os.getcwd()
    if "--self-test" in sys.argv[1:]:
        sys.exit(self_test(top))
    n, problems = check(top)
    if problems:
        print("\n".join(problems))
        sys.exit(1)
    print("check_includes: no include cycle, no transport reaching another and libmicrohttpd only in "
          "its adapter, among %d modules of %s" % (n, ", ".join(ROOTS)))


if __name__ == "__main__":
    main()
