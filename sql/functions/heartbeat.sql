-- heartbeat
-- contract: extends the lease of each (job_id, token) pair that still holds
-- its lease, in one statement for all of a worker's running jobs. Returns one
-- row per input job: whether the lease is still held (false: the job was
-- expired, taken over or finished elsewhere, and its result must be
-- discarded) and whether cancellation was requested. Rows another statement
-- has locked right now (the worker's own completion of that job, a cancel)
-- are skipped rather than waited for, so heartbeats never deadlock with
-- completions; such a job still counts as held when its token is current in
-- this statement's snapshot, and the next heartbeat extends it.
-- A lease that has run out is not held, whether or not expire_leases has
-- handed the job back yet: from that moment claim() counts its slot free
-- (a queue's concurrency limit), so extending it would let two leases
-- stand where one was allowed.
CREATE OR REPLACE FUNCTION pgsched.heartbeat(
    job_ids bigint[],
    tokens  bigint[],
    lease   interval,
    worker  text        DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, held boolean, cancel_requested boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- The jobs are found by their ids (an array: one primary key probe each),
-- never by reading a partition whole, whatever the statistics say: while
-- something pins the xmin horizon a partition holds hundreds of thousands
-- of dead row versions that an ANALYZE does not count, and such a plan
-- took a second a call.
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    -- The lease is checked against the clock when the statement runs, as claim() reads it.
    v_live timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_scope text := pgsched._caller_scope();
BEGIN
    IF heartbeat.worker IS NOT NULL THEN
        UPDATE pgsched.workers w
        SET last_seen = v_now, running = coalesce(pg_catalog.cardinality(heartbeat.job_ids), 0)
        WHERE w.name = heartbeat.worker;
    END IF;

    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token FROM unnest(heartbeat.job_ids, heartbeat.tokens) AS u(id, token)
    ), current AS MATERIALIZED (
        -- A current token is a running job's (jobs_state_valid), so no filter
        -- on state: with one, the planner may scan the running rows' partial
        -- indexes, dead entries and all, instead of probing the primary key.
        SELECT j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
        FROM pgsched.jobs j
        JOIN input u ON j.id = u.id AND j.lease_token = u.token
        WHERE j.id = ANY (heartbeat.job_ids)
          AND j.lease_expires_at > v_live AND (v_scope IS NULL OR j.tenant = v_scope)
    ), locked AS MATERIALIZED (
        SELECT j.id
        FROM pgsched.jobs j
        JOIN input u ON j.id = u.id AND j.lease_token = u.token
        WHERE j.id = ANY (heartbeat.job_ids)
          AND j.lease_expires_at > v_live AND (v_scope IS NULL OR j.tenant = v_scope)
        FOR UPDATE OF j SKIP LOCKED
    ), extended AS (
        -- The locked rows, by their ids alone (ids are unique), in one probe of each partition: no join
        -- that pairs each row with its shard, which made PostgreSQL 18 prune the partitions again for
        -- every row, a path that crashed a backend (perform_pruning_base_step, 18.4).
        UPDATE pgsched.jobs j
        SET lease_expires_at = v_now + heartbeat.lease
        WHERE j.id = ANY (ARRAY(SELECT k.id FROM locked k))
        RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
    )
    SELECT u.id, e.id IS NOT NULL OR c.id IS NOT NULL, coalesce(e.cancel_requested, c.cancel_requested, false)
    FROM input u
    LEFT JOIN extended e ON e.id = u.id
    LEFT JOIN current c ON c.id = u.id;
END
$$;
