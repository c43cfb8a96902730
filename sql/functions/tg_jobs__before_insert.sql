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
-- whatever the INSERT said, and a schedule link and the command task are
-- refused (_check_command_task): only the owner's
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
        PERFORM pgsched._check_command_task(NEW.task, 'INSERT INTO pgsched.jobs');
        IF NEW.schedule IS NOT NULL THEN
            RAISE EXCEPTION 'pgsched: schedule is set by the scanners, not by an INSERT'
                USING ERRCODE = 'insufficient_privilege', SCHEMA = 'pgsched', TABLE = 'jobs', COLUMN = 'schedule';
        END IF;
        -- A copied id would give two active rows one identity (on two shards).
        NEW.id := pg_catalog.nextval('pgsched.jobs_id_seq');
        NEW.created_at := v_now;
        -- A session confined to a tenant inserts into it unless it names one.
        IF NEW.tenant IS NULL THEN
            NEW.tenant := nullif(pgsched._tenant_scope(), '');
        END IF;
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
    NEW.claimed_at := NULL;
    NEW.cancel_requested_at := NULL;
    NEW.last_error := NULL;
    -- Occurrences of schedules always pass through promotion, which applies
    -- the schedule's overlap policy.
    NEW.state := CASE WHEN NEW.run_at <= v_now AND NEW.schedule IS NULL THEN 'available' ELSE 'scheduled' END;

    PERFORM pgsched._check_job(NEW.task, NEW.queue, NEW.args, NEW.priority, NEW.run_at, NEW.max_attempts,
                               NEW.idempotency_key, NEW.labels, NEW.tenant);
    IF NEW.timeout IS NOT NULL OR NEW.concurrency_key IS NOT NULL THEN
        PERFORM pgsched._check_run_options(NEW.timeout, NEW.concurrency_key);
    END IF;
    PERFORM pgsched._check_payload(NEW.args, v_limit);
    IF NEW.trace_context IS NOT NULL THEN
        PERFORM pgsched._check_trace_context(NEW.trace_context);
    END IF;

    IF NEW.max_attempts IS NULL THEN
        SELECT t.max_attempts INTO NEW.max_attempts FROM pgsched.tasks t
        WHERE t.name = NEW.task AND (t.tenant IS NULL OR t.tenant = NEW.tenant)
        ORDER BY t.tenant NULLS LAST LIMIT 1;
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
