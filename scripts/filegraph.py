#!/usr/bin/env python3
"""Which source file uses which: the file-level graph of a built tree, and
its circles.

Two graphs:
  - references: file A -> file B when A's object file uses a function or
    data object (an undefined symbol, `nm`) that B's object file defines,
    resolved the way the linker does: inside each executable or shared
    library the build links (read from the Ninja build tree's build.ninja),
    so a symbol two link units define (a CUDA entry point in the simulator
    and in the vGPU hook) is never taken for the other one's;
  - includes: header H -> header G when H has #include "G" (resolved in the
    including file's folder, then in each of the include roots).

A circle is a strongly connected set of more than one file (or module) in
either graph: files that cannot be read, built or tested one without the
other. A header included by several files for its types makes no circle:
only an #include between headers or a reference between object files counts.

Used by scripts/check-layering (--objects) and usable alone:
  scripts/filegraph.py BUILD_DIR [--prefix src/ --prefix sim/] [--edges]
  scripts/filegraph.py --self-test
prints the circles (or every edge with --edges: "A -> B symbol") and exits 1
when there is one. Python 3.8, no modules beyond the standard library."""
import collections
import os
import re
import subprocess
import sys

LINK_RE = re.compile(r"^build ([^:]+): C(?:XX)?_(?:EXECUTABLE|SHARED_LIBRARY|MODULE)_LINKER\S* ([^|]*)(?:\|([^|]*))?")
STATIC_RE = re.compile(r"^build ([^:]+): C(?:XX)?_STATIC_LIBRARY_LINKER\S* ([^|]*)(?:\|([^|]*))?")
COMPILE_RE = re.compile(r"^build ([^:]+\.o): C(?:XX)?_COMPILER\S* (\S+)")
# nm symbol types: defined (global or weak) and used.
DEFINED = set("TDBRVWGSCiu")
USED = set("Uwv")


def _ninja_lines(path):
    """The statements of build.ninja, continuation lines ("$" at the end) joined."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        buf = ""
        for line in fh:
            line = line.rstrip("\n")
            if line.endswith("$") and not line.endswith("$$"):
                buf += line[:-1]
                continue
            yield buf + line
            buf = ""


def _split(paths):
    return [p.replace("$:", ":") for p in (paths or "").split()]


def read_build(build):
    """(sources, units): object path -> source path (both relative to the
    build tree / absolute), and the link units: a list of object lists."""
    sources, statics, links = {}, {}, []
    for line in _ninja_lines(os.path.join(build, "build.ninja")):
        m = COMPILE_RE.match(line)
        if m:
            sources[m.group(1)] = m.group(2)
            continue
        m = STATIC_RE.match(line)
        if m:
            statics[m.group(1)] = (_split(m.group(2)), _split(m.group(3)))
            continue
        m = LINK_RE.match(line)
        if m:
            links.append((m.group(1), _split(m.group(2)), _split(m.group(3))))
    shared = {out: (objs, deps) for out, objs, deps in links}
    units = []
    for out, objs, deps in links:
        unit, seen, todo = list(objs), set(), list(deps)
        while todo:
            d = todo.pop()
            if d in seen:
                continue
            seen.add(d)
            lib = statics.get(d) or shared.get(d)
            if lib:
                unit += lib[0]
                todo += lib[1]
        units.append((out, [o for o in dict.fromkeys(unit) if o.endswith(".o")]))
    return sources, units


def _nm(build, objs):
    """object -> (defined symbols, used symbols); objects missing are left out."""
    out = {}
    present = [o for o in objs if os.path.exists(os.path.join(build, o))]
    for i in range(0, len(present), 200):
        batch = present[i:i + 200]
        res = subprocess.run(["nm", "-A"] + batch, cwd=build, capture_output=True, text=True, check=True).stdout
        for o in batch:
            out[o] = (set(), set())
        for line in res.splitlines():
            name, _, rest = line.partition(": ")
            if name not in out:
                name, _, rest = line.rpartition(":")
                name = name.strip()
                if name not in out:
                    continue
            parts = rest.split()
            if len(parts) == 3 and parts[1] in DEFINED:
                out[name][0].add(parts[2])
            elif len(parts) == 2 and parts[0] in USED:
                out[name][1].add(parts[1])
    return out


def reference_edges(root, build, prefixes=("src/", "sim/")):
    """{file: {file: set(symbols)}} over the sources under `prefixes`
    (relative to root), and the list of objects not built (missing)."""
    root = os.path.realpath(root)
    sources, units = read_build(build)

    def rel(obj):
        src = sources.get(obj)
        if not src:
            return None
        if not os.path.isabs(src):
            src = os.path.join(build, src)
        r = os.path.relpath(os.path.realpath(src), root)
        return r if r.startswith(tuple(prefixes)) else None

    all_objs = sorted({o for _, objs in units for o in objs})
    syms = _nm(build, all_objs)
    missing = [o for o in all_objs if o not in syms and rel(o)]
    edges = collections.defaultdict(lambda: collections.defaultdict(set))
    for _, objs in units:
        home = collections.defaultdict(set)
        for o in objs:
            for s in syms.get(o, ((), ()))[0]:
                home[s].add(o)
        for o in objs:
            a = rel(o)
            if not a:
                continue
            for s in syms.get(o, ((), ()))[1]:
                for d in home.get(s, ()):
                    b = rel(d)
                    if b and b != a:
                        edges[a][b].add(s)
    return edges, missing


def include_edges(root, tops=("src", "sim"), roots=("src", "sim")):
    """{header: {header: set(line numbers)}}: #include "..." between the .h
    and .inc files under `tops`, resolved beside the file, then in `roots`."""
    inc_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    edges = collections.defaultdict(lambda: collections.defaultdict(set))
    for top in tops:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".inc")):
                    continue
                f = os.path.join(dirpath, name)
                a = os.path.relpath(f, root)
                with open(f, encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        m = inc_re.match(line)
                        if not m:
                            continue
                        for base in [dirpath] + [os.path.join(root, r) for r in roots]:
                            p = os.path.normpath(os.path.join(base, m.group(1)))
                            if os.path.isfile(p):
                                edges[a][os.path.relpath(p, root)].add(lineno)
                                break
    return edges


def circles(edges):
    """The strongly connected sets of more than one node, each sorted (Tarjan,
    iterative: no recursion limit)."""
    graph = {a: sorted(bs) for a, bs in edges.items()}
    nodes = sorted(set(graph) | {b for bs in graph.values() for b in bs})
    index, low, on, stack, out, counter = {}, {}, set(), [], [], 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            succ = graph.get(v, [])
            if i < len(succ):
                work.append((v, i + 1))
                w = succ[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
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
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(out)


def module_of(path):
    """"src/plugin/daemon.c" -> "src/plugin"; a file directly in src/ is its own module."""
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else path


def module_edges(edges):
    out = collections.defaultdict(lambda: collections.defaultdict(set))
    for a, bs in edges.items():
        for b, why in bs.items():
            if module_of(a) != module_of(b):
                out[module_of(a)][module_of(b)] |= {f"{a} -> {b}"}
    return out


def describe(circle, edges, limit=4):
    """One line per edge inside `circle`: "A -> B: sym1, sym2"."""
    lines = []
    members = set(circle)
    for a in circle:
        for b in sorted(edges.get(a, {})):
            if b in members:
                why = sorted(str(x) for x in edges[a][b])
                more = f" (+{len(why) - limit})" if len(why) > limit else ""
                lines.append(f"    {a} -> {b}: {', '.join(why[:limit])}{more}")
    return lines


def self_test():
    """Builds a small tree with `cc` and checks that each kind of circle is
    found and that no edge crosses link units; returns the failures (empty
    when the checker works)."""
    import tempfile
    fails = []
    with tempfile.TemporaryDirectory() as d:
        files = {
            "src/m/a.c": "int b_fn(void);\nint a_fn(void) { return b_fn(); }\n",
            "src/m/b.c": "int a_fn(void);\nint b_fn(void) { return 1; }\nint b_other(void) { return a_fn(); }\n",
            # Another executable: its b_fn is not a.c's, and a_fn is not linked with it.
            "src/n/c.c": "int b_fn(void) { return 2; }\n",
            "src/n/d.c": "int a_fn(void);\nint b_fn(void);\nint main(void) { return a_fn() + b_fn(); }\n",
            "src/m/x.h": '#include "m/y.h"\n',
            "src/m/y.h": '#include "x.h"\n',
        }
        for path, text in files.items():
            os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(d, path), "w") as fh:
                fh.write(text)
        build = os.path.join(d, "build")
        os.makedirs(build)
        ninja = []
        for path in files:
            if path.endswith(".c"):
                obj = path.replace("/", "_") + ".o"
                subprocess.run(["cc", "-c", "-o", os.path.join(build, obj), os.path.join(d, path)], check=True)
                ninja.append(f"build {obj}: C_COMPILER__t_Debug {os.path.join(d, path)} || order")
        ninja.append("build libm.a: C_STATIC_LIBRARY_LINKER__m_Debug src_m_a.c.o src_m_b.c.o")
        ninja.append("build t: C_EXECUTABLE_LINKER__t_Debug src_n_d.c.o | libm.a /usr/lib/libc.so || libm.a")
        ninja.append("build u: C_EXECUTABLE_LINKER__u_Debug src_n_c.c.o src_n_d.c.o")
        with open(os.path.join(build, "build.ninja"), "w") as fh:
            fh.write("\n".join(ninja) + "\n")
        refs, missing = reference_edges(d, build)
        got = {a: {b: sorted(w) for b, w in bs.items()} for a, bs in refs.items()}
        want = {"src/m/a.c": {"src/m/b.c": ["b_fn"]}, "src/m/b.c": {"src/m/a.c": ["a_fn"]},
                "src/n/d.c": {"src/m/a.c": ["a_fn"], "src/m/b.c": ["b_fn"], "src/n/c.c": ["b_fn"]}}
        if got != want or missing:
            fails.append(f"references: {got}, missing {missing}; expected {want}")
        if circles(refs) != [["src/m/a.c", "src/m/b.c"]]:
            fails.append(f"file circles: {circles(refs)}")
        if circles(module_edges(refs)) != []:
            fails.append(f"module circles: {circles(module_edges(refs))}")
        if circles({"src/m": {"src/n"}, "src/n": {"src/m"}}) != [["src/m", "src/n"]]:
            fails.append("a two-module circle is not found")
        if circles(include_edges(d)) != [["src/m/x.h", "src/m/y.h"]]:
            fails.append(f"header circles: {circles(include_edges(d))}")
    return fails


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="File and module circles of a Ninja build tree.")
    ap.add_argument("build", nargs="?")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--prefix", action="append", help="source folders to look at (default src/ and sim/)")
    ap.add_argument("--edges", action="store_true", help="print every file edge instead")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a small built tree")
    args = ap.parse_args(argv)
    if args.self_test:
        fails = self_test()
        print("\n".join(fails) or "filegraph: self-test passed")
        return 1 if fails else 0
    prefixes = tuple(args.prefix or ("src/", "sim/"))
    if not args.build:
        ap.error("the build directory is needed")
    refs, missing = reference_edges(args.root, args.build, prefixes)
    if args.edges:
        for a in sorted(refs):
            for b in sorted(refs[a]):
                print(f"{a} -> {b} {' '.join(sorted(refs[a][b]))}")
        return 0
    found = 0
    for kind, graph in (("file", refs), ("module", module_edges(refs)),
                        ("header", include_edges(args.root))):
        for c in circles(graph):
            found += 1
            print(f"{kind} circle: {' <-> '.join(c)}")
            print("\n".join(describe(c, graph)))
    for o in missing:
        print(f"not built: {o}", file=sys.stderr)
    return 1 if found or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
