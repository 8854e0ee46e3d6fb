#!/usr/bin/env python3
"""Cancel and statement_timeout in the middle of a long gpurec call.

A call over a few million offers takes seconds; statement_timeout and
pg_cancel_backend must end it with 57014 within about a second, and the very
same backend (same psql session, same pid) must then answer a small query
correctly.  Cancels and timeouts aimed at one phase of a call are in
phase_faults.py, which holds the call in that phase with gpurec.test_fault
rather than guessing when the phase runs.
"""
import os
import re
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import check, check_cancelled, expect_error, main, run_in_database  # noqa: E402

N_OFFERS = int(os.environ.get("GPUREC_ROB_OFFERS", 4_000_000))
N_PRODUCTS = 200_000
SLACK_S = 1.0          # allowed beyond the timeout / the cancel
WANT_CALL_S = 3.0      # the uncancelled call should take at least this long

SMALL_QUERY = ("SELECT 'after', md5(string_agg(t::text, ',' ORDER BY product_id, offer_rank)) "
               "FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM small', 2) t;")
TIMING = re.compile(r"device (\w+), read ([\d.]+) ms, transfer ([\d.]+) ms, "
                    r"compute ([\d.]+) ms, output ([\d.]+) ms")


def body():
    run_in_database("cancel", run_checks, "cancel-no-backend-crashed")


def run_checks(db):
    db.sql(f"""
        CREATE UNLOGGED TABLE offers AS
          SELECT 1 + (random() * {N_PRODUCTS - 1})::bigint AS product_id,
                 (random() * 999)::bigint AS store_id,
                 round((random() * 1000)::numeric, 2) AS price
          FROM generate_series(1, {N_OFFERS});
        CREATE TABLE small AS
          SELECT g % 50 AS product_id, g AS store_id, round((g * 7919 % 1000) / 10.0, 2) AS price
          FROM generate_series(1, 500) g;
        VACUUM ANALYZE offers;
        VACUUM ANALYZE small;""")
    small_ref = db.sql(SMALL_QUERY)[0]

    s = db.session()
    s.run("SET gpurec.timing = on;")

    def still_usable(name, pid_before):
        r = s.run(SMALL_QUERY + " SELECT 'pid', pg_backend_pid();")
        ok = (not r.errors() and ["after", small_ref[1]] in r.rows
              and ["pid", str(pid_before)] in r.rows)
        check(name, ok, f"after the cancel: {r.describe()}")

    # the long call, uncancelled, with its phase times; longer inner queries until it lasts
    repeat = 1
    while True:
        inner = ("SELECT product_id, store_id, price FROM offers" +
                 (f", generate_series(1, {repeat}) g" if repeat > 1 else ""))
        long_call = (f"SELECT count(*) FROM gpurec.cheapest_offers("
                     f"'{inner}', 10);")
        started = time.monotonic()
        r = s.run(long_call)
        wall = time.monotonic() - started
        timing = [TIMING.search(n) for n in r.notices()]
        timing = [m for m in timing if m]
        if r.errors() or not timing:
            check("cancel-reference-call", False, r.describe())
            return
        if wall >= WANT_CALL_S or repeat >= 8:
            break
        repeat = min(8, max(repeat + 1, int(repeat * WANT_CALL_S * 1.3 / wall) + 1))
    # a warm call's length and phases (the first call of a backend also
    # starts CUDA): the cancel below comes a third of the way in
    started = time.monotonic()
    r = s.run(long_call)
    wall = time.monotonic() - started
    timing = [m for m in (TIMING.search(n) for n in r.notices()) if m]
    if r.errors() or not timing:
        check("cancel-reference-call", False, r.describe())
        return
    device, read_ms, transfer_ms, compute_ms, output_ms = (
        timing[0].group(1), *map(float, timing[0].groups()[1:]))
    print(f"# long call: {wall:.2f} s on {device}: read {read_ms:.0f} ms, transfer "
          f"{transfer_ms:.0f} ms, compute {compute_ms:.0f} ms, output {output_ms:.0f} ms",
          flush=True)
    check("cancel-reference-call-is-long", wall > 2.0,
          f"the uncancelled call took only {wall:.2f} s: cancel checks would prove little")

    # 1. statement_timeout = 1s
    def timed_out(name, timeout_ms, call=long_call):
        s.run(f"SET statement_timeout = '{timeout_ms}ms';")
        r = s.run(call)
        s.run("RESET statement_timeout;")
        errors = r.errors()
        late = errors[0][2] - timeout_ms / 1000 if errors else None
        ok = expect_error(name, r, "57014")
        if ok:
            print(f"# {name}: ERROR {late:.3f} s after the timeout", flush=True)
            check(name + "-in-time", late <= SLACK_S,
                  f"the error came {late:.2f} s after the {timeout_ms} ms timeout")
        still_usable(name + "-session-usable", s.pid)

    timed_out("statement-timeout-1s", 1000)

    # 2. pg_cancel_backend from a second session, mid-call
    def cancelled(name, call, after_s):
        app = f"gpurec_rob_cancel_{os.getpid()}"
        victim = db.session(app)
        watcher = db.session()
        try:
            sent = victim.send(call + "\n" + SMALL_QUERY + "\nSELECT 'pid', pg_backend_pid();")
            pid = None
            deadline = time.monotonic() + 30
            while pid is None and time.monotonic() < deadline:
                pid = watcher.value(
                    f"SELECT pid FROM pg_stat_activity WHERE application_name = '{app}' "
                    f"AND state = 'active' AND query LIKE '%gpurec.%';")
                if pid is None:
                    time.sleep(0.02)
            if pid is None:
                check(name, False, "the call never showed as active in pg_stat_activity")
                victim.wait()
                return
            time.sleep(after_s)
            t0 = time.monotonic()
            cancel = watcher.value(f"SELECT pg_cancel_backend({pid});")
            r = victim.wait(timeout=120)
            late = check_cancelled(name, r, sent, t0, cancel, pid, victim.pid, small_ref, SLACK_S)
            if late is not None:
                print(f"# {name}: ERROR {late:.3f} s after the cancel, "
                      f"{t0 - sent:.2f} s into the call", flush=True)
        finally:
            victim.close()
            watcher.close()

    cancelled("pg-cancel-backend-cheapest-offers", long_call,
              min(1.0, wall / 3))
    s.close()


if __name__ == "__main__":
    main(body)
