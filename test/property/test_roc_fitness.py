#!/usr/bin/env python3
"""roc_fitness and roc_auc against scikit-learn and a plain-SQL mid-rank
formulation, on fresh random populations: many ties, NULL labels and
scores, NaN, single-class and one-example individuals, individuals of
different sizes, both formats, labels as booleans and as integers 0 and 1.  Replay a run with GPUREC_SEED.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pgtest import check, drop_database, skip, fresh_database, seeded_random, sql, sql_error  # noqa: E402

try:
    from sklearn.metrics import roc_auc_score
except ImportError:  # the GPU machine has no scikit-learn: the SQL oracle still runs
    roc_auc_score = None

rng = seeded_random()
DB = "gpurec_property_roc"

# the mid-rank (Mann-Whitney) AUC and the rank() columns, in plain SQL
SQL_ORACLE = """
    WITH e AS (SELECT individual_id, label::int AS label, score FROM {table}
               WHERE individual_id IS NOT NULL AND label IS NOT NULL AND score IS NOT NULL),
    r AS (SELECT *, rank() OVER (PARTITION BY individual_id ORDER BY score)
                    + (count(*) OVER (PARTITION BY individual_id, score) - 1) / 2.0 AS midrank,
                 rank() OVER (PARTITION BY individual_id ORDER BY score DESC) AS desc_rank
          FROM e)
    SELECT individual_id::bigint,
           CASE WHEN sum(label) > 0 AND sum(1 - label) > 0
                THEN ((sum(midrank * label) - sum(label) * (sum(label) + 1) / 2.0)
                      / (sum(label) * sum(1 - label)))::float8 END AS auc,
           sum(label)::bigint AS n_positive, sum(1 - label)::bigint AS n_negative,
           min(desc_rank) FILTER (WHERE label = 1)::bigint AS lowest_positive_rank,
           max(desc_rank) FILTER (WHERE label = 1)::bigint AS highest_positive_rank
    FROM r GROUP BY individual_id
"""


def arrays_oracle(table):
    """SQL_ORACLE over `table` for the array format, which returns every individual of the population,
    also one whose every position was skipped (a NULL score or label): no example, NULL auc."""
    return f"""
        SELECT p.individual_id::bigint, o.auc, coalesce(o.n_positive, 0) AS n_positive,
               coalesce(o.n_negative, 0) AS n_negative, o.lowest_positive_rank, o.highest_positive_rank
        FROM pop p LEFT JOIN ({SQL_ORACLE.format(table=table)}) o ON o.individual_id = p.individual_id
    """


def random_long_table():
    rows = []
    for individual in rng.sample(range(-50, 1000), rng.randint(5, 40)):
        n = rng.choice([1, 2, rng.randint(3, 30), rng.randint(30, 400)])
        kind = rng.random()  # some individuals have one class only
        for _ in range(n):
            label = (1 if kind < 0.1 else 0 if kind < 0.2 else rng.randint(0, 1))
            label = "NULL" if rng.random() < 0.03 else str(label)
            score = rng.choice([str(rng.randint(0, 9) / 4), str(rng.random()), "'NaN'", "NULL"]
                               if rng.random() < 0.2 else [str(rng.randint(0, 12) / 3)])
            rows.append(f"({individual}, {label}, {score})")
    rows.append("(NULL, 1, 0.5)")
    score_type = rng.choice(["float8", "real", "numeric", "integer"])
    cast = ("CASE WHEN v.score::float8 <> 'NaN' THEN round(v.score::numeric * 4)::integer END"
            if score_type == "integer"
            # numeric within gpurec's 18 exact digits (random() has 16 decimals)
            else "round(v.score::numeric, 9)" if score_type == "numeric"
            else f"v.score::{score_type}")
    sql(f"""
        DROP TABLE IF EXISTS ex;
        CREATE TABLE ex AS SELECT v.individual_id::bigint AS individual_id, v.label::int AS label,
                                  {cast} AS score
        FROM (VALUES {", ".join(rows)}) v(individual_id, label, score);
    """)
    return score_type


def compare_sql(name, got, want, settings):
    # auc within 1e-12, every other column exact
    bad = sql(f"""
        SELECT count(*) FROM ({got}) g FULL JOIN ({want}) w USING (individual_id)
        WHERE g.individual_id IS NULL OR w.individual_id IS NULL
           OR g.n_positive <> w.n_positive OR g.n_negative <> w.n_negative
           OR g.lowest_positive_rank IS DISTINCT FROM w.lowest_positive_rank
           OR g.highest_positive_rank IS DISTINCT FROM w.highest_positive_rank
           OR (g.auc IS NULL) <> (w.auc IS NULL) OR abs(g.auc - w.auc) > 1e-12
           OR abs(g.fitness - (w.auc - 0.5)) > 1e-12
    """, settings=settings)[0][0]
    return check(name, bad == "0", f"{bad} individuals differ")


def compare_sklearn(name, results, table):
    if roc_auc_score is None:
        # the GPU machine has no scikit-learn (GPUREC_NO_SKLEARN=1); anywhere else it is required
        if os.environ.get("GPUREC_NO_SKLEARN"):
            print(f"# {name}: scikit-learn not installed, SQL oracle only")
        else:
            check(name, False, "scikit-learn (python3-sklearn) is not installed")
        return
    rows = sql(f"SELECT individual_id, label, score::float8 FROM {table} "
               "WHERE individual_id IS NOT NULL AND label IS NOT NULL AND score IS NOT NULL")
    by_individual = {}
    for individual, label, score in rows:
        # scikit-learn cannot take NaN: it is above every number, so any larger finite value does
        value = 1e300 if score == "NaN" else float(score)
        by_individual.setdefault(int(individual), ([], []))
        by_individual[int(individual)][0].append(int(label))
        by_individual[int(individual)][1].append(value)
    worst = 0.0
    for individual, auc in results:
        labels, scores = by_individual.get(individual, ([], []))  # an individual with no example left
        if len(set(labels)) < 2:
            if auc is not None:
                worst = math.inf
            continue
        worst = max(worst, abs(float(auc) - roc_auc_score(labels, scores)))
    check(name, worst <= 1e-12, f"largest difference {worst}")


def main():
    devices = fresh_database(DB)
    has_gpu = "gpu" in devices

    for trial in range(4):
        score_type = random_long_table()
        for device in devices:
            settings = {"gpurec.device": device}
            got = "SELECT * FROM gpurec.roc_fitness('SELECT label, score, individual_id FROM ex ORDER BY random()')"
            compare_sql(f"long-{trial}-{score_type}-{device}-vs-sql", got, SQL_ORACLE.format(table="ex"), settings)
            results = sql(got, settings=settings)
            compare_sklearn(f"long-{trial}-{score_type}-{device}-vs-sklearn",
                            [(int(r[0]), r[1]) for r in results], "ex")

    # array format: every individual scores the same examples
    n_examples = rng.randint(1, 300)
    labels = [rng.choice(["true", "false", "NULL"] if rng.random() < 0.1 else ["true", "false"])
              for _ in range(n_examples)]
    rows = []
    for individual in rng.sample(range(1000), 25):
        scores = [rng.choice(["NULL", "'NaN'", str(rng.random())]) if rng.random() < 0.05
                  else str(rng.randint(0, 20) / 8) for _ in range(n_examples)]
        rows.append(f"({individual}, ARRAY[{', '.join(scores)}]::float8[])")
    sql(f"""
        DROP TABLE IF EXISTS pop;
        CREATE TABLE pop AS SELECT * FROM (VALUES {", ".join(rows)}) v(individual_id, scores);
        DROP TABLE IF EXISTS pop_long;
        CREATE TABLE pop_long AS
          SELECT individual_id::bigint AS individual_id, l.label::int AS label, s.score
          FROM pop, unnest(scores) WITH ORDINALITY s(score, i),
               unnest(ARRAY[{', '.join(labels)}]::boolean[]) WITH ORDINALITY l(label, j)
          WHERE i = j;
    """)
    labels_literal = "ARRAY[" + ", ".join(labels) + "]::boolean[]"
    for device in devices:
        settings = {"gpurec.device": device}
        for scores_type in ("float8[]", "real[]"):
            table = "pop_long" if scores_type == "float8[]" else \
                "(SELECT individual_id, label, score::real::float8 AS score FROM pop_long) t"
            got = (f"SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores::{scores_type} "
                   f"AS scores FROM pop', {labels_literal})")
            compare_sql(f"arrays-{scores_type}-{device}-vs-sql", got,
                        arrays_oracle(table), settings)
        results = sql(f"SELECT individual_id, gpurec.roc_auc(scores, {labels_literal}) FROM pop",
                      settings=settings)
        compare_sklearn(f"roc-auc-{device}-vs-sklearn", [(int(r[0]), r[1]) for r in results], "pop_long")

    # labels as integers 0 and 1 (smallint, integer, bigint): the same rule as
    # a label column of an inner query, against the same oracles
    as_integer = {"true": "1", "false": "0", "NULL": "NULL"}
    for label_type in ("smallint", "integer", "bigint"):
        integer_labels = f"ARRAY[{', '.join(as_integer[v] for v in labels)}]::{label_type}[]"
        for device in devices:
            settings = {"gpurec.device": device}
            got = (f"SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores FROM pop', {integer_labels})")
            compare_sql(f"arrays-{label_type}-labels-{device}-vs-sql", got,
                        arrays_oracle("pop_long"), settings)
            results = sql(f"SELECT individual_id, gpurec.roc_auc(scores, {integer_labels}) FROM pop",
                          settings=settings)
            compare_sklearn(f"roc-auc-{label_type}-labels-{device}-vs-sklearn",
                            [(int(r[0]), r[1]) for r in results], "pop_long")
        # anything but 0 and 1 is an error, wherever it stands among the labels
        for bad in (2, -1, rng.randint(2, 30000)):
            at = rng.randint(1, 5)
            values = ["NULL" if rng.random() < 0.2 else str(rng.randint(0, 1)) for _ in range(at - 1)]
            bad_labels = f"ARRAY[{', '.join(values + [str(bad)] + ['1', '0'])}]::{label_type}[]"
            scores = f"ARRAY[{', '.join(str(rng.random()) for _ in range(at + 2))}]"
            for call in (f"SELECT gpurec.roc_auc({scores}, {bad_labels})",
                         f"SELECT * FROM gpurec.roc_fitness('SELECT 1 AS individual_id, {scores} AS scores', "
                         f"{bad_labels})"):
                error = sql_error(call)
                check(f"label-{bad}-{label_type}-is-22023-{call.split('(')[0].split('.')[-1]}",
                      error is not None and error[0] == "22023" and f"element {at} of labels is {bad}" in error[1],
                      f"got {error}")
    error = sql_error("SELECT gpurec.roc_auc(ARRAY[1, 2], ARRAY[0.0, 1.0])")
    check("numeric-labels-are-42804", error is not None and error[0] == "42804", f"got {error}")
    error = sql_error("SELECT gpurec.roc_auc(ARRAY[1, 2], '{t, maybe}')")
    check("untyped-label-literal-is-read-as-boolean", error is not None and error[0] == "22023"
          and 'element 2 of labels is "maybe"' in error[1], f"got {error}")

    # the GPU gives exactly the CPU's numbers (every way it packs its keys:
    # float, integer, numeric and double scores; both formats)
    if has_gpu:
        score_type = random_long_table()
        queries = {f"long-{score_type}": "SELECT * FROM gpurec.roc_fitness("
                                         "'SELECT individual_id, label, score FROM ex')"}
        for scores_type in ("float8[]", "real[]"):
            queries[f"arrays-{scores_type}"] = (
                f"SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores::{scores_type} "
                f"AS scores FROM pop', {labels_literal})")
        for name, q in queries.items():
            # float8 output is exact (shortest round trip) since PostgreSQL 12
            cpu = sql(q, settings={"gpurec.device": "cpu"})
            gpu = sql(q, settings={"gpurec.device": "gpu"})
            check(f"gpu-equals-cpu-exactly-{name}", cpu == gpu, "results differ")
    else:
        skip("gpu-answers-as-cpu", "no GPU here: the GPU's counts are not compared with the CPU's")

    drop_database(DB)


if __name__ == "__main__":
    main()
