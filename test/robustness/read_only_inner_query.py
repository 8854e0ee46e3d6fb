#!/usr/bin/env python3
"""Inner queries that would modify or lock data are refused.

DELETE/UPDATE/INSERT ... RETURNING, a data-modifying WITH, SELECT ... FOR
UPDATE/SHARE (at the top or nested), SELECT INTO, EXPLAIN ANALYZE of a
DELETE, TRUNCATE and two statements are refused (0A000, or 42601 for two
statements), as either query of improve_carts too, and the tables are
unchanged afterwards: same rows, no new table, no row lock left.  Read-only
shapes (WITH, VALUES, TABLE, UNION) still work.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import (check, expect_error, main, quote, run_in_database,  # noqa: E402
                        cheapest_digest as cheapest)

COLS = "product_id, store_id, price"
CARTS = "SELECT cart_id, product_id, store_id FROM carts"

REFUSED = [
    ("delete-returning", f"DELETE FROM offers RETURNING {COLS}", "0A000"),
    ("update-returning", f"UPDATE offers SET price = 0 RETURNING {COLS}", "0A000"),
    ("insert-returning", f"INSERT INTO offers SELECT * FROM offers RETURNING {COLS}", "0A000"),
    ("with-delete", f"WITH d AS (DELETE FROM offers RETURNING *) SELECT {COLS} FROM d", "0A000"),
    ("with-update-unused", f"WITH u AS (UPDATE offers SET price = price + 1 RETURNING 1) "
                           f"SELECT {COLS} FROM offers", "0A000"),
    ("with-insert", f"WITH i AS (INSERT INTO offers VALUES (1, 1, 1) RETURNING *) "
                    f"SELECT {COLS} FROM i", "0A000"),
    ("select-for-update", f"SELECT {COLS} FROM offers FOR UPDATE", "0A000"),
    ("select-for-share", f"SELECT {COLS} FROM offers FOR SHARE", "0A000"),
    ("select-for-no-key-update", f"SELECT {COLS} FROM offers FOR NO KEY UPDATE", "0A000"),
    ("select-for-key-share", f"SELECT {COLS} FROM offers FOR KEY SHARE", "0A000"),
    ("nested-for-update", f"SELECT {COLS} FROM offers WHERE product_id IN "
                          f"(SELECT product_id FROM offers FOR UPDATE)", "0A000"),
    ("cte-for-update", f"WITH x AS (SELECT * FROM offers FOR UPDATE) SELECT {COLS} FROM x",
     "0A000"),
    ("subquery-for-update", f"SELECT {COLS} FROM (SELECT * FROM offers FOR UPDATE) s", "0A000"),
    ("view-for-share", f"SELECT {COLS} FROM locked_offers", "0A000"),
    ("select-into", f"SELECT {COLS} INTO rob_copy FROM offers", "0A000"),
    ("explain-analyze-delete", "EXPLAIN ANALYZE DELETE FROM offers", "0A000"),
    ("truncate", "TRUNCATE offers", "0A000"),
    ("two-statements", f"SELECT {COLS} FROM offers; DELETE FROM offers", "42601"),
]

ALLOWED = [
    ("with", f"WITH o AS (SELECT * FROM offers) SELECT {COLS} FROM o"),
    ("table", "TABLE offers"),
    ("union", f"SELECT {COLS} FROM offers WHERE product_id < 100 UNION ALL "
              f"SELECT {COLS} FROM offers WHERE product_id >= 100"),
    ("trailing-semicolon", f"SELECT {COLS} FROM offers;"),
]


def improve(carts, offers):
    return (f"SELECT 'improve', count(*) FROM "
            f"gpurec.improve_carts('{quote(carts)}', '{quote(offers)}');")


FINGERPRINT = ("SELECT 'fingerprint', count(*), md5(string_agg(o::text, ',' ORDER BY o::text)), "
               "(SELECT count(*) FROM carts), to_regclass('rob_copy') IS NULL FROM offers o;")


def body():
    run_in_database("readonly", run_checks, "readonly-no-backend-crashed")


def run_checks(db):
    db.sql("""
        CREATE TABLE offers AS
          SELECT g % 200 AS product_id, g % 31 AS store_id,
                 round(((g * 7919) % 10000) / 100.0, 2) AS price
          FROM generate_series(1, 5000) g;
        CREATE TABLE carts AS
          SELECT g / 2 AS cart_id, g % 210 AS product_id, g % 31 AS store_id
          FROM generate_series(1, 100) g;
        CREATE VIEW locked_offers AS SELECT * FROM offers FOR SHARE;""")
    s = db.session()
    before = s.run(FINGERPRINT).rows
    ref = s.run(cheapest(f"SELECT {COLS} FROM offers")).rows

    for name, query, sqlstate in REFUSED:
        r = s.run(cheapest(query))
        if expect_error(f"readonly-cheapest-offers-{name}-{sqlstate}", r, sqlstate) and sqlstate == "0A000":
            # gpurec's own refusal, also of a lock inside the query (SPI's own names non-volatile functions)
            check(f"readonly-cheapest-offers-{name}-message", r.errors()[0][1] ==
                  "the offers query must be a read-only SELECT", r.describe())
        r = s.run(improve(CARTS, query))
        expect_error(f"readonly-improve-carts-offers-{name}-{sqlstate}", r, sqlstate)
    for name in ("delete-returning", "with-delete", "select-for-update"):
        query = dict((n, q) for n, q, _ in REFUSED)[name]
        carts_query = query.replace(COLS, "cart_id, product_id, store_id") \
                           .replace("offers", "carts")
        r = s.run(improve(carts_query, f"SELECT {COLS} FROM offers"))
        expect_error(f"readonly-improve-carts-carts-{name}-0A000", r, "0A000")

    after = s.run(FINGERPRINT).rows
    check("readonly-tables-unchanged", after == before and before[0][4] == "t",
          f"before {before}, after {after}")

    # inside a transaction: refused under a savepoint, unchanged in the same
    # transaction, and no row lock taken (another session can lock every row)
    r = s.run(f"""
        BEGIN;
        SAVEPOINT a;
        {cheapest(f"SELECT {COLS} FROM offers FOR UPDATE")}
        ROLLBACK TO SAVEPOINT a;
        {cheapest(f"SELECT {COLS} FROM offers")}
        {FINGERPRINT}""")
    check("readonly-in-transaction", r.sqlstates() == ["0A000"] and r.rows == ref + before,
          r.describe())
    other = db.session()
    r2 = other.run("SET lock_timeout = '2s'; SELECT 'locked', count(*) FROM "
                   "(SELECT 1 FROM offers FOR UPDATE) l;")
    check("readonly-no-row-lock-left", not r2.errors() and r2.rows == [["locked", "5000"]],
          r2.describe())
    other.close()
    s.run("COMMIT;")

    for name, query in ALLOWED:
        r = s.run(cheapest(query))
        check(f"readonly-allowed-{name}", not r.errors() and r.rows == ref, r.describe())

    # an inner query that calls gpurec's own aggregate itself, with specs of its own, while the call's parallel
    # read runs: no row of it reaches the call (the read takes rows only from the aggregate whose specs carry its
    # token), and the call fails instead
    forged = ("E'0 0 0 -1 0 0 0 - 0 1 0 0 0 0 0\\nx\\nproduct_id\\t0\\t0\\t1\\t0\\t2\\t1\\n"
              "store_id\\t0\\t0\\t1\\t0\\t2\\t1\\nprice\\t2\\t0\\t1\\t0\\t6\\t0'")
    inner = (f"SELECT {COLS} FROM offers WHERE (SELECT gpurec_internal._read_columns({forged}, 999999, 1, "
             "0.01::numeric)) IS NOT NULL")
    r = s.run("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;"
              f"SELECT 'injected', count(*) FROM gpurec.cheapest_offers('{quote(inner)}', 1) "
              "WHERE product_id = 999999;"
              "RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size;")
    check("readonly-forged-read-columns-adds-no-row", r.errors() and ["injected", "1"] not in r.rows,
          r.describe())

    # not a check: a SELECT may still call a volatile function that writes
    s.run("CREATE TABLE rob_victim AS SELECT 1 AS x;"
          "CREATE FUNCTION rob_writer() RETURNS int LANGUAGE plpgsql AS "
          "$$ BEGIN DELETE FROM rob_victim; RETURN 1; END $$;")
    r = s.run(cheapest(f"SELECT {COLS}, rob_writer() FROM offers") +
              "SELECT 'victim', count(*) FROM rob_victim;")
    if ["victim", "0"] in r.rows:
        print("# note: a volatile function called by the inner query can still modify data "
              "(PostgreSQL's read-only SPI mode checks only the statement itself)", flush=True)
    s.close()


if __name__ == "__main__":
    main(body)
