-- read_events
-- contract: the terminal transitions (completed, dead, cancelled) filed
-- after position p_after, gap-free and each once: whole transactions, in
-- transaction-id order, and only from transactions older than every one
-- still in flight, so nothing can later appear behind a position returned.
-- position is the id of the transaction that filed the row (0 reads from
-- the oldest history kept); pass the last pos seen to continue. Returns at
-- least p_limit rows when that many are ready, never part of a transaction.
-- Runs with the caller's rights: row-level security applies.
--
-- Why not by a sequence or by finished_at: both are drawn before commit, so
-- a transaction that commits late files rows behind what a reader already
-- passed. Transaction ids below the snapshot's xmin belong to transactions
-- that have all ended, so that part of the history can no longer change.
CREATE OR REPLACE FUNCTION pgsched.read_events(
    p_after bigint  DEFAULT 0,
    p_limit integer DEFAULT 1000
)
RETURNS TABLE (pos bigint, id bigint, queue text, task text, state pgsched.job_state,
               attempt integer, finished_at timestamptz, error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_after xid8;
    v_horizon xid8 := pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());
    v_cut xid8;
BEGIN
    IF p_after IS NULL OR p_after < 0 THEN
        RAISE EXCEPTION 'read_events: position must be 0 or a position it returned, not %', p_after
            USING ERRCODE = '22023';
    END IF;
    v_after := p_after::text::xid8;
    -- The transaction of the p_limit-th row: the batch ends with it, whole.
    SELECT h.finished_xid INTO v_cut
    FROM pgsched.job_history h
    WHERE h.finished_xid > v_after AND h.finished_xid < v_horizon
    ORDER BY h.finished_xid
    OFFSET greatest(coalesce(p_limit, 1000), 1) - 1
    LIMIT 1;
    RETURN QUERY
    SELECT h.finished_xid::text::bigint, h.id, h.queue, h.task, h.state, h.attempt, h.finished_at, h.error
    FROM pgsched.job_history h
    WHERE h.finished_xid > v_after AND h.finished_xid < v_horizon
      AND (v_cut IS NULL OR h.finished_xid <= v_cut)
    ORDER BY h.finished_xid, h.finished_at, h.id;
END
$$;
