#!/usr/bin/env python3
"""32 sessions calling every gpurec function at once, for a bounded time.

A reference session first computes, alone, the md5 of every call's rows in
the order the function returned them.  Then 32 psql sessions (one backend
each) run the calls in random order for GPUREC_LOAD_SECONDS (default 60):
sessions differ in gpurec.device (auto, cpu, and gpu when gpurec.devices()
lists a GPU) and a quarter of them set gpurec.test_fail_gpu_alloc = on
(every GPU allocation fails: under auto the CPU answers, under gpu ERROR
53200).  Every answer must equal the reference; the only errors allowed
are the expected ones (each session also runs a call whose inner query
divides by zero: 22012).  Afterwards: no backend crashed (the idle
sentinel session lives, no "terminated by signal" in the server log) and,
with a GPU, its free memory is back to its idle level.
"""
import os
import random
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import check, digest_query, main, quote, run_in_database  # noqa: E402

SECONDS = float(os.environ.get("GPUREC_LOAD_SECONDS", "60"))
SESSIONS = 32  # test/run_all.sh starts the cluster with max_connections = 50

P = "SELECT user_id, x, y FROM load_points"
C = "SELECT candidate_id, x, y FROM load_candidates"
H = "SELECT user_id, candidate_id FROM load_holdout"
OFFERS = "SELECT product_id, store_id, price FROM load_offers"
CARTS = "SELECT cart_id, product_id, store_id, quantity FROM load_carts"

CALLS = {
    "cheapest_1": digest_query("cheapest_1", f"gpurec.cheapest_offers('{quote(OFFERS)}', 1)",
                               "a, b, c, d, e"),
    "cheapest_4": digest_query("cheapest_4", f"gpurec.cheapest_offers('{quote(OFFERS)}', 4)",
                               "a, b, c, d, e"),
    "improve": digest_query("improve", f"gpurec.improve_carts('{quote(CARTS)}', '{quote(OFFERS)}')",
                            "a, b, c, d, e, f, g, h"),
    "user_similarity": digest_query("user_similarity", f"gpurec.user_similarity('{P}', 3)",
                                    "a, b, c"),
    "similar_users": digest_query("similar_users", f"gpurec.similar_users('{P}', 5)",
                                  "a, b, c, d"),
    "similar_users_hav": digest_query(
        "similar_users_hav", f"gpurec.similar_users('{P}', 3, 'haversine')", "a, b, c, d"),
    "predict_strength": digest_query(
        "predict_strength", f"gpurec.predict_strength('{P}', 3, '{C}', 2, 30)", "a, b"),
    "fit_exponent": digest_query("fit_exponent", f"gpurec.fit_exponent('{P}', '{H}', '{C}')",
                                 "a, b, c"),
    "roc_long": digest_query("roc_long", "gpurec.roc_fitness('SELECT individual_id, label, score "
                             "FROM load_scores')", "a, b, c, d, e, f, g"),
    "roc_array": digest_query(
        "roc_array", "gpurec.roc_fitness('SELECT individual_id, scores FROM load_population', "
        "(SELECT labels FROM load_labels))", "a, b, c, d, e, f, g"),
    "roc_auc": "SELECT 'roc_auc', md5(gpurec.roc_auc((SELECT scores::float8[] FROM load_population "
               "WHERE individual_id = 1), (SELECT labels FROM load_labels))::text);",
}
# an inner query failing mid-stream, in every session: 22012 and nothing else
FAILING = ("SELECT 'failing', count(*) FROM gpurec.cheapest_offers('SELECT product_id, store_id, "
           "price::float8 / (product_id - 777) AS price FROM load_offers', 2);")

SETUP = """
CREATE TABLE load_offers AS
  SELECT (g * 7919) % 3001 AS product_id, (g * 31) % 211 AS store_id,
         round(((g * 104729) % 10000) / 100.0, 2) AS price
  FROM generate_series(1::bigint, 60000) g;
CREATE TABLE load_carts AS
  SELECT g / 4 AS cart_id, (g * 17) % 3100 AS product_id, g % 211 AS store_id,
         1 + g % 3 AS quantity
  FROM generate_series(1::bigint, 4000) g;
CREATE TABLE load_points AS
  SELECT g % 150 AS user_id, ((g * 37) % 360) - 180.0 AS x, ((g * 53) % 180) - 90.0 AS y
  FROM generate_series(1, 1500) g;
CREATE TABLE load_candidates AS
  SELECT g AS candidate_id, ((g * 11) % 360) - 180.0 AS x, ((g * 7) % 180) - 90.0 AS y
  FROM generate_series(1, 200) g;
CREATE TABLE load_holdout AS
  SELECT g % 150 AS user_id, (g * 13) % 200 AS candidate_id FROM generate_series(1, 300) g;
CREATE TABLE load_scores AS
  SELECT g % 50 AS individual_id, (g * 7) % 3 = 0 AS label, (((g * 7919) % 1009) / 7.0)::float8 AS score
  FROM generate_series(1::bigint, 100000) g;
CREATE TABLE load_labels AS
  SELECT array_agg(g % 3 = 0 ORDER BY g) AS labels FROM generate_series(1, 2000) g;
CREATE TABLE load_population AS
  SELECT i AS individual_id,
         (SELECT array_agg(((g * i * 7919) % 1009)::real ORDER BY g)
          FROM generate_series(1, 2000) g) AS scores
  FROM generate_series(1, 40) i;
ANALYZE;
"""


def body():
    run_in_database("load", run_checks, "load: no backend crashed (sentinel session alive)")


def gpu_free(db):
    rows = db.sql("SELECT coalesce(sum(free_memory_bytes), 0) FROM gpurec.devices()")
    return int(rows[0][0])


def run_checks(db):
    seed = int(os.environ.get("GPUREC_SEED", random.SystemRandom().randrange(1 << 30)))
    print(f"# seed {seed}", flush=True)
    rng = random.Random(seed)
    db.sql(SETUP)
    gpus = int(db.sql("SELECT count(*) FROM gpurec.devices()")[0][0])
    devices = ["auto", "cpu"] + (["gpu"] if gpus else [])
    print(f"# {gpus} GPU(s); devices tried: {', '.join(devices)}"
          + ("" if gpus else " (no GPU: gpurec.device = gpu skipped)"), flush=True)
    log = os.path.join(os.environ.get("PGHOST", ""), "server.log")
    log_start = os.path.getsize(log) if os.path.isfile(log) else None

    ref = db.session("gpurec_load_reference")
    ref.run("SET gpurec.device = 'cpu';")
    reference = {}
    for name, q in CALLS.items():
        r = ref.run(q)
        if r.errors() or len(r.rows) != 1:
            check("load: reference answers", False, f"{name}: {r.describe()}")
            return
        reference[name] = r.rows[0][1]
    ref.close()
    idle_free = gpu_free(db) if gpus else 0

    sessions = []
    for i in range(SESSIONS):
        s = db.session(f"gpurec_load_{i}")
        device = devices[i % len(devices)]
        fail_alloc = (i // len(devices)) % 4 == 3  # under every device
        s.run(f"SET gpurec.device = '{device}';"
              + (" SET gpurec.test_fail_gpu_alloc = on;" if fail_alloc else ""))
        sessions.append({"s": s, "device": device, "fail": fail_alloc, "calls": 0,
                         "bad": [], "errors": {}})
    names = list(CALLS)
    started = time.monotonic()
    deadline = started + SECONDS
    try:
        for st in sessions:  # the first batch, sent to all before any is read
            st["first"] = True
            st["s"].send("\n".join(CALLS[n] for n in rng.sample(names, 3)) + "\n" + FAILING)
        active = list(sessions)
        while active:
            # sessions were sent work in turn; wait on each in turn
            for st in list(active):
                r = st["s"].wait(timeout=600)
                for row in r.rows:
                    if len(row) == 2 and row[0] in reference:
                        st["calls"] += 1
                        if row[1] != reference[row[0]]:
                            st["bad"].append(f"{row[0]}: {row[1]} != {reference[row[0]]}")
                for s_ in r.sqlstates():
                    st["errors"][s_] = st["errors"].get(s_, 0) + 1
                want_err = ["22012"] if st["first"] else []
                if st["device"] == "gpu" and st["fail"]:
                    want_err = None  # every call is 53200
                got_err = r.sqlstates()
                if want_err is not None and got_err != want_err:
                    st["bad"].append(f"errors {got_err}, expected {want_err}: {r.describe()}")
                if want_err is None and any(e != "53200" and e != "22012" for e in got_err):
                    st["bad"].append(f"errors {got_err}, expected 53200: {r.describe()}")
                st["first"] = False
                if time.monotonic() >= deadline:
                    active.remove(st)
                    continue
                st["s"].send("\n".join(CALLS[n] for n in rng.sample(names, 2)))
        elapsed = time.monotonic() - started
    finally:
        for st in sessions:
            st["s"].close()

    total = sum(st["calls"] for st in sessions)
    errors = {}
    for st in sessions:
        for k, v in st["errors"].items():
            errors[k] = errors.get(k, 0) + v
    print(f"# {SESSIONS} sessions, {elapsed:.0f} s: {total} answers compared, errors "
          f"{errors}", flush=True)
    shown = 0
    for i, st in enumerate(sessions):
        tag = f"{st['device']}{', failing GPU allocation' if st['fail'] else ''}"
        ok = not st["bad"] and (st["calls"] > 0 or (st["device"] == "gpu" and st["fail"]))
        if not ok and shown < 4:
            shown += 1
            check(f"load: session {i} ({tag})", False,
                  f"seed {seed}: {st['calls']} answers; {st['bad'][:3]}")
    by_kind = {}
    for st in sessions:
        key = f"{st['device']}{' + test_fail_gpu_alloc' if st['fail'] else ''}"
        by_kind.setdefault(key, []).append(not st["bad"])
    for key, oks in sorted(by_kind.items()):
        check(f"load: {len(oks)} sessions under device {key} answer as the reference",
              all(oks), f"seed {seed}: {oks.count(False)} of them differed or erred")
    check("load: every session answered", all(st["calls"] > 0 or (st["device"] == "gpu" and
                                                                   st["fail"]) for st in sessions),
          f"answers per session {[st['calls'] for st in sessions]}")
    if gpus:
        time.sleep(1)
        after = gpu_free(db)
        check("load: GPU memory back to its idle level", after >= idle_free - (64 << 20),
              f"free GPU memory {idle_free} before, {after} after")
    if log_start is not None:
        with open(log, errors="replace") as f:
            f.seek(log_start)
            bad = [line for line in f.read().splitlines()
                   if "terminated by signal" in line or "was terminated" in line
                   or "PANIC" in line]
        check("load: no backend terminated by a signal (server log)", not bad, f"{bad[:3]}")


if __name__ == "__main__":
    main(body)
