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
    v_horizon xid8 := pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot());
    v_top bigint := v_horizon::text::bigint;
    v_limit integer := greatest(coalesce(p_limit, 1000), 1);
    -- the window of positions read, (v_lo, v_hi): no row lies in (p_after, v_lo]
    v_lo bigint := p_after;
    v_hi bigint;
    v_step bigint := 64;
    v_mid bigint;
    v_any boolean;
    v_cut bigint;
BEGIN
    IF p_after IS NULL OR p_after < 0 THEN
        RAISE EXCEPTION 'read_events: position must be 0 or a position it returned, not %', p_after
            USING ERRCODE = '22023';
    END IF;
    -- Positions are read a window at a time (their index is BRIN,
    -- 20_indexes.sql): a reader far behind sorts one window's rows, not
    -- every row after its position. First the window skips, widening
    -- fourfold, over positions that filed nothing (a reader at 0, a quiet
    -- stream in a busy cluster) ...
    LOOP
        v_hi := CASE WHEN v_top - v_lo <= v_step THEN v_top ELSE v_lo + v_step END;
        v_any := EXISTS (SELECT FROM pgsched.job_history h
                         WHERE (h.finished_xid::text)::bigint > v_lo AND (h.finished_xid::text)::bigint < v_hi);
        EXIT WHEN v_any OR v_hi >= v_top;
        v_lo := v_hi - 1;
        v_step := v_step * 4;
    END LOOP;
    IF NOT v_any THEN
        RETURN;  -- nothing after p_after is readable yet
    END IF;
    -- ... and halves the window that has rows down to where they begin ...
    WHILE v_hi - v_lo > 64 LOOP
        v_mid := v_lo + (v_hi - v_lo) / 2;
        IF EXISTS (SELECT FROM pgsched.job_history h
                   WHERE (h.finished_xid::text)::bigint > v_lo AND (h.finished_xid::text)::bigint < v_mid) THEN
            v_hi := v_mid;
        ELSE
            v_lo := v_mid - 1;
        END IF;
    END LOOP;
    -- ... then, from there, it starts narrow again (one
    -- transaction may file a whole batch at one position) and widens until
    -- it holds v_limit rows or reaches the horizon.
    v_step := 64;
    LOOP
        v_hi := CASE WHEN v_top - v_lo <= v_step THEN v_top ELSE v_lo + v_step END;
        -- The transaction of the p_limit-th row: the batch ends with it, whole.
        SELECT t.x INTO v_cut
        FROM (SELECT (h.finished_xid::text)::bigint AS x
              FROM pgsched.job_history h
              WHERE (h.finished_xid::text)::bigint > v_lo AND (h.finished_xid::text)::bigint < v_hi) t
        ORDER BY t.x
        OFFSET v_limit - 1
        LIMIT 1;
        EXIT WHEN v_cut IS NOT NULL OR v_hi >= v_top;
        v_step := v_step * 4;
    END LOOP;
    RETURN QUERY
    SELECT h.finished_xid::text::bigint, h.id, h.queue, h.task, h.state, h.attempt, h.finished_at, h.error
    FROM pgsched.job_history h
    WHERE (h.finished_xid::text)::bigint > v_lo AND (h.finished_xid::text)::bigint < v_hi
      AND (v_cut IS NULL OR (h.finished_xid::text)::bigint <= v_cut)
    ORDER BY h.finished_xid, h.finished_at, h.id;
END
$$;
