#!/usr/bin/env bash
# test/bench/bench_roc.sh: roc_fitness on a genetic algorithm's population,
# against the plain-SQL ways, in one run.  Needs a running cluster (PGHOST
# etc.) with gpurec installed.
#   array format: ARRAY_INDIVIDUALS x ARRAY_EXAMPLES (1,000 x 100,000), real[]
#     (ARRAY_TYPE="double precision" for float8[])
#     vs reading the same arrays: SELECT sum(cardinality(scores))
#   long format:  LONG_INDIVIDUALS x LONG_EXAMPLES (100 x 100,000 = 10M rows)
#     vs the plain-SQL mid-rank formulation
# FORMATS="array long" picks which; DEVICES="cpu gpu" the devices.
set -euo pipefail
array_individuals=${ARRAY_INDIVIDUALS:-1000}
array_examples=${ARRAY_EXAMPLES:-100000}
long_individuals=${LONG_INDIVIDUALS:-100}
long_examples=${LONG_EXAMPLES:-100000}
array_type=${ARRAY_TYPE:-real}
# FILLFACTOR spreads the population's rows over more heap pages: a parallel
# scan shares out pages, and 1,000 rows of TOASTed arrays fill only about 5
fillfactor=${FILLFACTOR:-100}
formats=${FORMATS:-array long}
devices=${DEVICES:-cpu}
db=gpurec_bench_roc
export PGDATABASE=$db
source "$(dirname "$0")/lib.sh"
fresh_database

if [[ " $formats " == *" array "* ]]; then
	echo "# array format: $array_individuals individuals x $array_examples examples ($array_type[]), fillfactor $fillfactor"
	q <<SQL
CREATE UNLOGGED TABLE population WITH (fillfactor = $fillfactor) AS
  SELECT i AS individual_id,
         (SELECT array_agg(((random() * 100)::int / 100.0)::$array_type) FROM generate_series(1, $array_examples) WHERE i > 0) AS scores
  FROM generate_series(1, $array_individuals) i;
CREATE UNLOGGED TABLE labels AS
  SELECT array_agg(random() < 0.3) AS labels FROM generate_series(1, $array_examples);
VACUUM ANALYZE population;
SQL
	allow_workers population
	read_ms=$(median3 "SELECT sum(cardinality(scores)) FROM population")
	echo "read the arrays, sum(cardinality(scores)): $read_ms ms"
	echo "  with $workers parallel workers: $(median3 "SELECT sum(cardinality(scores)) FROM population" "$parallel") ms"
	for device in $devices; do
		sql="SELECT sum(auc) FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', (SELECT labels FROM labels))"
		ms=$(median3 "$sql" "$parallel SET gpurec.device = $device;")
		echo "roc_fitness arrays ($device): $ms ms = $(ratio "$ms" "$read_ms")x the reading"
		echo "  warm session: $(warm3 "$sql" "$parallel SET gpurec.device = $device;") ms"
		notice "$sql" "$parallel SET gpurec.device = $device;"
	done
fi

if [[ " $formats " == *" long "* ]]; then
	echo "# long format: $long_individuals individuals x $long_examples examples"
	q <<SQL
CREATE UNLOGGED TABLE scores AS
  SELECT i AS individual_id, random() < 0.3 AS label, (random() * 1000)::int::float8 AS score
  FROM generate_series(1, $long_individuals) i, generate_series(1, $long_examples) e;
VACUUM ANALYZE scores;
SQL
	allow_workers scores
	midrank_sql="SELECT sum(auc) FROM (
	  SELECT individual_id,
	         (sum(midrank) FILTER (WHERE label) - count(*) FILTER (WHERE label) * (count(*) FILTER (WHERE label) + 1) / 2.0)
	         / nullif(count(*) FILTER (WHERE label) * count(*) FILTER (WHERE NOT label), 0) AS auc
	  FROM (SELECT individual_id, label,
	               rank() OVER (PARTITION BY individual_id ORDER BY score)
	               + (count(*) OVER (PARTITION BY individual_id, score) - 1) / 2.0 AS midrank
	        FROM scores) r
	  GROUP BY individual_id) a"
	sql_ms=$(run_ms "$midrank_sql")
	echo "plain-SQL mid-rank AUC: $sql_ms ms"
	for device in $devices; do
		sql="SELECT sum(auc) FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM scores')"
		ms=$(median3 "$sql" "$parallel SET gpurec.device = $device;")
		echo "roc_fitness long ($device): $ms ms = $(ratio "$sql_ms" "$ms")x faster than plain SQL"
		notice "$sql" "$parallel SET gpurec.device = $device;"
	done
fi
