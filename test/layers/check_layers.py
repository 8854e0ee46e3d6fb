#!/usr/bin/env python3
"""The layers of gpurec, checked on the tree as it is (see ARCHITECTURE.md).

1. The include graph: no file under kernels/ includes anything from src/;
   src/ includes from kernels/ only the kernels' API (kernels/api/); there is
   no cycle between the two directories.
2. The PostgreSQL side is src/pg_* and the read layer, src/read/: every
   src/pg_* module (a header and its source) and every file of src/read/
   includes PostgreSQL, and no engine file (the rest of src/) includes
   PostgreSQL or anything of the PostgreSQL side.
3. The read layer stands below the SQL entry points: they and every other
   file outside src/read/ include it only through its one public header,
   src/read/read.hpp; nothing in src/read/ includes an entry point (a
   src/pg_* module with SQL functions), nor a family's header (families
   register their partial results instead: src/partials.hpp).
4. No header/source pair includes another that includes it back: the
   modules of src/ (a file's path without its extension) form no cycle.
5. Only the PostgreSQL side talks to PostgreSQL: a deliberate
   `#include "postgres.h"` in an engine file or a kernel file breaks the
   build, before or after the engine's own headers, and even when named by
   its full path, as does the read layer's header.  The same include in a
   src/pg_* file or a src/read/ file builds, so the check can tell them
   apart.

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
    """The project files `path` includes, resolved as the compiler would (its own folder first, then -I. -Isrc)."""
    text = open(path, encoding="utf-8").read()
    out = []
    for name in INCLUDE.findall(text):
        for base in (os.path.dirname(path), ROOT, os.path.join(ROOT, "src")):
            resolved = os.path.normpath(os.path.join(base, name))
            if os.path.exists(resolved):
                out.append(resolved)
                break
    return out


def includes_postgres_h(path):
    return "postgres.h" in INCLUDE.findall(open(path, encoding="utf-8").read())


def rel(path):
    return os.path.relpath(path, ROOT)


def in_read_layer(path):
    return rel(path).startswith("src/read/")


def postgres_side(path):
    """src/pg_* and src/read/: the files that talk to PostgreSQL."""
    r = rel(path)
    return in_read_layer(path) or (os.path.dirname(r) == "src" and os.path.basename(r).startswith("pg_"))


def engine(path):
    return rel(path).startswith("src/") and not postgres_side(path)


def module(path):
    """A header and its source are one module: the path without its extension."""
    return os.path.splitext(rel(path))[0]


# The families' engine headers (ARCHITECTURE.md), by name: what the read layer must not include.
FAMILY_HEADER = re.compile(r"^src/(marketplace|carts?|cart_|geo|roc|auc|offers)[^/]*\.hpp$")


def reachable_from(graph, start):
    """Every project file `start` includes, directly or not."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), []):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


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

    engine_first = [rel(p) for p in sources("src") if p.endswith(".cpp") and engine(p)
                    and (includes(p)[:1] != [os.path.join(ROOT, "src", "no_postgres.hpp")])]
    report(not engine_first, "layers: every engine source includes no_postgres.hpp first", ", ".join(engine_first))

    src = {p: bs for p, bs in graph.items() if rel(p).startswith("src/")}
    reached = {p: reachable_from(graph, p) for p in src}

    def talks_to_postgres(files):
        return any(includes_postgres_h(f) or any(includes_postgres_h(r) for r in reached[f]) for f in files)

    modules = {}
    for p in src:
        modules.setdefault(module(p), []).append(p)
    silent = sorted(m for m, files in modules.items()
                    if any(postgres_side(f) for f in files) and not in_read_layer(files[0])
                    and not talks_to_postgres(files))
    silent += sorted(rel(p) for p in src if in_read_layer(p) and not talks_to_postgres([p]))
    report(not silent, "layers: every src/pg_* module and every src/read/ file includes PostgreSQL",
           "these include no PostgreSQL header (an engine file takes an engine name): " + ", ".join(silent))

    engine_up = [f"{rel(a)} reaches {rel(b)}" for a in src if engine(a)
                 for b in sorted(reached[a] | {a}) if postgres_side(b) or includes_postgres_h(b)]
    report(not engine_up, "layers: no engine file includes PostgreSQL or a file of src/pg_* or src/read/",
           "; ".join(engine_up[:5]))

    public = os.path.join(ROOT, "src", "read", "read.hpp")
    past_public = [f"{rel(a)} -> {rel(b)}" for a, bs in src.items() if not in_read_layer(a)
                   for b in bs if in_read_layer(b) and b != public]
    report(not past_public, "layers: outside src/read/, the read layer is included only through src/read/read.hpp",
           "; ".join(past_public))

    entry_points = {module(p) for p in src if p.endswith(".cpp") and postgres_side(p)
                    and "GPUREC_SQL_FUNCTION(" in open(p, encoding="utf-8").read()}
    read_up = [f"{rel(a)} reaches {rel(b)}" for a in src if in_read_layer(a)
               for b in sorted(reached[a]) if module(b) in entry_points]
    report(not read_up and entry_points, "layers: nothing in src/read/ includes an SQL entry point",
           "; ".join(read_up[:5]) if entry_points else "no entry point found")

    read_family = [f"{rel(a)} reaches {rel(b)}" for a in src if in_read_layer(a)
                   for b in sorted(reached[a]) if FAMILY_HEADER.match(rel(b))]
    report(not read_family, "layers: nothing in src/read/ includes a family's header", "; ".join(read_family[:5]))

    # a cycle of modules: a header/source pair that includes another which includes it back
    edges = {}
    for a, bs in src.items():
        edges.setdefault(module(a), set()).update(module(b) for b in bs if rel(b).startswith("src/") and module(b) != module(a))
    cycles, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(edges.get(m, ())):
            if state.get(n) == "open":
                cycles.append(" -> ".join(path[path.index(n):] + [n]))
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    report(not cycles, "layers: no header/source pair includes another that includes it back (no cycle of modules)",
           "; ".join(cycles[:5]))


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
        probe("src/layer_probe.cpp", engine + '#include "read/read.hpp"\n', "src/layer_probe.o", False,
              "layers: the read layer's header breaks an engine build")
        probe("src/pg_layer_probe.cpp", 'extern "C" {\n#include "postgres.h"\n}\n#include "column_chunks.hpp"\n',
              "src/pg_layer_probe.o", True, "layers: postgres.h builds in a src/pg_* file (control)")
        probe("src/read/layer_probe.cpp", '#include "read_internal.hpp"\n#include "column_chunks.hpp"\n',
              "src/read/layer_probe.o", True, "layers: PostgreSQL builds in a src/read/ file (control)")
    finally:
        shutil.rmtree(tree, ignore_errors=True)


check_include_graph()
check_postgres_h_breaks_engine_builds()
sys.exit(1 if failures else 0)
