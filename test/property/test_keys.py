#!/usr/bin/env python3
"""Ids of uuid and text (varchar, domains over them) in every function.

Every run draws fresh keys (replay one with GPUREC_SEED): uuids with the
edge values (all zeros, all ones, uuids that differ in their first or last
byte only) and text with the edge values ('' , prefixes of one another,
upper case before lower case bytewise, multibyte UTF-8, values longer than
127 bytes), NULL ids, and few distinct prices and coordinates, so that
ties that compare ids are frequent.

Each table holds every id twice: as the key and as an integer standing for
it, numbered in the key's byte order (with gaps and negatives), so that the
integer ids order as the keys do.  The oracles:
  * cheapest_offers: plain SQL on the keys, ties ranked by store_id in the
    key's byte order (COLLATE "C" for text, uuid's own order);
  * every function: the same call on the integer ids, each id then replaced
    by the key it stands for, must give the same rows (the integer paths
    have their own oracles in the other property tests), under
    gpurec.device = cpu and gpu where one is usable (else auto);
  * a parallel read (plans forced; workers of the direct scan, and through
    the query's parallel plan), where each process codes its rows apart,
    gives the serial read's rows, and the timing NOTICE says workers read;
  * NULL ids skip their rows, as for integers; ids of one name in two
    queries of one call must be of one kind (42804); the result's id_type
    must be the ids' kind (42804); a main_user no point has is 22023.
"""
import csv
import io
import os
import re
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from pgtest import PSQL, check, drop_database, first_difference, fresh_database, seeded_random, sql, sql_error  # noqa: E402

rng = seeded_random()
DB = "gpurec_property_keys"


def lit(text):
    """A dollar-quoted SQL literal of an inner query."""
    assert "$q$" not in text
    return f"$q${text}$q$"


def quote(value):
    return "'" + value.replace("'", "''") + "'"


# ---------------------------------------------------------------- keys ---

def uuid_keys(n):
    """n distinct uuids (as text), with the edges of uuid's byte order."""
    keys = {"00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"}
    base = uuid.UUID(int=rng.getrandbits(128))
    keys.add(str(base))
    keys.add(str(uuid.UUID(int=base.int ^ 1)))                # the last byte differs
    keys.add(str(uuid.UUID(int=base.int ^ (0x80 << 120))))    # the first byte differs
    while len(keys) < n:
        keys.add(str(uuid.UUID(int=rng.getrandbits(128))))
    return rng.sample(sorted(keys), n)


TEXT_EDGES = ["", "a", "ab", "abc", "B", "b", "Z", "é", "e\u0301", "ü", "日本", "a b", "A", "0", "10", "9",
              "x" * 130, "x" * 129 + "y"]


def text_keys(n):
    """n distinct strings (UTF-8), with the edges of byte order against a locale's."""
    keys = set(rng.sample(TEXT_EDGES, min(n, len(TEXT_EDGES)) // 2))
    alphabet = "abcXYZ019-_ éü日"
    while len(keys) < n:
        keys.add("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))))
    return rng.sample(sorted(keys), n)


def byte_order(key_type, keys):
    """keys sorted as gpurec orders them: uuid's bytes, text's UTF-8 bytes."""
    if key_type == "uuid":
        return sorted(keys, key=lambda k: uuid.UUID(k).bytes)
    return sorted(keys, key=lambda k: k.encode("utf-8"))


def integers_for(key_type, keys):
    """An integer for each key, ascending in the keys' byte order, with gaps and negatives."""
    first = rng.randint(-1000, 1000)
    out, at = {}, first
    for key in byte_order(key_type, keys):
        out[key] = at
        at += rng.randint(1, 5)
    return out


class Ids:
    """One id name's keys (of key_type) and the integers that stand for them."""

    def __init__(self, key_type, n):
        self.key_type = key_type
        self.keys = uuid_keys(n) if key_type == "uuid" else text_keys(n)
        self.integer = integers_for(key_type, self.keys)
        self.key_of = {str(v): k for k, v in self.integer.items()}

    def pick(self, null_rate=0.0):
        """(key literal, integer literal) of a random id, or NULLs."""
        if rng.random() < null_rate:
            return "NULL", "NULL"
        key = rng.choice(self.keys)
        return quote(key), str(self.integer[key])

    def key(self, integer_text):
        return None if integer_text is None else self.key_of[integer_text]


def normalized(rows, id_columns, ids):
    """rows of the integer call with each id column's integer replaced by its key."""
    out = []
    for row in rows:
        row = list(row)
        for c, name in id_columns.items():
            row[c] = ids[name].key(row[c])
        out.append(row)
    return out


def compare(name, typed, integer, id_columns, ids, ordered=True):
    want = normalized(integer, id_columns, ids)
    got = [list(r) for r in typed]
    if not ordered:
        got, want = sorted(got, key=repr), sorted(want, key=repr)
    ok = got == want
    why = ""
    if not ok:
        why = f"{len(got)} rows, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                why = f"row {i}: got {g}, expected {w}"
                break
    return check(name, ok, why)


def sql_type(key_type, use_domain):
    if key_type == "uuid":
        return "uuid_id" if use_domain else "uuid"
    return rng.choice(["text", "varchar", "text_id"]) if use_domain else rng.choice(["text", "varchar"])


# ---------------------------------------------------------------- tables ---

def make_marketplace(key_type):
    """offers, carts and shipping with product, store and cart ids of key_type."""
    ids = {"product_id": Ids(key_type, rng.randint(3, 40)), "store_id": Ids(key_type, rng.randint(2, 12)),
           "cart_id": Ids(key_type, rng.randint(2, 15))}
    t = {name: sql_type(key_type, rng.random() < 0.4) for name in ids}
    stmts = [f"""DROP TABLE IF EXISTS offers, carts, shipping;
CREATE TABLE offers (product_key {t['product_id']}, product_int bigint, store_key {t['store_id']},
                     store_int bigint, price numeric);
CREATE TABLE carts (cart_key {t['cart_id']}, cart_int bigint, product_key {t['product_id']}, product_int bigint,
                    store_key {t['store_id']}, store_int bigint, quantity int);
CREATE TABLE shipping (store_key {t['store_id']}, store_int bigint, fee numeric, free_from numeric);"""]
    rows = []
    for _ in range(rng.randint(20, 400)):
        p = ids["product_id"].pick(0.03)
        s = ids["store_id"].pick(0.03)
        price = rng.choice(["1", "2", "2.5", "3", "10"])
        rows.append(f"({p[0]}, {p[1]}, {s[0]}, {s[1]}, {price})")
    stmts.append("INSERT INTO offers VALUES " + ",".join(rows) + ";")
    rows = []
    for _ in range(rng.randint(5, 60)):
        c = ids["cart_id"].pick(0.03)
        p = ids["product_id"].pick(0.03)
        s = ids["store_id"].pick(0.2)
        rows.append(f"({c[0]}, {c[1]}, {p[0]}, {p[1]}, {s[0]}, {s[1]}, {rng.randint(1, 3)})")
    stmts.append("INSERT INTO carts VALUES " + ",".join(rows) + ";")
    rows = [f"({quote(k)}, {v}, {rng.choice(['0', '2.5', '4'])}, {rng.choice(['NULL', '5', '20'])})"
            for k, v in ids["store_id"].integer.items() if rng.random() < 0.9]
    if rows:
        stmts.append("INSERT INTO shipping VALUES " + ",".join(rows) + ";")
    sql("\n".join(stmts))
    return ids


def make_points(key_type):
    """points (users of key_type), candidates (of key_type) and a holdout."""
    ids = {"user_id": Ids(key_type, rng.randint(3, 25)), "candidate_id": Ids(key_type, rng.randint(2, 10))}
    t = {name: sql_type(key_type, rng.random() < 0.4) for name in ids}
    stmts = [f"""DROP TABLE IF EXISTS points, candidates, holdout;
CREATE TABLE points (user_key {t['user_id']}, user_int bigint, x float8, y float8);
CREATE TABLE candidates (candidate_key {t['candidate_id']}, candidate_int bigint, x float8, y float8);
CREATE TABLE holdout (user_key {t['user_id']}, user_int bigint, candidate_key {t['candidate_id']},
                      candidate_int bigint);"""]
    rows = []
    for key, integer in ids["user_id"].integer.items():  # every user has a point: a main_user may be any
        rows.append(f"({quote(key)}, {integer}, {rng.randint(0, 6)}, {rng.randint(0, 6)})")
    for _ in range(rng.randint(10, 200)):
        u = ids["user_id"].pick(0.03)
        rows.append(f"({u[0]}, {u[1]}, {rng.randint(0, 6)}, {rng.randint(0, 6)})")
    stmts.append("INSERT INTO points VALUES " + ",".join(rows) + ";")
    rows = [f"({quote(k)}, {v}, {rng.randint(0, 6)}, {rng.randint(0, 6)})"
            for k, v in ids["candidate_id"].integer.items()]
    stmts.append("INSERT INTO candidates VALUES " + ",".join(rows) + ";")
    rows = []
    for _ in range(rng.randint(2, 20)):
        u, c = ids["user_id"].pick(), ids["candidate_id"].pick()
        rows.append(f"({u[0]}, {u[1]}, {c[0]}, {c[1]})")
    stmts.append("INSERT INTO holdout VALUES " + ",".join(rows) + ";")
    sql("\n".join(stmts))
    return ids


def make_scores(key_type):
    ids = {"individual_id": Ids(key_type, rng.randint(2, 20))}
    t = sql_type(key_type, rng.random() < 0.4)
    n_labels = rng.randint(2, 8)
    labels = [rng.choice(["t", "f"]) for _ in range(n_labels)]
    stmts = [f"""DROP TABLE IF EXISTS scores, population;
CREATE TABLE scores (individual_key {t}, individual_int bigint, label boolean, score float8);
CREATE TABLE population (individual_key {t}, individual_int bigint, scores float8[]);"""]
    rows, prows = [], []
    for key, integer in ids["individual_id"].integer.items():
        for _ in range(rng.randint(1, 12)):
            rows.append(f"({quote(key)}, {integer}, {rng.choice(['true', 'false'])}, {rng.randint(0, 4)})")
        arr = ",".join(str(rng.randint(0, 4)) for _ in range(n_labels))
        prows.append(f"({quote(key)}, {integer}, '{{{arr}}}')")
    rows.append("(NULL, NULL, true, 1)")
    stmts.append("INSERT INTO scores VALUES " + ",".join(rows) + ";")
    stmts.append("INSERT INTO population VALUES " + ",".join(prows) + ";")
    sql("\n".join(stmts))
    return ids, "{" + ",".join(labels) + "}"


# ---------------------------------------------------------------- checks ---

def cheapest_offers_oracle(table, key_type, k):
    """cheapest_offers of a table of product_key, store_key, price in plain SQL: ties by store_key's byte order,
    then the fewer decimals (7 before 7.0)."""
    order = "" if key_type == "uuid" else ' COLLATE "C"'
    key_sql = "uuid" if key_type == "uuid" else "text"
    return sql(f"""
SELECT product_key::{key_sql}, r, store_key::{key_sql}, price, n FROM (
  SELECT product_key, store_key, price,
         row_number() OVER (PARTITION BY product_key ORDER BY price, store_key::{key_sql}{order}, scale(price)) AS r,
         count(*) OVER (PARTITION BY product_key) AS n
  FROM {table} WHERE product_key IS NOT NULL AND store_key IS NOT NULL AND price IS NOT NULL) o
WHERE r <= {k} ORDER BY product_key::{key_sql}{order}, r""")


def check_marketplace(key_type, devices):
    ids = make_marketplace(key_type)
    k = rng.randint(1, 4)
    id_type = f"NULL::{'uuid' if key_type == 'uuid' else 'text'}"
    offers_k = lit("SELECT product_key AS product_id, store_key AS store_id, price FROM offers")
    offers_i = lit("SELECT product_int AS product_id, store_int AS store_id, price FROM offers")
    carts_k = lit("SELECT cart_key AS cart_id, product_key AS product_id, store_key AS store_id, quantity FROM carts")
    carts_i = lit("SELECT cart_int AS cart_id, product_int AS product_id, store_int AS store_id, quantity FROM carts")
    ship_k = lit("SELECT store_key AS store_id, fee, free_from FROM shipping")
    ship_i = lit("SELECT store_int AS store_id, fee, free_from FROM shipping")
    oracle = cheapest_offers_oracle("offers", key_type, k)
    for device in devices:
        s = {"gpurec.device": device}
        name = f"{key_type} {device}"
        typed = sql(f"SELECT product_id, offer_rank, store_id, price, n_offers FROM gpurec.cheapest_offers("
                    f"{offers_k}, {k}, {id_type})", settings=s)
        check(f"cheapest_offers {name}: plain SQL, ties by store_id in the key's byte order", typed == oracle,
              f"{len(typed)} rows, expected {len(oracle)}; first {typed[:3]} against {oracle[:3]}")
        integer = sql(f"SELECT product_id, offer_rank, store_id, price, n_offers FROM gpurec.cheapest_offers("
                      f"{offers_i}, {k})", settings=s)
        compare(f"cheapest_offers {name}: as on integer ids", typed, integer,
                {0: "product_id", 2: "store_id"}, ids)
        typed = sql(f"SELECT * FROM gpurec.improve_carts({carts_k}, {offers_k}, {id_type})", settings=s)
        integer = sql(f"SELECT * FROM gpurec.improve_carts({carts_i}, {offers_i})", settings=s)
        compare(f"improve_carts {name}: as on integer ids", typed, integer,
                {0: "cart_id", 1: "product_id", 3: "store_id", 5: "store_id"}, ids, ordered=False)
        typed = sql(f"SELECT * FROM gpurec.optimize_carts({carts_k}, {offers_k}, {ship_k}, {id_type})", settings=s)
        integer = sql(f"SELECT * FROM gpurec.optimize_carts({carts_i}, {offers_i}, {ship_i})", settings=s)
        compare(f"optimize_carts {name}: as on integer ids (rows in cart_id, product_id order)", typed, integer,
                {0: "cart_id", 1: "product_id", 3: "store_id"}, ids)
    # one kind of id per name across a call's queries
    err = sql_error(f"SELECT * FROM gpurec.improve_carts({carts_k}, {offers_i}, {id_type})")
    check(f"improve_carts {key_type}: product_id {key_type} in the carts, bigint in the offers is 42804",
          err is not None and err[0] == "42804" and "product_id" in err[1], str(err))
    err = sql_error(f"SELECT * FROM gpurec.cheapest_offers({offers_k}, 1)")
    check(f"cheapest_offers {key_type}: without id_type (bigint) is 42804 naming the ids",
          err is not None and err[0] == "42804" and "product_id" in err[1], str(err))
    other = "NULL::text" if key_type == "uuid" else "NULL::uuid"
    err = sql_error(f"SELECT * FROM gpurec.cheapest_offers({offers_k}, 1, {other})")
    check(f"cheapest_offers {key_type}: id_type of the other kind is 42804", err is not None and err[0] == "42804",
          str(err))
    err = sql_error(f"SELECT gpurec_internal._cheapest_offers_part({offers_k}, 1)")
    check(f"_cheapest_offers_part {key_type}: shards take integer ids (0A000)", err is not None and err[0] == "0A000",
          str(err))
    rows = sql(f"SELECT count(*) FROM gpurec.cheapest_offers({offers_k}, NULL, {id_type})")
    check(f"cheapest_offers {key_type}: a NULL k gives no rows, as STRICT would", rows == [["0"]], str(rows))


def check_geo(key_type, devices):
    ids = make_points(key_type)
    id_type = f"NULL::{'uuid' if key_type == 'uuid' else 'text'}"
    points_k = lit("SELECT user_key AS user_id, x, y FROM points")
    points_i = lit("SELECT user_int AS user_id, x, y FROM points")
    cands_k = lit("SELECT candidate_key AS candidate_id, x, y FROM candidates ORDER BY x, y, candidate_int")
    cands_i = lit("SELECT candidate_int AS candidate_id, x, y FROM candidates ORDER BY x, y, candidate_int")
    hold_k = lit("SELECT user_key AS user_id, candidate_key AS candidate_id FROM holdout")
    hold_i = lit("SELECT user_int AS user_id, candidate_int AS candidate_id FROM holdout")
    main_key = rng.choice(ids["user_id"].keys)
    main_int = ids["user_id"].integer[main_key]
    main = f"{quote(main_key)}::{'uuid' if key_type == 'uuid' else 'text'}"
    k = rng.randint(1, 5)
    metric = rng.choice(["euclidean", "haversine"])
    for device in devices:
        s = {"gpurec.device": device}
        name = f"{key_type} {device} {metric}"
        typed = sql(f"SELECT * FROM gpurec.similar_users({points_k}, {k}, '{metric}', NULL, {id_type})", settings=s)
        integer = sql(f"SELECT * FROM gpurec.similar_users({points_i}, {k}, '{metric}')", settings=s)
        compare(f"similar_users {name}: as on integer ids (ties by other_user_id in the key's order)", typed,
                integer, {0: "user_id", 2: "user_id"}, ids)
        typed = sql(f"SELECT * FROM gpurec.user_similarity({points_k}, {main}, '{metric}', NULL, {id_type})",
                    settings=s)
        integer = sql(f"SELECT * FROM gpurec.user_similarity({points_i}, {main_int}, '{metric}')", settings=s)
        compare(f"user_similarity {name}: as on integer ids", typed, integer, {0: "user_id"}, ids)
        typed = sql(f"SELECT * FROM gpurec.predict_strength({points_k}, {main}, {cands_k}, 2, NULL, 0, '{metric}', "
                    f"NULL, {id_type})", settings=s)
        integer = sql(f"SELECT * FROM gpurec.predict_strength({points_i}, {main_int}, {cands_i}, metric => '{metric}')",
                      settings=s)
        compare(f"predict_strength {name}: as on integer ids, in input order", typed, integer,
                {0: "candidate_id"}, ids)
        typed = sql(f"SELECT * FROM gpurec.fit_exponent({points_k}, {hold_k}, {cands_k}, metric => '{metric}')",
                    settings=s)
        integer = sql(f"SELECT * FROM gpurec.fit_exponent({points_i}, {hold_i}, {cands_i}, metric => '{metric}')",
                      settings=s)
        compare(f"fit_exponent {name}: as on integer ids", typed, integer, {}, ids)
    missing = "'00000000-0000-0000-0000-00000000abcd'::uuid" if key_type == "uuid" else "'no such user'::text"
    if missing.split("'")[1] not in ids["user_id"].keys:
        err = sql_error(f"SELECT * FROM gpurec.user_similarity({points_k}, {missing}, 'euclidean', NULL, {id_type})")
        check(f"user_similarity {key_type}: a main_user without points is 22023 naming it",
              err is not None and err[0] == "22023" and missing.split("'")[1] in err[1], str(err))
        hold_missing = lit(f"SELECT {missing} AS user_id, candidate_key AS candidate_id FROM candidates")
        for device in devices:
            err = sql_error(f"SELECT * FROM gpurec.fit_exponent({points_k}, {hold_missing}, {cands_k})",
                            settings={"gpurec.device": device})
            check(f"fit_exponent {key_type} {device}: a holdout user without points is 22023 naming its own id",
                  err is not None and err[0] == "22023"
                  and f"holdout user {missing.split(chr(39))[1]} has no points" in err[1], str(err))
    err = sql_error(f"SELECT * FROM gpurec.user_similarity({points_k}, 1)")
    check(f"user_similarity {key_type}: a bigint main_user with {key_type} user ids is 42804",
          err is not None and err[0] == "42804", str(err))


def check_roc(key_type, devices):
    ids, labels = make_scores(key_type)
    id_type = f"NULL::{'uuid' if key_type == 'uuid' else 'text'}"
    for device in devices:
        s = {"gpurec.device": device}
        name = f"{key_type} {device}"
        typed = sql("SELECT * FROM gpurec.roc_fitness("
                    + lit("SELECT individual_key AS individual_id, label, score FROM scores") + f", NULL, {id_type})",
                    settings=s)
        integer = sql("SELECT * FROM gpurec.roc_fitness("
                      + lit("SELECT individual_int AS individual_id, label, score FROM scores") + ")", settings=s)
        compare(f"roc_fitness scores {name}: as on integer ids", typed, integer, {0: "individual_id"}, ids)
        typed = sql("SELECT * FROM gpurec.roc_fitness("
                    + lit("SELECT individual_key AS individual_id, scores FROM population") + f", '{labels}', {id_type})",
                    settings=s)
        integer = sql("SELECT * FROM gpurec.roc_fitness("
                      + lit("SELECT individual_int AS individual_id, scores FROM population") + f", '{labels}')",
                      settings=s)
        compare(f"roc_fitness population {name}: as on integer ids", typed, integer, {0: "individual_id"}, ids,
                ordered=False)
        # the typed form takes the labels of every type roc_fitness(query, labels) takes: integers 0 and 1
        label_type = rng.choice(["smallint", "integer", "bigint"])
        numbers = labels.replace("t", "1").replace("f", "0")
        as_integers = sql("SELECT * FROM gpurec.roc_fitness("
                          + lit("SELECT individual_key AS individual_id, scores FROM population")
                          + f", '{numbers}'::{label_type}[], {id_type})", settings=s)
        check(f"roc_fitness population {name}: {label_type} labels 0 and 1 give the boolean labels' rows",
              sorted(as_integers) == sorted(typed), f"{first_difference(sorted(as_integers), sorted(typed))}")


def check_integers_typed(devices):
    """The typed forms on integer ids: the ids come back in id_type (smallint, integer), beyond its range 22003."""
    sql("""DROP TABLE IF EXISTS small; CREATE TABLE small (product_id smallint, store_id int, price int);
INSERT INTO small VALUES (1, 7, 3), (1, 8, 3), (2, 70000, 1);""")
    rows = sql("SELECT pg_typeof(product_id)::text, product_id, store_id FROM gpurec.cheapest_offers("
               + lit("SELECT product_id, store_id::smallint AS store_id, price FROM small WHERE store_id < 100")
               + ", 2, NULL::smallint)")
    check("cheapest_offers: id_type smallint returns smallint ids", rows == [["smallint", "1", "7"], ["smallint", "1", "8"]],
          str(rows))
    err = sql_error("SELECT * FROM gpurec.cheapest_offers(" + lit("SELECT * FROM small") + ", 2, NULL::smallint)")
    check("cheapest_offers: an id beyond id_type's range is 22003", err is not None and err[0] == "22003", str(err))


def check_domains(devices):
    """Ids returned as a domain hold to it, as a cast to it would: its CHECK (23514) and its varchar's length
    (22001) for every id, an id that fits coming back as the domain."""
    sql("""DROP TABLE IF EXISTS domain_offers; DROP DOMAIN IF EXISTS positive_id, short_sku, not_bad;
CREATE DOMAIN positive_id AS integer CHECK (VALUE > 0);
CREATE DOMAIN short_sku AS varchar(4);
CREATE DOMAIN not_bad AS text CHECK (VALUE <> 'bad');
CREATE TABLE domain_offers (product_int int, product_text text, store_id int, price numeric);""")
    n = rng.randint(3, 40)
    products = rng.sample(range(1, 1000), n)
    names = {p: "".join(rng.choice("abcé日") for _ in range(rng.randint(1, 4))) + str(p) for p in products}
    sql("INSERT INTO domain_offers VALUES " + ",".join(
        f"({p}, {quote(names[p])}, {rng.randint(1, 5)}, {rng.randint(1, 9)})" for p in products) + ";")
    fits = all(len(v) <= 4 for v in names.values())
    for device in devices:
        s = {"gpurec.device": device}
        rows = sql("SELECT pg_typeof(product_id)::text, count(*) FROM gpurec.cheapest_offers("
                   + lit("SELECT product_int AS product_id, store_id, price FROM domain_offers")
                   + ", 1, NULL::positive_id) GROUP BY 1", settings=s)
        check(f"domain {device}: ids that satisfy the domain come back as it", rows == [["positive_id", str(n)]],
              str(rows))
        err = sql_error("SELECT * FROM gpurec.cheapest_offers("
                        + lit("SELECT product_int - 500 AS product_id, store_id, price FROM domain_offers")
                        + ", 1, NULL::positive_id)", settings=s)
        negative = any(p <= 500 for p in products)
        check(f"domain {device}: an id that breaks the domain's CHECK is 23514",
              (err is not None and err[0] == "23514") if negative else err is None, str(err))
        err = sql_error("SELECT * FROM gpurec.cheapest_offers("
                        + lit("SELECT product_text AS product_id, store_id::text AS store_id, price FROM domain_offers")
                        + ", 1, NULL::short_sku)", settings=s)
        check(f"domain {device}: a text id longer than the domain's varchar(4) is 22001",
              err is None if fits else (err is not None and err[0] == "22001"), str(err))
        bad = rng.choice(products)
        err = sql_error("SELECT * FROM gpurec.cheapest_offers("
                        + lit(f"SELECT CASE WHEN product_int = {bad} THEN 'bad' ELSE product_text END AS product_id, "
                              "store_id::text AS store_id, price FROM domain_offers")
                        + ", 1, NULL::not_bad)", settings=s)
        check(f"domain {device}: a text id the domain's CHECK refuses is 23514", err is not None and err[0] == "23514",
              str(err))


FORCE = {"parallel_setup_cost": "0", "parallel_tuple_cost": "0", "min_parallel_table_scan_size": "0",
         "gpurec.timing": "on"}


def run_with_notices(query, settings):
    """(rows, notices) of query under settings."""
    prefix = "".join(f"SET {k} = '{v}';\n" for k, v in settings.items())
    proc = subprocess.run([PSQL, "-X", "-q", "--csv", "-P", "null=\\N", "-v", "ON_ERROR_STOP=1"],
                          input=prefix + query, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    return proc.stdout.splitlines()[1:], proc.stderr


def rows_as_sql(lines):
    """run_with_notices' CSV lines as sql() gives rows: lists of strings, None for NULL."""
    rows = csv.reader(io.StringIO("\n".join(lines)))
    return [[None if v == "\\N" else v for v in r] for r in rows]


def workers_read(notices):
    return sum(int(n) for n in re.findall(r"(\d+) of \d+ planned parallel workers", notices))


def check_parallel(key_type, devices):
    """Each process of a parallel read codes its own rows; the call's codes must come out as one read's."""
    ids = make_marketplace(key_type)
    # Random carts may all sit at their cheapest stores, and an empty answer
    # would agree with any read: one line always has a cheaper store.  0.5
    # is below every generated price, so only store s1 offers it.
    p = ids["product_id"].pick()
    s1, s2 = rng.sample(ids["store_id"].keys, 2)
    c = ids["cart_id"].pick()
    sql(f"""INSERT INTO offers VALUES ({p[0]}, {p[1]}, {quote(s1)}, {ids['store_id'].integer[s1]}, 0.5),
                          ({p[0]}, {p[1]}, {quote(s2)}, {ids['store_id'].integer[s2]}, 10);
INSERT INTO carts VALUES ({c[0]}, {c[1]}, {p[0]}, {p[1]}, {quote(s2)}, {ids['store_id'].integer[s2]}, 1);""")
    sql("""DROP TABLE IF EXISTS offers_big, points_big;
CREATE TABLE offers_big AS SELECT product_key, store_key, price + g % 7 AS price FROM offers, generate_series(1, 120) g;
ANALYZE offers_big;""")
    make_points(key_type)
    sql("""CREATE TABLE points_big AS SELECT user_key, x + g % 3 AS x, y FROM points, generate_series(1, 40) g;
ANALYZE points_big;""")
    id_type = f"NULL::{'uuid' if key_type == 'uuid' else 'text'}"
    k = rng.randint(1, 3)
    oracle = cheapest_offers_oracle("offers_big", key_type, k)
    big = "SELECT product_key AS product_id, store_key AS store_id, price FROM offers_big"
    calls = {
        "cheapest_offers, direct scan": f"SELECT * FROM gpurec.cheapest_offers({lit(big)}, {k}, {id_type})",
        "cheapest_offers, the query's parallel plan":
            f"SELECT * FROM gpurec.cheapest_offers({lit(big + ' UNION ALL ' + big)}, {k}, {id_type})",
        "improve_carts (the carts' ids first, then the offers' in parallel)":
            "SELECT * FROM gpurec.improve_carts("
            + lit("SELECT cart_key AS cart_id, product_key AS product_id, store_key AS store_id, quantity FROM carts")
            + f", {lit(big)}, {id_type}) ORDER BY 1, 2, 3, 4, 5, 6, 7",
        "optimize_carts (offers filtered by the carts' ids)":
            "SELECT * FROM gpurec.optimize_carts("
            + lit("SELECT cart_key AS cart_id, product_key AS product_id, store_key AS store_id, quantity FROM carts")
            + f", {lit(big)}, " + lit("SELECT store_key AS store_id, fee, free_from FROM shipping") + f", {id_type})",
        "similar_users": "SELECT * FROM gpurec.similar_users("
            + lit("SELECT user_key AS user_id, x, y FROM points_big") + f", 3, 'euclidean', NULL, {id_type})",
        # every coded column an id column: each process keeps its own codes, the parts rewritten by lane
        "similar_users, the query's parallel plan": "SELECT * FROM gpurec.similar_users("
            + lit("SELECT user_key AS user_id, x, y FROM points_big UNION ALL "
                  "SELECT user_key, y, x FROM points_big WHERE x > 0.5")
            + f", 3, 'euclidean', NULL, {id_type})",
    }
    for device in devices:
        for name, query in calls.items():
            serial, _ = run_with_notices(query, {"gpurec.parallel_workers": "0", "gpurec.device": device})
            for participation in ["off", "on"]:
                settings = dict(FORCE, **{"gpurec.device": device, "parallel_leader_participation": participation,
                                          "max_parallel_workers_per_gather": str(rng.randint(2, 4))})
                rows, notices = run_with_notices(query, settings)
                check(f"{name} {key_type} {device}, parallel read (leader participation {participation}): "
                      "the serial read's rows", rows == serial and len(rows) > 0,
                      f"{len(rows)} rows against {len(serial)}; NOTICE {notices.strip()[:500]}")
                if name == "cheapest_offers, direct scan":
                    check(f"{name} {key_type} {device}, parallel read (leader participation {participation}): "
                          "plain SQL, ties by store_id in the key's byte order across processes",
                          rows_as_sql(rows) == oracle, f"{len(rows)} rows, first {rows[:3]} against {oracle[:3]}")
                    if device == "cpu" and participation == "off":
                        check(f"{name} {key_type}: each process ranks its own share (partial results)",
                              "each process's partial result taken" in notices, notices.strip()[:600])
                if participation == "off" and "filtered" not in name:
                    check(f"{name} {key_type} {device}: workers read rows", workers_read(notices) > 0,
                          notices.strip()[:600])


def check_many_store_ties(key_type, devices):
    """A process ranks its share holding stores as they came and codes only those of the offers it keeps.

    Few products with their offers in random order over the whole table (so
    over every process's share and many pieces), hundreds of stores, two
    prices: most offers tie with a product's k-th cheapest on price, and
    the rank among them is the stores' key order, which each process must
    find among the stores it coded late.  Stores of every length class
    (text: empty, prefixes of one another, past 16 bytes; uuid: edges), a
    few NULL stores.  Against plain SQL, every device, leader on and off.
    """
    ids = Ids(key_type, rng.randint(150, 400))
    products = Ids(key_type, rng.randint(2, 5))
    t = sql_type(key_type, rng.random() < 0.4)
    rows = []
    for _ in range(rng.randint(3000, 6000)):
        p = products.pick(0.0)
        s = ids.pick(0.01)
        rows.append(f"({p[0]}, {s[0]}, {rng.choice(['7', '7.0', '8'])})")
    sql(f"""DROP TABLE IF EXISTS ties;
CREATE TABLE ties (product_key {t}, store_key {t}, price numeric);
INSERT INTO ties VALUES {",".join(rows)};
CREATE TABLE ties_big AS SELECT * FROM ties, generate_series(1, 8) g ORDER BY random();
ALTER TABLE ties_big DROP COLUMN g;
ANALYZE ties_big;""")
    id_type = f"NULL::{'uuid' if key_type == 'uuid' else 'text'}"
    for k in sorted({1, rng.randint(2, 6), 40}):
        oracle = cheapest_offers_oracle("ties_big", key_type, k)
        query = ("SELECT * FROM gpurec.cheapest_offers("
                 + lit("SELECT product_key AS product_id, store_key AS store_id, price FROM ties_big")
                 + f", {k}, {id_type})")
        for device in devices:
            for participation in ["off", "on"]:
                settings = dict(FORCE, **{"gpurec.device": device, "parallel_leader_participation": participation,
                                          "max_parallel_workers_per_gather": str(rng.randint(2, 4))})
                rows, notices = run_with_notices(query, settings)
                check(f"cheapest_offers {key_type} {device} k={k}, hundreds of stores tied on price, parallel read "
                      f"(leader participation {participation}): plain SQL, ties by the stores' key order",
                      rows_as_sql(rows) == oracle and len(rows) > 0,
                      f"{len(rows)} rows, first {rows[:3]} against {oracle[:3]}; NOTICE {notices.strip()[:400]}")
                if device == "cpu" and participation == "off":
                    check(f"cheapest_offers {key_type} k={k}, hundreds of stores: each process ranked its share",
                          "each process's partial result taken" in notices and workers_read(notices) > 0,
                          notices.strip()[:600])
    sql("DROP TABLE ties, ties_big")


def check_errors_name_keys(key_type, devices):
    """An error that names an id names it as the query gave it (the uuid or
    the text, never gpurec's code for it), and where several ids are at
    fault, the least in the key's byte order, as the integer call names the
    least integer (the integers stand for the keys in their order): a NaN
    coordinate of several users and of several candidates, a NaN price that
    is its store's best offer of several products in carts, a store listed
    twice in shipping, an individual twice in a population, a scores array
    of the wrong length."""
    cast = "uuid" if key_type == "uuid" else "text"
    id_type = f"NULL::{cast}"

    def expect(name, call_k, call_i, message, key, integer):
        """call_k raises 22023/21000 naming key (message % key), call_i the same naming integer."""
        for device in devices:
            s = {"gpurec.device": device}
            got_k = sql_error(call_k, settings=s)
            got_i = sql_error(call_i, settings=s)
            check(f"{name} {key_type} {device}: names {message % 'the least id'} by its {key_type}",
                  got_k is not None and got_k[1] == message % key, f"got {got_k}; want {message % key!r}")
            check(f"{name} {key_type} {device}: the integer call names the integer of that id",
                  got_i is not None and got_i[1] == message % integer, f"got {got_i}; want {message % integer!r}")

    # points: several users with a NaN coordinate, rows in random order
    users = Ids(key_type, rng.randint(4, 30))
    bad_users = rng.sample(users.keys, rng.randint(2, len(users.keys) - 1))
    rows = []
    for key in users.keys:
        for _ in range(rng.randint(1, 4)):
            rows.append((key, rng.randint(0, 9), rng.randint(0, 9)))
        if key in bad_users:
            rows.append((key, rng.choice(["'NaN'", "'Infinity'", "3"]), rng.choice(["'NaN'", "'-Infinity'"])))
    rng.shuffle(rows)
    sql("DROP TABLE IF EXISTS err_points, err_candidates; "
        f"CREATE TABLE err_points (user_key {cast}, user_int bigint, x float8, y float8); "
        f"CREATE TABLE err_candidates (candidate_key {cast}, candidate_int bigint, x float8, y float8); "
        "INSERT INTO err_points VALUES " + ",".join(
            f"({quote(k)}, {users.integer[k]}, {x}, {y})" for k, x, y in rows) + ";")
    least = byte_order(key_type, bad_users)[0]
    expect("similar_users", f"SELECT * FROM gpurec.similar_users({lit('SELECT user_key AS user_id, x, y FROM err_points')}, "
           f"2, 'euclidean', NULL, {id_type})",
           f"SELECT * FROM gpurec.similar_users({lit('SELECT user_int AS user_id, x, y FROM err_points')}, 2)",
           "a point of user %s has a non-finite coordinate", least, users.integer[least])
    # candidates: several with a NaN coordinate; the users' points all finite
    cands = Ids(key_type, rng.randint(3, 20))
    bad_cands = rng.sample(cands.keys, rng.randint(2, len(cands.keys)))
    sql("DELETE FROM err_points WHERE x = 'NaN' OR y = 'NaN' OR x = 'Infinity' OR y = '-Infinity'; "
        "INSERT INTO err_candidates VALUES " + ",".join(
            f"({quote(k)}, {cands.integer[k]}, {rng.randint(0, 9) if k not in bad_cands else chr(39) + 'NaN' + chr(39)}, "
            f"{rng.randint(0, 9)})" for k in rng.sample(cands.keys, len(cands.keys))) + ";")
    main = rng.choice(users.keys)
    least = byte_order(key_type, bad_cands)[0]
    expect("predict_strength",
           f"SELECT * FROM gpurec.predict_strength({lit('SELECT user_key AS user_id, x, y FROM err_points')}, "
           f"{quote(main)}::{cast}, {lit('SELECT candidate_key AS candidate_id, x, y FROM err_candidates')}, 2, NULL, 0, "
           f"'euclidean', NULL, {id_type})",
           f"SELECT * FROM gpurec.predict_strength({lit('SELECT user_int AS user_id, x, y FROM err_points')}, "
           f"{users.integer[main]}, {lit('SELECT candidate_int AS candidate_id, x, y FROM err_candidates')})",
           "a point of candidate %s has a non-finite coordinate", least, cands.integer[least])

    # offers: some (product, store) whose every offer is NaN, of products in carts
    products, stores, carts = Ids(key_type, rng.randint(3, 20)), Ids(key_type, rng.randint(2, 8)), \
        Ids(key_type, rng.randint(2, 10))
    offers, refused = [], []
    carted = rng.sample(products.keys, rng.randint(2, len(products.keys)))
    for p in products.keys:
        for st in rng.sample(stores.keys, rng.randint(1, len(stores.keys))):
            nan_only = rng.random() < 0.3
            prices = ["'NaN'"] * rng.randint(1, 2) if nan_only else [str(rng.randint(1, 9))] + ["'NaN'"] * rng.randint(0, 1)
            offers += [(p, st, price) for price in prices]
            if nan_only and p in carted:
                refused.append((p, st))
    if not refused:
        offers.append((carted[0], stores.keys[0], "'NaN'"))
        refused.append((carted[0], stores.keys[0]))
        offers = [o for o in offers if (o[0], o[1]) != refused[0] or o[2] == "'NaN'"]
    rng.shuffle(offers)
    line_carts = [rng.choice(carts.keys) for _ in carted]
    sql("DROP TABLE IF EXISTS err_offers, err_carts, err_shipping; "
        f"CREATE TABLE err_offers (product_key {cast}, product_int bigint, store_key {cast}, store_int bigint, "
        "price numeric); "
        f"CREATE TABLE err_carts (cart_key {cast}, cart_int bigint, product_key {cast}, product_int bigint); "
        f"CREATE TABLE err_shipping (store_key {cast}, store_int bigint, fee numeric); "
        "INSERT INTO err_offers VALUES " + ",".join(
            f"({quote(p)}, {products.integer[p]}, {quote(st)}, {stores.integer[st]}, {price})" for p, st, price in offers)
        + "; INSERT INTO err_carts VALUES " + ",".join(
            f"({quote(c)}, {carts.integer[c]}, {quote(p)}, {products.integer[p]})" for c, p in zip(line_carts, carted))
        + ";")
    rank = {k: i for i, k in enumerate(byte_order(key_type, products.keys))}
    srank = {k: i for i, k in enumerate(byte_order(key_type, stores.keys))}
    p, st = min(refused, key=lambda r: (rank[r[0]], srank[r[1]]))
    typed = ("SELECT * FROM gpurec.optimize_carts({}, {}, {}, " + id_type + ")").format(
        lit("SELECT cart_key AS cart_id, product_key AS product_id FROM err_carts"),
        lit("SELECT product_key AS product_id, store_key AS store_id, price FROM err_offers"),
        lit("SELECT store_key AS store_id, fee FROM err_shipping"))
    integer = "SELECT * FROM gpurec.optimize_carts({}, {}, {})".format(
        lit("SELECT cart_int AS cart_id, product_int AS product_id FROM err_carts"),
        lit("SELECT product_int AS product_id, store_int AS store_id, price FROM err_offers"),
        lit("SELECT store_int AS store_id, fee FROM err_shipping"))
    expect("optimize_carts", typed, integer, "the price of product %s is not a finite number",
           f"{p} at store {st}", f"{products.integer[p]} at store {stores.integer[st]}")
    # shipping: stores twice, in random order (the offers all finite now)
    twice = rng.sample(stores.keys, rng.randint(1, len(stores.keys)))
    listed = stores.keys + twice
    rng.shuffle(listed)
    sql("UPDATE err_offers SET price = 1 WHERE price = 'NaN'; INSERT INTO err_shipping VALUES " + ",".join(
        f"({quote(k)}, {stores.integer[k]}, 1)" for k in listed) + ";")
    least = byte_order(key_type, twice)[0]
    expect("optimize_carts shipping", typed, integer, "the shipping query lists store %s more than once",
           least, stores.integer[least])

    # population: individuals twice, and arrays of the wrong length
    people = Ids(key_type, rng.randint(3, 20))
    twice = rng.sample(people.keys, rng.randint(1, len(people.keys) - 1))
    rows = [(k, "{1,2}") for k in people.keys + twice]
    rng.shuffle(rows)
    sql("DROP TABLE IF EXISTS err_population; "
        f"CREATE TABLE err_population (individual_key {cast}, individual_int bigint, scores real[]); "
        "INSERT INTO err_population VALUES " + ",".join(
            f"({quote(k)}, {people.integer[k]}, '{a}')" for k, a in rows) + ";")
    least = byte_order(key_type, twice)[0]
    typed = ("SELECT * FROM gpurec.roc_fitness("
             + lit("SELECT individual_key AS individual_id, scores FROM err_population") + f", '{{t,f}}', {id_type})")
    integer = ("SELECT * FROM gpurec.roc_fitness("
               + lit("SELECT individual_int AS individual_id, scores FROM err_population") + ", '{t,f}')")
    expect("roc_fitness", typed, integer, "individual %s appears more than once", least, people.integer[least])
    short = rng.sample(people.keys, rng.randint(1, len(people.keys)))
    sql("DELETE FROM err_population; INSERT INTO err_population VALUES " + ",".join(
        f"({quote(k)}, {people.integer[k]}, '{{1,2{',3' if k in short else ''}}}')"
        for k in rng.sample(people.keys, len(people.keys))) + ";")
    least = byte_order(key_type, short)[0]
    expect("roc_fitness", typed, integer, "the scores of individual %s have 3 elements, the labels 2", least,
           people.integer[least])


def main():
    devices = fresh_database(DB)
    sql("CREATE DOMAIN uuid_id AS uuid CHECK (VALUE IS NOT NULL OR true); CREATE DOMAIN text_id AS varchar(200);")
    for key_type in ["uuid", "text"]:
        check_marketplace(key_type, devices)
        check_geo(key_type, devices)
        check_roc(key_type, devices)
        check_parallel(key_type, devices)
        check_many_store_ties(key_type, devices)
        check_errors_name_keys(key_type, devices)
    check_integers_typed(devices)
    check_domains(devices)
    drop_database(DB)


if __name__ == "__main__":
    main()
