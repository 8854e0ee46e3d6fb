#!/usr/bin/env python3
"""Calls split over the GPU service's devices: every function whose work
splits (similar_users, user_similarity, predict_strength, fit_exponent,
roc_fitness, optimize_carts) gives, split over 1, 2, 3 and 4 devices, the
answer of the CPU without the service (gpurec.device = cpu), row for row,
on fresh random data with ties and NULLs; the call says over how many
devices it went; gpurec.gpus restricts the devices a call splits over;
and a fault in one part of a split call fails the call with the part's
error and SQLSTATE, the next call answering right.

Without a GPU (CI) the devices are stand-ins computing on the CPU
(gpurec.test_stand_in_devices), as in gpu_service.py: what this checks is
the split and the merge, which are the same code on GPUs.
"""
import os
import random
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import robust_lib  # noqa: E402
from robust_lib import check  # noqa: E402
from gpu_service import Cluster, SERVICE_LINE, devices  # noqa: E402

SEED = int(os.environ.get("GPUREC_TEST_SEED", random.randrange(1 << 30)))
LABELS = "(SELECT array_agg(g % 3 = 0) FROM generate_series(1, 48) g)"
POINTS = "'SELECT user_id, x, y FROM points'"
CANDIDATES = "'SELECT candidate_id, x, y FROM candidates'"
# each call, and how many items it splits by (the parts are at most one an item)
CALLS = {
    "similar_users": "SELECT * FROM gpurec.similar_users(" + POINTS + ", 3) ORDER BY user_id, rank",
    "similar_users_haversine": "SELECT * FROM gpurec.similar_users(" + POINTS + ", 2, metric => 'haversine') "
                               "ORDER BY user_id, rank",
    "user_similarity": "SELECT * FROM gpurec.user_similarity(" + POINTS + ", 5) ORDER BY user_id",
    "predict_strength": "SELECT * FROM gpurec.predict_strength(" + POINTS + ", 5, " + CANDIDATES +
                        ", 2.5) ORDER BY candidate_id",
    "predict_strength_max_distance": "SELECT * FROM gpurec.predict_strength(" + POINTS + ", 5, " + CANDIDATES +
                                     ", 2.0, max_distance => 6) ORDER BY candidate_id",
    "fit_exponent": "SELECT * FROM gpurec.fit_exponent(" + POINTS + ", 'SELECT user_id, candidate_id FROM holdout', "
                    + CANDIDATES + ") ORDER BY exponent",
    "roc_fitness": "SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', " + LABELS +
                   ") ORDER BY individual_id",
    "roc_fitness_long": "SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM examples') "
                        "ORDER BY individual_id",
    "roc_fitness_long_numeric": "SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, "
                                "round(score::numeric, 1) AS score FROM examples') ORDER BY individual_id",
    "optimize_carts": "SELECT * FROM gpurec.optimize_carts('SELECT cart_id, product_id, quantity, store_id FROM carts', "
                      "'SELECT product_id, store_id, price FROM offers', "
                      "'SELECT store_id, fee, free_from FROM shipping') ORDER BY 1, 2, 3",
}


def make_data(db):
    """Coordinates and scores of few values (ties), NULLs where the functions skip or keep them."""
    db.sql(f"""
        SELECT setseed({(SEED % 10000) / 10000.0});
        CREATE TABLE points AS
          SELECT CASE WHEN random() < 0.01 THEN NULL ELSE (i % 97) END AS user_id,
                 CASE WHEN random() < 0.01 THEN NULL ELSE round((random() * 30)::numeric)::float8 / 2 END AS x,
                 round((random() * 30)::numeric)::float8 / 2 AS y
          FROM generate_series(1, 1500) i;
        CREATE TABLE candidates AS
          SELECT i AS candidate_id, round((random() * 30)::numeric)::float8 / 2 AS x,
                 round((random() * 30)::numeric)::float8 / 2 AS y
          FROM generate_series(1, 61) i;
        CREATE TABLE holdout AS
          SELECT (i % 11) AS user_id, (i * 7 % 61) + 1 AS candidate_id FROM generate_series(1, 90) i;
        CREATE TABLE population AS
          SELECT i AS individual_id,
                 (SELECT array_agg(CASE WHEN random() < 0.05 THEN NULL
                                        ELSE round((random() * 12)::numeric)::float8 / 4 END)
                  FROM generate_series(1, 48) WHERE i > 0) AS scores
          FROM generate_series(1, 203) i;
        CREATE TABLE examples AS
          SELECT i % 173 AS individual_id, CASE WHEN random() < 0.02 THEN NULL ELSE random() < 0.3 END AS label,
                 CASE WHEN random() < 0.02 THEN NULL ELSE round((random() * 10)::numeric)::float8 / 2 END AS score
          FROM generate_series(1, 9000) i;
        CREATE TABLE offers AS
          SELECT i % 150 AS product_id, CASE WHEN random() < 0.01 THEN NULL ELSE (random() * 9)::int END AS store_id,
                 CASE WHEN random() < 0.01 THEN NULL ELSE round((random() * 20)::numeric) * 0.5 END AS price
          FROM generate_series(1, 6000) i;
        CREATE TABLE carts AS
          SELECT i / 5 AS cart_id, (random() * 160)::int AS product_id,
                 CASE WHEN random() < 0.2 THEN NULL ELSE (random() * 9)::int END AS store_id,
                 CASE WHEN random() < 0.1 THEN NULL ELSE 1 + (random() * 2)::int END AS quantity
          FROM generate_series(1, 700) i;
        CREATE TABLE shipping AS
          SELECT s AS store_id, round((random() * 8)::numeric, 2) AS fee,
                 CASE WHEN s % 3 = 0 THEN NULL ELSE round((random() * 30)::numeric, 1) END AS free_from
          FROM generate_series(0, 8) s;""")


def devices_of(result):
    """Over how many devices the service ran the call (its gpurec.timing line), 0: not through it."""
    lines = [m for m in map(SERVICE_LINE.search, result.details()) if m]
    return int(lines[0].group(2) or 1) if lines else 0


def answers(db, label, expected, wanted_devices):
    """Each call on the service's devices against the CPU's answer without the service (`expected`)."""
    s = db.session()
    s.run("SET gpurec.timing = on;")
    for name, call in CALLS.items():
        if name not in expected:
            s.run("SET gpurec.device = 'cpu';")
            cpu = s.run(call + ";")
            check(f"split-cpu-answer-{name}", not cpu.errors() and cpu.rows, cpu.describe()[:400])
            expected[name] = cpu.rows
        s.run("SET gpurec.device = 'gpu';")
        gpu = s.run(call + ";")
        check(f"split-{label}-identical-{name}", not gpu.errors() and gpu.rows == expected[name],
              f"{gpu.describe()[:400]}; {len(gpu.rows)} rows against {len(expected[name])}")
        check(f"split-{label}-{name}-on-{wanted_devices}-devices", devices_of(gpu) == wanted_devices,
              gpu.describe()[:600])
    s.close()


# a fault whose first interrupt point is the service's part's (the other functions' backends reach one of
# their own first); the failure of a part and the merge are the same code for every function
FAULTS = {"roc_fitness": "compute", "roc_fitness_long": "compute"}


def fault_in_one_part(db, n_devices):
    """A test fault strikes the last part of a split call only: the call fails with its error, the next works."""
    s = db.session()
    s.run("SET gpurec.device = 'gpu';")
    for name, phase in FAULTS.items():
        s.run(f"SET gpurec.test_fault = '{phase}:1:error';")
        res = s.run(CALLS[name] + ";")
        check(f"split-fault-{name}-fails", res.sqlstates() == ["57000"] and
              any(f"error injected in the {phase} phase" in t for _, t, _ in res.errors()) and
              any(f"part {n_devices} of {n_devices}" in d for d in res.details()), res.describe()[:600])
    s.run("RESET gpurec.test_fault;")
    s.close()


def body():
    print(f"# seed {SEED}")
    expected = {}
    for n in (1, 2, 3, 4):
        cluster = Cluster({"gpurec.test_stand_in_devices": n})
        try:
            db = robust_lib.Database(f"split_{n}")
            try:
                make_data(db)
                answers(db, f"{n}-devices", expected, n)
                if n > 1:
                    fault_in_one_part(db, n)
                    answers(db, f"{n}-devices-after-fault", expected, n)
            finally:
                db.drop()
        finally:
            cluster.stop()

    cluster = Cluster({"gpurec.test_stand_in_devices": 4, "gpurec.gpus": "1,3"})
    try:
        db = robust_lib.Database("split_gpus")
        try:
            make_data(db)
            s = db.session()
            rows = devices(s)
            check("split-gpus-honoured", [r[0] for r in rows] == [1, 3], f"{rows}")
            s.close()
            answers(db, "gpus-1-3", expected, 2)
        finally:
            db.drop()
    finally:
        cluster.stop()


if __name__ == "__main__":
    robust_lib.main(body)
