#!/usr/bin/env python3
"""gpurec_shards against one server holding every row.

Starts three throwaway clusters on Unix sockets (test/cluster.sh).  Cluster
1 holds the coordinator database (gpurec_shards, PL/Proxy's clusters as
foreign servers, the candidates and holdout tables) and the reference
database `whole` with every row.  Two PL/Proxy clusters are tested, each
with shard databases of its own spread over the three servers: `two`
(partitions on servers 1 and 2) and `four` (servers 1, 2, 3 and 3), as
PL/Proxy wants a power of two.  Fresh random data (seed
printed; GPUREC_SEED replays) with ties, NULLs and mixed decimals is sharded
by its key and, for the offers, by a column that is not the key; every
function's distributed answer must equal the single server's, row for row
and bit for bit (predict_strength and fit_exponent: within 1e-9 relative,
their sums being added in another order); shards that answer no rows;
gpurec.cpu_threads honoured, on a shard and through the partitions' connect
strings, with the same answers; query texts that end with a comment or a
semicolon; values at the edges (float8 prices that differ in the 17th
digit, tiny, huge, NaN and infinite ones, numerics of scales 0 to 4, 64-bit
ids at both ends); a NULL cluster.  Then faults: data split across
partitions for every function it matters to, the setup for a role that is
not a superuser with passwords (no USAGE, no user mapping, no password, a
wrong one), a partition whose query fails, cancel and statement_timeout
while the partitions work, a partition's server stopped during a call and
before one.
"""
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "property"))
from pgtest import check, first_difference, seeded_random, skip  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.environ.get("GPUREC_SHARDS_DIR", "/tmp/gpurec-shards")
HOSTS = [f"{BASE}-{i}" for i in (1, 2, 3)]
# each PL/Proxy cluster's partitions, in partition order: (server, database)
CLUSTERS = {
    "two": [(HOSTS[0], "two_0"), (HOSTS[1], "two_1")],
    "four": [(HOSTS[0], "four_0"), (HOSTS[1], "four_1"), (HOSTS[2], "four_2"), (HOSTS[2], "four_3")],
}
PSQL = os.environ.get("PSQL", "psql")
DEVICE = os.environ.get("GPUREC_DEVICE")


def run(host, db, query, check_rc=True, user="postgres", password=None):
    env = dict(os.environ, PGHOST=host, PGDATABASE=db, PGUSER=user)
    if password:
        env["PGPASSWORD"] = password
    if DEVICE:
        env["PGOPTIONS"] = f"-c gpurec.device={DEVICE}"
    proc = subprocess.run([PSQL, "-X", "-q", "-A", "-t", "-F", "|", "-v", "ON_ERROR_STOP=1",
                           "-v", "VERBOSITY=verbose", "-P", "null=<null>"],
                          input="\\set VERBOSITY verbose\n" + query, capture_output=True, text=True, env=env)
    if check_rc and proc.returncode != 0:
        raise RuntimeError(f"psql on {host}/{db} failed: {proc.stderr.strip()[:1500]}\nquery: {query[:300]}")
    return proc


def rows(host, db, query):
    out = run(host, db, query).stdout
    return [line for line in out.splitlines() if line]


def error_of(host, db, query, settings="", **login):
    """(sqlstate, message, seconds) of the error query raises, or None."""
    started = time.monotonic()
    proc = run(host, db, settings + query, check_rc=False, **login)
    took = time.monotonic() - started
    for line in proc.stderr.splitlines():
        if line.startswith("ERROR:"):
            parts = line.split(":", 2)
            return parts[1].strip(), parts[2].strip(), took
    return None


def copy_rows(host, db, table, data):
    body = "\n".join("\t".join("\\N" if v is None else str(v) for v in row) for row in data)
    run(host, db, f"COPY {table} FROM STDIN;\n{body}\n\\.\n")


COORD = (HOSTS[0], "coord")
WHOLE = (HOSTS[0], "whole")
ALL_SHARD_DBS = [db for parts in CLUSTERS.values() for db in parts]
# the cluster of the merge, settings, view and fault checks
SHARDS = "'four'"
SHARD_DBS = CLUSTERS["four"]

TABLES = """
CREATE TABLE offers (product_id integer, store_id bigint, price numeric);
CREATE TABLE carts (cart_id bigint, product_id bigint, store_id bigint, quantity integer);
CREATE TABLE scores (individual_id bigint, label boolean, score float8);
CREATE TABLE population (individual_id bigint, scores real[]);
CREATE TABLE points (user_id bigint, x numeric, y float8);
CREATE TABLE geo_points (user_id bigint, x float8, y float8);
"""


def make_data(rnd):
    data = {}
    offers = []
    for _ in range(3000):
        price = rnd.choice([f"{rnd.randint(0, 40) / 4:.2f}", str(rnd.randint(0, 10)),
                            f"{rnd.randint(0, 400) / 40:.3f}", f"{rnd.randint(0, 10)}.5"])
        offers.append([rnd.choice([None] + list(range(60)) * 20), rnd.randint(1, 25), price])
    offers += [[7, 3, "2.5"], [7, 3, "2.50"], [7, 3, "2.500"], [7, 4, "2.5"], [7, 3, "2.5"]]
    offers += [[8, None, "1"], [8, 2, None]]
    data["offers"] = offers
    carts = []
    for cart in range(1, 121):
        for _ in range(rnd.randint(1, 6)):
            carts.append([cart, rnd.choice(list(range(64)) + [None]), rnd.choice([rnd.randint(1, 25), 99, None]),
                          rnd.choice([1, 2, 3, None])])
    carts.append([None, 3, 4, 1])
    data["carts"] = carts
    scores = []
    for ind in range(1, 61):
        for ex in range(rnd.randint(0, 40)):
            scores.append([ind, rnd.choice([True, False, None]),
                           rnd.choice([round(rnd.random(), 2), rnd.randint(0, 3), None, float("nan")])])
    data["scores"] = scores
    labels = [rnd.choice(["t", "f", None]) for _ in range(25)]
    population = []
    for ind in range(1, 51):
        arr = [rnd.choice([str(round(rnd.random(), 2)), str(rnd.randint(0, 2)), "NULL"]) for _ in labels]
        population.append([ind, "{" + ",".join(arr) + "}" if rnd.random() > 0.05 else None])
    data["population"] = population
    data["labels"] = "{" + ",".join(v or "NULL" for v in labels) + "}"
    points = []
    for user in range(1, 81):
        for _ in range(rnd.randint(1, 8)):
            points.append([user, rnd.choice([f"{rnd.uniform(-50, 50):.3f}", str(rnd.randint(-5, 5))]),
                           rnd.choice([round(rnd.uniform(-50, 50), 4), 0.0, -0.0])])
    points.append([None, "1", 1.0])
    points.append([5, None, 2.0])
    data["points"] = points
    geo = []
    for user in range(1, 41):
        for _ in range(rnd.randint(1, 6)):
            geo.append([user, round(rnd.uniform(-180, 180), 5), round(rnd.uniform(-89, 89), 5)])
    data["geo_points"] = geo
    return data


def shard_of(rnd, n, row, by_key):
    """The partition of a row whose key is its first column."""
    if not by_key:
        return rnd.randrange(n)
    k = row[0]
    return 0 if k is None else int(k) % n


def load(rnd, data, by_key, cluster):
    """Shards the tables over the cluster's partitions (offers by product or
    at random; the rest by their key)."""
    dbs = CLUSTERS[cluster]
    for host, db in dbs:
        run(host, db, "TRUNCATE offers, carts, scores, population, points, geo_points;")
    for table in ("offers", "carts", "scores", "population", "points", "geo_points"):
        parts = [[] for _ in dbs]
        for row in data[table]:
            parts[shard_of(rnd, len(dbs), row, by_key or table != "offers")].append(row)
        for (host, db), part in zip(dbs, parts):
            copy_rows(host, db, table, part)
    for host, db in dbs:
        run(host, db, "ANALYZE;")


def setup():
    for host in HOSTS:
        subprocess.run([os.path.join(ROOT, "test", "cluster.sh"), "start", host, "-c", "max_connections=40",
                        "-c", "jit=off"], check=True, stdout=subprocess.DEVNULL)
    for host, db in ALL_SHARD_DBS:
        run(host, "postgres", f"CREATE DATABASE {db};")
        run(host, db, "CREATE EXTENSION gpurec;" + TABLES)
    run(HOSTS[0], "postgres", "CREATE DATABASE coord; CREATE DATABASE whole;")
    run(*WHOLE, "CREATE EXTENSION gpurec;" + TABLES)
    servers = "".join(
        f"CREATE SERVER {name} FOREIGN DATA WRAPPER plproxy OPTIONS ("
        + ", ".join(f"p{i} '{connstr(h, db)}'" for i, (h, db) in enumerate(dbs)) + ");"
        f"CREATE USER MAPPING FOR CURRENT_USER SERVER {name} OPTIONS (user 'postgres');"
        for name, dbs in CLUSTERS.items())
    shipping = "CREATE TABLE shipping (store_id bigint, fee numeric, free_from numeric);" \
        "INSERT INTO shipping SELECT s, (s % 4) * 1.5, CASE s % 3 WHEN 0 THEN NULL WHEN 1 THEN 20 + s ELSE 'Infinity'::numeric END " \
        "FROM generate_series(1, 25, 2) s;"
    run(*WHOLE, shipping)
    run(*COORD, "CREATE EXTENSION gpurec_shards CASCADE;" + servers + shipping +
        "CREATE TABLE candidates (candidate_id bigint, x float8, y numeric);"
        "CREATE TABLE holdout (user_id bigint, candidate_id bigint);")


def connstr(host, db, extra=""):
    """A partition's connect string (in a server option, its quotes doubled)."""
    return f"host={host} dbname={db}{extra}"


def teardown():
    for host in HOSTS:
        subprocess.run([os.path.join(ROOT, "test", "cluster.sh"), "stop", host], stdout=subprocess.DEVNULL)


def compare(name, local_call, shard_call, tolerance=None, where=COORD):
    try:
        want = rows(*WHOLE, f"SELECT * FROM {local_call};")
    except RuntimeError as e:
        check(name, False, f"the single server failed: {e}")
        return
    try:
        got = rows(*where, f"SELECT * FROM {shard_call};")
    except RuntimeError as e:
        check(name, False, str(e))
        return
    if tolerance is None:
        check(name, got == want and len(want) > 0, first_difference(got, want) if got != want else "no rows")
        return
    ok = len(got) == len(want) and len(want) > 0
    why = first_difference(got, want) if not ok else ""
    for g, w in zip(got, want):
        for a, b in zip(g.split("|"), w.split("|")):
            if a == b:
                continue
            try:
                fa, fb = float(a), float(b)
            except ValueError:
                ok, why = False, f"{g} != {w}"
                break
            if abs(fa - fb) > tolerance * max(abs(fa), abs(fb)):
                ok, why = False, f"{g} != {w} beyond {tolerance} relative"
    check(name, ok, why)


def functional(rnd, data, by_key, cluster):
    tag = ("by-key" if by_key else "offers-not-by-key") + f"-{cluster}"
    load(rnd, data, by_key, cluster)
    SHARDS = f"'{cluster}'"  # noqa: N806 (the module's name for the cluster argument)
    for k in (1, 2, 5):
        compare(f"cheapest-offers-k{k}-{tag}",
                f"gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', {k})",
                f"gpurec_shards.cheapest_offers({SHARDS}, 'SELECT product_id, store_id, price FROM offers', {k})")
    compare(f"cheapest-offers-float-prices-{tag}",
            "gpurec.cheapest_offers('SELECT product_id, store_id, price::float8 / 3 AS price FROM offers', 3)",
            f"gpurec_shards.cheapest_offers({SHARDS}, 'SELECT product_id, store_id, price::float8 / 3 AS price FROM offers', 3)")
    compare(f"improve-carts-{tag}",
            "gpurec.improve_carts('SELECT * FROM carts', 'SELECT * FROM offers')",
            f"gpurec_shards.improve_carts({SHARDS}, 'SELECT * FROM carts', 'SELECT * FROM offers')")
    # shipping lives on the coordinator (and, for the reference, in `whole`)
    for shipping in ("SELECT * FROM shipping", "SELECT store_id, fee FROM shipping"):
        compare(f"optimize-carts-{tag}-{'free-from' if '*' in shipping else 'fees-only'}",
                f"gpurec.optimize_carts('SELECT * FROM carts', 'SELECT * FROM offers', '{shipping}')",
                f"gpurec_shards.optimize_carts({SHARDS}, 'SELECT * FROM carts', 'SELECT * FROM offers', '{shipping}')")
    if not by_key:
        return
    # products that are all on the first partition: the others answer no rows
    n = len(CLUSTERS[cluster])
    compare(f"cheapest-offers-shards-without-rows-{cluster}",
            f"gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers WHERE product_id % {n} = 0', 2)",
            f"gpurec_shards.cheapest_offers({SHARDS}, "
            f"'SELECT product_id, store_id, price FROM offers WHERE product_id % {n} = 0', 2)")
    compare(f"roc-fitness-long-{cluster}", "gpurec.roc_fitness('SELECT * FROM scores')",
            f"gpurec_shards.roc_fitness({SHARDS}, 'SELECT * FROM scores')")
    labels = data["labels"]
    compare(f"roc-fitness-arrays-{cluster}", f"gpurec.roc_fitness('SELECT * FROM population', '{labels}')",
            f"gpurec_shards.roc_fitness({SHARDS}, 'SELECT * FROM population', '{labels}')")
    compare(f"roc-auc-{cluster}", f"(SELECT individual_id, gpurec.roc_auc(scores, '{labels}') FROM population "
            "WHERE scores IS NOT NULL ORDER BY 1) AS t",
            f"gpurec_shards.roc_auc({SHARDS}, 'SELECT * FROM population', '{labels}')")
    for main in (5, 17, 42):
        compare(f"user-similarity-main{main}-{cluster}", f"gpurec.user_similarity('SELECT * FROM points', {main})",
                f"gpurec_shards.user_similarity({SHARDS}, 'SELECT * FROM points', {main})")
    compare(f"user-similarity-haversine-{cluster}",
            "gpurec.user_similarity('SELECT * FROM geo_points', 7, 'haversine', 25)",
            f"gpurec_shards.user_similarity({SHARDS}, 'SELECT * FROM geo_points', 7, 'haversine', 25)")
    for k in (1, 3, 100):
        compare(f"similar-users-k{k}-{cluster}", f"gpurec.similar_users('SELECT * FROM points', {k})",
                f"gpurec_shards.similar_users({SHARDS}, 'SELECT * FROM points', {k})")
    compare(f"similar-users-haversine-{cluster}", "gpurec.similar_users('SELECT * FROM geo_points', 4, 'haversine')",
            f"gpurec_shards.similar_users({SHARDS}, 'SELECT * FROM geo_points', 4, 'haversine')")
    # candidates and holdout live on the coordinator (and, for the
    # reference, in `whole`)
    cands = [[rnd.randint(1, 30), round(rnd.uniform(-50, 50), 3), f"{rnd.uniform(-50, 50):.2f}"] for _ in range(40)]
    cands += [[None, 1.0, "1"], [3, None, "2"]]
    holdout = [[rnd.randint(1, 80), rnd.choice([rnd.randint(1, 30), 999])] for _ in range(60)]
    for host, db in (COORD, WHOLE):
        run(host, db, "DROP TABLE IF EXISTS candidates, holdout;"
            "CREATE TABLE candidates (candidate_id bigint, x float8, y numeric);"
            "CREATE TABLE holdout (user_id bigint, candidate_id bigint);")
        copy_rows(host, db, "candidates", cands)
        copy_rows(host, db, "holdout", holdout)
    for args in ("2", "1.5, 30, 0.01", "3, NULL, 0"):
        compare(f"predict-strength-{args.replace(', ', '-')}-{cluster}",
                f"gpurec.predict_strength('SELECT * FROM points', 12, 'SELECT * FROM candidates', {args})",
                f"gpurec_shards.predict_strength({SHARDS}, 'SELECT * FROM points', 12, "
                f"'SELECT * FROM candidates', {args})", tolerance=1e-9)
    # the grid and the continuous search (the default tolerance, a coarse
    # one, none), every column
    for tolerance in ("DEFAULT", "0.05", "NULL"):
        args = f"'{{1,2,2,0.5}}', tolerance => {tolerance}" if tolerance != "DEFAULT" else "'{1,2,2,0.5}'"
        compare(f"fit-exponent-tolerance-{tolerance.lower()}-{cluster}",
                f"gpurec.fit_exponent('SELECT * FROM points', 'SELECT * FROM holdout', 'SELECT * FROM candidates', "
                f"{args})",
                f"gpurec_shards.fit_exponent({SHARDS}, 'SELECT * FROM points', 'SELECT * FROM holdout', "
                f"'SELECT * FROM candidates', {args})", tolerance=1e-9)
    compare(f"fit-exponent-max-distance-{cluster}",
            "gpurec.fit_exponent('SELECT * FROM points', 'SELECT * FROM holdout', 'SELECT * FROM candidates', "
            "'{3,1,2}', 30, 0.01, tolerance => 0.01)",
            f"gpurec_shards.fit_exponent({SHARDS}, 'SELECT * FROM points', 'SELECT * FROM holdout', "
            "'SELECT * FROM candidates', '{3,1,2}', 30, 0.01, tolerance => 0.01)", tolerance=1e-9)
    for tolerance in ("0", "'NaN'", "-1"):
        e = error_of(*COORD, f"SELECT * FROM gpurec_shards.fit_exponent({SHARDS}, 'SELECT * FROM points', "
                     f"'SELECT * FROM holdout', 'SELECT * FROM candidates', tolerance => {tolerance});")
        check(f"fit-exponent-tolerance-{tolerance.strip(chr(39))}-22023-{cluster}",
              e is not None and e[0] == "22023" and "tolerance" in e[1], f"got {e}")


def merge(rnd):
    """cheapest_offers' merge in gpurec (_cheapest_offers_part on every
    shard, _merge_cheapest_offers on the coordinator), on fresh offers of
    their own, dealt at random to the first two shards, the third holding
    none: numerics of mixed scales with ties on price and store spelled 4.5
    and 4.50, special values, NULL prices and ids skipped, duplicates; every
    price type; k beyond a product's offers.  The answer must be the single
    server's, row for row.  Bad parts are errors with a SQLSTATE."""
    rows = []
    for _ in range(3000):
        tenths = rnd.randint(-10, 120)
        price = rnd.choice([f"{tenths / 10:.1f}", f"{tenths / 10:.2f}", f"{tenths / 10:.3f}", str(tenths // 10),
                            f"{rnd.randint(0, 4000) / 1000:.3f}"])
        if rnd.random() < 0.02:
            price = rnd.choice(["NaN", "Infinity", "-Infinity", None])
        rows.append([rnd.choice([None] + list(range(1, 400))), rnd.choice([None] + list(range(1, 9))), price])
    rows += [[1000, 3, "2.5"], [1000, 3, "2.50"], [1000, 3, "2.500"], [1000, 2, "2.50"], [1000, 3, "2.5"]]
    rows += rows[:50]  # exact duplicates, likely on the other shard
    table = "CREATE TABLE IF NOT EXISTS merge_offers (product_id bigint, store_id bigint, price numeric);" \
            "TRUNCATE merge_offers;"
    for host, db in SHARD_DBS + [WHOLE]:
        run(host, db, table)
    copy_rows(*WHOLE, "merge_offers", rows)
    parts = [[], []]
    for row in rows:
        parts[rnd.randrange(2)].append(row)
    for (host, db), part in zip(SHARD_DBS, parts):
        copy_rows(host, db, "merge_offers", part)
    queries = {
        "numeric": "SELECT product_id, store_id, price FROM merge_offers",
        "float8": "SELECT product_id, store_id, price::float8 / 7 AS price FROM merge_offers",
        "real": "SELECT product_id, store_id, price::real AS price FROM merge_offers",
        "bigint": "SELECT product_id, store_id, floor(price)::bigint AS price FROM merge_offers "
                  "WHERE price BETWEEN -1000 AND 1000",
    }
    for name, query in queries.items():
        for k in (1, 3, 40):
            compare(f"merge-{name}-k{k}", f"gpurec.cheapest_offers('{query}', {k})",
                    f"gpurec_shards.cheapest_offers({SHARDS}, '{query}', {k})")
    # the merge itself, on parts made where it runs: the same rows as one call
    compare("merge-of-parts-made-locally",
            "gpurec.cheapest_offers('SELECT * FROM merge_offers WHERE store_id < 5 OR product_id < 100', 2)",
            "gpurec_internal._merge_cheapest_offers(ARRAY["
            "gpurec_internal._cheapest_offers_part('SELECT * FROM merge_offers WHERE store_id < 5', 2), "
            "gpurec_internal._cheapest_offers_part('SELECT * FROM merge_offers WHERE store_id >= 5 AND product_id < 100', 3)"
            "], 2)", where=WHOLE)
    part = "gpurec_internal._cheapest_offers_part('SELECT * FROM merge_offers', {k})"
    bad = [
        ("merge-bad-bytes-22P03", "22P03", "ARRAY['\\x0102'::bytea]", 1),
        ("merge-truncated-part-22P03", "22P03", f"ARRAY[substr({part.format(k=1)}, 1, 40)]", 1),
        ("merge-null-part-22004", "22004", "ARRAY[NULL::bytea]", 1),
        ("merge-k-below-one-22023", "22023", "'{}'", 0),
        ("merge-part-of-a-smaller-k-22023", "22023", f"ARRAY[{part.format(k=1)}]", 2),
        ("merge-parts-of-two-price-types-42804", "42804",
         f"ARRAY[{part.format(k=1)}, gpurec_internal._cheapest_offers_part("
         "'SELECT product_id, store_id, price::float8 AS price FROM merge_offers', 1)]", 1),
        ("merge-two-dimensional-parts-2202E", "2202E", f"ARRAY[[{part.format(k=1)}]]", 1),
    ]
    for name, state, parts_sql, k in bad:
        e = error_of(*WHOLE, f"SELECT count(*) FROM gpurec_internal._merge_cheapest_offers({parts_sql}, {k});")
        check(name, e is not None and e[0] == state, f"got {e}")
    roc_merge()


def roc_merge():
    """roc_fitness' merge on parts made where it runs: the parts of a split of
    the individuals give the rows of one call, in id order; an individual
    in two parts is 22023 naming them; bytes that are not a part, 22P03."""
    scores = "SELECT * FROM scores"
    part = "gpurec_internal._roc_fitness_part('{}', NULL::boolean[])"
    halves = [part.format(scores + " WHERE individual_id % 3 = 1"), part.format(scores + " WHERE individual_id % 3 <> 1")]
    compare("roc-merge-of-parts-made-locally", "gpurec.roc_fitness('SELECT * FROM scores')",
            f"gpurec_internal._merge_roc_fitness('c', ARRAY[{halves[1]}, {halves[0]}])", where=WHOLE)
    whole_part = part.format(scores)
    bad = [
        ("roc-merge-split-individual-22023", "22023", f"ARRAY[{halves[0]}, {whole_part}]",
         "is on more than one partition of cluster \"c\" (0 and 1)"),
        ("roc-merge-bad-bytes-22P03", "22P03", "ARRAY['\\x0102'::bytea]", "malformed"),
        ("roc-merge-truncated-part-22P03", "22P03", f"ARRAY[substr({whole_part}, 1, 40)]", "malformed"),
        ("roc-merge-longer-part-22P03", "22P03", f"ARRAY[{whole_part} || '\\x00'::bytea]", "malformed"),
        ("roc-merge-null-part-22004", "22004", "ARRAY[NULL::bytea]", ""),
    ]
    for name, state, parts_sql, words in bad:
        for merge in ("_merge_roc_fitness", "_merge_roc_auc"):
            e = error_of(*WHOLE, f"SELECT count(*) FROM gpurec_internal.{merge}('c', {parts_sql});")
            check(f"{name}-{merge}", e is not None and e[0] == state and words in e[1], f"got {e}")


def cpu_threads():
    """gpurec.cpu_threads, which shards sharing a host set to their share of
    its cores: a call computes on that many threads (the timing NOTICE
    says how many ran), with the same answer as on every core; set in a
    shard's server options, it reaches the shards' sessions."""
    threads_ran = re.compile(r"CPU worker threads: (\d+)")
    call = "SELECT * FROM gpurec.similar_users('SELECT * FROM points', 3);"
    answers, ran = {}, {}
    for threads in (1, 3, 0):
        proc = run(*SHARD_DBS[0], f"SET gpurec.device = cpu; SET gpurec.timing = on; "
                   f"SET gpurec.cpu_threads = {threads};" + call)
        answers[threads] = proc.stdout
        found = threads_ran.search(proc.stderr)
        ran[threads] = int(found.group(1)) if found else None
    users = int(rows(*SHARD_DBS[0], "SELECT count(DISTINCT user_id) FROM points WHERE x IS NOT NULL "
                     "AND y IS NOT NULL AND user_id IS NOT NULL;")[0])
    every_core = min(users, os.cpu_count() or 1)
    check("cpu-threads-honoured", ran == {1: 1, 3: min(3, users), 0: every_core},
          f"threads that ran: {ran}, for 1, 3 and 0 (every core: {every_core})")
    check("cpu-threads-same-answer", answers[1] == answers[3] == answers[0] and answers[0].strip() != "",
          "the answers differ")
    for i, (host, db) in enumerate(SHARD_DBS):
        run(*COORD, f"ALTER SERVER four OPTIONS (SET p{i} '{connstr(host, db, ' options=-cgpurec.cpu_threads=1')}');")
    try:
        compare("cpu-threads-in-server-options",
                "gpurec.similar_users('SELECT * FROM points', 3)",
                f"gpurec_shards.similar_users({SHARDS}, 'SELECT * FROM points', 3)")
        settings = rows(*COORD, "CREATE OR REPLACE FUNCTION pg_temp.threads() RETURNS SETOF text "
                        "LANGUAGE plproxy AS $$ CLUSTER 'four'; RUN ON ALL; "
                        "SELECT current_setting('gpurec.cpu_threads') AS threads; $$;"
                        "SELECT pg_temp.threads();")
        check("cpu-threads-reach-the-shards", settings == ["1"] * 4, f"the partitions' settings: {settings}")
    finally:
        for i, (host, db) in enumerate(SHARD_DBS):
            run(*COORD, f"ALTER SERVER four OPTIONS (SET p{i} '{connstr(host, db)}');")


def timing_notices():
    """gpurec.timing = on at the coordinator prints none of its internal
    calls' NOTICEs; a partition whose session times (its connect string's
    options) sends its own NOTICE through PL/Proxy."""
    call = f"SELECT count(*) FROM gpurec_shards.cheapest_offers({SHARDS}, 'SELECT product_id, store_id, price FROM offers', 2);"
    proc = run(*COORD, "SET gpurec.timing = on;" + call)
    check("timing-no-internal-notices", "NOTICE" not in proc.stderr, proc.stderr[:800])
    for i, (host, db) in enumerate(SHARD_DBS):
        run(*COORD, f"ALTER SERVER four OPTIONS (SET p{i} '{connstr(host, db, ' options=-cgpurec.timing=on')}');")
    try:
        proc = run(*COORD, call)
        notices = [line for line in proc.stderr.splitlines() if line.startswith("NOTICE:") and "cheapest_offers" in line]
        check("timing-of-every-partition-comes-through", len(notices) == len(SHARD_DBS), proc.stderr[:800])
    finally:
        for i, (host, db) in enumerate(SHARD_DBS):
            run(*COORD, f"ALTER SERVER four OPTIONS (SET p{i} '{connstr(host, db)}');")


def materialized_view():
    """REFRESH MATERIALIZED VIEW runs its query as a security-restricted
    operation (no temporary tables, for one): the distributed calls must
    work there, as pg_cron's refreshes use them."""
    try:
        run(*COORD, f"CREATE MATERIALIZED VIEW cheapest AS SELECT * FROM gpurec_shards.cheapest_offers("
            f"{SHARDS}, 'SELECT product_id, store_id, price FROM offers', 2);"
            f"CREATE MATERIALIZED VIEW similar_lists AS SELECT * FROM gpurec_shards.similar_users("
            f"{SHARDS}, 'SELECT * FROM points', 2);"
            f"CREATE MATERIALIZED VIEW fit AS SELECT * FROM gpurec_shards.fit_exponent("
            f"{SHARDS}, 'SELECT * FROM points', 'SELECT * FROM holdout', 'SELECT * FROM candidates');"
            "REFRESH MATERIALIZED VIEW cheapest; REFRESH MATERIALIZED VIEW similar_lists; REFRESH MATERIALIZED VIEW fit;")
    except RuntimeError as e:
        check("materialized-view-refresh", False, str(e))
        return
    compare("materialized-view-refresh",
            "gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 2)",
            "cheapest")


def faults():
    # a shard whose inner query fails: its SQLSTATE, its name in the message
    run(*SHARD_DBS[1], "CREATE OR REPLACE VIEW failing AS SELECT product_id, store_id, price / 0 AS price "
        "FROM offers;")
    for host, db in SHARD_DBS[:1] + SHARD_DBS[2:]:
        run(host, db, "CREATE OR REPLACE VIEW failing AS SELECT * FROM offers;")
    e = error_of(*COORD, f"SELECT * FROM gpurec_shards.cheapest_offers({SHARDS}, 'SELECT * FROM failing');")
    check("shard-error-keeps-sqlstate-and-names-shard", e is not None and e[0] == "22012"
          and 'cluster "four", partition 1 (dbname four_1): division by zero' == e[1], f"got {e}")
    # prices that no one server could hold together (92233720368547758.0
    # fits in 64 bits at scale 1, not at 6), each shard's fine alone, the
    # big ones no product's cheapest: 22003, as one server holding them all
    prices = {SHARD_DBS[0]: "CASE WHEN store_id % 2 = 0 THEN 92233720368547758.0 ELSE 1 END",
              SHARD_DBS[1]: "0.000001", SHARD_DBS[2]: "2::numeric", SHARD_DBS[3]: "3::numeric"}
    for (host, db), price in prices.items():
        run(host, db, f"CREATE OR REPLACE VIEW scaled AS SELECT product_id, store_id, {price} AS price "
            "FROM offers;")
    alone = [error_of(host, db, "SELECT count(*) FROM gpurec.cheapest_offers('SELECT * FROM scaled');")
             for host, db in SHARD_DBS]
    e = error_of(*COORD, f"SELECT * FROM gpurec_shards.cheapest_offers({SHARDS}, 'SELECT * FROM scaled');")
    check("prices-no-one-server-holds-22003", alone == [None] * 4 and e is not None and e[0] == "22003"
          and 'column "price" of the offers query' in e[1], f"each shard alone {alone}; all {e}")
    # the same where the big prices are a shard's cheapest, so they reach the
    # coordinator's merge, whose column cannot hold them beside the small ones
    prices[SHARD_DBS[0]] = "92233720368547758.0"
    for (host, db), price in prices.items():
        run(host, db, f"CREATE OR REPLACE VIEW scaled AS SELECT product_id, store_id, {price} AS price "
            "FROM offers;")
    e = error_of(*COORD, f"SELECT * FROM gpurec_shards.cheapest_offers({SHARDS}, 'SELECT * FROM scaled');")
    check("prices-the-merge-cannot-hold-22003", e is not None and e[0] == "22003"
          and 'column "price" of the offers query' in e[1] and "92233720368547758" in e[1], f"got {e}")
    # the engine's own argument checks, on the coordinator, before any shard
    e = error_of(*COORD, f"SELECT * FROM gpurec_shards.cheapest_offers({SHARDS}, 'SELECT * FROM offers', 0);")
    check("bad-k-is-the-engines-error", e is not None and e[0] == "22023" and "shard" not in e[1], f"got {e}")
    e = error_of(*COORD, "SELECT * FROM gpurec_shards.cheapest_offers('nowhere', 'SELECT * FROM offers');")
    check("unknown-shard-42704", e is not None and e[0] == "42704" and '"nowhere"' in e[1], f"got {e}")
    # a cluster is declared with a power of two of partitions, at least one:
    # PL/Proxy refuses any other when the server is created
    e = error_of(*COORD, f"CREATE SERVER three FOREIGN DATA WRAPPER plproxy OPTIONS (p0 '{connstr(*SHARD_DBS[0])}', "
                 f"p1 '{connstr(*SHARD_DBS[1])}', p2 '{connstr(*SHARD_DBS[2])}');")
    check("three-partitions-refused-42601", e is not None and e[0] == "42601", f"got {e}")
    e = error_of(*COORD, "CREATE SERVER empty FOREIGN DATA WRAPPER plproxy;")
    check("no-partitions-refused-42601", e is not None and e[0] == "42601", f"got {e}")
    run(*COORD, "CREATE FOREIGN DATA WRAPPER other; CREATE SERVER other_server FOREIGN DATA WRAPPER other;")
    e = error_of(*COORD, "SELECT * FROM gpurec_shards.cheapest_offers('other_server', 'SELECT * FROM offers');")
    check("server-of-another-wrapper-42704", e is not None and e[0] == "42704" and '"other_server"' in e[1],
          f"got {e}")
    e = error_of(*COORD, f"SELECT * FROM gpurec_shards.user_similarity({SHARDS}, 'SELECT * FROM points', 123456);")
    check("missing-main-user-is-the-engines-error", e is not None and e[0] == "22023" and "123456" in e[1]
          and "shard" not in e[1], f"got {e}")
    # data split across shards is refused, not answered wrongly
    run(*SHARD_DBS[0], "INSERT INTO scores VALUES (1000, true, 0.5), (1000, false, 0.25);")
    run(*SHARD_DBS[2], "INSERT INTO scores VALUES (1000, true, 0.5), (1000, false, 0.75);")
    e = error_of(*COORD, f"SELECT * FROM gpurec_shards.roc_fitness({SHARDS}, 'SELECT * FROM scores');")
    check("individual-split-across-shards-22023", e is not None and e[0] == "22023"
          and 'individual 1000 is on more than one partition of cluster "four" (0 and 2)' in e[1], f"got {e}")
    for host, db in (SHARD_DBS[0], SHARD_DBS[2]):
        run(host, db, "DELETE FROM scores WHERE individual_id = 1000;")
    # NULL arguments: no rows, as the single server
    got = rows(*COORD, f"SELECT count(*) FROM gpurec_shards.cheapest_offers({SHARDS}, NULL);"
               f"SELECT count(*) FROM gpurec_shards.user_similarity({SHARDS}, 'SELECT * FROM points', NULL);")
    check("null-arguments-no-rows", got == ["0", "0"], f"got {got}")

    # cancel and statement_timeout while every shard works: the error within
    # a second, the shards' queries ended, the session usable
    slow = "SELECT product_id, store_id, price + 0 * length(pg_sleep(0.005)::text) AS price FROM offers"
    for how in ("statement_timeout", "cancel"):
        if how == "statement_timeout":
            e = error_of(*COORD, f"SELECT * FROM gpurec_shards.cheapest_offers({SHARDS}, '{slow}');",
                         settings="SET statement_timeout = '700ms';")
            late = e[2] - 0.7 if e else None
        else:
            env = dict(os.environ, PGHOST=COORD[0], PGDATABASE=COORD[1], PGUSER="postgres",
                       PGAPPNAME="gpurec_shards_victim")
            victim = subprocess.Popen(
                [PSQL, "-X", "-q", "-c", f"SELECT count(*) FROM gpurec_shards.cheapest_offers({SHARDS}, '{slow}');"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.8)
            sent = time.monotonic()
            rows(*COORD, "SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
                 "WHERE application_name = 'gpurec_shards_victim';")
            _, err = victim.communicate(timeout=30)
            late = time.monotonic() - sent
            e = ("57014", err) if "57014" in err or "canceling statement" in err else None
        check(f"{how}-57014-within-1s", e is not None and e[0] == "57014" and late is not None and late < 1.0,
              f"got {e}, {late} s late")
        if how == "statement_timeout":
            said = run(*COORD, f"SET statement_timeout = '700ms'; SELECT * FROM gpurec_shards.cheapest_offers({SHARDS}, "
                       f"'{slow}');", check_rc=False).stderr
            check("statement-timeout-shows-no-internal-context", "57014" in said and "CONTEXT" not in said, said)
        time.sleep(0.5)
        busy = [rows(h, "postgres", "SELECT count(*) FROM pg_stat_activity WHERE datname LIKE 'four_%' "
                     "AND state = 'active' AND query LIKE '%cheapest_offers%'")[0] for h in HOSTS]
        check(f"{how}-shards-stopped", busy == ["0", "0", "0"], f"active shard queries: {busy}")
        compare(f"{how}-then-usable", "gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 2)",
                f"gpurec_shards.cheapest_offers({SHARDS}, 'SELECT product_id, store_id, price FROM offers', 2)")

    # a partition's server that stops during a call: the call fails naming
    # the partition, 08006 (its backend's last words, 57P01, or the
    # connection broken first)
    env = dict(os.environ, PGHOST=COORD[0], PGDATABASE=COORD[1], PGUSER="postgres")
    victim = subprocess.Popen(
        [PSQL, "-X", "-q", "-v", "VERBOSITY=verbose", "-c",
         f"SELECT count(*) FROM gpurec_shards.cheapest_offers({SHARDS}, '{slow}');"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.8)
    subprocess.run([os.path.join(ROOT, "test", "cluster.sh"), "stop", HOSTS[2]], stdout=subprocess.DEVNULL)
    _, err = victim.communicate(timeout=60)
    e = next((line.split(":", 2) for line in err.splitlines() if line.startswith("ERROR:")), None)
    check("shard-down-during-a-call-names-it", e is not None and e[1].strip() == "08006"
          and re.search(r'cluster "four", partition [23] \(dbname four_[23]\)', e[2]) is not None, f"got {err}")
    # a partition that is down before the call: the call fails naming it; up again, calls work
    e = error_of(*COORD, f"SELECT * FROM gpurec_shards.cheapest_offers({SHARDS}, 'SELECT * FROM offers');")
    check("shard-down-names-it", e is not None and e[0] == "08001"
          and 'cluster "four", partition 2 (dbname four_2) is unreachable' in e[1], f"got {e}")
    subprocess.run([os.path.join(ROOT, "test", "cluster.sh"), "resume", HOSTS[2], "-c", "jit=off"],
                   stdout=subprocess.DEVNULL, check=False)
    compare("shard-up-again-answers",
            "gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 2)",
            f"gpurec_shards.cheapest_offers({SHARDS}, 'SELECT product_id, store_id, price FROM offers', 2)")


def edge_values(rnd):
    """Values at the edges, dealt at random over the partitions of `four`,
    against one server holding them all: float8 prices that differ in the
    17th digit, tiny and huge ones, NaN and infinities, numerics of scales 0
    to 4, NULLs, 64-bit ids at both ends.  Then the issue's case: offers
    (8, store 1, 0.30000000000000004) and (8, store 2, 0.3) on two
    partitions, the cart line (1, 8, store 1) on a third."""
    ids = [-9223372036854775808, 9223372036854775807, -1, 0, 1, 2, 3, 1 << 40]
    floats = ["0.3", "0.30000000000000004", "3.3333333333333335e-05", "1e-300", "1e+300", "-1e+300",
              "NaN", "Infinity", "-Infinity", "2", "2.0000000000000004", None]
    numerics = ["7", "7.0", "7.00", "7.000", "7.0000", "0.0001", "123456789012.5", "-3.25", "NaN", None]
    offers = []
    for _ in range(400):
        offers.append([rnd.choice(ids + [None]), rnd.choice(ids + [None]), rnd.choice(floats), rnd.choice(numerics)])
    carts = []
    for cart in range(1, 60):
        for _ in range(rnd.randint(1, 4)):
            carts.append([rnd.choice(ids + [cart]), rnd.choice(ids), rnd.choice(ids), rnd.choice([1, 2, 7, None])])
    schema = ("DROP TABLE IF EXISTS edge_offers, edge_carts;"
              "CREATE TABLE edge_offers (product_id bigint, store_id bigint, price float8, nprice numeric);"
              "CREATE TABLE edge_carts (cart_id bigint, product_id bigint, store_id bigint, quantity integer);")
    parts = [[[] for _ in SHARD_DBS], [[] for _ in SHARD_DBS]]
    for row in offers:
        parts[0][rnd.randrange(len(SHARD_DBS))].append(row)
    for row in carts:  # carts by cart, as improve_carts wants
        parts[1][int(row[0]) % len(SHARD_DBS)].append(row)
    # the issue's case, on partitions of its own
    issue_offers = [[8, 1, "0.30000000000000004", "0.3"], [8, 2, "0.3", "0.30"]]
    parts[0][0].append(issue_offers[0])
    parts[0][1].append(issue_offers[1])
    parts[1][2].append([2, 8, 1, 1])
    for (host, db), o, c in zip(SHARD_DBS, parts[0], parts[1]):
        run(host, db, schema)
        copy_rows(host, db, "edge_offers", o)
        copy_rows(host, db, "edge_carts", c)
    run(*WHOLE, schema)
    copy_rows(*WHOLE, "edge_offers", offers + issue_offers)
    copy_rows(*WHOLE, "edge_carts", carts + [[2, 8, 1, 1]])
    for price in ("price", "nprice"):
        query = f"SELECT product_id, store_id, {price} AS price FROM edge_offers"
        for k in (1, 3):
            compare(f"edge-cheapest-offers-{price}-k{k}", f"gpurec.cheapest_offers('{query}', {k})",
                    f"gpurec_shards.cheapest_offers({SHARDS}, '{query}', {k})")
        compare(f"edge-improve-carts-{price}", f"gpurec.improve_carts('SELECT * FROM edge_carts', '{query}')",
                f"gpurec_shards.improve_carts({SHARDS}, 'SELECT * FROM edge_carts', '{query}')")
    compare("improve-carts-float-prices-17th-digit-issue-case",
            "gpurec.improve_carts('SELECT * FROM edge_carts WHERE cart_id = 2 AND product_id = 8', "
            "'SELECT product_id, store_id, price FROM edge_offers WHERE product_id = 8')",
            f"gpurec_shards.improve_carts({SHARDS}, 'SELECT * FROM edge_carts WHERE cart_id = 2 AND product_id = 8', "
            "'SELECT product_id, store_id, price FROM edge_offers WHERE product_id = 8')")
    # optimize_carts wants exact prices: float ones are the partitions' 42804, as one server's
    e_one = error_of(*WHOLE, "SELECT * FROM gpurec.optimize_carts('SELECT * FROM edge_carts', "
                     "'SELECT product_id, store_id, price FROM edge_offers', 'SELECT 1 AS store_id, 1 AS fee');")
    e = error_of(*COORD, f"SELECT * FROM gpurec_shards.optimize_carts({SHARDS}, 'SELECT * FROM edge_carts', "
                 "'SELECT product_id, store_id, price FROM edge_offers', 'SELECT 1 AS store_id, 1 AS fee');")
    check("optimize-carts-float-prices-42804", e_one is not None and e is not None and e[0] == e_one[0] == "42804",
          f"one server {e_one}; partitions {e}")
    finite = "SELECT product_id, store_id, nprice AS price FROM edge_offers WHERE nprice <> ''NaN''"
    compare("edge-optimize-carts-nprice",
            f"gpurec.optimize_carts('SELECT * FROM edge_carts', '{finite}', "
            "'SELECT 2::bigint AS store_id, 0.25 AS fee, 10 AS free_from')",
            f"gpurec_shards.optimize_carts({SHARDS}, 'SELECT * FROM edge_carts', '{finite}', "
            "'SELECT 2::bigint AS store_id, 0.25 AS fee, 10 AS free_from')")
    # NaN prices too: the engine's own answer or error, either way
    nan = "gpurec{}.optimize_carts({}'SELECT * FROM edge_carts', 'SELECT product_id, store_id, " \
          "nprice AS price FROM edge_offers', 'SELECT 1 AS store_id, 1 AS fee')"
    e_one = error_of(*WHOLE, f"SELECT * FROM {nan.format('', '')};")
    if e_one is None:
        compare("optimize-carts-nan-prices", nan.format("", ""), nan.format("_shards", SHARDS + ", "))
    else:
        e = error_of(*COORD, f"SELECT * FROM {nan.format('_shards', SHARDS + ', ')};")
        check("optimize-carts-nan-prices", e is not None and e[0] == e_one[0] and e[1].endswith(e_one[1]),
              f"one server {e_one}; partitions {e}")
    tiny = "SELECT product_id, store_id, price / 3 AS price FROM edge_offers WHERE price = 0.0001 * 3 OR product_id = 8"
    compare("improve-carts-tiny-float-price",
            f"gpurec.improve_carts('SELECT * FROM edge_carts', '{tiny}')",
            f"gpurec_shards.improve_carts({SHARDS}, 'SELECT * FROM edge_carts', '{tiny}')")


def refused_offers(rnd):
    """optimize_carts refuses a store's best offer whose price is not
    finite, naming the least such product, then store.  Here several such
    offers lie under carts of every partition, each of which finds only its
    own: the partitions' call must name the least of them all, as one
    server does (oracle: the least product, then store, whose every offer is
    NaN, among the products in a cart)."""
    products = rnd.sample(range(-50, 50), 24)
    offers, refused = [], []
    carted = set(rnd.sample(products, 16))
    for p in products:
        for s in rnd.sample(range(-6, 6), 5):
            nan_only = rnd.random() < 0.2
            prices = ["NaN"] * rnd.randint(1, 2) if nan_only else \
                [str(rnd.randint(1, 9)) + "." + str(rnd.randint(0, 99)) for _ in range(rnd.randint(1, 2))] + \
                ["NaN"] * rnd.randint(0, 1)
            offers += [[p, s, price] for price in prices]
            if nan_only and p in carted:
                refused.append((p, s))
    if not refused:  # at least one, on a product in a cart
        p = rnd.choice(sorted(carted))
        offers.append([p, 99, "NaN"])
        refused.append((p, 99))
    rnd.shuffle(offers)
    carts = [[1000 + i // 2, p, None, 1] for i, p in enumerate(sorted(carted, key=lambda _: rnd.random()))]
    schema = ("DROP TABLE IF EXISTS refused_offers, refused_carts;"
              "CREATE TABLE refused_offers (product_id bigint, store_id bigint, price numeric);"
              "CREATE TABLE refused_carts (cart_id bigint, product_id bigint, store_id bigint, quantity integer);")
    run(*WHOLE, schema)
    copy_rows(*WHOLE, "refused_offers", offers)
    copy_rows(*WHOLE, "refused_carts", carts)
    for i, (host, db) in enumerate(SHARD_DBS):
        run(host, db, schema)
        copy_rows(host, db, "refused_offers", offers[i::len(SHARD_DBS)])
        copy_rows(host, db, "refused_carts", [c for c in carts if c[0] % len(SHARD_DBS) == i])
    call = "gpurec{}.optimize_carts({}'SELECT * FROM refused_carts', 'SELECT * FROM refused_offers', " \
           "'SELECT 1 AS store_id, 1 AS fee')"
    p, s = min(refused)
    want = f"the price of product {p} at store {s} is not a finite number"
    e_one = error_of(*WHOLE, f"SELECT * FROM {call.format('', '')};")
    check("optimize-carts-refuses-the-least-non-finite-offer", e_one is not None and e_one[:2] == ("22023", want),
          f"one server {e_one}; want 22023 {want} ({len(refused)} refused offers)")
    e = error_of(*COORD, f"SELECT * FROM {call.format('_shards', SHARDS + ', ')};")
    check("optimize-carts-partitions-refuse-the-least-non-finite-offer",
          e is not None and e[0] == "22023" and e[1].endswith(want),
          f"partitions {e}; want 22023 {want} ({len(refused)} refused offers)")


def partition_faults(rnd):
    """Faults of the data that each partition finds in its own rows, on
    several partitions at once: a quantity below 1 in carts of several
    partitions (improve_carts, optimize_carts), a NaN coordinate of users
    of several partitions (user_similarity, predict_strength), scores
    arrays of the wrong length of individuals of several partitions
    (roc_fitness).  Each partition sends its least fault as a refusal, and
    the call must raise the least of them all, message and detail, as one
    server does (oracle: the least cart then product, user, individual,
    computed here); PL/Proxy alone would raise whichever partition failed
    first."""
    n = len(SHARD_DBS)
    carts = [[c, p, rnd.randint(1, 3), rnd.choice([1, 2, 0, -1])] for c in range(1, 40)
             for p in rnd.sample(range(1, 9), 2)]
    if not any(q < 1 for _, _, _, q in carts):
        carts[0][3] = 0
    offers = [[p, s, rnd.randint(1, 9)] for p in range(1, 9) for s in range(1, 4)]
    bad_lines = sorted((c, p, q) for c, p, _, q in carts if q < 1)
    users = list(range(1, 60))
    bad_users = rnd.sample(users, rnd.randint(2, 6))
    points = [[u, rnd.random() * 10, rnd.random() * 10] for u in users for _ in range(3)]
    points += [[u, "NaN", rnd.random()] for u in bad_users]
    rnd.shuffle(points)
    people = list(range(1, 30))
    short = rnd.sample(people, rnd.randint(2, 6))
    population = [[i, "{1,2,3}" if i not in short else "{1,2}"] for i in people]
    schema = ("DROP TABLE IF EXISTS pf_carts, pf_offers, pf_points, pf_population;"
              "CREATE TABLE pf_carts (cart_id bigint, product_id bigint, store_id bigint, quantity integer);"
              "CREATE TABLE pf_offers (product_id bigint, store_id bigint, price numeric);"
              "CREATE TABLE pf_points (user_id bigint, x float8, y float8);"
              "CREATE TABLE pf_population (individual_id bigint, scores real[]);")
    run(*WHOLE, schema)
    for table, data in (("pf_carts", carts), ("pf_offers", offers), ("pf_points", points),
                        ("pf_population", population)):
        copy_rows(*WHOLE, table, data)
    for i, (host, db) in enumerate(SHARD_DBS):
        run(host, db, schema)
        copy_rows(host, db, "pf_carts", [c for c in carts if c[0] % n == i])
        copy_rows(host, db, "pf_offers", offers[i::n])
        copy_rows(host, db, "pf_points", [pt for pt in points if pt[0] % n == i])
        copy_rows(host, db, "pf_population", [r for r in population if r[0] % n == i])
    cart, product, quantity = bad_lines[0]
    main = min(set(users) - set(bad_users))
    calls = [
        ("improve-carts", "improve_carts({}'SELECT * FROM pf_carts', 'SELECT * FROM pf_offers')",
         "22023", "quantity must be at least 1", f"Cart {cart} has {quantity} of product {product}."),
        ("optimize-carts", "optimize_carts({}'SELECT * FROM pf_carts', 'SELECT * FROM pf_offers', "
         "'SELECT 1 AS store_id, 1 AS fee')",
         "22023", "quantity must be at least 1", f"Cart {cart} has {quantity} of product {product}."),
        ("user-similarity", f"user_similarity({{}}'SELECT * FROM pf_points', {main})",
         "22000", f"a point of user {min(bad_users)} has a non-finite coordinate", None),
        ("predict-strength", f"predict_strength({{}}'SELECT * FROM pf_points', {main}, "
         "'SELECT 1 AS candidate_id, 1.0 AS x, 2.0 AS y', 2)",
         "22000", f"a point of user {min(bad_users)} has a non-finite coordinate", None),
        ("roc-fitness", "roc_fitness({}'SELECT * FROM pf_population', '{{t,f,t}}')",
         "22023", f"the scores of individual {min(short)} have 2 elements, the labels 3", None),
    ]
    for name, call, state, message, detail in calls:
        one = f"SELECT * FROM gpurec.{call.format('')};"
        sharded = f"SELECT * FROM gpurec_shards.{call.format(SHARDS + ', ')};"
        for where, (host_db, query) in (("one-server", (WHOLE, one)), ("partitions", (COORD, sharded))):
            e = error_of(*host_db, query)
            got_detail = detail_of(*host_db, query) if detail else None
            check(f"{name}-{where}-names-the-least-fault",
                  e is not None and e[0] == state and e[1].endswith(message) and got_detail == detail,
                  f"got {e}, detail {got_detail}; want {state} {message!r}, detail {detail!r}")


def same_error(name, local_call, shard_call, state=None, exactly=False):
    """The call raises the single server's error (its SQLSTATE, and its
    message, which a partition's error prefixes with the partition's name;
    exactly: with no prefix, as an error of data the coordinator reads, or
    that every partition's refusal names, is raised)."""
    e_one = error_of(*WHOLE, f"SELECT * FROM {local_call};")
    e = error_of(*COORD, f"SELECT * FROM {shard_call};")
    same = e is not None and e_one is not None and (e[1] == e_one[1] if exactly else e[1].endswith(e_one[1]))
    check(name, same and e[0] == e_one[0] and (state is None or e[0] == state), f"one server {e_one}; partitions {e}")


def carts_parts(rnd):
    """improve_carts' and optimize_carts' rows travel from each partition as
    one part and merge in the engine, and optimize_carts' shipping reaches
    the partitions as one part read on the coordinator: against one server
    holding every row, on `four` with carts on every partition, on one
    partition alone (the others answer no rows) and on none; shipping fees
    and free_from of every exact type and scale, NULL and infinite
    free_from, absent free_from, and the single server's errors for float,
    NULL, negative, NaN, huge and repeated fees (float ones with no row
    too)."""
    ids = [-9223372036854775808, 9223372036854775807, -1, 0, 1, 2, 3, 1 << 40]
    prices = ["7", "7.0", "7.50", "7.125", "7.0001", "0.0001", "0", "123456789012.5", "3", "3.00", None]
    offers = [[rnd.choice(list(range(12)) + [None]), rnd.choice(ids + [None]), rnd.choice(prices)]
              for _ in range(600)]
    carts = []
    for cart in ids + list(range(10, 50)):
        for _ in range(rnd.randint(1, 5)):
            carts.append([cart, rnd.choice(list(range(13)) + [None]), rnd.choice(ids + [None]),
                          rnd.choice([1, 2, 7, None])])
    schema = ("DROP TABLE IF EXISTS cp_offers, cp_carts;"
              "CREATE TABLE cp_offers (product_id bigint, store_id bigint, price numeric);"
              "CREATE TABLE cp_carts (cart_id bigint, product_id bigint, store_id bigint, quantity integer);")
    offer_parts = [[] for _ in SHARD_DBS]
    cart_parts = [[] for _ in SHARD_DBS]
    for row in offers:
        offer_parts[rnd.randrange(len(SHARD_DBS))].append(row)
    for row in carts:
        cart_parts[row[0] % len(SHARD_DBS)].append(row)
    check("carts-parts-every-partition-holds-carts", all(cart_parts), f"{[len(p) for p in cart_parts]}")
    for (host, db), o, c in zip(SHARD_DBS, offer_parts, cart_parts):
        run(host, db, schema)
        copy_rows(host, db, "cp_offers", o)
        copy_rows(host, db, "cp_carts", c)
    run(*WHOLE, schema)
    copy_rows(*WHOLE, "cp_offers", offers)
    copy_rows(*WHOLE, "cp_carts", carts)
    ship = ("DROP TABLE IF EXISTS cp_ship;"
            "CREATE TABLE cp_ship (store_id bigint, nfee numeric, nfree numeric, ifee bigint, ifree integer, "
            "ffee float8, ffree float8);")
    fees = ["0", "1.5", "0.25", "2.125", "0.0001", "3", "10.00"]
    frees = [None, "Infinity", "20.5", "0", "14.0001", "123456789012.5"]
    ship_rows = [[store, rnd.choice(fees), rnd.choice(frees), rnd.randint(0, 4),
                  rnd.choice([None, 0, 15, 2147483647]), rnd.choice(["0.30000000000000004", "0.3", "1e-300"]),
                  rnd.choice([None, "Infinity", "20.000000000000004"])] for store in ids]
    ship_rows.append([None, "1", "1", 1, 1, "1", "1"])  # a NULL store: skipped
    for where in (COORD, WHOLE):
        run(*where, ship)
        copy_rows(*where, "cp_ship", ship_rows)
    carts_query = "SELECT * FROM cp_carts"
    offers_query = "SELECT * FROM cp_offers"
    improve = "gpurec{}.improve_carts({}'{}', '{}')"
    optimize = "gpurec{}.optimize_carts({}'{}', '{}', '{}')"

    def both(template, *queries):
        return template.format("", "", *queries), template.format("_shards", SHARDS + ", ", *queries)

    compare("carts-parts-improve-carts-every-partition", *both(improve, carts_query, offers_query))
    shipping_queries = {
        "numeric-fee-numeric-free-from": "SELECT store_id, nfee AS fee, nfree AS free_from FROM cp_ship",
        "numeric-fee-no-free-from": "SELECT store_id, nfee AS fee FROM cp_ship",
        "integer-fee-integer-free-from": "SELECT store_id, ifee AS fee, ifree AS free_from FROM cp_ship",
        "numeric-fee-integer-free-from": "SELECT store_id, nfee AS fee, ifree AS free_from FROM cp_ship",
        "integer-fee-numeric-free-from": "SELECT store_id, ifee::smallint AS fee, nfree AS free_from FROM cp_ship",
        "no-shipping-row": "SELECT store_id, nfee AS fee, nfree AS free_from FROM cp_ship WHERE false",
    }
    for name, shipping in shipping_queries.items():
        compare(f"carts-parts-optimize-carts-{name}", *both(optimize, carts_query, offers_query, shipping))
    errors = {
        "float8-fee-42804": ("SELECT store_id, ffee AS fee FROM cp_ship", "42804"),
        "float8-free-from-42804": ("SELECT store_id, nfee AS fee, ffree AS free_from FROM cp_ship", "42804"),
        "float8-fee-no-row-42804": ("SELECT store_id, ffee AS fee FROM cp_ship WHERE false", "42804"),
        "real-free-from-no-row-42804": ("SELECT store_id, nfee AS fee, ffree::real AS free_from FROM cp_ship "
                                        "WHERE false", "42804"),
        "null-fee": ("SELECT store_id, CASE WHEN store_id = 0 THEN NULL ELSE nfee END AS fee FROM cp_ship", None),
        "negative-fee": ("SELECT store_id, -nfee - 1 AS fee FROM cp_ship", None),
        "nan-fee": ("SELECT store_id, ''NaN''::numeric AS fee FROM cp_ship", None),
        "huge-fee": ("SELECT store_id, 92233720368547758.07 AS fee FROM cp_ship", None),
        "repeated-store": ("SELECT store_id, nfee AS fee FROM cp_ship UNION ALL SELECT 1, 2", None),
    }
    for name, (shipping, state) in errors.items():
        same_error(f"carts-parts-optimize-carts-shipping-{name}",
                   *both(optimize, carts_query, offers_query, shipping), state)
    # carts on one partition alone: the other partitions send empty parts
    shipping = shipping_queries["numeric-fee-numeric-free-from"]
    for p, part in enumerate(cart_parts):
        alone = f"SELECT * FROM cp_carts WHERE cart_id IN ({', '.join(str(r[0]) for r in part)})"
        compare(f"carts-parts-improve-carts-partition-{p}-alone", *both(improve, alone, offers_query))
        compare(f"carts-parts-optimize-carts-partition-{p}-alone",
                *both(optimize, alone, offers_query, shipping))
    # no cart anywhere: no rows, as one server
    for name, template, queries in [("improve", improve, ("SELECT * FROM cp_carts WHERE false", offers_query)),
                                    ("optimize", optimize, ("SELECT * FROM cp_carts WHERE false", offers_query,
                                                            shipping))]:
        local, shard = both(template, *queries)
        want = rows(*WHOLE, f"SELECT * FROM {local};")
        got = rows(*COORD, f"SELECT * FROM {shard};")
        check(f"carts-parts-{name}-carts-no-cart", got == want == [], f"got {got}, want {want}")
    # NULL arguments other than the cluster: no rows, as gpurec's STRICT functions
    got = rows(*COORD, f"SELECT count(*) FROM gpurec_shards.optimize_carts({SHARDS}, '{carts_query}', "
               f"'{offers_query}', NULL);")
    check("carts-parts-optimize-carts-null-shipping-no-rows", got == ["0"], f"got {got}")


def candidates_parts(rnd):
    """predict_strength's and fit_exponent's candidates reach the partitions
    as one part read on the coordinator: with every point on one partition
    (the others add 0), the strengths equal one server's bit for bit, for
    candidates whose coordinates differ in the 17th digit, tiny, subnormal,
    -0 and huge ones, ids at both ends of 64 bits, NULLs skipped, and in
    the candidates query's order."""
    points = [[u, f"{rnd.uniform(-1, 1):.6f}", rnd.uniform(-1, 1)] for u in range(1, 30) for _ in range(3)]
    schema = ("DROP TABLE IF EXISTS cand_points;"
              "CREATE TABLE cand_points (user_id bigint, x numeric, y float8);")
    for i, (host, db) in enumerate(SHARD_DBS):
        run(host, db, schema)
        if i == 0:
            copy_rows(host, db, "cand_points", points)
    run(*WHOLE, schema)
    copy_rows(*WHOLE, "cand_points", points)
    coords = ["0.3", "0.30000000000000004", "0.29999999999999999", "1e-300", "5e-324", "-0", "1e+150",
              "-0.7", "0.1", "0.10000000000000002"]
    cands = [[rnd.choice([-9223372036854775808, 9223372036854775807, 0, 1, 2, 3]), rnd.choice(coords),
              rnd.choice(coords)] for _ in range(30)]
    cands += [[None, "1", "1"], [5, None, "1"], [6, "1", None]]
    for where in (COORD, WHOLE):
        run(*where, "DROP TABLE IF EXISTS edge_cands;"
                    "CREATE TABLE edge_cands (candidate_id bigint, x float8, y float8);")
        copy_rows(*where, "edge_cands", cands)
    for args in ("2", "1.5, 30, 0.01", "3, NULL, 0"):
        compare(f"candidates-part-predict-strength-bit-for-bit-{args.split(',')[0]}",
                f"gpurec.predict_strength('SELECT * FROM cand_points', 7, 'SELECT * FROM edge_cands', {args})",
                f"gpurec_shards.predict_strength({SHARDS}, 'SELECT * FROM cand_points', 7, "
                f"'SELECT * FROM edge_cands', {args})")
    reversed_order = "SELECT * FROM edge_cands ORDER BY candidate_id DESC, x, y"
    compare("candidates-part-predict-strength-in-the-query-order",
            f"gpurec.predict_strength('SELECT * FROM cand_points', 7, '{reversed_order}')",
            f"gpurec_shards.predict_strength({SHARDS}, 'SELECT * FROM cand_points', 7, '{reversed_order}')")
    too_far = "SELECT * FROM edge_cands UNION ALL SELECT 99, 1e300, 0"
    same_error("candidates-part-predict-strength-too-far-22003",
               f"gpurec.predict_strength('SELECT * FROM cand_points', 7, '{too_far}')",
               f"gpurec_shards.predict_strength({SHARDS}, 'SELECT * FROM cand_points', 7, '{too_far}')", "22003")


def coordinator_reads(data):
    """What the coordinator reads itself (the candidates, the holdout, the
    shipping) it reads as gpurec reads them: read-only, the columns' types
    checked, a fault of their rows the single server's error with no
    partition named; and what partitions find in the rows of all (a point
    with a NaN coordinate) names the least user, as one server does.  A
    main user of -2^63, integer labels, and an inner query whose own WHERE
    must filter before a division by zero (the partitions' wrappers must
    not push their conditions into it)."""
    writer = ("CREATE TABLE IF NOT EXISTS written (n int);"
              "CREATE OR REPLACE FUNCTION gpurec_test_writer() RETURNS int LANGUAGE sql AS "
              "'INSERT INTO written VALUES (1) RETURNING n';")
    run(*COORD, writer)
    run(*WHOLE, writer)
    points, cands, holdout = "'SELECT * FROM points'", "'SELECT * FROM candidates'", "'SELECT * FROM holdout'"
    for name, query, state in (
            ("writes", "SELECT c.*, gpurec_test_writer() AS w FROM candidates c", "25006"),
            ("numeric-id", "SELECT candidate_id + 0.4 AS candidate_id, x, y FROM candidates", "42804"),
            ("text-x", "SELECT candidate_id, x::text AS x, y FROM candidates", "42804"),
            ("no-y", "SELECT candidate_id, x FROM candidates", "42703"),
            ("two-statements", "SELECT * FROM candidates; SELECT 1", None),
            ("nan", "SELECT candidate_id, CASE WHEN candidate_id = (SELECT min(candidate_id) FROM candidates) "
                    "THEN ''NaN''::float8 ELSE x END AS x, y FROM candidates", "22000")):
        same_error(f"coordinator-reads-candidates-{name}",
                   f"gpurec.predict_strength({points}, 12, '{query}')",
                   f"gpurec_shards.predict_strength({SHARDS}, {points}, 12, '{query}')", state, exactly=True)
    for name, query, state in (
            ("writes", "SELECT h.*, gpurec_test_writer() AS w FROM holdout h", "25006"),
            ("numeric-user", "SELECT user_id + 0.4 AS user_id, candidate_id FROM holdout", "42804"),
            ("no-candidate", "SELECT user_id FROM holdout", "42703")):
        same_error(f"coordinator-reads-holdout-{name}",
                   f"gpurec.fit_exponent({points}, '{query}', {cands}, '{{1,2}}')",
                   f"gpurec_shards.fit_exponent({SHARDS}, {points}, '{query}', {cands}, '{{1,2}}')", state,
                   exactly=True)
    e = error_of(*COORD, f"SELECT * FROM gpurec_shards.fit_exponent({SHARDS}, {points}, "
                 f"'SELECT user_id, candidate_id::text AS candidate_id FROM holdout', {cands});")
    check("coordinator-reads-holdout-text-ids-0A000", e is not None and e[0] == "0A000" and "integer" in e[1],
          f"got {e}")
    written = rows(*COORD, "SELECT count(*) FROM written")
    check("coordinator-reads-nothing-written", written == ["0"], f"{written} rows written on the coordinator")
    for name, query, state in (
            ("store-twice", "SELECT * FROM shipping UNION ALL SELECT * FROM shipping WHERE store_id > 10", "21000"),
            ("float-fee", "SELECT store_id, fee::float8 AS fee FROM shipping", "42804"),
            ("nan-fee", "SELECT store_id, CASE WHEN store_id > 15 THEN ''NaN'' ELSE fee END AS fee FROM shipping",
             "22023")):
        same_error(f"coordinator-reads-shipping-{name}",
                   f"gpurec.optimize_carts('SELECT * FROM carts', 'SELECT * FROM offers', '{query}')",
                   f"gpurec_shards.optimize_carts({SHARDS}, 'SELECT * FROM carts', 'SELECT * FROM offers', '{query}')",
                   state, exactly=True)
    nan_points = "'SELECT user_id, CASE WHEN user_id IN (6, 9, 44) THEN ''NaN''::float8 ELSE x END AS x, y FROM points'"
    for name, local, sharded in (
            ("similar-users", f"gpurec.similar_users({nan_points}, 2)",
             f"gpurec_shards.similar_users({SHARDS}, {nan_points}, 2)"),
            ("user-similarity", f"gpurec.user_similarity({nan_points}, 17)",
             f"gpurec_shards.user_similarity({SHARDS}, {nan_points}, 17)")):
        same_error(f"nan-point-least-user-{name}", local, sharded, "22000", exactly=True)
    least = "'-9223372036854775808'::bigint"
    same_error("main-user-of-least-bigint-user-similarity", f"gpurec.user_similarity({points}, {least})",
               f"gpurec_shards.user_similarity({SHARDS}, {points}, {least})", "22023", exactly=True)
    same_error("main-user-of-least-bigint-predict-strength", f"gpurec.predict_strength({points}, {least}, {cands})",
               f"gpurec_shards.predict_strength({SHARDS}, {points}, {least}, {cands})", "22023", exactly=True)
    numbers = data["labels"].replace("t", "1").replace("f", "0")
    for label_type in ("smallint", "integer", "bigint"):
        compare(f"integer-labels-{label_type}-roc-fitness",
                f"gpurec.roc_fitness('SELECT * FROM population', '{numbers}'::{label_type}[])",
                f"gpurec_shards.roc_fitness({SHARDS}, 'SELECT * FROM population', '{numbers}'::{label_type}[])")
        compare(f"integer-labels-{label_type}-roc-auc",
                f"(SELECT individual_id, gpurec.roc_auc(scores, '{numbers}'::{label_type}[]) FROM population "
                "WHERE scores IS NOT NULL ORDER BY 1) AS t",
                f"gpurec_shards.roc_auc({SHARDS}, 'SELECT * FROM population', '{numbers}'::{label_type}[])")
    zeros = ("DROP TABLE IF EXISTS zero_offers; CREATE TABLE zero_offers AS "
             "SELECT product_id, store_id, price::numeric AS price FROM offers; "
             "INSERT INTO zero_offers VALUES (1, 1, 0), (2, 3, 0);")
    for host, db in SHARD_DBS + [WHOLE]:
        run(host, db, zeros)
    inverse = "'SELECT product_id, store_id, round(1 / price, 4) AS price FROM zero_offers WHERE (price > 0 OR price < 0)'"
    compare("inner-query-filters-before-the-wrapper-improve-carts",
            f"gpurec.improve_carts('SELECT * FROM carts', {inverse})",
            f"gpurec_shards.improve_carts({SHARDS}, 'SELECT * FROM carts', {inverse})")
    compare("inner-query-filters-before-the-wrapper-optimize-carts",
            f"gpurec.optimize_carts('SELECT * FROM carts', {inverse}, 'SELECT * FROM shipping')",
            f"gpurec_shards.optimize_carts({SHARDS}, 'SELECT * FROM carts', {inverse}, 'SELECT * FROM shipping')")


def partition_error_stops_the_others(users=4000):
    """A partition's error while the others rank similar_users' users: the
    call fails at once with it, and the other partitions' queries end
    within a second or so, while the coordinator's session goes on (the
    coordinator drops their connections, and each partition's gpurec stops
    as it finds its client gone), where they would rank on for seconds.
    Partition 1 fails its second read (its ranking's, after the points'
    gathering) at its first row."""
    for i, (host, db) in enumerate(SHARD_DBS):
        run(host, db, "DROP VIEW IF EXISTS busy; DROP TABLE IF EXISTS busy_points;"
            "CREATE TABLE busy_points AS SELECT u::bigint AS user_id, "
            "(u * 7919 % 1000) / 10.0 + i AS x, (u * 104729 % 1000) / 10.0 - i AS y "
            f"FROM generate_series({i * users + 1}, {(i + 1) * users}) u, generate_series(1, 20) i;"
            "CREATE VIEW busy AS SELECT user_id, x, y FROM busy_points;")
    call = f"SELECT count(*) FROM gpurec_shards.similar_users({SHARDS}, 'SELECT * FROM busy', 5);"
    started = time.monotonic()
    rows(*COORD, call)
    whole = time.monotonic() - started
    # rows read so far, counted in a setting of the partition's session (a read is read-only)
    reads = "set_config('gpurec_test.reads', (coalesce(nullif(current_setting('gpurec_test.reads', true), ''), " \
            "'0')::int + 1)::text, false)::int"
    run(*SHARD_DBS[1], "CREATE OR REPLACE VIEW busy AS SELECT user_id, "
        f"x / CASE WHEN {reads} > {users * 20} THEN 0 ELSE 1 END AS x, y FROM busy_points;")
    env = dict(os.environ, PGHOST=COORD[0], PGDATABASE=COORD[1], PGUSER="postgres")
    session = subprocess.Popen([PSQL, "-X", "-q", "-c", call, "-c", "SELECT pg_sleep(6)"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    active = [rows(h, "postgres", "SELECT count(*) FROM pg_stat_activity WHERE datname LIKE 'four_%' "
                   "AND state = 'active' AND query LIKE '%similar_users_part%'")[0] for h in HOSTS]
    _, err = session.communicate(timeout=60)
    failed = "division by zero" in err and "partition 1" in err
    why = f"the error: {err.strip()[:300]}; the partitions' queries still active 3 s after the call began, its " \
          f"session open: {active}; the whole call takes {whole:.2f} s"
    if whole < 5:
        skip("partition-error-stops-the-others", "the call is too quick here to tell: " + why)
        return
    check("partition-error-stops-the-others", failed and active == ["0", "0", "0"], why)


def partition_cancel():
    """A partition's own cancel (pg_cancel_backend there, its database's
    statement_timeout) that comes after the other partitions answered,
    in a function of each kind a partition runs (gpurec's part of
    cheapest_offers; optimize_carts' and predict_strength's first steps,
    in SQL): the call fails at once with 57014 naming the partition
    (PL/Proxy 2.10 took a partition's 57014 for a cancel of its own caller
    and waited without end for partitions that were done), no partition's
    query is left running, and the next call answers.  The coordinator's
    own statement_timeout (20 s) only bounds a failure of this check."""
    stall = "WHERE (SELECT length(pg_sleep(3)::text)) >= 0"
    for i, (host, db) in enumerate(SHARD_DBS):
        run(host, db, "".join(f"CREATE OR REPLACE VIEW uneven_{t} AS SELECT * FROM {t} {stall if i == 1 else ''};"
                              for t in ("offers", "carts", "points")))
    calls = [("cancel", f"gpurec_shards.cheapest_offers({SHARDS}, 'SELECT * FROM uneven_offers')"),
             ("statement_timeout", f"gpurec_shards.cheapest_offers({SHARDS}, 'SELECT * FROM uneven_offers')"),
             ("cancel", f"gpurec_shards.optimize_carts({SHARDS}, 'SELECT * FROM uneven_carts', "
                        "'SELECT * FROM offers', 'SELECT 1 AS store_id, 0 AS fee, NULL AS free_from')"),
             ("cancel", f"gpurec_shards.predict_strength({SHARDS}, 'SELECT * FROM uneven_points', 1, "
                        "'SELECT * FROM candidates')")]
    for how, call in calls:
        name = f"partition-{how}-{call.split('(')[0].split('.')[1]}"
        if how == "statement_timeout":
            run(SHARD_DBS[1][0], "postgres", f"ALTER DATABASE {SHARD_DBS[1][1]} SET statement_timeout = '900ms';")
        env = dict(os.environ, PGHOST=COORD[0], PGDATABASE=COORD[1], PGUSER="postgres")
        session = subprocess.Popen([PSQL, "-X", "-q", "-v", "VERBOSITY=verbose", "-c", "SET statement_timeout = '20s'",
                                    "-c", f"SELECT count(*) FROM {call}"],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # the partition's cancel: at 0.9 s (its timeout) or 1.2 s, while its inner query stalls for 3 s
        sent = time.monotonic() + 0.9
        if how == "cancel":
            time.sleep(1.2)
            sent = time.monotonic()
            rows(SHARD_DBS[1][0], "postgres", "SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
                 f"WHERE datname = '{SHARD_DBS[1][1]}' AND state = 'active';")
        _, err = session.communicate(timeout=60)
        late = time.monotonic() - sent
        e = next((line.split(":", 2) for line in err.splitlines() if line.startswith("ERROR:")), None)
        check(f"{name}-57014-names-it", e is not None and e[1].strip() == "57014"
              and 'cluster "four", partition 1 (dbname four_1)' in e[2] and late < 3.0,
              f"{late:.1f} s after the partition's cancel: {err.strip()[:400]}")
        if how == "statement_timeout":
            run(SHARD_DBS[1][0], "postgres", f"ALTER DATABASE {SHARD_DBS[1][1]} RESET statement_timeout;")
        time.sleep(0.5)
        busy = [rows(h, "postgres", "SELECT count(*) FROM pg_stat_activity WHERE datname LIKE 'four_%' "
                     "AND state = 'active'")[0] for h in HOSTS]
        check(f"{name}-leaves-nothing-running", busy == ["0", "0", "0"], f"active shard queries: {busy}")
    compare("partition-cancel-then-usable", "gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 2)",
            f"gpurec_shards.cheapest_offers({SHARDS}, 'SELECT product_id, store_id, price FROM offers', 2)")


HIJACKERS = """
CREATE TABLE public.hijacked (fn text);
CREATE FUNCTION public.hijack_note(fn text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.hijacked VALUES (fn); END $$;
CREATE FUNCTION public.unnest(a text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('unnest(text[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END $$;
CREATE FUNCTION public.unnest(a bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('unnest(bigint[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END $$;
CREATE FUNCTION public.unnest(a integer[]) RETURNS SETOF integer LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('unnest(integer[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END $$;
CREATE FUNCTION public.unnest(a float8[]) RETURNS SETOF float8 LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('unnest(float8[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END $$;
CREATE FUNCTION public.format(f text, a text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('format(text, text)'); RETURN pg_catalog.format(f, a); END $$;
CREATE FUNCTION public.format(f text, a bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('format(text, bigint)'); RETURN pg_catalog.format(f, a); END $$;
CREATE FUNCTION public.format(f text, a text, b text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('format(text, text, text)'); RETURN pg_catalog.format(f, a, b); END $$;
CREATE FUNCTION public.format(f text, a text, b integer) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('format(text, text, integer)'); RETURN pg_catalog.format(f, a, b); END $$;
CREATE FUNCTION public.cardinality(a integer[]) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('cardinality(integer[])'); RETURN pg_catalog.cardinality(a); END $$;
CREATE FUNCTION public.cardinality(a bigint[]) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('cardinality(bigint[])'); RETURN pg_catalog.cardinality(a); END $$;
CREATE FUNCTION public.hijack_cat(a float8[], b float8[]) RETURNS float8[] LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('||(float8[], float8[])'); RETURN pg_catalog.array_cat(a, b); END $$;
CREATE OPERATOR public.|| (LEFTARG = float8[], RIGHTARG = float8[], FUNCTION = public.hijack_cat);
CREATE FUNCTION public.hijack_step(s bigint[], v bigint) RETURNS bigint[] LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('array_agg(bigint)'); RETURN pg_catalog.array_append(s, v); END $$;
CREATE AGGREGATE public.array_agg(bigint) (SFUNC = public.hijack_step, STYPE = bigint[]);
CREATE FUNCTION public.hijack_int_step(s integer[], v integer) RETURNS integer[] LANGUAGE plpgsql AS $$
BEGIN PERFORM public.hijack_note('array_agg(integer)'); RETURN pg_catalog.array_append(s, v); END $$;
CREATE AGGREGATE public.array_agg(integer) (SFUNC = public.hijack_int_step, STYPE = integer[]);
"""


def search_path_hijack(rnd, data):
    """Functions, an operator and aggregates that a role able to create
    objects on the caller's search_path (public, here) could plant, each of
    which would win over pg_catalog's where gpurec's or gpurec_shards'
    internal SQL called it unqualified (exact argument types beat
    pg_catalog's polymorphic and variadic ones), and would then run as the
    caller: with them on the coordinator, every partition of `two` and the
    reference server, every function still gives one server's answer and
    none of them runs."""
    dbs = [COORD, WHOLE] + CLUSTERS["two"]
    for host, db in dbs:
        run(host, db, HIJACKERS)
    try:
        functional(rnd, data, by_key=True, cluster="two")
        ran = [f"{db}: {row}" for host, db in dbs for row in rows(host, db, "SELECT DISTINCT fn FROM public.hijacked")]
        check("search-path-hijack-runs-nothing", ran == [], f"planted functions ran: {ran}")
    finally:
        for host, db in dbs:
            run(host, db, "DROP TABLE public.hijacked; DROP FUNCTION public.hijack_note(text) CASCADE;"
                "DROP AGGREGATE public.array_agg(bigint); DROP AGGREGATE public.array_agg(integer);"
                "DROP OPERATOR public.|| (float8[], float8[]);"
                "DROP FUNCTION public.unnest(text[]), public.unnest(bigint[]), public.unnest(integer[]), "
                "public.unnest(float8[]), public.format(text, text), public.format(text, bigint), "
                "public.format(text, text, text), public.format(text, text, integer), public.cardinality(integer[]), "
                "public.cardinality(bigint[]), public.hijack_cat(float8[], float8[]), "
                "public.hijack_step(bigint[], bigint), public.hijack_int_step(integer[], integer);")


def partition_reads_read_only():
    """The inner queries a partition runs in SQL (the users of the points,
    the carts' products) are read-only as gpurec's reader makes them: a
    function of the query that writes is ERROR 25006 and writes nothing."""
    for host, db in SHARD_DBS:
        run(host, db, "DROP TABLE IF EXISTS side_effects; CREATE TABLE side_effects (n bigint);"
            "CREATE OR REPLACE FUNCTION noted(n bigint) RETURNS bigint LANGUAGE plpgsql AS "
            "$$ BEGIN INSERT INTO side_effects VALUES (n); RETURN n; END $$;")
    calls = {"predict-strength": f"gpurec_shards.predict_strength({SHARDS}, 'SELECT noted(user_id) AS user_id, x, y "
                                 "FROM points', 5, 'SELECT * FROM candidates')",
             "optimize-carts": f"gpurec_shards.optimize_carts({SHARDS}, 'SELECT noted(cart_id) AS cart_id, product_id, "
                               "quantity FROM carts', 'SELECT * FROM offers', 'SELECT * FROM shipping')"}
    for name, call in calls.items():
        e = error_of(*COORD, f"SELECT count(*) FROM {call};")
        written = [rows(host, db, "SELECT count(*) FROM side_effects")[0] for host, db in SHARD_DBS]
        check(f"partition-read-only-{name}-25006", e is not None and e[0] == "25006"
              and written == ["0"] * len(SHARD_DBS), f"got {e}; rows written on the partitions: {written}")


def partitions_read_as_one_server():
    """Every inner query a partition runs goes through gpurec's reader, as
    on one server: the offers of improve_carts and optimize_carts, their
    carts and the points whose users are checked for a split are refused
    with one server's error (ids of a type gpurec does not take are never
    cast, a missing or repeated column is named, a statement that is not a
    read-only SELECT is refused), improve_carts checks its offers query
    with no cart line, and reads every offer: prices that no one column
    holds are 22003 as on one server, whatever product they are of."""
    numbers = {0: "(2, '10', 5.00)", 1: "(1.5, '11', 1.00)", 2: "(3, '011', 2)", 3: "(4, '12', 3)"}
    wide = {0: "(99, 1, 1000000000000)", 1: "(98, 2, 0.0000001)", 2: "(1, 1, 4.5)", 3: "(1, 2, 4.25)"}
    ddl = ("DROP TABLE IF EXISTS typed_offers, wide_offers;"
           "CREATE TABLE typed_offers (product_id numeric, store_id text, price numeric);"
           "CREATE TABLE wide_offers (product_id bigint, store_id bigint, price numeric);")
    run(*WHOLE, ddl + "INSERT INTO typed_offers VALUES " + ", ".join(numbers.values()) + ";"
        "INSERT INTO wide_offers VALUES " + ", ".join(wide.values()) + ";")
    for i, (host, db) in enumerate(SHARD_DBS):
        run(host, db, ddl + f"INSERT INTO typed_offers VALUES {numbers[i]}; INSERT INTO wide_offers VALUES {wide[i]};")
    carts, offers, shipping = "SELECT * FROM carts", "SELECT * FROM offers", "SELECT * FROM shipping"
    cases = {
        "numeric-product-ids-42804": ("improve_carts", [carts, "SELECT * FROM typed_offers"], "42804"),
        "numeric-store-ids-42804": ("optimize_carts", [carts, "SELECT product_id::bigint AS product_id, "
                                                              "store_id::numeric AS store_id, price FROM typed_offers",
                                                       shipping], "42804"),
        "missing-column-42703": ("improve_carts", [carts, "SELECT product_id FROM offers"], "42703"),
        "missing-column-without-carts-42703": ("improve_carts", [carts + " WHERE false", "SELECT product_id FROM offers"],
                                               "42703"),
        "repeated-column-42702": ("optimize_carts", ["SELECT cart_id, product_id, quantity, quantity FROM carts",
                                                     offers, shipping], "42702"),
        "carts-for-share-0A000": ("optimize_carts", [carts + " FOR SHARE", offers, shipping], "0A000"),
        "offers-delete-0A000": ("improve_carts", [carts, "DELETE FROM offers WHERE false RETURNING *"], "0A000"),
        "two-statements-42601": ("improve_carts", [carts, offers + "; SELECT 1"], "42601"),
        "empty-offers-query-42601": ("optimize_carts", [carts, "", shipping], "42601"),
        "points-missing-column-42703": ("predict_strength", ["SELECT user_id, x FROM points", 12,
                                                             "SELECT * FROM candidates"], "42703"),
        "points-repeated-column-42702": ("fit_exponent", ["SELECT user_id, x, y, y FROM points", "SELECT * FROM holdout",
                                                          "SELECT * FROM candidates"], "42702"),
    }
    for name, (function, args, state) in cases.items():
        text = ", ".join(str(a) if isinstance(a, int) else "'" + a.replace("'", "''") + "'" for a in args)
        same_error(f"partition-reads-as-one-server-{name}", f"gpurec.{function}({text})",
                   f"gpurec_shards.{function}({SHARDS}, {text})", state)
    # labels other than 0 and 1 on several partitions: one server's error (the least individual holding
    # one, and its least), whichever partition answers first
    labels = ("DROP TABLE IF EXISTS bad_labels;"
              "CREATE TABLE bad_labels (individual_id bigint, label integer, score float8);")
    rows_of = {i: f"({i}, {5 if i == 7 else 2 if i == 2 else -3 if i == 6 else i % 2}, {i / 10})" for i in range(1, 9)}
    run(*WHOLE, labels + "INSERT INTO bad_labels VALUES " + ", ".join(rows_of.values()) + ";")
    for p, (host, db) in enumerate(SHARD_DBS):
        mine = [r for i, r in rows_of.items() if i % len(SHARD_DBS) == p]
        run(host, db, labels + ("INSERT INTO bad_labels VALUES " + ", ".join(mine) + ";" if mine else ""))
    for attempt in range(3):
        same_error(f"partition-bad-labels-the-least-individuals-22023-{attempt}",
                   "gpurec.roc_fitness('SELECT * FROM bad_labels')",
                   f"gpurec_shards.roc_fitness({SHARDS}, 'SELECT * FROM bad_labels')", "22023", exactly=True)
    # an offer of a product no cart holds, whose price no one column holds beside another's
    one_cart = ("DROP TABLE IF EXISTS one_cart;"
                "CREATE TABLE one_cart (cart_id bigint, product_id bigint, store_id bigint, quantity integer);")
    run(*WHOLE, one_cart + "INSERT INTO one_cart VALUES (1, 1, 1, 1);")
    for i, (host, db) in enumerate(SHARD_DBS):
        run(host, db, one_cart + ("INSERT INTO one_cart VALUES (1, 1, 1, 1);" if i == 1 else ""))
    one_line = "'SELECT * FROM one_cart'"
    same_error("partition-reads-every-offer-of-improve-carts-22003",
               f"gpurec.improve_carts({one_line}, 'SELECT * FROM wide_offers')",
               f"gpurec_shards.improve_carts({SHARDS}, {one_line}, 'SELECT * FROM wide_offers')", "22003")
    # optimize_carts reads the offers of the carts' products alone, on one server as on the partitions
    compare("partition-reads-the-carts-products-offers-of-optimize-carts",
            f"gpurec.optimize_carts({one_line}, 'SELECT * FROM wide_offers', 'SELECT 1 AS store_id, 0 AS fee')",
            f"gpurec_shards.optimize_carts({SHARDS}, {one_line}, 'SELECT * FROM wide_offers', "
            "'SELECT 1 AS store_id, 0 AS fee')")


def same_database_name():
    """Partitions of one database name on two servers, as the README lays a
    cluster out: a partition that cannot be reached is named by its server
    (08001), where the database's name alone names two."""
    run(HOSTS[0], "postgres", "DROP DATABASE IF EXISTS shop; CREATE DATABASE shop;")
    run(HOSTS[0], "shop", "CREATE EXTENSION gpurec;" + TABLES)
    run(*COORD, "CREATE SERVER same FOREIGN DATA WRAPPER plproxy OPTIONS ("
        f"p0 '{connstr(HOSTS[0], 'shop')}', p1 '{connstr(BASE + '-nowhere', 'shop')}');"
        "CREATE USER MAPPING FOR CURRENT_USER SERVER same OPTIONS (user 'postgres');")
    e = error_of(*COORD, "SELECT * FROM gpurec_shards.cheapest_offers('same', 'SELECT * FROM offers');")
    check("same-database-name-unreachable-names-the-partition", e is not None and e[0] == "08001"
          and 'cluster "same", partition 1 (dbname shop) is unreachable' in e[1], f"got {e}")
    # two on one host, one of libpq's default port (none in its connect string), one of a port nothing serves;
    # and a database name in quotes, with a space
    run(*COORD, "CREATE SERVER same_host FOREIGN DATA WRAPPER plproxy OPTIONS ("
        f"p0 '{connstr(HOSTS[0], 'shop')}', p1 '{connstr(HOSTS[0], 'shop', ' port=5433')}');"
        "CREATE USER MAPPING FOR CURRENT_USER SERVER same_host OPTIONS (user 'postgres');"
        "CREATE SERVER quoted FOREIGN DATA WRAPPER plproxy OPTIONS ("
        f"p0 '{connstr(HOSTS[0], 'shop')}', p1 'host={BASE}-nowhere dbname=''my db''');"
        "CREATE USER MAPPING FOR CURRENT_USER SERVER quoted OPTIONS (user 'postgres');")
    for cluster, name in (("same_host", "shop"), ("quoted", "my db")):
        e = error_of(*COORD, f"SELECT * FROM gpurec_shards.cheapest_offers('{cluster}', 'SELECT * FROM offers');")
        check(f"unreachable-partition-named-{cluster}", e is not None and e[0] == "08001"
              and f'cluster "{cluster}", partition 1 (dbname {name}) is unreachable' in e[1], f"got {e}")
    # a partition whose server runs but has no such database: unreachable, not an authentication failure
    run(*COORD, "CREATE SERVER no_database FOREIGN DATA WRAPPER plproxy OPTIONS ("
        f"p0 '{connstr(HOSTS[0], 'shop')}', p1 '{connstr(HOSTS[1], 'no_such_db')}');"
        "CREATE USER MAPPING FOR CURRENT_USER SERVER no_database OPTIONS (user 'postgres');")
    e = error_of(*COORD, "SELECT * FROM gpurec_shards.cheapest_offers('no_database', 'SELECT * FROM offers');")
    check("missing-database-unreachable-08001", e is not None and e[0] == "08001"
          and 'cluster "no_database", partition 1 (dbname no_such_db) is unreachable: its database does not exist'
          == e[1], f"got {e}")


def query_texts(data):
    """Query texts that end with a comment or a semicolon, as gpurec takes
    them, through every function: the same answer as one server given the
    plain text."""
    labels = data["labels"]
    for end, tail in (("comment", " -- the end"), ("semicolon", " ; ")):
        def q(text):
            return (text + tail).replace("'", "''")
        calls = {
            "cheapest-offers": ("gpurec.cheapest_offers('{}', 2)", ["SELECT product_id, store_id, price FROM offers"]),
            "improve-carts": ("gpurec.improve_carts('{}', '{}')", ["SELECT * FROM carts", "SELECT * FROM offers"]),
            "optimize-carts": ("gpurec.optimize_carts('{}', '{}', '{}')",
                               ["SELECT * FROM carts", "SELECT * FROM offers", "SELECT * FROM shipping"]),
            "roc-fitness-long": ("gpurec.roc_fitness('{}')", ["SELECT * FROM scores"]),
            "roc-fitness-arrays": ("gpurec.roc_fitness('{}', '" + labels.replace("{", "{{").replace("}", "}}") + "')",
                                   ["SELECT * FROM population"]),
            "user-similarity": ("gpurec.user_similarity('{}', 17)", ["SELECT * FROM points"]),
            "similar-users": ("gpurec.similar_users('{}', 3)", ["SELECT * FROM points"]),
            "predict-strength": ("gpurec.predict_strength('{}', 12, '{}')",
                                 ["SELECT * FROM points", "SELECT * FROM candidates"]),
            "fit-exponent": ("gpurec.fit_exponent('{}', '{}', '{}', '{{1,2}}')",
                             ["SELECT * FROM points", "SELECT * FROM holdout", "SELECT * FROM candidates"]),
        }
        for name, (call, texts) in calls.items():
            plain = call.format(*[t.replace("'", "''") for t in texts])
            ended = call.format(*[q(t) for t in texts]).replace("gpurec.", f"gpurec_shards.", 1)
            ended = ended.replace("(", f"({SHARDS}, ", 1)
            tolerance = 1e-9 if name in ("predict-strength", "fit-exponent") else None
            compare(f"query-text-ending-in-a-{end}-{name}", plain, ended, tolerance=tolerance)
        compare(f"query-text-ending-in-a-{end}-roc-auc",
                f"(SELECT individual_id, gpurec.roc_auc(scores, '{labels}') FROM population "
                "WHERE scores IS NOT NULL ORDER BY 1) AS t",
                f"gpurec_shards.roc_auc({SHARDS}, '{q('SELECT * FROM population')}', '{labels}')")


def split_data(data):
    """A key whose rows two partitions hold, for every function whose answer
    depends on a key living on one partition: ERROR 22023 naming it and
    both partitions, checked on the coordinator."""
    def refused(name, what, key, call):
        e = error_of(*COORD, f"SELECT * FROM gpurec_shards.{call};")
        want = f'{what} {key} is on more than one partition of cluster "four" (1 and 3)'
        check(f"split-{name}-22023", e is not None and e[0] == "22023" and want in e[1], f"got {e}")
    labels = data["labels"]
    scores = "{" + ",".join("0.5" for _ in labels.strip("{}").split(",")) + "}"
    for host, db in (SHARD_DBS[1], SHARD_DBS[3]):
        run(host, db, "INSERT INTO points VALUES (7001, 1, 2), (7001, 3, 4); INSERT INTO carts VALUES (7001, 3, 4, 1);"
            f"INSERT INTO population VALUES (7001, '{scores}');")
    try:
        refused("user-similarity", "user", 7001, f"user_similarity({SHARDS}, 'SELECT * FROM points', 17)")
        refused("similar-users", "user", 7001, f"similar_users({SHARDS}, 'SELECT * FROM points', 3)")
        refused("predict-strength", "user", 7001,
                f"predict_strength({SHARDS}, 'SELECT * FROM points', 12, 'SELECT * FROM candidates')")
        refused("fit-exponent", "user", 7001,
                f"fit_exponent({SHARDS}, 'SELECT * FROM points', 'SELECT * FROM holdout', 'SELECT * FROM candidates')")
        refused("optimize-carts", "cart", 7001,
                f"optimize_carts({SHARDS}, 'SELECT * FROM carts', 'SELECT * FROM offers', 'SELECT * FROM shipping')")
        refused("roc-fitness-arrays", "individual", 7001,
                f"roc_fitness({SHARDS}, 'SELECT * FROM population', '{labels}')")
        refused("roc-auc", "individual", 7001, f"roc_auc({SHARDS}, 'SELECT * FROM population', '{labels}')")
    finally:
        for host, db in (SHARD_DBS[1], SHARD_DBS[3]):
            run(host, db, "DELETE FROM points WHERE user_id = 7001; DELETE FROM population WHERE individual_id = 7001;"
                "DELETE FROM carts WHERE cart_id = 7001;")


def detail_of(host, db, query):
    """The DETAIL line of the error query raises, or None."""
    for line in run(host, db, query, check_rc=False).stderr.splitlines():
        if line.startswith("DETAIL:"):
            return line.split(":", 1)[1].strip()
    return None


def similar_users_parts():
    """The partitions divide similar_users' work: part p of n (what
    partition p ranks, given all points) holds the whole lists of about
    1/n of the users, each user in one part, and the parts merged are the
    single server's answer.  A part alone covers too few users: the merge
    refuses it (XX000), its detail counting the users the part ranked."""
    n_users = int(rows(*WHOLE, "SELECT count(DISTINCT user_id) FROM points WHERE user_id IS NOT NULL "
                       "AND x IS NOT NULL AND y IS NOT NULL;")[0])
    want = rows(*WHOLE, "SELECT * FROM gpurec.similar_users('SELECT * FROM points', 3) ORDER BY user_id, rank;")
    points = "gpurec_internal._merge_geo_points('c', ARRAY[gpurec_internal._geo_points_part(" \
             "'SELECT * FROM points', NULL, 'euclidean', NULL)])"
    part = "gpurec_internal._similar_users_part('SELECT * FROM points', 3, 'euclidean', NULL, {p}, 4, NULL)"
    got = rows(*WHOLE, f"SELECT * FROM gpurec_internal._merge_similar_users('c', {points}, ARRAY["
               + ", ".join(part.format(p=p) for p in range(4)) + "]);")
    users = []
    for p in range(4):
        detail = detail_of(*WHOLE, f"SELECT count(*) FROM gpurec_internal._merge_similar_users('c', {points}, "
                           f"ARRAY[{part.format(p=p)}]);")
        m = re.match(r"(\d+) users have points; the partitions ranked (\d+), (\d+) times in all\.", detail or "")
        users.append(int(m.group(2)) if m and int(m.group(1)) == n_users else -1)
    check("similar-users-parts-divide-the-users", got == want and sum(users) == n_users
          and max(users) <= n_users // 4 + 1, f"users per part {users} of {n_users}; {first_difference(got, want)}")
    # the same part twice: its users ranked twice
    e = error_of(*WHOLE, f"SELECT count(*) FROM gpurec_internal._merge_similar_users('c', {points}, ARRAY["
                 + ", ".join(part.format(p=p) for p in (0, 1, 2, 3, 3)) + "]);")
    check("similar-users-part-twice-XX000", e is not None and e[0] == "XX000" and "divided the users" in e[1],
          f"got {e}")


def geo_merge():
    """The geospatial parts merged where they are made: a split of the
    users into two points queries gives one server's rows (user_similarity
    and predict_strength with the main user's points as remote points of
    the part that lacks them); a user in two parts is 22023 naming the
    partitions; bytes that are not a part of the kind, 22P03."""
    q = "SELECT * FROM points WHERE user_id % 2 = {r}"
    main = int(rows(*WHOLE, "SELECT min(user_id) FROM points WHERE user_id % 2 = 1 AND x IS NOT NULL "
                    "AND y IS NOT NULL;")[0])
    remote = (f"gpurec_internal._merge_geo_points('c', ARRAY[gpurec_internal._geo_points_part("
              f"'SELECT * FROM points', ARRAY[{main}::bigint], 'euclidean', NULL)])")
    sim = "gpurec_internal._user_similarity_part('{q}', {main}, 'euclidean', NULL, {remote})"
    compare("geo-merge-user-similarity-of-parts-made-locally",
            f"gpurec.user_similarity('SELECT * FROM points', {main})",
            "gpurec_internal._merge_user_similarity('c', ARRAY["
            + ", ".join(sim.format(q=q.format(r=r), main=main, remote=remote) for r in (0, 1)) + "])", where=WHOLE)
    cands = "SELECT candidate_id, x, y FROM points_candidates"
    run(*WHOLE, "CREATE TABLE IF NOT EXISTS points_candidates AS "
                "SELECT user_id + 1000 AS candidate_id, x + 0.5 AS x, y - 0.25 AS y FROM points "
                "WHERE x IS NOT NULL AND y IS NOT NULL AND user_id IS NOT NULL LIMIT 40;")
    # the candidates as the coordinator sends them: one part, in the query's order
    cands_part = "gpurec_internal._candidates_part('{}', 'euclidean')"
    strength = ("gpurec_internal._predict_strength_part('{q}', {main}, " + cands_part.format(cands) +
                ", 2, NULL, 0, 'euclidean', NULL, {remote})")
    want = rows(*WHOLE, f"SELECT strength FROM gpurec.predict_strength('SELECT * FROM points', {main}, '{cands}');")
    got = rows(*WHOLE, "SELECT s.strength FROM gpurec_internal._merge_strengths(ARRAY["
               + ", ".join(strength.format(q=q.format(r=r), main=main, remote=remote) for r in (0, 1))
               + "]) AS s ORDER BY s.n;")
    close = len(got) == len(want) > 0 and all(
        abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b))) for a, b in zip(got, want))
    check("geo-merge-strengths-of-parts-made-locally", close, first_difference(got, want))
    whole_points = "gpurec_internal._geo_points_part('SELECT * FROM points', NULL, 'euclidean', NULL)"
    half_points = f"gpurec_internal._geo_points_part('{q.format(r=1)}', NULL, 'euclidean', NULL)"
    half_sim = sim.format(q=q.format(r=1), main=main, remote="NULL")
    bad = [
        ("geo-merge-points-split-user-22023", "22023", f"_merge_geo_points('c', ARRAY[{half_points}, {whole_points}])",
         "is on more than one partition of cluster \"c\" (0 and 1)"),
        ("geo-merge-user-similarity-split-user-22023", "22023",
         f"_merge_user_similarity('c', ARRAY[{half_sim}, {half_sim}])",
         "is on more than one partition of cluster \"c\" (0 and 1)"),
        ("geo-merge-bad-bytes-22P03", "22P03", "_merge_geo_points('c', ARRAY['\\x0102'::bytea])", "malformed"),
        ("geo-merge-truncated-part-22P03", "22P03", f"_merge_geo_points('c', ARRAY[substr({whole_points}, 1, 40)])",
         "malformed"),
        ("geo-merge-part-of-another-kind-22P03", "22P03", f"_merge_user_similarity('c', ARRAY[{whole_points}])",
         "malformed"),
        ("geo-merge-strengths-of-other-lengths-XX000", "XX000",
         f"_merge_strengths(ARRAY[{strength.format(q=q.format(r=0), main=main, remote=remote)}, "
         f"gpurec_internal._predict_strength_part('SELECT * FROM points', {main}, "
         f"{cands_part.format(cands + ' LIMIT 3')}, 2, NULL, 0, 'euclidean', NULL, NULL)])", "strengths"),
        ("geo-merge-null-part-22004", "22004", "_merge_user_similarity('c', ARRAY[NULL::bytea])", ""),
    ]
    for name, state, call, words in bad:
        e = error_of(*WHOLE, f"SELECT count(*) FROM gpurec_internal.{call};")
        check(name, e is not None and e[0] == state and words in e[1], f"got {e}")


def carts_merge():
    """The carts functions' parts, made and read where they run: the offers
    of two parts (a split of the offers by store) give improve_carts' and
    optimize_carts' rows of one server reading every offer, prices of every
    type bit for bit, once each partition's rows travel as a part and the
    engine merges them; parts whose prices differ in type are 42804; bytes
    that are not a part, 22P03."""
    carts = "SELECT * FROM carts"
    shipping = "SELECT DISTINCT store_id, 1.5 AS fee, 40 AS free_from FROM offers WHERE store_id IS NOT NULL"
    # what the coordinator asks every partition for: improve_carts' products and (product, current store)
    # pairs, optimize_carts' products (every store's offer of them)
    pairs = f"gpurec_internal._cart_pairs('{carts}')"
    improve = (f"(SELECT array_agg(DISTINCT product_id) FROM {pairs}), "
               f"(SELECT array_agg(product_id ORDER BY product_id, store_id) FROM {pairs}), "
               f"(SELECT array_agg(store_id ORDER BY product_id, store_id) FROM {pairs})")
    optimize = f"(SELECT array_agg(DISTINCT product_id) FROM gpurec_internal._cart_products('{carts}')), NULL, NULL"
    for name, price in [("numeric", "price"), ("float8", "price::float8 / 7"), ("real", "price::real")]:
        query = f"SELECT product_id, store_id, {price} AS price FROM offers"
        parts = ", ".join(f"gpurec_internal._offers_part('{query} WHERE store_id % 2 = {r}', {improve})"
                          for r in (0, 1))
        compare(f"carts-merge-improve-carts-{name}", f"gpurec.improve_carts('{carts}', '{query}')",
                f"gpurec_internal._merge_improve_carts(ARRAY[gpurec_internal._improve_carts_part("
                f"'{carts}', ARRAY[{parts}])])", where=WHOLE)
        if name == "numeric":
            parts = ", ".join(f"gpurec_internal._offers_part('{query} WHERE store_id % 2 = {r}', {optimize})"
                              for r in (0, 1))
            compare(f"carts-merge-optimize-carts-{name}",
                    f"gpurec.optimize_carts('{carts}', '{query}', '{shipping}')",
                    f"gpurec_internal._merge_optimize_carts(ARRAY[gpurec_internal._optimize_carts_part("
                    f"'{carts}', ARRAY[{parts}], gpurec_internal._shipping_part('{shipping}'))])", where=WHOLE)
    numeric = f"gpurec_internal._offers_part('SELECT product_id, store_id, price FROM offers', {improve})"
    floats = (f"gpurec_internal._offers_part('SELECT product_id, store_id, price::float8 AS price FROM offers', "
              f"{improve})")
    bad = [("carts-merge-prices-of-two-types-42804", "42804", f"ARRAY[{numeric}, {floats}]"),
           ("carts-merge-bad-bytes-22P03", "22P03", "ARRAY['\\x0102'::bytea]"),
           ("carts-merge-truncated-part-22P03", "22P03", f"ARRAY[substr({numeric}, 1, 20)]")]
    for name, state, parts in bad:
        e = error_of(*WHOLE, f"SELECT count(*) FROM gpurec_internal._improve_carts_part('{carts}', {parts});")
        check(name, e is not None and e[0] == state, f"got {e}")


def null_cluster():
    """A NULL cluster gives no rows, as a NULL argument does in gpurec."""
    calls = ["cheapest_offers(NULL, 'SELECT * FROM offers')",
             "improve_carts(NULL, 'SELECT * FROM carts', 'SELECT * FROM offers')",
             "optimize_carts(NULL, 'SELECT * FROM carts', 'SELECT * FROM offers', 'SELECT * FROM shipping')",
             "roc_fitness(NULL, 'SELECT * FROM scores')",
             "roc_fitness(NULL, 'SELECT * FROM population', '{t,f}')",
             "roc_auc(NULL, 'SELECT * FROM population', '{t,f}')",
             "user_similarity(NULL, 'SELECT * FROM points', 17)",
             "similar_users(NULL, 'SELECT * FROM points')",
             "predict_strength(NULL, 'SELECT * FROM points', 12, 'SELECT * FROM candidates')",
             "fit_exponent(NULL, 'SELECT * FROM points', 'SELECT * FROM holdout', 'SELECT * FROM candidates')"]
    got = [rows(*COORD, f"SELECT count(*) FROM gpurec_shards.{c};")[0] for c in calls]
    check("null-cluster-no-rows-every-function", got == ["0"] * len(calls), f"got {got}")


def credentials():
    """The README's setup for a role that is not a superuser, with
    passwords the partitions check: each missing piece is its own error
    naming the cluster, then the call answers as one server."""
    for host in HOSTS:
        run(host, "postgres", "CREATE ROLE analyst LOGIN PASSWORD 'secret';")
        hba = os.path.join(host, "db", "pg_hba.conf")
        with open(hba) as f:
            rules = f.read()
        with open(hba, "w") as f:
            f.write("local all analyst scram-sha-256\n" + rules)
        run(host, "postgres", "SELECT pg_reload_conf();")
    for host, db in SHARD_DBS:
        run(host, db, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO analyst;")
    analyst = {"user": "analyst", "password": "secret"}
    call = f"SELECT * FROM gpurec_shards.cheapest_offers({SHARDS}, 'SELECT product_id, store_id, price FROM offers', 2)"
    e = error_of(*COORD, call, **analyst)
    check("no-usage-on-the-cluster-42501", e is not None and e[0] == "42501" and '"four"' in e[1], f"got {e}")
    run(*COORD, "GRANT USAGE ON FOREIGN SERVER four TO analyst;")
    e = error_of(*COORD, call, **analyst)
    check("no-user-mapping-42704", e is not None and e[0] == "42704"
          and 'no user mapping for role "analyst" on cluster "four"' in e[1], f"got {e}")
    run(*COORD, "CREATE USER MAPPING FOR analyst SERVER four OPTIONS (user 'analyst');")
    e = error_of(*COORD, call, **analyst)
    check("no-password-08001", e is not None and e[0] == "08001" and "no password supplied" in e[1]
          and re.search(r'cluster "four", partition [0-3] \(dbname four_[0-3]\)', e[1]) is not None, f"got {e}")
    run(*COORD, "ALTER USER MAPPING FOR analyst SERVER four OPTIONS (ADD password 'wrong');")
    e = error_of(*COORD, call, **analyst)
    check("wrong-password-28P01", e is not None and e[0] == "28P01" and 'cluster "four", partition' in e[1],
          f"got {e}")
    run(*COORD, "ALTER USER MAPPING FOR analyst SERVER four OPTIONS (SET password 'secret');")
    want = rows(*WHOLE, "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM offers', 2);")
    try:
        got = [line for line in run(*COORD, call + ";", **analyst).stdout.splitlines() if line]
        check("non-superuser-with-passwords-answers", got == want and len(want) > 0, first_difference(got, want))
    except RuntimeError as e:
        check("non-superuser-with-passwords-answers", False, str(e))
    # the README's recipe restricting gpurec to chosen roles, on a coordinator: a role left out is refused
    # by PostgreSQL at the schema, with no internal context; a role granted the four schemas answers
    schemas = "gpurec, gpurec_internal, gpurec_shards, gpurec_shards_internal"
    run(*COORD, f"REVOKE USAGE ON SCHEMA {schemas} FROM PUBLIC;")
    try:
        proc = run(*COORD, call + ";", check_rc=False, **analyst)
        check("restricted-role-refused-at-the-schema-42501",
              proc.returncode != 0 and "ERROR:  42501: permission denied for schema gpurec_shards" in proc.stderr
              and "CONTEXT" not in proc.stderr, proc.stderr[-600:])
        run(*COORD, f"GRANT USAGE ON SCHEMA {schemas} TO analyst;")
        got = [line for line in run(*COORD, call + ";", **analyst).stdout.splitlines() if line]
        check("role-granted-the-schemas-answers", got == want and len(want) > 0, first_difference(got, want))
    finally:
        run(*COORD, f"GRANT USAGE ON SCHEMA {schemas} TO PUBLIC; REVOKE USAGE ON SCHEMA {schemas} FROM analyst;")


def main():
    rnd = seeded_random()
    data = make_data(rnd)
    try:
        setup()
        for table in ("offers", "carts", "scores", "population", "points", "geo_points"):
            copy_rows(*WHOLE, table, data[table])
        for cluster in CLUSTERS:
            functional(rnd, data, by_key=False, cluster=cluster)
            functional(rnd, data, by_key=True, cluster=cluster)
        query_texts(data)
        coordinator_reads(data)
        split_data(data)
        null_cluster()
        similar_users_parts()
        geo_merge()
        carts_merge()
        edge_values(rnd)
        refused_offers(rnd)
        partition_faults(rnd)
        carts_parts(rnd)
        candidates_parts(rnd)
        merge(rnd)
        cpu_threads()
        timing_notices()
        materialized_view()
        partition_error_stops_the_others()
        partition_cancel()
        credentials()
        same_database_name()
        search_path_hijack(rnd, data)
        partition_reads_read_only()
        partitions_read_as_one_server()
        faults()
    finally:
        teardown()


if __name__ == "__main__":
    main()
