"""The web dashboard: server-rendered pages over pgsched's views, JSON under /api/, actions, and /metrics.

Pages: ``/`` (queues, workers, scanners, shard owners, charts of the last
hour or day), ``/queues/{queue}`` (its charts and jobs), ``/jobs`` (search
across queues), ``/jobs/{id}``, ``/dead``, ``/schedules``; each has a JSON
twin under ``/api/`` (and ``/api/history`` the charts' data). Charts are SVG
drawn on the server from ``pgsched.queue_history``; a small script, allowed
by its hash, fetches ``/fragments/charts`` again every few seconds. Actions
are POST forms (cancel, retry, pause, resume; bulk cancel and retry of a
search after a confirmation page, each confirmation good once within 15
minutes), refused with 403 when read-only. Run it
with ``pgsched dashboard``, or mount ``create_app(dsn)`` in any ASGI server.
Pages stay readable from 1,280 to 2,560 px wide whatever the values: long
text in a table (args, task, queue and worker names) is cut to one line with
the whole value as its tooltip, errors wrap.
"""

from __future__ import annotations

from pgsched.dashboard.app import create_app

__all__ = ["create_app"]
