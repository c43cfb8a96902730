-- start
-- contract: records that the handlers of these claimed jobs start now, in
-- one statement for a batch of starts, fenced by each job's token: only a
-- job whose lease is current and whose cancellation was not requested gets
-- its started_at (the database's clock, read when the statement runs). Returns
-- one row per input job: 'started' (run the handler), 'cancel_requested'
-- (do not start it: cancel it, e.g. fail() records it 'cancelled') or
-- 'lease_lost' (another run may own it, or its lease ran out: do not start
-- it; claim() already counts a run-out lease's slot free). A job claimed but
-- not started has started_at NULL, so views tell "waiting for a slot" from
-- "running", and start lag (started_at - run_at) counts the wait for a slot.
-- A started job carries its deadline: deadline_at = started_at + its timeout
-- (the job's, else its task's in pgsched.tasks, its tenant's own first), returned as `timeout` so the
-- worker enforces it too; expire_leases fails a run past it (_fail_overdue).
--
-- Cancel-requested rows are rewritten unchanged rather than filtered out:
-- when a cancel() commits while this statement waits for the row, the
-- re-checked row version decides, so a cancel never loses to a start that
-- began a moment before it.
CREATE OR REPLACE FUNCTION pgsched.start(
    job_ids bigint[],
    tokens  bigint[],
    shards  smallint[]  DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, outcome text, timeout interval)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- Primary-key probes whatever the statistics say (see complete()).
SET enable_seqscan = off
-- One generic plan for every call, whatever the batch's size (see complete()).
SET plan_cache_mode = force_generic_plan
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_shard smallint;
    v_ids bigint[];
    v_tokens bigint[];
BEGIN
    -- One statement per shard of the batch, in that shard's partition only,
    -- as in complete(); a job given without its shard gets it by id.
    FOR v_shard, v_ids, v_tokens IN
        SELECT s.shard, pg_catalog.array_agg(s.id), pg_catalog.array_agg(s.token)
        FROM (
            SELECT u.id, u.token,
                   coalesce(u.shard, (SELECT f.shard FROM pgsched.jobs f WHERE f.id = u.id LIMIT 1)) AS shard
            FROM unnest(start.job_ids, start.tokens, start.shards) AS u(id, token, shard)
            WHERE u.id IS NOT NULL
        ) s
        GROUP BY s.shard
        ORDER BY s.shard
    LOOP
        RETURN QUERY
        WITH input AS (
            SELECT u.id, u.token FROM unnest(v_ids, v_tokens) AS u(id, token)
        ), stamped AS (
            UPDATE pgsched.jobs j
            SET started_at = CASE WHEN j.cancel_requested_at IS NULL THEN v_now ELSE j.started_at END,
                unserved_since = NULL,  -- a worker that knows its task runs it
                deadline_at = CASE WHEN j.cancel_requested_at IS NULL
                    THEN v_now + coalesce(j.timeout, (SELECT t.timeout FROM pgsched.tasks t
                                                      WHERE t.name = j.task AND (t.tenant IS NULL OR t.tenant = j.tenant)
                                                      ORDER BY t.tenant NULLS LAST LIMIT 1))
                    ELSE j.deadline_at END
            -- the ids are the index condition (one probe each); a current
            -- token is a running job's (jobs_state_valid), so no filter on
            -- state, and no partial index of running rows to scan. Each id
            -- with its own token, looked up in one hash of the batch: a join
            -- here would be planned for the ten rows a generic plan guesses,
            -- and pass over the batch once per job
            WHERE j.shard = v_shard AND j.id = ANY (v_ids)
              AND ((j.id, j.lease_token) IN (SELECT u.id, u.token FROM input u)) IS TRUE
              AND j.lease_expires_at > v_now
            RETURNING j.id, j.cancel_requested_at IS NULL AS go, j.deadline_at - j.started_at AS timeout
        )
        SELECT u.id, CASE WHEN s.go THEN 'started' WHEN NOT s.go THEN 'cancel_requested' ELSE 'lease_lost' END,
               CASE WHEN s.go THEN s.timeout END
        FROM input u
        LEFT JOIN stamped s ON s.id = u.id;
    END LOOP;
END
$$;
