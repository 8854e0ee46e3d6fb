#!/usr/bin/env python3
"""The layers of gpurec, checked on the tree as it is (see ARCHITECTURE.md).

1. The include graph: no file under kernels/ includes anything from src/;
   src/ includes from kernels/ only the kernels' API (kernels/api/); there is
   no cycle between the two directories.
2. Only src/pg_*.cpp talk to PostgreSQL: a deliberate `#include "postgres.h"`
   in an engine file or a kernel file breaks the build, before or after the
   engine's own headers, and even when named by its full path.  The same
   include in a src/pg_* file builds, so the check can tell the two apart.

Prints one PASS or FAIL line per check, as test/run_all.sh counts them.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
failures = 0


def report(ok, name, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    failures += 0 if ok else 1


def sources(top):
    for base, _, files in os.walk(os.path.join(ROOT, top)):
        for f in sorted(files):
            if f.endswith((".hpp", ".cpp", ".cu", ".cuh", ".h")):
                yield os.path.join(base, f)


def includes(path):
    """The project files `path` includes, resolved as the compiler would (its own folder first)."""
    text = open(path, encoding="utf-8").read()
    out = []
    for name in INCLUDE.findall(text):
        for base in (os.path.dirname(path), ROOT):
            resolved = os.path.normpath(os.path.join(base, name))
            if os.path.exists(resolved):
                out.append(resolved)
                break
    return out


def rel(path):
    return os.path.relpath(path, ROOT)


def check_include_graph():
    graph = {p: includes(p) for top in ("src", "kernels") for p in sources(top)}
    into_src = [f"{rel(a)} -> {rel(b)}" for a, bs in graph.items() if rel(a).startswith("kernels/")
                for b in bs if rel(b).startswith("src/")]
    report(not into_src, "layers: kernels/ includes nothing from src/", "; ".join(into_src))

    beyond_api = [f"{rel(a)} -> {rel(b)}" for a, bs in graph.items() if rel(a).startswith("src/")
                  for b in bs if rel(b).startswith("kernels/") and not rel(b).startswith("kernels/api/")]
    report(not beyond_api, "layers: src/ includes only the kernels' API (kernels/api/)", "; ".join(beyond_api))

    # a cycle between the directories: a path src -> kernels -> ... -> src
    reach = {}

    def reachable(node, seen):
        for nxt in graph.get(node, []):
            if nxt not in seen:
                seen.add(nxt)
                reachable(nxt, seen)
        return seen

    cycle = []
    for a in graph:
        if rel(a).startswith("kernels/"):
            reach[a] = reachable(a, set())
            cycle += [f"{rel(a)} reaches {rel(b)}" for b in reach[a] if rel(b).startswith("src/")]
    report(not cycle, "layers: no include path leads from kernels/ back into src/", "; ".join(cycle[:5]))

    api_self_contained = [f"{rel(a)} -> {rel(b)}" for a, bs in graph.items() if rel(a).startswith("kernels/api/")
                          for b in bs if not rel(b).startswith("kernels/api/")]
    report(not api_self_contained, "layers: the kernels' API includes only itself", "; ".join(api_self_contained))

    engine_first = [rel(p) for p in sources("src") if p.endswith(".cpp") and not os.path.basename(p).startswith("pg_")
                    and (includes(p)[:1] != [os.path.join(ROOT, "src", "no_postgres.hpp")])]
    report(not engine_first, "layers: every engine source includes no_postgres.hpp first", ", ".join(engine_first))


def make(tree, target):
    run = subprocess.run(["make", "-s", "-C", tree, "NVCC=", target], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    return run.returncode == 0, run.stdout


def check_postgres_h_breaks_engine_builds():
    server = subprocess.run(["pg_config", "--includedir-server"], stdout=subprocess.PIPE, text=True).stdout.strip()
    full_path = os.path.join(server, "postgres.h")
    tree = tempfile.mkdtemp(prefix="gpurec-layers-")
    try:
        files = subprocess.run(["git", "-C", ROOT, "ls-files", "--cached", "--others", "--exclude-standard"],
                               stdout=subprocess.PIPE, text=True, check=True).stdout.split()
        for f in files:
            if os.path.isfile(os.path.join(ROOT, f)):
                os.makedirs(os.path.dirname(os.path.join(tree, f)), exist_ok=True)
                shutil.copy(os.path.join(ROOT, f), os.path.join(tree, f))

        def probe(path, text, target, expect_ok, name):
            with open(os.path.join(tree, path), "w") as f:
                f.write(text)
            ok, output = make(tree, target)
            report(ok == expect_ok, name,
                   ("it failed to build:\n" if expect_ok else "it built:\n") + output[-600:])
            os.remove(os.path.join(tree, path))

        engine = '#include "no_postgres.hpp"\n#include "column_chunks.hpp"\n'
        probe("src/layer_probe.cpp", engine + "int probe() { return 0; }\n", "src/layer_probe.o", True,
              "layers: an engine file without postgres.h builds (control)")
        probe("src/layer_probe.cpp", engine + '#include "postgres.h"\n', "src/layer_probe.o", False,
              "layers: postgres.h after the engine's headers breaks an engine build")
        probe("src/layer_probe.cpp", '#include "postgres.h"\n' + engine, "src/layer_probe.o", False,
              "layers: postgres.h before the engine's headers breaks an engine build")
        probe("src/layer_probe.cpp", engine + f'#include "{full_path}"\n', "src/layer_probe.o", False,
              "layers: postgres.h by its full path breaks an engine build")
        probe("src/layer_probe.cpp", engine + '#include "device.hpp"\n#include "fmgr.h"\n', "src/layer_probe.o", False,
              "layers: another PostgreSQL header (fmgr.h) breaks an engine build")
        no_cuda = open(os.path.join(ROOT, "kernels", "no_cuda.cpp")).read()
        probe("kernels/no_cuda.cpp", no_cuda + '#include "postgres.h"\n', "kernels/no_cuda.o", False,
              "layers: postgres.h breaks a kernel build")
        probe("src/pg_layer_probe.cpp", 'extern "C" {\n#include "postgres.h"\n}\n#include "column_chunks.hpp"\n',
              "src/pg_layer_probe.o", True, "layers: postgres.h builds in a src/pg_* file (control)")
    finally:
        shutil.rmtree(tree, ignore_errors=True)


check_include_graph()
check_postgres_h_breaks_engine_builds()
sys.exit(1 if failures else 0)
