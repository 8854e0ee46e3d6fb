#!/usr/bin/env python3
"""What a psql user sees of gpurec: `\\df gpurec.*` lists only the public
functions, each one documented in README.md's reference and commented;
every schema, type and function of gpurec and gpurec_internal carries a
comment; the internals are reachable where gpurec needs them (the read
layer's aggregate, through parallel workers, for a role without
privileges) and not where nothing needs them (the aggregate's support
functions).

Run by test/run_all.sh against its cluster (PGHOST etc. in the
environment); prints PASS/FAIL lines as the property tests do.
"""
import csv
import io
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "property"))
from pgtest import PSQL, check, drop_database, fresh_database, sql, sql_error  # noqa: E402

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")
DB = "gpurec_psql_listing"
ROLE = "gpurec_listing_reader"


def psql_meta(command):
    """The rows of a psql backslash command, as dicts by psql's own column titles."""
    proc = subprocess.run([PSQL, "-X", "--csv", "-c", command], capture_output=True, text=True, check=True)
    return list(csv.DictReader(io.StringIO(proc.stdout)))


def main():
    fresh_database(DB)
    readme = open(README).read()

    listed = psql_meta("\\df+ gpurec.*")
    names = sorted({r["Name"] for r in listed})
    check("df-lists-functions", len(names) > 0, "\\df+ gpurec.* listed nothing")
    internal_looking = [n for n in names if n.startswith("_")]
    check("df-gpurec-lists-no-internal-function", not internal_looking, f"listed: {internal_looking}")
    # the README's reference documents each one as gpurec.NAME(
    undocumented = [n for n in names if f"gpurec.{n}(" not in readme]
    check("df-gpurec-lists-only-functions-the-readme-documents", not undocumented, f"not in README: {undocumented}")
    for schema in ("gpurec", "gpurec_internal"):
        rows = psql_meta(f"\\df+ {schema}.*") + psql_meta(f"\\da+ {schema}.*")
        bare = [f"{r['Name']}({r.get('Argument data types', '')})" for r in rows if not r.get("Description")]
        check(f"every-function-of-{schema}-has-a-comment", rows and not bare, f"without a comment: {bare}")
        types = psql_meta(f"\\dT+ {schema}.*")
        bare = [r["Name"] for r in types if not r.get("Description")]
        check(f"every-type-of-{schema}-has-a-comment", not bare, f"without a comment: {bare}")
        described = [r for r in psql_meta(f"\\dn+ {schema}") if r.get("Description")]
        check(f"schema-{schema}-has-a-comment", len(described) == 1, "\\dn+ shows no description")
    internal = sorted({r["Name"] for r in psql_meta("\\df gpurec_internal.*")})
    check("internals-are-in-gpurec_internal", "_read_columns" in internal and "_merge_cheapest_offers" in internal,
          f"gpurec_internal holds {internal}")

    # a role with no privilege of its own: the read layer's aggregate, run
    # by parallel workers, still reaches gpurec_internal; the aggregate's
    # support functions (checked for the aggregate's owner) are not granted
    sql(f"""DROP ROLE IF EXISTS {ROLE}; CREATE ROLE {ROLE};
            CREATE TABLE listing_offers AS
              SELECT p AS product_id, s AS store_id, (p * 7 + s * 13) % 100 + 0.5 AS price
              FROM generate_series(1, 300) p, generate_series(1, 40) s;
            ANALYZE listing_offers;
            GRANT SELECT ON listing_offers TO {ROLE};""")
    forced = {"role": ROLE, "parallel_setup_cost": "0", "parallel_tuple_cost": "0",
              "min_parallel_table_scan_size": "0", "max_parallel_workers_per_gather": "2",
              "gpurec.timing": "on"}
    prefix = "".join(f"SET {k} = '{v}';\n" for k, v in forced.items())
    proc = subprocess.run([PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "--csv"],
                          input=prefix + "SELECT count(*), sum(price) FROM gpurec.cheapest_offers("
                                         "'SELECT product_id, store_id, price FROM listing_offers', 2)",
                          capture_output=True, text=True)
    want = sql("SELECT count(*), sum(price) FROM (SELECT price, row_number() OVER "
               "(PARTITION BY product_id ORDER BY price, store_id) AS r FROM listing_offers) o WHERE r <= 2")[0]
    got = list(csv.reader(io.StringIO(proc.stdout)))[1:2]
    check("unprivileged-role-reads-through-parallel-workers", proc.returncode == 0 and got == [want],
          f"got {got} ({proc.stderr.strip()[:300]}), expected {want}")
    check("unprivileged-role-read-used-parallel-workers",
          re.search(r"\d+ of \d+ planned parallel workers read rows", proc.stderr) is not None,
          f"the timing NOTICE says: {proc.stderr.strip()[:400]}")
    granted = sql(f"SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_aggregate a ON p.oid IN "
                  f"(a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn, a.aggdeserialfn) "
                  f"WHERE a.aggfnoid = 'gpurec_internal._read_columns'::regproc "
                  f"AND has_function_privilege('{ROLE}', p.oid, 'EXECUTE')")
    check("aggregate-support-functions-not-granted", granted == [], f"{ROLE} may execute {granted}")
    error = sql_error("SELECT gpurec_internal._read_columns('x', 1)", settings={"role": ROLE})
    check("aggregate-refuses-outside-gpurec", error is not None and error[0] != "42501", f"got {error}")

    sql("DROP TABLE listing_offers")
    shards_listing(readme)
    drop_database(DB)
    sql(f"DROP ROLE {ROLE}")


def shards_listing(readme):
    """gpurec_shards as psql shows it: \\df gpurec_shards.* lists only the
    functions users call, each in README's table and commented; its
    internals are in gpurec_shards_internal, which only USAGE opens to
    PUBLIC (the user-facing functions run as their caller and name them)."""
    if sql("SELECT count(*) FROM pg_available_extensions WHERE name = 'plproxy'")[0][0] == "0":
        print("SKIP shards-listing: PL/Proxy is not installed (postgresql-15-plproxy)")
        return
    sql("CREATE EXTENSION gpurec_shards CASCADE")
    listed = psql_meta("\\df+ gpurec_shards.*")
    names = sorted({r["Name"] for r in listed})
    internal = sorted({r["Name"] for r in psql_meta("\\df gpurec_shards_internal.*")})
    check("shards-df-lists-the-functions-of-gpurec",
          names == sorted({"cheapest_offers", "improve_carts", "optimize_carts", "roc_fitness", "roc_auc",
                           "user_similarity", "similar_users", "predict_strength", "fit_exponent"}),
          f"\\df gpurec_shards.* lists {names}")
    check("shards-internals-are-in-gpurec_shards_internal",
          {"checked_cluster", "partitions", "raise_translated", "unsplit", "mean_aucs"} <= set(internal),
          f"gpurec_shards_internal holds {internal}")
    undocumented = [n for n in names if f"`{n}(cluster" not in readme]
    check("shards-df-lists-only-functions-the-readme-documents", not undocumented, f"not in README: {undocumented}")
    bare = [f"{r['Name']}({r.get('Argument data types', '')})" for r in listed if not r.get("Description")]
    check("shards-every-function-has-a-comment", listed and not bare, f"without a comment: {bare}")
    for schema in ("gpurec_shards", "gpurec_shards_internal"):
        described = [r for r in psql_meta(f"\\dn+ {schema}") if r.get("Description")]
        check(f"schema-{schema}-has-a-comment", len(described) == 1, "\\dn+ shows no description")
    granted = sql("SELECT n.nspname, a.privilege_type FROM pg_namespace n, aclexplode(n.nspacl) a "
                  "WHERE n.nspname = 'gpurec_shards_internal' AND a.grantee = 0 ORDER BY 2")
    check("shards-internal-schema-grants-public-usage-only", granted == [["gpurec_shards_internal", "USAGE"]],
          f"PUBLIC holds {granted}")
    sql("DROP EXTENSION gpurec_shards; DROP EXTENSION plproxy")


if __name__ == "__main__":
    main()
