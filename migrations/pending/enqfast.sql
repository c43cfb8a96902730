-- enqfast: enqueue() and enqueue_many() stamp the dispatch_* columns in
-- their INSERT; tg_jobs__dispatch (30_triggers.sql, applied whole, which
-- also creates tg_jobs__redispatch for updates) fires for an insert only
-- when the writer is not the owner or dispatch_at is NULL, so the columns
-- lose their defaults (a row nobody stamped arrives with dispatch_at NULL).
ALTER TABLE pgsched.jobs
    ALTER COLUMN dispatch_group DROP DEFAULT,
    ALTER COLUMN dispatch_rank DROP DEFAULT,
    ALTER COLUMN dispatch_at DROP DEFAULT;
