-- integrations: the enqueuer's trace context stored with each job (docs/otel.md).
-- Changed function files: enqueue.sql, enqueue_many.sql (a new defaulted
-- parameter trace_context jsonb: a new identity), claim.sql (its result gains
-- trace_context, which CREATE OR REPLACE cannot change).

-- Part 1: BEFORE the changed function files.
DROP FUNCTION pgsched.claim(text, text[], integer, interval, text[], integer, timestamptz);
-- enqueue as revision 0010 has it, and as the timeouts branch leaves it (its own
-- pending file drops the first when both land in one revision):
DROP FUNCTION IF EXISTS pgsched.enqueue(text, jsonb, text, timestamptz, integer, text, integer, text[], text);
DROP FUNCTION IF EXISTS pgsched.enqueue(text, jsonb, text, timestamptz, integer, text, integer, text[], text, interval);
DROP FUNCTION pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[], jsonb[]);
ALTER TABLE pgsched.jobs ADD COLUMN trace_context jsonb;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_trace_context_valid CHECK (
    pg_catalog.jsonb_typeof(trace_context) = 'object' AND pg_catalog.octet_length(trace_context::text) <= 8192);
COMMENT ON COLUMN pgsched.jobs.trace_context IS
    'Trace propagation headers current at enqueue (a JSON object of strings, e.g. traceparent); the run continues that trace.';

-- Part 2: AFTER the changed function files (the functions are new objects: grant them again).
REVOKE EXECUTE ON FUNCTION pgsched.claim, pgsched.enqueue, pgsched.enqueue_many FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.enqueue, pgsched.enqueue_many TO pgsched_enqueue;
GRANT EXECUTE ON FUNCTION pgsched.claim TO pgsched_worker;
GRANT INSERT (trace_context) ON pgsched.jobs TO pgsched_enqueue;
