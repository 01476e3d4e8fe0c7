#!/usr/bin/env python3
"""check-layers.py - the dependency rules of the design, checked from the code.

Reads every #include of engine/, scripting/, views/ and tui/ and, when an
object folder is given, every symbol the library's object files leave
undefined (nm). Fails naming the file, the include or symbol, and the rule
it breaks:

  - each folder may depend only on the folders the design allows
    (RULES below: an include of a header in a folder not listed, or a call
    of a function defined in one, breaks the rule);
  - lua.h and its friends only in scripting/; curses only in views/ and
    tui/; CUDA's headers only in engine/cuda/; NVML, MPI and NCCL nowhere
    (they are opened with dlopen);
  - no circular dependency between files: a file depends on the files it
    includes and on the source files that define the functions and data it
    uses; that graph has no cycle (headers that include each other, or two
    source files that call each other, are one).

usage: check-layers.py [BUILD_DIR]     exit 0 when clean, 1 with the list
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ("engine", "scripting", "views", "tui")

# A layer may depend on itself and on what it lists. Entries ending in ".h"
# allow one header (and its module) of another layer.
BASE = ["engine/base"]
RULES = {
    "engine/base": [],
    "engine/core": BASE,
    "engine/cpu": ["engine/core"] + BASE,
    "engine/cuda": ["engine/core"] + BASE,
    "engine/nn": ["engine/core"] + BASE,
    "engine/data": ["engine/core"] + BASE,
    "engine/train": ["engine/nn", "engine/data", "engine/observe/profiler.h", "engine/core"] + BASE,
    "engine/dist": ["engine/nn", "engine/train/reducer.h", "engine/core"] + BASE,
    "engine/export": ["engine/nn", "engine/core"] + BASE,
    "engine/rundir": BASE,
    "engine/tune": BASE,
    "engine/observe": ["engine/train/snapshot.h", "engine/nn", "engine/core", "engine/rundir"] + BASE,
    "scripting": ["engine"],
    "views": ["engine/observe/telemetry.h"] + BASE,
    "tui": ["engine", "scripting", "views"],
}

# System headers a layer must not include: (pattern, the layers allowed, why).
SYSTEM = [
    (r"^(lua|lauxlib|lualib)\.h$", ["scripting"], "only scripting/ includes Lua"),
    (r"^n?curses(w)?(/.*)?\.h$|^ncursesw/", ["views", "tui"], "only views/ and tui/ include curses"),
    (r"^(cuda|cuda_runtime|cuda_runtime_api|cublas.*|cudnn.*|cuda_fp16|cuda_bf16)\.h$", ["engine/cuda"],
     "only engine/cuda/ includes CUDA (it is a plugin)"),
    (r"^(nvml|mpi|nccl)\.h$", [], "NVML, MPI and NCCL are opened with dlopen, never included"),
]

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def layer_of(path):
    """The layer a repository path belongs to: the longest RULES key it starts with."""
    best = None
    for key in RULES:
        if path == key or path.startswith(key + "/"):
            if best is None or len(key) > len(best):
                best = key
    return best


def module_of(path):
    """A file's module: its path without the extension (x.c and x.h are one)."""
    return os.path.splitext(path)[0]


def allowed(src, dst):
    """Whether a file of src's layer may depend on the file dst."""
    a, b = layer_of(src), layer_of(dst)
    if a is None or b is None or a == b:
        return True
    for entry in RULES[a]:
        if entry.endswith(".h"):
            if module_of(dst) == module_of(entry):
                return True
        elif dst == entry or dst.startswith(entry + "/"):
            return True
    return False


def source_files():
    out = []
    for top in SOURCES:
        for d, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith((".c", ".h", ".cu")):
                    out.append(os.path.relpath(os.path.join(d, n), ROOT))
    return sorted(out)


def read_includes(files, errors):
    """Edges module -> module from quoted includes; rule checks on the way."""
    edges = {}
    known = set(files)
    for f in files:
        with open(os.path.join(ROOT, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for m in INCLUDE.finditer(text):
            kind, name = m.group(1), m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            if kind == "<":
                for pat, layers, why in SYSTEM:
                    if re.search(pat, name) and layer_of(f) not in layers:
                        errors.append(f"{f}:{line}: #include <{name}>: {why}")
                continue
            target = name if name in known else os.path.normpath(os.path.join(os.path.dirname(f), name))
            if target not in known:
                errors.append(f"{f}:{line}: #include \"{name}\": no such file (write includes from the repository root)")
                continue
            if target != name:
                errors.append(f"{f}:{line}: #include \"{name}\": write it from the repository root (\"{target}\")")
            if not allowed(f, target):
                errors.append(f"{f}:{line}: #include \"{target}\": {layer_of(f)}/ may not depend on {layer_of(target)}/")
            if target != f:
                edges.setdefault(f, {}).setdefault(target, f"{f}:{line} includes {target}")
    return edges


def read_symbols(build, files, errors):
    """Edges module -> module from the symbols each object file leaves undefined."""
    objs = {}
    for f in files:
        if f.endswith(".c"):
            o = os.path.join(build, os.path.splitext(f)[0] + ".o")
            if os.path.exists(o):
                objs[o] = f
    if not objs:
        return {}
    res = subprocess.run(["nm", "-A", "--defined-only", *objs], capture_output=True, text=True, check=True)
    owner = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[-2] in "TDBRVWC" and parts[-2].isupper():
            owner.setdefault(parts[-1], objs[parts[0].rstrip(":").split(":")[0]])
    res = subprocess.run(["nm", "-A", "--undefined-only", *objs], capture_output=True, text=True, check=True)
    edges = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        src = objs[parts[0].split(":")[0]]
        sym = parts[-1]
        dst = owner.get(sym)
        if dst is None:
            continue
        if not allowed(src, dst):
            errors.append(f"{src}: calls {sym} of {dst}: {layer_of(src)}/ may not depend on {layer_of(dst)}/")
        if src != dst:
            edges.setdefault(src, {}).setdefault(dst, f"{src} uses {sym} of {dst}")
    return edges


def find_cycles(edges):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else None
    files = source_files()
    errors = []
    edges = read_includes(files, errors)
    if build:
        for a, bs in read_symbols(os.path.join(ROOT, build), files, errors).items():
            for b, why in bs.items():
                edges.setdefault(a, {}).setdefault(b, why)
    for comp in find_cycles(edges):
        members = set(comp)
        why = [edges[a][b] for a in comp for b in edges.get(a, {}) if b in members]
        errors.append("circular dependency between " + ", ".join(comp) + ": " + "; ".join(sorted(why)))
    for e in errors:
        print("check-layers: " + e)
    n_edge = sum(len(v) for v in edges.values())
    what = "includes and symbols" if build else "includes"
    print(f"check-layers: {len(files)} files, {n_edge} dependencies ({what}): "
          + (f"{len(errors)} violations" if errors else "clean"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
