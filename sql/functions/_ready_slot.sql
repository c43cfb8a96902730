-- _ready_slot
-- contract: the slot of pgsched.ready that takes new rows: the open one of
-- pgsched.ready_ring; with no slot open (the ring emptied by hand), slot 0
-- (rotate_ready opens one again).
-- PL/pgSQL, so its plan is made once per session: a SQL function whose body
-- holds a subquery is never inlined, and PostgreSQL planned it again at each
-- statement that called it (about 40 us per single enqueue). Every name is
-- qualified, so it needs no SET clause.
CREATE OR REPLACE FUNCTION pgsched._ready_slot()
RETURNS smallint
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN coalesce((SELECT g.slot FROM pgsched.ready_ring g WHERE g.closed_at IS NULL), 0::smallint);
END
$$;
