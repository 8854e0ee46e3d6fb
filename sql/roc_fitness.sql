-- gpurec ROC fitness: roc_fitness (long and array formats) and roc_auc
CREATE TABLE examples (individual_id integer, label boolean, score double precision);
INSERT INTO examples VALUES
  (1, true, 0.9), (1, false, 0.8), (1, true, 0.7), (1, false, 0.1),   -- AUC 0.75
  (2, true, 0.5), (2, false, 0.5),                                    -- a tie: 0.5
  (3, true, 1.0),                                                     -- one example, no negative
  (4, false, 'NaN'), (4, true, 'NaN'), (4, true, 3),                  -- NaN above every number
  (5, false, 2), (5, false, 1),                                       -- no positive: NULL ranks
  (6, NULL, 1), (6, true, NULL), (6, true, 2), (6, false, 2),         -- NULL label or score skipped
  (NULL, true, 1);                                                    -- NULL individual skipped
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM examples');
-- labels as integers 0/1; scores of any numeric type; columns by name
SELECT * FROM gpurec.roc_fitness('SELECT score::numeric(4,2) AS score, label::int AS label, individual_id::bigint AS individual_id FROM examples WHERE individual_id < 3');
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label::int::smallint AS label, (score * 10)::int AS score FROM examples WHERE individual_id = 1');
-- ranks are rank() OVER (PARTITION BY individual_id ORDER BY score DESC)
SELECT individual_id, min(r) FILTER (WHERE label) AS lowest, max(r) FILTER (WHERE label) AS highest
FROM (SELECT *, rank() OVER (PARTITION BY individual_id ORDER BY score DESC) r
      FROM examples WHERE label IS NOT NULL AND score IS NOT NULL AND individual_id IS NOT NULL) s
GROUP BY 1 ORDER BY 1;
-- empty input
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM examples WHERE false');
-- errors
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, 2 AS label, score FROM examples');
-- several bad labels, whatever their rows' order: the least individual's, and its least
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, CASE WHEN individual_id = 3 THEN 9 - (score > 0.5)::int WHEN individual_id = 2 THEN -1 ELSE label::int END AS label, score FROM examples ORDER BY individual_id DESC, score');
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, CASE WHEN individual_id >= 3 THEN 9 - (score > 0.5)::int ELSE label::int END AS label, score FROM examples ORDER BY individual_id DESC, score');
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label::text AS label, score FROM examples');
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label FROM examples');
SELECT * FROM gpurec.roc_fitness('SELECT individual_id::float8 AS individual_id, label, score FROM examples');

-- array format: one row per individual, labels given once
CREATE TABLE population (individual_id bigint, scores real[]);
INSERT INTO population VALUES
  (10, '{0.9, 0.8, 0.7, 0.1}'),
  (11, '{0.1, 0.7, 0.8, 0.9}'),
  (12, '{0.5, 0.5, 0.5, 0.5}'),
  (13, '{0.9, NULL, 0.7, 0.1}'),   -- a NULL score is skipped
  (14, NULL);                      -- a NULL array: the individual is skipped
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', '{t, f, t, f}');
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores::float8[] AS scores FROM population', '{t, f, NULL, f}');
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', '{t, t, t, t}');
-- errors
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', '{t, f, t}');
SELECT * FROM gpurec.roc_fitness('SELECT 1 AS individual_id, ''{1,2}''::real[] AS scores UNION ALL SELECT 1, ''{2,1}''', '{t, f}');
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores::numeric[] AS scores FROM population', '{t, f, t, f}');

-- roc_auc for one individual
SELECT gpurec.roc_auc('{0.9, 0.8, 0.7, 0.1}', '{t, f, t, f}') AS auc,
       gpurec.roc_auc('{1, 1}', '{t, f}') AS tie,
       gpurec.roc_auc('{1, NULL, 3}', '{f, t, t}') AS null_skipped,
       gpurec.roc_auc('{1, 2}', '{t, t}') AS one_class,
       gpurec.roc_auc('{}', '{}') AS empty;
SELECT gpurec.roc_auc('{1, 2, 3}', '{t, f}');

-- array arguments are lists: a multidimensional one is ERROR 2202E, a lower
-- bound other than 1 changes nothing
SELECT gpurec.roc_auc('{{1,2},{3,4}}', '{t,f,t,f}');
SELECT gpurec.roc_auc('{1,2,3,4}', '{{t,f},{t,f}}');
SELECT * FROM gpurec.roc_fitness('SELECT 1 AS individual_id, ARRAY[0.9, 0.1]::real[] AS scores', '{{t},{f}}');
SELECT gpurec.roc_auc('[0:3]={0.9,0.8,0.7,0.1}', '[5:8]={t,f,t,f}') = gpurec.roc_auc('{0.9,0.8,0.7,0.1}', '{t,f,t,f}') AS lower_bounds_ignored;

-- gpurec.cpu_threads caps the threads of a CPU computation (0: every core);
-- the results do not depend on it (these individuals are counted in several
-- items, on as many threads as allowed)
SET gpurec.device = cpu;
CREATE TABLE big_population AS
  SELECT i AS individual_id,
         (SELECT array_agg((((g * 7919 + i * 104729) % 1000) / 1000.0)::real) FROM generate_series(1, 3000) g) AS scores
  FROM generate_series(1, 200) i;
CREATE TABLE big_labels AS SELECT array_agg(g % 3 = 0) AS labels FROM generate_series(1, 3000) g;
SET gpurec.cpu_threads = 1;
SHOW gpurec.cpu_threads;
CREATE TABLE fitness_one_thread AS
  SELECT * FROM gpurec.roc_fitness('SELECT * FROM big_population', (SELECT labels FROM big_labels));
RESET gpurec.cpu_threads;
SHOW gpurec.cpu_threads;
SELECT count(*) AS individuals,
       count(*) FILTER (WHERE o IS NOT DISTINCT FROM a) AS identical
FROM fitness_one_thread o
FULL JOIN gpurec.roc_fitness('SELECT * FROM big_population', (SELECT labels FROM big_labels)) a
  USING (individual_id);
SET gpurec.cpu_threads = 3;
SELECT count(*) AS individuals,
       count(*) FILTER (WHERE o IS NOT DISTINCT FROM a) AS identical
FROM fitness_one_thread o
FULL JOIN gpurec.roc_fitness('SELECT * FROM big_population', (SELECT labels FROM big_labels)) a
  USING (individual_id);
SET gpurec.cpu_threads = -1;
RESET gpurec.cpu_threads;
RESET gpurec.device;
DROP TABLE big_population, big_labels, fitness_one_thread;

