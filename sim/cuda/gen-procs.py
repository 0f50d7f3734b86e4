#!/usr/bin/env python3
"""Generates the CUDA driver simulator's entry tables from the toolkit's headers:

  procs.h    a prototype for every exported symbol (cuda.h declares only the
             newest version of each).
  procs.inc  the cuGetProcAddress table, P(name, version, per_thread, symbol),
             one row per entry point.
  stubs.c    every exported symbol the simulator's sources do not define: the
             _ptds/_ptsz forms (calling the plain form), older versions whose
             parameters are those of a newer one the simulator implements
             (calling it), and the rest: stubs that return
             CUDA_ERROR_NOT_SUPPORTED and name themselves under
             MIGKIT_SIM_CUDA_TRACE=1.
  nomacro.h  #undef of cuda.h's renaming macros, so each version is defined
             under its own exported name.

Input: cudaTypedefs.h and cudaProfilerTypedefs.h (PFN_<name>_v<version>[_ptds|
_ptsz] typedefs name every entry point, the CUDA version it appeared in and its
parameters), cuda.h (the #define that maps a name to its newest symbol), and
the simulator's sources (CU_EXPORT CUresult <symbol>(: what it implements).

Naming rule (what a real libcuda.so.1 exports): the plain versions of a name,
in ascending order, are <name>, <name>_v2, <name>_v3, ...; the newest is the
cuda.h #define target when there is one; a _ptds/_ptsz entry of version V is
the symbol of the newest plain version <= V plus the suffix. cuGetProcAddress
answers a name at a version with the newest entry not newer than the version.

Usage: gen-procs.py CUDA_INCLUDE_DIR SIM_CUDA_DIR [OUT_DIR]
OUT_DIR defaults to SIM_CUDA_DIR; the outputs are committed (docs/decisions.md)
and test-cuda-sim regenerates them into a temporary directory to compare."""
import glob
import os
import re
import sys

inc, src = sys.argv[1], sys.argv[2]
out_dir = sys.argv[3] if len(sys.argv) > 3 else src
typedefs = open(os.path.join(inc, "cudaTypedefs.h")).read()
prof = os.path.join(inc, "cudaProfilerTypedefs.h")
if os.path.exists(prof):
    typedefs += open(prof).read()
cuda_h = open(os.path.join(inc, "cuda.h")).read()

GENERATED = ("stubs.c",)
implemented = set()
for f in sorted(glob.glob(os.path.join(src, "*.c"))):
    if os.path.basename(f) in GENERATED:
        continue
    implemented |= set(re.findall(r"CU_EXPORT CUresult (cu\w+)\(", open(f).read()))

defines = {}
for m in re.finditer(r"#define\s+(cu\w+)\s+(?:__CUDA_API_PT[SD][ZS]\()?(cu\w+?)\)?\s*$", cuda_h, re.M):
    defines.setdefault(m.group(1), m.group(2))
# cuda.h maps a name to another function's symbol: from this CUDA version on,
# cuGetProcAddress answers the name with that symbol.
RENAMED = {"cuGraphInstantiate": ("cuGraphInstantiateWithFlags", 12000)}

pfn = re.compile(r"typedef\s+CUresult\s*\(\s*CUDAAPI\s+\*PFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\)\((.*?)\);", re.S)
entries = {}
for m in pfn.finditer(typedefs):
    name, ver, suf, params = m.group(1), int(m.group(2)), m.group(3) or "", " ".join(m.group(4).split())
    entries.setdefault(name, {})[(ver, suf)] = params


def arg_names(params):
    names = []
    for p in params.split(","):
        p = p.strip()
        if p == "void" or not p:
            continue
        names.append(re.findall(r"(\w+)(?:\[\d*\])?$", p)[0])
    return names


exported = {}  # symbol -> params
table = []
for name in sorted(entries):
    plain = sorted(v for (v, s) in entries[name] if s == "")
    sym = {}
    for i, v in enumerate(plain):
        sym[v] = name if i == 0 else "%s_v%d" % (name, i + 1)
    if plain and name in defines and defines[name].startswith(name + "_v"):
        sym[plain[-1]] = defines[name]
    for (v, s), params in sorted(entries[name].items()):
        if s == "":
            base = sym[v]
        else:
            older = [p for p in plain if p <= v]
            if not older:
                continue
            base = sym[older[-1]]
        symbol = base + s
        exported.setdefault(symbol, params)
        table.append((name, v, 1 if s else 0, symbol))
    if name in RENAMED:
        target, ver = RENAMED[name]
        table.append((name, ver, 0, target))

# What stubs.c defines for each symbol the sources do not.
bodies = []
n_stub = n_alias = n_pt = 0
for symbol in sorted(exported):
    if symbol in implemented:
        continue
    params = exported[symbol]
    args = ", ".join(arg_names(params))
    m = re.match(r"(cu\w+?)(_ptds|_ptsz)$", symbol)
    target = None
    if m and m.group(1) in implemented:
        target = m.group(1)
        n_pt += 1
    else:
        # An older plain version with the parameters of a newer implemented one.
        name = re.sub(r"_v\d+$", "", symbol)
        for s2, p2 in sorted(exported.items()):
            if s2 != symbol and s2 in implemented and re.sub(r"_v\d+$", "", s2) == name and p2 == params:
                target = s2
                n_alias += 1
                break
    if target:
        bodies.append("CU_EXPORT CUresult %s(%s) { return %s(%s); }\n" % (symbol, params, target, args))
    else:
        n_stub += 1
        bodies.append("CU_EXPORT CUresult %s(%s) { return cu_unsupported(\"%s\"); }\n" % (symbol, params, symbol))

head = ("/* Generated by sim/cuda/gen-procs.py from the toolkit's cudaTypedefs.h, cudaProfilerTypedefs.h and\n"
        " * cuda.h: do not edit. */\n")
os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "procs.h"), "w") as out:
    out.write(head + "#pragma once\n")
    out.write("".join("CUresult %s(%s);\n" % (s, exported[s]) for s in sorted(exported)))
with open(os.path.join(out_dir, "procs.inc"), "w") as out:
    out.write(head + "/* Prototypes: procs.h. The generated entry points: stubs.c. */\n")
    out.write("#if !defined(PROCS_DECLS) && !defined(PROCS_WRAPPERS)\n")
    out.write("".join('P("%s", %d, %d, %s)\n' % t for t in table))
    out.write("#endif\n")
with open(os.path.join(out_dir, "stubs.c"), "w") as out:
    out.write(head)
    out.write("/* %d per-thread-stream forms, %d older versions with a newer one's parameters, %d entry points\n"
              " * the simulator does not implement (CUDA_ERROR_NOT_SUPPORTED). */\n" % (n_pt, n_alias, n_stub))
    out.write('#include "cuda/internal.h"\n\n')
    out.write("".join(bodies))
# cuda.h maps names to versioned symbols with #define; the simulator defines
# every version under its exported name, so the mapping is undone.
names = sorted(set(re.findall(r"^\s*#define\s+(cu\w+)\s", cuda_h, re.M)))
with open(os.path.join(out_dir, "nomacro.h"), "w") as out:
    out.write(head + "#pragma once\n")
    out.write("".join("#undef %s\n" % n for n in names))
