-- sec-sql: security at the boundary (issue 8). Hand-written table, grant and
-- policy changes; apply AFTER the changed function files and 30_triggers.sql
-- (CREATE OR REPLACE TRIGGER, so it can be copied whole).

-- Tenant bindings.
CREATE TABLE pgsched.tenant_roles (
    role     regrole     PRIMARY KEY,
    tenant   text        NOT NULL,
    bound_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT tenant_roles_tenant_length CHECK (pg_catalog.length(tenant) BETWEEN 1 AND 200)
);
COMMENT ON TABLE pgsched.tenant_roles IS
    'Login roles confined to one tenant (bind_tenant / unbind_tenant); decided from session_user, so SET ROLE changes nothing.';

-- Idempotency keys per tenant (no tenant is its own space).
ALTER TABLE pgsched.idempotency_keys ADD COLUMN tenant text;
UPDATE pgsched.idempotency_keys k SET tenant = j.tenant FROM pgsched.jobs j WHERE j.id = k.job_id;
UPDATE pgsched.idempotency_keys k SET tenant = h.tenant
FROM pgsched.job_history h WHERE h.id = k.job_id AND k.tenant IS NULL AND h.tenant IS NOT NULL;
ALTER TABLE pgsched.idempotency_keys ALTER COLUMN key SET NOT NULL;
ALTER TABLE pgsched.idempotency_keys DROP CONSTRAINT idempotency_keys_pkey;
ALTER TABLE pgsched.idempotency_keys
    ADD CONSTRAINT idempotency_keys_key_tenant UNIQUE NULLS NOT DISTINCT (key, tenant);

-- Bounded attempts (clamp rows written before the bound).
UPDATE pgsched.jobs SET max_attempts = 1000000 WHERE max_attempts > 1000000;
ALTER TABLE pgsched.jobs ADD CONSTRAINT jobs_max_attempts_range CHECK (max_attempts <= 1000000);
UPDATE pgsched.tasks SET max_attempts = 1000000 WHERE max_attempts > 1000000;
ALTER TABLE pgsched.tasks ADD CONSTRAINT tasks_max_attempts_range CHECK (max_attempts <= 1000000);
UPDATE pgsched.schedules SET max_attempts = 1000000 WHERE max_attempts > 1000000;
ALTER TABLE pgsched.schedules ADD CONSTRAINT schedules_max_attempts_range CHECK (max_attempts <= 1000000);

-- Every setting validated; the shard count fixed (tg_config__before_update).
UPDATE pgsched.config SET default_max_attempts = least(default_max_attempts, 1000000),
    max_payload_bytes = least(max_payload_bytes, 268435456), backoff_max = least(backoff_max, interval '365 days');
ALTER TABLE pgsched.config
    ADD CONSTRAINT config_max_payload_range CHECK (max_payload_bytes <= 268435456),
    ADD CONSTRAINT config_default_max_attempts_range CHECK (default_max_attempts <= 1000000),
    ADD CONSTRAINT config_backoff_max_range CHECK (backoff_max <= interval '365 days'),
    ADD CONSTRAINT config_retention_range CHECK (
        history_retention BETWEEN interval '0' AND interval '100 years'
        AND events_retention BETWEEN interval '0' AND interval '100 years'
        AND idempotency_retention BETWEEN interval '0' AND interval '100 years');
COMMENT ON TABLE pgsched.config IS 'Install-wide settings (one row). shards is fixed at install (tg_config__before_update refuses a change).';

-- Grants. New functions are executable by PUBLIC until revoked.
REVOKE EXECUTE ON FUNCTION pgsched._clock(timestamptz), pgsched._tenant_scope(), pgsched._check_unconfined(text),
    pgsched._check_schedule_write(text, text, text), pgsched.bind_tenant(regrole, text),
    pgsched.unbind_tenant(regrole), pgsched.tg_config__before_update() FROM PUBLIC;
REVOKE ALL ON pgsched.tenant_roles FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched._tenant_scope() TO pgsched_enqueue, pgsched_worker, pgsched_admin;
GRANT EXECUTE ON FUNCTION pgsched.upsert_schedule TO pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.bind_tenant, pgsched.unbind_tenant TO pgsched_admin;
GRANT SELECT ON pgsched.tenant_roles TO pgsched_admin;
GRANT EXECUTE ON FUNCTION pgsched._valid_timezone(text) TO pgsched_admin;
REVOKE INSERT ON pgsched.jobs FROM pgsched_enqueue;
GRANT INSERT (queue, task, args, run_at, priority, idempotency_key, max_attempts, labels, tenant)
    ON pgsched.jobs TO pgsched_enqueue;

-- Row-level security: the scope from the login, once per statement.
DROP POLICY jobs_tenant ON pgsched.jobs;
CREATE POLICY jobs_tenant ON pgsched.jobs
    USING ((SELECT pgsched._tenant_scope()) IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()))
    WITH CHECK ((SELECT pgsched._tenant_scope()) IS NULL
                OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()));
DROP POLICY job_history_tenant ON pgsched.job_history;
CREATE POLICY job_history_tenant ON pgsched.job_history
    USING ((SELECT pgsched._tenant_scope()) IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()));
DROP POLICY job_events_unscoped ON pgsched.job_events;
CREATE POLICY job_events_unscoped ON pgsched.job_events
    USING ((SELECT pgsched._tenant_scope()) IS NULL);
ALTER TABLE pgsched.idempotency_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY idempotency_keys_tenant ON pgsched.idempotency_keys
    USING ((SELECT pgsched._tenant_scope()) IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()));
ALTER TABLE pgsched.schedules ENABLE ROW LEVEL SECURITY;
CREATE POLICY schedules_tenant ON pgsched.schedules
    USING ((SELECT pgsched._tenant_scope()) IS NULL
           OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()))
    WITH CHECK ((SELECT pgsched._tenant_scope()) IS NULL
                OR tenant OPERATOR(pg_catalog.=) (SELECT pgsched._tenant_scope()));
ALTER TABLE pgsched.schedule_occurrences ENABLE ROW LEVEL SECURITY;
CREATE POLICY schedule_occurrences_unscoped ON pgsched.schedule_occurrences
    USING ((SELECT pgsched._tenant_scope()) IS NULL);
DO $$
DECLARE
    v_table text;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['config', 'tasks', 'queues'] LOOP
        EXECUTE pg_catalog.format('ALTER TABLE pgsched.%I ENABLE ROW LEVEL SECURITY', v_table);
        EXECUTE pg_catalog.format(
            'CREATE POLICY %I ON pgsched.%I USING (true) WITH CHECK ((SELECT pgsched._tenant_scope()) IS NULL)',
            v_table || '_shared', v_table);
        EXECUTE pg_catalog.format(
            'CREATE POLICY %I ON pgsched.%I AS RESTRICTIVE FOR DELETE USING ((SELECT pgsched._tenant_scope()) IS NULL)',
            v_table || '_shared_delete', v_table);
    END LOOP;
END
$$;

-- The rollup's policy (revision 0006) in the same form as the others.
DROP POLICY queue_minutes_unscoped ON pgsched.queue_minutes;
CREATE POLICY queue_minutes_unscoped ON pgsched.queue_minutes
    USING ((SELECT pgsched._tenant_scope()) IS NULL);

-- _key_holder() takes the tenant (keys are per tenant): the old signature goes.
DROP FUNCTION pgsched._key_holder(text, text, jsonb, bigint);
REVOKE EXECUTE ON FUNCTION pgsched._key_holder(text, text, jsonb, bigint, text) FROM PUBLIC;
