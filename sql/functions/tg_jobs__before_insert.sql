-- tg_jobs__before_insert
-- contract: every row entering pgsched.jobs, by enqueue() or a plain INSERT,
-- gets its defaults, its validation and its wake-up here, so all paths behave
-- alike. A repeated idempotency key skips the row (INSERT 0 0) and keeps the
-- existing job; enqueue() then returns that job's id.
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

    PERFORM pgsched._check_payload(NEW.args, v_limit);
    PERFORM pgsched._check_labels(NEW.labels);

    IF NEW.max_attempts IS NULL THEN
        SELECT t.max_attempts INTO NEW.max_attempts FROM pgsched.tasks t WHERE t.name = NEW.task;
        NEW.max_attempts := coalesce(NEW.max_attempts, v_default_attempts);
    END IF;

    IF NEW.idempotency_key IS NOT NULL THEN
        -- The key row is the lock: a concurrent insert of the same key waits
        -- here for the first one's commit, then sees the conflict. A redrive
        -- of the same job (retry()) re-activates its own key; a key whose
        -- retention ran out is free again.
        INSERT INTO pgsched.idempotency_keys AS k (key, job_id, shard, created_at)
        VALUES (NEW.idempotency_key, NEW.id, NEW.shard, v_now)
        ON CONFLICT (key) DO UPDATE
            SET job_id = NEW.id, shard = NEW.shard, created_at = v_now, expires_at = NULL
            WHERE k.job_id = NEW.id OR k.expires_at < v_now;
        IF NOT FOUND THEN
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
