"""Shared helpers of gpurec's property and robustness tests.

Talks to the test cluster through psql (the environment's PGHOST etc.), so
it needs no driver.  Each check prints one line, `PASS name`,
`FAIL name: why` or `SKIP name: why`; test/run_all.sh counts them.  A test script exits 0 when
it ran to the end, whatever its checks said.
"""
import csv
import io
import os
import random
import subprocess

PSQL = os.environ.get("PSQL", "psql")

# GPU runs set PGOPTIONS='-c gpurec.device=gpu' for the whole suite.
failures = 0


def sql(query, *, settings=None, check=True):
    """Runs query and returns its rows as lists of strings (None for NULL).
    Only the last statement may return rows (SET and the like print nothing
    under -q)."""
    prefix = ""
    for name, value in (settings or {}).items():
        prefix += f"SET {name} = '{value}';\n"
    proc = subprocess.run(
        [PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--csv", "-P", "null=\\N"],
        input=prefix + query, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"psql failed: {proc.stderr.strip()}\nquery: {query[:500]}")
    if proc.returncode != 0:
        return proc
    rows = list(csv.reader(io.StringIO(proc.stdout)))[1:]  # past the header
    return [[None if v == "\\N" else v for v in r] for r in rows]


def sql_error(query, settings=None):
    """Runs query expecting an error; returns (sqlstate, message) or None."""
    prefix = "\\set VERBOSITY verbose\n"
    for name, value in (settings or {}).items():
        prefix += f"SET {name} = '{value}';\n"
    proc = subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1"],
                          input=prefix + query, capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    for line in proc.stderr.splitlines():
        if line.startswith("ERROR:"):
            parts = line.split(":", 2)
            return parts[1].strip(), parts[2].strip() if len(parts) > 2 else ""
    return ("?", proc.stderr.strip())


def skip(name, why):
    """A check that cannot run here (a GPU check on a machine without one):
    one line `SKIP name: why`, which test/run_all.sh counts as skipped."""
    print(f"SKIP {name}: {why}", flush=True)


def check(name, ok, why=""):
    global failures
    if ok:
        print(f"PASS {name}", flush=True)
    else:
        failures += 1
        print(f"FAIL {name}: {why}"[:2000], flush=True)
    return ok


def seeded_random():
    """A fresh seed per run (printed, so a failure can be replayed with GPUREC_SEED)."""
    seed = int(os.environ.get("GPUREC_SEED", random.SystemRandom().randrange(1 << 30)))
    print(f"# seed {seed}", flush=True)
    return random.Random(seed)


def first_difference(got, want):
    """A short description of where two row lists differ."""
    if len(got) != len(want):
        return f"{len(got)} rows, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"row {i}: got {g}, expected {w}"
    return "same"


def fresh_database(name):
    """Creates database `name` with gpurec and makes it the default; returns
    the gpurec.device settings to test: the GPU against the CPU where one
    is usable, else auto against cpu."""
    sql(f"DROP DATABASE IF EXISTS {name}")
    sql(f"CREATE DATABASE {name}")
    os.environ["PGDATABASE"] = name
    sql("CREATE EXTENSION gpurec")
    has_gpu = sql("SELECT count(*) FROM gpurec.devices()")[0][0] != "0"
    return ["cpu", "gpu"] if has_gpu else ["cpu", "auto"]


def drop_database(name):
    os.environ["PGDATABASE"] = "postgres"
    sql(f"DROP DATABASE IF EXISTS {name}")
