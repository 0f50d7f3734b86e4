#!/usr/bin/env python3
"""Checks that a layered module's files call one another in the order its
internal header's "Layers" comment lists them: a file may call only functions
(and use only data) defined in files listed before it, so no call circle can
form. Used for the CUDA driver simulator (sim/cuda/internal.h), kube/
(src/kube/internal.h) and the vgpu interposer (src/vgpu/hook.h).

Usage: check-layers.py SRC_DIR OBJECT_DIR [HEADER]  (OBJECT_DIR holds
<file>.c.o; HEADER, in SRC_DIR, defaults to internal.h)
Exit 0 when the order holds, 1 with one line per offending reference."""
import os
import re
import subprocess
import sys

src, objdir = sys.argv[1], sys.argv[2]
header_name = sys.argv[3] if len(sys.argv) > 3 else "internal.h"
header = open(os.path.join(src, header_name)).read()
block = header[header.index("Layers"):header.index("*/", header.index("Layers"))]
order = re.findall(r"^\s*\*\s+(?:\d\s+)?(\w[\w-]*\.c)\s", block, re.M)
if not order:
    sys.exit("check-layers: no layer list in %s" % header_name)

defined, undefined = {}, {}
for f in order:
    obj = os.path.join(objdir, f + ".o")
    if not os.path.exists(obj):
        sys.exit("check-layers: %s missing" % obj)
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    undefined[f] = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined[f].add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRVW" and parts[1] != "":
            defined.setdefault(parts[2], f)

bad = 0
for i, f in enumerate(order):
    for sym in sorted(undefined[f]):
        home = defined.get(sym)
        if home and home != f and order.index(home) > i:
            print("check-layers: %s uses %s of %s, listed after it" % (f, sym, home))
            bad += 1
sys.exit(1 if bad else 0)
