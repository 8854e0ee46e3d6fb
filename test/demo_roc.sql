-- demo.sh, ROC fitness: a genetic algorithm's population of 200 individuals
-- scoring the same 20,000 labelled examples, in array format (one row per
-- individual) and long format (one row per individual and example), beside
-- a plain-SQL mid-rank AUC; and roc_auc for one individual.  Read by psql
-- -X -q from stdin.
SET gpurec.timing = on;
-- the timing NOTICE without its DETAIL (how each inner query was read)
\set VERBOSITY terse

\echo '== ROC fitness for genetic algorithms: data'
\echo 'making a population of 200 individuals, each scoring the same 20,000 examples, 30% of them positive (about 10 s):'
\echo '  individuals 1 to 195:   score = label (1 or 0) + gaussian noise, the noise growing from sd 0.1 to 20;'
\echo '  individuals 196 to 199: score = -label + noise (anti-correlated: they rank the negatives first);'
\echo '  individual 200:         scored only the negative examples (its scores of the positives are NULL).'
SELECT clock_timestamp() AS t0 \gset
CREATE TABLE examples AS SELECT e AS example_id, random() < 0.3 AS label FROM generate_series(1, 20000) e;
CREATE TABLE training AS SELECT array_agg(label ORDER BY example_id) AS labels FROM examples;
CREATE TABLE individuals AS
  SELECT i AS individual_id,
         CASE WHEN i <= 195 THEN 1 WHEN i <= 199 THEN -1 END AS sign,
         CASE WHEN i <= 195 THEN 0.1 * 200 ^ ((i - 1) / 194.0) WHEN i <= 199 THEN 0.3 * 3 ^ (i - 196) END AS noise
  FROM generate_series(1, 200) i;
-- array format: scores real[], in example order
CREATE TABLE population AS
  SELECT individual_id,
         ARRAY(SELECT CASE WHEN sign IS NOT NULL
                           THEN (sign * label::int + noise * sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()))::real
                           WHEN NOT label THEN random()::real END
               FROM examples ORDER BY example_id) AS scores
  FROM individuals;
-- long format: one row per individual and example
CREATE TABLE population_long AS
  SELECT p.individual_id, e.example_id, e.label, s.score
  FROM population p, unnest(p.scores) WITH ORDINALITY s(score, example_id) JOIN examples e USING (example_id)
  WHERE s.score IS NOT NULL;
VACUUM ANALYZE population_long;
SELECT round(extract(epoch FROM clock_timestamp() - :'t0')::numeric, 1) AS secs,
       to_char(count(*), 'FM999,999,999') AS n FROM population_long \gset
\echo 'done in' :secs 's: population(individual_id, scores real[]) with training(labels boolean[]), and'
\echo 'population_long(individual_id, example_id, label, score):' :n 'rows.'

\echo
\echo '== ROC fitness for genetic algorithms: the whole population in one call'
\echo '-- array format, one row per individual:'
\echo '   gpurec.roc_fitness(''SELECT individual_id, scores FROM population'', (SELECT labels FROM training))'
\echo '   auc: the chance that a positive example scores above a negative one (ties count half); fitness = auc - 0.5:'
\echo '   0.5 ranks every positive first, 0 is chance, below 0 anti-correlated.  Rank 1 is the highest score;'
\echo '   lowest_positive_rank is the best rank a positive holds, highest_positive_rank the worst.'
\echo '   auc, fitness and the positive ranks are NULL for an individual without a positive (200 here); auc and'
\echo '   fitness are NULL too for one without a negative.'
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE fitness AS
  SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', (SELECT labels FROM training));
SELECT round(extract(epoch FROM clock_timestamp() - :'t0')::numeric, 2) AS secs \gset
\echo '   200 individuals x 20,000 scores in' :secs 's; every 25th individual and the last 5:'
SELECT f.individual_id, CASE WHEN i.sign = -1 THEN '-label + ' WHEN i.sign = 1 THEN 'label + ' END
                        || 'noise ' || round(i.noise::numeric, 2) AS score,
       round(f.auc::numeric, 4) AS auc, round(f.fitness::numeric, 4) AS fitness, f.n_positive, f.n_negative,
       f.lowest_positive_rank, f.highest_positive_rank
FROM fitness f JOIN individuals i USING (individual_id)
WHERE f.individual_id % 25 = 1 OR f.individual_id > 195 ORDER BY f.individual_id;

\echo '-- long format, one row per individual and example (a NULL score is simply no row), beside plain SQL'
\echo '   computing AUC from mid-ranks (tied scores share the mean of their ranks):'
\echo '   AUC = (the sum of the positives'' mid-ranks - P (P + 1) / 2) / (P x N), P positives and N negatives'
\echo '   plain SQL: SELECT individual_id, (sum(r) FILTER (WHERE label) - p * (p + 1) / 2) / nullif(p * n, 0) AS auc'
\echo '              FROM (SELECT individual_id, label, (rank() OVER w + count(*) OVER w) / 2.0 AS r,'
\echo '                           count(*) FILTER (WHERE label) OVER i AS p, count(*) FILTER (WHERE NOT label) OVER i AS n'
\echo '                    FROM population_long WINDOW i AS (PARTITION BY individual_id), w AS (i ORDER BY score)) s'
\echo '              GROUP BY individual_id, p, n'
\echo '   gpurec:    gpurec.roc_fitness(''SELECT individual_id, label, score FROM population_long'')'
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE plain_auc AS
  SELECT individual_id, ((sum(r) FILTER (WHERE label) - p * (p + 1) / 2) / nullif(p * n, 0))::float8 AS auc
  FROM (SELECT individual_id, label, (rank() OVER w + count(*) OVER w) / 2.0 AS r,
               count(*) FILTER (WHERE label) OVER i AS p, count(*) FILTER (WHERE NOT label) OVER i AS n
        FROM population_long WINDOW i AS (PARTITION BY individual_id), w AS (i ORDER BY score)) s
  GROUP BY individual_id, p, n;
SELECT extract(epoch FROM clock_timestamp() - :'t0') AS plain_s \gset
SELECT clock_timestamp() AS t0 \gset
CREATE TEMP TABLE fitness_long AS SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM population_long');
SELECT extract(epoch FROM clock_timestamp() - :'t0') AS gpurec_s \gset
SELECT format('   plain SQL %s s, gpurec %s s (%sx); individuals whose AUC differs by more than 1e-12: %s of %s',
              round(:plain_s, 2), round(:gpurec_s, 2), round(:plain_s / :gpurec_s, 0),
              count(*) FILTER (WHERE (g.auc IS NULL) <> (p.auc IS NULL) OR abs(g.auc - p.auc) > 1e-12), count(*))
       AS line FROM fitness_long g FULL JOIN plain_auc p USING (individual_id) \gset
\echo :line
SELECT count(*) AS differ FROM ((TABLE fitness EXCEPT ALL TABLE fitness_long)
                                UNION ALL (TABLE fitness_long EXCEPT ALL TABLE fitness)) d \gset
\echo '   rows of the long format that differ from the array format''s (every column):' :differ 'of 200'

\echo
\echo '-- one individual''s AUC, from two arrays; roc_auc is IMMUTABLE and works in any query:'
\echo '   SELECT gpurec.roc_auc(scores::float8[], (SELECT labels FROM training)) FROM population WHERE individual_id = 100'
SELECT gpurec.roc_auc(scores::float8[], (SELECT labels FROM training)) AS roc_auc,
       gpurec.roc_auc(scores::float8[], (SELECT labels FROM training)) = (SELECT auc FROM fitness WHERE individual_id = 100)
         AS same_as_roc_fitness
FROM population WHERE individual_id = 100;
