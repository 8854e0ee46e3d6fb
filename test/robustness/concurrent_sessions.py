#!/usr/bin/env python3
"""8 sessions calling gpurec at the same moment.

Eight psql sessions wait on an advisory lock, are released together and
each runs cheapest_offers (k differs per session) and improve_carts on
mid-size data, a few rounds.  Every result, in the order the function
returned it, must hash (md5) exactly like the same call run alone in one
session beforehand.  The first calls must really have overlapped in time.
"""
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import check, cheapest_digest, improve_digest, main, run_in_database  # noqa: E402

SESSIONS = 8
ROUNDS = 3
KS = [1, 2, 3, 5, 8, 13, 1, 40]
LOCK = 717171

OFFERS = "SELECT product_id, store_id, price FROM offers"


def cheapest(k):
    return cheapest_digest(OFFERS, k, label=f"cheapest_{k}")


def carts(i):
    return improve_digest("SELECT cart_id, product_id, store_id, quantity FROM carts "
                          f"WHERE cart_id % 4 <> {i % 4}", OFFERS, label=f"carts_{i}")


def body():
    run_in_database("concurrent", run_checks, "concurrent-no-backend-crashed")


def run_checks(db):
    db.sql("""
        CREATE TABLE offers AS
          SELECT 1 + (random() * 19999)::int AS product_id,
                 (random() * 499)::bigint AS store_id,
                 round((random() * 100)::numeric, 1) AS price  -- many ties
          FROM generate_series(1, 400000);
        CREATE TABLE carts AS
          SELECT g / 5 AS cart_id, 1 + (random() * 20999)::bigint AS product_id,
                 (random() * 499)::bigint AS store_id, 1 + (random() * 3)::int AS quantity
          FROM generate_series(1, 40000) g;
        ANALYZE offers; ANALYZE carts;""")

    # reference: every distinct call, alone, in one session
    jobs = [[cheapest(KS[i]), carts(i)] for i in range(SESSIONS)]
    ref_session = db.session()
    reference = {}
    for call in sorted({c for job in jobs for c in job}):
        r = ref_session.run(call)
        if r.errors() or len(r.rows) != 1:
            check("concurrent-reference", False, r.describe())
            return
        reference[r.rows[0][0]] = r.rows[0][1]
    ref_session.close()

    holder = db.session()
    holder.run(f"SELECT pg_advisory_lock({LOCK});")
    workers = [db.session() for _ in range(SESSIONS)]
    try:
        for i, w in enumerate(workers):
            script = [f"SELECT pg_advisory_lock_shared({LOCK});",
                      f"SELECT pg_advisory_unlock_shared({LOCK});",
                      "SELECT 'start', extract(epoch FROM clock_timestamp());",
                      jobs[i][0],
                      "SELECT 'first_done', extract(epoch FROM clock_timestamp());",
                      jobs[i][1]]
            for _ in range(ROUNDS - 1):
                script += jobs[i][::-1] if i % 2 else jobs[i]
            w.send("\n".join(script))
        waiting = 0
        deadline = time.monotonic() + 60
        while waiting < SESSIONS and time.monotonic() < deadline:
            waiting = int(holder.value(
                f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
                f"objid = {LOCK} AND NOT granted;"))
            time.sleep(0.05)
        check("concurrent-all-sessions-waiting", waiting == SESSIONS,
              f"only {waiting} sessions reached the barrier")
        released = time.monotonic()
        holder.run(f"SELECT pg_advisory_unlock({LOCK});")
        results = [w.wait(timeout=300) for w in workers]
        print(f"# {SESSIONS} sessions done {time.monotonic() - released:.1f} s after release",
              flush=True)
    finally:
        for w in workers:
            w.close()
        holder.close()

    starts, first_ends = [], []
    for i, r in enumerate(results):
        errors = r.errors()
        got = [row for row in r.rows if row[0] in reference]
        want = len(jobs[i]) * ROUNDS
        bad = [f"{row[0]}: {row[1]} != {reference[row[0]]}" for row in got
               if row[1] != reference[row[0]]]
        check(f"concurrent-session-{i}-k{KS[i]}-results-identical",
              not errors and len(got) == want and not bad,
              f"errors {errors}, {len(got)} of {want} results, differing: {bad[:3]}: "
              f"{r.describe() if errors else ''}")
        for row in r.rows:
            if row[0] == "start":
                starts.append(float(row[1]))
            elif row[0] == "first_done":
                first_ends.append(float(row[1]))
    overlapped = (len(starts) == SESSIONS and len(first_ends) == SESSIONS
                  and max(starts) < min(first_ends))
    check("concurrent-calls-overlapped", overlapped,
          f"starts {sorted(starts)}, first calls ended {sorted(first_ends)}")


if __name__ == "__main__":
    main(body)
