"""A status event: one terminal transition of one job, as its NOTIFY payload and the event stream carry it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from pgsched.core.job import TERMINAL_STATES

CHANNEL = "pgsched_events"
STATES = TERMINAL_STATES


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One terminal transition of one job.

    ``position`` (the stream position, see ``pgsched.read_events``),
    ``finished_at`` and ``error`` are known when the event was read from the
    history; an event parsed from a NOTIFY payload has only the five fields
    of the payload.
    """

    id: int
    queue: str
    task: str
    state: str
    attempt: int
    position: int | None = None
    finished_at: datetime | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.finished_at is not None:
            out["finished_at"] = self.finished_at.isoformat()
        return out


def parse_payload(payload: str) -> Event | None:
    """The event in a pgsched_events NOTIFY payload; None for anything that is not one."""
    try:
        data = json.loads(payload)
        return Event(
            id=int(data["id"]),
            queue=str(data["queue"]),
            task=str(data["task"]),
            state=str(data["state"]),
            attempt=int(data["attempt"]),
        )
    except (ValueError, TypeError, KeyError):
        return None
