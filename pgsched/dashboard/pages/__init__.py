"""The dashboard's pages, rendered on the server from what queries.py read (no JavaScript): one module a page."""

from __future__ import annotations

from pgsched.dashboard.pages.common import View, message
from pgsched.dashboard.pages.dead import dead_letters
from pgsched.dashboard.pages.job_detail import job
from pgsched.dashboard.pages.queue_detail import queue
from pgsched.dashboard.pages.schedule_list import schedules
from pgsched.dashboard.pages.search import bulk_confirm, jobs
from pgsched.dashboard.pages.summary import overview, shard_ranges

__all__ = [
    "View",
    "bulk_confirm",
    "dead_letters",
    "job",
    "jobs",
    "message",
    "overview",
    "queue",
    "schedules",
    "shard_ranges",
]
