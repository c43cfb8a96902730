-- xmin_horizon
-- contract: what holds back the xmin horizon, oldest first: each session
-- whose transaction holds a snapshot (backend_xmin) or an xid of its own
-- (backend_xid: a transaction that wrote, even idle between statements with
-- no snapshot), each prepared transaction, and each replication slot with an
-- xmin. Sessions and prepared transactions of other databases are left out:
-- they do not hold back this database's tables (PostgreSQL 14 and later). VACUUM keeps every row version that died after the oldest of these
-- began, so while one stays, dead rows in pgsched.jobs pile up and nothing
-- removes them. xid_age is in transactions (age()); age_s is how long the
-- holder's transaction has been open (NULL for a slot). Invoker's rights:
-- a role without pg_read_all_stats (pg_monitor) sees only the sessions of
-- its own roles, as in pg_stat_activity. Used by `pgsched doctor`, the
-- database metrics and the workers' vacuum thread (which stops vacuuming a
-- partition again while the same holder keeps the horizon where it was).
CREATE OR REPLACE FUNCTION pgsched.xmin_horizon()
RETURNS TABLE (holder text, pid integer, horizon xid, xid_age integer, age_s double precision,
               state text, application_name text)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    SELECT h.holder, h.pid, h.horizon, pg_catalog.age(h.horizon), h.age_s, h.state, h.application_name
    FROM (
        -- Of a session's xid and snapshot xmin, the older (age: xids wrap around).
        SELECT 'session' AS holder, a.pid,
               CASE WHEN a.backend_xmin IS NULL
                         OR pg_catalog.age(a.backend_xid) OPERATOR(pg_catalog.>) pg_catalog.age(a.backend_xmin)
                    THEN coalesce(a.backend_xid, a.backend_xmin) ELSE a.backend_xmin END AS horizon,
               pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) a.xact_start) AS age_s,
               a.state, a.application_name
        FROM pg_catalog.pg_stat_activity a
        WHERE (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
          AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
          -- NULL: a process of no database (a walsender with hot_standby_feedback)
          AND (a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database() OR a.datid IS NULL)
          -- a lazy VACUUM holds back no one's horizon
          AND a.backend_type OPERATOR(pg_catalog.<>) 'autovacuum worker'
        UNION ALL
        SELECT 'prepared transaction ' OPERATOR(pg_catalog.||) p.gid, NULL, p.transaction,
               pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) p.prepared), NULL, NULL
        FROM pg_catalog.pg_prepared_xacts p
        WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
        UNION ALL
        -- catalog_xmin holds back the system catalogs only, not pgsched's tables
        SELECT 'replication slot ' OPERATOR(pg_catalog.||) s.slot_name, s.active_pid, s.xmin, NULL,
               CASE WHEN s.active THEN 'active' ELSE 'inactive' END, NULL
        FROM pg_catalog.pg_replication_slots s
        WHERE s.xmin IS NOT NULL
    ) h
    ORDER BY pg_catalog.age(h.horizon) DESC, h.age_s DESC NULLS LAST
$$;
