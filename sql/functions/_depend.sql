-- _depend
-- contract: gives the just-inserted waiting jobs p_ids (on p_shards) their
-- dependencies: p_deps[i] is a JSON array of job ids, and in a batch also of
-- references to earlier rows of it as negative 1-based positions (-1: the
-- first row); p_policies[i] ('cancel', the default, 'wait' or 'run') says
-- what a dead or cancelled dependency does to job i ('run': nothing, it
-- counts as finished). A dependency still active is
-- held (FOR KEY SHARE: it cannot finish before this transaction commits)
-- and becomes a row of pgsched.job_dependencies; one that completed
-- (history) is met; one dead or cancelled applies the policy at once
-- ('cancel': the job is filed cancelled; 'wait': it waits for a redrive;
-- 'run': it is met). In a batch, each job's depends_on column gets its
-- dependencies' ids, references resolved (enqueue() writes its own).
-- A job with nothing left to wait for is made due (_release). A bad
-- element, a reference to the row itself or a later one, an id this
-- session cannot see (another tenant's, or none), or one not smaller than
-- the job's own (ids are drawn in order, so every edge points to an older
-- job and no cycle can form, not even through predicted ids) raises naming
-- the row (p_batch) and the value; the caller's insert is rolled back.
-- Bounds: a job names at most 1000 jobs by id, and one call at most 1000
-- distinct jobs outside its batch (each is locked until commit: the lock
-- table is shared and small); references to rows of the batch (a batch
-- callback's fan-in) are not bounded.
CREATE OR REPLACE FUNCTION pgsched._depend(
    p_ids      bigint[],
    p_shards   smallint[],
    p_deps     jsonb[],
    p_policies text[],
    p_now      timestamptz,
    p_batch    boolean DEFAULT true
)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
DECLARE
    v_bad record;
    v_row text := '';
    v_ords bigint[];
    v_jobs bigint[];
    v_job_shards smallint[];
    v_on_failure text[];
    v_on bigint[];
    v_active bigint[];
    v_failed bigint[];
    v_failed_states text[];
    v_outside bigint[];
    v_met bigint[];
    v_job pgsched.jobs;
    v_max constant integer := 1000;
BEGIN
    SELECT u.ord, c.n INTO v_bad
    FROM unnest(p_deps) WITH ORDINALITY AS u(deps, ord)
    CROSS JOIN LATERAL (
        SELECT pg_catalog.count(*) AS n
        FROM pg_catalog.jsonb_array_elements(u.deps) AS e(v)
        WHERE pg_catalog.jsonb_typeof(e.v) <> 'number' OR e.v::numeric > 0) c
    WHERE pg_catalog.jsonb_typeof(u.deps) = 'array' AND pg_catalog.jsonb_array_length(u.deps) > v_max
      AND c.n > v_max
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: %depends_on names % jobs: a job depends on at most % jobs',
                CASE WHEN p_batch THEN pg_catalog.format('row %s of the batch: ', v_bad.ord) ELSE '' END,
                v_bad.n, v_max
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on',
                  HINT = 'Chain a job that depends on the others in groups, or enqueue the group as one batch.';
    END IF;

    SELECT u.ord, u.deps, u.policy, e.v,
           CASE WHEN u.policy IS NOT NULL AND u.policy NOT IN ('cancel', 'wait', 'run') THEN 'policy'
                WHEN pg_catalog.jsonb_typeof(u.deps) <> 'array' THEN 'shape'
                WHEN pg_catalog.jsonb_typeof(e.v) <> 'number' OR e.v::numeric <> pg_catalog.trunc(e.v::numeric)
                     OR e.v::numeric = 0 OR e.v::numeric > 9223372036854775807 THEN 'element'
                WHEN e.v::numeric < 0 AND (NOT p_batch OR -e.v::numeric >= u.ord) THEN 'reference'
           END AS problem
    INTO v_bad
    FROM unnest(p_deps, p_policies) WITH ORDINALITY AS u(deps, policy, ord)
    LEFT JOIN LATERAL pg_catalog.jsonb_array_elements(
        CASE WHEN pg_catalog.jsonb_typeof(u.deps) = 'array' THEN u.deps END) AS e(v) ON true
    WHERE (u.policy IS NOT NULL AND u.policy NOT IN ('cancel', 'wait', 'run'))
       OR pg_catalog.jsonb_typeof(u.deps) <> 'array'
       OR pg_catalog.jsonb_typeof(e.v) <> 'number'
       OR e.v::numeric <> pg_catalog.trunc(e.v::numeric) OR e.v::numeric = 0
       OR e.v::numeric > 9223372036854775807
       OR (e.v::numeric < 0 AND (NOT p_batch OR -e.v::numeric >= u.ord))
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        IF p_batch THEN
            v_row := pg_catalog.format('row %s of the batch: ', v_bad.ord);
        END IF;
        IF v_bad.problem = 'policy' THEN
            RAISE EXCEPTION 'pgsched: %on_dependency_failure must be ''cancel'', ''wait'' or ''run'', not %',
                    v_row, pgsched._shown(v_bad.policy)
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'on_dependency_failure';
        ELSIF v_bad.problem = 'reference' AND p_batch THEN
            RAISE EXCEPTION 'pgsched: %depends_on % refers to row %, which does not come before it: a batch''s references point back (-1 is its first row)',
                    v_row, v_bad.v, -v_bad.v::numeric
                USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on';
        ELSIF v_bad.problem = 'reference' THEN
            RAISE EXCEPTION 'pgsched: depends_on %: no such job (job ids are positive)', v_bad.v
                USING ERRCODE = 'foreign_key_violation', COLUMN = 'depends_on';
        END IF;
        RAISE EXCEPTION 'pgsched: %depends_on must be a JSON array of job ids%, not %', v_row,
                CASE WHEN p_batch THEN ' (or -n for the n-th row of the batch)' ELSE '' END,
                pgsched._shown(v_bad.deps::text)
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on';
    END IF;

    -- One edge per (job, dependency), references resolved to the ids drawn.
    -- A reference to a row this call inserted (it has a shard) is active by
    -- construction, and no one else sees it yet: only the others are looked up.
    SELECT pg_catalog.array_agg(x.ord ORDER BY x.job, x.dep), pg_catalog.array_agg(x.job ORDER BY x.job, x.dep),
           pg_catalog.array_agg(x.shard ORDER BY x.job, x.dep), pg_catalog.array_agg(x.policy ORDER BY x.job, x.dep),
           pg_catalog.array_agg(x.dep ORDER BY x.job, x.dep),
           pg_catalog.array_agg(DISTINCT x.dep) FILTER (WHERE NOT x.internal)
    INTO v_ords, v_jobs, v_job_shards, v_on_failure, v_on, v_outside
    FROM (SELECT DISTINCT u.ord, u.id AS job, u.shard, coalesce(u.policy, 'cancel') AS policy,
                 CASE WHEN e.v::numeric > 0 THEN e.v::numeric::bigint ELSE p_ids[(-e.v::numeric)::integer] END AS dep,
                 e.v::numeric < 0 AND p_shards[(-e.v::numeric)::integer] IS NOT NULL AS internal
          FROM unnest(p_ids, p_shards, p_deps, p_policies) WITH ORDINALITY AS u(id, shard, deps, policy, ord)
          CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(u.deps) AS e(v)) x;
    IF v_jobs IS NULL THEN
        RETURN;
    END IF;

    IF pg_catalog.cardinality(v_outside) > v_max THEN
        RAISE EXCEPTION 'pgsched: depends_on names % jobs outside the batch: one call depends on at most % of them',
                pg_catalog.cardinality(v_outside), v_max
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on',
                  HINT = 'Enqueue the batch in parts, or name jobs of the batch by reference.';
    END IF;
    IF v_outside IS NOT NULL THEN
        -- A redrive (retry) of a dead or cancelled dependency waits for this
        -- transaction (it takes the same lock, exclusively), so a dependency
        -- read from the history below cannot come back and complete unseen.
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('pgsched.depend'), pg_catalog.hashint8(o.id))
        FROM unnest(v_outside) AS o(id)
        ORDER BY o.id;
        -- Active dependencies, held until commit so none finishes unseen.
        SELECT pg_catalog.array_agg(s.id) INTO v_active
        FROM (SELECT j.id FROM pgsched.jobs j
              WHERE j.id = ANY (v_outside) AND pgsched._tenant_visible(j.tenant)
              ORDER BY j.id
              FOR KEY SHARE OF j) s;
        -- The others, from history (a new snapshot: one that finished while
        -- we waited for its row is there). The latest outcome counts.
        SELECT pg_catalog.array_agg(h.id) FILTER (WHERE h.state <> 'completed'),
               pg_catalog.array_agg(h.state::text) FILTER (WHERE h.state <> 'completed'),
               pg_catalog.array_agg(h.id) FILTER (WHERE h.state = 'completed')
        INTO v_failed, v_failed_states, v_met
        FROM (SELECT DISTINCT ON (h.id) h.id, h.state
              FROM pgsched.job_history h
              WHERE h.id = ANY (ARRAY(SELECT o.id FROM unnest(v_outside) AS o(id)
                                      WHERE NOT EXISTS (SELECT 1 FROM unnest(v_active) AS a(id) WHERE a.id = o.id)))
                AND pgsched._tenant_visible(h.tenant)
              ORDER BY h.id, h.finished_at DESC) h;

        SELECT e.ord, e.dep INTO v_bad
        FROM unnest(v_ords, v_on) AS e(ord, dep)
        WHERE e.dep = ANY (v_outside)
          AND NOT EXISTS (SELECT 1 FROM unnest(v_active) AS a(id) WHERE a.id = e.dep)
          AND NOT EXISTS (SELECT 1 FROM unnest(v_failed) AS f(id) WHERE f.id = e.dep)
          AND NOT EXISTS (SELECT 1 FROM unnest(v_met) AS m(id) WHERE m.id = e.dep)
        ORDER BY e.ord
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'pgsched: %depends_on %: no such job',
                    CASE WHEN p_batch THEN pg_catalog.format('row %s of the batch: ', v_bad.ord) ELSE '' END, v_bad.dep
                USING ERRCODE = 'foreign_key_violation', COLUMN = 'depends_on',
                      HINT = 'A job can depend on jobs this session can see, active or in the history.';
        END IF;
    END IF;

    -- Every edge points to an older job (a smaller id; ids are drawn in
    -- order), so no cycle can form: not on the job itself, not between rows
    -- of this call named by their predicted ids, not through a later job.
    SELECT e.ord, e.dep, e.job INTO v_bad
    FROM unnest(v_ords, v_on, v_jobs) AS e(ord, dep, job)
    WHERE e.dep >= e.job
    ORDER BY e.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pgsched: %depends_on %: a job can depend only on jobs enqueued before it (its own id is %)',
                CASE WHEN p_batch THEN pg_catalog.format('row %s of the batch: ', v_bad.ord) ELSE '' END,
                v_bad.dep, v_bad.job
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'depends_on',
                  HINT = 'Within a batch, name earlier rows (-1 is the first row): ids grow in enqueue order.';
    END IF;

    -- Rows for every dependency not met: active ones, and failed ones a job waits out
    -- ('run': a dependency dead or cancelled already is met, like a completed one).
    -- Each job counts its rows (waits_for: what _release counts down), and in a
    -- batch learns its dependencies' ids (depends_on: enqueue() wrote its own).
    WITH added AS (
        INSERT INTO pgsched.job_dependencies (depends_on, job, job_shard, on_failure)
        SELECT e.dep, e.job, e.shard, e.policy
        FROM unnest(v_on, v_jobs, v_job_shards, v_on_failure) AS e(dep, job, shard, policy)
        WHERE NOT EXISTS (SELECT 1 FROM unnest(v_met) AS m(id) WHERE m.id = e.dep)
          AND (e.policy = 'wait' OR NOT EXISTS (SELECT 1 FROM unnest(v_failed) AS f(id) WHERE f.id = e.dep))
        RETURNING job
    )
    UPDATE pgsched.jobs j
    SET waits_for = coalesce(n.rows, 0),
        depends_on = CASE WHEN p_batch THEN x.deps ELSE j.depends_on END
    FROM (SELECT e.job, e.shard, pg_catalog.array_agg(e.dep ORDER BY e.dep) AS deps
          FROM unnest(v_jobs, v_job_shards, v_on) AS e(job, shard, dep)
          GROUP BY e.job, e.shard) x
    LEFT JOIN (SELECT a.job, pg_catalog.count(*)::integer AS rows FROM added a GROUP BY a.job) n ON n.job = x.job
    WHERE j.id = x.job AND j.shard = x.shard;

    -- A dependency already dead or cancelled: the policy, at once.
    FOR v_bad IN
        SELECT DISTINCT ON (e.job) e.job, e.shard, f.id AS dep, f.state
        FROM unnest(v_on, v_jobs, v_job_shards, v_on_failure) AS e(dep, job, shard, policy)
        JOIN unnest(v_failed, v_failed_states) AS f(id, state) ON f.id = e.dep
        WHERE e.policy = 'cancel'
        ORDER BY e.job, f.id
    LOOP
        DELETE FROM pgsched.jobs j
        WHERE j.id = v_bad.job AND j.shard = v_bad.shard AND j.state = 'waiting'
        RETURNING j.* INTO v_job;
        IF FOUND THEN
            PERFORM pgsched._finish(v_job, 'cancelled', p_now, pg_catalog.format('dependency %s %s', v_bad.dep, v_bad.state));
        END IF;
    END LOOP;

    PERFORM pgsched._release(ARRAY(SELECT DISTINCT pg_catalog.unnest(v_jobs) ORDER BY 1),
                             ARRAY(SELECT s FROM (SELECT DISTINCT ON (e.job) e.job, e.shard AS s
                                                  FROM unnest(v_jobs, v_job_shards) AS e(job, shard)
                                                  ORDER BY e.job) t), p_now);
END
$$;
