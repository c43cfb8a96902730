-- register_tasks
-- contract: upserts task policies from a JSON array of objects with keys
-- name (required), queue, max_attempts, backoff_base, backoff_max,
-- backoff_jitter, timeout (seconds), labels (default labels of the task's jobs). Workers call it at start with the
-- tasks they
-- serve. Returns the number of tasks registered. A session confined to a
-- tenant adds new tasks only: it never changes a policy every tenant shares.
CREATE OR REPLACE FUNCTION pgsched.register_tasks(tasks jsonb)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_count integer;
BEGIN
    IF pg_catalog.jsonb_typeof(register_tasks.tasks) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'pgsched: register_tasks expects a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgsched.tasks AS t
        (name, queue, max_attempts, backoff_base, backoff_max, backoff_jitter, updated_at, timeout, labels)
    SELECT e->>'name', coalesce(e->>'queue', 'default'), (e->>'max_attempts')::integer,
           pg_catalog.make_interval(secs => (e->>'backoff_base')::double precision),
           pg_catalog.make_interval(secs => (e->>'backoff_max')::double precision),
           (e->>'backoff_jitter')::real, pg_catalog.now(),
           pg_catalog.make_interval(secs => (e->>'timeout')::double precision),
           CASE WHEN pg_catalog.jsonb_typeof(e->'labels') = 'array' AND e->'labels' <> '[]'
                THEN ARRAY(SELECT pg_catalog.jsonb_array_elements_text(e->'labels')) END
    FROM pg_catalog.jsonb_array_elements(register_tasks.tasks) e
    ON CONFLICT (name) DO UPDATE
    SET queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts, backoff_base = EXCLUDED.backoff_base,
        backoff_max = EXCLUDED.backoff_max, backoff_jitter = EXCLUDED.backoff_jitter, updated_at = EXCLUDED.updated_at,
        timeout = EXCLUDED.timeout, labels = EXCLUDED.labels
    -- A session confined to a tenant adds tasks but never changes the policy
    -- of a task every tenant shares.
    WHERE pgsched._tenant_scope() IS NULL
      AND (t.queue, t.max_attempts, t.backoff_base, t.backoff_max, t.backoff_jitter, t.timeout, t.labels)
          IS DISTINCT FROM (EXCLUDED.queue, EXCLUDED.max_attempts, EXCLUDED.backoff_base,
                            EXCLUDED.backoff_max, EXCLUDED.backoff_jitter, EXCLUDED.timeout, EXCLUDED.labels);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
