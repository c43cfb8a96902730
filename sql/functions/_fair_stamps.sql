-- _fair_stamps
-- contract: _fair_stamp for a batch (enqueue_many): element i is the
-- virtual-time stamp of row i (queue p_queues[i], NULL: 'default'; tenant
-- p_tenants[i]; due p_run_ats[i], NULL: p_now) when its queue has tenant
-- fairness, else NULL; p_n rows. One statement: each fair queue's head and
-- each tenant's latest stamp are read once (index probes, rescanned, where
-- a call per row would start an executor over every shard's partition each
-- time), and a tenant's rows follow one another 1 ms / weight apart in
-- input order, as stamping them one by one would place them.
CREATE OR REPLACE FUNCTION pgsched._fair_stamps(
    p_queues  text[],
    p_tenants text[],
    p_run_ats timestamptz[],
    p_now     timestamptz,
    p_n       integer
)
RETURNS timestamptz[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
    WITH input AS (
        SELECT u.ord, coalesce(p_queues[u.ord], 'default') AS queue, coalesce(p_tenants[u.ord], '') AS tenant,
               coalesce(p_run_ats[u.ord], p_now) AS run_at
        FROM pg_catalog.generate_series(1, p_n) AS u(ord)
    ), fair AS (
        SELECT i.ord, i.queue, i.tenant, i.run_at, q.aging,
               interval '1 millisecond' / coalesce((q.tenant_weights ->> i.tenant)::double precision, 1) AS step,
               (pg_catalog.row_number() OVER (PARTITION BY i.queue, i.tenant ORDER BY i.ord) - 1)::double precision
                   AS ahead
        FROM input i
        JOIN pgsched.queues q ON q.name = i.queue AND q.tenant_fairness
    ), heads AS (
        SELECT x.queue, h.at
        FROM (SELECT DISTINCT f.queue, f.aging FROM fair f) x
        LEFT JOIN LATERAL (
            SELECT j.dispatch_at + coalesce(j.priority * x.aging, interval '0') AS at
            FROM pgsched.ready j
            WHERE j.queue = x.queue AND j.dispatch_group = '*'
            ORDER BY j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id
            LIMIT 1) h ON true
    ), tails AS (
        SELECT x.queue, x.tenant, t.at + x.step AS at
        FROM (SELECT DISTINCT f.queue, f.tenant, f.aging, f.step FROM fair f) x
        LEFT JOIN LATERAL (
            SELECT j.dispatch_at + coalesce(j.priority * x.aging, interval '0') AS at
            FROM pgsched.ready j
            WHERE j.queue = x.queue AND j.dispatch_group = '*'
              AND coalesce(j.tenant, '') = x.tenant
            ORDER BY coalesce(j.tenant, ''), j.dispatch_at DESC
            LIMIT 1) t ON true
    )
    SELECT pg_catalog.array_agg(
               coalesce(greatest(h.at, t.at), f.run_at) + f.ahead * f.step
               ORDER BY i.ord)
    FROM input i
    LEFT JOIN fair f ON f.ord = i.ord
    LEFT JOIN heads h ON h.queue = f.queue
    LEFT JOIN tails t ON t.queue = f.queue AND t.tenant = f.tenant
$$;
