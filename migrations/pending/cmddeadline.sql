-- Command jobs carry a database deadline: their timeout column is the command's timeout plus this margin.
ALTER TABLE pgsched.config
    ADD COLUMN command_timeout_margin interval NOT NULL DEFAULT '30 seconds',
    ADD CONSTRAINT config_command_timeout_margin_range CHECK (
        command_timeout_margin BETWEEN interval '2 seconds' AND interval '1 day');
-- Command jobs enqueued before the upgrade get it for their next runs (a run started already keeps none).
UPDATE pgsched.jobs j
SET timeout = pg_catalog.make_interval(secs => (j.args ->> 'timeout_s')::double precision)
              + (SELECT c.command_timeout_margin FROM pgsched.config c)
WHERE j.task = 'pgsched.command' AND j.timeout IS NULL
  AND pg_catalog.jsonb_typeof(j.args -> 'timeout_s') = 'number' AND (j.args ->> 'timeout_s')::double precision > 0;
