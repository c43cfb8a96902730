-- report_progress
-- contract: records how far the handlers of these running jobs are
-- (ctx.progress: a fraction from 0 to 1 and an optional note), in one
-- statement for all of a worker's reports, fenced by each job's lease token
-- like heartbeat(): only a job still running under that token is written, so
-- a stale worker cannot move a job another worker now runs. Returns one row
-- per input job: whether the report was kept. The job's row keeps the last
-- report (progress, progress_note, progress_at: the database's clock) and
-- its history row takes it along when the job ends. Workers send at most one
-- such statement a second (docs/steps.md, "Progress"), whatever the
-- handlers' rate. A fraction outside 0..1 (or NaN), a note over 1000
-- characters, or arrays of different lengths are refused with
-- invalid_parameter_value and nothing is written. Rows another statement has
-- locked right now (a completion, a heartbeat) are skipped, as in heartbeat():
-- the next report carries the newer value anyway.
CREATE OR REPLACE FUNCTION pgsched.report_progress(
    job_ids   bigint[],
    tokens    bigint[],
    fractions real[],
    notes     text[]      DEFAULT NULL,
    p_now     timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, kept boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
SET enable_seqscan = off  -- (see heartbeat())
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_scope text := pgsched._caller_scope();
    v_n integer := coalesce(pg_catalog.cardinality(report_progress.job_ids), 0);
BEGIN
    IF coalesce(pg_catalog.cardinality(report_progress.tokens), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(report_progress.fractions), 0) <> v_n
       OR (report_progress.notes IS NOT NULL AND pg_catalog.cardinality(report_progress.notes) <> v_n) THEN
        RAISE EXCEPTION 'pgsched: job_ids, tokens, fractions and notes must have the same length'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(report_progress.fractions) f
               WHERE f IS NULL OR f OPERATOR(pg_catalog.<) 0 OR f OPERATOR(pg_catalog.>) 1
                  OR f OPERATOR(pg_catalog.=) 'NaN'::real) THEN
        RAISE EXCEPTION 'pgsched: a progress fraction must be from 0 to 1'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'progress';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(report_progress.notes) n WHERE pg_catalog.length(n) > 1000) THEN
        RAISE EXCEPTION 'pgsched: a progress note must be at most 1000 characters'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'progress_note';
    END IF;

    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token, u.fraction, u.note
        FROM unnest(report_progress.job_ids, report_progress.tokens, report_progress.fractions,
                    coalesce(report_progress.notes, pg_catalog.array_fill(NULL::text, ARRAY[v_n])))
             AS u(id, token, fraction, note)
    ), locked AS MATERIALIZED (
        SELECT j.id, u.fraction, u.note
        FROM pgsched.jobs j
        JOIN input u ON j.id = u.id AND j.lease_token = u.token
        -- The ids as an index condition (see heartbeat()). A current token
        -- is a running job's (jobs_state_valid), so no filter on state: with
        -- one, the plan may read the running rows' partial index whole.
        WHERE j.id = ANY (report_progress.job_ids) AND (v_scope IS NULL OR j.tenant = v_scope)
        FOR UPDATE OF j SKIP LOCKED
    ), reported AS (
        -- each locked job's report, by id, read once per row below
        SELECT pg_catalog.jsonb_object_agg(l.id::text, pg_catalog.jsonb_build_array(l.fraction, l.note)) AS by_id
        FROM locked l
    ), written AS (
        -- The locked rows by their ids alone, as heartbeat() finds them (no per-row shard join).
        UPDATE pgsched.jobs j
        SET progress = ((SELECT r.by_id FROM reported r) -> (j.id::text) ->> 0)::real,
            progress_note = (SELECT r.by_id FROM reported r) -> (j.id::text) ->> 1,
            progress_at = v_now
        WHERE j.id = ANY (ARRAY(SELECT k.id FROM locked k))
        RETURNING j.id
    )
    SELECT u.id, w.id IS NOT NULL
    FROM input u
    LEFT JOIN written w ON w.id = u.id;
END
$$;
