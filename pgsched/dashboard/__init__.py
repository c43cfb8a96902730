"""The web dashboard: server-rendered pages over pgsched's views, JSON under /api/, actions, and /metrics.

Pages: ``/`` (queues, workers, scanners, shard owners), ``/queues/{queue}``,
``/jobs/{id}``, ``/dead``, ``/schedules``; each has a JSON twin under
``/api/``. Actions are POST forms (cancel, retry, pause, resume), refused
with 403 when read-only. Run it with ``pgsched dashboard``, or mount
``create_app(dsn)`` in any ASGI server.
"""

from __future__ import annotations

from pgsched.dashboard.app import create_app

__all__ = ["create_app"]
