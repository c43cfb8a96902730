-- Enqueueing: what App.enqueue and its kin send, one call of pgsched's functions each.

-- name: enqueue
-- Every parameter is cast to the type of the function's: a value out of range
-- is then refused as such, never as "function does not exist".
SELECT pgsched.enqueue(%s::text, %s::jsonb, %s::text, coalesce(%s::timestamptz, now() + %s::interval), %s::integer,
                       %s::text, %s::integer, %s::text[], %s::text, %s::interval, %s::bigint[], %s::text,
                       %s::jsonb, %s::text, %s::text, %s::text);

-- name: enqueue_command
SELECT pgsched.enqueue_command(%s::text[], %s::jsonb, %s::text, %s::interval, %s::text, %s::integer,
                               coalesce(%s::timestamptz, now() + %s::interval), %s::integer, %s::text, %s::text[],
                               %s::text, %s::integer, %s::real);

-- name: enqueue_service
SELECT pgsched.enqueue_service(%s::text, %s::jsonb, %s::text, coalesce(%s::timestamptz, now() + %s::interval),
                               %s::integer, %s::text, %s::integer, %s::text[], %s::text, %s::integer, %s::real);

-- name: enqueue_many
-- The args travel as one JSON array (one document to encode, not one per job),
-- and so do the labels, an array per job (NULL when no job has any), and the
-- dependencies (ids, and -n for the batch's n-th row). Delays
-- are added to the database's clock; with neither run_at nor delay, the
-- run_ats are NULL (each job due now).
SELECT job_id FROM pgsched.enqueue_many(
    %s::text[],
    ARRAY(SELECT pg_catalog.jsonb_array_elements(%s::jsonb)),
    %s::text[],
    (SELECT pg_catalog.array_agg(coalesce(u.r, now() + u.d) ORDER BY u.n)
     FROM unnest(%s::timestamptz[], %s::interval[]) WITH ORDINALITY AS u(r, d, n)),
    %s::integer[], %s::text[], %s::integer[], %s::text[],
    (SELECT pg_catalog.array_agg(l.e ORDER BY l.n)
     FROM pg_catalog.jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS l(e, n)),
    (SELECT pg_catalog.array_agg(d.e ORDER BY d.n)
     FROM pg_catalog.jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS d(e, n)),
    %s::text[], %s::jsonb, %s::interval[], %s::text[], %s::text[]);

-- name: enqueue_named
-- `pgsched enqueue`: named arguments, each value cast to the parameter's type: a bad value is
-- refused as such, never as a missing function.
SELECT pgsched.enqueue(
    task => %(task)s::text, args => %(args)s::jsonb, queue => %(queue)s::text,
    run_at => coalesce(%(run_at)s::timestamptz, pg_catalog.now() + %(delay)s::interval),
    priority => %(priority)s::integer, idempotency_key => %(key)s::text, max_attempts => %(max_attempts)s::integer,
    labels => %(labels)s::text[], tenant => %(tenant)s::text,
    depends_on => %(depends_on)s::bigint[], on_dependency_failure => %(on_failure)s::text,
    on_conflict => %(on_conflict)s::text, key_scope => %(key_scope)s::text) AS id;

-- name: enqueue_service_named
-- `pgsched enqueue --service`.
SELECT pgsched.enqueue_service(
    task => %(task)s::text, args => %(args)s::jsonb, queue => %(queue)s::text,
    run_at => coalesce(%(run_at)s::timestamptz, pg_catalog.now() + %(delay)s::interval),
    priority => %(priority)s::integer, idempotency_key => %(key)s::text, max_attempts => %(max_attempts)s::integer,
    labels => %(labels)s::text[], tenant => %(tenant)s::text,
    memory_limit => %(memory_limit)s::integer, cpu_limit => %(cpu_limit)s::real) AS id;
