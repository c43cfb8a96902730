-- tg_jobs__dispatch
-- contract: stamps a job's place in the claim order from its queue's policy
-- whenever the row is written or its run_at, priority, queue or tenant
-- changes (never by a sweep of waiting rows): dispatch_at = run_at under
-- strict priority (dispatch_rank = -priority), or run_at - priority x aging
-- under aging (dispatch_rank = 0), so a job due at run_at with priority p
-- passes a job of priority q due (q - p) x aging later: one priority step per
-- aging interval waited, fixed once, read by one index scan; never earlier
-- than now - 1,000,000 x aging (the priority cap). Under tenant
-- fairness dispatch_group is '*' and run_at gives way to a virtual time
-- (_fair_stamp: the tenants' weighted shares), so the claim's index scan
-- serves tenants in proportion to their weights with no per-tenant reads. A new job without labels gets its task's
-- default labels, else its queue's (worker pools, docs/dispatch.md).
-- enqueue() and enqueue_many() stamp the same values in their INSERT, so
-- their rows skip it (30_triggers.sql); a change here must be made there.
CREATE OR REPLACE FUNCTION pgsched.tg_jobs__dispatch()
RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_aging interval;
    v_fair boolean;
    v_weights jsonb;
    v_labels text[];
    v_task_labels text[];
BEGIN
    SELECT q.aging, q.tenant_fairness, q.labels, q.tenant_weights INTO v_aging, v_fair, v_labels, v_weights
    FROM pgsched.queues q WHERE q.name = NEW.queue;
    IF TG_OP = 'INSERT' AND NEW.labels = '{}' THEN
        SELECT t.labels INTO v_task_labels FROM pgsched.tasks t
        WHERE t.name = NEW.task AND (t.tenant IS NULL OR t.tenant = NEW.tenant)
        ORDER BY t.tenant NULLS LAST LIMIT 1;
        NEW.labels := coalesce(v_task_labels, v_labels, '{}');
    END IF;
    NEW.dispatch_group := CASE WHEN v_fair THEN '*' ELSE '' END;
    IF v_fair THEN
        -- A place in the tenants' shared line (virtual time), then priority as below.
        NEW.dispatch_rank := CASE WHEN v_aging IS NULL THEN -NEW.priority ELSE 0 END;
        NEW.dispatch_at := pgsched._fair_stamp(NEW.queue, NEW.tenant, v_weights, NEW.run_at, v_aging)
                           - coalesce(NEW.priority * v_aging, interval '0');
    ELSIF v_aging IS NULL THEN
        NEW.dispatch_rank := -NEW.priority;
        NEW.dispatch_at := NEW.run_at;
    ELSE
        -- |priority| <= 1e6 and aging <= 1 day: at most 2738 years either way.
        -- Aged at most to the priority cap: a run_at backdated by years ranks
        -- with a fresh job of priority 1,000,000, never before it.
        NEW.dispatch_rank := 0;
        NEW.dispatch_at := GREATEST(NEW.run_at - NEW.priority * v_aging, pg_catalog.now() - 1000000 * v_aging);
    END IF;
    RETURN NEW;
END
$$;
