-- configure_queue
-- contract: sets the dispatch policy of queue `name` (docs/dispatch.md) and
-- returns it. Every setting defaults to NULL = left as it is; p_clear names
-- the settings to remove ('concurrency', 'key_concurrency', 'rate',
-- 'key_rate', 'aging', 'labels', or 'all'; tenant_fairness is turned off with
-- false). concurrency: at most N jobs of the queue leased at once across
-- workers (key_concurrency: per concurrency_key); rate / rate_period: at most
-- N starts per period (key_rate: per key, same period); aging: one priority
-- step per interval waited (NULL: strict priority); tenant_fairness: claims
-- share the queue between tenants, in proportion to tenant_weights (a JSON
-- object tenant -> weight, 0.001 <= weight <= 1000; missing tenants weigh 1;
-- replaced whole, cleared with p_clear 'tenant_weights'; giving them turns
-- fairness on unless tenant_fairness says otherwise), work-conserving;
-- labels: default labels of the queue's jobs.
-- Returns the settings as JSON (durations in seconds) with `restamped`.
-- A bad value raises invalid_parameter_value and changes nothing.
--
-- Aging, fairness and weights order the claim index, stamped when a job is
-- written (tg_jobs__dispatch): changing one re-stamps the queue's waiting jobs
-- once, here (`restamped` says how many), so claims never sort the backlog.
-- Admin only; refused for a session confined to a tenant.
DROP FUNCTION IF EXISTS pgsched.configure_queue(text, integer, integer, interval, interval, boolean, integer, integer,
                                               text[], text[]);
CREATE OR REPLACE FUNCTION pgsched.configure_queue(
    name            text,
    concurrency     integer  DEFAULT NULL,
    rate            integer  DEFAULT NULL,
    rate_period     interval DEFAULT NULL,
    aging           interval DEFAULT NULL,
    tenant_fairness boolean  DEFAULT NULL,
    key_concurrency integer  DEFAULT NULL,
    key_rate        integer  DEFAULT NULL,
    labels          text[]   DEFAULT NULL,
    p_clear         text[]   DEFAULT NULL,
    tenant_weights  jsonb    DEFAULT NULL
)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    v_clear text[] := coalesce(p_clear, '{}');
    v_old pgsched.queues;
    v_new pgsched.queues;
    v_bad text;
    v_restamped bigint := 0;
BEGIN
    PERFORM pgsched._check_unconfined('configure a queue (queues are shared by every tenant)');
    SELECT c INTO v_bad FROM unnest(v_clear) c
    WHERE c IS NULL OR c NOT IN ('concurrency', 'key_concurrency', 'rate', 'key_rate', 'aging', 'labels',
                                 'tenant_weights', 'all');
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: cannot clear %: p_clear takes concurrency, key_concurrency, rate, key_rate, aging, labels, tenant_weights or all',
            coalesce(pgsched._shown(v_bad), 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.name IS NULL OR configure_queue.name !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$' THEN
        RAISE EXCEPTION 'pgsched: % is not a valid queue name', coalesce(pgsched._shown(configure_queue.name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.concurrency < 1 OR configure_queue.key_concurrency < 1
       OR configure_queue.concurrency > 1000000 OR configure_queue.key_concurrency > 1000000 THEN
        RAISE EXCEPTION 'pgsched: a concurrency limit is between 1 and 1000000 (clear it with p_clear)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.rate < 1 OR configure_queue.key_rate < 1
       OR configure_queue.rate > 10000 OR configure_queue.key_rate > 10000 THEN
        RAISE EXCEPTION 'pgsched: a rate is between 1 and 10000 starts per period (clear it with p_clear)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.rate_period < interval '1 millisecond' OR configure_queue.rate_period > interval '1 day' THEN
        RAISE EXCEPTION 'pgsched: rate_period % is not between 1 millisecond and 1 day', configure_queue.rate_period
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.aging < interval '1 millisecond' OR configure_queue.aging > interval '1 day' THEN
        RAISE EXCEPTION 'pgsched: aging % is not between 1 millisecond and 1 day (clear it for strict priority)',
            configure_queue.aging USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF configure_queue.labels IS NOT NULL THEN
        PERFORM pgsched._check_labels(configure_queue.labels);
    END IF;
    IF configure_queue.tenant_weights IS NOT NULL THEN
        IF pg_catalog.jsonb_typeof(configure_queue.tenant_weights) <> 'object' THEN
            RAISE EXCEPTION 'pgsched: tenant_weights must be a JSON object of tenant -> weight, not %',
                    pgsched._shown(configure_queue.tenant_weights::text)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT pg_catalog.format('%s: %s', pgsched._shown(w.key), w.value) INTO v_bad
        FROM pg_catalog.jsonb_each(configure_queue.tenant_weights) AS w(key, value)
        WHERE pg_catalog.jsonb_typeof(w.value) <> 'number' OR w.value::text::numeric < 0.001
           OR w.value::text::numeric > 1000
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'pgsched: tenant weight %: a weight is a number from 0.001 to 1000', v_bad
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;

    INSERT INTO pgsched.queues AS q (name) VALUES (configure_queue.name) ON CONFLICT ON CONSTRAINT queues_pkey DO NOTHING;
    SELECT * INTO v_old FROM pgsched.queues q WHERE q.name = configure_queue.name FOR UPDATE;
    v_new := v_old;
    IF 'all' = ANY (v_clear) THEN
        v_clear := ARRAY['concurrency', 'key_concurrency', 'rate', 'key_rate', 'aging', 'labels', 'tenant_weights'];
        v_new.tenant_fairness := false;
    END IF;
    v_new.concurrency := CASE WHEN 'concurrency' = ANY (v_clear) THEN NULL
                              ELSE coalesce(configure_queue.concurrency, v_old.concurrency) END;
    v_new.key_concurrency := CASE WHEN 'key_concurrency' = ANY (v_clear) THEN NULL
                                  ELSE coalesce(configure_queue.key_concurrency, v_old.key_concurrency) END;
    v_new.rate := CASE WHEN 'rate' = ANY (v_clear) THEN NULL ELSE coalesce(configure_queue.rate, v_old.rate) END;
    v_new.key_rate := CASE WHEN 'key_rate' = ANY (v_clear) THEN NULL
                           ELSE coalesce(configure_queue.key_rate, v_old.key_rate) END;
    v_new.rate_period := CASE WHEN v_new.rate IS NULL AND v_new.key_rate IS NULL THEN NULL
                              ELSE coalesce(configure_queue.rate_period, v_old.rate_period) END;
    v_new.aging := CASE WHEN 'aging' = ANY (v_clear) THEN NULL ELSE coalesce(configure_queue.aging, v_old.aging) END;
    -- Weights given turn fairness on, unless the call says otherwise.
    v_new.tenant_fairness := coalesce(configure_queue.tenant_fairness,
                                      CASE WHEN configure_queue.tenant_weights IS NOT NULL THEN true END,
                                      v_new.tenant_fairness);
    v_new.labels := CASE WHEN 'labels' = ANY (v_clear) THEN NULL ELSE coalesce(configure_queue.labels, v_old.labels) END;
    v_new.tenant_weights := CASE WHEN 'tenant_weights' = ANY (v_clear) THEN NULL
                                 ELSE coalesce(configure_queue.tenant_weights, v_old.tenant_weights) END;
    IF configure_queue.rate_period IS NOT NULL AND v_new.rate IS NULL AND v_new.key_rate IS NULL THEN
        RAISE EXCEPTION 'pgsched: rate_period without a rate or key_rate' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (v_new.rate IS NOT NULL OR v_new.key_rate IS NOT NULL) AND v_new.rate_period IS NULL THEN
        RAISE EXCEPTION 'pgsched: a rate needs rate_period (N starts per period)' USING ERRCODE = 'invalid_parameter_value';
    END IF;

    UPDATE pgsched.queues q
    SET concurrency = v_new.concurrency, key_concurrency = v_new.key_concurrency, rate = v_new.rate,
        key_rate = v_new.key_rate, rate_period = v_new.rate_period, aging = v_new.aging,
        tenant_fairness = v_new.tenant_fairness, labels = v_new.labels, tenant_weights = v_new.tenant_weights,
        updated_at = pg_catalog.now()
    WHERE q.name = configure_queue.name;
    IF v_new.rate IS NULL AND v_new.key_rate IS NULL THEN
        DELETE FROM pgsched.rate_windows w WHERE w.queue = configure_queue.name;
    ELSIF v_new.key_rate IS NULL THEN
        DELETE FROM pgsched.rate_windows w WHERE w.queue = configure_queue.name AND w.rate_key <> '';
    END IF;

    IF (v_new.aging, v_new.tenant_fairness) IS DISTINCT FROM (v_old.aging, v_old.tenant_fairness)
       OR (v_new.tenant_fairness AND v_new.tenant_weights IS DISTINCT FROM v_old.tenant_weights) THEN
        -- Setting queue to itself fires tg_jobs__dispatch (UPDATE OF queue).
        -- Leased jobs are left to their workers; they are stamped again when
        -- they come back with a new run_at.
        UPDATE pgsched.jobs j SET queue = j.queue
        WHERE j.queue = configure_queue.name AND j.state <> 'running';
        GET DIAGNOSTICS v_restamped = ROW_COUNT;
    END IF;

    RETURN pg_catalog.jsonb_build_object(
        'queue', configure_queue.name, 'concurrency', v_new.concurrency, 'key_concurrency', v_new.key_concurrency,
        'rate', v_new.rate, 'key_rate', v_new.key_rate,
        'rate_period_s', EXTRACT(epoch FROM v_new.rate_period),
        'aging_s', EXTRACT(epoch FROM v_new.aging), 'tenant_fairness', v_new.tenant_fairness,
        'tenant_weights', v_new.tenant_weights, 'labels', v_new.labels, 'restamped', v_restamped);
END
$$;
