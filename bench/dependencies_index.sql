-- How a completion finds its dependents: a (depends_on, job) table with a
-- btree, or an array column on the (8-way partitioned) jobs with a GIN index.
-- 2000 probes of 100 random ids (a complete() batch) against 100,000 jobs of
-- which 10,000 have a dependency. Run on a scratch database:
--   psql -X -q -f bench/dependencies_index.sql
-- (each figure includes drawing the ids, reported alone as "ids only").
CREATE TEMP TABLE e (depends_on bigint, job bigint, PRIMARY KEY (depends_on, job));
CREATE TEMP TABLE g (id bigint, shard int, deps bigint[]) PARTITION BY LIST (shard);
DO $$ BEGIN FOR i IN 0..7 LOOP EXECUTE format('CREATE TEMP TABLE g%s PARTITION OF g FOR VALUES IN (%s)', i, i); END LOOP; END $$;
CREATE INDEX ON g USING gin (deps);
INSERT INTO e SELECT i - 1 - (i % 3), i FROM generate_series(1, 100000) i WHERE i % 10 = 0;
INSERT INTO g SELECT i, i % 8, CASE WHEN i % 10 = 0 THEN ARRAY[i - 1 - (i % 3)]::bigint[] ELSE '{}' END
FROM generate_series(1, 100000) i;
ANALYZE e; ANALYZE g;
CREATE FUNCTION pg_temp.probe(p text) RETURNS double precision LANGUAGE plpgsql AS $f$
DECLARE t0 timestamptz := clock_timestamp(); ids bigint[]; b boolean;
BEGIN
  FOR k IN 1..2000 LOOP
    ids := ARRAY(SELECT (random() * 100000)::bigint FROM generate_series(1, 100));
    IF p = 'table' THEN SELECT EXISTS (SELECT 1 FROM e WHERE depends_on = ANY (ids)) INTO b;
    ELSIF p = 'gin' THEN SELECT EXISTS (SELECT 1 FROM g WHERE deps && ids) INTO b; END IF;
  END LOOP;
  RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / 2000;
END $f$;
SELECT 'ids only' AS variant, round(pg_temp.probe('none')::numeric, 1) AS us_per_probe
UNION ALL SELECT 'table, btree (10,000 rows)', round(pg_temp.probe('table')::numeric, 1)
UNION ALL SELECT 'array column, GIN, 8 partitions', round(pg_temp.probe('gin')::numeric, 1);
TRUNCATE e;
SELECT 'table, btree (empty)' AS variant, round(pg_temp.probe('table')::numeric, 1) AS us_per_probe;
