#!/usr/bin/env python3
"""README.md's tutorial, pasted into psql as a newcomer would paste it.

Takes every ```sql block of the README's "## Tutorial" section, in order,
and runs them in one psql session with ON_ERROR_STOP, starting where a
superuser's psql starts (database postgres) on a cluster without the
tutorial's database `shop` and role `analyst`: the tutorial must create
everything it uses.  A block right after the comment
`<!-- test_readme_tutorial: not run (why) -->` is left out (pg_cron's, which
needs the server configured for it); the test counts those.

Then, before the tutorial's last block (its clean-up) runs:
- every ```text block right after a ```sql block must be what psql printed
  for that block (so the outputs the README shows are true);
- a few results are checked against plain SQL computed here: the cheapest
  offers, the smart cart's lines, optimize_carts' totals, similarity and
  strength, ROC AUC, the materialized view.

Last, every other ```sql block of the README that is followed by a ```text
block (the reference's examples) runs in a fresh database, and must print
what that block shows.

Run by test/run_all.sh against its cluster (PGHOST etc. in the
environment); prints PASS/FAIL lines as the property tests do.
`--show` prints what psql printed for each block instead of checking.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "property"))
from pgtest import PSQL, check, drop_database, first_difference, fresh_database, sql  # noqa: E402

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")
SKIP_MARK = re.compile(r"<!-- test_readme_tutorial: not run \((.+)\) -->")
DATABASE = "shop"
EXAMPLES_DATABASE = "readme_examples"
ROLE = "analyst"
MARK = "@@ gpurec tutorial block {} @@"


class Block:
    def __init__(self, line, text):
        self.line = line          # README line of the opening fence
        self.text = text
        self.skipped = None       # why, when the README marks it not run
        self.output = None        # the ```text block that follows, if any


def readme_blocks(lines, start, end):
    """The ```sql blocks of lines[start:end], each with the ```text block
    that follows it directly (blank lines aside)."""
    blocks, i, previous = [], start, None
    while i < end:
        fence = re.match(r"^\s*```(\w*)\s*$", lines[i])
        if not fence:
            if lines[i].strip():
                previous = None
            i += 1
            continue
        kind = fence.group(1)
        indent = len(lines[i]) - len(lines[i].lstrip())
        j = i + 1
        while not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        body = "\n".join(l[indent:] for l in lines[i + 1:j])
        if kind == "sql":
            block = Block(i + 1, body)
            mark = SKIP_MARK.search(lines[i - 1])
            if mark:
                block.skipped = mark.group(1)
            blocks.append(block)
            previous = block
        elif kind == "text" and previous is not None:
            previous.output = body
            previous = None
        else:
            previous = None
        i = j + 1
    return blocks


def sections(path):
    """(the tutorial's blocks, the blocks of the rest of the README that
    show their output)."""
    lines = open(path, encoding="utf-8").read().split("\n")
    start = next(i for i, l in enumerate(lines) if l.strip() == "## Tutorial")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    examples = [b for b in readme_blocks(lines, end, len(lines)) if b.output is not None]
    return readme_blocks(lines, start, end), examples


def normalized(text):
    return "\n".join(l.rstrip() for l in text.strip("\n").split("\n")).strip("\n")


def run_psql(blocks, database):
    """Runs the blocks in one psql session; returns (returncode, stderr,
    {block index: what it printed})."""
    script, line_of = [], {}
    for n, block in blocks:
        script.append(f"\\echo '{MARK.format(n)}'")
        for k, line in enumerate(block.text.split("\n")):
            line_of[len(script) + 1] = block.line + 1 + k
            script.append(line)
    env = dict(os.environ, PGDATABASE=database)
    proc = subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"], input="\n".join(script) + "\n",
                          capture_output=True, text=True, env=env)
    printed, current = {}, None
    for line in proc.stdout.split("\n"):
        mark = re.fullmatch(MARK.format(r"(\d+)"), line)
        if mark:
            current = int(mark.group(1))
            printed[current] = []
        elif current is not None:
            printed[current].append(line)
    stderr = re.sub(r"psql:<stdin>:(\d+):",
                    lambda m: f"README.md line {line_of.get(int(m.group(1)), '?')}:", proc.stderr)
    return proc.returncode, stderr, {n: "\n".join(v) for n, v in printed.items()}


def rows_equal(name, got_query, want_query):
    got, want = sql(got_query), sql(want_query)
    return check(name, got == want and len(got) > 0, first_difference(got, want) if got != want else "no rows")


def close_rows(name, query, tolerance):
    """query returns (key, got, want) rows; got and want must agree within a relative tolerance."""
    rows = sql(query)
    bad = [r for r in rows if r[1] is None or r[2] is None
           or abs(float(r[1]) - float(r[2])) > tolerance * max(abs(float(r[2])), 1e-300)]
    return check(name, rows and not bad, f"{len(bad)} of {len(rows)} differ, e.g. {bad[:3]}")


def check_results():
    os.environ["PGDATABASE"] = DATABASE
    in_stock = "SELECT product_id, store_id, price FROM offers WHERE in_stock"
    rows_equal("tutorial: cheapest_offers equals plain SQL's row_number() over the offers",
               f"SELECT * FROM gpurec.cheapest_offers('{in_stock}', 3) ORDER BY 1, 2",
               """SELECT product_id, r, store_id, price, n FROM (
                    SELECT product_id, store_id, price,
                           row_number() OVER (PARTITION BY product_id ORDER BY price, store_id) AS r,
                           count(*) OVER (PARTITION BY product_id) AS n
                    FROM offers WHERE in_stock) s
                  WHERE r <= 3 ORDER BY 1, 2""")
    rows_equal("tutorial: the materialized view holds cheapest_offers after its refresh",
               "SELECT * FROM cheapest3 ORDER BY 1, 2",
               f"SELECT * FROM gpurec.cheapest_offers('{in_stock}', 3) ORDER BY 1, 2")
    rows_equal("tutorial: improve_carts equals plain SQL (cheapest store against the current one)",
               f"""SELECT * FROM gpurec.improve_carts('SELECT cart_id, product_id, store_id, quantity FROM carts',
                                                      '{in_stock}') ORDER BY 1, 2, 4, 3""",
               """WITH o AS (SELECT product_id, store_id, price FROM offers WHERE in_stock),
                  best AS (SELECT DISTINCT ON (product_id) product_id, store_id, price
                           FROM o ORDER BY product_id, price, store_id),
                  here AS (SELECT product_id, store_id, min(price) AS price FROM o GROUP BY 1, 2)
                  SELECT c.cart_id, c.product_id, c.quantity, c.store_id, h.price, b.store_id, b.price,
                         (h.price - b.price) * c.quantity
                  FROM carts c
                  LEFT JOIN here h ON h.product_id = c.product_id AND h.store_id = c.store_id
                  LEFT JOIN best b ON b.product_id = c.product_id
                  WHERE h.price IS NULL OR b.price < h.price
                  ORDER BY 1, 2, 4, 3""")
    # optimize_carts: each cart's total is its lines' price x quantity plus
    # the fees of the stores it uses below their free_from, no more than the
    # cart as it is, nor than every line at its product's cheapest store
    rows = sql(f"""WITH r AS (SELECT * FROM gpurec.optimize_carts(
                        'SELECT cart_id, product_id, quantity, store_id FROM carts', '{in_stock}',
                        'SELECT store_id, fee, free_from FROM shipping')),
                   per_store AS (SELECT cart_id, store_id, sum(price * quantity) AS subtotal FROM r GROUP BY 1, 2),
                   fees AS (SELECT p.cart_id, sum(CASE WHEN s.free_from IS NOT NULL AND p.subtotal >= s.free_from
                                                       THEN 0 ELSE coalesce(s.fee, 0) END) AS shipping,
                                   sum(p.subtotal) AS items, count(*) AS stores
                            FROM per_store p LEFT JOIN shipping s USING (store_id) GROUP BY 1),
                   cheapest AS (SELECT DISTINCT ON (product_id) product_id, store_id, price
                                FROM offers WHERE in_stock ORDER BY product_id, price, store_id),
                   greedy AS (SELECT c.cart_id, sum(ch.price * c.quantity) AS items,
                                     array_agg(DISTINCT ch.store_id) AS stores
                              FROM carts c JOIN cheapest ch USING (product_id) GROUP BY 1),
                   greedy_total AS (SELECT g.cart_id, g.items + (
                                      SELECT coalesce(sum(CASE WHEN s.free_from IS NOT NULL AND (
                                               SELECT sum(ch.price * c.quantity) FROM carts c JOIN cheapest ch USING (product_id)
                                               WHERE c.cart_id = g.cart_id AND ch.store_id = s.store_id) >= s.free_from
                                             THEN 0 ELSE s.fee END), 0)
                                      FROM shipping s WHERE s.store_id = ANY (g.stores)) AS total
                                    FROM greedy g)
               SELECT DISTINCT r.cart_id, r.total = f.items + f.shipping AND r.shipping = f.shipping
                                          AND r.stores_used = f.stores AND r.complete
                                          AND r.total <= r.current_total AND r.total <= gt.total
               FROM r JOIN fees f USING (cart_id) JOIN greedy_total gt USING (cart_id)""")
    bad = [r[0] for r in rows if r[1] != "t"]
    check("tutorial: optimize_carts' totals add up, and beat the carts as they are and every line at its cheapest store",
          len(rows) == 100 and not bad, f"{len(rows)} carts, wrong: {bad[:5]}")
    haversine = """2 * 6371008.8 * asin(sqrt(sin(radians(b.lat - a.lat) / 2) ^ 2
                   + cos(radians(a.lat)) * cos(radians(b.lat)) * sin(radians(b.lon - a.lon) / 2) ^ 2))"""
    similarity = f"""SELECT b.user_id, 1 / avg(greatest(d, 10)) AS s
                     FROM (SELECT b.user_id, a.i, min({haversine}) AS d
                           FROM (SELECT row_number() OVER () AS i, lon, lat FROM early WHERE user_id = 1) a
                           CROSS JOIN early b WHERE b.user_id <> 1 GROUP BY 1, 2) b GROUP BY 1"""
    early = "WITH early AS (SELECT * FROM checkins WHERE at < '2026-09-25')"
    close_rows("tutorial: user_similarity equals plain SQL's haversine within 1e-9",
               f"""{early}, sim AS ({similarity})
                   SELECT g.user_id, g.similarity, sim.s FROM gpurec.user_similarity(
                     $$SELECT user_id, lon AS x, lat AS y FROM checkins WHERE at < '2026-09-25'$$, 1, 'haversine') g
                   FULL JOIN sim USING (user_id)""", 1e-9)
    close_rows("tutorial: predict_strength equals plain SQL within 1e-9",
               f"""{early}, sim AS ({similarity}),
                   want AS (SELECT a.venue_id, coalesce(sum(sim.s * greatest(d, 10) ^ (-2)) FILTER (WHERE d <= 500), 0) AS s
                            FROM (SELECT a.venue_id, b.user_id, {haversine} AS d
                                  FROM venues a CROSS JOIN early b WHERE b.user_id <> 1) a
                            JOIN sim USING (user_id) GROUP BY 1)
                   SELECT g.candidate_id, g.strength, want.s FROM gpurec.predict_strength(
                     $$SELECT user_id, lon AS x, lat AS y FROM checkins WHERE at < '2026-09-25'$$, 1,
                     'SELECT venue_id AS candidate_id, lon AS x, lat AS y FROM venues',
                     max_distance => 500, metric => 'haversine') g
                   FULL JOIN want ON want.venue_id = g.candidate_id""", 1e-9)
    # AUC from mid-ranks: (sum of the positives' ascending mid-ranks - P(P+1)/2) / (P N)
    close_rows("tutorial: roc_fitness' AUC equals plain SQL's mid-rank AUC",
               """WITH e AS (SELECT p.individual_id, t.labels[p.example] AS label, p.score,
                                    rank() OVER w + (count(*) OVER (PARTITION BY p.individual_id, p.score) - 1) / 2.0 AS mid
                             FROM predictions p, training_set t WINDOW w AS (PARTITION BY p.individual_id ORDER BY p.score)),
                       want AS (SELECT individual_id,
                                       (sum(mid) FILTER (WHERE label) - count(*) FILTER (WHERE label) * (count(*) FILTER (WHERE label) + 1) / 2.0)
                                       / (count(*) FILTER (WHERE label) * count(*) FILTER (WHERE NOT label)) AS auc
                                FROM e GROUP BY 1)
                  SELECT individual_id, g.auc, want.auc FROM gpurec.roc_fitness(
                    'SELECT individual_id, scores FROM population', (SELECT labels FROM training_set)) g
                  FULL JOIN want USING (individual_id)""", 1e-12)
    rows_equal("tutorial: roc_fitness' long and array formats agree, and roc_auc with them",
               """SELECT *, gpurec.roc_auc((SELECT scores FROM population p WHERE p.individual_id = g.individual_id),
                                         (SELECT labels FROM training_set)) = auc
                  FROM gpurec.roc_fitness('SELECT p.individual_id, t.labels[p.example] AS label, p.score
                                           FROM predictions p, training_set t') g ORDER BY 1""",
               """SELECT *, true FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population',
                                                        (SELECT labels FROM training_set)) ORDER BY 1""")


def main():
    show = "--show" in sys.argv
    blocks, examples = sections(README)
    run = [(n, b) for n, b in enumerate(blocks) if b.skipped is None]
    skipped = [b for b in blocks if b.skipped is not None]
    for b in skipped:
        print(f"# README.md line {b.line}: not run ({b.skipped})")
    if not check("tutorial: README.md's tutorial has SQL blocks, the last its clean-up",
                 len(run) > 5 and f"DROP DATABASE {DATABASE}" in run[-1][1].text
                 and len(skipped) <= 1, f"{len(run)} blocks to run, {len(skipped)} not run"):
        return 0

    os.environ["PGDATABASE"] = "postgres"
    sql(f"DROP DATABASE IF EXISTS {DATABASE}")
    sql(f"DROP ROLE IF EXISTS {ROLE}")
    rc, stderr, printed = run_psql(run[:-1], "postgres")
    if show:
        for n, b in run[:-1]:
            print(f"=== README.md line {b.line}\n{printed.get(n, '(nothing)')}")
        print(stderr)
    if check(f"tutorial: its {len(run) - 1} SQL blocks before the clean-up run in psql with ON_ERROR_STOP ({len(skipped)} not run: pg_cron's)",
             rc == 0, stderr.strip()[-3000:]):
        shown = [(n, b) for n, b in run if b.output is not None]
        wrong = [f"README.md line {b.line}: shows\n{normalized(b.output)}\npsql printed\n{normalized(printed.get(n, ''))}"
                 for n, b in shown if normalized(b.output) != normalized(printed.get(n, ""))]
        check(f"tutorial: the {len(shown)} outputs it shows are what psql prints", shown and not wrong,
              "\n".join(wrong[:2]))
        check_results()
    os.environ["PGDATABASE"] = "postgres"
    rc, stderr, _ = run_psql(run[-1:], "postgres")
    check("tutorial: its clean-up drops the database and the role", rc == 0 and not sql(
        f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}' UNION ALL SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}'"),
        stderr.strip())
    check_examples(examples, show)
    return 0


def check_examples(examples, show):
    """The reference's examples that show their output, each run on its own
    in a fresh database: the output must be psql's."""
    fresh_database(EXAMPLES_DATABASE)
    numbered = list(enumerate(examples))
    rc, stderr, printed = run_psql(numbered, EXAMPLES_DATABASE)
    if show:
        for n, b in numbered:
            print(f"=== README.md line {b.line}\n{printed.get(n, '(nothing)')}")
    wrong = [f"README.md line {b.line}: shows\n{normalized(b.output)}\npsql printed\n{normalized(printed.get(n, ''))}"
             for n, b in numbered if normalized(b.output) != normalized(printed.get(n, ""))]
    check(f"README: the {len(examples)} examples of the reference that show their output print it",
          rc == 0 and examples and not wrong, (stderr.strip() + "\n" + "\n".join(wrong[:2])).strip())
    drop_database(EXAMPLES_DATABASE)


if __name__ == "__main__":
    sys.exit(main())
