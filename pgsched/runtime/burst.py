"""--burst: what a worker whose claim came back empty still waits for before it may stop.

A burst worker stops when nothing is due, nothing runs here and no completion of its own is still being written
(a completion may release dependents). Due jobs it could not claim are held back by a queue's limits (every
concurrency slot leased, a rate window full, a per-key limit) or locked by another worker's claim in flight: all of
them reopen by themselves, so the worker waits for them and says so; jobs of paused queues, jobs whose labels it
does not offer and jobs not yet due are not waited for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from pgsched.db import queries


@dataclass(frozen=True, slots=True)
class HeldBack:
    """Due jobs of one queue that a burst worker may claim once a limit reopens."""

    queue: str
    due: int
    concurrency: int | None
    key_concurrency: int | None
    rate: int | None
    key_rate: int | None

    def describe(self) -> str:
        limits = [
            f"{name} {value}"
            for name, value in (
                ("concurrency", self.concurrency),
                ("key concurrency", self.key_concurrency),
                ("rate", self.rate),
                ("key rate", self.key_rate),
            )
            if value is not None
        ]
        jobs = "1 due job" if self.due == 1 else f"{self.due} due jobs"
        return f"{jobs} of queue {self.queue!r} ({', '.join(limits) or 'claimed by another worker just now'})"


def held_back(conn: psycopg.Connection[Any], queues: Sequence[str], labels: Sequence[str]) -> list[HeldBack]:
    """The due jobs of these queues (unpaused, with labels among these) per queue, with the queue's limits."""
    with conn.cursor(row_factory=class_row(HeldBack)) as cur:
        return cur.execute(queries.HELD_BACK, (list(queues), list(labels))).fetchall()


def describe(waiting: Sequence[HeldBack]) -> str:
    return "; ".join(h.describe() for h in waiting)
