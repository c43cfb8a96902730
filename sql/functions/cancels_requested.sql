-- cancels_requested
-- contract: of these (job_id, token) pairs, the jobs whose lease is current
-- and whose cancellation was requested. Reads only: workers without LISTEN
-- (behind a transaction-pooling PgBouncer, or --no-listen) call it every
-- fraction of a second, between heartbeats, so a running handler learns of a
-- cancel promptly without extending every lease that often.
CREATE OR REPLACE FUNCTION pgsched.cancels_requested(
    job_ids bigint[],
    tokens  bigint[]
)
RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- The ids as an index condition, never a scan of the running rows or of a
-- partition (see heartbeat()). A current token is a running job's
-- (jobs_state_valid), so no filter on state: with one, the plan may read the
-- running rows' partial index whole.
SET enable_seqscan = off
AS $$
    SELECT j.id
    FROM pgsched.jobs j
    JOIN unnest(cancels_requested.job_ids, cancels_requested.tokens) AS u(id, token)
      ON j.id = u.id AND j.lease_token = u.token
    WHERE j.id = ANY (cancels_requested.job_ids) AND j.cancel_requested_at IS NOT NULL
$$;
