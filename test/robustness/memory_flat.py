#!/usr/bin/env python3
"""1,000 calls in one session, and the backend's memory stays flat.

One psql session (one backend) runs gpurec calls on small data: the
cheapest offers with k from 1 to 5, improve_carts, and calls that raise an
ERROR (a missing column, k = 0, a division by zero inside the inner query,
a refused DELETE), caught in plpgsql EXCEPTION blocks or left to end their
statement.  Memory is sampled after call 100 and after call 1000:

  * /proc/<backend pid>/status: RssAnon (the backend's private memory;
    VmRSS also counts the shared buffers it touches) must grow by less
    than RSS_LIMIT;
  * pg_backend_memory_contexts, summed, must stay flat (CONTEXT_LIMIT).

Phase A runs each call as a statement of its own (its own transaction);
phase B runs 1,000 calls inside one plpgsql function, so in one
transaction, where memory kept until the end of the transaction shows as
growth between call 100 and call 1000; phase C runs 10,000 calls in one
statement, one per row of a LATERAL join or in the select list, where
memory kept until the statement ends would show.  Every result of phases A
and B is also compared with a reference computed in another session.
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from robust_lib import check, cheapest_digest, improve_digest, main, run_in_database  # noqa: E402

RSS_LIMIT_KB = 4096
CONTEXT_LIMIT = 64 * 1024

OFFERS = "SELECT product_id, store_id, price FROM small"
CARTS = "SELECT cart_id, product_id, store_id, quantity FROM carts"


def cheapest(k):
    return cheapest_digest(OFFERS, k, label=f"k{k}")


IMPROVE = improve_digest(CARTS, OFFERS, label="carts")


def caught(call, condition):
    return (f"DO $$ BEGIN PERFORM * FROM {call}; "
            f"EXCEPTION WHEN {condition} THEN RAISE NOTICE 'caught %', SQLSTATE; END $$;")


# phase A: call j (1-based) is STATEMENTS[j % 10]
STATEMENTS = [
    cheapest(1), cheapest(2), cheapest(3), cheapest(4), cheapest(5),
    IMPROVE,
    caught("gpurec.cheapest_offers('SELECT product_id, store_id FROM small', 1)",
           "undefined_column"),
    caught(f"gpurec.cheapest_offers('{OFFERS}', 0)", "invalid_parameter_value"),
    "SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price / 0 AS price "
    "FROM small', 1);",  # an ERROR that ends its statement
    caught("gpurec.cheapest_offers('DELETE FROM small RETURNING product_id, store_id, price', 1)",
           "feature_not_supported"),
]

# phase B: the same mix inside one function, so one transaction
LOOP_FUNCTION = f"""
CREATE FUNCTION rob_calls(n int, refs text[]) RETURNS TABLE(label text, value bigint)
LANGUAGE plpgsql AS $f$
DECLARE
  h text;
  mismatches bigint := 0;
  caught_count bigint := 0;
  ctx_100 bigint;
  top_100 bigint;
  ctx_now bigint;
  top_now bigint;
BEGIN
  FOR j IN 1..n LOOP
    BEGIN
      CASE j % 10
        WHEN 0, 1, 2, 3, 4 THEN
          SELECT md5(string_agg(t::text, ',' ORDER BY o)) INTO h
          FROM gpurec.cheapest_offers('{OFFERS}', j % 10 + 1) WITH ORDINALITY
            AS t(product_id, offer_rank, store_id, price, n_offers, o);
          IF h IS DISTINCT FROM refs[j % 10 + 1] THEN mismatches := mismatches + 1; END IF;
        WHEN 5 THEN
          SELECT md5(string_agg(t::text, ',' ORDER BY o)) INTO h
          FROM gpurec.improve_carts('{CARTS}', '{OFFERS}') WITH ORDINALITY
            AS t(cart_id, product_id, quantity, current_store_id, current_price,
                 best_store_id, best_price, saving, o);
          IF h IS DISTINCT FROM refs[6] THEN mismatches := mismatches + 1; END IF;
        WHEN 6 THEN
          PERFORM * FROM gpurec.cheapest_offers('SELECT product_id, store_id FROM small', 1);
        WHEN 7 THEN
          PERFORM * FROM gpurec.cheapest_offers('{OFFERS}', 0);
        WHEN 8 THEN
          PERFORM * FROM gpurec.cheapest_offers(
            'SELECT product_id, store_id, price / 0 AS price FROM small', 1);
        ELSE
          PERFORM * FROM gpurec.improve_carts('{CARTS}',
            'DELETE FROM small RETURNING product_id, store_id, price');
      END CASE;
    EXCEPTION WHEN undefined_column OR invalid_parameter_value OR division_by_zero
                   OR feature_not_supported THEN
      caught_count := caught_count + 1;
    END;
    IF j IN (1, 100, n) THEN  -- j = 1: the same statements, planned before they count
      SELECT sum(total_bytes) INTO ctx_now FROM pg_backend_memory_contexts;
      SELECT sum(total_bytes) INTO top_now FROM pg_backend_memory_contexts
        WHERE name = 'TopTransactionContext';
      IF j = 100 THEN ctx_100 := ctx_now; top_100 := top_now; END IF;
    END IF;
  END LOOP;
  RETURN QUERY VALUES ('mismatches', mismatches), ('caught', caught_count),
    ('ctx_100', ctx_100), ('top_100', top_100), ('ctx_end', ctx_now), ('top_end', top_now);
END $f$;
"""


def body():
    run_in_database("memory", run_checks, "memory-no-backend-crashed")


def proc_memory(pid):
    """{field: kB} from /proc/<pid>/status, or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return {k: int(fields[k].split()[0]) for k in ("VmRSS", "RssAnon") if k in fields}
    except OSError:
        return None


def run_checks(db):
    db.sql("""
        CREATE TABLE small AS
          SELECT g % 300 AS product_id, g % 37 AS store_id,
                 round((g * 7919 % 1000) / 10.0, 2) AS price
          FROM generate_series(1, 3000) g;
        CREATE TABLE carts AS
          SELECT g / 3 AS cart_id, g % 320 AS product_id, g % 41 AS store_id,
                 1 + g % 4 AS quantity
          FROM generate_series(1, 300) g;""")
    db.sql(LOOP_FUNCTION)
    reference = {}
    for q in [cheapest(k) for k in range(1, 6)] + [IMPROVE]:
        label, h = db.sql(q)[0]
        reference[label] = h
    refs = "ARRAY[" + ",".join(f"'{reference[f'k{k}']}'" for k in range(1, 6)) + \
        f",'{reference['carts']}']"

    s = db.session()
    before = proc_memory(s.pid)
    if not check("memory-backend-proc-readable", before is not None and "RssAnon" in before,
                 f"cannot read /proc/{s.pid}/status (is the server on this machine?)"):
        return

    def contexts():
        return int(s.value("SELECT sum(total_bytes) FROM pg_backend_memory_contexts;"))

    def calls(first, last):
        """Phase A calls first..last; returns (bad results, notices, errors)."""
        script = "\n".join(STATEMENTS[j % 10] for j in range(first, last + 1))
        r = s.run(script, timeout=600)
        bad = [row for row in r.rows if row[0] not in reference or row[1] != reference[row[0]]]
        return bad, r.notices(), r.sqlstates(), len(r.rows)

    # phase A: 1,000 statements
    bad1, notices1, errors1, results1 = calls(1, 100)
    mem_100, ctx_100 = proc_memory(s.pid), contexts()
    bad2, notices2, errors2, results2 = calls(101, 1000)
    mem_1000, ctx_1000 = proc_memory(s.pid), contexts()
    print(f"# phase A: after call 100 {mem_100} kB, contexts {ctx_100} B; after call 1000 "
          f"{mem_1000} kB, contexts {ctx_1000} B", flush=True)
    bad, notices, errors = bad1 + bad2, notices1 + notices2, errors1 + errors2
    results = results1 + results2
    check("memory-statements-results-correct", not bad and results == 600,
          f"{results} results of 600, {len(bad)} wrong: {bad[:3]}")
    want_caught = {"caught 42703": 100, "caught 22023": 100, "caught 0A000": 100}
    got_caught = {k: sum(1 for n in notices if n == k) for k in want_caught}
    check("memory-statements-errors-caught", got_caught == want_caught,
          f"caught {got_caught}, expected {want_caught}; other notices: "
          f"{[n for n in notices if n not in want_caught][:3]}")
    check("memory-statements-uncaught-errors", errors == ["22012"] * 100,
          f"errors {sorted(set(errors))}, {len(errors)} of them; expected 100 x 22012")
    growth = mem_1000["RssAnon"] - mem_100["RssAnon"]
    check("memory-statements-rss-flat", growth <= RSS_LIMIT_KB,
          f"RssAnon grew {growth} kB from call 100 to call 1000 (limit {RSS_LIMIT_KB} kB)")
    check("memory-statements-contexts-flat", ctx_1000 - ctx_100 <= CONTEXT_LIMIT,
          f"memory contexts grew {ctx_1000 - ctx_100} B from call 100 to call 1000")

    # phase B: 1,000 calls in one transaction (after a first run that compiles the function)
    s.run(f"SELECT * FROM rob_calls(20, {refs});")
    mem_1000, ctx_1000 = proc_memory(s.pid), contexts()
    r = s.run(f"SELECT * FROM rob_calls(1000, {refs});", timeout=600)
    values = {row[0]: int(row[1]) for row in r.rows if len(row) == 2}
    mem_b, ctx_b = proc_memory(s.pid), contexts()
    print(f"# phase B: {values}; before it {mem_1000} kB, contexts {ctx_1000} B; after it "
          f"{mem_b} kB, contexts {ctx_b} B", flush=True)
    if not check("memory-transaction-ran", not r.errors() and "mismatches" in values,
                 r.describe()):
        return
    check("memory-transaction-results-correct", values["mismatches"] == 0,
          f"{values['mismatches']} of 600 results differ from the reference")
    check("memory-transaction-errors-caught", values["caught"] == 400,
          f"caught {values['caught']} errors, expected 400")
    grew = values["ctx_end"] - values["ctx_100"]
    top_grew = values["top_end"] - values["top_100"]
    check("memory-transaction-contexts-flat", grew <= CONTEXT_LIMIT,
          f"memory contexts grew {grew} B from call 100 to call 1000 inside one transaction "
          f"(TopTransactionContext {values['top_100']} -> {values['top_end']} B: "
          f"{top_grew / 270:.0f} B for each of the 270 ERRORs raised by PostgreSQL code "
          f"inside a call (missing column, division by zero, refused DELETE) and caught)")
    growth = mem_b["RssAnon"] - mem_1000["RssAnon"]
    check("memory-transaction-rss-flat", growth <= RSS_LIMIT_KB,
          f"RssAnon grew {growth} kB over the 1,000 calls of phase B (limit {RSS_LIMIT_KB} kB)")
    check("memory-after-transaction-contexts-flat", ctx_b - ctx_1000 <= CONTEXT_LIMIT,
          f"memory contexts grew {ctx_b - ctx_1000} B across phase B")
    # phase C: 10,000 calls in one statement, one per row (a LATERAL join, a call in the select
    # list): the statement's own memory (ExecutorState), sampled at row 2,000 and 10,000, stays flat
    s.run("CREATE FUNCTION rob_statement_memory() RETURNS bigint VOLATILE LANGUAGE sql AS "
          "$$ SELECT sum(total_bytes) FROM pg_backend_memory_contexts WHERE name = 'ExecutorState' $$;")
    one = "format('SELECT %s AS product_id, 1 AS store_id, 1.5 AS price', g)"
    for how, query in (
            ("lateral", f"SELECT g, m FROM (SELECT g, CASE WHEN g IN (2000, 10000) THEN rob_statement_memory() END m "
                        f"FROM generate_series(1, 10000) g, LATERAL gpurec.cheapest_offers({one}, 1) c OFFSET 0) x "
                        "WHERE m IS NOT NULL ORDER BY g;"),
            ("select-list", f"SELECT g, m FROM (SELECT g, (gpurec.cheapest_offers({one}, 1)).product_id AS p, "
                            "CASE WHEN g IN (2000, 10000) THEN rob_statement_memory() END m "
                            "FROM generate_series(1, 10000) g OFFSET 0) x WHERE m IS NOT NULL AND p = g ORDER BY g;")):
        r = s.run(query, timeout=600)
        sampled = [int(row[1]) for row in r.rows if len(row) == 2]
        check(f"memory-one-statement-{how}-flat", not r.errors() and len(sampled) == 2
              and sampled[1] - sampled[0] <= CONTEXT_LIMIT,
              f"the statement's memory at calls 2,000 and 10,000: {sampled} B {r.describe()[:300]}")
    still = s.value(cheapest(3))
    check("memory-session-usable", still == "k3", f"got {still}")
    s.close()


if __name__ == "__main__":
    main(body)
