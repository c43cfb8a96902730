-- 0007: security at the boundary

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



-- functions/_tenant_scope.sql
-- _tenant_scope
-- contract: the tenant the current session is confined to, decided from its
-- login (session_user), so neither SET ROLE nor a setting moves it:
--   NULL   not confined: the schema's owner and its members (superusers
--          among them), and logins that are not members of
--          pgsched_tenant_scoped, unless they narrowed themselves with
--          SET pgsched.tenant (a filter they chose, not a boundary);
--   tenant a member of pgsched_tenant_scoped bound to it in
--          pgsched.tenant_roles (bind_tenant()); pgsched.tenant is ignored;
--   ''     a member of pgsched_tenant_scoped that is not bound: confined to
--          nothing (no row has tenant ''). Fails closed.
-- The row-level security policies call it once per statement (InitPlans);
-- SECURITY DEFINER so it may read pgsched.tenant_roles. Unconfined logins
-- pay two role checks and no query: it runs on every claim and enqueue.
CREATE OR REPLACE FUNCTION pgsched._tenant_scope()
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    -- current_user is this function's owner, the schema's owner.
    IF pg_catalog.pg_has_role(session_user, current_user, 'MEMBER') THEN
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user, 'pgsched_tenant_scoped', 'MEMBER') THEN
        RETURN nullif(pg_catalog.current_setting('pgsched.tenant', true), '');
    END IF;
    RETURN coalesce((SELECT b.tenant FROM pgsched.tenant_roles b
                     WHERE b.role OPERATOR(pg_catalog.=) pg_catalog.to_regrole(pg_catalog.quote_ident(session_user))),
                    '');
END
$$;


-- functions/_check_tenant.sql
-- _check_tenant
-- contract: a session confined to a tenant (see _tenant_scope: a member of
-- pgsched_tenant_scoped, bound with bind_tenant() or, unbound, confined to
-- nothing) may write only rows of that tenant; no
-- tenant is not "any tenant". Raises insufficient_privilege otherwise. The
-- decision follows the login, so SET ROLE and SET pgsched.tenant do not
-- change it for a bound or scoped login.
CREATE OR REPLACE FUNCTION pgsched._check_tenant(p_tenant text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_scope text := pgsched._tenant_scope();
BEGIN
    IF v_scope IS NOT NULL AND p_tenant IS DISTINCT FROM v_scope THEN
        RAISE EXCEPTION 'pgsched: this session is confined to tenant %, not %',
            CASE WHEN v_scope = '' THEN '(none: its login is not bound to a tenant)' ELSE v_scope END,
            coalesce(p_tenant, '(none)')
            USING ERRCODE = 'insufficient_privilege',
                  HINT = CASE WHEN v_scope = '' THEN 'An administrator binds the login: SELECT pgsched.bind_tenant(''login'', ''tenant'').'
                              ELSE 'Name the tenant of this session.' END;
    END IF;
END
$$;


-- functions/_check_schedule_write.sql
-- _check_schedule_write
-- contract: may the session create or replace the schedule p_name with
-- tenant p_tenant and source p_source? Raises insufficient_privilege unless
--   * the new tenant is the session's own when it is confined, and an
--     existing schedule of that name is visible to it (another tenant's
--     schedule is never overwritten); and
--   * a login holding pgsched_worker but not pgsched_admin (a worker
--     registering the schedules its code defines) writes source 'code' only,
--     and replaces only schedules that came from code.
CREATE OR REPLACE FUNCTION pgsched._check_schedule_write(p_name text, p_tenant text, p_source text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_tenant text;
    v_source text;
BEGIN
    PERFORM pgsched._check_tenant(p_tenant);
    SELECT s.tenant, s.source INTO v_tenant, v_source FROM pgsched.schedules s WHERE s.name = p_name;
    IF FOUND AND NOT pgsched._tenant_visible(v_tenant) THEN
        RAISE EXCEPTION 'pgsched: the schedule name % is taken', p_name
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user, current_user, 'MEMBER')
       AND NOT pg_catalog.pg_has_role(session_user, 'pgsched_admin', 'MEMBER') THEN
        IF p_source IS DISTINCT FROM 'code' THEN
            RAISE EXCEPTION 'pgsched: a worker login registers only schedules defined in code (source ''code'')'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF FOUND AND v_source <> 'code' THEN
            RAISE EXCEPTION 'pgsched: schedule % was made with source %; only pgsched_admin may replace it',
                p_name, v_source
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END IF;
END
$$;


-- functions/_check_unconfined.sql
-- _check_unconfined
-- contract: raises insufficient_privilege when the session is confined to a
-- tenant (see _tenant_scope): what p_action changes is shared by every
-- tenant (queues, task policies, tenant bindings, scanner leases), so only
-- an unconfined login may do it.
CREATE OR REPLACE FUNCTION pgsched._check_unconfined(p_action text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF pgsched._tenant_scope() IS NOT NULL THEN
        RAISE EXCEPTION 'pgsched: a session confined to a tenant cannot %', p_action
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'It changes what every tenant shares; use a login that is not bound to a tenant.';
    END IF;
END
$$;


-- functions/_clock.sql
-- _clock
-- contract: the moved clock a function was given, checked. p_now exists so
-- tests can move time; only the schema's owner (and its members, superusers
-- among them) may use it. For any other login a non-NULL p_now raises
-- insufficient_privilege (SQLSTATE 42501): the decision reads session_user,
-- the login, so SET ROLE changes nothing, and it holds inside SECURITY
-- DEFINER functions, where current_user is the owner. NULL returns NULL at
-- once (callers coalesce it with their clock): the hot path pays one call.
CREATE OR REPLACE FUNCTION pgsched._clock(p_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_now IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.pg_has_role(
            session_user,
            (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgsched'),
            'MEMBER') THEN
        RAISE EXCEPTION 'pgsched: only the owner of the pgsched schema may move the clock (p_now)'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Leave p_now NULL: the functions use the database clock.';
    END IF;
    RETURN p_now;
END
$$;


-- functions/_hold_shard.sql
-- _hold_shard
-- contract: the fence of every scanner write. Locks the shard's lease row
-- FOR SHARE if, and only if, p_scanner owns it under p_epoch and the lease has
-- not run out; otherwise raises SQLSTATE PS409 and the caller's whole
-- transaction is rolled back. Holding the lock until commit means a takeover
-- (which updates the row) waits for this write to finish, or this write sees
-- the takeover and is rejected: never both. A session confined to a tenant
-- is refused (insufficient_privilege).
CREATE OR REPLACE FUNCTION pgsched._hold_shard(
    p_scanner text,
    p_shard   integer,
    p_epoch   bigint,
    p_now     timestamptz
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_unconfined('run a scanner (scanners act for every tenant)');
    PERFORM 1 FROM pgsched.shard_leases l
    WHERE l.shard = p_shard AND l.owner = p_scanner AND l.epoch = p_epoch AND l.expires_at > p_now
    FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgsched: scanner % no longer holds shard % under epoch %', p_scanner, p_shard, p_epoch
            USING ERRCODE = 'PS409', HINT = 'Another scanner took the shard over; this write was rejected.';
    END IF;
END
$$;


-- functions/_key_holder.sql
-- _key_holder
-- contract: the id of the job holding idempotency key p_key (NULL when none
-- does). A repeated key must repeat the work: when the holder (active, or
-- finished within the retention) has another task or other args than
-- p_task/p_args, raises SQLSTATE PS422 naming the key and the holder instead
-- of handing back another job's id. Options (queue, run_at, priority...) are
-- not compared: the first enqueue's stand. p_row, 1-based, numbers the row in
-- a batch. Keys are per tenant: p_tenant (NULL: no tenant) names the space. Each statement here takes a new snapshot, so it sees a concurrent
-- holder that the caller's key insert waited for.
CREATE OR REPLACE FUNCTION pgsched._key_holder(
    p_key text, p_task text, p_args jsonb, p_row bigint DEFAULT NULL, p_tenant text DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_shard smallint;
    v_task text;
    v_args jsonb;
BEGIN
    SELECT k.job_id, k.shard INTO v_id, v_shard FROM pgsched.idempotency_keys k
    WHERE k.key = p_key AND k.tenant IS NOT DISTINCT FROM p_tenant;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT j.task, j.args INTO v_task, v_args FROM pgsched.jobs j WHERE j.id = v_id AND j.shard = v_shard;
    IF NOT FOUND THEN
        SELECT h.task, h.args INTO v_task, v_args FROM pgsched.job_history h WHERE h.id = v_id LIMIT 1;
    END IF;
    IF FOUND AND (v_task, v_args) IS DISTINCT FROM (p_task, coalesce(p_args, '{}')) THEN
        RAISE EXCEPTION '%idempotency_key % is held by job % with %',
                CASE WHEN p_row IS NULL THEN 'pgsched: ' ELSE pg_catalog.format('pgsched: row %s of the batch: ', p_row) END,
                pgsched._shown(p_key), v_id,
                CASE WHEN v_task IS DISTINCT FROM p_task
                     THEN pg_catalog.format('task %s, not %s', pgsched._shown(v_task), pgsched._shown(p_task))
                     ELSE pg_catalog.format('other args (%s, not %s)', pgsched._shown(v_args::text),
                                            pgsched._shown(coalesce(p_args, '{}')::text)) END
            USING ERRCODE = 'PS422', COLUMN = 'idempotency_key', SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'A repeated key returns the existing job only for the same task and args: use another key for other work.';
    END IF;
    RETURN v_id;
END
$$;


-- functions/_put_back.sql
-- _put_back
-- contract: returns a running job to the queue under its fencing token
-- without spending its failure budget: max_attempts grows by one, so the
-- attempt counter keeps growing (every run has a new attempt and token) while
-- the job keeps as many failures as it had. A job whose cancellation was
-- requested is cancelled instead. Returns the new state, or 'lease_lost'.
CREATE OR REPLACE FUNCTION pgsched._put_back(
    p_job_id bigint,
    p_token  bigint,
    p_run_at timestamptz,
    p_kind   text,
    p_now    timestamptz
)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_job pgsched.jobs;
    v_run_at timestamptz := coalesce(p_run_at, p_now);
    v_scope text := pgsched._tenant_scope();
BEGIN
    UPDATE pgsched.jobs j
    SET run_at = v_run_at,
        state = CASE WHEN v_run_at <= p_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        -- saturates at the enqueue bound (jobs_max_attempts_range): never overflows
        max_attempts = j.max_attempts + (j.max_attempts < 1000000)::integer,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        PERFORM pgsched._event(p_job_id, p_now, p_kind, v_job.attempt, NULL, p_token,
            pg_catalog.jsonb_build_object('run_at', v_run_at));
        IF v_job.state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_job.state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = p_job_id AND j.lease_token = p_token AND j.state = 'running'
      AND j.cancel_requested_at IS NOT NULL
      AND (v_scope IS NULL OR j.tenant = v_scope)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        PERFORM pgsched._finish(v_job, 'cancelled', p_now, 'cancelled while running');
        RETURN 'cancelled';
    END IF;
    RETURN 'lease_lost';
END
$$;


-- functions/_tenant_visible.sql
-- _tenant_visible
-- contract: whether a row of tenant p_tenant is visible to (and writable by)
-- the current session, as the row-level security policies decide it (see
-- _tenant_scope): true for every row when the session is not confined,
-- else only for rows of its tenant (no tenant is not "any tenant"). For the
-- SECURITY DEFINER functions, which bypass row-level security and check
-- single rows with it. Every call and operator is schema-qualified.
CREATE OR REPLACE FUNCTION pgsched._tenant_visible(p_tenant text)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT CASE WHEN s.scope IS NULL THEN true
                ELSE coalesce(p_tenant OPERATOR(pg_catalog.=) s.scope, false) END
    FROM pgsched._tenant_scope() AS s(scope)
$$;


-- functions/acquire_shards.sql
-- acquire_shards
-- contract: a scanner's tick for its shard leases. Records the scanner as
-- live, renews the leases it holds, gives back shards beyond its fair share
-- (shards / live scanners, rounded up) so newcomers get theirs, and takes
-- free or expired shards up to that share. Taking a shard raises its epoch;
-- renewing keeps it; a lease that lapsed before renewal is re-taken with a
-- new epoch, so writes prepared under the old one are rejected. Returns the
-- shards held afterwards with their epochs and expiry.
CREATE OR REPLACE FUNCTION pgsched.acquire_shards(
    scanner text,
    lease   interval    DEFAULT '10 seconds',
    host    text        DEFAULT NULL,
    pid     integer     DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (shard smallint, epoch bigint, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_shards integer;
    v_live integer;
    v_share integer;
    v_mine integer;
BEGIN
    PERFORM pgsched._check_unconfined('run a scanner (scanners act for every tenant)');
    IF acquire_shards.lease IS NULL OR acquire_shards.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: the scanner lease must be positive' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgsched.scanners AS s (name, host, pid, started_at, last_seen)
    VALUES (acquire_shards.scanner, acquire_shards.host, acquire_shards.pid, v_now, v_now)
    ON CONFLICT (name) DO UPDATE SET last_seen = v_now;

    SELECT c.shards INTO v_shards FROM pgsched.config c;
    SELECT pg_catalog.count(*) INTO v_live
    FROM pgsched.scanners s WHERE s.last_seen > v_now - acquire_shards.lease;
    v_share := (v_shards + greatest(v_live, 1) - 1) / greatest(v_live, 1);

    -- Renew what is still ours; a lapsed lease of ours comes back with a new epoch.
    UPDATE pgsched.shard_leases l
    SET expires_at = v_now + acquire_shards.lease, renewed_at = v_now,
        epoch = CASE WHEN l.expires_at > v_now THEN l.epoch ELSE l.epoch + 1 END
    WHERE l.owner = acquire_shards.scanner;

    SELECT pg_catalog.count(*) INTO v_mine FROM pgsched.shard_leases l WHERE l.owner = acquire_shards.scanner;
    IF v_mine > v_share THEN
        UPDATE pgsched.shard_leases l
        SET owner = NULL, expires_at = NULL, renewed_at = v_now
        WHERE l.shard IN (
            SELECT l2.shard FROM pgsched.shard_leases l2
            WHERE l2.owner = acquire_shards.scanner
            ORDER BY l2.shard DESC
            LIMIT v_mine - v_share);
    ELSIF v_mine < v_share THEN
        UPDATE pgsched.shard_leases l
        SET owner = acquire_shards.scanner, epoch = l.epoch + 1,
            expires_at = v_now + acquire_shards.lease, renewed_at = v_now
        WHERE l.shard IN (
            SELECT l2.shard FROM pgsched.shard_leases l2
            WHERE l2.owner IS NULL OR l2.expires_at <= v_now
            ORDER BY l2.shard
            LIMIT v_share - v_mine
            FOR UPDATE SKIP LOCKED);
    END IF;

    RETURN QUERY
    SELECT l.shard, l.epoch, l.expires_at
    FROM pgsched.shard_leases l
    WHERE l.owner = acquire_shards.scanner
    ORDER BY l.shard;
END
$$;


-- functions/add_occurrences.sql
-- add_occurrences
-- contract: files a scanner's expansion of one schedule over a window, fenced
-- by the scanner's lease on the schedule's shard (PS409 when lost). Each
-- element of `occurrences` is {fire_at, nominal, dst, decision, reason}:
-- decisions 'fire' and 'misfire_fired' become ordinary jobs due at fire_at
-- whose idempotency key is (schedule, fire time in UTC), so two scanners, a
-- restart or a re-expansion never create one occurrence twice; every element
-- is recorded in schedule_occurrences with its decision (first decision
-- wins). When the schedule's version is not p_version any more (edited
-- meanwhile) nothing is filed. A version change since the last expansion
-- first withdraws the not-yet-started occurrences from p_from on. Returns the
-- number of jobs created.
CREATE OR REPLACE FUNCTION pgsched.add_occurrences(
    scanner     text,
    shard       integer,
    epoch       bigint,
    schedule    text,
    version     integer,
    occurrences jsonb,
    p_from      timestamptz,
    p_until     timestamptz,
    p_now       timestamptz DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_sched pgsched.schedules;
    v_occ jsonb;
    v_fire timestamptz;
    v_job_id bigint;
    v_created integer := 0;
    v_key text;
BEGIN
    PERFORM pgsched._hold_shard(add_occurrences.scanner, add_occurrences.shard, add_occurrences.epoch, v_now);
    SELECT * INTO v_sched FROM pgsched.schedules s
    WHERE s.name = add_occurrences.schedule AND s.version = add_occurrences.version
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF v_sched.expanded_version <> v_sched.version THEN
        PERFORM pgsched._withdraw(v_sched.name, add_occurrences.p_from, v_now,
                                  pg_catalog.format('schedule changed (version %s)', v_sched.version));
    END IF;

    FOR v_occ IN SELECT e FROM pg_catalog.jsonb_array_elements(coalesce(add_occurrences.occurrences, '[]')) e LOOP
        v_fire := (v_occ->>'fire_at')::timestamptz;
        v_job_id := NULL;
        IF v_occ->>'decision' IN ('fire', 'misfire_fired') AND v_sched.enabled THEN
            v_key := 'pgsched:schedule:' || v_sched.name || ':'
                     || pg_catalog.to_char(v_fire AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"');
            INSERT INTO pgsched.jobs AS j
                (shard, queue, task, args, priority, run_at, idempotency_key, max_attempts, labels, tenant, schedule)
            VALUES (v_sched.shard, v_sched.queue, v_sched.task, v_sched.args, v_sched.priority, v_fire, v_key,
                    v_sched.max_attempts, v_sched.labels, v_sched.tenant, v_sched.name)
            RETURNING j.id INTO v_job_id;
            IF v_job_id IS NOT NULL THEN
                v_created := v_created + 1;
            ELSE
                SELECT k.job_id INTO v_job_id FROM pgsched.idempotency_keys k
                WHERE k.key = v_key AND k.tenant IS NOT DISTINCT FROM v_sched.tenant;
            END IF;
        END IF;
        INSERT INTO pgsched.schedule_occurrences AS o
            (schedule, fire_at, nominal, dst, decision, reason, job_id, version, decided_at)
        VALUES (v_sched.name, v_fire, v_occ->>'nominal', v_occ->>'dst', v_occ->>'decision', v_occ->>'reason',
                v_job_id, v_sched.version, v_now)
        ON CONFLICT ON CONSTRAINT schedule_occurrences_pkey DO UPDATE
        SET decision = EXCLUDED.decision, reason = EXCLUDED.reason, job_id = EXCLUDED.job_id,
            version = EXCLUDED.version, decided_at = EXCLUDED.decided_at, nominal = EXCLUDED.nominal,
            dst = EXCLUDED.dst
        WHERE o.decision = 'withdrawn';
    END LOOP;

    UPDATE pgsched.schedules s
    SET expanded_until = greatest(coalesce(s.expanded_until, add_occurrences.p_until), add_occurrences.p_until),
        expanded_version = s.version, last_error = NULL
    WHERE s.name = v_sched.name;
    RETURN v_created;
END
$$;


-- functions/bind_tenant.sql
-- bind_tenant
-- contract: confines the login role `role` to `tenant` on every path (reads
-- through row-level security, enqueues, claims, completions, cancels,
-- retries, schedules, idempotency keys) from its next statement on; SET ROLE
-- and SET pgsched.tenant do not move it. Rebinding replaces the tenant.
-- Only members of pgsched_tenant_scoped are confined, so the role is granted
-- it when it is not a member yet (the owner needs ADMIN OPTION on it).
-- Superusers and members of the schema's owner are never confined, so
-- binding one is refused. Only a session that is not confined itself may
-- bind. Returns the previous tenant, or NULL.
CREATE OR REPLACE FUNCTION pgsched.bind_tenant(role regrole, tenant text)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_previous text;
BEGIN
    PERFORM pgsched._check_unconfined('bind tenants');
    IF bind_tenant.role IS NULL OR bind_tenant.tenant IS NULL THEN
        RAISE EXCEPTION 'pgsched: bind_tenant needs a role and a tenant' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.pg_has_role(bind_tenant.role, current_user, 'MEMBER') THEN
        RAISE EXCEPTION 'pgsched: % is a superuser or a member of the schema''s owner, which are never confined',
            bind_tenant.role
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT pg_catalog.pg_has_role(bind_tenant.role, 'pgsched_tenant_scoped', 'MEMBER') THEN
        EXECUTE pg_catalog.format('GRANT pgsched_tenant_scoped TO %I',
                                  (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid = bind_tenant.role));
    END IF;
    SELECT b.tenant INTO v_previous FROM pgsched.tenant_roles b WHERE b.role = bind_tenant.role;
    INSERT INTO pgsched.tenant_roles AS b (role, tenant, bound_at)
    VALUES (bind_tenant.role, bind_tenant.tenant, pg_catalog.now())
    ON CONFLICT ON CONSTRAINT tenant_roles_pkey DO UPDATE SET tenant = EXCLUDED.tenant, bound_at = EXCLUDED.bound_at;
    RETURN v_previous;
END
$$;


-- functions/cancel.sql
-- cancel
-- contract: a waiting job (scheduled or available) is cancelled at once and
-- returns 'cancelled'; once that is returned the job can never start. A
-- running job gets a cancel request, seen by its worker at the next
-- heartbeat ('cancel_requested'); its run then ends as 'cancelled' unless it
-- had already succeeded. A finished job is left as it is
-- ('already_completed', 'already_dead', 'already_cancelled'); an unknown id
-- returns 'not_found', as does a job of another tenant for a session
-- confined to one (see _check_tenant).
CREATE OR REPLACE FUNCTION pgsched.cancel(
    job_id bigint,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_job pgsched.jobs;
    v_state pgsched.job_state;
    v_tenant text;
BEGIN
    -- This function bypasses row-level security, so it confines tenants itself.
    SELECT t.tenant INTO v_tenant
    FROM (SELECT j.tenant FROM pgsched.jobs j WHERE j.id = cancel.job_id
          UNION ALL
          SELECT h.tenant FROM pgsched.job_history h WHERE h.id = cancel.job_id) t
    LIMIT 1;
    IF FOUND THEN
        BEGIN
            PERFORM pgsched._check_tenant(v_tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RETURN 'not_found';
        END;
    END IF;

    -- A job can move between waiting and running while we look (a claim, a
    -- retry); each statement is fenced on state, so try the pair again.
    FOR i IN 1 .. 3 LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = cancel.job_id AND j.state IN ('scheduled', 'available')
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._finish(v_job, 'cancelled', v_now, 'cancelled before it ran');
            RETURN 'cancelled';
        END IF;

        UPDATE pgsched.jobs j
        SET cancel_requested_at = coalesce(j.cancel_requested_at, v_now)
        WHERE j.id = cancel.job_id AND j.state = 'running'
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._event(v_job.id, v_now, 'cancel_requested', v_job.attempt, v_job.leased_by,
                                   v_job.lease_token);
            RETURN 'cancel_requested';
        END IF;

        SELECT h.state INTO v_state
        FROM pgsched.job_history h
        WHERE h.id = cancel.job_id
        ORDER BY h.finished_at DESC
        LIMIT 1;
        IF FOUND AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = cancel.job_id) THEN
            RETURN 'already_' || v_state::text;
        END IF;
        IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = cancel.job_id) THEN
            RETURN 'not_found';
        END IF;
    END LOOP;
    RETURN 'busy';
END
$$;


-- functions/claim.sql
-- claim
-- contract: leases up to n due jobs of `queues` (skipping paused queues, and
-- jobs whose labels the worker does not all offer) to `worker` for `lease`.
-- Each claimed job gets a new fencing token, larger than any before, and its
-- attempt incremented. A job is never leased twice at once: rows are locked
-- with SKIP LOCKED and re-checked as 'available' by the same UPDATE.
--
-- Shards are visited one statement each, starting at start_shard (workers
-- rotate it), so concurrent claimers spread over partitions instead of
-- fighting for the same rows; within a shard, each queue is one index scan
-- in (priority DESC, run_at, id) order that stops after n rows, whatever the
-- backlog. Queues take turns by the same rotation. Priority orders jobs
-- within a shard and queue; across shards it holds within one rotation.
--
-- With start_shard NULL, each queue is instead one statement over all shards
-- at once (a merge of every shard's index, strict priority across shards):
-- the cheaper pass when little is queued, which workers use when idle.
CREATE OR REPLACE FUNCTION pgsched.claim(
    worker      text,
    queues      text[],
    n           integer,
    lease       interval,
    labels      text[]      DEFAULT '{}',
    start_shard integer     DEFAULT NULL,
    p_now       timestamptz DEFAULT NULL
)
RETURNS TABLE (
    id bigint, shard smallint, queue text, task text, args jsonb, attempt integer,
    max_attempts integer, lease_token bigint, idempotency_key text, run_at timestamptz,
    priority integer, tenant text, created_at timestamptz, lease_expires_at timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan for every shard (pruned to the shard when it runs) instead of
-- planning the partitioned statement again at each call.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    -- The clock now, not at transaction start: started_at - run_at is the start lag.
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_shards integer;
    v_audit boolean;
    v_queues text[];
    v_left integer := claim.n;
    v_got integer;
    v_shard smallint;
    v_queue text;
    v_nq integer;
    -- A session confined to a tenant claims only that tenant's jobs.
    v_scope text := pgsched._tenant_scope();
BEGIN
    IF claim.n IS NULL OR claim.n < 1 OR claim.lease IS NULL OR claim.lease <= interval '0' THEN
        RAISE EXCEPTION 'pgsched: claim needs n >= 1 and a positive lease' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.shards, c.audit INTO v_shards, v_audit FROM pgsched.config c;
    SELECT pg_catalog.array_agg(q) INTO v_queues
    FROM unnest(claim.queues) q
    WHERE NOT EXISTS (SELECT 1 FROM pgsched.queues pq WHERE pq.name = q AND pq.paused);
    IF v_queues IS NULL THEN
        RETURN;
    END IF;

    v_nq := pg_catalog.cardinality(v_queues);

    IF claim.start_shard IS NULL THEN
        FOR i IN 1 .. v_nq LOOP
            v_queue := v_queues[i];
            RETURN QUERY
            WITH due AS MATERIALIZED (
                SELECT j.id, j.shard
                FROM pgsched.jobs j
                WHERE j.state = 'available'
                  AND j.queue = v_queue
                  AND (j.labels = '{}' OR j.labels <@ coalesce(claim.labels, '{}'))
                  AND (v_scope IS NULL OR j.tenant = v_scope)
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT v_left
                FOR UPDATE SKIP LOCKED
            ), leased AS (
                UPDATE pgsched.jobs j
                SET state = 'running',
                    attempt = j.attempt + 1,
                    lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                    leased_by = claim.worker,
                    lease_expires_at = v_now + claim.lease,
                    started_at = v_now
                WHERE j.id = ANY (ARRAY(SELECT due.id FROM due))
                  AND j.shard = ANY (ARRAY(SELECT due.shard FROM due))
                  AND j.state = 'available'
                RETURNING j.*
            ), audit AS (
                INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
                SELECT l.id, v_now, 'claimed', l.attempt, claim.worker, l.lease_token
                FROM leased l
                WHERE v_audit
            )
            SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
                   l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at
            FROM leased l;
            GET DIAGNOSTICS v_got = ROW_COUNT;
            v_left := v_left - v_got;
            EXIT WHEN v_left <= 0;
        END LOOP;
        RETURN;
    END IF;

    FOR i IN 0 .. v_shards * v_nq - 1 LOOP
        v_shard := ((coalesce(claim.start_shard, 0) + i / v_nq) % v_shards + v_shards) % v_shards;
        v_queue := v_queues[((coalesce(claim.start_shard, 0) + i) % v_nq + v_nq) % v_nq + 1];
        RETURN QUERY
        WITH due AS MATERIALIZED (
            SELECT j.id
            FROM pgsched.jobs j
            WHERE j.shard = v_shard
              AND j.state = 'available'
              AND j.queue = v_queue
              -- the first arm keeps the row estimate right (most jobs need no labels)
              AND (j.labels = '{}' OR j.labels <@ coalesce(claim.labels, '{}'))
              AND (v_scope IS NULL OR j.tenant = v_scope)
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT v_left
            FOR UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE pgsched.jobs j
            SET state = 'running',
                attempt = j.attempt + 1,
                lease_token = pg_catalog.nextval('pgsched.lease_token_seq'),
                leased_by = claim.worker,
                lease_expires_at = v_now + claim.lease,
                started_at = v_now
            -- ids as an array: one index probe each, never a scan of the partition
            WHERE j.shard = v_shard AND j.id = ANY (ARRAY(SELECT due.id FROM due)) AND j.state = 'available'
            RETURNING j.*
        ), audit AS (
            INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
            SELECT l.id, v_now, 'claimed', l.attempt, claim.worker, l.lease_token
            FROM leased l
            WHERE v_audit
        )
        SELECT l.id, l.shard, l.queue, l.task, l.args, l.attempt, l.max_attempts, l.lease_token,
               l.idempotency_key, l.run_at, l.priority, l.tenant, l.created_at, l.lease_expires_at
        FROM leased l;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        EXIT WHEN v_left <= 0;
    END LOOP;
END
$$;


-- functions/complete.sql
-- complete
-- contract: finishes the jobs whose fencing token is still current, in one
-- statement: each accepted job leaves pgsched.jobs and enters
-- pgsched.job_history as 'completed' with its result, with one audit event.
-- A stale token (the lease expired and the job was handed to someone else, or
-- it already finished) changes nothing. Returns one row per input job saying
-- whether it was accepted. Each accepted job sends its status event on
-- pgsched_events when pgsched.config.events is on (docs/events.md). shards, when given, lets each lookup go straight
-- to the job's partition.
CREATE OR REPLACE FUNCTION pgsched.complete(
    job_ids bigint[],
    tokens  bigint[],
    results jsonb[]     DEFAULT NULL,
    shards  smallint[]  DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, accepted boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_config pgsched.config;
    v_scope text := pgsched._tenant_scope();
BEGIN
    SELECT * INTO v_config FROM pgsched.config;
    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token, u.result, u.shard
        FROM unnest(complete.job_ids, complete.tokens, complete.results, complete.shards)
             AS u(id, token, result, shard)
        WHERE u.id IS NOT NULL
    ), done AS (
        -- Checks the token and the state in the statement that writes. The
        -- state filter lets the planner read only running rows (a partial
        -- index), however large the backlog.
        DELETE FROM pgsched.jobs j
        USING input u
        WHERE j.id = u.id AND j.lease_token = u.token AND j.state = 'running'
          AND (u.shard IS NULL OR j.shard = u.shard)
          AND (v_scope IS NULL OR j.tenant = v_scope)  -- tokens are guessable, tenants are not
        RETURNING j.*, u.result
    ), history AS (
        INSERT INTO pgsched.job_history
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, lease_token,
             leased_by, idempotency_key, labels, tenant, created_at, started_at, finished_at, result, error, schedule)
        SELECT d.id, d.shard, 'completed', d.queue, d.task, d.args, d.priority, d.run_at, d.attempt,
               d.max_attempts, d.lease_token, d.leased_by, d.idempotency_key, d.labels, d.tenant,
               d.created_at, d.started_at, v_now, d.result, NULL, d.schedule
        FROM done d
    ), audit AS (
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token)
        SELECT d.id, v_now, 'completed', d.attempt, d.leased_by, d.lease_token
        FROM done d
        WHERE v_config.audit
    ), keys AS (
        UPDATE pgsched.idempotency_keys k
        SET expires_at = v_now + v_config.idempotency_retention
        FROM done d
        WHERE d.idempotency_key IS NOT NULL AND k.key = d.idempotency_key AND k.job_id = d.id
    ), notified AS (
        -- Same payload as _finish's. Volatile, so materialized: the count
        -- below reads every row, and so sends every NOTIFY.
        SELECT pg_catalog.pg_notify('pgsched_events', pg_catalog.json_build_object(
            'id', d.id, 'queue', d.queue, 'task', d.task, 'state', 'completed', 'attempt', d.attempt)::text)
        FROM done d
        WHERE v_config.events
    )
    SELECT u.id, d.id IS NOT NULL
    FROM input u
    LEFT JOIN done d ON d.id = u.id
    CROSS JOIN (SELECT pg_catalog.count(*) FROM notified) n;
END
$$;


-- functions/enqueue.sql
-- enqueue
-- contract: adds one job and returns its id. For an idempotency key already
-- held by an active job, or by a finished one within the retention window,
-- returns that job's id and adds nothing (keys are per tenant), provided the
-- task and args are the same (else PS422, see _key_holder). The shard derives from the key when
-- there is one (so a key always lands on the same shard), else it is random.
-- A refused value raises with its column named (see _check_job).
--
-- It does itself what the insert trigger does for a plain INSERT (defaults,
-- the payload limit, the key, the wake-up), then inserts as a trusted writer
-- the trigger skips: one statement's work instead of two.
CREATE OR REPLACE FUNCTION pgsched.enqueue(
    task            text,
    args            jsonb       DEFAULT '{}',
    queue           text        DEFAULT 'default',
    run_at          timestamptz DEFAULT NULL,
    priority        integer     DEFAULT 0,
    idempotency_key text        DEFAULT NULL,
    max_attempts    integer     DEFAULT NULL,
    labels          text[]      DEFAULT '{}',
    tenant          text        DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_run_at timestamptz := coalesce(enqueue.run_at, pg_catalog.now());
    v_shards integer;
    v_limit integer;
    v_default_attempts integer;
    v_id bigint := pg_catalog.nextval('pgsched.jobs_id_seq');
    v_shard smallint;
    v_queue text := coalesce(enqueue.queue, 'default');
    v_max integer := enqueue.max_attempts;
BEGIN
    PERFORM pgsched._check_tenant(enqueue.tenant);
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    PERFORM pgsched._check_job(enqueue.task, v_queue, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0),
                               v_run_at, v_max, enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant);
    PERFORM pgsched._check_payload(enqueue.args, v_limit);
    IF v_max IS NULL THEN
        SELECT t.max_attempts INTO v_max FROM pgsched.tasks t WHERE t.name = enqueue.task;
        v_max := coalesce(v_max, v_default_attempts);
    END IF;

    IF enqueue.idempotency_key IS NULL THEN
        v_shard := pg_catalog.floor(pg_catalog.random() * v_shards)::smallint;
    ELSE
        v_shard := ((pg_catalog.hashtextextended(enqueue.idempotency_key, 0) % v_shards + v_shards) % v_shards)::smallint;
        -- The key row is the lock: a concurrent enqueue of the same key waits
        -- here for the first one's commit, then sees the conflict. A key whose
        -- retention ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        VALUES (enqueue.idempotency_key, enqueue.tenant, v_id, v_shard, v_now)
        ON CONFLICT ON CONSTRAINT idempotency_keys_key_tenant DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now;
        IF NOT FOUND THEN
            -- A new statement: its snapshot sees the holder we waited for.
            RETURN pgsched._key_holder(enqueue.idempotency_key, enqueue.task, enqueue.args, NULL, enqueue.tenant);
        END IF;
    END IF;

    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);
    INSERT INTO pgsched.jobs
        (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, labels, tenant)
    VALUES (v_id, v_shard, CASE WHEN v_run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
            v_queue, enqueue.task, coalesce(enqueue.args, '{}'), coalesce(enqueue.priority, 0), v_run_at, 0, v_max,
            enqueue.idempotency_key, coalesce(enqueue.labels, '{}'), enqueue.tenant);
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);

    IF v_run_at <= v_now THEN
        PERFORM pg_catalog.pg_notify('pgsched_jobs', v_queue);
    ELSE
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;
    RETURN v_id;
END
$$;


-- functions/enqueue_many.sql
-- enqueue_many
-- contract: enqueue() for many jobs in one statement, all or nothing; returns
-- one id per input row, in input order (for a repeated idempotency key, the
-- holder's id; rows repeating a key within the batch get the first row's
-- job; a repeated key with another task or other args raises PS422). Arrays
-- are parallel: each one given has exactly one element per task (else
-- invalid_parameter_value, naming the array); a NULL array, or a NULL
-- element, means the default. labels are JSON arrays of strings, one per job.
-- A refused row raises naming its position (1-based, the ord returned), its
-- column and its value; nothing of the batch is written.
CREATE OR REPLACE FUNCTION pgsched.enqueue_many(
    tasks            text[],
    args             jsonb[]       DEFAULT NULL,
    queues           text[]        DEFAULT NULL,
    run_ats          timestamptz[] DEFAULT NULL,
    priorities       integer[]     DEFAULT NULL,
    idempotency_keys text[]        DEFAULT NULL,
    max_attempts     integer[]     DEFAULT NULL,
    tenants          text[]        DEFAULT NULL,
    labels           jsonb[]       DEFAULT NULL
)
RETURNS TABLE (ord bigint, job_id bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_shards integer;
    v_limit integer;
    v_default_attempts integer;
    v_ords bigint[];
    v_ids bigint[];
    v_keys text[];
    v_tenants text[];
    v_queues text[];
    v_scheduled boolean;
    v_n integer := pg_catalog.cardinality(tasks);
    v_bad record;
BEGIN
    IF tasks IS NULL OR v_n = 0 THEN
        RETURN;
    END IF;
    -- unnest() pads short arrays with NULLs, which would mean "the default"
    -- for a value the caller did send: refuse any length but the batch's.
    SELECT a.name, a.len, a.dims INTO v_bad
    FROM (VALUES ('tasks', v_n, pg_catalog.array_ndims(tasks)),
                 ('args', pg_catalog.cardinality(args), pg_catalog.array_ndims(args)),
                 ('queues', pg_catalog.cardinality(queues), pg_catalog.array_ndims(queues)),
                 ('run_ats', pg_catalog.cardinality(run_ats), pg_catalog.array_ndims(run_ats)),
                 ('priorities', pg_catalog.cardinality(priorities), pg_catalog.array_ndims(priorities)),
                 ('idempotency_keys', pg_catalog.cardinality(idempotency_keys), pg_catalog.array_ndims(idempotency_keys)),
                 ('max_attempts', pg_catalog.cardinality(max_attempts), pg_catalog.array_ndims(max_attempts)),
                 ('tenants', pg_catalog.cardinality(tenants), pg_catalog.array_ndims(tenants)),
                 ('labels', pg_catalog.cardinality(labels), pg_catalog.array_ndims(labels))) AS a(name, len, dims)
    WHERE a.len IS NOT NULL AND (a.len <> v_n OR a.dims > 1)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: enqueue_many: % has % elements%, tasks has %: every array given must have one element per job (or be NULL for all defaults)',
                v_bad.name, v_bad.len, CASE WHEN v_bad.dims > 1 THEN pg_catalog.format(' in %s dimensions', v_bad.dims) ELSE '' END, v_n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Every row is checked, also those whose tenant is NULL.
    FOR v_bad IN SELECT u.tenant, pg_catalog.min(u.ord) AS ord
                 FROM unnest(tenants, tasks) WITH ORDINALITY AS u(tenant, task, ord) GROUP BY u.tenant LOOP
        BEGIN
            PERFORM pgsched._check_tenant(v_bad.tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'pgsched: row % of the batch: %', v_bad.ord, pg_catalog.substr(SQLERRM, 10)
                USING ERRCODE = 'insufficient_privilege', COLUMN = 'tenant';
        END;
    END LOOP;
    SELECT c.shards, c.max_payload_bytes, c.default_max_attempts INTO v_shards, v_limit, v_default_attempts
    FROM pgsched.config c;
    -- One set-based pass over the rules (_job_problem is inlined; labels,
    -- JSON here, are checked as JSON); only the first bad row goes through
    -- _check_job, which raises naming it.
    SELECT u.ord, u.task, coalesce(u.queue, 'default') AS queue, coalesce(u.args, '{}') AS args,
           coalesce(u.priority, 0) AS priority, coalesce(u.run_at, v_now) AS run_at, u.max_attempts, u.key,
           u.labels, u.tenant,
           u.labels IS NOT NULL AND (pg_catalog.jsonb_typeof(u.labels) <> 'array'
                                     OR u.labels @? '$[*] ? (@.type() != "string" || @ == "")') AS labels_bad
    INTO v_bad
    FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants, labels)
         WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, labels, ord)
    WHERE (u.labels IS NOT NULL AND (pg_catalog.jsonb_typeof(u.labels) <> 'array'
                                     OR u.labels @? '$[*] ? (@.type() != "string" || @ == "")'))
       OR pgsched._job_problem(u.task, coalesce(u.queue, 'default'), coalesce(u.args, '{}'), coalesce(u.priority, 0),
                               coalesce(u.run_at, v_now), u.max_attempts, u.key, '{}', u.tenant) IS NOT NULL
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        IF v_bad.labels_bad THEN
            RAISE EXCEPTION 'pgsched: row % of the batch: labels % must be a JSON array of non-empty strings (jobs_labels_valid)',
                    v_bad.ord, pgsched._shown(v_bad.labels::text)
                USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_labels_valid', COLUMN = 'labels',
                      SCHEMA = 'pgsched', TABLE = 'jobs';
        END IF;
        PERFORM pgsched._check_job(v_bad.task, v_bad.queue, v_bad.args, v_bad.priority, v_bad.run_at,
                                   v_bad.max_attempts, v_bad.key, '{}', v_bad.tenant, v_bad.ord);
    END IF;
    PERFORM pgsched._check_payload(u.a, v_limit, u.n) FROM unnest(args) WITH ORDINALITY AS u(a, n)
    WHERE pg_catalog.pg_column_size(u.a) > v_limit / 6;

    -- Set-based, the work the insert trigger does row by row for a plain
    -- INSERT; the rows then go in as a trusted writer the trigger skips.
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', 'on', true);

    IF idempotency_keys IS NULL
       OR NOT EXISTS (SELECT 1 FROM unnest(idempotency_keys) k WHERE k IS NOT NULL) THEN
        -- No keys, nothing to deduplicate: one straight INSERT. Ids are drawn
        -- after the sort by input order, so they grow in input order.
        WITH inserted AS (
            INSERT INTO pgsched.jobs AS j
                (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, tenant, labels)
            SELECT pg_catalog.nextval('pgsched.jobs_id_seq'),
                   pg_catalog.floor(pg_catalog.random() * v_shards)::smallint,
                   CASE WHEN coalesce(u.run_at, v_now) <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
                   coalesce(u.queue, 'default'), u.task, coalesce(u.args, '{}'), coalesce(u.priority, 0),
                   coalesce(u.run_at, v_now), 0, coalesce(u.max_attempts, t.max_attempts, v_default_attempts), u.tenant,
                   CASE WHEN u.labels IS NULL THEN '{}'::text[]
                        ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(u.labels)) END
            FROM unnest(tasks, args, queues, run_ats, priorities, max_attempts, tenants, labels)
                 WITH ORDINALITY AS u(task, args, queue, run_at, priority, max_attempts, tenant, labels, ord)
            LEFT JOIN pgsched.tasks t ON t.name = u.task
            ORDER BY u.ord
            RETURNING j.id, j.queue, j.state
        )
        SELECT pg_catalog.array_agg(i.id ORDER BY i.id),
               pg_catalog.array_agg(DISTINCT i.queue) FILTER (WHERE i.state = 'available'),
               pg_catalog.bool_or(i.state = 'scheduled')
        INTO v_ids, v_queues, v_scheduled
        FROM inserted i;
        PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);
        PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
        IF v_scheduled THEN
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN QUERY SELECT x.o, x.id FROM unnest(v_ids) WITH ORDINALITY AS x(id, o);
        RETURN;
    END IF;

    WITH numbered AS MATERIALIZED (
        -- ids are drawn while the input is read in order, so they grow in
        -- input order (a batch runs first-in, first-out)
        SELECT u.ord, u.task, u.args, coalesce(u.queue, 'default') AS queue, coalesce(u.run_at, v_now) AS run_at,
               u.priority, u.key, u.max_attempts, u.tenant, u.labels,
               pg_catalog.nextval('pgsched.jobs_id_seq') AS id
        FROM unnest(tasks, args, queues, run_ats, priorities, idempotency_keys, max_attempts, tenants, labels)
             WITH ORDINALITY AS u(task, args, queue, run_at, priority, key, max_attempts, tenant, labels, ord)
    ), input AS MATERIALIZED (
        SELECT n.*,
               CASE WHEN n.key IS NULL THEN pg_catalog.floor(pg_catalog.random() * v_shards)::smallint
                    ELSE ((pg_catalog.hashtextextended(n.key, 0) % v_shards + v_shards) % v_shards)::smallint
               END AS shard,
               -- only the first row of a key in this batch is inserted
               n.key IS NULL OR n.ord = pg_catalog.min(n.ord) OVER (PARTITION BY n.key, n.tenant) AS first_of_key
        FROM numbered n
    ), taken AS (
        -- Keys are taken in key order, so concurrent batches sharing keys
        -- wait for each other instead of deadlocking. A key whose retention
        -- ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        SELECT i.key, i.tenant, i.id, i.shard, v_now
        FROM input i
        WHERE i.key IS NOT NULL AND i.first_of_key
        ORDER BY i.key
        ON CONFLICT (key, tenant) DO UPDATE
            SET job_id = EXCLUDED.job_id, shard = EXCLUDED.shard, created_at = EXCLUDED.created_at, expires_at = NULL
            WHERE k.expires_at < v_now
        RETURNING k.job_id
    ), inserted AS (
        INSERT INTO pgsched.jobs AS j
            (id, shard, state, queue, task, args, priority, run_at, attempt, max_attempts, idempotency_key, tenant,
             labels)
        SELECT i.id, i.shard,
               CASE WHEN i.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
               i.queue, i.task, coalesce(i.args, '{}'), coalesce(i.priority, 0), i.run_at, 0,
               coalesce(i.max_attempts, t.max_attempts, v_default_attempts), i.key, i.tenant,
               CASE WHEN i.labels IS NULL THEN '{}'::text[]
                    ELSE ARRAY(SELECT pg_catalog.jsonb_array_elements_text(i.labels)) END
        FROM input i
        LEFT JOIN pgsched.tasks t ON t.name = i.task
        WHERE i.key IS NULL OR i.id IN (SELECT taken.job_id FROM taken)
        ORDER BY i.ord
        RETURNING j.id, j.queue, j.state
    )
    SELECT pg_catalog.array_agg(i.ord ORDER BY i.ord),
           pg_catalog.array_agg(ins.id ORDER BY i.ord),
           pg_catalog.array_agg(i.key ORDER BY i.ord),
           pg_catalog.array_agg(i.tenant ORDER BY i.ord),
           pg_catalog.array_agg(DISTINCT ins.queue) FILTER (WHERE ins.state = 'available'),
           pg_catalog.bool_or(ins.state = 'scheduled')
    INTO v_ords, v_ids, v_keys, v_tenants, v_queues, v_scheduled
    FROM input i
    LEFT JOIN inserted ins ON ins.id = i.id;
    PERFORM pg_catalog.set_config('pgsched.trusted_insert', '', true);

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_queues) q;
    IF v_scheduled THEN
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;

    -- Rows whose key was taken: look the holder up in a new statement, whose
    -- snapshot sees a concurrent enqueue of the same key that we waited for,
    -- and refuse the batch if it holds other work (PS422, naming the row).
    RETURN QUERY
    SELECT x.o, coalesce(x.id, pgsched._key_holder(x.k, u.task, u.args, x.o, x.t))
    FROM unnest(v_ords, v_ids, v_keys, v_tenants) AS x(o, id, k, t)
    JOIN unnest(tasks, args) WITH ORDINALITY AS u(task, args, n) ON u.n = x.o
    ORDER BY x.o;
END
$$;


-- functions/expire_leases.sql
-- expire_leases
-- contract: jobs whose lease ran out (their worker died, hung or lost its
-- connection) go back to 'available' at once, keeping their run_at (so they
-- come before newer work, and their start lag shows the time lost), or to 'dead' when their
-- attempts are used up, or to 'cancelled' when cancellation was requested,
-- each with a 'lease_expired' event naming the worker and token that lost
-- the lease. Candidates are locked with SKIP LOCKED and every write re-checks
-- the token, the state and the expiry, so a completion racing the expiry
-- wins cleanly and a stale read never overwrites a newer claim. Returns the
-- number of jobs handled (at most p_limit; call again while it is p_limit).
CREATE OR REPLACE FUNCTION pgsched.expire_leases(
    p_now   timestamptz DEFAULT NULL,
    p_limit integer     DEFAULT 1000,
    p_shard integer     DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_requeued text[];
    v_finished integer;
    v_count integer;
    v_job pgsched.jobs;
    v_expired record;
    v_outcome pgsched.job_state;
BEGIN
    WITH expired AS MATERIALIZED (
        SELECT j.id, j.shard, j.lease_token, j.leased_by, j.lease_expires_at
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.lease_expires_at < v_now
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), requeued AS (
        UPDATE pgsched.jobs j
        SET state = 'available',
            lease_token = NULL, leased_by = NULL, lease_expires_at = NULL,
            last_error = pg_catalog.format('lease expired at %s (worker %s)', e.lease_expires_at, e.leased_by)
        FROM expired e
        WHERE j.id = e.id AND j.shard = e.shard AND j.lease_token = e.lease_token
          AND j.state = 'running' AND j.lease_expires_at < v_now
          AND j.attempt < j.max_attempts AND j.cancel_requested_at IS NULL
        RETURNING j.id, j.queue, j.attempt, e.leased_by, e.lease_token, e.lease_expires_at
    ), audit AS (
        INSERT INTO pgsched.job_events (job_id, at, kind, attempt, worker, token, detail)
        SELECT r.id, v_now, 'lease_expired', r.attempt, r.leased_by, r.lease_token,
               pg_catalog.jsonb_build_object('lease_expires_at', r.lease_expires_at, 'outcome', 'available')
        FROM requeued r, pgsched.config c
        WHERE c.audit
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT r.queue)
    INTO v_count, v_requeued
    FROM requeued r;

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM unnest(v_requeued) q;

    -- Out of attempts (or cancel requested): these leave the active table.
    -- Rare, so one fenced DELETE per job keeps the filing simple.
    v_finished := 0;
    FOR v_expired IN
        SELECT j.id, j.shard, j.lease_token
        FROM pgsched.jobs j
        WHERE j.state = 'running' AND j.lease_expires_at < v_now
          AND (j.attempt >= j.max_attempts OR j.cancel_requested_at IS NOT NULL)
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = v_expired.id AND j.shard = v_expired.shard AND j.lease_token = v_expired.lease_token
          AND j.state = 'running' AND j.lease_expires_at < v_now
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            v_outcome := CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END;
            PERFORM pgsched._event(v_job.id, v_now, 'lease_expired', v_job.attempt, v_job.leased_by,
                v_job.lease_token,
                pg_catalog.jsonb_build_object('lease_expires_at', v_job.lease_expires_at, 'outcome', v_outcome));
            PERFORM pgsched._finish(
                v_job,
                v_outcome,
                v_now,
                pg_catalog.format('lease expired at %s (worker %s) after attempt %s of %s',
                                  v_job.lease_expires_at, v_job.leased_by, v_job.attempt, v_job.max_attempts),
                NULL,
                pg_catalog.jsonb_build_object('lease_expires_at', v_job.lease_expires_at, 'reason', 'lease_expired'));
            v_finished := v_finished + 1;
        END IF;
    END LOOP;

    RETURN v_count + v_finished;
END
$$;


-- functions/fail.sql
-- fail
-- contract: reports a failed run under its fencing token and returns the
-- job's resulting state: 'scheduled' or 'available' (a retry, at retry_at or
-- after the task/queue backoff), 'dead' (attempts exhausted, or final), or
-- 'cancelled' (cancellation had been requested). A stale token changes
-- nothing and returns 'lease_lost'.
--
-- Each branch is one fenced statement (token and state in its WHERE). The
-- retry branch runs first and excludes cancel-requested jobs; if a cancel
-- lands between the two, the terminal branch catches it.
CREATE OR REPLACE FUNCTION pgsched.fail(
    job_id   bigint,
    token    bigint,
    error    text,
    retry_at timestamptz DEFAULT NULL,
    final    boolean     DEFAULT false,
    p_now    timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_job pgsched.jobs;
    v_state pgsched.job_state;
    v_scope text := pgsched._tenant_scope();
BEGIN
    UPDATE pgsched.jobs j
    SET run_at = v.run_at,
        state = CASE WHEN v.run_at <= v_now THEN 'available' ELSE 'scheduled' END::pgsched.job_state,
        lease_token = NULL, leased_by = NULL, lease_expires_at = NULL,
        last_error = fail.error
    FROM (
        SELECT j2.id, j2.shard, j2.leased_by,
               coalesce(fail.retry_at, v_now + pgsched._backoff(j2.task, j2.queue, j2.attempt)) AS run_at
        FROM pgsched.jobs j2
        WHERE j2.id = fail.job_id AND j2.lease_token = fail.token
          AND (v_scope IS NULL OR j2.tenant = v_scope)
    ) v
    WHERE j.id = v.id AND j.shard = v.shard
      AND j.lease_token = fail.token AND j.state = 'running'
      AND NOT coalesce(fail.final, false)
      AND j.attempt < j.max_attempts
      AND j.cancel_requested_at IS NULL
    RETURNING j.state, j.attempt, j.queue, j.run_at, v.leased_by
    INTO v_state, v_job.attempt, v_job.queue, v_job.run_at, v_job.leased_by;
    IF FOUND THEN
        PERFORM pgsched._event(fail.job_id, v_now, 'failed', v_job.attempt, v_job.leased_by, fail.token,
            pg_catalog.jsonb_build_object('error', fail.error, 'retry_at', v_job.run_at));
        IF v_state = 'available' THEN
            PERFORM pg_catalog.pg_notify('pgsched_jobs', v_job.queue);
        ELSE
            PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
        END IF;
        RETURN v_state::text;
    END IF;

    DELETE FROM pgsched.jobs j
    WHERE j.id = fail.job_id AND j.lease_token = fail.token AND j.state = 'running'
      AND (v_scope IS NULL OR j.tenant = v_scope)
      AND (coalesce(fail.final, false) OR j.attempt >= j.max_attempts OR j.cancel_requested_at IS NOT NULL)
    RETURNING j.* INTO v_job;
    IF FOUND THEN
        v_state := CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'dead' END;
        PERFORM pgsched._finish(v_job, v_state, v_now, fail.error);
        RETURN v_state::text;
    END IF;
    RETURN 'lease_lost';
END
$$;


-- functions/heartbeat.sql
-- heartbeat
-- contract: extends the lease of each (job_id, token) pair that still holds
-- its lease, in one statement for all of a worker's running jobs. Returns one
-- row per input job: whether the lease is still held (false: the job was
-- expired, taken over or finished elsewhere, and its result must be
-- discarded) and whether cancellation was requested. Rows another statement
-- has locked right now (the worker's own completion of that job, a cancel)
-- are skipped rather than waited for, so heartbeats never deadlock with
-- completions; such a job still counts as held when its token is current in
-- this statement's snapshot, and the next heartbeat extends it.
CREATE OR REPLACE FUNCTION pgsched.heartbeat(
    job_ids bigint[],
    tokens  bigint[],
    lease   interval,
    worker  text        DEFAULT NULL,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, held boolean, cancel_requested boolean)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_scope text := pgsched._tenant_scope();
BEGIN
    IF heartbeat.worker IS NOT NULL THEN
        UPDATE pgsched.workers w
        SET last_seen = v_now, running = coalesce(pg_catalog.cardinality(heartbeat.job_ids), 0)
        WHERE w.name = heartbeat.worker;
    END IF;

    RETURN QUERY
    WITH input AS (
        SELECT u.id, u.token FROM unnest(heartbeat.job_ids, heartbeat.tokens) AS u(id, token)
    ), current AS MATERIALIZED (
        SELECT j.id, j.shard, j.cancel_requested_at IS NOT NULL AS cancel_requested
        FROM pgsched.jobs j
        JOIN input u ON j.id = u.id AND j.lease_token = u.token
        WHERE j.state = 'running' AND (v_scope IS NULL OR j.tenant = v_scope)
    ), locked AS MATERIALIZED (
        SELECT j.id, j.shard
        FROM pgsched.jobs j
        JOIN input u ON j.id = u.id AND j.lease_token = u.token
        WHERE j.state = 'running' AND (v_scope IS NULL OR j.tenant = v_scope)
        FOR UPDATE OF j SKIP LOCKED
    ), extended AS (
        UPDATE pgsched.jobs j
        SET lease_expires_at = v_now + heartbeat.lease
        FROM locked l
        WHERE j.id = l.id AND j.shard = l.shard
        RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
    )
    SELECT u.id, e.id IS NOT NULL OR c.id IS NOT NULL, coalesce(e.cancel_requested, c.cancel_requested, false)
    FROM input u
    LEFT JOIN extended e ON e.id = u.id
    LEFT JOIN current c ON c.id = u.id;
END
$$;


-- functions/maintain.sql
-- maintain
-- contract: the housekeeping that keeps tables small and bounded, safe to run
-- from any number of processes at once (they take turns on a
-- transaction-scoped advisory lock, so it also works through PgBouncer):
-- creates day partitions of job_history, job_events and queue_minutes from yesterday to
-- partitions_ahead days ahead, and for any day whose rows wait in a default
-- partition; drops the partitions older than their retention; forgets
-- idempotency keys whose retention ran out and workers unseen for a day.
-- Returns what it did as one JSON object.
CREATE OR REPLACE FUNCTION pgsched.maintain(p_now timestamptz DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_today date := (v_now AT TIME ZONE 'UTC')::date;
    v_config pgsched.config;
    v_created integer := 0;
    v_dropped text[] := '{}';
    v_keys integer;
    v_workers integer;
    v_part record;
    v_retention interval;
    v_lock_timeout text;
    v_day date;
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('pgsched.maintain')) THEN
        RETURN pg_catalog.jsonb_build_object('skipped', 'another maintain() is running');
    END IF;
    SELECT * INTO v_config FROM pgsched.config;

    -- Rows written while their day had no partition (maintain() did not run
    -- for a while, or a caller passed a time outside the window) wait in the
    -- default partitions; give their days partitions too, so they are filed
    -- and retention reaches them. Normally the default partitions are empty.
    FOR v_day IN SELECT DISTINCT (h.finished_at AT TIME ZONE 'UTC')::date FROM pgsched.job_history_default h LOOP
        IF pgsched._ensure_day_partition('job_history', v_day) THEN v_created := v_created + 1; END IF;
    END LOOP;
    FOR v_day IN SELECT DISTINCT (e.at AT TIME ZONE 'UTC')::date FROM pgsched.job_events_default e LOOP
        IF pgsched._ensure_day_partition('job_events', v_day) THEN v_created := v_created + 1; END IF;
    END LOOP;
    FOR v_day IN SELECT DISTINCT (m.minute AT TIME ZONE 'UTC')::date FROM pgsched.queue_minutes_default m LOOP
        IF pgsched._ensure_day_partition('queue_minutes', v_day) THEN v_created := v_created + 1; END IF;
    END LOOP;

    FOR d IN -1 .. v_config.partitions_ahead LOOP
        IF pgsched._ensure_day_partition('job_history', v_today + d) THEN v_created := v_created + 1; END IF;
        IF pgsched._ensure_day_partition('job_events', v_today + d) THEN v_created := v_created + 1; END IF;
        IF pgsched._ensure_day_partition('queue_minutes', v_today + d) THEN v_created := v_created + 1; END IF;
    END LOOP;

    -- A partition goes when its whole day is older than the retention.
    FOR v_part IN
        SELECT c.relname, p.relname AS parent,
               pg_catalog.to_date(pg_catalog.right(c.relname, 8), 'YYYYMMDD') AS day
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
        JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
        JOIN pg_catalog.pg_namespace n ON n.oid = p.relnamespace
        WHERE n.nspname = 'pgsched' AND p.relname IN ('job_history', 'job_events', 'queue_minutes')
          AND c.relname ~ '_p[0-9]{8}$'
    LOOP
        v_retention := CASE v_part.parent WHEN 'job_history' THEN v_config.history_retention
                                          WHEN 'queue_minutes' THEN v_config.queue_history_retention
                                          ELSE v_config.events_retention END;
        IF ((v_part.day + 1)::timestamp AT TIME ZONE 'UTC') <= v_now - v_retention THEN
            -- Dropping a partition locks its parent for a moment; never queue
            -- behind a long reader, try again at the next run instead.
            v_lock_timeout := pg_catalog.current_setting('lock_timeout');
            BEGIN
                PERFORM pg_catalog.set_config('lock_timeout', '2s', true);
                EXECUTE pg_catalog.format('DROP TABLE pgsched.%I', v_part.relname);
                v_dropped := v_dropped || v_part.relname::text;
            EXCEPTION WHEN lock_not_available THEN
                RAISE NOTICE 'pgsched: % is busy; it will be dropped later', v_part.relname;
            END;
            PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
        END IF;
    END LOOP;

    WITH gone AS (
        DELETE FROM pgsched.idempotency_keys k
        WHERE (k.key, k.job_id) IN (SELECT k2.key, k2.job_id FROM pgsched.idempotency_keys k2
                                    WHERE k2.expires_at < v_now LIMIT 50000)
        RETURNING 1
    )
    SELECT pg_catalog.count(*) INTO v_keys FROM gone;

    DELETE FROM pgsched.workers w WHERE w.last_seen < v_now - interval '1 day';
    GET DIAGNOSTICS v_workers = ROW_COUNT;

    RETURN pg_catalog.jsonb_build_object(
        'partitions_created', v_created, 'partitions_dropped', pg_catalog.to_jsonb(v_dropped),
        'idempotency_keys_pruned', v_keys, 'workers_pruned', v_workers);
END
$$;


-- functions/pause_queue.sql
-- pause_queue
-- contract: stops claims from a queue (jobs can still be enqueued) until
-- resume_queue(); takes effect at each worker's next claim. Returns true.
-- Refused for a session confined to a tenant.
CREATE OR REPLACE FUNCTION pgsched.pause_queue(queue text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT pgsched._check_unconfined('pause a queue (queues are shared by every tenant)');
    INSERT INTO pgsched.queues AS q (name, paused, updated_at)
    VALUES (pause_queue.queue, true, pg_catalog.now())
    ON CONFLICT (name) DO UPDATE SET paused = true, updated_at = EXCLUDED.updated_at
    RETURNING true
$$;


-- functions/pause_schedule.sql
-- pause_schedule
-- contract: stops a schedule from firing (its not-yet-due occurrences are
-- withdrawn at the next scan) until resume_schedule(). Returns whether the
-- schedule exists (for a session confined to a tenant: one of its tenant).
CREATE OR REPLACE FUNCTION pgsched.pause_schedule(name text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    WITH changed AS (
        UPDATE pgsched.schedules s SET enabled = false
        WHERE s.name = pause_schedule.name AND pgsched._tenant_visible(s.tenant)
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM changed)
$$;


-- functions/promote_due.sql
-- promote_due
-- contract: makes scheduled jobs whose run_at has come 'available' and wakes
-- workers of their queues (one NOTIFY per queue). Reads only due rows of the
-- scheduled index, so a backlog of far-future jobs costs nothing. Returns the
-- number promoted (at most p_limit; call again while it is p_limit).
--
-- Occurrences of recurring schedules (docs/schedules.md) first meet the
-- misfire policy when they are missed (due more than misfire_grace ago, as
-- nothing promoted them in time): 'skip' drops every missed one, 'latest'
-- keeps the most recent missed one, 'all' the misfire_cap most recent missed
-- ones; on-time occurrences never count against the cap and are never
-- dropped by it. A missed occurrence is decided once (its occurrence row says
-- 'misfire_fired' or 'skipped_misfire'), and, while the schedule is enabled,
-- not before it is expanded up to now, so the policy sees the whole missed
-- window. Then the
-- concurrency policy, when another run of the schedule is queued or running:
-- 'allow' promotes anyway; under 'skip', 'queue' and 'replace' the catch-up
-- runs ('misfire_fired') go one after another, each waiting for the previous
-- one, and are never skipped or replaced; the first on-time occurrence due
-- during catch-up waits behind it ('queued') and runs next. Otherwise 'skip'
-- cancels the occurrence, 'queue' keeps one occurrence waiting and skips the
-- rest, 'replace' cancels the previous run and promotes this one. A waiting
-- occurrence keeps its run_at (its fire time, ctx.scheduled_at) and is looked
-- at again at every call. Each decision is recorded in
-- pgsched.schedule_occurrences.
CREATE OR REPLACE FUNCTION pgsched.promote_due(
    p_now   timestamptz DEFAULT NULL,
    p_limit integer     DEFAULT 10000,
    p_shard integer     DEFAULT NULL
)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_count integer;
    v_queues text[];
    v_occ record;
    v_policy text;
    v_sched record;
    v_later integer;
    v_skip text;
    v_busy boolean;
    v_job pgsched.jobs;
    v_prev record;
    v_decision text;
    v_waiting text[] := '{}';
BEGIN
    WITH due AS MATERIALIZED (
        SELECT j.id, j.shard
        FROM pgsched.jobs j
        WHERE j.state = 'scheduled' AND j.run_at <= v_now AND j.schedule IS NULL
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.run_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), promoted AS (
        UPDATE pgsched.jobs j
        SET state = 'available'
        FROM due
        WHERE j.id = due.id AND j.shard = due.shard AND j.state = 'scheduled' AND j.run_at <= v_now
        RETURNING j.queue
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT p.queue)
    INTO v_count, v_queues
    FROM promoted p;

    -- Schedule occurrences: few per tick, one at a time in due order.
    FOR v_occ IN
        SELECT j.id, j.shard, j.schedule, j.run_at, j.queue
        FROM pgsched.jobs j
        WHERE j.state = 'scheduled' AND j.run_at <= v_now AND j.schedule IS NOT NULL
          AND (p_shard IS NULL OR j.shard = p_shard)
        ORDER BY j.run_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        -- A later occurrence of a schedule already found waiting waits too (catch-up, or queued).
        SELECT o.decision INTO v_decision FROM pgsched.schedule_occurrences o
        WHERE o.schedule = v_occ.schedule AND o.fire_at = v_occ.run_at AND o.job_id = v_occ.id;
        IF v_occ.schedule = ANY(v_waiting) AND v_decision IN ('misfire_fired', 'queued') THEN
            CONTINUE;
        END IF;
        SELECT s.concurrency, s.misfire_policy, s.misfire_cap, s.misfire_grace, s.expanded_until, s.enabled
        INTO v_sched
        FROM pgsched.schedules s WHERE s.name = v_occ.schedule;
        v_policy := coalesce(v_sched.concurrency, 'allow');

        IF v_decision = 'fire' AND v_occ.run_at < v_now - v_sched.misfire_grace THEN
            IF v_sched.enabled AND (v_sched.expanded_until IS NULL OR v_sched.expanded_until < v_now) THEN
                CONTINUE;  -- not expanded up to now: decide once the whole missed window is known
            END IF;
            -- Later missed occurrences still to run (on-time or queued ones do not count).
            SELECT pg_catalog.count(*) INTO v_later
            FROM pgsched.jobs w
            JOIN pgsched.schedule_occurrences o
              ON o.schedule = w.schedule AND o.fire_at = w.run_at AND o.job_id = w.id
            WHERE w.schedule = v_occ.schedule AND w.state IN ('scheduled', 'available', 'running')
              AND w.run_at < v_now - v_sched.misfire_grace AND (w.run_at, w.id) > (v_occ.run_at, v_occ.id)
              AND o.decision IN ('fire', 'misfire_fired');
            IF v_sched.misfire_policy = 'skip'
               OR (v_sched.misfire_policy = 'latest' AND v_later > 0)
               OR (v_sched.misfire_policy = 'all' AND v_later >= v_sched.misfire_cap) THEN
                v_skip := pg_catalog.format('misfire policy %s: due at %s, missed by more than %s',
                                            v_sched.misfire_policy, v_occ.run_at, v_sched.misfire_grace);
                DELETE FROM pgsched.jobs j
                WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
                RETURNING j.* INTO v_job;
                IF FOUND THEN
                    PERFORM pgsched._finish(v_job, 'cancelled', v_now, 'skipped: ' || v_skip);
                    UPDATE pgsched.schedule_occurrences o
                    SET decision = 'skipped_misfire', decided_at = v_now, reason = v_skip
                    WHERE o.schedule = v_occ.schedule AND o.fire_at = v_occ.run_at AND o.job_id = v_occ.id;
                END IF;
                CONTINUE;
            END IF;
            v_decision := 'misfire_fired';
            UPDATE pgsched.schedule_occurrences o
            SET decision = 'misfire_fired', decided_at = v_now,
                reason = pg_catalog.format('missed (due %s, nothing promoted it in time); misfire policy %s',
                                           v_occ.run_at, v_sched.misfire_policy)
            WHERE o.schedule = v_occ.schedule AND o.fire_at = v_occ.run_at AND o.job_id = v_occ.id;
        END IF;

        v_busy := v_policy <> 'allow' AND EXISTS (
            SELECT 1 FROM pgsched.jobs o
            WHERE o.schedule = v_occ.schedule AND o.id <> v_occ.id AND o.state IN ('available', 'running'));

        IF NOT v_busy THEN
            UPDATE pgsched.jobs j SET state = 'available'
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled';
            v_queues := pg_catalog.array_append(v_queues, v_occ.queue);
            v_count := v_count + 1;
        ELSIF v_decision IN ('misfire_fired', 'queued') THEN
            -- Catch-up goes one run after another; a queued occurrence waits its turn.
            v_waiting := pg_catalog.array_append(v_waiting, v_occ.schedule);
        ELSIF v_policy = 'queue' OR EXISTS (
                SELECT 1 FROM pgsched.jobs w
                JOIN pgsched.schedule_occurrences o
                  ON o.schedule = w.schedule AND o.fire_at = w.run_at AND o.job_id = w.id
                WHERE w.schedule = v_occ.schedule AND w.id <> v_occ.id
                  AND w.state IN ('scheduled', 'available', 'running') AND o.decision = 'misfire_fired') THEN
            -- Queue, or catch-up in progress: one occurrence waits, the others are skipped.
            IF EXISTS (
                SELECT 1 FROM pgsched.jobs w
                JOIN pgsched.schedule_occurrences o
                  ON o.schedule = w.schedule AND o.fire_at = w.run_at AND o.job_id = w.id
                WHERE w.schedule = v_occ.schedule AND w.id <> v_occ.id AND w.state = 'scheduled'
                  AND o.decision = 'queued') THEN
                DELETE FROM pgsched.jobs j
                WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
                RETURNING j.* INTO v_job;
                IF FOUND THEN
                    PERFORM pgsched._finish(v_job, 'cancelled', v_now,
                        'skipped: one occurrence of this schedule is already queued');
                    UPDATE pgsched.schedule_occurrences o
                    SET decision = 'skipped_overlap', decided_at = v_now,
                        reason = pg_catalog.format('concurrency policy %s: another occurrence is already waiting',
                                                   v_policy)
                    WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
                END IF;
            ELSE
                UPDATE pgsched.schedule_occurrences o
                SET decision = 'queued', decided_at = v_now,
                    reason = pg_catalog.format('concurrency policy %s: waiting for the previous run%s', v_policy,
                                               CASE WHEN v_policy = 'queue' THEN '' ELSE ' (catch-up in progress)' END)
                WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
                v_waiting := pg_catalog.array_append(v_waiting, v_occ.schedule);
            END IF;
        ELSIF v_policy = 'skip' THEN
            DELETE FROM pgsched.jobs j
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled'
            RETURNING j.* INTO v_job;
            IF FOUND THEN
                PERFORM pgsched._finish(v_job, 'cancelled', v_now,
                    'skipped: the previous run of this schedule was still going');
                UPDATE pgsched.schedule_occurrences o
                SET decision = 'skipped_overlap', decided_at = v_now,
                    reason = 'concurrency policy skip: previous run still going'
                WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
            END IF;
        ELSE  -- replace
            FOR v_prev IN
                SELECT o.id, o.shard FROM pgsched.jobs o
                WHERE o.schedule = v_occ.schedule AND o.id <> v_occ.id AND o.state IN ('available', 'running')
                ORDER BY o.id
            LOOP
                -- Not started yet: filed as cancelled with the reason; running: asked to stop.
                DELETE FROM pgsched.jobs j
                WHERE j.id = v_prev.id AND j.shard = v_prev.shard AND j.state = 'available'
                RETURNING j.* INTO v_job;
                IF FOUND THEN
                    PERFORM pgsched._finish(v_job, 'cancelled', v_now, pg_catalog.format(
                        'replaced by the occurrence due at %s (concurrency policy replace)', v_occ.run_at));
                ELSE
                    UPDATE pgsched.jobs j SET cancel_requested_at = coalesce(j.cancel_requested_at, v_now)
                    WHERE j.id = v_prev.id AND j.shard = v_prev.shard AND j.state = 'running'
                    RETURNING j.* INTO v_job;
                    IF FOUND THEN
                        PERFORM pgsched._event(v_job.id, v_now, 'cancel_requested', v_job.attempt,
                                               v_job.leased_by, v_job.lease_token);
                    END IF;
                END IF;
            END LOOP;
            UPDATE pgsched.jobs j SET state = 'available'
            WHERE j.id = v_occ.id AND j.shard = v_occ.shard AND j.state = 'scheduled';
            UPDATE pgsched.schedule_occurrences o
            SET decision = 'replaced_previous', decided_at = v_now,
                reason = 'concurrency policy replace: previous run cancelled'
            WHERE o.schedule = v_occ.schedule AND o.job_id = v_occ.id;
            v_queues := pg_catalog.array_append(v_queues, v_occ.queue);
            v_count := v_count + 1;
        END IF;
    END LOOP;

    PERFORM pg_catalog.pg_notify('pgsched_jobs', q) FROM (SELECT DISTINCT q FROM unnest(v_queues) q) d;
    RETURN v_count;
END
$$;


-- functions/register_tasks.sql
-- register_tasks
-- contract: upserts task policies from a JSON array of objects with keys
-- name (required), queue, max_attempts, backoff_base, backoff_max,
-- backoff_jitter (seconds). Workers call it at start with the tasks they
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
    INSERT INTO pgsched.tasks AS t (name, queue, max_attempts, backoff_base, backoff_max, backoff_jitter, updated_at)
    SELECT e->>'name', coalesce(e->>'queue', 'default'), (e->>'max_attempts')::integer,
           pg_catalog.make_interval(secs => (e->>'backoff_base')::double precision),
           pg_catalog.make_interval(secs => (e->>'backoff_max')::double precision),
           (e->>'backoff_jitter')::real, pg_catalog.now()
    FROM pg_catalog.jsonb_array_elements(register_tasks.tasks) e
    ON CONFLICT (name) DO UPDATE
    SET queue = EXCLUDED.queue, max_attempts = EXCLUDED.max_attempts, backoff_base = EXCLUDED.backoff_base,
        backoff_max = EXCLUDED.backoff_max, backoff_jitter = EXCLUDED.backoff_jitter, updated_at = EXCLUDED.updated_at
    -- A session confined to a tenant adds tasks but never changes the policy
    -- of a task every tenant shares.
    WHERE pgsched._tenant_scope() IS NULL
      AND (t.queue, t.max_attempts, t.backoff_base, t.backoff_max, t.backoff_jitter)
          IS DISTINCT FROM (EXCLUDED.queue, EXCLUDED.max_attempts, EXCLUDED.backoff_base,
                            EXCLUDED.backoff_max, EXCLUDED.backoff_jitter);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;


-- functions/release.sql
-- release
-- contract: hands running jobs back at once (a worker shutting down before
-- they finished), each under its fencing token, without counting a failure.
-- Returns one row per job with its new state or 'lease_lost'. Jobs are
-- visited in id order.
CREATE OR REPLACE FUNCTION pgsched.release(
    job_ids bigint[],
    tokens  bigint[],
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (job_id bigint, outcome text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
BEGIN
    RETURN QUERY
    SELECT u.id, pgsched._put_back(u.id, u.token, NULL, 'released', v_now)
    FROM unnest(release.job_ids, release.tokens) AS u(id, token)
    ORDER BY u.id;
END
$$;


-- functions/remove_schedule.sql
-- remove_schedule
-- contract: deletes a schedule and withdraws its occurrences that have not
-- started (queued ones leave without running; running ones finish). Returns
-- how many occurrences were withdrawn, or NULL when no such schedule exists
-- (also for another tenant's schedule when the session is confined to one).
CREATE OR REPLACE FUNCTION pgsched.remove_schedule(name text, p_now timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_count integer;
BEGIN
    DELETE FROM pgsched.schedules s WHERE s.name = remove_schedule.name AND pgsched._tenant_visible(s.tenant);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_count := pgsched._withdraw(remove_schedule.name, '-infinity', v_now, 'schedule removed');
    RETURN v_count;
END
$$;


-- functions/resume_queue.sql
-- resume_queue
-- contract: lets workers claim from a paused queue again and wakes them.
-- Returns whether the queue had been paused. Refused for a session confined
-- to a tenant.
CREATE OR REPLACE FUNCTION pgsched.resume_queue(queue text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    PERFORM pgsched._check_unconfined('resume a queue (queues are shared by every tenant)');
    UPDATE pgsched.queues q SET paused = false, updated_at = pg_catalog.now()
    WHERE q.name = resume_queue.queue AND q.paused;
    IF FOUND THEN
        PERFORM pg_catalog.pg_notify('pgsched_jobs', resume_queue.queue);
        RETURN true;
    END IF;
    RETURN false;
END
$$;


-- functions/resume_schedule.sql
-- resume_schedule
-- contract: lets a paused schedule fire again from now on; the occurrences
-- that fell in the pause are not misfires, they are simply not run. Returns
-- whether the schedule exists (for a session confined to a tenant: one of
-- its tenant).
CREATE OR REPLACE FUNCTION pgsched.resume_schedule(name text, p_now timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
BEGIN
    UPDATE pgsched.schedules s
    SET enabled = true, expanded_until = v_now
    WHERE s.name = resume_schedule.name AND NOT s.enabled AND pgsched._tenant_visible(s.tenant);
    RETURN FOUND OR EXISTS (SELECT 1 FROM pgsched.schedules s
                            WHERE s.name = resume_schedule.name AND pgsched._tenant_visible(s.tenant));
END
$$;


-- functions/retry.sql
-- retry
-- contract: re-enqueues (redrives) a dead or cancelled job under its own id,
-- due now, with a fresh attempt budget (the task's max_attempts, else the
-- install default) on top of the attempts it used: the attempt counter keeps
-- growing across redrives. Its history rows stay. Returns
-- 'retried', 'active' (the job is queued or running already),
-- 'not_retryable' (it completed) or 'not_found' (also for a job of another
-- tenant when the session is confined to one, see _check_tenant).
CREATE OR REPLACE FUNCTION pgsched.retry(
    job_id bigint,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_last pgsched.job_history;
    v_id bigint;
    v_tenant text;
BEGIN
    -- This function bypasses row-level security, so it confines tenants itself.
    SELECT t.tenant INTO v_tenant
    FROM (SELECT j.tenant FROM pgsched.jobs j WHERE j.id = retry.job_id
          UNION ALL
          SELECT h.tenant FROM pgsched.job_history h WHERE h.id = retry.job_id) t
    LIMIT 1;
    IF FOUND THEN
        BEGIN
            PERFORM pgsched._check_tenant(v_tenant);
        EXCEPTION WHEN insufficient_privilege THEN
            RETURN 'not_found';
        END;
    END IF;

    IF EXISTS (SELECT 1 FROM pgsched.jobs j WHERE j.id = retry.job_id) THEN
        RETURN 'active';
    END IF;
    SELECT * INTO v_last
    FROM pgsched.job_history h
    WHERE h.id = retry.job_id
    ORDER BY h.finished_at DESC
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF v_last.state = 'completed' THEN
        RETURN 'not_retryable';
    END IF;

    -- The primary key (id, shard) makes a concurrent second redrive a no-op.
    INSERT INTO pgsched.jobs AS j
        (id, shard, queue, task, args, priority, run_at, idempotency_key, labels, tenant, created_at)
    VALUES (v_last.id, v_last.shard, v_last.queue, v_last.task, v_last.args, v_last.priority, v_now,
            v_last.idempotency_key, v_last.labels, v_last.tenant, v_last.created_at)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO v_id;
    IF v_id IS NULL THEN
        RETURN 'active';
    END IF;
    -- The insert trigger starts every job at attempt 0; carry the count on.
    UPDATE pgsched.jobs j
    SET attempt = v_last.attempt,
        max_attempts = least(v_last.attempt::bigint + j.max_attempts, 1000000)::integer
    WHERE j.id = v_id AND j.shard = v_last.shard;
    PERFORM pgsched._event(v_id, v_now, 'retried', v_last.attempt, NULL, NULL,
        pg_catalog.jsonb_build_object('previous_state', v_last.state));
    RETURN 'retried';
END
$$;


-- functions/scan_shard.sql
-- scan_shard
-- contract: one scanner pass over one shard it holds (fenced by owner and
-- epoch, see _hold_shard): expires dead workers' leases, promotes due jobs
-- (waking workers), and says when the shard's next scheduled job is due so the
-- scanner can sleep until exactly then: an occurrence still waiting after
-- promotion (for the previous run of its schedule) is looked at again a
-- second later. Raises PS409 when the lease is gone.
CREATE OR REPLACE FUNCTION pgsched.scan_shard(
    scanner text,
    shard   integer,
    epoch   bigint,
    p_now   timestamptz DEFAULT NULL
)
RETURNS TABLE (expired integer, promoted integer, next_due timestamptz, db_now timestamptz)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.now());
    v_expired integer;
    v_promoted integer;
    v_next timestamptz;
BEGIN
    PERFORM pgsched._hold_shard(scan_shard.scanner, scan_shard.shard, scan_shard.epoch, v_now);
    -- p_now itself (checked above; NULL means the same transaction clock).
    v_expired := pgsched.expire_leases(scan_shard.p_now, 1000, scan_shard.shard);
    v_promoted := pgsched.promote_due(scan_shard.p_now, 10000, scan_shard.shard);
    v_next := pgsched.next_due(scan_shard.shard);
    IF v_promoted < 10000 AND v_next <= v_now THEN
        v_next := v_now + interval '1 second';
    END IF;
    RETURN QUERY SELECT v_expired, v_promoted, v_next, pg_catalog.clock_timestamp();
END
$$;


-- functions/schedule_error.sql
-- schedule_error
-- contract: records that a schedule cannot be expanded (a cron expression
-- that does not parse or never fires) so operators see why, and marks this
-- version handled so scanners do not retry it in a loop. Fenced by the
-- scanner's lease like every scanner write.
CREATE OR REPLACE FUNCTION pgsched.schedule_error(
    scanner  text,
    shard    integer,
    epoch    bigint,
    schedule text,
    version  integer,
    error    text,
    p_now    timestamptz DEFAULT NULL
)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
    PERFORM pgsched._hold_shard(schedule_error.scanner, schedule_error.shard, schedule_error.epoch,
                                coalesce(pgsched._clock(p_now), pg_catalog.now()));
    UPDATE pgsched.schedules s
    SET last_error = schedule_error.error, expanded_version = s.version
    WHERE s.name = schedule_error.schedule AND s.version = schedule_error.version;
END
$$;


-- functions/snooze.sql
-- snooze
-- contract: puts a running job back to run at run_at, under its fencing
-- token, without counting a failed attempt. Returns 'scheduled' or
-- 'available', 'cancelled' if cancellation had been requested, or
-- 'lease_lost' for a stale token.
CREATE OR REPLACE FUNCTION pgsched.snooze(
    job_id bigint,
    token  bigint,
    run_at timestamptz,
    p_now  timestamptz DEFAULT NULL
)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    RETURN pgsched._put_back(snooze.job_id, snooze.token, snooze.run_at, 'snoozed',
                             coalesce(pgsched._clock(snooze.p_now), pg_catalog.now()));
END
$$;


-- functions/tg_config__before_update.sql
-- tg_config__before_update
-- contract: the shard count is fixed at install (the partitions of
-- pgsched.jobs and the shard leases were made for it): an UPDATE that
-- changes it is refused, for every role. The other settings are kept valid
-- by the table's CHECK constraints.
CREATE OR REPLACE FUNCTION pgsched.tg_config__before_update()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF NEW.shards IS DISTINCT FROM OLD.shards OR NEW.singleton IS DISTINCT FROM OLD.singleton THEN
        RAISE EXCEPTION 'pgsched: the shard count is fixed at install (% shards)', OLD.shards
            USING ERRCODE = 'feature_not_supported', SCHEMA = 'pgsched', TABLE = 'config', COLUMN = 'shards',
                  HINT = 'Install into a new database with pgsched migrate --shards N and move the jobs.';
    END IF;
    RETURN NEW;
END
$$;


-- functions/tg_jobs__before_insert.sql
-- tg_jobs__before_insert
-- contract: every row entering pgsched.jobs, by enqueue() or a plain INSERT,
-- gets its defaults, its validation and its wake-up here, so all paths behave
-- alike. A repeated idempotency key skips the row (INSERT 0 0) and keeps the
-- existing job; enqueue() then returns that job's id. A repeated key with
-- another task or other args raises PS422 (see _key_holder); a refused value
-- raises naming its column and value (see _check_job), not a partition.
--
-- Two triggers call it (30_triggers.sql). For a writer other than the
-- schema's owner (TG_ARGV[0] = 'untrusted': a plain INSERT by an
-- application) the database also assigns the id and stamps created_at,
-- whatever the INSERT said, and a schedule link is refused: only the owner's
-- functions (retry, the scanners' add_occurrences) set those. The shard, the
-- partition key, cannot change in a row trigger; pgsched_enqueue may name
-- only the columns a user chooses (90_grants.sql), so it comes from the
-- column default.
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__before_insert()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.now();
    v_limit integer;
    v_default_attempts integer;
BEGIN
    SELECT c.max_payload_bytes, c.default_max_attempts INTO v_limit, v_default_attempts FROM pgsched.config c;

    IF TG_ARGV[0] = 'untrusted' THEN
        IF NEW.schedule IS NOT NULL THEN
            RAISE EXCEPTION 'pgsched: schedule is set by the scanners, not by an INSERT'
                USING ERRCODE = 'insufficient_privilege', SCHEMA = 'pgsched', TABLE = 'jobs', COLUMN = 'schedule';
        END IF;
        -- A copied id would give two active rows one identity (on two shards).
        NEW.id := pg_catalog.nextval('pgsched.jobs_id_seq');
        NEW.created_at := v_now;
        -- Before the key is looked at, so another tenant's keys reveal nothing
        -- (row-level security checks the row itself after this trigger).
        IF NEW.idempotency_key IS NOT NULL THEN
            PERFORM pgsched._check_tenant(NEW.tenant);
        END IF;
    END IF;

    -- A new job starts from nothing, whatever the INSERT said.
    NEW.attempt := 0;
    NEW.lease_token := NULL;
    NEW.leased_by := NULL;
    NEW.lease_expires_at := NULL;
    NEW.started_at := NULL;
    NEW.cancel_requested_at := NULL;
    NEW.last_error := NULL;
    -- Occurrences of schedules always pass through promotion, which applies
    -- the schedule's overlap policy.
    NEW.state := CASE WHEN NEW.run_at <= v_now AND NEW.schedule IS NULL THEN 'available' ELSE 'scheduled' END;

    PERFORM pgsched._check_job(NEW.task, NEW.queue, NEW.args, NEW.priority, NEW.run_at, NEW.max_attempts,
                               NEW.idempotency_key, NEW.labels, NEW.tenant);
    PERFORM pgsched._check_payload(NEW.args, v_limit);

    IF NEW.max_attempts IS NULL THEN
        SELECT t.max_attempts INTO NEW.max_attempts FROM pgsched.tasks t WHERE t.name = NEW.task;
        NEW.max_attempts := coalesce(NEW.max_attempts, v_default_attempts);
    END IF;

    IF NEW.idempotency_key IS NOT NULL THEN
        -- The key row is the lock: a concurrent insert of the same key waits
        -- here for the first one's commit, then sees the conflict. A redrive
        -- of the same job (retry()) re-activates its own key; a key whose
        -- retention ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, tenant, job_id, shard, created_at)
        VALUES (NEW.idempotency_key, NEW.tenant, NEW.id, NEW.shard, v_now)
        ON CONFLICT (key, tenant) DO UPDATE
            SET job_id = NEW.id, shard = NEW.shard, created_at = v_now, expires_at = NULL
            WHERE k.job_id = NEW.id OR k.expires_at < v_now;
        IF NOT FOUND THEN
            IF NEW.schedule IS NULL THEN
                PERFORM pgsched._key_holder(NEW.idempotency_key, NEW.task, NEW.args, NULL, NEW.tenant);
            END IF;
            RETURN NULL;
        END IF;
    END IF;

    IF NEW.state = 'available' THEN
        -- Delivered at commit; identical notifications in one transaction
        -- are folded into one by PostgreSQL, so a batch sends one per queue.
        PERFORM pg_catalog.pg_notify('pgsched_jobs', NEW.queue);
    ELSE
        PERFORM pg_catalog.pg_notify('pgsched_scheduled', '');
    END IF;
    RETURN NEW;
END
$$;


-- functions/tg_schedules__before_write.sql
-- tg_schedules__before_write
-- contract: a schedule lives on the shard of its name; any change to what a
-- schedule fires (cron, zone, task, args, queue, policies, enabled...) bumps
-- its version, so the next scan withdraws the occurrences expanded under the
-- old version and expands the new one. Works for plain INSERT/UPDATE too,
-- which are refused what upsert_schedule refuses (_check_schedule)
-- (SECURITY DEFINER: pgsched_admin writes the table but not the helpers).
CREATE OR REPLACE FUNCTION pgsched.tg_schedules__before_write()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF TG_OP = 'INSERT' OR (NEW.cron, NEW.priority, NEW.max_attempts, NEW.labels, NEW.tenant, NEW.args)
                           IS DISTINCT FROM (OLD.cron, OLD.priority, OLD.max_attempts, OLD.labels, OLD.tenant, OLD.args) THEN
        PERFORM pgsched._check_schedule(NEW.cron, NEW.priority, NEW.max_attempts, NEW.labels, NEW.tenant, NEW.args);
    END IF;
    NEW.shard := pgsched._shard_for_key(NEW.name);
    IF TG_OP = 'INSERT' THEN
        NEW.version := 1;
        NEW.expanded_version := 0;
        NEW.expanded_until := NULL;
        RETURN NEW;
    END IF;
    IF NEW.name <> OLD.name THEN
        RAISE EXCEPTION 'pgsched: a schedule cannot be renamed; remove it and add it again'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF (NEW.cron, NEW.timezone, NEW.task, NEW.args, NEW.queue, NEW.priority, NEW.max_attempts, NEW.labels,
        NEW.tenant, NEW.gap_policy, NEW.overlap_policy, NEW.misfire_policy, NEW.misfire_cap, NEW.misfire_grace, NEW.concurrency,
        NEW.enabled, NEW.horizon)
       IS DISTINCT FROM
       (OLD.cron, OLD.timezone, OLD.task, OLD.args, OLD.queue, OLD.priority, OLD.max_attempts, OLD.labels,
        OLD.tenant, OLD.gap_policy, OLD.overlap_policy, OLD.misfire_policy, OLD.misfire_cap, OLD.misfire_grace, OLD.concurrency,
        OLD.enabled, OLD.horizon) THEN
        NEW.version := OLD.version + 1;
        NEW.updated_at := pg_catalog.now();
        NEW.last_error := NULL;
    END IF;
    RETURN NEW;
END
$$;


-- functions/unbind_tenant.sql
-- unbind_tenant
-- contract: removes the tenant binding of the login role `role`. It stays a
-- member of pgsched_tenant_scoped, so it is then confined to nothing (fails
-- closed) until it is bound again or that role is revoked from it. Only a
-- session that is not confined itself may unbind.
-- Returns the tenant it was bound to, or NULL.
CREATE OR REPLACE FUNCTION pgsched.unbind_tenant(role regrole)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_previous text;
BEGIN
    PERFORM pgsched._check_unconfined('unbind tenants');
    DELETE FROM pgsched.tenant_roles b WHERE b.role = unbind_tenant.role RETURNING b.tenant INTO v_previous;
    RETURN v_previous;
END
$$;


-- functions/upsert_schedule.sql
-- upsert_schedule
-- contract: creates the schedule `name`, or updates it when it exists (an
-- update that changes what it fires takes effect at the next scan: future
-- occurrences expanded under the old definition are withdrawn and replaced).
-- Returns the schedule's version afterwards. Refuses (with the reason) a
-- schedule that could never be expanded: see _check_schedule. A session
-- confined to a tenant writes only schedules of its tenant; a worker login
-- (without pgsched_admin) only schedules defined in code (see
-- _check_schedule_write).
CREATE OR REPLACE FUNCTION pgsched.upsert_schedule(
    name           text,
    cron           text,
    task           text,
    args           jsonb    DEFAULT '{}',
    timezone       text     DEFAULT 'UTC',
    queue          text     DEFAULT 'default',
    priority       integer  DEFAULT 0,
    max_attempts   integer  DEFAULT NULL,
    gap_policy     text     DEFAULT 'run',
    overlap_policy text     DEFAULT 'once',
    misfire_policy text     DEFAULT 'latest',
    misfire_cap    integer  DEFAULT 100,
    misfire_grace  interval DEFAULT '1 minute',
    concurrency    text     DEFAULT 'skip',
    enabled        boolean  DEFAULT true,
    horizon        interval DEFAULT '1 hour',
    labels         text[]   DEFAULT '{}',
    tenant         text     DEFAULT NULL,
    source         text     DEFAULT 'sql'
)
RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT pgsched._check_schedule_write(upsert_schedule.name, upsert_schedule.tenant,
                                         coalesce(upsert_schedule.source, 'sql'));
    SELECT pgsched._check_schedule(upsert_schedule.cron, upsert_schedule.priority, upsert_schedule.max_attempts,
                                   upsert_schedule.labels, upsert_schedule.tenant, upsert_schedule.args);
    INSERT INTO pgsched.schedules AS s
        (name, cron, task, args, timezone, queue, priority, max_attempts, gap_policy, overlap_policy,
         misfire_policy, misfire_cap, misfire_grace, concurrency, enabled, horizon, labels, tenant, source, shard)
    VALUES (upsert_schedule.name, upsert_schedule.cron, upsert_schedule.task, coalesce(upsert_schedule.args, '{}'),
            coalesce(upsert_schedule.timezone, 'UTC'), coalesce(upsert_schedule.queue, 'default'),
            coalesce(upsert_schedule.priority, 0), upsert_schedule.max_attempts,
            coalesce(upsert_schedule.gap_policy, 'run'), coalesce(upsert_schedule.overlap_policy, 'once'),
            coalesce(upsert_schedule.misfire_policy, 'latest'), coalesce(upsert_schedule.misfire_cap, 100),
            coalesce(upsert_schedule.misfire_grace, interval '1 minute'),
            coalesce(upsert_schedule.concurrency, 'skip'), coalesce(upsert_schedule.enabled, true),
            coalesce(upsert_schedule.horizon, interval '1 hour'), coalesce(upsert_schedule.labels, '{}'),
            upsert_schedule.tenant, coalesce(upsert_schedule.source, 'sql'), 0)
    ON CONFLICT (name) DO UPDATE
    SET cron = EXCLUDED.cron, task = EXCLUDED.task, args = EXCLUDED.args, timezone = EXCLUDED.timezone,
        queue = EXCLUDED.queue, priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
        gap_policy = EXCLUDED.gap_policy, overlap_policy = EXCLUDED.overlap_policy,
        misfire_policy = EXCLUDED.misfire_policy, misfire_cap = EXCLUDED.misfire_cap,
        misfire_grace = EXCLUDED.misfire_grace,
        concurrency = EXCLUDED.concurrency, enabled = EXCLUDED.enabled, horizon = EXCLUDED.horizon,
        labels = EXCLUDED.labels, tenant = EXCLUDED.tenant, source = EXCLUDED.source
    WHERE pgsched._tenant_visible(s.tenant)
    RETURNING s.version
$$;


-- 30_triggers.sql
-- pgsched: triggers. CREATE OR REPLACE, so a migration can apply this file whole.
--
-- Every row entering pgsched.jobs passes tg_jobs__before_insert, except rows
-- written by enqueue() and enqueue_many(), which do the same work set-based
-- and mark themselves with the transaction-local setting
-- pgsched.trusted_insert. The mark counts only for the schema's owner (those
-- functions run as the owner), so no other role can skip the trigger.
-- Writers other than the owner (plain INSERTs by applications) pass the
-- 'untrusted' trigger, which also assigns id, shard and created_at and
-- refuses a schedule link; CURRENT_USER in WHEN is the writer's role, before
-- the SECURITY DEFINER function switches to the owner.
DO $$
BEGIN
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__before_insert
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER <> %L)
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert('untrusted')
        $sql$, current_user);
    EXECUTE pg_catalog.format($sql$
        CREATE OR REPLACE TRIGGER tg_jobs__before_insert_owner
            BEFORE INSERT ON pgsched.jobs
            FOR EACH ROW
            WHEN (CURRENT_USER = %L
                  AND pg_catalog.current_setting('pgsched.trusted_insert', true) IS DISTINCT FROM 'on')
            EXECUTE FUNCTION pgsched.tg_jobs__before_insert('owner')
        $sql$, current_user);
END
$$;

CREATE OR REPLACE TRIGGER tg_schedules__before_write
    BEFORE INSERT OR UPDATE ON pgsched.schedules
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_schedules__before_write();

CREATE OR REPLACE TRIGGER tg_config__before_update
    BEFORE UPDATE ON pgsched.config
    FOR EACH ROW EXECUTE FUNCTION pgsched.tg_config__before_update();

-- Grants. New functions are executable by PUBLIC until revoked.
REVOKE EXECUTE ON FUNCTION pgsched._clock(timestamptz), pgsched._tenant_scope(), pgsched._check_unconfined(text),
    pgsched._check_schedule_write(text, text, text), pgsched.bind_tenant(regrole, text),
    pgsched.unbind_tenant(regrole), pgsched.tg_config__before_update() FROM PUBLIC;
REVOKE ALL ON pgsched.tenant_roles FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched._tenant_scope() TO pgsched_enqueue, pgsched_worker, pgsched_admin;
-- In the order of a fresh install (the worker's grant first).
REVOKE EXECUTE ON FUNCTION pgsched.upsert_schedule FROM pgsched_admin;
GRANT EXECUTE ON FUNCTION pgsched.upsert_schedule TO pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.upsert_schedule TO pgsched_admin;
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
