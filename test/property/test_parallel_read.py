#!/usr/bin/env python3
"""Parallel reading: every function, every input column type, read by
parallel workers (plans forced with parallel_setup_cost = 0 and the like),
gives the rows of the serial read (gpurec.parallel_workers = 0) bit for bit,
and the plain-SQL answer where one is written here.  Each parallel call
must say, in its gpurec.timing NOTICE, that workers read: a test that
silently ran serially would prove nothing.

Plain scans of one table go to workers of gpurec's own, anything else
through the query's parallel plan: both ways are checked, with the
caller's privileges and row-level security.

Also: the serial fallbacks (LIMIT, max_parallel_workers = 0,
gpurec.parallel_workers), a lower gpurec.parallel_workers, errors raised
in workers (their SQLSTATE as the serial read raises it), and the
dynamic shared memory segments all released afterwards.

Fresh random data each run (GPUREC_SEED replays it).
"""
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pgtest import PSQL, check, drop_database, first_difference, fresh_database, seeded_random, sql  # noqa: E402

rng = seeded_random()
DB = f"gpurec_parallel_{os.getpid()}"

FORCE = {
    "parallel_setup_cost": "0",
    "parallel_tuple_cost": "0",
    "min_parallel_table_scan_size": "0",
}


def run(query, settings):
    """(rows, notices, error) of query under settings: rows as CSV lines."""
    prefix = "".join(f"SET {k} = '{v}';\n" for k, v in settings.items())
    proc = subprocess.run([PSQL, "-X", "-q", "--csv", "-P", "null=\\N", "-v", "ON_ERROR_STOP=1",
                           "-v", "VERBOSITY=verbose"],
                          input=prefix + "\\set VERBOSITY verbose\n" + query, capture_output=True, text=True)
    error = None
    for line in proc.stderr.splitlines():
        m = re.match(r"^ERROR:\s+([0-9A-Z]{5}):", line)
        if m:
            error = m.group(1)
            break
    return proc.stdout.splitlines()[1:], proc.stderr, error


def parallel_settings(device):
    s = dict(FORCE)
    s["max_parallel_workers_per_gather"] = str(rng.randint(2, 4))
    s["parallel_leader_participation"] = rng.choice(["on", "off"])
    s["gpurec.timing"] = "on"
    s["gpurec.device"] = device
    return s


def workers_read(notices):
    """The number of workers the timing NOTICE says read rows, over all inner queries."""
    return sum(int(n) for n in re.findall(r"(\d+) of \d+ planned parallel workers", notices))


def compare(name, query, device, want_workers=True):
    serial_rows, _, serial_error = run(query, {"gpurec.parallel_workers": "0", "gpurec.device": device})
    settings = parallel_settings(device)
    rows, notices, error = run(query, settings)
    same = rows == serial_rows and error == serial_error
    check(f"parallel-read {name} ({device}) equals the serial read", same,
          f"{first_difference(rows, serial_rows)}; errors {error} vs {serial_error}; settings {settings}")
    # without the leader's help, the rows can only come from workers (with it, a small
    # table may be read whole before a worker starts)
    if want_workers and settings["parallel_leader_participation"] == "off":
        check(f"parallel-read {name} ({device}) was read by workers", workers_read(notices) > 0 or error,
              f"NOTICE: {notices.strip()[:600]}")
    return rows


# ---------------------------------------------------------------- data --

def make_data():
    seed = rng.random() * 2 - 1
    n_offers = rng.randint(20000, 40000)
    sql(f"""
        CREATE DOMAIN price_domain AS numeric(10,2);
        CREATE DOMAIN id_domain AS integer;
        SELECT setseed({seed});
        CREATE TABLE offers AS
          SELECT CASE WHEN random() < 0.02 THEN NULL ELSE (random() * 700)::int END AS product_id,
                 CASE WHEN random() < 0.02 THEN NULL ELSE (random() * 40)::int END AS store_id,
                 CASE WHEN random() < 0.02 THEN NULL
                      WHEN random() < 0.003 THEN 'NaN'::numeric
                      WHEN random() < 0.003 THEN 'Infinity'::numeric
                      ELSE round((random() * 60)::numeric, (random() * 3)::int) END AS price_numeric,
                 ((random() * 200)::int / 4.0)::real AS price_real,
                 ((random() * 200)::int / 8.0)::float8 AS price_double,
                 (random() * 50)::int AS price_int,
                 round((random() * 90)::numeric, 2)::price_domain AS price_domain
          FROM generate_series(1, {n_offers});
        -- exact duplicates, and a row of int64 limits
        INSERT INTO offers SELECT * FROM offers WHERE random() < 0.05;
        INSERT INTO offers VALUES (9223372036854775807 % 2147483647, 7, 1, 1, 1, 1, 1);
        CREATE TABLE offers_int8 AS
          SELECT product_id::bigint * 4294967296 AS product_id, store_id::bigint - 9223372036854775807 AS store_id,
                 price_numeric AS price FROM offers;
        CREATE TABLE offers_int2 AS
          SELECT (product_id % 30000)::smallint AS product_id, store_id::smallint AS store_id,
                 price_int::smallint AS price FROM offers;
        CREATE TABLE products AS SELECT DISTINCT product_id, product_id % 3 AS category FROM offers;
        CREATE TABLE carts AS
          SELECT (random() * 3000)::int AS cart_id, (random() * 750)::int AS product_id,
                 (random() * 42)::int AS store_id,
                 CASE WHEN random() < 0.05 THEN NULL ELSE 1 + (random() * 4)::int END AS quantity
          FROM generate_series(1, {n_offers // 2});
        CREATE TABLE examples AS
          SELECT (random() * 300)::int - 1 AS individual_id, random() < 0.4 AS label,
                 (random() < 0.5)::int AS label_int,
                 ((random() * 40)::int / 8.0)::real AS score_real,
                 ((random() * 40)::int / 16.0)::float8 AS score_double,
                 round((random() * 5)::numeric, (random() * 2)::int) AS score_numeric
          FROM generate_series(1, {n_offers});
        CREATE TABLE population AS
          SELECT i AS individual_id,
                 ARRAY(SELECT ((random() * 30)::int / 4.0)::real FROM generate_series(1, 64) WHERE i > 0) AS scores_real,
                 ARRAY(SELECT ((random() * 30)::int / 8.0)::float8 FROM generate_series(1, 64) WHERE i > 0) AS scores_double
          FROM generate_series(1, 4000) i;
        CREATE TABLE points AS
          SELECT CASE u WHEN 700 THEN -1 ELSE u END AS user_id,
                 (random() * 40)::int / 2.0 AS x_double, (random() * 40)::int / 2.0 AS y_double,
                 (random() * 40)::int AS x_int, (random() * 40)::int AS y_int,
                 -20 + (random() * 40)::int / 4.0 AS lon, -20 + (random() * 40)::int / 4.0 AS lat
          FROM generate_series(1, 700) u, generate_series(1, 1 + (random() * 8)::int) p;
        UPDATE points SET x_double = NULL WHERE random() < 0.01;
        CREATE TABLE candidates AS
          SELECT c AS candidate_id, (random() * 40)::int / 2.0 AS x, (random() * 40)::int / 2.0 AS y,
                 -20 + (random() * 40)::int / 4.0 AS lon, -20 + (random() * 40)::int / 4.0 AS lat
          FROM generate_series(1, 60) c;
        CREATE TABLE holdout AS
          SELECT u AS user_id, (random() * 59)::int + 1 AS candidate_id
          FROM generate_series(1, 700) u WHERE random() < 0.05;
        ANALYZE;
    """)


# --------------------------------------------------------------- checks --

def cheapest_oracle(table, price, k):
    return [",".join(r) for r in sql(f"""
        SELECT product_id, offer_rank, store_id, price, n_offers FROM (
          SELECT product_id, store_id, {price}::numeric AS price,
                 row_number() OVER (PARTITION BY product_id
                                    ORDER BY {price}, store_id, scale({price}::numeric)) AS offer_rank,
                 count(*) OVER (PARTITION BY product_id) AS n_offers
          FROM {table}
          WHERE product_id IS NOT NULL AND store_id IS NOT NULL AND {price} IS NOT NULL) s
        WHERE offer_rank <= {k} ORDER BY product_id, offer_rank""")]


def check_marketplace(device):
    for price in ["price_numeric", "price_real", "price_double", "price_int", "price_domain"]:
        k = rng.choice([1, 3])
        q = f"SELECT product_id, store_id, {price} AS price FROM offers"
        rows = compare(f"cheapest_offers {price} k={k}",
                       f"SELECT * FROM gpurec.cheapest_offers($q${q}$q$, {k})", device)
        if price in ("price_numeric", "price_int", "price_domain"):
            want = cheapest_oracle("offers", price, k)
            check(f"parallel-read cheapest_offers {price} ({device}) equals plain SQL", rows == want,
                  first_difference(rows, want))
    for table in ["offers_int8", "offers_int2"]:
        compare(f"cheapest_offers {table}",
                f"SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM {table}', 2)",
                device)
    compare("cheapest_offers over a join",
            "SELECT * FROM gpurec.cheapest_offers($q$SELECT o.product_id::id_domain AS product_id, store_id, "
            "price_domain AS price FROM offers o JOIN products p USING (product_id) WHERE p.category <> 1$q$)",
            device)
    compare("cheapest_offers over UNION ALL",
            "SELECT * FROM gpurec.cheapest_offers($q$SELECT product_id, store_id, price_int AS price FROM offers "
            "UNION ALL SELECT product_id, store_id + 100, price_int + 1 FROM offers$q$, 2)", device)
    compare("improve_carts",
            "SELECT * FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id, quantity FROM carts', "
            "'SELECT product_id, store_id, price_numeric AS price FROM offers')", device)
    # the workers drop the offers of products no cart holds (half of them
    # here) before their prices: those prices cannot be held (1e30 at scale
    # 2), so a process that read one would fail.  Lines with and without a
    # current store take the two ways to the candidates.
    rows = compare("optimize_carts",
            "SELECT * FROM gpurec.optimize_carts($q$SELECT cart_id, product_id, quantity, "
            "CASE WHEN cart_id % 3 = 0 THEN store_id END AS store_id FROM carts "
            "WHERE cart_id % 4 = 0 AND product_id < 350$q$, "
            "$q$SELECT product_id, store_id, CASE WHEN product_id >= 350 THEN 1e30 ELSE price_domain END AS price "
            "FROM offers$q$, "
            "$q$SELECT s AS store_id, (s % 5)::numeric AS fee, CASE WHEN s % 3 = 0 THEN 20 END AS free_from "
            "FROM generate_series(0, 40) s$q$)", device)
    check(f"parallel-read optimize_carts ({device}) answers (no process read the prices it cannot hold)",
          len(rows) > 0, f"{len(rows)} rows")


def check_roc(device):
    for label in ["label", "label_int"]:
        for score in ["score_real", "score_double", "score_numeric"]:
            compare(f"roc_fitness long {label} {score}",
                    f"SELECT * FROM gpurec.roc_fitness('SELECT individual_id, {label} AS label, {score} AS score "
                    f"FROM examples')", device)
    labels = "ARRAY(SELECT g % 3 = 0 FROM generate_series(1, 64) g)"
    for scores in ["scores_real", "scores_double"]:
        compare(f"roc_fitness arrays {scores}",
                f"SELECT * FROM gpurec.roc_fitness('SELECT individual_id, {scores} AS scores FROM population', "
                f"{labels})", device)


def check_direct_scan(device):
    """A query over one table (its columns or expressions of them, filtered
    or not) is scanned directly by workers of gpurec's own; anything else
    runs the query's parallel plan.  Either way: the serial read's rows, the caller's
    privileges, row-level security, and the serial read's errors."""
    role = f"gpurec_reader_{os.getpid()}"
    settings = dict(parallel_settings(device), parallel_leader_participation="off")
    ways = [
        ("the table's columns", "SELECT product_id, store_id, price_int AS price FROM offers", "direct"),
        ("a view of one table's columns", "SELECT product_id, store_id, price FROM offers_view", "direct"),
        ("a column twice", "SELECT product_id, product_id AS store_id, price_int AS price FROM offers", "direct"),
        ("a filter", "SELECT product_id, store_id, price_int AS price FROM offers WHERE store_id <> 3", "direct"),
        ("a filter with NULLs, functions and OR",
         "SELECT product_id, store_id, price_numeric AS price FROM offers "
         "WHERE price_numeric IS NULL OR abs(price_numeric - 30) > 5 AND length(store_id::text) = 1", "direct"),
        ("a computed column", "SELECT product_id, store_id, price_int + 1 AS price FROM offers", "direct"),
        ("casts, CASE and a column unused",
         "SELECT product_id::bigint AS product_id, coalesce(store_id, -1) AS store_id, "
         "CASE WHEN price_numeric > 50 THEN round(price_numeric / 3, 3) ELSE price_numeric END AS price, "
         "price_real * 2 AS unused FROM offers WHERE product_id % 5 <> 0", "direct"),
        ("a join", "SELECT o.product_id, o.store_id, o.price_int AS price FROM offers o "
         "JOIN products p USING (product_id) WHERE p.category = 1", "plan"),
        ("a filter with a subquery", "SELECT product_id, store_id, price_int AS price FROM offers "
         "WHERE product_id IN (SELECT product_id FROM products WHERE category = 2)", "plan"),
    ]
    sql("CREATE OR REPLACE VIEW offers_view AS SELECT store_id, product_id, price_numeric AS price FROM offers")
    for name, inner, way in ways:
        query = f"SELECT * FROM gpurec.cheapest_offers($q${inner}$q$, 2)"
        serial, _, serial_error = run(query, {"gpurec.parallel_workers": "0", "gpurec.device": device})
        rows, notices, error = run(query, settings)
        said = "by a direct scan of the table" if way == "direct" else "through the query's parallel plan"
        check(f"parallel-read {name} ({device}): read {said}, the serial read's rows",
              error is None and serial_error is None and rows == serial and said in notices,
              f"{first_difference(rows, serial)}; errors {error} vs {serial_error}; NOTICE: {notices.strip()[:400]}")

    # privileges and row-level security, as an ordinary role
    sql(f"""
        DROP ROLE IF EXISTS {role};
        CREATE ROLE {role};
        GRANT USAGE ON SCHEMA gpurec TO {role};
        GRANT SELECT (product_id, store_id, price_int) ON offers TO {role};
        GRANT SELECT ON offers_view TO {role};
        CREATE TABLE rls_offers AS SELECT product_id, store_id, price_int AS price FROM offers;
        ALTER TABLE rls_offers ENABLE ROW LEVEL SECURITY;
        CREATE POLICY even_products ON rls_offers FOR SELECT TO {role} USING (product_id % 2 = 0);
        GRANT SELECT ON rls_offers TO {role};
        ANALYZE rls_offers;
    """)
    try:
        as_role = dict(settings, role=role)
        cases = [
            ("granted columns", "SELECT product_id, store_id, price_int AS price FROM offers", None),
            ("a column not granted", "SELECT product_id, store_id, price_numeric AS price FROM offers", "42501"),
            ("a view granted over a table that is not", "SELECT product_id, store_id, price FROM offers_view", None),
        ]
        for name, inner, want in cases:
            query = f"SELECT * FROM gpurec.cheapest_offers($q${inner}$q$, 2)"
            serial, _, serial_error = run(query, {"role": role, "gpurec.parallel_workers": "0",
                                                  "gpurec.device": device})
            rows, notices, error = run(query, as_role)
            check(f"parallel-read as an ordinary role, {name} ({device}): the serial read's answer",
                  error == serial_error == want and rows == serial,
                  f"errors {error} vs {serial_error}, want {want}; {first_difference(rows, serial)}")
        query = "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM rls_offers', 3)"
        rows, notices, error = run(query, as_role)
        want = cheapest_oracle("(SELECT * FROM rls_offers WHERE product_id % 2 = 0) AS r", "price", 3)
        check(f"parallel-read under row-level security ({device}): only the policy's rows, by the direct scan",
              error is None and rows == want and "by a direct scan of the table" in notices,
              f"error {error}; {first_difference(rows, want)}; NOTICE: {notices.strip()[:400]}")
    finally:
        sql(f"DROP TABLE rls_offers; REVOKE ALL ON offers, offers_view FROM {role}; "
            f"REVOKE ALL ON SCHEMA gpurec FROM {role}; DROP ROLE {role};")

    # a value the serial read refuses, in a plain column, refused alike by the workers that scan it
    sql("""
        CREATE TABLE bad_labels AS
          SELECT individual_id, CASE WHEN individual_id = 5 THEN 2 ELSE label_int END AS label, score_real AS score
          FROM examples;
        CREATE TABLE huge_prices AS
          SELECT product_id, store_id,
                 CASE WHEN price_int = 7 THEN 92233720368547758.0 ELSE 0.000001 END AS price FROM offers;
        ANALYZE bad_labels, huge_prices;
    """)
    for name, query in [
            ("a label that is neither 0 nor 1",
             "SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM bad_labels')"),
            ("a numeric no scale holds",
             "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM huge_prices')"),
            ("a filter dividing by zero",
             "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price_int AS price FROM offers "
             "WHERE 1 / (price_int - 49) > -100')")]:
        _, _, serial = run(query, {"gpurec.parallel_workers": "0", "gpurec.device": device})
        _, _, error = run(query, settings)
        check(f"parallel-read direct scan error: {name} ({device}): the serial read's SQLSTATE",
              serial is not None and error == serial, f"parallel {error}, serial {serial}")
    sql("DROP TABLE bad_labels, huge_prices")

    # a materialized view: read when populated, refused as a scan refuses it when not
    sql("CREATE MATERIALIZED VIEW offers_mv AS SELECT product_id, store_id, price_int AS price FROM offers; "
        "ANALYZE offers_mv")
    query = "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers_mv', 2)"
    serial, _, serial_error = run(query, {"gpurec.parallel_workers": "0", "gpurec.device": device})
    rows, notices, error = run(query, settings)
    check(f"parallel-read a populated materialized view ({device}): by the direct scan, the serial read's rows",
          error is None and serial_error is None and rows == serial and "by a direct scan of the table" in notices,
          f"{first_difference(rows, serial)}; errors {error} vs {serial_error}; NOTICE: {notices.strip()[:400]}")
    sql("REFRESH MATERIALIZED VIEW offers_mv WITH NO DATA")
    _, _, serial_error = run(query, {"gpurec.parallel_workers": "0", "gpurec.device": device})
    _, _, error = run(query, settings)
    check(f"parallel-read a materialized view not populated ({device}): 55000, as the serial read",
          error == serial_error == "55000", f"parallel {error}, serial {serial_error}")
    sql("DROP MATERIALIZED VIEW offers_mv")


def ranked_oracle(offers, k):
    """cheapest_offers of the offers query in plain SQL: the rank in (price,
    store, fewer decimals) order, the price's text with its decimals, as the
    function's numeric keeps them."""
    return [",".join(r) for r in sql(f"""
        SELECT product_id, offer_rank, store_id, price, n_offers FROM (
          SELECT product_id, store_id, price,
                 row_number() OVER (PARTITION BY product_id ORDER BY price, store_id, scale(price)) AS offer_rank,
                 count(*) OVER (PARTITION BY product_id) AS n_offers
          FROM ({offers}) o) s
        WHERE offer_rank <= {k} ORDER BY product_id, offer_rank""")]


def check_partials():
    """cheapest_offers ranked on the CPU (gpurec.device = cpu) over a direct
    scan: every process, the calling backend included, ranks the offers it
    read and sends only each product's k cheapest with its count, and the
    calling backend ranks those again.  The answer must be the serial
    read's and plain SQL's for any split of the rows: ties of price and
    store spelled with other decimals, exact duplicates, a product whose
    offers are in every process, processes that read no row, k larger than
    a product's offers, a filter that keeps no row."""
    sql("""
        CREATE TABLE tie_offers AS
          SELECT (random() * 60)::int AS product_id, (random() * 4)::int AS store_id,
                 CASE WHEN random() < 0.5 THEN round((random() * 3)::numeric, 1)
                      ELSE round((random() * 3)::numeric, 1)::numeric(6,3) END AS price
          FROM generate_series(1, 30000);
        INSERT INTO tie_offers SELECT * FROM tie_offers WHERE random() < 0.1;
        INSERT INTO tie_offers SELECT 1000, s % 3, 2.50 FROM generate_series(1, 5000) s;
        ALTER TABLE tie_offers SET (parallel_workers = 4);
        ANALYZE tie_offers;
    """)
    for round_ in range(4):
        k = rng.choice([1, 2, 5, 40])
        # two workers or more: with one and the leader not reading, a
        # parallel plan costs what the serial one does, and the planner keeps
        # the serial one
        settings = parallel_settings("cpu")
        for name, inner, oracle_where in [
                ("ties", "SELECT product_id, store_id, price FROM tie_offers", ""),
                ("a filter", "SELECT product_id, store_id, price FROM tie_offers WHERE store_id <> 2",
                 "WHERE store_id <> 2"),
                ("a filter that keeps no row",
                 "SELECT product_id, store_id, price FROM tie_offers WHERE product_id + store_id < 0",
                 "WHERE product_id + store_id < 0")]:
            query = f"SELECT * FROM gpurec.cheapest_offers($q${inner}$q$, {k})"
            serial, _, serial_error = run(query, {"gpurec.parallel_workers": "0", "gpurec.device": "cpu"})
            rows, notices, error = run(query, settings)
            want = ranked_oracle(f"SELECT * FROM tie_offers {oracle_where}", k)
            check(f"parallel-read partial results, {name}, k={k} (cpu): each process ranked its own rows",
                  error is None and "each process's partial result taken" in notices and workers_read(notices) > 0,
                  f"error {error}; NOTICE: {notices.strip()[:400]}")
            check(f"parallel-read partial results, {name}, k={k} (cpu): the serial read's rows and plain SQL's",
                  serial_error is None and rows == serial and rows == want,
                  f"{first_difference(rows, serial)}; {first_difference(rows, want)}; serial error {serial_error}")
            # a shard's part (gpurec_shards) made of the partial results,
            # merged with itself: every product's count doubles, and its k
            # cheapest are each offer twice
            doubled = (f"SELECT * FROM gpurec_internal._merge_cheapest_offers(ARRAY["
                       f"(SELECT gpurec_internal._cheapest_offers_part($q${inner}$q$, {k})), "
                       f"(SELECT gpurec_internal._cheapest_offers_part($q${inner}$q$, {k}))], {k})")
            rows, notices, error = run(doubled, settings)
            want = ranked_oracle(f"SELECT * FROM tie_offers {oracle_where} UNION ALL "
                                 f"SELECT * FROM tie_offers {oracle_where}", k)
            check(f"parallel-read partial results, {name}, k={k} (cpu): a shard's part of them merges as plain SQL",
                  error is None and "each process's partial result taken" in notices and rows == want,
                  f"{first_difference(rows, want)}; error {error}; NOTICE: {notices.strip()[:300]}")

    # prices no one column holds (92233720368547758.0 fits in 64 bits at
    # scale 1, not at 6), the big ones first in the table and never a
    # product's cheapest: each process ranks its rows a piece of 8,192 at a
    # time and forgets them, and processes may each read one kind only, yet
    # the call raises 22003 as the serial read does
    sql("""
        CREATE TABLE split_scale_offers AS
          SELECT g % 100 AS product_id, g AS store_id,
                 CASE WHEN g <= 30000 THEN 92233720368547758.0 - g ELSE 0.000001 * g END AS price
          FROM generate_series(1, 60000) g ORDER BY g;
        ALTER TABLE split_scale_offers SET (parallel_workers = 3);
        ANALYZE split_scale_offers;
    """)
    for inner, want in [("SELECT product_id, store_id, price FROM split_scale_offers", "22003"),
                        ("SELECT product_id, store_id, price FROM split_scale_offers WHERE store_id > 30000", None)]:
        query = f"SELECT count(*) FROM gpurec.cheapest_offers($q${inner}$q$, 2)"
        _, _, serial = run(query, {"gpurec.parallel_workers": "0", "gpurec.device": "cpu"})
        _, notices, error = run(query, dict(parallel_settings("cpu"), max_parallel_workers_per_gather="3"))
        check(f"parallel-read partial results: prices no one column holds, split ({want or 'none'}): "
              f"the serial read's outcome", serial == want and error == want,
              f"parallel {error}, serial {serial}; NOTICE: {notices.strip()[:300]}")
    sql("DROP TABLE split_scale_offers")

    # nearly every product once: partial results would be as large as the
    # rows, and the table's statistics say so, so the workers send columns
    sql("""
        CREATE TABLE unique_offers AS
          SELECT g AS product_id, g % 7 AS store_id, round((g % 1000) / 7.0, 2) AS price
          FROM generate_series(1, 40000) g;
        INSERT INTO unique_offers SELECT product_id, store_id + 1, price FROM unique_offers WHERE product_id % 50 = 0;
        ALTER TABLE unique_offers SET (parallel_workers = 3);
        ANALYZE unique_offers;
    """)
    query = "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM unique_offers', 1)"
    rows, notices, error = run(query, dict(parallel_settings("cpu"), max_parallel_workers_per_gather="3"))
    check("parallel-read partial results: not for about as many products as offers, by the table's statistics",
          error is None and "their columns joined" in notices and "by the table's statistics" in notices
          and workers_read(notices) > 0, f"error {error}; NOTICE: {notices.strip()[:400]}")
    check("parallel-read partial results: about as many products as offers, read as columns: plain SQL's rows",
          rows == ranked_oracle("SELECT * FROM unique_offers", 1), first_difference(rows, ranked_oracle(
              "SELECT * FROM unique_offers", 1)))


def check_big_rows_few():
    """A population of a thousand big arrays is a page or two of heap,
    its arrays in TOAST: with the table's parallel_workers set and the
    planner's own costs (nothing forced), its workers read it, because the
    aggregate's transition function declares each row's conversion costly."""
    sql("CREATE TABLE big_population AS SELECT g AS individual_id, "
        "(SELECT array_agg(((g * 7 + i) % 100)::real) FROM generate_series(1, 5000) i WHERE g > 0) AS scores "
        "FROM generate_series(1, 1000) g;"
        "ALTER TABLE big_population SET (parallel_workers = 2); ANALYZE big_population;")
    query = ("SELECT count(*) FROM gpurec.roc_fitness('SELECT individual_id, scores FROM big_population', "
             "ARRAY(SELECT g % 3 = 0 FROM generate_series(1, 5000) g))")
    # without the leader's help: a page or two can be read by the calling backend alone
    # before a worker has started, which would leave the workers nothing to show
    rows, notices, error = run(query, {"gpurec.timing": "on", "gpurec.device": "cpu",
                                       "max_parallel_workers_per_gather": "2",
                                       "parallel_leader_participation": "off"})
    check("parallel-read: few rows of big arrays are read by the table's workers at the planner's costs",
          error is None and rows == ["1000"] and workers_read(notices) > 0,
          f"rows {rows}, error {error}, NOTICE: {notices.strip()[:400]}")


def check_chunks_taken(devices):
    """Workers that read more than a chunk (ChunkedColumn::kChunkRows, 2^20
    rows) hand their full chunks to the calling backend as they are, which
    then sit before its own last rows: the answers must not change.  Numeric
    prices with mixed display scales, ids over a wide range, ties."""
    sql("CREATE TABLE many_offers AS SELECT (random() * 40000)::bigint * 1000003 AS product_id, "
        "(random() * 50)::bigint AS store_id, "
        "CASE WHEN random() < 0.5 THEN round((random() * 20)::numeric, 1) "
        "ELSE round((random() * 20)::numeric, 2) END AS price, "
        "random() < 0.3 AS label, (random() * 100)::int::real AS score "
        "FROM generate_series(1, 2600000);"
        "ALTER TABLE many_offers SET (parallel_workers = 2); ANALYZE many_offers;")
    queries = {
        "cheapest_offers": "SELECT * FROM gpurec.cheapest_offers("
                           "'SELECT product_id, store_id, price FROM many_offers', 3)",
        "roc_fitness": "SELECT * FROM gpurec.roc_fitness('SELECT product_id % 997 AS individual_id, score, "
                       "label FROM many_offers')",
    }
    for device in devices:
        for name, query in queries.items():
            serial, _, serial_error = run(query, {"gpurec.parallel_workers": "0", "gpurec.device": device})
            rows, notices, error = run(query, {"max_parallel_workers_per_gather": "2",
                                               "parallel_leader_participation": "off",
                                               "gpurec.timing": "on", "gpurec.device": device})
            check(f"parallel-read {name} ({device}): workers' full chunks taken as they are, same rows as serial",
                  serial_error is None and error is None and rows == serial and workers_read(notices) == 2,
                  f"{first_difference(rows, serial)}; errors {error} vs {serial_error}; NOTICE: {notices[:400]}")
            # cheapest_offers ranked on the CPU has each process rank its own
            # rows, and only those partial results travel (check_partials)
            sent = {"cpu": "each process's partial result taken", "gpu": "their columns joined",
                    "auto": "(?:each process's partial result taken|their columns joined)"}[device] \
                if name == "cheapest_offers" else "their columns joined"
            check(f"parallel-read {name} ({device}): the NOTICE says how long joining what the workers sent took",
                  re.search(r"2 of 2 planned parallel workers read rows, beside the calling backend "
                            rf"\({sent} in \d+\.\d{{3}} ms\)", notices) is not None,
                  f"NOTICE: {notices[:400]}")


def check_geo(device):
    for x, y, metric in [("x_double", "y_double", "euclidean"), ("x_int", "y_int", "euclidean"),
                         ("lon", "lat", "haversine")]:
        points = f"SELECT user_id, {x} AS x, {y} AS y FROM points"
        main = rng.randint(1, 699)
        compare(f"user_similarity {x} {metric}",
                f"SELECT * FROM gpurec.user_similarity($q${points}$q$, {main}, '{metric}')", device)
        compare(f"similar_users {x} {metric}",
                f"SELECT * FROM gpurec.similar_users($q${points}$q$, 3, '{metric}')", device)
        cx, cy = ("lon", "lat") if metric == "haversine" else ("x", "y")
        cands = f"SELECT candidate_id, {cx} AS x, {cy} AS y FROM candidates"
        compare(f"predict_strength {x} {metric}",
                f"SELECT * FROM gpurec.predict_strength($q${points}$q$, {main}, $q${cands}$q$, 2, NULL, 0, "
                f"'{metric}')", device)
        compare(f"fit_exponent {x} {metric}",
                f"SELECT * FROM gpurec.fit_exponent($q${points}$q$, 'SELECT user_id, candidate_id FROM holdout', "
                f"$q${cands}$q$, '{{1, 2}}', NULL, 0, '{metric}')", device)


def check_fallbacks():
    q = "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price_int AS price FROM offers{}')"
    want, _, _ = run(q.format(""), {"gpurec.parallel_workers": "0"})
    timing = dict(FORCE, **{"gpurec.timing": "on"})
    cases = [
        ("a LIMIT", q.format(" LIMIT 1000000"), timing, "the plan is not parallel"),
        ("max_parallel_workers = 0", q.format(""), dict(timing, max_parallel_workers="0"),
         "no planned worker read a row"),
        ("max_parallel_workers_per_gather = 0", q.format(""), dict(timing, max_parallel_workers_per_gather="0"),
         "max_parallel_workers_per_gather is 0"),
        ("gpurec.parallel_workers = 0", q.format(""), dict(timing, **{"gpurec.parallel_workers": "0"}),
         "gpurec.parallel_workers is 0"),
    ]
    for name, query, settings, why in cases:
        rows, notices, error = run(query, settings)
        if name == "a LIMIT":
            rows_sorted, want_sorted = sorted(rows), sorted(want)
            ok = rows_sorted == want_sorted
        else:
            ok = rows == want
        check(f"parallel-read fallback {name}: same rows", ok and error is None, f"error {error}")
        check(f"parallel-read fallback {name}: the NOTICE says why", why in notices, notices.strip()[:400])
    rows, notices, _ = run(q.format(""), dict(timing, max_parallel_workers_per_gather="4",
                                              parallel_leader_participation="off",
                                              **{"gpurec.parallel_workers": "2"}))
    check("parallel-read gpurec.parallel_workers = 2 lowers the planned workers from 4 to 2",
          re.search(r"[12] of 2 planned parallel workers", notices) is not None and rows == want,
          notices.strip()[:400])


def check_worker_errors():
    """Errors raised while workers read: the serial read's SQLSTATE, whoever raised it."""
    cases = [
        ("division by zero in the inner query",
         "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, 1 / (price_int - 49) AS price "
         "FROM offers')", "22012"),
        ("a numeric no scale holds (in one part only)",
         "SELECT * FROM gpurec.cheapest_offers($q$SELECT product_id, store_id, CASE WHEN price_int = 7 "
         "THEN 92233720368547758.0 ELSE 0.000001 END AS price FROM offers$q$)", "22003"),
        ("a label that is neither 0 nor 1",
         "SELECT * FROM gpurec.roc_fitness('SELECT individual_id, CASE WHEN individual_id = 5 THEN 2 ELSE "
         "label_int END AS label, score_real AS score FROM examples')", None),
        ("an error raised by a function in the query",
         "SELECT * FROM gpurec.cheapest_offers($q$SELECT product_id, store_id, CASE WHEN product_id = 9 THEN "
         "('x' || product_id)::int ELSE price_int END AS price FROM offers$q$)", "22P02"),
    ]
    for name, query, want in cases:
        _, _, serial = run(query, {"gpurec.parallel_workers": "0"})
        _, notices, parallel = run(query, dict(FORCE, max_parallel_workers_per_gather="3"))
        ok = parallel is not None and parallel == serial and (want is None or parallel == want)
        check(f"parallel-read error: {name}", ok, f"parallel {parallel}, serial {serial}, want {want}")
        after, _, error = run("SELECT count(*) FROM gpurec.cheapest_offers('SELECT 1 AS product_id, "
                              "1 AS store_id, 1 AS price')", dict(FORCE))
        check(f"parallel-read error: {name}: the next call works", error is None and after == ["1"], after)


def check_misuse():
    """The aggregate behind parallel reading, called directly: an ERROR, never a crash, even in workers
    and with column specs that lie about the columns' types."""
    _, _, error = run("SELECT gpurec_internal._read_columns('x', 1) FROM offers", {})
    check("parallel-read: _read_columns called directly is refused", error == "0A000", f"got {error}")
    lying = "0 0 0\noffers query\nprice\t2\t0\t1\t0\t6"  # a numeric conversion, given an integer
    for spec in (lying, "nonsense", None):
        literal = "NULL" if spec is None else "E'" + spec.replace("\\", "\\\\") + "'"
        _, _, error = run(f"SELECT gpurec_internal._read_columns({literal}, price_int) FROM offers",
                          dict(FORCE, max_parallel_workers_per_gather="2", parallel_leader_participation="off"))
        check(f"parallel-read: _read_columns with specs {spec!r} in workers is an ERROR", error is not None,
              "no error")
    alive, _, error = run("SELECT 1", {})
    check("parallel-read: the server survived the misuse", alive == ["1"] and error is None, f"{alive} {error}")


def shm_segments():
    try:
        return sorted(f for f in os.listdir("/dev/shm") if f.startswith("PostgreSQL."))
    except OSError:
        return None


def mapped_segments():
    """The PostgreSQL segments of /dev/shm that some process maps now: those in use, on any cluster of the machine."""
    mapped = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    at = line.find("/dev/shm/PostgreSQL.")
                    if at >= 0:
                        mapped.add(line[at + len("/dev/shm/"):].split()[0])
        except OSError:
            pass
    return mapped


def leaked_segments(before):
    """Segments made since `before` that no process maps: left behind. Another cluster's segments in use are mapped."""
    after = shm_segments()
    if before is None or after is None:
        return []
    return sorted(set(after) - set(before) - mapped_segments())


def main():
    devices = fresh_database(DB)
    try:
        before = shm_segments()
        make_data()
        for device in devices:
            check_marketplace(device)
            check_roc(device)
            check_geo(device)
            check_direct_scan(device)
        check_fallbacks()
        check_partials()
        check_big_rows_few()
        check_chunks_taken(devices)
        check_worker_errors()
        check_misuse()
        # a backend that ended a moment ago may still be detaching, and another cluster of the machine may be
        # between making a segment and mapping it: a segment left behind stays unmapped
        deadline = time.monotonic() + 5
        leaked = leaked_segments(before)
        while leaked and time.monotonic() < deadline:
            time.sleep(0.1)
            leaked = [name for name in leaked_segments(before) if name in leaked]
        check("parallel-read: every dynamic shared memory segment released", not leaked,
              f"{len(leaked)} segments made during the test that no process maps: {leaked[:5]}")
    finally:
        drop_database(DB)


if __name__ == "__main__":
    main()
