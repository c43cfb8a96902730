-- _ready_slot
-- contract: the slot of pgsched.ready that takes new rows: the open one of
-- pgsched.ready_ring; with no slot open (the ring emptied by hand), slot 0
-- (rotate_ready opens one again). No SET clause (every name is qualified):
-- so it is inlined, read once per statement instead of called per row.
CREATE OR REPLACE FUNCTION pgsched._ready_slot()
RETURNS smallint
LANGUAGE sql STABLE
AS $$
    SELECT coalesce((SELECT g.slot FROM pgsched.ready_ring g WHERE g.closed_at IS NULL), 0::smallint)
$$;
