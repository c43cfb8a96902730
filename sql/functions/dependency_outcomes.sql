-- dependency_outcomes
-- contract: for an active job (job_id) enqueued with depends_on, one row per
-- dependency, in id order: its id, where it is now (its active state, else
-- its latest outcome: completed, dead or cancelled) and that outcome's result
-- or error. What a batch callback (on_dependency_failure => 'run') reads as
-- ctx.dependencies. No rows for a job without dependencies, or one this
-- session cannot see; a dependency of another tenant than the session's is
-- left out (a session confined to a tenant sees only its own jobs).
CREATE OR REPLACE FUNCTION pgsched.dependency_outcomes(job_id bigint)
RETURNS TABLE (id bigint, state text, result jsonb, error text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT d.id, coalesce(a.state::text, h.state::text), h.result, coalesce(h.error, a.last_error)
    FROM pgsched.jobs j
    CROSS JOIN LATERAL (SELECT DISTINCT u.id FROM unnest(j.depends_on) AS u(id)) d
    LEFT JOIN LATERAL (SELECT x.state, x.last_error, x.tenant FROM pgsched.jobs x
                       WHERE x.id OPERATOR(pg_catalog.=) d.id LIMIT 1) a ON true
    LEFT JOIN LATERAL (SELECT y.state, y.result, y.error, y.tenant FROM pgsched.job_history y
                       WHERE a.state IS NULL AND y.id OPERATOR(pg_catalog.=) d.id
                       ORDER BY y.finished_at DESC LIMIT 1) h ON true
    WHERE j.id OPERATOR(pg_catalog.=) dependency_outcomes.job_id
      AND pgsched._tenant_visible(j.tenant)
      AND pgsched._tenant_visible(coalesce(a.tenant, h.tenant))
      AND (a.state IS NOT NULL OR h.state IS NOT NULL)
    ORDER BY d.id
$$;
