#!/usr/bin/env python3
"""When the operating system refuses memory: ERROR 53200, never a crash.

gpurec's columns live outside PostgreSQL's memory contexts (chunks mapped
from the kernel), so work_mem does not bound them; what bounds them is the
memory the process may map.  This test lowers one backend's address-space
limit (prlimit, as the server's user) to a little above what it maps already, then asks
each family for more than that: every call must end with ERROR 53200 (from
gpurec's allocation or from PostgreSQL's own, whichever fails first), and
once the limit is lifted the same backend must answer correctly.  Serial
reading and parallel reading (the calling backend appending the workers'
parts) both.
"""
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import check, expect_error, main, run_in_database  # noqa: E402

HEADROOM_KB = 100 * 1024  # above the backend's VmSize: a call needing more fails

CALLS = {
    "cheapest-offers": "SELECT count(*) FROM gpurec.cheapest_offers("
                       "'SELECT g % 100000 AS product_id, g % 97 AS store_id, g % 1000 AS price FROM big');",
    "roc-fitness": "SELECT count(*) FROM gpurec.roc_fitness("
                   "'SELECT g % 1000 AS individual_id, g % 3 = 0 AS label, (g % 777)::float8 AS score FROM big');",
    "similar-users": "SELECT count(*) FROM gpurec.similar_users("
                     "'SELECT g % 500000 AS user_id, (g % 1000)::float8 AS x, (g % 997)::float8 AS y FROM big', 2);",
}
SMALL = ("SELECT count(*) FROM gpurec.cheapest_offers("
         "'SELECT g % 10 AS product_id, g AS store_id, g AS price FROM generate_series(1, 1000) g');")


def vm_size_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1])
    return None


def limit(pid, kb):
    """Sets the soft address-space limit of pid (kb None: unlimited).  Run as
    the server's own user (test/cluster.sh runs it as pgtest when we are
    root), which needs no privilege; the hard limit stays unlimited so that
    the soft one can be lifted again."""
    value = "unlimited" if kb is None else str(kb * 1024)
    as_owner = []
    if os.geteuid() == 0:
        with open(f"/proc/{pid}/status") as f:
            uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
        if uid != 0:
            import pwd
            as_owner = ["runuser", "-u", pwd.getpwuid(uid).pw_name, "--"]
    subprocess.run(as_owner + ["prlimit", f"--pid={pid}", f"--as={value}:unlimited"], check=True)


def run_checks(db):
    if shutil.which("prlimit") is None:
        print("# no prlimit: out-of-memory checks skipped", flush=True)
        return
    db.sql("CREATE TABLE big AS SELECT g FROM generate_series(1::bigint, 12000000) g; ANALYZE big;")
    for reading, settings in (("serial", "SET gpurec.parallel_workers = 0;"),
                              ("parallel", "SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; "
                                           "SET max_parallel_workers_per_gather = 2;")):
        for name, call in CALLS.items():
            s = db.session()
            s.run(settings + " SET gpurec.device = cpu;")
            s.run(SMALL)  # gpurec loaded, caches warm: what the limit leaves room for is the call's own
            limit(s.pid, vm_size_kb(s.pid) + HEADROOM_KB)
            r = s.run(call, timeout=600)
            expect_error(f"oom-{reading}-{name}-53200", r, "53200")
            limit(s.pid, None)
            r = s.run(SMALL)
            check(f"oom-{reading}-{name}-backend-usable-after", r.rows == [["10"]] and not r.errors(), r.describe())
            s.close()


def body():
    run_in_database("oom", run_checks, "oom-no-backend-crashed")


if __name__ == "__main__":
    main(body)
