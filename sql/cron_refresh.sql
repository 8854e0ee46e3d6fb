-- a pg_cron job refreshes a materialized view over cheapest_offers
-- (runs only where pg_cron is preloaded; pg_cron 1.4 schedules by the minute)
CREATE EXTENSION pg_cron;
CREATE TABLE cron_offers (product_id int, store_id int, price numeric);
INSERT INTO cron_offers VALUES (1, 1, 2.00), (1, 2, 1.00);
CREATE MATERIALIZED VIEW cron_cheapest AS
  SELECT * FROM gpurec.cheapest_offers('SELECT product_id, store_id, price FROM public.cron_offers');
CREATE UNIQUE INDEX ON cron_cheapest (product_id, offer_rank);
INSERT INTO cron_offers VALUES (1, 3, 0.50);
SELECT store_id, price FROM cron_cheapest;
SELECT cron.schedule('refresh-cheapest', '* * * * *',
                     'REFRESH MATERIALIZED VIEW CONCURRENTLY public.cron_cheapest') > 0 AS scheduled;
-- wait (up to 150 s) for the job's first successful run
DO $$
DECLARE
  done boolean := false;
BEGIN
  FOR i IN 1..150 LOOP
    SELECT count(*) > 0 INTO done FROM cron.job_run_details WHERE status = 'succeeded';
    EXIT WHEN done;
    PERFORM pg_sleep(1);
  END LOOP;
  RAISE NOTICE 'job ran: %', done;
END $$;
SELECT cron.unschedule('refresh-cheapest');
SELECT store_id, price FROM cron_cheapest;
SELECT DISTINCT status, return_message FROM cron.job_run_details;
DROP MATERIALIZED VIEW cron_cheapest;
DROP TABLE cron_offers;
DROP EXTENSION pg_cron;
