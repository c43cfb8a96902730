-- summarize_history
-- contract: summarizes the new block ranges of the event stream's BRIN
-- index (job_history_position_idx) in the history partitions that take rows
-- now: today's and yesterday's (UTC) and the default one. Returns how many
-- ranges it summarized. read_events reads every range not yet summarized,
-- whatever window it asks for; autosummarize asks autovacuum to summarize
-- each range as it fills, but autovacuum keeps at most 256 such requests for
-- the whole cluster and works them about once a minute, so at tens of
-- thousands of finished jobs a second some would be dropped until the next
-- vacuum. Workers and scanners call this from their vacuum thread
-- (pgsched/runtime/vacuumer.py). A partition another process holds (a vacuum,
-- which summarizes too; retention dropping it) is left for the next call.
CREATE OR REPLACE FUNCTION pgsched.summarize_history()
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pgsched, pg_temp
SET lock_timeout = '20ms'
AS $$
DECLARE
    v_today date := (pg_catalog.now() AT TIME ZONE 'UTC')::date;
    v_index regclass;
    v_done integer := 0;
BEGIN
    FOR v_index IN
        SELECT i.inhrelid::regclass
        FROM pg_catalog.pg_inherits i
        JOIN pg_catalog.pg_index x ON x.indexrelid = i.inhrelid
        WHERE i.inhparent = 'pgsched.job_history_position_idx'::regclass
          AND x.indrelid IN (
              SELECT pg_catalog.to_regclass(pg_catalog.format('pgsched.%I', t))
              FROM unnest(ARRAY['job_history_default',
                                'job_history_p' || pg_catalog.to_char(v_today, 'YYYYMMDD'),
                                'job_history_p' || pg_catalog.to_char(v_today - 1, 'YYYYMMDD')]) t)
    LOOP
        BEGIN
            v_done := v_done + pg_catalog.brin_summarize_new_values(v_index);
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- held by another process: the next call
        END;
    END LOOP;
    RETURN v_done;
END
$$;
