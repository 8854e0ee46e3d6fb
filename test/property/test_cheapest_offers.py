#!/usr/bin/env python3
"""cheapest_offers and improve_carts against plain SQL, on fresh random data.

Each run draws new offers with ties, duplicate rows, NULLs in every column,
NaN and negative prices, for every price type, and compares gpurec with the
row_number() formulation of the same question, inside the database (EXCEPT
ALL both ways, so the comparison is exact).  Replay a run with GPUREC_SEED.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pgtest import check, drop_database, fresh_database, seeded_random, sql  # noqa: E402

rng = seeded_random()
DB = "gpurec_property_offers"

PRICE_TYPES = {
    "integer": lambda r: str(r.randint(-5, 40)),
    "bigint": lambda r: str(r.randint(-5, 40) * 10**12),
    "numeric": lambda r: r.choice(["1.5", "1.50", "2", "0.25", "-1", "3.125", "NaN"])
    if r.random() < 0.3 else f"{r.randint(0, 4000) / 100:.2f}",
    "real": lambda r: r.choice(["0.1", "1e-3", "NaN", "-0", "0"]) if r.random() < 0.2
    else str(r.randint(0, 60) / 4),
    "double precision": lambda r: r.choice(["0.1", "0.30000000000000004", "NaN", "-Infinity"])
    if r.random() < 0.2 else str(r.randint(0, 60) / 8),
}
ID_TYPES = ["smallint", "integer", "bigint"]


def maybe_null(value, p=0.03):
    return "NULL" if rng.random() < p else value


def load_offers(price_type, id_type, n):
    values = []
    for _ in range(n):
        product = maybe_null(str(rng.randint(1, 40)))
        store = maybe_null(str(rng.randint(1, 12)))
        price = maybe_null(PRICE_TYPES[price_type](rng))
        if price not in ("NULL",) and not price.lstrip("-").replace(".", "").replace("e", "").isdigit():
            price = f"'{price}'"
        values.append(f"({product}, {store}, {price})")
        if rng.random() < 0.05:  # an exact duplicate row
            values.append(values[-1])
    sql(f"""
        DROP TABLE IF EXISTS offers;
        CREATE TABLE offers (product_id {id_type}, store_id {id_type}, price {price_type},
                             noise text DEFAULT 'x');
        INSERT INTO offers (product_id, store_id, price) VALUES {", ".join(values)};
    """)


ORACLE = """
    SELECT product_id::bigint, rn::int AS offer_rank, store_id::bigint, price::numeric, n::bigint
    FROM (SELECT product_id, store_id, price,
                 row_number() OVER (PARTITION BY product_id ORDER BY price, store_id) AS rn,
                 count(*) OVER (PARTITION BY product_id) AS n
          FROM offers
          WHERE product_id IS NOT NULL AND store_id IS NOT NULL AND price IS NOT NULL) s
    WHERE rn <= {k}
"""


def compare(name, got_sql, want_sql, settings):
    diff = sql(f"""
        SELECT (SELECT count(*) FROM (({got_sql}) EXCEPT ALL ({want_sql})) a),
               (SELECT count(*) FROM (({want_sql}) EXCEPT ALL ({got_sql})) b),
               (SELECT count(*) FROM ({want_sql}) c)
    """, settings=settings)[0]
    return check(name, diff[0] == "0" and diff[1] == "0",
                 f"{diff[0]} rows only in gpurec, {diff[1]} only in the oracle (of {diff[2]})")


def main():
    devices = fresh_database(DB)
    query = "SELECT product_id, store_id, price FROM offers"

    for price_type in PRICE_TYPES:
        id_type = rng.choice(ID_TYPES)
        load_offers(price_type, id_type, rng.randint(200, 1500))
        for device in devices:
            settings = {"gpurec.device": device}
            for k in (1, 2, 3, 7, 1000):
                compare(f"cheapest-{price_type}-{id_type}-k{k}-{device}",
                        f"SELECT * FROM gpurec.cheapest_offers('{query}', {k})",
                        ORACLE.format(k=k), settings)
            # the text of each price is that of price::numeric where the rank is unambiguous
            bad = sql(f"""
                SELECT count(*) FROM gpurec.cheapest_offers('{query}', 3) g
                JOIN ({ORACLE.format(k=3)}) o USING (product_id, offer_rank)
                WHERE g.store_id = o.store_id AND g.price::text <> o.price::text
                  AND (SELECT count(DISTINCT price::numeric::text) FROM offers f
                       WHERE f.product_id = g.product_id AND f.store_id = g.store_id
                         AND f.price::numeric = g.price) = 1
            """, settings=settings)[0][0]
            check(f"price-text-{price_type}-{device}", bad == "0", f"{bad} prices spelled differently")
        # row order, extra columns and column order do not matter
        compare(f"order-independent-{price_type}",
                "SELECT * FROM gpurec.cheapest_offers('SELECT noise, price, store_id, product_id "
                "FROM offers ORDER BY random()', 2)",
                ORACLE.format(k=2), {})

    # improve_carts against its plain-SQL definition
    load_offers("numeric", "bigint", 1500)
    lines = [f"({rng.randint(1, 30)}, {rng.randint(1, 45)}, {rng.randint(1, 14)}, "
             f"{rng.choice(['NULL', '1', '2', '5'])})" for _ in range(300)]
    sql(f"""DROP TABLE IF EXISTS carts;
            CREATE TABLE carts (cart_id bigint, product_id bigint, store_id bigint, quantity int);
            INSERT INTO carts VALUES {", ".join(lines)};""")
    cart_oracle = """
        WITH o AS (SELECT * FROM offers
                   WHERE product_id IS NOT NULL AND store_id IS NOT NULL AND price IS NOT NULL),
        best AS (SELECT DISTINCT ON (product_id) product_id, store_id, price
                 FROM o ORDER BY product_id, price, store_id),
        cur AS (SELECT product_id, store_id, min(price) AS price FROM o GROUP BY 1, 2),
        l AS (SELECT cart_id, product_id, store_id, coalesce(quantity, 1)::bigint AS quantity
              FROM carts WHERE cart_id IS NOT NULL AND product_id IS NOT NULL AND store_id IS NOT NULL)
        SELECT l.cart_id, l.product_id, l.quantity, l.store_id AS current_store_id,
               cur.price AS current_price, best.store_id AS best_store_id, best.price AS best_price,
               (cur.price - best.price) * l.quantity AS saving
        FROM l LEFT JOIN best USING (product_id)
               LEFT JOIN cur ON cur.product_id = l.product_id AND cur.store_id = l.store_id
        WHERE best.price IS NULL OR cur.price IS NULL OR best.price < cur.price
    """
    for device in devices:
        compare(f"improve-carts-{device}",
                "SELECT * FROM gpurec.improve_carts('SELECT * FROM carts', "
                "'SELECT product_id, store_id, price FROM offers')",
                cart_oracle, {"gpurec.device": device})

    drop_database(DB)


if __name__ == "__main__":
    main()
