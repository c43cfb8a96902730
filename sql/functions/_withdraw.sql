-- _withdraw
-- contract: removes the occurrences of p_schedule that have not started
-- (waiting to be due or queued for a worker, never attempted) and are due at
-- or after p_from: their jobs leave pgsched.jobs (never run, not
-- filed as history), their idempotency keys are released so a re-expansion
-- can create the same instants again, and their occurrence rows say
-- 'withdrawn' with p_reason. Occurrences from p_from on that the DST
-- policies decided not to fire (no job) are withdrawn too, so the next
-- expansion decides them afresh. Returns how many jobs were withdrawn.
CREATE OR REPLACE FUNCTION pgsched._withdraw(
    p_schedule text,
    p_from     timestamptz,
    p_now      timestamptz,
    p_reason   text
)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    WITH gone AS (
        DELETE FROM pgsched.jobs j
        WHERE j.schedule = p_schedule AND j.state IN ('scheduled', 'available') AND j.attempt = 0
          AND j.run_at >= p_from
        RETURNING j.id, j.idempotency_key, j.run_at
    ), keys AS (
        DELETE FROM pgsched.idempotency_keys k
        USING gone g
        WHERE k.key = g.idempotency_key AND k.job_id = g.id
    ), marked AS (
        UPDATE pgsched.schedule_occurrences o
        SET decision = 'withdrawn', reason = p_reason, decided_at = p_now
        FROM gone g
        WHERE o.schedule = p_schedule AND o.job_id = g.id
    ), reopened AS (
        UPDATE pgsched.schedule_occurrences o
        SET decision = 'withdrawn', reason = p_reason, decided_at = p_now
        WHERE o.schedule = p_schedule AND o.fire_at >= p_from AND o.job_id IS NULL
          AND o.decision IN ('skipped_gap', 'skipped_dst_overlap')
    )
    SELECT pg_catalog.count(*) INTO v_count FROM gone;
    RETURN v_count;
END
$$;
