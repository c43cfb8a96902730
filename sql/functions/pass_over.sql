-- pass_over
-- contract: a worker hands back running jobs of tasks it does not know (two
-- applications sharing a queue, a worker serving '*'), each under its
-- fencing token, for a worker that knows the task: the attempt is given
-- back (max_attempts grows by one, as snooze), the job is due again shortly,
-- and no dependent is touched. Returns one row per job, in id order: its new
-- state ('scheduled'), 'dead', 'cancelled' (its cancel had been requested)
-- or 'lease_lost'.
--
-- A job is unserved while no live worker (seen within the last minute, as
-- workers_live) of its queue has registered its task (pgsched.workers.tasks;
-- a worker that reports none may know any task). unserved_since records
-- when a pass-over first found it so, and is cleared when one finds a worker
-- that knows it, or when a run starts. Only a job unserved for
-- pgsched.config.unserved_task_timeout goes dead ('unknown task ...'); until
-- then it comes back at most every 30 seconds to be asked again, and a job
-- some live worker knows comes back after a second, for that worker.
CREATE OR REPLACE FUNCTION pgsched.pass_over(
    job_ids bigint[],
    tokens  bigint[],
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_scope text := pgsched._caller_scope();
    v_timeout interval;
    v_pair record;
    v_job pgsched.jobs;
    v_error text;
BEGIN
    SELECT c.unserved_task_timeout INTO v_timeout FROM pgsched.config c;
    FOR v_pair IN SELECT u.id, u.token FROM unnest(pass_over.job_ids, pass_over.tokens) AS u(id, token)
                  WHERE u.id IS NOT NULL ORDER BY u.id LOOP
        UPDATE pgsched.jobs j
        SET unserved_since = CASE
            WHEN EXISTS (SELECT 1 FROM pgsched.workers w
                         WHERE w.last_seen > v_now - interval '1 minute'
                           AND w.name IS DISTINCT FROM j.leased_by
                           AND (j.queue = ANY (w.queues) OR '*' = ANY (w.queues))
                           AND (w.tasks IS NULL OR j.task = ANY (w.tasks)))
            THEN NULL ELSE coalesce(j.unserved_since, v_now) END
        WHERE j.id = v_pair.id AND j.lease_token = v_pair.token AND j.state = 'running'
          AND (v_scope IS NULL OR j.tenant = v_scope)
        RETURNING j.* INTO v_job;
        IF NOT FOUND THEN
            job_id := v_pair.id;
            outcome := 'lease_lost';
        ELSIF v_job.unserved_since IS NOT NULL AND v_now - v_job.unserved_since >= v_timeout
              AND v_job.cancel_requested_at IS NULL THEN
            DELETE FROM pgsched.jobs j
            WHERE j.id = v_pair.id AND j.lease_token = v_pair.token AND j.state = 'running'
            RETURNING j.* INTO v_job;
            v_error := pg_catalog.format('unknown task %L: no live worker has registered it for %s',
                                         v_job.task, v_timeout);
            PERFORM pgsched._finish(v_job, 'dead', v_now, v_error, NULL,
                pg_catalog.jsonb_build_object('error', v_error, 'reason', 'unserved'));
            job_id := v_pair.id;
            outcome := 'dead';
        ELSE
            job_id := v_pair.id;
            outcome := pgsched._put_back(v_pair.id, v_pair.token,
                v_now + CASE WHEN v_job.unserved_since IS NULL THEN interval '1 second'
                             ELSE least(v_timeout - (v_now - v_job.unserved_since), interval '30 seconds') END,
                'passed_over', v_now);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
