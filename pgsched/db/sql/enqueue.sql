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
-- are added to the database's clock.
SELECT job_id FROM pgsched.enqueue_many(
    %s::text[],
    ARRAY(SELECT pg_catalog.jsonb_array_elements(%s::jsonb)),
    %s::text[],
    ARRAY(SELECT coalesce(u.r, now() + u.d)
          FROM unnest(%s::timestamptz[], %s::interval[]) WITH ORDINALITY AS u(r, d, n) ORDER BY u.n),
    %s::integer[], %s::text[], %s::integer[], %s::text[],
    (SELECT pg_catalog.array_agg(l.e ORDER BY l.n)
     FROM pg_catalog.jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS l(e, n)),
    (SELECT pg_catalog.array_agg(d.e ORDER BY d.n)
     FROM pg_catalog.jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS d(e, n)),
    %s::text[], %s::jsonb, %s::interval[], %s::text[], %s::text[]);
