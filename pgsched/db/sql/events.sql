-- The status event stream (pgsched.read_events, docs/events.md).

-- name: read_events
SELECT pos, id, queue, task, state, attempt, finished_at, error FROM pgsched.read_events(%s, %s);

-- The stream position just before every transaction still in flight.
-- name: events_position
SELECT pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text::bigint - 1;

-- name: last_positions
-- `pgsched events --last N`: how many of the last N positions filed lie
-- after position %(after)s, and the oldest of them (the position index is
-- BRIN: the caller widens the window until it holds N or starts at 0).
SELECT count(*) AS n, coalesce(min(t.x), 0) AS pos
FROM (SELECT (h.finished_xid::text)::bigint AS x FROM pgsched.job_history h
      WHERE (h.finished_xid::text)::bigint > %(after)s
      ORDER BY 1 DESC LIMIT %(n)s) t;
