-- next_start
-- contract: when every one of `queues` (paused ones aside) is at its rate
-- limit, the moment the first of them may start a job again (its oldest
-- start in the window plus rate_period); NULL as soon as one of them has no
-- rate limit or room under it. A worker whose claim came back short sleeps
-- until then instead of claiming again in vain (per-key rates are not
-- counted: other keys may still start).
CREATE OR REPLACE FUNCTION pgsched.next_start(queues text[], p_now timestamptz DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_now timestamptz := coalesce(pgsched._clock(p_now), pg_catalog.clock_timestamp());
    v_next timestamptz;
    v_open boolean;
BEGIN
    SELECT pg_catalog.bool_or(f.next IS NULL), pg_catalog.min(f.next) INTO v_open, v_next
    FROM unnest(next_start.queues) u(name)
    LEFT JOIN pgsched.queues q ON q.name = u.name
    CROSS JOIN LATERAL (
        SELECT CASE WHEN q.rate IS NULL OR pg_catalog.cardinality(s.kept) < q.rate THEN NULL
                    ELSE s.kept[1] + q.rate_period END AS next
        FROM (SELECT ARRAY(SELECT t FROM pgsched.rate_windows w, unnest(w.starts) t
                           WHERE w.queue = q.name AND w.rate_key = '' AND t > v_now - q.rate_period
                           ORDER BY t) AS kept) s
    ) f
    WHERE q.paused IS NOT TRUE;
    IF v_open IS NOT FALSE THEN
        RETURN NULL;
    END IF;
    RETURN v_next;
END
$$;
