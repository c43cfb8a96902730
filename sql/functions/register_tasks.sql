-- register_tasks
-- contract: upserts task policies from a JSON array of objects with keys
-- name (required), queue, max_attempts, backoff_base, backoff_max,
-- backoff_jitter, timeout (seconds), labels (default labels of the task's
-- jobs) and tenant. Workers call it at start with the tasks they serve.
-- Returns the number of policies written (an unchanged one is not).
--
-- A policy belongs to a tenant or to all: a session confined to a tenant
-- (see _tenant_scope) writes that tenant's own policies only, which its
-- jobs take instead of the shared one; naming another tenant, or none, is
-- refused. The policy every tenant shares (tenant absent or null) is set
-- only by an unconfined session, which may also write one tenant's.
CREATE OR REPLACE FUNCTION pgsched.register_tasks(tasks jsonb)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_count integer;
    v_scope text := pgsched._tenant_scope();
    v_other text;
BEGIN
    IF pg_catalog.jsonb_typeof(register_tasks.tasks) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'pgsched: register_tasks expects a JSON array' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_scope = '' THEN
        PERFORM pgsched._check_tenant(NULL);  -- a login bound to nothing: refused, with the hint to bind it
    END IF;
    IF v_scope IS NOT NULL THEN
        SELECT coalesce(e->>'tenant', '(none: the policy every tenant shares)') INTO v_other
        FROM pg_catalog.jsonb_array_elements(register_tasks.tasks) e
        WHERE e ? 'tenant' AND (e->>'tenant') IS DISTINCT FROM v_scope
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'pgsched: this session is confined to tenant % and registers task policies for it only, not %',
                v_scope, v_other
                USING ERRCODE = 'insufficient_privilege',
                      HINT = 'Leave tenant out: the policy is this tenant''s. A shared policy needs a login not bound to a tenant.';
        END IF;
    END IF;
    INSERT INTO pgsched.tasks AS t
        (name, tenant, queue, max_attempts, backoff_base, backoff_max, backoff_jitter, updated_at, timeout, labels)
    SELECT e->>'name', coalesce(v_scope, e->>'tenant'), coalesce(e->>'queue', 'default'),
           (e->>'max_attempts')::integer,
           pg_catalog.make_interval(secs => (e->>'backoff_base')::double precision),
           pg_catalog.make_interval(secs => (e->>'backoff_max')::double precision),
           (e->>'backoff_jitter')::real, pg_catalog.now(),
           pg_catalog.make_interval(secs => (e->>'timeout')::double precision),
           CASE WHEN pg_catalog.jsonb_typeof(e->'labels') = 'array' AND e->'labels' <> '[]'
                THEN ARRAY(SELECT pg_catalog.jsonb_array_elements_text(e->'labels')) END
    FROM pg_catalog.jsonb_array_elements(register_tasks.tasks) e
    ON CONFLICT (name, tenant) DO UPDATE
    SET queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts, backoff_base = EXCLUDED.backoff_base,
        backoff_max = EXCLUDED.backoff_max, backoff_jitter = EXCLUDED.backoff_jitter, updated_at = EXCLUDED.updated_at,
        timeout = EXCLUDED.timeout, labels = EXCLUDED.labels
    WHERE (t.queue, t.max_attempts, t.backoff_base, t.backoff_max, t.backoff_jitter, t.timeout, t.labels)
          IS DISTINCT FROM (EXCLUDED.queue, EXCLUDED.max_attempts, EXCLUDED.backoff_base,
                            EXCLUDED.backoff_max, EXCLUDED.backoff_jitter, EXCLUDED.timeout, EXCLUDED.labels);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;
