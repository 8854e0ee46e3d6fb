#!/usr/bin/env python3
"""gpurec.cheapest_offers and gpurec.improve_carts against plain SQL.

Every run draws fresh data (replay one with GPUREC_SEED): ties on price and
on (price, store), exact duplicate rows, NULLs in every column, NaN,
infinite, negative and extreme prices, products with a single offer, ids
at the ends of their type's range, for each price type (smallint, integer,
bigint, numeric of mixed scales, real, double precision) and each id type.

The oracles are the plain-SQL definitions of the two functions, run on the
very same inner query; results are compared inside the database with
EXCEPT ALL in both directions (numeric `=`, so 1.5 and 1.50 are one value),
and the spelling of prices separately:
  * where the offer at (product, rank) is unambiguous, its price text is the
    oracle's price::numeric::text;
  * every returned (product, store, price text) is a distinct input offer:
    the result's multiset is contained in the input's, and equals it when k
    exceeds every product's offer count.
Dense markets (small ids, dozens of offers per product) get the same
oracles at fixed k, and improve_carts its oracle.  Every check
runs under gpurec.device = cpu and under gpu where a GPU is usable (else
under the default, auto); the input-order check of the dense markets runs
under the session's default device.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pgtest import check, drop_database, skip, fresh_database, seeded_random, sql, sql_error  # noqa: E402

rng = seeded_random()
DB = "gpurec_property_marketplace"

INT_RANGE = {
    "smallint": (-32768, 32767),
    "integer": (-2147483648, 2147483647),
    "bigint": (-9223372036854775808, 9223372036854775807),
}
ID_TYPES = list(INT_RANGE)


def lit(text):
    """A dollar-quoted SQL literal of an inner query."""
    assert "$q$" not in text
    return f"$q${text}$q$"


# ---------------------------------------------------------------- random data --

def random_ids(id_type, n):
    """n distinct ids of id_type: the ends of the range, 0, negatives, and small ones."""
    lo, hi = INT_RANGE[id_type]
    ids = {lo, hi, 0, -1}
    while len(ids) < n:
        ids.add(rng.choice([rng.randint(-50, 200), rng.randint(lo, hi)]))
    return rng.sample(sorted(ids), n)


def price_sampler(price_type):
    """A function giving one price literal; few distinct values, so ties are frequent."""
    if price_type in INT_RANGE:
        lo, hi = INT_RANGE[price_type]
        scale = 10**12 if price_type == "bigint" else 1

        def draw():
            if rng.random() < 0.04:
                return str(rng.choice([lo, hi, lo + 1, hi - 1]))
            return str(rng.randint(-6, 30) * scale)
        return draw
    if price_type == "numeric":
        specials = ["1.5", "1.50", "1.500", "2", "2.0", "2.00", "-1", "-1.0", "-0", "0", "0.00",
                    "3.125", "NaN", "Infinity", "-Infinity", "0.000000000000001",
                    "-0.000000000000001", "999.999999999999999"]

        def draw():
            if rng.random() < 0.35:
                return rng.choice(specials)
            # tenths spelled at scale 1, 2 or 3: equal values of different scales
            scale = rng.choice([0, 1, 1, 2, 3])
            value = rng.randint(-20, 120)
            return f"{value / 10:.{scale}f}" if scale else str(value // 10)
        return draw
    if price_type == "real":
        specials = ["NaN", "Infinity", "-Infinity", "-0", "0", "0.1", "0.2", "1e-40", "-1e-40",
                    "3.4e38", "-3.4e38", "16777217"]

        def draw():
            if rng.random() < 0.2:
                return rng.choice(specials)
            return str(rng.randint(-20, 60) / 4)
        return draw
    if price_type == "double precision":
        specials = ["NaN", "Infinity", "-Infinity", "-0", "0", "0.1", "0.3", "0.30000000000000004",
                    "5e-324", "-5e-324", "1.7976931348623157e308", "-1e-310", "9007199254740993"]

        def draw():
            if rng.random() < 0.2:
                return rng.choice(specials)
            return str(rng.randint(-20, 60) / 8)
        return draw
    raise ValueError(price_type)


def maybe_null(value, p=0.03):
    return None if rng.random() < p else value


def sql_value(v):
    return "NULL" if v is None else f"'{v}'"


def load_offers(table, price_type, product_type, store_type, n, products=None, stores=None):
    """n random offers (and a few more with NULLs) in a new table; products
    and stores are the ids to draw from (random ones of the types if not given)."""
    products = products or random_ids(product_type, rng.randint(5, 60))
    weights = [rng.choice([1, 1, 2, 5, 20]) for _ in products]
    stores = stores or random_ids(store_type, rng.randint(2, 10))
    draw_price = price_sampler(price_type)
    rows = []
    while len(rows) < n:
        if rows and rng.random() < 0.06:  # an exact duplicate of an earlier row
            rows.append(rng.choice(rows))
            continue
        if rng.random() < 0.08:  # most likely a product with a single offer
            lo, hi = INT_RANGE[product_type]
            product = str(rng.randint(lo, hi))
        else:
            product = str(rng.choices(products, weights)[0])
        rows.append((maybe_null(product), maybe_null(str(rng.choice(stores))),
                     maybe_null(draw_price())))
    # rows whose every column is NULL, or two of three
    rows += [(None, None, None), (str(products[0]), None, None), (None, str(stores[0]), "1")]
    rng.shuffle(rows)
    values = ", ".join(f"({sql_value(p)}, {sql_value(s)}, {sql_value(c)})" for p, s, c in rows)
    sql(f"""
        DROP TABLE IF EXISTS {table};
        CREATE TABLE {table} (product_id {product_type}, store_id {store_type},
                              price {price_type}, noise text DEFAULT 'x');
        INSERT INTO {table} (product_id, store_id, price) VALUES {values};
    """)
    return products, stores


def load_carts(table, products, stores, n, id_type, quantity_type):
    lo, hi = INT_RANGE[id_type]
    qlo, qhi = INT_RANGE[quantity_type]
    lines = []
    for _ in range(n):
        if lines and rng.random() < 0.05:  # the same line twice
            lines.append(rng.choice(lines))
            continue
        cart = rng.choice([rng.randint(1, 25), rng.choice([lo, hi])])
        # products: offered ones, and some nobody offers
        product = rng.choice(products) if rng.random() < 0.9 else rng.randint(lo, hi)
        # stores: offering ones, and some that offer nothing
        store = rng.choice(stores) if rng.random() < 0.9 else rng.randint(lo, hi)
        quantity = rng.choice([None, None, 1, 1, 2, 3, 7, qhi])
        lines.append((maybe_null(str(cart)), maybe_null(str(product)),
                      maybe_null(str(store)), None if quantity is None else str(quantity)))
    values = ", ".join("(" + ", ".join(sql_value(v) for v in line) + ")" for line in lines)
    sql(f"""
        DROP TABLE IF EXISTS {table};
        CREATE TABLE {table} (cart_id {id_type}, product_id {id_type}, store_id {id_type},
                              quantity {quantity_type});
        INSERT INTO {table} VALUES {values};
    """)


# ------------------------------------------------------------------- oracles --

def valid_offers(query):
    return f"""SELECT product_id::bigint AS p, store_id::bigint AS s, price
               FROM ({query}) q
               WHERE product_id IS NOT NULL AND store_id IS NOT NULL AND price IS NOT NULL"""


def cheapest_oracle(query, k):
    return f"""
        SELECT product_id::bigint, rn::integer, store_id::bigint, price::numeric, n::bigint
        FROM (SELECT product_id, store_id, price,
                     row_number() OVER (PARTITION BY product_id ORDER BY price, store_id) AS rn,
                     count(*) OVER (PARTITION BY product_id) AS n
              FROM ({query}) q
              WHERE product_id IS NOT NULL AND store_id IS NOT NULL AND price IS NOT NULL) s
        WHERE rn <= {k}"""


def cheapest_got(query, k):
    return f"SELECT * FROM gpurec.cheapest_offers({lit(query)}, {k})"


def improve_oracle(carts_query, offers_query, has_quantity=True):
    quantity = "coalesce(quantity::bigint, 1)" if has_quantity else "1::bigint"
    return f"""
        WITH o AS ({valid_offers(offers_query)}),
        best AS (SELECT p, s, price FROM (SELECT p, s, price, row_number() OVER (
                     PARTITION BY p ORDER BY price, s) AS rn FROM o) r WHERE rn = 1),
        cur AS (SELECT p, s, min(price) AS price FROM o GROUP BY p, s),
        l AS (SELECT cart_id::bigint AS cart_id, product_id::bigint AS product_id,
                     store_id::bigint AS store_id, {quantity} AS quantity
              FROM ({carts_query}) c
              WHERE cart_id IS NOT NULL AND product_id IS NOT NULL AND store_id IS NOT NULL)
        SELECT l.cart_id, l.product_id, l.quantity, l.store_id,
               cur.price::numeric, best.s, best.price::numeric,
               (cur.price::numeric - best.price::numeric) * l.quantity
        FROM l
        LEFT JOIN best ON best.p = l.product_id
        LEFT JOIN cur ON cur.p = l.product_id AND cur.s = l.store_id
        WHERE best.s IS NULL OR cur.price IS NULL OR best.price < cur.price"""


def improve_got(carts_query, offers_query):
    return f"SELECT * FROM gpurec.improve_carts({lit(carts_query)}, {lit(offers_query)})"


# ------------------------------------------------------- checks in one query --

def except_check(name, got, want):
    """A row (name, problem): problem is '' when got and want are equal multisets."""
    return f"""
        SELECT {lit(name)}, (WITH g AS MATERIALIZED ({got}), w AS MATERIALIZED ({want}),
            a AS MATERIALIZED (SELECT * FROM g EXCEPT ALL SELECT * FROM w),
            b AS MATERIALIZED (SELECT * FROM w EXCEPT ALL SELECT * FROM g)
            SELECT CASE WHEN (SELECT count(*) FROM a) = 0 AND (SELECT count(*) FROM b) = 0 THEN ''
                   ELSE format('%s rows only in gpurec, e.g. %s; %s rows only in the oracle, '
                               'e.g. %s; %s rows expected',
                               (SELECT count(*) FROM a),
                               (SELECT string_agg(x::text, ' ') FROM (SELECT * FROM a LIMIT 3) x),
                               (SELECT count(*) FROM b),
                               (SELECT string_agg(x::text, ' ') FROM (SELECT * FROM b LIMIT 3) x),
                               (SELECT count(*) FROM w)) END)"""


def price_text_check(name, query, k):
    """Where the offers tied with the oracle's offer at (product, rank) on
    (price, store) all spell their price alike, gpurec spells it so."""
    return f"""
        SELECT {lit(name)}, (WITH v AS ({valid_offers(query)}),
            w AS (SELECT * FROM (SELECT p, s, price, row_number() OVER (PARTITION BY p
                                        ORDER BY price, s) AS rn FROM v) x WHERE rn <= {k}),
            spellings AS (SELECT p, s, price, count(DISTINCT price::numeric::text) AS n,
                                 min(price::numeric::text) AS spelled
                          FROM v GROUP BY p, s, price),
            bad AS (SELECT g.product_id, g.offer_rank, g.price::text AS got, t.spelled AS want
                    FROM ({cheapest_got(query, k)}) g
                    JOIN w ON w.p = g.product_id AND w.rn = g.offer_rank
                    JOIN spellings t ON t.p = w.p AND t.s = w.s AND t.price = w.price
                    WHERE t.n = 1 AND g.price::text IS DISTINCT FROM t.spelled)
            SELECT CASE WHEN NOT EXISTS (SELECT FROM bad) THEN '' ELSE
                format('%s prices spelled otherwise, e.g. %s', (SELECT count(*) FROM bad),
                       (SELECT string_agg(x::text, ' ') FROM (SELECT * FROM bad LIMIT 3) x))
                END)"""


def offers_are_inputs_check(name, query, k, exact):
    """Each returned (product, store, price text) is a distinct input offer;
    with exact, the result holds every input offer."""
    got = f"SELECT product_id, store_id, price::text FROM ({cheapest_got(query, k)}) g"
    inputs = f"SELECT p, s, price::numeric::text FROM ({valid_offers(query)}) v"
    if exact:
        return except_check(name, got, inputs)
    return f"""
        SELECT {lit(name)}, (WITH a AS MATERIALIZED (({got}) EXCEPT ALL ({inputs}))
            SELECT CASE WHEN NOT EXISTS (SELECT FROM a) THEN '' ELSE
                format('%s returned offers are not distinct input offers, e.g. %s',
                       (SELECT count(*) FROM a),
                       (SELECT string_agg(x::text, ' ') FROM (SELECT * FROM a LIMIT 3) x)) END)"""


def cart_prices_are_inputs_check(name, carts_query, offers_query):
    """current_price and best_price are spelled as one of the matching input offers."""
    return f"""
        SELECT {lit(name)}, (WITH v AS ({valid_offers(offers_query)}),
            bad AS (SELECT g.* FROM ({improve_got(carts_query, offers_query)}) g
                    WHERE (g.best_store_id IS NOT NULL AND NOT EXISTS (
                              SELECT FROM v WHERE v.p = g.product_id AND v.s = g.best_store_id
                                AND v.price::numeric::text = g.best_price::text))
                       OR (g.current_price IS NOT NULL AND NOT EXISTS (
                              SELECT FROM v WHERE v.p = g.product_id AND v.s = g.current_store_id
                                AND v.price::numeric::text = g.current_price::text)))
            SELECT CASE WHEN NOT EXISTS (SELECT FROM bad) THEN '' ELSE
                format('%s lines with a price no matching offer spells so, e.g. %s',
                       (SELECT count(*) FROM bad),
                       (SELECT string_agg(x::text, ' ') FROM (SELECT * FROM bad LIMIT 3) x))
                END)"""


def run_checks(rows, settings, label):
    """Runs the check rows in one statement and reports each through check()."""
    query = "\nUNION ALL\n".join(rows)
    try:
        results = sql(query, settings=settings)
    except RuntimeError as e:
        # one failing call would hide the rest: rerun them one by one
        if len(rows) > 1:
            for row in rows:
                run_checks([row], settings, label)
            return
        name = rows[0].split("$q$")[1]
        check(f"{name}", False, f"{label}: {str(e).splitlines()[0]}")
        return
    for name, problem in results:
        check(name, problem == "", problem or "")


# ------------------------------------------------------------------- the tests --

def dataset_checks(tag, table, carts, device):
    query = f"SELECT product_id, store_id, price FROM {table}"
    most = int(sql(f"SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM ({valid_offers(query)}) v "
                   f"GROUP BY p) c")[0][0])
    ks = [1, 2, 3, 7, most + 1, 2147483647]
    rows = []
    for k in ks:
        kname = "kmax" if k == 2147483647 else ("kmost+1" if k == most + 1 else f"k{k}")
        rows.append(except_check(f"cheapest-{tag}-{kname}-{device}", cheapest_got(query, k),
                                 cheapest_oracle(query, k)))
    rows.append(except_check(f"cheapest-default-k-{tag}-{device}",
                             f"SELECT * FROM gpurec.cheapest_offers({lit(query)})",
                             cheapest_oracle(query, 1)))
    for k, kname in ((1, "k1"), (3, "k3"), (most + 1, "kmost+1")):
        rows.append(price_text_check(f"price-text-{tag}-{kname}-{device}", query, k))
    rows.append(offers_are_inputs_check(f"distinct-offers-{tag}-k2-{device}", query, 2, False))
    rows.append(offers_are_inputs_check(f"all-offers-{tag}-kmost+1-{device}", query, most + 1, True))

    # row order: the same data shuffled gives the same result as unshuffled, and the oracle's
    shuffled = f"SELECT product_id, store_id, price FROM {table} ORDER BY random()"
    for k in (1, 3):
        rows.append(except_check(f"order-independent-{tag}-k{k}-{device}",
                                 cheapest_got(shuffled, k), cheapest_got(query, k)))
        rows.append(except_check(f"order-independent-oracle-{tag}-k{k}-{device}",
                                 cheapest_got(shuffled, k), cheapest_oracle(query, k)))
    # extra columns, other column order, a computed column, a join
    reordered = (f"SELECT noise, price, 42 AS extra, store_id AS store_id, price AS price2, "
                 f"product_id FROM {table} ORDER BY product_id DESC NULLS FIRST, store_id")
    rows.append(except_check(f"columns-any-order-{tag}-{device}", cheapest_got(reordered, 2),
                             cheapest_oracle(query, 2)))
    joined = (f"SELECT o.price, o.product_id, o.store_id, d.x FROM {table} o "
              f"CROSS JOIN (VALUES (1)) d(x) WHERE o.product_id IS DISTINCT FROM "
              f"(SELECT min(product_id) FROM {table})")
    rows.append(except_check(f"joined-query-{tag}-{device}", cheapest_got(joined, 3),
                             cheapest_oracle(joined, 3)))

    # improve_carts: with quantity, without, reordered with extra columns, shuffled
    cart_query = f"SELECT cart_id, product_id, store_id, quantity FROM {carts}"
    rows.append(except_check(f"improve-carts-{tag}-{device}", improve_got(cart_query, query),
                             improve_oracle(cart_query, query)))
    no_quantity = f"SELECT cart_id, product_id, store_id FROM {carts}"
    rows.append(except_check(f"improve-carts-no-quantity-{tag}-{device}",
                             improve_got(no_quantity, query),
                             improve_oracle(no_quantity, query, has_quantity=False)))
    messy_carts = (f"SELECT 'n' AS note, quantity, store_id, 3.5 AS weight, product_id, cart_id "
                   f"FROM {carts} ORDER BY random()")
    rows.append(except_check(f"improve-carts-any-order-{tag}-{device}",
                             improve_got(messy_carts, reordered),
                             improve_oracle(cart_query, query)))
    rows.append(except_check(f"improve-carts-shuffled-{tag}-{device}",
                             improve_got(messy_carts, shuffled),
                             improve_got(cart_query, query)))
    rows.append(cart_prices_are_inputs_check(f"improve-carts-price-text-{tag}-{device}",
                                             cart_query, query))
    # hash joins: the planner's guesses about these inner queries favour nested loops
    run_checks(rows, {"gpurec.device": device, "enable_nestloop": "off"}, tag)


def error_and_edge_checks(device, has_gpu):
    s = {"gpurec.device": device}
    q = lit("SELECT product_id, store_id, price FROM offers_0")
    empty = lit("SELECT product_id, store_id, price FROM offers_0 WHERE false")
    for k in (0, -1, -2147483648):
        for what, query in (("data", q), ("empty", empty)):
            err = sql_error(f"SELECT * FROM gpurec.cheapest_offers({query}, {k})", s)
            check(f"k{k}-is-an-error-{what}-{device}", err is not None and err[0] == "22023",
                  f"got {err}")
    rows = [
        f"""SELECT {lit('empty-input-' + device)}, CASE WHEN (SELECT count(*) FROM gpurec.cheapest_offers(
                {empty}, 3)) = 0 THEN '' ELSE 'rows from an empty input' END""",
        f"""SELECT {lit('all-null-input-' + device)}, CASE WHEN (SELECT count(*) FROM gpurec.cheapest_offers(
                $q$SELECT NULL::int AS product_id, 1 AS store_id, 2.5 AS price UNION ALL
                   SELECT 1, NULL, 2.5 UNION ALL SELECT 1, 1, NULL$q$, 3)) = 0
                THEN '' ELSE 'rows from NULL-only input' END""",
        f"""SELECT {lit('null-k-' + device)}, CASE WHEN (SELECT count(*) FROM gpurec.cheapest_offers(
                {q}, NULL)) = 0 THEN '' ELSE 'rows for k NULL' END""",
        except_check(f"improve-carts-empty-carts-{device}",
                     improve_got("SELECT * FROM carts_0 WHERE false",
                                 "SELECT product_id, store_id, price FROM offers_0"),
                     improve_oracle("SELECT * FROM carts_0 WHERE false",
                                    "SELECT product_id, store_id, price FROM offers_0")),
        except_check(f"improve-carts-empty-offers-{device}",
                     improve_got("SELECT * FROM carts_0",
                                 "SELECT product_id, store_id, price FROM offers_0 WHERE false"),
                     improve_oracle("SELECT * FROM carts_0",
                                    "SELECT product_id, store_id, price FROM offers_0 WHERE false")),
        # a hand-made case: every kind of line, NULL quantity and NULL ids
        except_check(f"improve-carts-by-hand-{device}",
                     improve_got(HAND_CARTS, HAND_OFFERS),
                     """VALUES (1::bigint, 10::bigint, 1::bigint, 2::bigint, 5.00::numeric,
                                1::bigint, 4.5::numeric, 0.50::numeric),
                               (1, 11, 1, 3, NULL, 2, 7, NULL),
                               (1, 12, 4, 1, NULL, NULL, NULL, NULL),
                               (2, 10, 3, 3, 'NaN', 1, 4.5, 'NaN'),
                               (2, 10, 3, 3, 'NaN', 1, 4.5, 'NaN')"""),
        except_check(f"cheapest-by-hand-{device}",
                     cheapest_got(HAND_OFFERS, 2),
                     """VALUES (10::bigint, 1, 1::bigint, 4.5::numeric, 5::bigint),
                               (10, 2, 1, 4.50, 5), (11, 1, 2, 7, 2), (11, 2, 2, 'NaN', 2),
                               (13, 1, 5, -1, 1)"""),
    ]
    run_checks(rows, s, "edge cases")
    # the same spellings at (price, store) ties: both 4.5 and 4.50 come back
    got = sql(f"SELECT price::text FROM gpurec.cheapest_offers({lit(HAND_OFFERS)}, 2) "
              f"WHERE product_id = 10 ORDER BY 1", settings=s)
    check(f"tied-offers-keep-their-spelling-{device}", [r[0] for r in got] == ["4.5", "4.50"],
          f"got {[r[0] for r in got]}, expected ['4.5', '4.50']")
    for quantity in (0, -1):
        err = sql_error(f"SELECT * FROM gpurec.improve_carts("
                        f"$q$SELECT 1 AS cart_id, 10 AS product_id, 1 AS store_id, {quantity} "
                        f"AS quantity$q$, {lit(HAND_OFFERS)})", s)
        check(f"quantity{quantity}-is-an-error-{device}", err is not None, f"got {err}")
    # numerics gpurec may not hold exactly: an error (22003), never a wrong answer
    for values in (["12345678901234567890"], ["0.0000000000000000000001"], ["1e-30"],
                   ["1.0000000000000000000000"], ["123456789012345678"],
                   ["0.123456789012345678"], ["10", "0.000000000000000001"],
                   ["0.000000000000000001", "-10"], ["9.5", "9.50", "-0.000000000000000009"],
                   # more than 18 decimals, the extra ones zeros: 1000 stays 1000, not 100
                   ["0.0000000000000001000"], ["2.5", "0.00000000000000010000000"]):
        name = f"numeric-{'-'.join(values)}-{device}"
        offers = " UNION ALL ".join(f"SELECT {i} AS store_id, {v}::numeric AS price"
                                    for i, v in enumerate(values))
        query = lit(f"SELECT 1 AS product_id, store_id, price FROM ({offers}) r")
        err = sql_error(f"SELECT * FROM gpurec.cheapest_offers({query}, 9)", s)
        if err is None:
            got = sql(f"SELECT o.store_id, o.price::text FROM gpurec.cheapest_offers({query}, 9) o "
                      f"ORDER BY store_id", settings=s)
            want = sql(f"SELECT store_id, price::text FROM ({offers}) r ORDER BY store_id")
            check(name, got == want, f"got {got}, expected {want}")
        else:
            check(name, err[0] == "22003", f"got {err}")
    err = sql_error("SELECT * FROM gpurec.cheapest_offers($q$SELECT 1.0 AS product_id, 1 AS "
                    "store_id, 1 AS price$q$)", s)
    check(f"numeric-product-id-is-refused-{device}", err is not None and err[0] == "42804", f"got {err}")
    if has_gpu and device == "gpu":
        err = sql_error(f"SELECT * FROM gpurec.cheapest_offers({q}, 2)",
                        {"gpurec.device": "gpu", "gpurec.test_fail_gpu_alloc": "on"})
        check("gpu-alloc-failure-is-an-error", err is not None and err[0] == "53200", f"got {err}")
        # (auto computes inputs this small on the CPU: it must not touch the GPU at all)
    elif not has_gpu:
        skip(f"gpu-alloc-failure-is-an-error-{device}", "no GPU here")
        run_checks([except_check("gpu-alloc-failure-auto-small-input",
                                 cheapest_got("SELECT product_id, store_id, price FROM offers_0", 2),
                                 cheapest_oracle("SELECT product_id, store_id, price FROM offers_0", 2))],
                   {"gpurec.device": "auto", "gpurec.test_fail_gpu_alloc": "on"}, "alloc")


def dense_checks(devices):
    """Dense markets: small positive ids (products 1..40, stores 1..12) of one
    type for both columns, so every product has dozens of offers, for five
    price types: cheapest_offers at k 1, 2, 3, 7 and 1000 (more than any
    product's offers), the price spellings at k 3, the input order, and
    improve_carts against its oracle."""
    products, stores = list(range(1, 41)), list(range(1, 13))
    for price_type in ("integer", "bigint", "numeric", "real", "double precision"):
        id_type = rng.choice(ID_TYPES)
        tag = f"dense-{price_type.replace(' ', '_')}-{id_type}"
        table = f"dense_{price_type.replace(' ', '_')}"
        load_offers(table, price_type, id_type, id_type, rng.randint(200, 1500), products, stores)
        query = f"SELECT product_id, store_id, price FROM {table}"
        for device in devices:
            rows = [except_check(f"cheapest-{tag}-k{k}-{device}", cheapest_got(query, k),
                                 cheapest_oracle(query, k)) for k in (1, 2, 3, 7, 1000)]
            rows.append(price_text_check(f"price-text-{tag}-k3-{device}", query, 3))
            run_checks(rows, {"gpurec.device": device, "enable_nestloop": "off"}, tag)
        # row order, extra columns and column order do not matter (the session's default device)
        shuffled = f"SELECT noise, price, store_id, product_id FROM {table} ORDER BY random()"
        run_checks([except_check(f"order-independent-{tag}-k2", cheapest_got(shuffled, 2),
                                 cheapest_oracle(query, 2))], {}, tag)

    load_offers("dense_cart_offers", "numeric", "bigint", "bigint", 1500, products, stores)
    # products 41..45 and stores 13..14 offer nothing
    load_carts("dense_carts", list(range(1, 46)), list(range(1, 15)), 300, "bigint", "integer")
    offers = "SELECT product_id, store_id, price FROM dense_cart_offers"
    carts = "SELECT cart_id, product_id, store_id, quantity FROM dense_carts"
    for device in devices:
        run_checks([except_check(f"improve-carts-dense-{device}", improve_got(carts, offers),
                                 improve_oracle(carts, offers))],
                   {"gpurec.device": device, "enable_nestloop": "off"}, "dense carts")


HAND_OFFERS = """SELECT * FROM (VALUES (10, 1, 4.5), (10, 1, 4.50), (10, 2, 5.00), (10, 2, 6),
                   (10, 3, 'NaN'), (11, 2, 7), (11, 2, 'NaN'), (13, 5, -1),
                   (NULL, 1, 1), (14, NULL, 1), (15, 1, NULL)) o(product_id, store_id, price)"""
HAND_CARTS = """SELECT * FROM (VALUES
    (1, 10, 2, NULL),   -- store 2 sells at 5.00, best 4.5 at store 1: saving 0.50
    (1, 10, 1, 2),      -- already the best store: not returned
    (1, 11, 3, 1),      -- store 3 does not offer 11: current NULL
    (1, 12, 1, 4),      -- nobody offers 12
    (2, 10, 3, 3),      -- store 3 sells at NaN: best 4.5 is cheaper
    (2, 10, 3, 3),      -- the same line again: a row of its own
    (2, 11, 2, 1),      -- store 2 is the best for 11 (7 < NaN)
    (NULL, 10, 2, 1), (3, NULL, 2, 1), (3, 10, NULL, 1)) c(cart_id, product_id, store_id, quantity)
"""


def main():
    devices = fresh_database(DB)
    # JIT would compile each of the big check queries for seconds
    sql(f"ALTER DATABASE {DB} SET jit = off")
    has_gpu = "gpu" in devices
    print(f"# devices: {devices}", flush=True)
    price_types = ["smallint", "integer", "bigint", "numeric", "real", "double precision"]
    # every id type as product and as store id, in random pairs
    product_types = rng.sample(ID_TYPES, 3) * 2
    store_types = rng.sample(ID_TYPES, 3) + rng.sample(ID_TYPES, 3)
    datasets = []
    for i, price_type in enumerate(price_types):
        n = rng.randint(200, 1500)
        datasets.append((f"offers_{i}", price_type, product_types[i], store_types[i], n))
    # one with many offers per product, so ranking goes deep
    datasets.append(("offers_6", rng.choice(price_types), rng.choice(ID_TYPES),
                     rng.choice(ID_TYPES), rng.randint(8000, 15000)))
    for i, (table, price_type, product_type, store_type, n) in enumerate(datasets):
        products, stores = load_offers(table, price_type, product_type, store_type, n)
        cart_type = rng.choice(ID_TYPES)
        usable = [x for x in products if INT_RANGE[cart_type][0] <= x <= INT_RANGE[cart_type][1]]
        usable_stores = [x for x in stores if INT_RANGE[cart_type][0] <= x <= INT_RANGE[cart_type][1]]
        load_carts(f"carts_{i}", usable or [1], usable_stores or [1], rng.randint(100, 400),
                   cart_type, rng.choice(ID_TYPES))
        tag = f"{price_type.replace(' ', '_')}-{product_type}-{store_type}" + ("-deep" if i == 6 else "")
        print(f"# {table}: {n} offers, price {price_type}, product_id {product_type}, "
              f"store_id {store_type}; carts {cart_type}", flush=True)
        for device in devices:
            dataset_checks(tag, table, f"carts_{i}", device)
    dense_checks(devices)
    for device in devices:
        error_and_edge_checks(device, has_gpu)
    drop_database(DB)


if __name__ == "__main__":
    main()
