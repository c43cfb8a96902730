-- _fair_stamp
-- contract: the claim-order stamp (dispatch_at before aging) of a job of
-- tenant p_tenant entering fair queue p_queue (tenant_fairness), due at
-- p_at: start-time fair queueing on virtual time. Each tenant's due jobs
-- are spaced 1 ms / weight apart (p_weights: tenant -> weight, missing 1;
-- no tenant is ''), and a tenant with nothing due starts at the head of the
-- queue (its earliest due stamp), not where it left off: an idle tenant
-- banks no credit, and its share goes to the others (work-conserving).
-- With nothing due in the queue, the stamp is p_at. Under aging (p_aging)
-- the claim order is the stamp minus priority x aging; the stamps read back
-- here have that taken off again, so virtual time is one clock for all.
--
-- The cost is here, at enqueue (two index probes: the head in the claim
-- index, the tenant's latest stamp in ready_fair_idx), so a claim of a fair
-- queue is the plain claim of its index in stamp order and reads only its
-- batch, whatever the number of tenants. VOLATILE, so each row of a
-- multi-row INSERT sees the rows before it and the tenant's stamps grow
-- within one statement. Concurrent enqueues of one tenant may draw equal
-- stamps (ids break ties): shares are kept to a job, not exactly.
CREATE OR REPLACE FUNCTION pgsched._fair_stamp(
    p_queue   text,
    p_tenant  text,
    p_weights jsonb,
    p_at      timestamptz,
    p_aging   interval DEFAULT NULL
)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pgsched, pg_temp
-- One plan per statement for every call: planning the partitioned probes
-- anew for each job would cost more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_head timestamptz;
    v_tail timestamptz;
BEGIN
    SELECT j.dispatch_at + coalesce(j.priority * p_aging, interval '0') INTO v_head FROM pgsched.ready j
    WHERE j.queue = p_queue AND j.dispatch_group = '*'
    ORDER BY j.dispatch_group, j.dispatch_rank, j.dispatch_at, j.id
    LIMIT 1;
    IF v_head IS NULL THEN
        RETURN p_at;
    END IF;
    SELECT j.dispatch_at + coalesce(j.priority * p_aging, interval '0') INTO v_tail FROM pgsched.ready j
    WHERE j.queue = p_queue AND j.dispatch_group = '*'
      AND coalesce(j.tenant, '') = coalesce(p_tenant, '')
    ORDER BY coalesce(j.tenant, ''), j.dispatch_at DESC
    LIMIT 1;
    RETURN greatest(v_head, v_tail + interval '1 millisecond'
                                      / coalesce((p_weights ->> coalesce(p_tenant, ''))::double precision, 1));
END
$$;
