#!/usr/bin/env python3
"""A seeded fuzzer of gpurec's inner queries and arguments.

Calls are drawn from a small grammar: a function (every one of gpurec's
SQL functions), an inner query built from VALUES, generate_series and
subselects whose columns take every supported and unsupported type
(smallint, integer, bigint, numeric at the edge of 18 digits, real, double
precision, boolean, text, date, domains over int and numeric, real[] and
float8[] arrays with NULLs, empty, huge, with other lower bounds or more
dimensions), NULLs, NaN, +-Infinity, -0.0, ids at the int64 limits, k at 1
and 2^31-1, duplicate, missing and misspelled columns, inner queries that
fail at row N, return no rows or many rows, empty text, DML and two
statements.

Each call must give the oracle's answer or an ERROR whose SQLSTATE is not
XX000 (and, where the contract names one, that SQLSTATE).  The oracles:
plain SQL for the marketplace (window functions on the very same inner
query), Python for the rest (brute-force similarity and strength, mid-rank
AUC), and the structural contract (row counts, order, NULL rules) where no
cheap oracle exists.  After the run: no backend was terminated by a signal
(server log), the idle sentinel session survived, and one backend's memory
stays flat over repeated calls.

One PASS/FAIL line per category of inputs.  The seed is printed
(GPUREC_SEED=N replays a run); GPUREC_FUZZ_SECONDS (default 90) is the
time given to the random calls, shared among the categories; the fixed edge
cases of every category always run.
"""
import math
import os
import random
import sys
import time
from decimal import Decimal
from fractions import Fraction

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import check, main, proc_memory, run_in_database  # noqa: E402

SECONDS = float(os.environ.get("GPUREC_FUZZ_SECONDS", "90"))
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT_MAX = (1 << 31) - 1
RANGES = {"smallint": (-32768, 32767), "integer": (-(1 << 31), INT_MAX),
          "bigint": (INT64_MIN, INT64_MAX), "fuzz_int": (-(1 << 31), INT_MAX)}
ID_TYPES = list(RANGES)
BAD_ID_TYPES = {"numeric": "1.0", "real": "1", "double precision": "1", "text": "'1'",
                "date": "'2026-01-01'", "boolean": "true", "real[]": "'{1}'"}
BAD_VALUE_TYPES = {"text": "'1.5'", "date": "'2026-01-01'", "boolean": "true",
                   "real[]": "'{1.5}'", "float8[]": "'{1.5}'", "interval": "'1 day'"}
R_EARTH = 6371008.8

rng = None
SEED = None


def lit(text):
    """A dollar-quoted literal of an inner query."""
    assert "$q$" not in text
    return f"$q${text}$q$"


def values_query(columns, rows, extra_where=""):
    """SELECT * FROM (VALUES ...) AS t(columns); rows hold SQL literals."""
    body = ", ".join("(" + ", ".join(r) + ")" for r in rows)
    return f"SELECT * FROM (VALUES {body}) AS t({', '.join(columns)}){extra_where}"


def table(columns, rows, null_row):
    """A VALUES query of rows with its columns in random order (columns match by
    name); without rows, null_row (typed NULLs) under WHERE false: no rows."""
    where = ""
    if not rows:
        rows, where = [null_row], " WHERE false"
    order = list(range(len(columns)))
    rng.shuffle(order)
    return values_query([columns[i] for i in order], [[r[i] for i in order] for r in rows], where)


# ------------------------------------------------------------------ verdicts --

def crash_or_internal(r):
    """Why r shows a crash or an internal error, or ''."""
    for level, state, text, _ in r.messages:
        if level in ("FATAL", "PANIC"):
            return f"{level}: {text}"
        if level == "ERROR" and (state is None or state == "XX000"):
            return f"internal ERROR {state}: {text}"
        if level == "PSQL" and ("server closed" in text or "connection" in text.lower()):
            return f"connection lost: {text}"
    return ""


def want_error(*states):
    def verify(r):
        got = r.sqlstates()
        if not got:
            return f"expected ERROR {'/'.join(states)}, got {len(r.rows)} rows: {r.rows[:3]}"
        if got[0] not in states:
            return f"expected ERROR {'/'.join(states)}, got {got[0]}: {r.describe()}"
        return ""
    return verify


def want_rows(fn, allowed_errors=()):
    """fn(rows) -> '' or why; an ERROR of allowed_errors also passes."""
    def verify(r):
        got = r.sqlstates()
        if got:
            if got[0] in allowed_errors:
                return ""
            return f"unexpected ERROR {got[0]}: {r.describe()}"
        return fn(r.rows)
    return verify


def compared(rows):
    """The row of compare_sql: '' when gpurec and the oracle agree."""
    if len(rows) != 1 or len(rows[0]) != 7:
        return f"odd comparison output {rows[:3]}"
    ng, nw, na, nb, nbad, ea, eb = rows[0]
    if na == "0" and nb == "0" and nbad == "0":
        return ""
    return (f"{ng} rows from gpurec, {nw} from the oracle; {na} only in gpurec (e.g. {ea}), "
            f"{nb} only in the oracle (e.g. {eb}); {nbad} out of order")


def compare_sql(got, cols, want, keys, strict):
    """One statement comparing gpurec's rows (got, with ordinality o) with the
    oracle's as multisets, and checking got's order on keys."""
    op = "<=" if strict else "<"
    k = ", ".join(keys)
    lk = ", ".join(f"lag({x}) OVER (ORDER BY o)" for x in keys)
    return f"""WITH g AS MATERIALIZED ({got}), w AS MATERIALIZED ({want}),
  a AS MATERIALIZED (SELECT {cols} FROM g EXCEPT ALL SELECT * FROM w),
  b AS MATERIALIZED (SELECT * FROM w EXCEPT ALL SELECT {cols} FROM g)
SELECT (SELECT count(*) FROM g), (SELECT count(*) FROM w), (SELECT count(*) FROM a),
  (SELECT count(*) FROM b),
  (SELECT count(*) FROM (SELECT ({k}) {op} ({lk}) AS bad FROM g) x WHERE bad),
  (SELECT string_agg(x::text, ' ') FROM (SELECT * FROM a LIMIT 2) x),
  (SELECT string_agg(x::text, ' ') FROM (SELECT * FROM b LIMIT 2) x);"""


def close(a, b, rel, absolute=0.0):
    if a is None or b is None:
        return a is None and b is None
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= max(absolute, rel * max(abs(a), abs(b)))


def fnum(text):
    return None if text is None or text == "\\N" else float(text)


def nul(v):
    return None if v == "\\N" else v


# ------------------------------------------------------------- marketplace --

def price_literal(ptype):
    """(SQL literal, kind) of one price of type ptype; few values, so ties are frequent."""
    x = rng.random()
    if x < 0.06:
        return f"NULL::{ptype}"
    if ptype in RANGES:
        lo, hi = RANGES[ptype]
        v = rng.choice([lo, hi, 0, -1]) if x < 0.12 else rng.randint(-5, 20)
        return f"({v})::{ptype}"
    if ptype == "fuzz_price":  # numeric(10,2)
        return f"{rng.choice(['1.5', '1.50', '0', '-0.01', '99999999.99', '-3', '2.25'])}::{ptype}"
    if ptype == "numeric":
        return f"'{rng.choice(['1.5', '1.50', '2', '-0', '0.000001', 'NaN', 'Infinity', '-Infinity', '3.125', '-7', '123456789012.5'])}'::numeric"
    specials = ["'NaN'", "'Infinity'", "'-Infinity'", "'-0.0'", "'0'"]
    if x < 0.25:
        return f"{rng.choice(specials)}::{ptype}"
    return f"{rng.randint(-8, 40) / 4}::{ptype}"


def id_literal(itype, small=True):
    if rng.random() < 0.05:
        return f"NULL::{itype}"
    lo, hi = RANGES[itype]
    if rng.random() < 0.1:
        return f"({rng.choice([lo, hi])})::{itype}"
    return f"({rng.randint(-3, 12) if small else rng.randint(lo, hi)})::{itype}"


def offers_query(n=None, ptype=None, extra=False):
    ptype = ptype or rng.choice(["smallint", "integer", "bigint", "numeric", "real",
                                 "double precision", "fuzz_price"])
    pt, st = rng.choice(ID_TYPES), rng.choice(ID_TYPES)
    n = rng.randint(0, 30) if n is None else n
    cols = ["product_id", "store_id", "price"] + (["note"] if extra else [])
    rows = [[id_literal(pt), id_literal(st), price_literal(ptype)] + (["'x'"] if extra else [])
            for _ in range(n)]
    return table(cols, rows, [f"NULL::{pt}", f"NULL::{st}", f"NULL::{ptype}", "'x'"][:len(cols)])


def cheapest_case(offers, k):
    got = (f"SELECT product_id, offer_rank, store_id, trim_scale(price) AS price, n_offers, o "
           f"FROM gpurec.cheapest_offers({lit(offers)}, {k}) WITH ORDINALITY "
           f"AS t(product_id, offer_rank, store_id, price, n_offers, o)")
    want = f"""SELECT product_id::bigint, rn::integer, store_id::bigint,
          trim_scale(price::numeric), n::bigint
        FROM (SELECT product_id, store_id, price,
                row_number() OVER (PARTITION BY product_id ORDER BY price, store_id) AS rn,
                count(*) OVER (PARTITION BY product_id) AS n
              FROM ({offers}) q
              WHERE product_id IS NOT NULL AND store_id IS NOT NULL AND price IS NOT NULL) s
        WHERE rn <= {k}"""
    return compare_sql(got, "product_id, offer_rank, store_id, price, n_offers", want,
                       ["product_id", "offer_rank"], True)


def improve_case(carts, offers, has_quantity=True):
    quantity = "coalesce(quantity::bigint, 1)" if has_quantity else "1::bigint"
    got = (f"SELECT cart_id, product_id, quantity, current_store_id, trim_scale(current_price) cp,"
           f" best_store_id, trim_scale(best_price) bp, trim_scale(saving) sv, o "
           f"FROM gpurec.improve_carts({lit(carts)}, {lit(offers)}) WITH ORDINALITY AS "
           f"t(cart_id, product_id, quantity, current_store_id, current_price, best_store_id, "
           f"best_price, saving, o)")
    want = f"""WITH o AS (SELECT product_id::bigint AS p, store_id::bigint AS s, price
                FROM ({offers}) q WHERE product_id IS NOT NULL AND store_id IS NOT NULL
                AND price IS NOT NULL),
        best AS (SELECT p, s, price FROM (SELECT p, s, price, row_number() OVER (
                 PARTITION BY p ORDER BY price, s) AS rn FROM o) r WHERE rn = 1),
        cur AS (SELECT p, s, min(price) AS price FROM o GROUP BY p, s),
        l AS (SELECT cart_id::bigint AS cart_id, product_id::bigint AS product_id,
                     store_id::bigint AS store_id, {quantity} AS quantity
              FROM ({carts}) c
              WHERE cart_id IS NOT NULL AND product_id IS NOT NULL AND store_id IS NOT NULL)
        SELECT l.cart_id, l.product_id, l.quantity, l.store_id, trim_scale(cur.price::numeric),
               best.s, trim_scale(best.price::numeric),
               trim_scale((cur.price::numeric - best.price::numeric) * l.quantity)
        FROM l LEFT JOIN best ON best.p = l.product_id
        LEFT JOIN cur ON cur.p = l.product_id AND cur.s = l.store_id
        WHERE best.s IS NULL OR cur.price IS NULL OR best.price < cur.price"""
    return compare_sql(got, "cart_id, product_id, quantity, current_store_id, cp, best_store_id, "
                       "bp, sv", want, ["cart_id", "product_id", "current_store_id"], False)


def carts_query(n=None, quantity=True, misspelled=False):
    n = rng.randint(0, 15) if n is None else n
    ct, pt, st = (rng.choice(ID_TYPES) for _ in range(3))
    cols = ["cart_id", "product_id", "store_id"]
    if quantity:
        cols.append("qty" if misspelled else "quantity")
    rows = []
    for _ in range(n):
        row = [id_literal(ct), id_literal(pt), id_literal(st)]
        if quantity:
            row.append(rng.choice(["1", "2", "3", "NULL::int", "7::smallint", "40::bigint"]))
        rows.append(row)
    return table(cols, rows, [f"NULL::{ct}", f"NULL::{pt}", f"NULL::{st}", "NULL::int"][:len(cols)])


def gen_marketplace():
    x = rng.random()
    if x < 0.55:
        k = rng.choice([1, 1, 2, 3, 5, INT_MAX])
        return cheapest_case(offers_query(extra=rng.random() < 0.2), k), want_rows(compared)
    if x < 0.9:
        return improve_case(carts_query(), offers_query()), want_rows(compared)
    carts = carts_query(quantity=True, misspelled=True)
    return improve_case(carts, offers_query(), has_quantity=False), want_rows(compared)


def fixed_marketplace():
    cases = []
    lim = (f"SELECT * FROM (VALUES ({INT64_MAX}::bigint, ({INT64_MIN})::bigint, '-0.0'::float8), "
           f"({INT64_MAX}, {INT64_MAX}, 'NaN'), ({INT64_MAX}, 0, '-Infinity'), "
           f"(({INT64_MIN}), -1, 'Infinity'), (({INT64_MIN}), 1, 0.0)) "
           f"AS t(product_id, store_id, price)")
    for k in (1, 2, INT_MAX):
        cases.append((cheapest_case(lim, k), want_rows(compared)))
    dom = ("SELECT g::fuzz_int AS product_id, (g * 7)::fuzz_int % 5 AS store_id, "
           "(g % 3 + 0.25)::fuzz_price AS price FROM generate_series(1, 50) g")
    cases.append((cheapest_case(dom, 2), want_rows(compared)))
    carts = ("SELECT g % 4 AS cart_id, g::fuzz_int AS product_id, 1::smallint AS store_id, "
             "NULL::int AS quantity FROM generate_series(1, 20) g")
    cases.append((improve_case(carts, dom), want_rows(compared)))
    # quantity < 1: 22023
    cases.append(("SELECT * FROM gpurec.improve_carts('SELECT 1 AS cart_id, 1 AS product_id, "
                  "1 AS store_id, 0 AS quantity', 'SELECT 1 AS product_id, 2 AS store_id, "
                  "1 AS price');", want_error("22023")))
    for k in (0, -1, -INT_MAX - 1):
        cases.append((f"SELECT * FROM gpurec.cheapest_offers('SELECT 1 AS product_id, "
                      f"1 AS store_id, 1 AS price', {k});", want_error("22023")))
    # a misspelled quantity is noticed and counts 1
    q = ("SELECT * FROM gpurec.improve_carts('SELECT 1 AS cart_id, 1 AS product_id, "
         "10 AS store_id, 2 AS qty', 'SELECT 1 AS product_id, 11 AS store_id, 1.00 AS price');")

    def noticed(r):
        if r.sqlstates():
            return f"ERROR {r.sqlstates()}: {r.describe()}"
        if not r.rows or r.rows[0][2] != "1":
            return f"quantity is not 1: {r.rows}"
        if not any("quantity" in n for n in r.notices()):
            return f"no NOTICE names the misspelled quantity: {r.describe()}"
        return ""
    cases.append((q, noticed))
    return cases


# ----------------------------------------------------------- numeric edges --

NUMERIC_POOL = ["123456789012345678", "-123456789012345678", "9223372036854775807",
                "-9223372036854775808", "9223372036854775808", "999999999999999999",
                "0.000000000000000001", "-0.000000000000000001", "0.0000000000000000001",
                "1.000000000000000000000", "1000000000000", "0.0000001", "99999999999.9999999",
                "9.223372036854775807", "0.123456789012345678", "0.123456789012345679",
                "NaN", "Infinity", "-Infinity", "-0", "0.1", "1.5", "1.50", "-2.25",
                "12345678901234567.8", "92233720368547758.07"]


def numeric_verdict(values):
    """'ok', 'error' or 'either' for a numeric column holding values (text)."""
    finite = [Decimal(v) for v in values if v not in ("NaN", "Infinity", "-Infinity")]
    if not finite:
        return "ok"

    def scale(v, trimmed):
        d = v.normalize() if trimmed else v
        e = d.as_tuple().exponent
        return max(0, -e)

    def fits(trimmed):
        s = max(scale(v, trimmed) for v in finite)
        if s > 18:
            return "no"
        m = max(abs(v) * (Decimal(10) ** s) for v in finite)
        return "yes" if m <= Decimal("9.2e18") else ("no" if m > Decimal("9.3e18") else "?")

    a, b = fits(True), fits(False)
    if a == b == "yes":
        return "ok"
    if a == b == "no" or max(scale(v, True) for v in finite) > 18:
        return "error"
    return "either"


def gen_numeric():
    n = rng.randint(1, 8)
    vals = [rng.choice(NUMERIC_POOL) for _ in range(n)]
    verdict = numeric_verdict(vals)
    if rng.random() < 0.6:
        rows = [[str(rng.randint(1, 3)), str(rng.randint(1, 4)), f"'{v}'::numeric"] for v in vals]
        q = values_query(["product_id", "store_id", "price"], rows)
        sql = cheapest_case(q, rng.choice([1, 2, 9]))
        ok = compared
    else:
        rows = [[str(rng.randint(1, 2)), rng.choice(["true", "false", "1", "0"]),
                 f"'{v}'::numeric"] for v in vals]
        if len({r[1] in ("true", "1") for r in rows}) and rng.random() < 0.5:
            rows = [[r[0], {"true": "1", "false": "0"}.get(r[1], r[1]), r[2]] for r in rows]
        else:
            rows = [[r[0], {"1": "true", "0": "false"}.get(r[1], r[1]), r[2]] for r in rows]
        q = values_query(["individual_id", "label", "score"], rows)
        data = [(int(r[0]), r[1] in ("true", "1"), v) for r, v in zip(rows, vals)]
        sql = f"SELECT * FROM gpurec.roc_fitness({lit(q)});"
        ok = roc_expect(data)
    if verdict == "ok":
        return sql, want_rows(ok)
    if verdict == "error":
        return sql, want_error("22003")
    return sql, want_rows(ok, allowed_errors=("22003",))


def fixed_numeric():
    out = []
    for vals in (["1234567890123456789"], ["1000000000000", "0.0000001"],
                 ["0.0000000000000000001"], ["1.000000000000000000000", "2"],
                 ["9223372036854775807", "NaN", "-Infinity"], ["-9223372036854775808"],
                 ["0.000000000000000001", "9.223372036854775807"]):
        rows = [[str(i % 2), str(i), f"'{v}'::numeric"] for i, v in enumerate(vals)]
        q = values_query(["product_id", "store_id", "price"], rows)
        verdict = numeric_verdict(vals)
        v = {"ok": want_rows(compared), "error": want_error("22003"),
             "either": want_rows(compared, ("22003",))}[verdict]
        out.append((cheapest_case(q, 3), v))
    return out


# -------------------------------------------------------------- ROC oracle --

def score_key(v):
    """A sort key of a score given as text (NaN above everything, as in PostgreSQL)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = repr(v) if isinstance(v, float) else str(v)
    s = v.strip("'").lower()
    if s == "nan":
        return (3, 0)
    if s in ("infinity", "inf"):
        return (2, 0)
    if s in ("-infinity", "-inf"):
        return (0, 0)
    return (1, Decimal(s))


def auc_of(pairs):
    """(auc, n_pos, n_neg, lowest_positive_rank, highest_positive_rank) of (key, label) pairs."""
    pos = sorted(k for k, lab in pairs if lab)
    neg = sorted(k for k, lab in pairs if not lab)
    allk = sorted((k for k, _ in pairs), reverse=True)
    import bisect
    # rank = 1 + number of strictly higher scores
    asc = sorted(k for k, _ in pairs)

    def rank(k):
        return 1 + len(asc) - bisect.bisect_right(asc, k)
    ranks = [rank(k) for k in pos]
    auc = None
    if pos and neg:
        wins = Fraction(0)
        for k in pos:
            lo = bisect.bisect_left(neg, k)
            hi = bisect.bisect_right(neg, k)
            wins += lo + Fraction(hi - lo, 2)
        auc = float(wins / (len(pos) * len(neg)))
    del allk
    return (auc, len(pos), len(neg), min(ranks) if ranks else None,
            max(ranks) if ranks else None)


def roc_expect(data):
    """A verifier of roc_fitness rows against data: (individual, label bool or None, score text or None)."""
    by = {}
    for ind, lab, score in data:
        if ind is None or lab is None or score is None:
            continue
        by.setdefault(ind, []).append((score_key(score), lab))
    return roc_expect_grouped(by)


def roc_expect_grouped(by):
    want = {ind: auc_of(p) for ind, p in by.items()}

    def fn(rows):
        ids = [int(r[0]) for r in rows]
        if ids != sorted(want):
            return f"individuals {ids[:10]}, expected {sorted(want)[:10]}"
        for r in rows:
            auc, npos, nneg, lo, hi = want[int(r[0])]
            got = [fnum(nul(r[1])), fnum(nul(r[2])), int(r[3]), int(r[4]),
                   None if nul(r[5]) is None else int(r[5]), None if nul(r[6]) is None else int(r[6])]
            exp = [auc, None if auc is None else auc - 0.5, npos, nneg, lo, hi]
            if not (close(got[0], exp[0], 0, 1e-12) and close(got[1], exp[1], 0, 1e-12)
                    and got[2:] == exp[2:]):
                return f"individual {r[0]}: got {r}, expected {exp}"
        return ""
    return fn


SCORE_TYPES = ["smallint", "integer", "bigint", "numeric", "real", "double precision"]


def score_literal(stype):
    """(SQL literal, value text or None)."""
    x = rng.random()
    if x < 0.07:
        return f"NULL::{stype}", None
    if stype in RANGES:
        lo, hi = RANGES[stype]
        v = rng.choice([lo, hi]) if x < 0.12 else rng.randint(-3, 6)
        return f"({v})::{stype}", str(v)
    if x < 0.22:
        v = rng.choice(["NaN", "Infinity", "-Infinity", "-0"])
        return f"'{v}'::{stype}", v
    v = rng.randint(-6, 12) / 2
    return f"{v}::{stype}", repr(v)


def gen_roc_long():
    st = rng.choice(SCORE_TYPES)
    it = rng.choice(ID_TYPES)
    label_kind = rng.choice(["boolean", "integer", "smallint", "bigint"])
    rows, data = [], []
    for _ in range(rng.randint(0, 40)):
        ind = None if rng.random() < 0.04 else rng.choice([1, 2, 3, RANGES[it][1], RANGES[it][0]])
        lab = None if rng.random() < 0.06 else rng.random() < 0.4
        lab_sql = "NULL" if lab is None else (
            str(lab).lower() if label_kind == "boolean" else str(int(lab)))
        s_sql, s_val = score_literal(st)
        rows.append([f"NULL::{it}" if ind is None else f"({ind})::{it}",
                     f"{lab_sql}::{label_kind}", s_sql])
        data.append((ind, lab, s_val))
    q = table(["individual_id", "label", "score"], rows,
              [f"NULL::{it}", f"NULL::{label_kind}", f"NULL::{st}"])
    return f"SELECT * FROM gpurec.roc_fitness({lit(q)});", want_rows(roc_expect(data))


def array_literal(vals, lower=1):
    if not vals:
        return "{}"
    body = "{" + ",".join("NULL" if v is None else str(v) for v in vals) + "}"
    return body if lower == 1 else f"[{lower}:{lower + len(vals) - 1}]={body}"


def gen_roc_array():
    n = rng.choice([0, 1, 2, 5, 9])
    labels = [None if rng.random() < 0.1 else rng.random() < 0.5 for _ in range(n)]
    lab_lit = array_literal(["NULL" if v is None else ("t" if v else "f") for v in labels],
                            rng.choice([1, 1, 0, -5, 7]))
    atype = rng.choice(["real[]", "float8[]"])
    rows, by = [], {}
    ids = rng.sample([1, 2, 3, 4, INT64_MAX, INT64_MIN, 0], rng.randint(0, 4))
    for ind in ids:
        if rng.random() < 0.1:
            rows.append([f"({ind})::bigint", f"NULL::{atype}"])
            continue
        vals = []
        for _ in range(n):
            y = rng.random()
            vals.append(None if y < 0.1 else ("NaN" if y < 0.15 else (
                "-Infinity" if y < 0.2 else ("-0" if y < 0.25 else rng.randint(-4, 8) / 4))))
        rows.append([f"({ind})::bigint",
                     f"'{array_literal(vals, rng.choice([1, 1, 3, -2]))}'::{atype}"])
        by[ind] = [(score_key(v if isinstance(v, str) else repr(v)), lab)
                   for v, lab in zip(vals, labels) if v is not None and lab is not None]
    q = table(["individual_id", "scores"], rows, ["NULL::bigint", f"NULL::{atype}"])
    # roc_auc on the first individual too
    return (f"SELECT * FROM gpurec.roc_fitness({lit(q)}, '{lab_lit}');",
            want_rows(roc_expect_grouped(by)))


def gen_roc_auc():
    n = rng.choice([0, 1, 3, 8, 20])
    scores = [None if rng.random() < 0.1 else rng.choice(
        ["NaN", "Infinity", "-Infinity", "-0", rng.randint(-5, 5) / 2, rng.randint(-5, 5) / 2])
        for _ in range(n)]
    labels = [None if rng.random() < 0.1 else rng.random() < 0.5 for _ in range(n)]
    pairs = [(score_key(s if isinstance(s, str) else repr(s)), lab)
             for s, lab in zip(scores, labels) if s is not None and lab is not None]
    auc = auc_of(pairs)[0]
    sl = array_literal(scores, rng.choice([1, 0, 4]))
    ll = array_literal(["NULL" if v is None else ("t" if v else "f") for v in labels],
                       rng.choice([1, -1]))

    def fn(rows):
        got = fnum(nul(rows[0][0])) if rows else "no row"
        return "" if rows and close(got, auc, 0, 1e-12) else f"got {got}, expected {auc}"
    return f"SELECT gpurec.roc_auc('{sl}', '{ll}');", want_rows(fn)


def gen_roc():
    return rng.choice([gen_roc_long, gen_roc_long, gen_roc_array, gen_roc_auc])()


def fixed_roc():
    out = []
    e = "SELECT 1 AS individual_id, '{0.5,0.1}'::real[] AS scores"
    out.append((f"SELECT * FROM gpurec.roc_fitness({lit(e)}, '{{{{t}},{{f}}}}');",
                want_error("2202E")))
    out.append((f"SELECT * FROM gpurec.roc_fitness({lit(e)}, '{{t,f,t}}');", want_error("22023")))
    md = "SELECT 1 AS individual_id, '{{0.5},{0.1}}'::float8[] AS scores"
    out.append((f"SELECT * FROM gpurec.roc_fitness({lit(md)}, '{{t,f}}');", want_error("2202E")))
    dup = "SELECT 1 AS individual_id, '{0.5,0.1}'::real[] AS scores UNION ALL SELECT 1, '{1,2}'"
    out.append((f"SELECT * FROM gpurec.roc_fitness({lit(dup)}, '{{t,f}}');", want_error("22023")))
    out.append(("SELECT gpurec.roc_auc('{1,2}', '{t}');", want_error("22023")))
    out.append(("SELECT gpurec.roc_auc('{{1},{2}}', '{t,f}');", want_error("2202E")))
    out.append(("SELECT gpurec.roc_auc(NULL, '{t,f}') IS NULL;",
                want_rows(lambda rows: "" if rows == [["t"]] else f"got {rows}")))
    bad = "SELECT 1 AS individual_id, 2 AS label, 0.5 AS score"
    out.append((f"SELECT * FROM gpurec.roc_fitness({lit(bad)});", want_error("22023")))
    empty = "SELECT 1 AS individual_id, '{}'::real[] AS scores"
    out.append((f"SELECT * FROM gpurec.roc_fitness({lit(empty)}, '{{}}');",
                want_rows(roc_expect_grouped({1: []}))))
    # a huge array: 100,000 elements, lower bound 0, NULLs every 97th position
    n = 100_000
    scores = [None if g % 97 == 0 else (g * 7919) % 1000 for g in range(1, n + 1)]
    labels = [g % 3 == 0 for g in range(1, n + 1)]
    by = {7: [((1, Decimal(s)), lab) for s, lab in zip(scores, labels) if s is not None]}
    huge = ("SELECT 7 AS individual_id, (SELECT array_agg(CASE WHEN g % 97 = 0 THEN NULL ELSE "
            "((g * 7919) % 1000)::real END ORDER BY g) FROM generate_series(1, 100000) g) AS scores")
    lab = "(SELECT array_agg(g % 3 = 0 ORDER BY g) FROM generate_series(1, 100000) g)"
    out.append((f"SELECT * FROM gpurec.roc_fitness({lit(huge)}, {lab});",
                want_rows(roc_expect_grouped(by))))
    auc = auc_of(by[7])[0]
    out.append(("SELECT gpurec.roc_auc((SELECT array_agg(CASE WHEN g % 97 = 0 THEN NULL ELSE "
                "((g * 7919) % 1000)::float8 END ORDER BY g) FROM generate_series(1, 100000) g), "
                f"{lab});",
                want_rows(lambda rows: "" if close(fnum(rows[0][0]), auc, 0, 1e-12)
                          else f"got {rows}, expected {auc}")))
    return out


# -------------------------------------------------------------- geo oracle --

def dist(metric, p, q):
    if metric == "euclidean":
        return math.hypot(p[0] - q[0], p[1] - q[1])
    lon1, lat1, lon2, lat2 = map(math.radians, (p[0], p[1], q[0], q[1]))
    a = math.sin((lat2 - lat1) / 2) ** 2 + \
        math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * R_EARTH * math.asin(math.sqrt(min(1.0, a)))


def similarity(metric, eps, a_pts, b_pts):
    ds = [min(dist(metric, p, q) for q in b_pts) for p in a_pts]
    raw = sum(ds) / len(ds)
    floored = sum(max(d, eps) for d in ds) / len(ds)
    return 1 / floored, raw


def coord_literal(v, ctype):
    if ctype in ("smallint", "integer", "bigint"):
        return f"({int(v)})::{ctype}"
    return f"({v!r})::{ctype}"


def geo_points(metric, users=None):
    """(points {user: [(x, y)]}, SQL rows, coordinate type)."""
    ctype = rng.choice(["integer", "bigint", "smallint", "numeric", "real", "double precision"])
    ut = rng.choice(ID_TYPES)
    ids = users or rng.sample([1, 2, 3, 4, 5, -7, RANGES[ut][0], RANGES[ut][1]],
                              rng.randint(1, 5))
    pts, rows = {}, []
    for u in ids:
        for _ in range(rng.randint(1, 4)):
            if metric == "euclidean":
                x, y = rng.randint(-20, 20), rng.randint(-20, 20)
                if ctype not in ("smallint", "integer", "bigint") and rng.random() < 0.5:
                    x, y = x + rng.randint(0, 3) / 4, y + rng.randint(0, 3) / 4
            else:
                x = rng.choice([-180, 180, 0, 2.25, -74, rng.randint(-180, 180)])
                y = rng.choice([-90, 90, 0, 48.75, rng.randint(-90, 90)])
                if ctype in ("smallint", "integer", "bigint"):
                    x, y = int(x), int(y)
            x, y = (float(x), float(y))
            pts.setdefault(u, []).append((x, y))
            rows.append([f"({u})::{ut}", coord_literal(x, ctype), coord_literal(y, ctype)])
        if rng.random() < 0.2:
            rows.append([f"({u})::{ut}", f"NULL::{ctype}", coord_literal(1, ctype)])
    if rng.random() < 0.15:
        rows.append([f"NULL::{ut}", coord_literal(1, ctype), coord_literal(1, ctype)])
    return pts, rows


def geo_args():
    metric = rng.choice(["euclidean", "haversine"])
    spelled = rng.choice([metric, metric.upper(), metric.capitalize()])
    eps_choice = rng.choice([None, None, 0.5, 1e-3, 25.0])
    eps = eps_choice if eps_choice is not None else (1e-9 if metric == "euclidean" else 10.0)
    eps_sql = "NULL" if eps_choice is None else repr(eps_choice)
    return metric, spelled, eps, eps_sql


def tol(metric):
    return (1e-9, 1e-9) if metric == "euclidean" else (1e-6, 1e-3)


def gen_user_similarity():
    metric, spelled, eps, eps_sql = geo_args()
    pts, rows = geo_points(metric)
    q = table(["user_id", "x", "y"], rows, [])
    main_user = rng.choice(list(pts) + [99])
    sql = f"SELECT * FROM gpurec.user_similarity({lit(q)}, {main_user}, '{spelled}', {eps_sql});"
    if main_user not in pts:
        return sql, want_error("22023")
    rel, ab = tol(metric)
    want = {u: similarity(metric, eps, pts[main_user], p) for u, p in pts.items() if u != main_user}

    def fn(out):
        ids = [int(r[0]) for r in out]
        if ids != sorted(want):
            return f"users {ids}, expected {sorted(want)}"
        for r in out:
            s, raw = want[int(r[0])]
            if not (close(float(r[1]), s, rel) and close(float(r[2]), raw, rel, ab)):
                return f"user {r[0]}: got {r[1:]}, expected {(s, raw)}"
        return ""
    return sql, want_rows(fn)


def gen_similar_users():
    metric, spelled, eps, eps_sql = geo_args()
    pts, rows = geo_points(metric)
    q = table(["user_id", "x", "y"], rows, [])
    k = rng.choice([1, 2, 3, 10, INT_MAX])
    rel, _ = tol(metric)
    sim = {(a, b): similarity(metric, eps, pts[a], pts[b])[0]
           for a in pts for b in pts if a != b}

    def fn(out):
        seen = {}
        for r in out:
            a, rank, b, s = int(r[0]), int(r[1]), int(r[2]), float(r[3])
            if (a, b) not in sim:
                return f"unexpected pair {r}"
            if not close(s, sim[(a, b)], rel):
                return f"{r}: similarity expected {sim[(a, b)]}"
            seen.setdefault(a, []).append((rank, b, s))
        keys = [(int(r[0]), int(r[1])) for r in out]
        if keys != sorted(keys):
            return "not ordered by user_id, rank"
        for a in pts:
            got = seen.get(a, [])
            others = [b for b in pts if b != a]
            if [g[0] for g in got] != list(range(1, min(k, len(others)) + 1)):
                return f"user {a}: ranks {[g[0] for g in got]} for {len(others)} others, k {k}"
            for (_, _, s1), (_, _, s2) in zip(got, got[1:]):
                if s2 > s1 * (1 + rel):
                    return f"user {a}: similarity rises with rank: {got}"
            chosen = {g[1] for g in got}
            rest = [sim[(a, b)] for b in others if b not in chosen]
            if got and rest and max(rest) > got[-1][2] * (1 + rel):
                return f"user {a}: an unchosen user is more similar ({max(rest)}) than {got}"
        return ""
    return (f"SELECT * FROM gpurec.similar_users({lit(q)}, {k}, '{spelled}', {eps_sql});",
            want_rows(fn))


def strength(metric, eps, pts, main_user, c, exponent, max_d, min_sim):
    total = 0.0
    for u, p in pts.items():
        if u == main_user:
            continue
        s = similarity(metric, eps, pts[main_user], p)[0]
        if s < min_sim:
            continue
        part = 0.0
        for q in p:
            d = dist(metric, q, c)
            if max_d is None or d <= max_d:
                part += max(d, eps) ** -exponent
        total += s * part
    return total


def candidates(metric):
    out, rows = [], []
    ct = rng.choice(["integer", "numeric", "double precision"])
    for _ in range(rng.randint(0, 6)):
        cid = rng.choice([1, 2, 3, INT64_MAX])
        if metric == "euclidean":
            c = (float(rng.randint(-20, 20)), float(rng.randint(-20, 20)))
        else:
            c = (float(rng.randint(-180, 180)), float(rng.randint(-90, 90)))
        if rng.random() < 0.1:
            rows.append([f"({cid})::bigint", f"NULL::{ct}", coord_literal(c[1], ct)])
            continue
        out.append((cid, c))
        rows.append([f"({cid})::bigint", coord_literal(c[0], ct), coord_literal(c[1], ct)])
    return out, table(["candidate_id", "x", "y"], rows, ["NULL::bigint", f"NULL::{ct}", f"NULL::{ct}"])


def gen_predict_strength():
    metric, spelled, eps, eps_sql = geo_args()
    pts, rows = geo_points(metric)
    q = table(["user_id", "x", "y"], rows, [])
    cands, cq = candidates(metric)
    main_user = rng.choice(list(pts))
    exponent = rng.choice([1.0, 2.0, 0.5, 3.7])
    # under haversine, points at a pole with other longitudes are 0 m apart only
    # up to rounding: no max_distance of 0 there
    max_d = rng.choice([None, 0.0, 7.5, 1e9] if metric == "euclidean" else [None, 5e5 + 0.5])
    min_sim = rng.choice([0.0, -1.0, 1e-7, 0.05])
    sql = (f"SELECT * FROM gpurec.predict_strength({lit(q)}, {main_user}, {lit(cq)}, {exponent}, "
           f"{'NULL' if max_d is None else max_d}, {min_sim}, '{spelled}', {eps_sql});")
    rel, _ = tol(metric)
    want = [(cid, strength(metric, eps, pts, main_user, c, exponent, max_d, min_sim))
            for cid, c in cands]

    def fn(out):
        if len(out) != len(want):
            return f"{len(out)} rows, expected {len(want)}"
        for r, (cid, s) in zip(out, want):
            if int(r[0]) != cid or not close(float(r[1]), s, max(rel, 1e-9), 1e-300):
                return f"got {r}, expected {(cid, s)}"
        return ""
    return sql, want_rows(fn)


def gen_fit_exponent():
    metric, spelled, eps, eps_sql = geo_args()
    pts, rows = geo_points(metric)
    q = table(["user_id", "x", "y"], rows, [])
    cands, cq = candidates(metric)
    hold_rows, visited = [], {}
    for _ in range(rng.randint(0, 6)):
        u = rng.choice(list(pts))
        cid = rng.choice([1, 2, 3, 9])
        hold_rows.append([str(u), str(cid)])
        visited.setdefault(u, set()).add(cid)
    hq = table(["user_id", "candidate_id"], hold_rows, ["NULL::int", "NULL::int"])
    exps = [rng.choice([1, 2, 0.5, 3]) for _ in range(rng.randint(1, 4))]
    users = sum(1 for u, v in visited.items()
                if any(c in v for c, _ in cands) and any(c not in v for c, _ in cands))
    sql = (f"SELECT * FROM gpurec.fit_exponent({lit(q)}, {lit(hq)}, {lit(cq)}, "
           f"'{array_literal(exps)}', NULL, 0, '{spelled}', {eps_sql});")

    def fn(out):
        if [float(r[0]) for r in out] != sorted(float(e) for e in exps):
            return f"exponents {[r[0] for r in out]}, expected {sorted(exps)}"
        for r in out:
            if int(r[2]) != users:
                return f"{r}: users expected {users}"
            auc = fnum(nul(r[1]))
            if (auc is None) != (users == 0) or (auc is not None and not 0 <= auc <= 1):
                return f"{r}: mean_auc out of its contract (users {users})"
        return ""
    return sql, want_rows(fn)


def gen_geo():
    return rng.choice([gen_user_similarity, gen_similar_users, gen_predict_strength,
                       gen_fit_exponent])()


def fixed_geo():
    out = []
    p = "SELECT * FROM (VALUES (1, 0, 0), (1, 10, 10), (2, 4, 4)) AS p(user_id, x, y)"
    c = "SELECT 1 AS candidate_id, 1 AS x, 1 AS y"
    h = "SELECT 1 AS user_id, 1 AS candidate_id"
    us = f"gpurec.user_similarity({lit(p)}"
    for bad in ("'NaN'::float8", "'Infinity'::float8", "'-Infinity'::real", "'NaN'::numeric"):
        q = f"SELECT 1 AS user_id, {bad} AS x, 0 AS y UNION ALL SELECT 2, 1, 1"
        out.append((f"SELECT * FROM gpurec.user_similarity({lit(q)}, 2);", want_error("22000")))
        cq = f"SELECT 1 AS candidate_id, {bad} AS x, 0 AS y"
        out.append((f"SELECT * FROM gpurec.predict_strength({lit(p)}, 1, {lit(cq)});",
                    want_error("22000")))
    big = "SELECT 1 AS user_id, 1e151::float8 AS x, 0 AS y UNION ALL SELECT 2, 1, 1"
    out.append((f"SELECT * FROM gpurec.user_similarity({lit(big)}, 2);", want_error("22003")))
    for lonlat in ("181, 0", "0, 90.5", "-180.0001, 0", "0, -91"):
        q = f"SELECT 1 AS user_id, {lonlat} UNION ALL SELECT 2, 1, 1"
        q = f"SELECT * FROM ({q}) AS t(user_id, x, y)"
        out.append((f"SELECT * FROM gpurec.user_similarity({lit(q)}, 2, 'haversine');",
                    want_error("22003")))
    out.append((f"SELECT * FROM {us}, 1, 'manhattan');", want_error("22023")))
    for e in ("0", "-1", "'NaN'", "'Infinity'"):
        out.append((f"SELECT * FROM {us}, 1, 'euclidean', {e});", want_error("22023")))
        out.append((f"SELECT * FROM gpurec.predict_strength({lit(p)}, 1, {lit(c)}, {e});",
                    want_error("22023")))
    for md in ("-1", "'NaN'"):
        out.append((f"SELECT * FROM gpurec.predict_strength({lit(p)}, 1, {lit(c)}, 2, {md});",
                    want_error("22023")))
    out.append((f"SELECT * FROM gpurec.predict_strength({lit(p)}, 1, {lit(c)}, 2, NULL, 'NaN');",
                want_error("22023")))
    out.append((f"SELECT * FROM {us}, 3);", want_error("22023")))
    out.append((f"SELECT * FROM gpurec.predict_strength({lit(p)}, 3, {lit(c)});",
                want_error("22023")))
    for k in (0, -5):
        out.append((f"SELECT * FROM gpurec.similar_users({lit(p)}, {k});", want_error("22023")))
    for ex, st in (("'{}'", "22023"), ("'{1,NULL}'", "22004"), ("'{{1},{2}}'", "2202E")):
        out.append((f"SELECT * FROM gpurec.fit_exponent({lit(p)}, {lit(h)}, {lit(c)}, {ex});",
                    want_error(st)))
    h3 = "SELECT 3 AS user_id, 1 AS candidate_id"
    out.append((f"SELECT * FROM gpurec.fit_exponent({lit(p)}, {lit(h3)}, {lit(c)});",
                want_error("22023")))
    none = lambda rows: "" if not rows else f"expected no rows, got {rows[:3]}"  # noqa: E731
    for call in (f"{us}, NULL)", f"{us}, 1, NULL)", f"gpurec.similar_users({lit(p)}, NULL)",
                 f"gpurec.predict_strength({lit(p)}, 1, NULL)",
                 f"gpurec.fit_exponent({lit(p)}, NULL, {lit(c)})",
                 "gpurec.cheapest_offers(NULL)", f"gpurec.roc_fitness({lit(p)}, NULL)"):
        out.append((f"SELECT * FROM {call};", want_rows(none)))
    ok = lambda rows: "" if rows else "no rows"  # noqa: E731
    out.append((f"SELECT * FROM {us}, 1, 'euclidean', NULL);", want_rows(ok)))
    out.append((f"SELECT * FROM gpurec.predict_strength({lit(p)}, 1, {lit(c)}, 2, NULL, 0, "
                f"'euclidean', NULL);", want_rows(ok)))
    return out


# ------------------------------------------------------------ column shapes --

SHAPES = {
    # function -> (columns, good literals, call template with {q})
    "cheapest": (["product_id", "store_id", "price"], ["1", "2", "1.5"],
                 "gpurec.cheapest_offers({q}, 2)"),
    "carts": (["cart_id", "product_id", "store_id", "quantity"], ["1", "1", "2", "1"],
              "gpurec.improve_carts({q}, 'SELECT 1 AS product_id, 1 AS store_id, 1 AS price')"),
    "offers2": (["product_id", "store_id", "price"], ["1", "2", "1.5"],
                "gpurec.improve_carts('SELECT 1 AS cart_id, 1 AS product_id, 1 AS store_id', {q})"),
    "similarity": (["user_id", "x", "y"], ["1", "1.5", "2"], "gpurec.user_similarity({q}, 1)"),
    "similar": (["user_id", "x", "y"], ["1", "1.5", "2"], "gpurec.similar_users({q}, 3)"),
    "candidates": (["candidate_id", "x", "y"], ["1", "1.5", "2"],
                   "gpurec.predict_strength('SELECT 1 AS user_id, 0 AS x, 0 AS y "
                   "UNION ALL SELECT 2, 1, 1', 1, {q})"),
    "holdout": (["user_id", "candidate_id"], ["1", "1"],
                "gpurec.fit_exponent('SELECT 1 AS user_id, 0 AS x, 0 AS y UNION ALL SELECT 2, 1, 1',"
                " {q}, 'SELECT 1 AS candidate_id, 1 AS x, 1 AS y')"),
    "roc_long": (["individual_id", "label", "score"], ["1", "true", "0.5"],
                 "gpurec.roc_fitness({q})"),
    "roc_array": (["individual_id", "scores"], ["1", "'{0.5,0.1}'::real[]"],
                  "gpurec.roc_fitness({q}, '{{t,f}}')"),
}
ID_COLUMNS = {"product_id", "store_id", "cart_id", "user_id", "candidate_id", "individual_id"}
OPTIONAL = {"quantity"}


def gen_shapes():
    name = rng.choice(list(SHAPES))
    cols, good, call = SHAPES[name]
    cols, vals = list(cols), list(good)
    kind = rng.choice(["missing", "duplicate", "misspelled", "badtype", "badtype", "extra",
                       "domain", "okint"])
    expect = want_rows(lambda rows: "")
    i = rng.randrange(len(cols))
    if kind == "missing":
        del cols[i], vals[i]
        if name == "carts" and i == 3:
            expect = want_rows(lambda rows: "")
        else:
            expect = want_error("42703")
    elif kind == "duplicate":
        cols.append(cols[i])
        vals.append(vals[i])
        expect = want_error("42702")
    elif kind == "misspelled":
        cols[i] = cols[i][:-1] + "_z"
        expect = want_rows(lambda rows: "") if cols[i].startswith("quantit") else \
            want_error("42703")
    elif kind in ("badtype", "domain", "okint"):
        c = cols[i]
        if kind == "domain":
            dom = "fuzz_int" if c in ID_COLUMNS or c in ("label", "quantity") else "fuzz_price"
            if c == "scores":
                dom = "real[]"
            vals[i] = f"{vals[i] if c != 'label' else '1'}::{dom}"
        elif kind == "okint":
            vals[i] = f"{vals[i] if c != 'label' else '1'}::{rng.choice(['smallint', 'bigint'])}" \
                if c != "scores" else "'{1,0}'::float8[]"
            if c in ("x", "y", "price", "score"):
                vals[i] = "1::smallint"
        else:
            pool = dict(BAD_ID_TYPES if c in ID_COLUMNS or c == "quantity" else BAD_VALUE_TYPES)
            if c in ("x", "y", "price", "score"):
                pool.pop("boolean", None)
                pool["boolean"] = "true"
            if c == "label":
                pool = {"text": "'t'", "real": "1", "numeric": "1", "date": "'2026-01-01'"}
            if c == "scores":
                pool = {"text": "'x'", "int[]": "'{1,0}'", "numeric[]": "'{1,0}'",
                        "real": "1"}
            t = rng.choice(list(pool))
            vals[i] = f"{pool[t]}::{t}"
            expect = want_error("42804")
    else:  # extra
        cols.append("unused_col")
        vals.append("'x'::text")
    q = "SELECT " + ", ".join(f"{v} AS {c}" for c, v in zip(cols, vals))
    return f"SELECT * FROM {call.format(q=lit(q))};", expect


# --------------------------------------------------------- failing queries --

def inner_calls(q):
    """Every function with q as one of its inner queries."""
    p = "'SELECT 1 AS user_id, 0 AS x, 0 AS y UNION ALL SELECT 2, 1, 1'"
    c = "'SELECT 1 AS candidate_id, 1 AS x, 1 AS y'"
    return [f"gpurec.cheapest_offers({q}, 3)",
            f"gpurec.improve_carts({q}, 'SELECT 1 AS product_id, 1 AS store_id, 1 AS price')",
            f"gpurec.improve_carts('SELECT 1 AS cart_id, 1 AS product_id, 1 AS store_id', {q})",
            f"gpurec.user_similarity({q}, 1)", f"gpurec.similar_users({q}, 2)",
            f"gpurec.predict_strength({q}, 1, {c})", f"gpurec.predict_strength({p}, 1, {q})",
            f"gpurec.fit_exponent({p}, {q}, {c})", f"gpurec.fit_exponent({q}, "
            "'SELECT 1 AS user_id, 1 AS candidate_id', " + c + ")",
            f"gpurec.roc_fitness({q})", f"gpurec.roc_fitness({q}, '{{t,f}}')"]


FAILING_SOURCES = {
    # a generate_series-based row source of every column any function reads
    "series": ("SELECT g % 7 AS product_id, g % 5 AS store_id, g % 11 AS price, g / 3 AS cart_id, "
               "g % 7 AS user_id, (g % 13)::float8 AS x, (g % 17)::float8 AS y, "
               "g % 9 AS candidate_id, g % 4 AS individual_id, g % 2 = 0 AS label, "
               "(g % 19) AS score, g AS quantity, ARRAY[(g % 3)::real, 1] AS scores "
               "FROM generate_series(1, {n}) g"),
}


def gen_failing():
    n = rng.choice([1, 2, 100, 5000, 50000])
    src = FAILING_SOURCES["series"].format(n=n)
    kind = rng.choice(["divzero", "noresult", "empty", "dml", "two", "raise", "cast"])
    if kind == "divzero":
        row = rng.randint(1, n)
        q = src.replace("g % 11 AS price", f"g % 11 / ({row} - g) AS price") \
            .replace("(g % 13)::float8 AS x", f"(g % 13)::float8 / ({row} - g) AS x") \
            .replace("(g % 19) AS score", f"(g % 19) / ({row} - g) AS score") \
            .replace("g % 9 AS candidate_id", f"g % 9 / ({row} - g) AS candidate_id") \
            .replace("ARRAY[(g % 3)::real, 1]", f"ARRAY[(g % 3)::real / ({row} - g), 1]") \
            .replace("g / 3 AS cart_id", f"g / 3 / ({row} - g) AS cart_id")
        expect = want_error("22012")
    elif kind == "cast":
        row = rng.randint(1, n)
        q = src.replace("g % 7 AS product_id", f"(CASE WHEN g = {row} THEN 'x' ELSE '1' END)::int "
                        "AS product_id").replace("g % 7 AS user_id", f"(CASE WHEN g = {row} THEN "
                                                 "'x' ELSE '1' END)::int AS user_id") \
            .replace("g % 9 AS candidate_id", f"(CASE WHEN g = {row} THEN 'x' ELSE '1' END)::int "
                     "AS candidate_id").replace("g % 4 AS individual_id", f"(CASE WHEN g = {row} "
                                                "THEN 'x' ELSE '1' END)::int AS individual_id")
        expect = want_error("22P02")
    elif kind == "raise":
        q = src.replace("FROM generate_series", ", fuzz_raise_at(g, 1) AS z FROM generate_series")
        expect = want_error("P0001")
    elif kind == "noresult":
        q = src + " WHERE false"
        expect = None
    elif kind == "empty":
        q = rng.choice(["", " ", "\n\t ", "-- nothing", "/* nothing */", " ;", ";"])
        expect = want_error("42601")
    elif kind == "dml":
        q = rng.choice(["DELETE FROM fuzz_t RETURNING *", "UPDATE fuzz_t SET v = v RETURNING *",
                        "INSERT INTO fuzz_t VALUES (1) RETURNING *",
                        "WITH d AS (DELETE FROM fuzz_t RETURNING *) SELECT * FROM d",
                        "SELECT * FROM fuzz_t FOR UPDATE", "TRUNCATE fuzz_t"])
        expect = want_error("0A000", "42601")
    else:
        q = src + "; " + src
        expect = want_error("42601")
    calls = inner_calls(lit(q))
    i = rng.randrange(len(calls))
    call = calls[i]
    if expect is None:
        if i in (3, 5, 8):  # the main user, or every holdout user, has no points
            expect = want_error("22023")
        elif i == 2:  # no offers: the cart line is returned, nobody offering its product
            expect = want_rows(lambda rows: "" if len(rows) == 1 and rows[0][5] == "\\N"
                               else f"got {rows}")
        elif i == 7:  # no holdout rows: one row per exponent, no user counted
            expect = want_rows(lambda rows: "" if len(rows) == 5 and all(
                r[1] == "\\N" and r[2] == "0" for r in rows) else f"got {rows}")
        else:
            expect = want_rows(lambda rows: "" if not rows else f"{len(rows)} rows from no input")
    return f"SELECT * FROM {call};", expect


# ------------------------------------------------------------- large input --

def fixed_large():
    out = []
    n = 1_000_000
    offers = (f"SELECT (g * 7919) % 100003 AS product_id, g % 577 AS store_id, "
              f"round(((g * 104729) % 10007) / 100.0, 2) AS price FROM generate_series(1::bigint, {n}) g")
    out.append((cheapest_case(offers, 3), want_rows(compared)))
    # the same, failing at its very last row
    bad = offers.replace("/ 100.0, 2) AS price", f"/ (100.0 * ({n} - g)), 2) AS price")
    out.append((f"SELECT count(*) FROM gpurec.cheapest_offers({lit(bad)}, 3);",
                want_error("22012")))
    # 400,000 ROC rows against the Python oracle
    m = 400_000
    by = {}
    for g in range(1, m + 1):
        by.setdefault(g % 4, []).append(((1, Decimal((g * 7919) % 1009)), g % 3 == 0))
    roc = (f"SELECT g % 4 AS individual_id, g % 3 = 0 AS label, (g * 7919) % 1009 AS score "
           f"FROM generate_series(1::bigint, {m}) g")
    out.append((f"SELECT * FROM gpurec.roc_fitness({lit(roc)});",
                want_rows(roc_expect_grouped(by))))
    return out


# ------------------------------------------------------------------- runner --

class Fuzzer:
    def __init__(self, db):
        self.db = db
        self.session = db.session("gpurec_fuzz")
        self.stats = {}  # category -> {"calls": n, state: n}
        self.failed = {}  # category -> first failure

    def call(self, category, sql, verify, timeout=300):
        st = self.stats.setdefault(category, {"calls": 0})
        st["calls"] += 1
        try:
            r = self.session.run(sql, timeout=timeout)
        except Exception as e:  # psql died or hung
            why = f"psql: {e}"
            self.session = self.db.session("gpurec_fuzz")
        else:
            for s in r.sqlstates():
                st[s] = st.get(s, 0) + 1
            why = crash_or_internal(r) or verify(r)
            if why and "connection lost" in why:
                self.session.close()
                self.session = self.db.session("gpurec_fuzz")
        if why and category not in self.failed:
            self.failed[category] = why
            print(f"# FAILING SQL (seed {SEED}, category {category}):\n# {sql}\n# why: {why}",
                  flush=True)
        return not why

    def report(self, category):
        st = self.stats.get(category, {"calls": 0})
        errs = ", ".join(f"{k} x {v}" for k, v in sorted(st.items()) if k != "calls")
        print(f"# {category}: {st['calls']} calls; errors: {errs or 'none'}", flush=True)
        why = self.failed.get(category, "")
        check(category, not why, f"seed {SEED}: {why}")


CATEGORIES = [
    # name, fixed cases, generator, share of the random time
    ("fuzz: marketplace types and NULLs", fixed_marketplace, gen_marketplace, 0.22),
    ("fuzz: numeric edges", fixed_numeric, gen_numeric, 0.12),
    ("fuzz: roc scores and arrays", fixed_roc, gen_roc, 0.18),
    ("fuzz: geo points and arguments", fixed_geo, gen_geo, 0.22),
    ("fuzz: column names and types", list, gen_shapes, 0.12),
    ("fuzz: failing, empty and DML inner queries", list, gen_failing, 0.14),
    ("fuzz: large inputs", fixed_large, None, 0),
]


def memory_flat(db):
    """The same mix of calls (valid and failing) run round after round in one
    backend: after a warm-up of half the rounds (the first calls of the CPU
    threads touch their malloc arenas), RssAnon grows less than 2 MB and the
    memory contexts less than 64 kB.  (Before the column chunks were mapped
    from the kernel, fragmentation of the brk heap grew it by 4 MB a round.)"""
    s = db.session("gpurec_fuzz_memory")
    mix = []
    for gen in (gen_marketplace, gen_roc, gen_geo, gen_shapes, gen_failing):
        for _ in range(5):
            sql, _ = gen()
            if "50000" not in sql and "5000)" not in sql:
                mix.append(sql)
    ctx = "SELECT sum(total_bytes) FROM pg_backend_memory_contexts;"
    rss, contexts = [], []
    for _ in range(20):
        s.run("\n".join(mix), timeout=600)
        rss.append(proc_memory(s.pid))
        contexts.append(int(s.value(ctx)))
    half = len(rss) // 2
    # the lowest of five rounds: a leak raises it, the malloc arenas' ups and downs do not
    growth = None if None in rss else min(rss[-5:]) - min(rss[half:half + 5])
    print(f"# memory: {len(mix)} calls a round, {len(rss)} rounds; RssAnon by round {rss} kB; "
          f"contexts {contexts[half]} -> {contexts[-1]} B", flush=True)
    check("fuzz: backend memory flat over repeated calls",
          growth is not None and growth < 2048 and contexts[-1] - contexts[half] < 65536,
          f"RssAnon grew {growth} kB and contexts {contexts[-1] - contexts[half]} B over the "
          f"last {len(rss) - half} rounds of {len(mix)} calls (seed {SEED})")
    return len(mix) * len(rss)


def run_checks(db):
    db.sql("""
        CREATE DOMAIN fuzz_int AS integer;
        CREATE DOMAIN fuzz_price AS numeric(10,2);
        CREATE TABLE fuzz_t (v int);
        INSERT INTO fuzz_t VALUES (1), (2);
        CREATE FUNCTION fuzz_raise_at(g bigint, n int) RETURNS int LANGUAGE plpgsql AS $$
        BEGIN IF g = n THEN RAISE EXCEPTION 'fuzz raise at %', g; END IF; RETURN 0; END $$;""")
    log = os.path.join(os.environ.get("PGHOST", ""), "server.log")
    log_start = os.path.getsize(log) if os.path.isfile(log) else None
    fz = Fuzzer(db)
    started = time.monotonic()
    for name, fixed, gen, share in CATEGORIES:
        t0 = time.monotonic()
        for sql, verify in fixed():
            fz.call(name, sql, verify)
        if gen:
            deadline = time.monotonic() + SECONDS * share
            while time.monotonic() < deadline:
                sql, verify = gen()
                fz.call(name, sql, verify)
        print(f"# {name}: {time.monotonic() - t0:.1f} s", flush=True)
        fz.report(name)
    fz.session.close()
    print(f"# fuzzing took {time.monotonic() - started:.1f} s", flush=True)
    memory_flat(db)
    still = db.sql("SELECT count(*) FROM gpurec.cheapest_offers("
                   "'SELECT 1 AS product_id, 1 AS store_id, 1 AS price')")
    check("fuzz: a fresh session still computes", still == [["1"]], f"got {still}")
    if log_start is None:
        print(f"# no server log at {log}: skipping the log check", flush=True)
        return
    with open(log, errors="replace") as f:
        f.seek(log_start)
        text = f.read()
    bad = [line for line in text.splitlines()
           if "terminated by signal" in line or "was terminated" in line or "PANIC" in line]
    check("fuzz: no backend terminated by a signal (server log)", not bad,
          f"seed {SEED}: {bad[:3]}")


def body():
    global rng, SEED
    SEED = int(os.environ.get("GPUREC_SEED", random.SystemRandom().randrange(1 << 30)))
    print(f"# seed {SEED}", flush=True)
    rng = random.Random(SEED)
    run_in_database("fuzz", run_checks, "fuzz: no backend crashed (sentinel session alive)")


if __name__ == "__main__":
    main(body)
