#!/usr/bin/env python3
"""check_calls.py: the files of one transport's folder (api/http, api/grpc, api/push) call
each other in a chain, never in a circle.

Reads the objects' symbols with nm: a file calls another of its folder when one of its
undefined symbols is defined by the other (a function, or a table of them). Fails, printing
each cycle and the symbols on each of its steps, when a folder's files reach themselves.

  check_calls.py [--nm NM] OBJ...        the objects of ksapi (one argument may hold a
                                         ';'-separated list, as $<TARGET_OBJECTS:ksapi> gives)
  check_calls.py [--nm NM] --build DIR   the objects under DIR/CMakeFiles/ksapi.dir
  check_calls.py --self-test             the check on made-up symbol tables: a chain passes,
                                         a circle of two and one of three fail
"""
import argparse
import glob
import os
import re
import subprocess
import sys

FOLDERS = ("api/http", "api/grpc", "api/push")
DEFINED = set("TDBRVWiu")  # nm's kinds of a global a file defines


def folder_of(obj):
    """(folder, file) of an object built from a transport's file, or None."""
    path = obj.replace(os.sep, "/")
    for f in FOLDERS:
        m = re.search(r"(?:^|/)" + re.escape(f) + r"/([^/]+?)\.(?:c\.)?o(?:bj)?$", path)
        if m:
            return f, m.group(1) + ".c"
    return None


def symbols(nm, obj):
    """(defined globals, undefined) of obj."""
    out = subprocess.run([nm, "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind in DEFINED:
            defined.add(name)
    return defined, undefined


def edges_of(files):
    """files: {file: (defined, undefined)} -> {caller: {callee: [symbols]}}."""
    owner = {}
    for f, (defined, _) in files.items():
        for s in defined:
            owner[s] = f
    edges = {f: {} for f in files}
    for f, (_, undefined) in files.items():
        for s in sorted(undefined):
            g = owner.get(s)
            if g and g != f:
                edges[f].setdefault(g, []).append(s)
    return edges


def cycles(edges):
    """The strongly connected components of more than one file (Tarjan's), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    n = [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def one_cycle(edges, comp):
    """A circle through comp's first file, by a breadth-first walk inside comp."""
    start = comp[0]
    inside = set(comp)
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v]):
            if w not in inside:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return [start]


def report(folder, edges):
    """Prints folder's cycles; returns how many."""
    found = cycles(edges)
    for comp in found:
        print(f"check_calls: {folder}: its files call each other in a circle: {', '.join(comp)}")
        print(f"  a circle: {' -> '.join(one_cycle(edges, comp))}")
        inside = set(comp)
        for a in comp:
            for b in sorted(edges[a]):
                if b in inside:
                    print(f"  {a} -> {b}: {', '.join(edges[a][b])}")
    return len(found)


def check(folders):
    """folders: {folder: {file: (defined, undefined)}} -> the number of cycles."""
    bad = 0
    for folder in sorted(folders):
        bad += report(folder, edges_of(folders[folder]))
    return bad


def self_test():
    def t(d, u):
        return (set(d), set(u))

    cases = [
        ("a chain", {"a.c": t(["a1"], ["b1", "c1"]), "b.c": t(["b1"], ["c1"]),
                     "c.c": t(["c1"], ["malloc"])}, 0),
        ("a circle of two", {"a.c": t(["a1"], ["b1"]), "b.c": t(["b1"], ["a1"])}, 1),
        ("a circle of three", {"a.c": t(["a1"], ["b1"]), "b.c": t(["b1"], ["c1"]),
                               "c.c": t(["c1"], ["a1"]), "d.c": t(["d1"], ["a1"])}, 1),
    ]
    failed = 0
    for name, files, want in cases:
        got = report("self-test", edges_of(files))
        ok = got == want
        failed += not ok
        print(f"self-test: {name}: {'passed' if ok else f'FAILED ({got} cycles, want {want})'}")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--build", help="a build directory (its CMakeFiles/ksapi.dir)")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("objects", nargs="*")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    objs = [o for arg in a.objects for o in arg.split(";") if o]
    if a.build:
        objs += glob.glob(os.path.join(a.build, "CMakeFiles", "ksapi.dir", "api", "*", "*.o"))
    folders = {}
    for o in objs:
        where = folder_of(o)
        if where:
            folders.setdefault(where[0], {})[where[1]] = symbols(a.nm, o)
    missing = [f for f in FOLDERS if f not in folders]
    if missing:
        print(f"check_calls: no objects of {', '.join(missing)} among those given", file=sys.stderr)
        return 2
    bad = check(folders)
    if bad:
        print(f"check_calls: {bad} circle(s); move whole functions so that a file calls only "
              "files below it")
        return 1
    print("check_calls: " + "; ".join(f"{f}: {len(folders[f])} files, no circle" for f in FOLDERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
