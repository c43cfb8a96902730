-- appdev: status events (NOTIFY pgsched_events) and the gap-free event stream.

-- == Tables and indexes (00_schema.sql, 10_tables.sql, 20_indexes.sql): before the functions. ==

-- pgsched.config.events turns the NOTIFY of terminal transitions on or off.
ALTER TABLE pgsched.config ADD COLUMN events boolean NOT NULL DEFAULT true;

-- The position of the event stream. Rows filed before the upgrade keep NULL
-- (the stream starts at the upgrade); adding the default afterwards rewrites
-- nothing.
ALTER TABLE pgsched.job_history ADD COLUMN finished_xid xid8;
ALTER TABLE pgsched.job_history ALTER COLUMN finished_xid SET DEFAULT pg_catalog.pg_current_xact_id();
CREATE INDEX job_history_finished_xid_idx ON pgsched.job_history (finished_xid);

-- == Grants (90_grants.sql): after the functions (read_events must exist). ==

REVOKE EXECUTE ON FUNCTION pgsched.read_events FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.read_events TO pgsched_enqueue, pgsched_worker;
