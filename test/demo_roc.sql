-- demo.sh, ROC fitness: a genetic algorithm's population of 200 individuals
-- scoring the same 20,000 labelled examples (array format), and 100 of them
-- in long format.
\echo '== ROC fitness: loading a population of 200 individuals x 20,000 examples'
CREATE UNLOGGED TABLE training AS SELECT array_agg(random() < 0.3) AS labels FROM generate_series(1, 20000);
CREATE UNLOGGED TABLE population AS
  SELECT i AS individual_id,
         (SELECT array_agg(((e % 7) * i % 13 + random() * 5)::real) FROM generate_series(1, 20000) e WHERE i > 0) AS scores
  FROM generate_series(1, 200) i;
CREATE UNLOGGED TABLE population_long AS
  SELECT individual_id, l.label, s.score
  FROM population, unnest(scores) WITH ORDINALITY s(score, i),
       unnest((SELECT labels FROM training)) WITH ORDINALITY l(label, j)
  WHERE i = j AND individual_id <= 100;
SET gpurec.timing = on;
\timing on
\echo '== the 5 fittest individuals (array format)'
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, scores FROM population', (SELECT labels FROM training))
ORDER BY fitness DESC, individual_id LIMIT 5;
\echo '== the same in long format (100 individuals, 2M rows)'
SELECT * FROM gpurec.roc_fitness('SELECT individual_id, label, score FROM population_long')
ORDER BY fitness DESC, individual_id LIMIT 5;
\echo '== one individual'
SELECT gpurec.roc_auc(scores::float8[], (SELECT labels FROM training)) FROM population WHERE individual_id = 1;
