-- The status event stream (pgsched.read_events, docs/events.md).

-- name: read_events
SELECT pos, id, queue, task, state, attempt, finished_at, error FROM pgsched.read_events(%s, %s);

-- The stream position just before every transaction still in flight.
-- name: events_position
SELECT pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text::bigint - 1;
