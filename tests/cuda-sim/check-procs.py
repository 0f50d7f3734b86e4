#!/usr/bin/env python3
"""Every entry point of the toolkit's driver API is exported by the simulated
libcuda.so.1 under the names a real driver exports, and cuGetProcAddress/_v2
answers each at every version the toolkit's typedefs name.

The expected names are derived here from cudaTypedefs.h and cuda.h on their
own (PFN_<name>_v<version>[_ptds|_ptsz]: the plain versions of a name in
ascending order are <name>, <name>_v2, ..., the newest being cuda.h's #define
target; a per-thread-stream form is the plain symbol of its version plus the
suffix), checked with dlsym, and compared with cuGetProcAddress's answers.
A stub must return CUDA_ERROR_NOT_SUPPORTED (801) and trace its name.

Usage: check-procs.py LIBCUDA CUDA_INCLUDE_DIR
Prints one line per fault and "procs: N symbols, M look-ups ok"; exit 1 on a fault."""
import ctypes
import os
import re
import sys

lib_path, inc = sys.argv[1], sys.argv[2]
text = open(os.path.join(inc, "cudaTypedefs.h")).read()
prof = os.path.join(inc, "cudaProfilerTypedefs.h")
if os.path.exists(prof):
    text += open(prof).read()
cuda_h = open(os.path.join(inc, "cuda.h")).read()
defines = dict(re.findall(r"^\s*#define\s+(cu\w+)\s+(?:__CUDA_API_PT[SD][ZS]\()?(cu\w+?)\)?\s*$", cuda_h, re.M)[::-1])

versions = {}
for name, ver, suf in re.findall(r"PFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\)", text):
    versions.setdefault(name, set()).add((int(ver), suf))

lib = ctypes.CDLL(lib_path)
libdl = ctypes.CDLL(None)
dlsym = libdl.dlsym
dlsym.restype = ctypes.c_void_p
dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

faults = []
symbols = {}  # (name, version, suffix) -> expected symbol
for name, vs in versions.items():
    plain = sorted(v for v, s in vs if not s)
    sym = {v: name if i == 0 else "%s_v%d" % (name, i + 1) for i, v in enumerate(plain)}
    if plain and defines.get(name, "").startswith(name + "_v"):
        sym[plain[-1]] = defines[name]
    for v, s in vs:
        older = [p for p in plain if p <= v]
        if older:
            symbols[(name, v, s)] = sym[older[-1]] + s

addr = {}
for key, symbol in sorted(symbols.items()):
    a = dlsym(ctypes.c_void_p(lib._handle), symbol.encode())
    if not a:
        faults.append("not exported: %s" % symbol)
    addr[symbol] = a

get2 = lib.cuGetProcAddress_v2
get2.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                 ctypes.POINTER(ctypes.c_int)]
get1 = lib.cuGetProcAddress
get1.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64]
PER_THREAD = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
lookups = 0
for (name, v, s), symbol in sorted(symbols.items()):
    # cuda.h renames cuGraphInstantiate to cuGraphInstantiateWithFlags from CUDA 12.0 on.
    want = addr[symbol]
    if name == "cuGraphInstantiate" and v >= 12000:
        want = dlsym(ctypes.c_void_p(lib._handle), b"cuGraphInstantiateWithFlags")
    flags = PER_THREAD if s else 0
    pfn, status = ctypes.c_void_p(), ctypes.c_int(-1)
    r = get2(name.encode(), ctypes.byref(pfn), v, flags, ctypes.byref(status))
    lookups += 1
    if r != 0 or status.value != 0 or not pfn.value:
        faults.append("cuGetProcAddress_v2(%s, %d, %d): %d status %d" % (name, v, flags, r, status.value))
    elif pfn.value != want:
        faults.append("cuGetProcAddress_v2(%s, %d, %d): not %s" % (name, v, flags, symbol))
    pfn1 = ctypes.c_void_p()
    if get1(name.encode(), ctypes.byref(pfn1), v, flags) != 0 or pfn1.value != pfn.value:
        faults.append("cuGetProcAddress(%s, %d, %d) differs from _v2" % (name, v, flags))

# Unknown names and versions older than the first are refused with their status.
pfn, status = ctypes.c_void_p(), ctypes.c_int(-1)
if get2(b"cuNoSuchFunction", ctypes.byref(pfn), 13000, 0, ctypes.byref(status)) != 500 or status.value != 1:
    faults.append("an unknown name is not NOT_FOUND/SYMBOL_NOT_FOUND")
if get2(b"cuMemCreate", ctypes.byref(pfn), 10000, 0, ctypes.byref(status)) != 500 or status.value != 2:
    faults.append("cuMemCreate at 10000 is not VERSION_NOT_SUFFICIENT")

# A stub: CUDA_ERROR_NOT_SUPPORTED.
stub = lib.cuTexRefCreate
stub.argtypes = [ctypes.c_void_p]
if stub(None) != 801:
    faults.append("the cuTexRefCreate stub does not return CUDA_ERROR_NOT_SUPPORTED")

for f in faults[:50]:
    print("FAULT:", f)
print("procs: %d symbols, %d look-ups, %d faults" % (len(addr), lookups, len(faults)))
sys.exit(1 if faults else 0)
