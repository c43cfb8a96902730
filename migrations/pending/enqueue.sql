-- enqueue: batches all or nothing, clear errors (issue 9, points 5 and 7).

-- Idempotency keys are limited to 1000 bytes (was 512 characters, up to 2048
-- bytes), well under the btree limit of the key's index. A stored key longer
-- than 1000 bytes (possible only with multi-byte characters) makes this
-- statement fail, and the upgrade with it, changing nothing.
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_idempotency_key_length;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_idempotency_key_length
    CHECK (pg_catalog.octet_length(idempotency_key) BETWEEN 1 AND 1000);

-- The same names as before, checked with unbounded patterns and a length:
-- a bounded repetition ({0,199}) costs the regex engine some 50 us a row.
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_task_valid;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_task_valid
    CHECK (task ~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' AND pg_catalog.length(task) <= 200);
ALTER TABLE pgsched.jobs DROP CONSTRAINT jobs_queue_valid;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_queue_valid
    CHECK (queue ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]*$' AND pg_catalog.length(queue) <= 63);

-- enqueue_many() gained a last parameter, labels jsonb[]: the revision's copy
-- of enqueue_many.sql created it beside the old one, which goes now.
DROP FUNCTION pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[]);
REVOKE EXECUTE ON FUNCTION
    pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[], jsonb[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    pgsched.enqueue_many(text[], jsonb[], text[], timestamptz[], integer[], text[], integer[], text[], jsonb[])
    TO pgsched_enqueue;

-- New private helpers: nobody but the functions calls them (as at install).
REVOKE EXECUTE ON FUNCTION
    pgsched._shown(text),
    pgsched._job_problem(text, text, jsonb, integer, timestamptz, integer, text, text[], text),
    pgsched._check_job(text, text, jsonb, integer, timestamptz, integer, text, text[], text, bigint),
    pgsched._key_holder(text, text, jsonb, bigint)
    FROM PUBLIC;
