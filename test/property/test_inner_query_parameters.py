#!/usr/bin/env python3
"""Values from the statement around a call into its inner queries: an inner
query is text run as a statement of its own, so a $1 in it is 42P02 with a
hint, and the documented way is format() with %L (README "Inner queries").
Checked on fresh random data against plain SQL: PREPARE with parameters
of several types (integer, text with quotes, numeric, date, uuid, an
array, boolean), NULL parameters (= %L matches nothing, IS NOT DISTINCT
FROM %L matches NULL), a PL/pgSQL function's variables, and a value that
tries to end the inner query (it stays a literal).  Replay a run with
GPUREC_SEED.
"""
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from pgtest import check, drop_database, first_difference, fresh_database, seeded_random, sql, sql_error  # noqa: E402

rng = seeded_random()
DB = "gpurec_property_parameters"

OFFERS = ("SELECT product_id, store_id, price FROM offers WHERE {}")
# the k cheapest offers per product of the rows WHERE {} picks, in plain SQL
ORACLE = """
    SELECT product_id, offer_rank, store_id, price
    FROM (SELECT product_id, store_id, price,
                 row_number() OVER (PARTITION BY product_id ORDER BY price, store_id)::int AS offer_rank
          FROM offers WHERE {} AND product_id IS NOT NULL AND store_id IS NOT NULL AND price IS NOT NULL) o
    WHERE offer_rank <= {}
    ORDER BY product_id, offer_rank
"""
GOT = "SELECT product_id, offer_rank, store_id, price FROM ({}) g ORDER BY product_id, offer_rank"


def make_offers():
    shops = ["Bob's", "O'Brien; DROP TABLE offers; --", "plain", None, "ünïcode"]
    ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(4)]
    rows = []
    for _ in range(rng.randint(200, 600)):
        product = rng.randint(1, 40)
        rows.append("({}, {}, {}, {}, {}, {}, {}, {})".format(
            product, rng.randint(1, 30), rng.choice([rng.randint(1, 9) * 0.5, round(rng.random() * 20, 2)]),
            sql_literal(rng.choice(shops)), f"'2026-01-01'::date + {rng.randint(0, 60)}",
            sql_literal(rng.choice(ids)), rng.choice(["true", "false", "NULL"]),
            rng.choice(["NULL", str(rng.randint(1, 3))])))
    sql(f"""
        DROP TABLE IF EXISTS offers;
        CREATE TABLE offers(product_id int, store_id int, price numeric(6,2), shop text, listed date,
                            batch uuid, in_stock boolean, region int);
        INSERT INTO offers VALUES {", ".join(rows)};
        ANALYZE offers;
    """)
    return shops, ids


def sql_literal(value):
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"


def compare(name, session_sql, got_call, where, k):
    """session_sql (PREPARE and the like), then got_call, against the oracle for WHERE `where`."""
    got = sql(session_sql + GOT.format(got_call))
    want = sql(ORACLE.format(where, k))
    check(name, got == want and (len(want) > 0 or "NULL" in name or "nothing" in name),
          first_difference(got, want) if got != want else "no rows to compare")


def main():
    fresh_database(DB)
    shops, ids = make_offers()

    # $1 in the inner query's text: 42P02, with the hint of format()
    error = sql_error("PREPARE p(int) AS SELECT * FROM gpurec.cheapest_offers("
                      "'SELECT product_id, store_id, price FROM offers WHERE product_id = $1'); EXECUTE p(3);")
    check("dollar-parameter-in-inner-query-is-42P02", error is not None and error[0] == "42P02", f"got {error}")
    hint = sql("\\set VERBOSITY default\n"
               "PREPARE p(int) AS SELECT * FROM gpurec.cheapest_offers("
               "'SELECT product_id, store_id, price FROM offers WHERE product_id = $1'); EXECUTE p(3);", check=False)
    check("dollar-parameter-hint-names-format", "format('SELECT ... WHERE product_id = %L', $1)" in hint.stderr,
          hint.stderr.strip()[:500])

    k = rng.randint(1, 4)
    product = rng.randint(1, 40)
    prepared = ("PREPARE p({type}) AS SELECT * FROM gpurec.cheapest_offers("
                "format('SELECT product_id, store_id, price FROM offers WHERE {cond}', $1), {k});\n")
    cases = [
        ("integer", "int", "product_id = %L", str(product), f"product_id = {product}"),
        ("integer-array", "int[]", "product_id = ANY (%L::int[])", "ARRAY[1, 2, 3, NULL]",
         "product_id = ANY (ARRAY[1, 2, 3, NULL])"),
        ("numeric", "numeric", "price <= %L", "4.5", "price <= 4.5"),
        ("date", "date", "listed >= %L", "'2026-01-20'", "listed >= '2026-01-20'"),
        ("uuid", "uuid", "batch = %L", sql_literal(ids[0]), f"batch = {sql_literal(ids[0])}"),
        ("boolean", "boolean", "in_stock = %L", "true", "in_stock"),
    ]
    for shop in shops[:3] + [shops[4]]:
        cases.append((f"text-{shop[:6]}", "text", "shop = %L", sql_literal(shop), f"shop = {sql_literal(shop)}"))
    for name, type_, cond, value, where in cases:
        session = (prepared.format(type=type_, cond=cond, k=k) +
                   f"CREATE TEMP TABLE r AS EXECUTE p({value});\n")
        compare(f"prepare-{name}", session, "SELECT * FROM r", where, k)

    # NULL: = %L becomes = NULL and matches nothing; IS NOT DISTINCT FROM %L matches the NULLs
    session = prepared.format(type="int", cond="region = %L", k=k) + "CREATE TEMP TABLE r AS EXECUTE p(NULL);\n"
    compare("prepare-NULL-equals-nothing", session, "SELECT * FROM r", "false", k)
    session = (prepared.format(type="int", cond="region IS NOT DISTINCT FROM %L", k=k) +
               "CREATE TEMP TABLE r AS EXECUTE p(NULL);\n")
    compare("prepare-NULL-is-not-distinct-from", session, "SELECT * FROM r", "region IS NULL", k)
    region = rng.randint(1, 3)
    session = (prepared.format(type="int", cond="region IS NOT DISTINCT FROM %L", k=k) +
               f"CREATE TEMP TABLE r AS EXECUTE p({region});\n")
    compare("prepare-value-is-not-distinct-from", session, "SELECT * FROM r", f"region = {region}", k)

    # a PL/pgSQL function's variables, the same way
    sql(f"""
        CREATE OR REPLACE FUNCTION cheapest_of_shop(wanted text, upto numeric)
        RETURNS SETOF record LANGUAGE plpgsql AS $$
        BEGIN
            RETURN QUERY SELECT o.product_id::bigint, o.offer_rank, o.store_id::bigint, o.price FROM gpurec.cheapest_offers(
                format('SELECT product_id, store_id, price FROM offers WHERE shop = %L AND price <= %L',
                       wanted, upto), {k}) o;
        END $$;
    """)
    compare("plpgsql-variables", "", "SELECT * FROM cheapest_of_shop($s$Bob's$s$, 6) "
            "AS t(product_id bigint, offer_rank int, store_id bigint, price numeric)",
            "shop = 'Bob''s' AND price <= 6", k)

    # the value that tries to end the inner query stays a value, and the table stays
    count = sql("SELECT count(*) FROM offers")[0][0]
    session = (prepared.format(type="text", cond="shop = %L", k=k) +
               f"CREATE TEMP TABLE r AS EXECUTE p({sql_literal(shops[1])});\n")
    compare("prepare-quoted-value-stays-a-literal", session, "SELECT * FROM r", f"shop = {sql_literal(shops[1])}", k)
    check("prepare-quoted-value-drops-nothing", sql("SELECT count(*) FROM offers")[0][0] == count, "offers changed")

    drop_database(DB)


if __name__ == "__main__":
    main()
