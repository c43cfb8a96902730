-- _key_room
-- contract: how many more jobs of concurrency key p_key queue p_q may start
-- now under its per-key limits (key_concurrency: leases not expired;
-- key_rate: starts within rate_period), counting p_taken, the room left by
-- the claim in progress (a JSON object key -> room) when it already looked.
-- Called by _claim_limited under the queue's lock.
CREATE OR REPLACE FUNCTION pgsched._key_room(p_q pgsched.queues, p_key text, p_now timestamptz, p_taken jsonb)
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_room integer := 2147483647;
BEGIN
    IF p_taken ? p_key THEN
        RETURN (p_taken ->> p_key)::integer;
    END IF;
    IF p_q.key_concurrency IS NOT NULL THEN
        v_room := p_q.key_concurrency - (
            SELECT pg_catalog.count(*) FROM pgsched.jobs j
            WHERE j.state = 'running' AND j.queue = p_q.name AND j.concurrency_key = p_key
              AND j.lease_expires_at > p_now)::integer;
    END IF;
    IF p_q.key_rate IS NOT NULL THEN
        v_room := least(v_room, p_q.key_rate - coalesce((
            SELECT pg_catalog.count(*) FROM pgsched.rate_windows w, unnest(w.starts) s
            WHERE w.queue = p_q.name AND w.rate_key = p_key AND s > p_now - p_q.rate_period), 0)::integer);
    END IF;
    RETURN v_room;
END
$$;
