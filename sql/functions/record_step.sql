-- record_step
-- contract: records the JSON result of a finished durable step (ctx.step) of
-- a running job, fenced by its lease token like complete(): only the run
-- that holds the current lease can record a step, so a stale worker's result
-- is refused ('lease_lost') and whatever it did is done again by the run that
-- owns the job. A step already recorded under that name keeps its first
-- result ('exists'; the new one is dropped). Otherwise the step is appended
-- to jobs.steps as {name, result, at, attempt, token, worker} ('recorded'), in the
-- caller's own short transaction; when the job runs again (a retry, an
-- expired lease, a hand-back) the handler gets the recorded result instead
-- of running the step. The steps go to job_history with the job and are
-- dropped with it (history_retention). Refused with invalid_parameter_value,
-- writing nothing: a name that is empty or over 200 characters, a NULL
-- result (JSON null is fine); with program_limit_exceeded: a result larger
-- than config.max_payload_bytes, or a 1001st step.
CREATE OR REPLACE FUNCTION pgsched.record_step(
    job_id bigint,
    token  bigint,
    name   text,
    result jsonb,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_scope text := pgsched._caller_scope();
    v_limit integer;
    v_steps jsonb;
BEGIN
    IF record_step.name IS NULL OR pg_catalog.length(record_step.name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'pgsched: a step name must have 1 to 200 characters, not %', pgsched._shown(record_step.name)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'name';
    END IF;
    IF record_step.result IS NULL THEN
        RAISE EXCEPTION 'pgsched: step % has no result (JSON null is one: ''null''::jsonb)',
                pgsched._shown(record_step.name)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'result';
    END IF;
    SELECT c.max_payload_bytes INTO v_limit FROM pgsched.config c;
    IF pg_catalog.octet_length(record_step.result::text) > v_limit THEN
        RAISE EXCEPTION 'pgsched: the result of step % is % bytes: at most % (config.max_payload_bytes)',
                pgsched._shown(record_step.name), pg_catalog.octet_length(record_step.result::text), v_limit
            USING ERRCODE = 'program_limit_exceeded', COLUMN = 'result';
    END IF;

    -- One statement checks the token and writes; the row lock orders it with
    -- complete(), fail() and the next claim, and the check is made on the row
    -- version that lock returns.
    UPDATE pgsched.jobs j
    SET steps = coalesce(j.steps, '[]') || pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
            'name', record_step.name, 'result', record_step.result, 'at', v_now,
            'attempt', j.attempt, 'token', j.lease_token, 'worker', j.leased_by))
    WHERE j.id = record_step.job_id AND j.lease_token = record_step.token AND j.state = 'running'
      AND (v_scope IS NULL OR j.tenant = v_scope)
      AND NOT coalesce(j.steps, '[]') @> pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('name', record_step.name))
      AND pg_catalog.jsonb_array_length(coalesce(j.steps, '[]')) < 1000;
    IF FOUND THEN
        RETURN 'recorded';
    END IF;
    -- Nothing written: say why (reads only).
    SELECT j.steps INTO v_steps
    FROM pgsched.jobs j
    WHERE j.id = record_step.job_id AND j.lease_token = record_step.token AND j.state = 'running'
      AND (v_scope IS NULL OR j.tenant = v_scope);
    IF NOT FOUND THEN
        RETURN 'lease_lost';
    ELSIF v_steps @> pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object('name', record_step.name)) THEN
        RETURN 'exists';
    END IF;
    RAISE EXCEPTION 'pgsched: job % has 1000 steps already: at most 1000', record_step.job_id
        USING ERRCODE = 'program_limit_exceeded', COLUMN = 'steps';
END
$$;
