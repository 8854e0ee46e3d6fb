#!/usr/bin/env python3
"""Cancel, statement_timeout and errors aimed at one phase of a call.

gpurec.test_fault = 'phase:n:action' (superuser, test-only) acts at the n-th
interrupt point of the read, transfer, compute or output phase: `wait`
waits there, checking for interrupts, until a cancel ends it (showing
wait_event 'Extension' in pg_stat_activity); `error` raises ERROR 57000
naming the phase.  So every check below knows which phase the call is in
when the cancel, the timeout or the error lands, whatever the machine's
speed.  For each phase and function:

  timeout  statement_timeout = 300ms while the phase waits: exactly one
           ERROR 57014, at most 1 s after the timeout;
  cancel   pg_cancel_backend from a second session once pg_stat_activity
           shows the call waiting: exactly one ERROR 57014 within 1 s;
  error    the injected ERROR 57000 naming the phase, and nothing else;

and after each, the same backend (same pid) answers a small call correctly.
Repeated errors in every phase leave the backend's memory flat.  The CPU
runs read, compute and output; with a GPU in gpurec.devices() the GPU runs
read, transfer, compute and output too, else those checks are skipped
(stand-in devices of the GPU service run the CPU's three phases, its
compute in the service, where the session shows as waiting).
"""
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import check, check_cancelled, expect_error, gpu_count, main, run_in_database  # noqa: E402

TIMEOUT_MS = 300
SLACK_S = 1.0  # allowed beyond the timeout / the cancel

SMALL_QUERY = ("SELECT 'after', md5(string_agg(t::text, ',' ORDER BY product_id, offer_rank)) "
               "FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM small', 2) t;")

OFFERS = "SELECT product_id, store_id, price FROM offers"
CARTS = "SELECT cart_id, product_id, store_id, quantity FROM carts"

# The read phase has a point as reading starts, then one every 16,384 rows
# (the calls aimed past the first read 40,000 rows or more); the output
# phase one as it starts, then one every 4,096 rows (cheapest_offers returns
# 60,000); every compute and transfer phase one after its first batch: the
# points aimed at below always exist.
CALLS = {
    "cheapest-offers": (f"SELECT count(*) FROM gpurec.cheapest_offers('{OFFERS}', 3);",
                        {"read": 3, "transfer": 1, "compute": 1, "output": 3}),
    "improve-carts": (f"SELECT count(*) FROM gpurec.improve_carts('{CARTS}', '{OFFERS}');",
                      {"read": 3, "transfer": 1, "compute": 1}),
    "roc-fitness-arrays": ("SELECT count(*) FROM gpurec.roc_fitness("
                           "'SELECT individual_id, scores FROM population', "
                           "'{t,f,t,f,t,f,f,t}');",
                           {"read": 2, "transfer": 1, "compute": 1}),
    "similar-users": ("SELECT count(*) FROM gpurec.similar_users("
                      "'SELECT user_id, x, y FROM visits', 5);",
                      {"read": 1, "transfer": 1, "compute": 1}),
}
CPU_PHASES = ("read", "compute", "output")
GPU_PHASES = ("read", "transfer", "compute", "output")


PLAIN_ROLE = f"gpurec_rob_fault_plain_{os.getpid()}"


def body():
    run_in_database("faults", run_checks, "phase-faults-no-backend-crashed", roles=[PLAIN_ROLE])


def fault_name(phase, at, action):
    return f"{phase}:{at}:{action}"


def run_checks(db):
    db.sql("""
        CREATE TABLE offers AS
          SELECT 1 + g % 20000 AS product_id, (g * 7919) % 997 AS store_id,
                 round(((g * 104729) % 100000) / 100.0, 2) AS price
          FROM generate_series(1::bigint, 100000) g;
        CREATE TABLE carts AS
          SELECT g / 4 AS cart_id, 1 + (g * 31) % 20000 AS product_id,
                 (g * 13) % 997 AS store_id, 1 + g % 3 AS quantity
          FROM generate_series(1::bigint, 40000) g;
        CREATE TABLE population AS
          SELECT g AS individual_id,
                 ARRAY[g % 7, g % 5, g % 11, g % 3, g % 13, g % 2, g % 17, g % 19]::real[] AS scores
          FROM generate_series(1::bigint, 40000) g;
        CREATE TABLE visits AS
          SELECT g % 100 AS user_id, (g * 37 % 1000)::float8 AS x, (g * 53 % 1000)::float8 AS y
          FROM generate_series(1::bigint, 2000) g;
        CREATE TABLE small AS
          SELECT g % 50 AS product_id, g AS store_id, round((g * 7919 % 1000) / 10.0, 2) AS price
          FROM generate_series(1, 500) g;
        ANALYZE;""")
    small_ref = db.sql(SMALL_QUERY)[0]

    s = db.session()
    setting_checks(db, s)

    def still_usable(name, session, pid):
        r = session.run("RESET gpurec.test_fault; RESET statement_timeout; " + SMALL_QUERY +
                        " SELECT 'pid', pg_backend_pid();")
        ok = (not r.errors() and ["after", small_ref[1]] in r.rows
              and ["pid", str(pid)] in r.rows and session.pid == pid)
        check(name + "-session-usable", ok, f"the next call in the same session: {r.describe()}")

    def reference(device, call):
        s.run(f"SET gpurec.device = {device}; RESET gpurec.test_fault;")
        r = s.run(call)
        return r.rows if not r.errors() else None

    def timed_out(name, device, call, fault):
        s.run(f"SET gpurec.device = {device}; SET gpurec.test_fault = '{fault}'; "
              f"SET statement_timeout = '{TIMEOUT_MS}ms';")
        r = s.run(call)
        s.run("RESET statement_timeout; RESET gpurec.test_fault;")
        if expect_error(name, r, "57014"):
            late = r.errors()[0][2] - TIMEOUT_MS / 1000
            check(name + "-in-time", late <= SLACK_S,
                  f"the error came {late:.2f} s after the {TIMEOUT_MS} ms timeout")
        still_usable(name, s, s.pid)

    def cancelled(name, device, call, fault):
        app = f"gpurec_rob_fault_{os.getpid()}"
        victim = db.session(app)
        watcher = db.session()
        try:
            victim.run(f"SET gpurec.device = {device}; SET gpurec.test_fault = '{fault}';")
            sent = victim.send(call + "\nRESET gpurec.test_fault;\n" + SMALL_QUERY +
                        "\nSELECT 'pid', pg_backend_pid();")
            waiting = None
            deadline = time.monotonic() + 30
            while waiting is None and time.monotonic() < deadline:
                waiting = watcher.value(
                    f"SELECT pid FROM pg_stat_activity WHERE application_name = '{app}' "
                    f"AND state = 'active' AND wait_event_type = 'Extension' "
                    f"AND wait_event = 'Extension' AND query LIKE '%gpurec.%';")
                if waiting is None:
                    time.sleep(0.01)
            if waiting is None:
                check(name, False, "the call never showed as waiting in pg_stat_activity")
                victim.wait(timeout=60)
                return
            t0 = time.monotonic()
            answer = watcher.value(f"SELECT pg_cancel_backend({waiting});")
            r = victim.wait(timeout=60)
            check_cancelled(name, r, sent, t0, answer, waiting, victim.pid, small_ref, SLACK_S)
        finally:
            victim.close()
            watcher.close()

    def errored(name, device, call, phase, fault):
        s.run(f"SET gpurec.device = {device}; SET gpurec.test_fault = '{fault}';")
        r = s.run(call)
        s.run("RESET gpurec.test_fault;")
        want = f"gpurec.test_fault: error injected in the {phase} phase"
        if expect_error(name, r, "57000"):
            text = r.errors()[0][1]
            check(name + "-message", text == want, f"expected '{want}', got '{text}'")
        still_usable(name, s, s.pid)

    def memory_of(session):
        return int(session.value("SELECT sum(total_bytes) FROM pg_backend_memory_contexts;"))

    def run_device(device, phases):
        for function, (call, points) in CALLS.items():
            ref = reference(device, call)
            if not ref:
                check(f"fault-{device}-{function}-reference", False,
                      f"the call failed without a fault on the {device}")
                continue
            for phase in phases:
                at = points.get(phase)
                if at is None:
                    continue
                base = f"fault-{device}-{function}-{phase}"
                timed_out(base + "-statement-timeout", device, call, fault_name(phase, at, "wait"))
                cancelled(base + "-pg-cancel-backend", device, call, fault_name(phase, at, "wait"))
                errored(base + "-error", device, call, phase, fault_name(phase, at, "error"))
            # the faults changed nothing: the same result without one
            check(f"fault-{device}-{function}-result-unchanged", reference(device, call) == ref,
                  "the call's result differs after the faults")

        # errors in every phase, repeated: the backend's memory stays flat
        call, points = CALLS["cheapest-offers"]
        faults = [fault_name(p, points[p], "error") for p in phases]

        def round_of_errors():
            for fault in faults:
                s.run(f"SET gpurec.test_fault = '{fault}';")
                r = s.run(call)
                if r.sqlstates() != ["57000"]:
                    return r
            s.run("RESET gpurec.test_fault;")
            return None

        s.run(f"SET gpurec.device = {device};")
        for _ in range(3):
            round_of_errors()
        before = memory_of(s)
        bad = None
        for _ in range(20):
            bad = round_of_errors() or bad
        grown = memory_of(s) - before
        check(f"fault-{device}-errors-leave-memory-flat", bad is None and grown < 64 * 1024,
              f"memory contexts grew by {grown} bytes over {20 * len(faults)} injected errors"
              + (f"; a call did not fail as injected: {bad.describe()}" if bad else ""))
        still_usable(f"fault-{device}-after-repeated-errors", s, s.pid)

    run_device("cpu", CPU_PHASES)
    if gpu_count(db) > 0:
        # stand-in devices (gpurec.test_stand_in_devices) compute with the CPU's code, in the GPU
        # service: there the compute phase's faults act, and the session waits on the service
        stand_ins = int(db.sql("SELECT count(*) FROM gpurec.devices() WHERE name = 'CPU stand-in'")[0][0]) > 0
        run_device("gpu", CPU_PHASES if stand_ins else GPU_PHASES)
    else:
        print("# skipped: the GPU phase faults (read, transfer, compute, output): "
              "no GPU in gpurec.devices()", flush=True)
    s.close()


def setting_checks(db, s):
    """Bad values are refused with 22023; a role that is not superuser cannot set it."""
    s.run("SELECT count(*) FROM gpurec.devices();")  # the library is loaded
    for value in ("output", "output:3", "fetch:1:wait", "read:0:wait", "read:x:wait",
                  "read:1:sleep", "read:1:wait:1", "READ:1:wait"):
        r = s.run(f"SET gpurec.test_fault = '{value}';")
        expect_error(f"fault-setting-refuses-{value.replace(':', '-')}", r, "22023")
    r = s.run("SET gpurec.test_fault = 'output:3:wait'; SHOW gpurec.test_fault; "
              "RESET gpurec.test_fault; SHOW gpurec.test_fault;")
    check("fault-setting-accepts-and-resets", not r.errors() and r.rows == [["output:3:wait"], [""]],
          r.describe())
    db.sql(f"CREATE ROLE {PLAIN_ROLE} LOGIN;")
    s.run(f"SET ROLE {PLAIN_ROLE};")
    r = s.run("SET gpurec.test_fault = 'read:1:error';")
    s.run("RESET ROLE;")
    expect_error("fault-setting-superuser-only", r, "42501")


if __name__ == "__main__":
    main(body)
