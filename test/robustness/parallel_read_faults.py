#!/usr/bin/env python3
"""Faults while parallel workers read an inner query.

Plans are forced parallel (parallel_setup_cost = 0 and the like) and
gpurec.test_fault aims at the read phase, which the workers run: a `wait`
there holds every process that reads until a cancel, so the checks know
the call is mid-read whatever the machine's speed.  For each function:

  cancel   pg_cancel_backend of the calling backend once a process of the
           call waits: exactly one ERROR 57014 within 1 s, and the same
           backend answers the next call;
  timeout  statement_timeout = 300ms: one ERROR 57014 within 1 s of it;
  error    the ERROR 57000 injected in a worker reaches the caller as is.

Then: no dynamic shared memory segment is left behind; eight sessions at
once, with workers for fewer than all of them, each get the serial answer
(some read serially) and none waits forever; and 200 parallel calls leave
the calling backend's memory flat.
"""
import os
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import PSQL, check, check_cancelled, expect_error, main, proc_memory, run_in_database  # noqa: E402

SLACK_S = 1.0
FORCE = ("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; "
         "SET max_parallel_workers_per_gather = 2; SET parallel_leader_participation = off;")
SMALL_QUERY = ("SELECT 'after', md5(string_agg(t::text, ',' ORDER BY product_id, offer_rank)) "
               "FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM small', 2) t;")

CALLS = {
    "cheapest-offers": "SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 3);",
    "improve-carts": ("SELECT count(*) FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id FROM carts', "
                      "'SELECT product_id, store_id, price FROM offers');"),
    # ranked on the CPU, every process of the direct scan ranks its own
    # offers and sends only their k cheapest (README, Parallel reading)
    "cheapest-offers-partial-results": "SET gpurec.device = cpu; SELECT count(*) FROM gpurec.cheapest_offers("
                                       "'SELECT product_id, store_id, price FROM offers', 1);",
    "roc-fitness": "SELECT count(*) FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM examples');",
    "user-similarity": "SELECT count(*) FROM gpurec.user_similarity('SELECT user_id, x, y FROM visits', 1);",
}


def shm_segments():
    try:
        return sorted(f for f in os.listdir("/dev/shm") if f.startswith("PostgreSQL."))
    except OSError:
        return None


def segments_settled(before, timeout=5.0):
    """The segments once they are back to `before`, or after timeout: a backend or worker that
    ended a moment ago may still be detaching."""
    deadline = time.monotonic() + timeout
    while True:
        now = shm_segments()
        if before is None or now == before or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


def run_checks(db):
    db.sql("""
        CREATE TABLE offers AS
          SELECT 1 + g % 20000 AS product_id, (g * 7919) % 997 AS store_id,
                 round(((g * 104729) % 100000) / 100.0, 2) AS price
          FROM generate_series(1::bigint, 200000) g;
        CREATE TABLE carts AS
          SELECT g / 4 AS cart_id, 1 + (g * 31) % 20000 AS product_id, (g * 13) % 997 AS store_id
          FROM generate_series(1::bigint, 200000) g;
        CREATE TABLE examples AS
          SELECT g % 500 AS individual_id, g % 3 = 0 AS label, ((g * 7) % 1000) / 10.0 AS score
          FROM generate_series(1::bigint, 200000) g;
        CREATE TABLE visits AS
          SELECT g % 20000 AS user_id, (g * 7) % 1000 / 10.0 AS x, (g * 13) % 1000 / 10.0 AS y
          FROM generate_series(1::bigint, 200000) g;
        CREATE TABLE small AS
          SELECT g % 50 AS product_id, g % 7 AS store_id, (g % 13) + 0.5 AS price FROM generate_series(1, 400) g;
        ANALYZE;
    """)
    shm_before = shm_segments()
    small_ref = db.session().run(SMALL_QUERY).rows[0]

    serial = {}
    s = db.session()
    for name, call in CALLS.items():
        serial[name] = s.run("SET gpurec.parallel_workers = 0;" + call).rows
    s.close()

    def waiting_process(watcher, leader):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pid = watcher.value(
                f"SELECT pid FROM pg_stat_activity WHERE (pid = {leader} OR leader_pid = {leader}) "
                f"AND wait_event_type = 'Extension' AND wait_event = 'Extension' LIMIT 1;")
            if pid is not None:
                return pid
            time.sleep(0.01)
        return None

    for name, call in CALLS.items():
        # cancel: from a second session, once some process of the call waits mid-read
        victim, watcher = db.session(), db.session()
        victim.run(FORCE + " SET gpurec.test_fault = 'read:2:wait';")
        sent = victim.send(call + "\nRESET gpurec.test_fault;\n" + SMALL_QUERY + "\nSELECT 'pid', pg_backend_pid();")
        if waiting_process(watcher, victim.pid) is None:
            check(f"parallel-cancel-{name}", False, "no process of the call ever waited in the read phase")
            victim.wait(timeout=60)
        else:
            t0 = time.monotonic()
            answer = watcher.value(f"SELECT pg_cancel_backend({victim.pid});")
            r = victim.wait(timeout=60)
            check_cancelled(f"parallel-cancel-{name}", r, sent, t0, answer, victim.pid, victim.pid, small_ref,
                            SLACK_S)
        victim.close()
        watcher.close()

        # statement_timeout
        s = db.session()
        s.run(FORCE + " SET gpurec.test_fault = 'read:2:wait'; SET statement_timeout = '300ms';")
        r = s.run(call)
        if expect_error(f"parallel-timeout-{name}", r, "57014"):
            late = r.errors()[0][2] - 0.3
            check(f"parallel-timeout-{name}-in-time", late <= SLACK_S, f"the error came {late:.2f} s after the timeout")
        r = s.run("RESET statement_timeout; RESET gpurec.test_fault;" + call)
        check(f"parallel-timeout-{name}-session-usable", r.rows == serial[name], r.describe())

        # an error raised in a worker
        s.run("SET gpurec.test_fault = 'read:2:error';")
        r = s.run(call)
        if expect_error(f"parallel-worker-error-{name}", r, "57000"):
            check(f"parallel-worker-error-{name}-message", "error injected in the read phase" in r.errors()[0][1],
                  r.describe())
        s.run("RESET gpurec.test_fault;")
        r = s.run(FORCE + call)
        check(f"parallel-read-{name}-equals-serial", r.rows == serial[name], f"{r.rows} vs {serial[name]}")
        s.close()

    after = segments_settled(shm_before)  # the workers of the cancelled calls exit on their own
    check("parallel-faults-dsm-released", shm_before is None or after == shm_before,
          f"{len(shm_before or [])} segments before, {len(after or [])} after")

    # eight sessions at once, with workers for some of them only
    call = CALLS["cheapest-offers"]
    results = [None] * 8

    def one(i):
        env = dict(os.environ, PGDATABASE=db.name)
        proc = subprocess.run([PSQL, "-X", "-q", "-A", "-t", "-c",
                               FORCE.replace("= 2", "= 4") + " SET max_parallel_workers = 3; " + call],
                              capture_output=True, text=True, env=env, timeout=300)
        results[i] = (proc.returncode, proc.stdout.strip(), proc.stderr.strip())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    want = serial["cheapest-offers"][0][0]
    check("parallel-eight-sessions-all-answered", all(r is not None and r[0] == 0 and r[1] == want for r in results),
          f"want {want}: {results}")

    # 200 parallel calls in one backend: its memory stays flat, whether
    # the workers send columns (the GPU's way, and auto's on few cores) or
    # partial results (the CPU's)
    for device in ["auto", "cpu"]:
        s = db.session()
        s.run(FORCE + f" SET gpurec.device = {device};")
        # k = 1: 20,000 products' partial results are then well under the
        # table's 200,000 rows, so the CPU's way takes them (README)
        small_call = "SELECT count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers WHERE product_id < 2000', 1);"
        rss = []
        for _ in range(20):
            s.run("\n".join([small_call] * 10))
            rss.append(proc_memory(s.pid))
        half = len(rss) // 2
        growth = None if None in rss else min(rss[-5:]) - min(rss[half:half + 5])
        print(f"# RssAnon over 200 parallel calls ({device}): {rss} kB", flush=True)
        name = "parallel-200-calls-memory-flat" + ("" if device == "auto" else f"-{device}")
        check(name, growth is not None and growth < 2048, f"grew {growth} kB: {rss}")
        s.close()
    after = segments_settled(shm_before)
    check("parallel-200-calls-dsm-released", shm_before is None or after == shm_before,
          f"{len(shm_before or [])} segments before, {len(after or [])} after")


def body():
    run_in_database("parallel", run_checks, "parallel-faults-no-backend-crashed")


if __name__ == "__main__":
    main(body)
