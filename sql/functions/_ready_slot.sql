-- _ready_slot
-- contract: the slot of pgsched.ready that takes new rows: the open one of
-- pgsched.ready_ring; with no slot open (the ring emptied by hand), slot 0
-- (rotate_ready opens one again).
CREATE OR REPLACE FUNCTION pgsched._ready_slot()
RETURNS smallint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT coalesce((SELECT g.slot FROM pgsched.ready_ring g WHERE g.closed_at IS NULL), 0::smallint)
$$;
