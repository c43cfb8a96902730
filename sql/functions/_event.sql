-- _event
-- contract: appends one audit event when auditing is on.
CREATE OR REPLACE FUNCTION pgsched._event(
    p_job_id  bigint,
    p_at      timestamptz,
    p_kind    text,
    p_attempt integer,
    p_worker  text,
    p_token   bigint,
    p_detail  jsonb DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF (SELECT c.audit FROM pgsched.config c) THEN
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        VALUES (p_job_id, p_at, p_kind, p_attempt, p_worker, p_token, p_detail);
    END IF;
END
$$;
