#!/usr/bin/env python3
"""gpurec.progress(): running calls as a second session sees them.

- Every family's call, held at its first compute interrupt point
  (gpurec.test_fault), has one row: its backend's pid, its function, a
  phase, and units whose total is what plain SQL counts of the input in that
  unit; cancelled, the row is gone as the error arrives.
- A long similar_users call on the CPU shows users done rising in the
  computing phase, never past the users in all, and no row once it
  returned; an error, a cancel, a terminated backend leave no row either.
- Visibility as pg_stat_activity's: a role sees its own calls, a member of
  pg_read_all_stats every call, another role none.
- gpurec.track_progress = off hides a call.
- The slots come from the server's spare shared memory where gpurec is not
  preloaded (the suite's cluster), and with its shared memory where it is
  (a cluster of its own).
"""
import os
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import robust_lib  # noqa: E402
from robust_lib import check, expect_error  # noqa: E402
from gpu_service import Cluster  # noqa: E402

PHASES = {"starting", "reading", "indexing", "computing", "writing rows"}
COLUMNS = "pid, function, phase, units_done, units_total, unit, started <= phase_started, started <= clock_timestamp()"

# each family's calls: (function, query, the input's counts by unit as plain SQL)
POINTS = "SELECT user_id, x, y FROM points"
CANDIDATES = "SELECT candidate_id, x, y FROM candidates"
OFFERS = "SELECT product_id, store_id, price FROM offers"
CARTS = "SELECT cart_id, product_id, store_id, quantity FROM carts"
CALLS = [
    ("similar_users", f"SELECT count(*) FROM gpurec.similar_users('{POINTS}', 4)"),
    ("user_similarity", f"SELECT count(*) FROM gpurec.user_similarity('{POINTS}', 7)"),
    ("predict_strength", f"SELECT count(*) FROM gpurec.predict_strength('{POINTS}', 7, '{CANDIDATES}', 2.5)"),
    ("fit_exponent", f"SELECT count(*) FROM gpurec.fit_exponent('{POINTS}', "
                     f"'SELECT user_id, candidate_id FROM holdout', '{CANDIDATES}')"),
    ("cheapest_offers", f"SELECT count(*) FROM gpurec.cheapest_offers('{OFFERS}', 2)"),
    ("improve_carts", f"SELECT count(*) FROM gpurec.improve_carts('{CARTS}', '{OFFERS}')"),
    ("optimize_carts", f"SELECT count(*) FROM gpurec.optimize_carts('{CARTS}', '{OFFERS}', "
                       f"'SELECT store_id, fee, free_from FROM shipping')"),
    ("roc_fitness", "SELECT count(*) FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM examples')"),
    ("roc_auc", "SELECT gpurec.roc_auc((SELECT array_agg(score ORDER BY individual_id, score) FROM examples), "
                "(SELECT array_agg(label ORDER BY individual_id, score) FROM examples))"),
]
# the units each function's phases may count in, with the plain SQL count of its input in that unit
UNIT_COUNTS = {
    "points": "SELECT count(*) FROM points",
    "users": "SELECT count(DISTINCT user_id) FROM points",
    "offers": "SELECT count(*) FROM offers",
    "lines": "SELECT count(*) FROM carts",
    "carts": "SELECT count(DISTINCT cart_id) FROM carts",
    "examples": "SELECT count(*) FROM examples",
}


def make_data(db, users):
    db.sql(f"""
        CREATE TABLE points AS
          SELECT (g % {users}) AS user_id, round((random() * 40)::numeric, 1)::float8 AS x,
                 round((random() * 40)::numeric, 1)::float8 AS y
          FROM generate_series(1, {users} * 20) g;
        CREATE TABLE candidates AS
          SELECT g AS candidate_id, random() * 40 AS x, random() * 40 AS y FROM generate_series(1, 200) g;
        CREATE TABLE holdout AS
          SELECT (g % 15) AS user_id, (g * 7 % 200) + 1 AS candidate_id FROM generate_series(1, 120) g;
        CREATE TABLE offers AS
          SELECT g % 300 AS product_id, (random() * 12)::int AS store_id,
                 round((random() * 20)::numeric, 1) AS price
          FROM generate_series(1, 20000) g;
        CREATE TABLE carts AS
          SELECT g / 6 AS cart_id, (random() * 320)::int AS product_id, (random() * 12)::int AS store_id,
                 1 + (random() * 2)::int AS quantity
          FROM generate_series(1, 1500) g;
        CREATE TABLE shipping AS
          SELECT s AS store_id, round((random() * 8)::numeric, 2) AS fee,
                 round((random() * 40)::numeric, 1) AS free_from
          FROM generate_series(0, 11) s;
        CREATE TABLE examples AS
          SELECT g % 300 AS individual_id, random() < 0.3 AS label, round(random()::numeric, 2)::float8 AS score
          FROM generate_series(1, 20000) g;
        ANALYZE;""")


def rows_of(session, pid):
    """gpurec.progress()'s rows of backend pid, as the session sees them."""
    return [r for r in session.run(f"SELECT {COLUMNS} FROM gpurec.progress()").rows if r[0] == str(pid)]


def wait_for_row(watcher, pid, timeout=10.0, past_starting=False):
    """pid's row once it shows; with past_starting, once it has left the
    phase 'starting' that every call shows for its first moments (a loaded
    machine may show it to the watcher), or the last row seen."""
    deadline = time.monotonic() + timeout
    rows = []
    while time.monotonic() < deadline:
        rows = rows_of(watcher, pid)
        if rows and not (past_starting and rows[0][2] == "starting"):
            return rows
        time.sleep(0.05)
    return rows


def every_family(db, counts):
    """Each call held at its first compute interrupt point: its row, then none once cancelled."""
    caller, watcher = db.session(), db.session()
    caller.run("SET gpurec.device = cpu; SET gpurec.test_fault = 'compute:1:wait';")
    for function, query in CALLS:
        caller.send(query)
        rows = wait_for_row(watcher, caller.pid, past_starting=True)
        ok = len(rows) == 1
        why = f"rows {rows}"
        if ok:
            pid, name, phase, done, total, unit, phase_after_start, started_before_read = rows[0]
            ok = name == function and phase in PHASES and phase_after_start == "t" and started_before_read == "t"
            if ok and unit == "rows":  # reading: rows so far, the total not known ahead
                ok = total == "\\N" and int(done) >= 0
            elif ok:
                ok = unit in counts and total == str(counts[unit]) and 0 <= int(done) <= int(total)
                why += f"; plain SQL counts {counts.get(unit)} {unit}"
        check(f"progress-{function}-seen-by-another-session", ok, why)
        watcher.run(f"SELECT pg_cancel_backend({caller.pid});")
        r = caller.wait(60)
        expect_error(f"progress-{function}-cancelled", r, "57014")
        left = rows_of(watcher, caller.pid)
        check(f"progress-{function}-no-row-after-cancel", not left, f"rows {left}")
    caller.close()
    watcher.close()


def rising_units(db, users):
    """A long call on one thread: users done rise, never past the users in all; no row once it returned."""
    caller, watcher = db.session(), db.session()
    caller.run("SET gpurec.device = cpu; SET gpurec.cpu_threads = 1;")
    caller.send(f"SELECT count(*) FROM gpurec.similar_users('{POINTS}', 3)")
    seen = []
    while True:
        rows = rows_of(watcher, caller.pid)
        if not rows:
            if seen:
                break
        elif rows[0][2] == "computing":
            seen.append((int(rows[0][3]), rows[0][4], rows[0][5]))
        time.sleep(0.1)
        if len(seen) > 2000:
            break
    r = caller.wait(300)
    check("progress-long-call-answered", not r.errors() and r.rows == [[str(users * 3)]], r.describe())
    done = [d for d, total, unit in seen]
    ok = (len(set(done)) >= 2 and done == sorted(done) and all(t == str(users) and u == "users" for d, t, u in seen)
          and done[-1] <= users)
    check("progress-units-done-rise", ok, f"computing samples (done, total, unit): {seen[:5]} ... {seen[-3:]}")
    left = rows_of(watcher, caller.pid)
    check("progress-no-row-after-the-call", not left, f"rows {left}")

    # an error raised in the call, a query of the call's that fails, a terminated backend: no row
    caller.run("SET gpurec.test_fault = 'compute:1:error';")
    r = caller.run(f"SELECT count(*) FROM gpurec.similar_users('{POINTS}', 3)")
    expect_error("progress-injected-error", r, "57000")
    left = rows_of(watcher, caller.pid)
    check("progress-no-row-after-an-error", not left, f"rows {left}")
    caller.run("RESET gpurec.test_fault;")
    r = caller.run("SELECT count(*) FROM gpurec.similar_users('SELECT user_id, x, y / 0 AS y FROM points', 3)")
    expect_error("progress-inner-query-error", r, "22012")
    left = rows_of(watcher, caller.pid)
    check("progress-no-row-after-an-inner-query-error", not left, f"rows {left}")

    terminated_leaves_no_row(db, watcher, "progress")
    caller.close()

    # a session with gpurec.track_progress off shows none of its calls
    quiet = db.session()
    quiet.run("SET gpurec.track_progress = off; SET gpurec.test_fault = 'compute:1:wait';")
    quiet.send(f"SELECT count(*) FROM gpurec.similar_users('{POINTS}', 3)")
    time.sleep(1.0)
    hidden = rows_of(watcher, quiet.pid)
    watcher.run(f"SELECT pg_cancel_backend({quiet.pid});")
    quiet.wait(60)
    check("progress-track-progress-off-hides-the-call", not hidden, f"rows {hidden}")
    quiet.close()
    watcher.close()


def terminated_leaves_no_row(db, watcher, name):
    """A call held in a backend that pg_terminate_backend ends: its row goes with the backend."""
    caller = db.session()
    caller.run("SET gpurec.device = cpu; SET gpurec.test_fault = 'compute:1:wait';")
    caller.send(f"SELECT count(*) FROM gpurec.similar_users('{POINTS}', 3)")
    check(f"{name}-held-call-seen", len(wait_for_row(watcher, caller.pid)) == 1, "no row")
    watcher.run(f"SELECT pg_terminate_backend({caller.pid});")
    try:
        caller.wait(30)
    except (RuntimeError, TimeoutError):
        pass
    deadline = time.monotonic() + 10
    while rows_of(watcher, caller.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = rows_of(watcher, caller.pid)
    check(f"{name}-no-row-after-terminate", not left, f"rows {left}")
    caller.close()


VISIBILITY_ROLES = ("gpurec_prog_caller", "gpurec_prog_other", "gpurec_prog_stats")


def visibility(db):
    """As pg_stat_activity: the caller's role sees its call, another role not, pg_read_all_stats every call."""
    caller_role, other_role, stats_role = VISIBILITY_ROLES
    for role in VISIBILITY_ROLES:
        robust_lib.admin(f"DROP ROLE IF EXISTS {role}", check_rc=False)
        robust_lib.admin(f"CREATE ROLE {role} LOGIN")
    robust_lib.admin(f"GRANT pg_read_all_stats TO {stats_role}")
    db.sql(f"GRANT SELECT ON points TO {caller_role}; "
           f"ALTER ROLE {caller_role} IN DATABASE {db.name} SET gpurec.test_fault = 'compute:1:wait'")

    def session_as(role):
        env = db.env()
        env["PGUSER"] = role
        return robust_lib.Session(env)

    caller = session_as(caller_role)
    caller.send(f"SELECT count(*) FROM gpurec.similar_users('{POINTS}', 3)")
    same, other, stats = session_as(caller_role), session_as(other_role), session_as(stats_role)
    seen_by_same = wait_for_row(same, caller.pid)
    check("progress-own-role-sees-its-call", len(seen_by_same) == 1, f"rows {seen_by_same}")
    seen_by_other = rows_of(other, caller.pid)
    check("progress-other-role-sees-nothing", not seen_by_other, f"rows {seen_by_other}")
    seen_by_stats = rows_of(stats, caller.pid)
    check("progress-pg-read-all-stats-sees-it", len(seen_by_stats) == 1, f"rows {seen_by_stats}")
    names = stats.run(f"SELECT usename, datname FROM gpurec.progress() WHERE pid = {caller.pid}").rows
    check("progress-names-role-and-database", names == [[caller_role, db.name]], f"{names}")
    stats.run(f"SELECT pg_cancel_backend({caller.pid});")
    caller.wait(60)
    for s in (caller, same, other, stats):
        s.close()


def preloaded():
    """With gpurec preloaded: a call's row, from slots made at the server's start."""
    cluster = Cluster({})
    try:
        db = robust_lib.Database("progress_preloaded")
        try:
            make_data(db, 50)
            caller, watcher = db.session(), db.session()
            caller.run("SET gpurec.device = cpu; SET gpurec.test_fault = 'compute:1:wait';")
            caller.send(f"SELECT count(*) FROM gpurec.similar_users('{POINTS}', 3)")
            rows = wait_for_row(watcher, caller.pid)
            check("progress-preloaded-seen", len(rows) == 1 and rows[0][1] == "similar_users", f"rows {rows}")
            watcher.run(f"SELECT pg_cancel_backend({caller.pid});")
            caller.wait(60)
            left = rows_of(watcher, caller.pid)
            check("progress-preloaded-no-row-after-cancel", not left, f"rows {left}")
            terminated_leaves_no_row(db, watcher, "progress-preloaded")
            caller.close()
            watcher.close()
        finally:
            db.drop()
    finally:
        cluster.stop()


def body():
    users = int(os.environ.get("GPUREC_PROGRESS_USERS", 2000))

    def checks(db):
        make_data(db, users)
        counts = {unit: int(db.sql(q)[0][0]) for unit, q in UNIT_COUNTS.items()}
        every_family(db, counts)
        rising_units(db, users)
        visibility(db)

    robust_lib.run_in_database("progress", checks, "progress-no-backend-crashed", roles=VISIBILITY_ROLES)
    saved = {k: os.environ.get(k) for k in ("PGHOST", "PGPORT", "PGDATA", "PGUSER", "PGDATABASE")}
    try:
        preloaded()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    robust_lib.main(body)
