"""Status events: the NOTIFY a finished job sends, the gap-free stream behind it, and hooks run on it.

Every terminal transition (completed, dead, cancelled) files a history row
and, unless ``pgsched.config.events`` is off, sends a NOTIFY on
``pgsched_events`` whose payload is ``{"id", "queue", "task", "state",
"attempt"}``. The NOTIFY is a hint: it is lost when nobody listens. The
record is the history row, read in order with ``pgsched.read_events``
from a position (docs/events.md). ``EventFollower`` does exactly that,
woken by the NOTIFY and polling as a fallback; ``pgsched events --follow``
and ``App.follow_events`` are built on it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
from psycopg.rows import tuple_row

from pgsched.core.event import CHANNEL, STATES, Event
from pgsched.db import queries
from pgsched.db.dbconn import connect_options

log = logging.getLogger(__name__)

Hook = Callable[["Event"], Any]
H = TypeVar("H", bound=Hook)


def current_position(conn: psycopg.Connection[Any]) -> int:
    """The position just before every transaction not yet ended: following from it misses nothing new."""
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(queries.EVENTS_POSITION).fetchone()
    assert row is not None
    return int(row[0])


def read_events(conn: psycopg.Connection[Any], after: int, limit: int = 1000) -> list[Event]:
    """The events filed after position ``after`` (whole transactions, in order), at most about ``limit``."""
    with conn.cursor(row_factory=tuple_row) as cur:
        rows = cur.execute(queries.READ_EVENTS, (after, limit)).fetchall()
    return [
        Event(
            position=int(pos),
            id=int(job_id),
            queue=queue,
            task=task,
            state=str(state),
            attempt=int(attempt),
            finished_at=finished_at,
            error=error,
        )
        for pos, job_id, queue, task, state, attempt, finished_at, error in rows
    ]


class EventFollower:
    """Iterates over the event stream from ``since`` (default: now), forever or until ``stop`` is set.

    Reads ``pgsched.read_events`` in batches; when it has caught up it waits
    for a NOTIFY on pgsched_events, at most ``poll_interval`` seconds (the
    fallback when notifications do not arrive: events off, a pooler in
    transaction mode, a dropped LISTEN). ``position`` is where to resume
    once the event just yielded is handled (pass it as ``since`` after a
    restart): that event's position when it is the last of its transaction,
    else the previous transaction's, so the rest of a transaction is never
    skipped (a restart runs its events again: at least once).
    A lost connection is reopened with backoff, from the same position.
    """

    def __init__(
        self,
        dsn: str,
        *,
        since: int | None = None,
        poll_interval: float = 1.0,
        batch: int = 1000,
        stop: threading.Event | None = None,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        if since is not None and since < 0:
            raise ValueError("a position is 0 or a position an event carried")
        self._dsn = dsn
        self.position = since
        self._poll = poll_interval
        self._batch = batch
        self.stop = stop or threading.Event()
        self.connected = threading.Event()

    def __iter__(self) -> Iterator[Event]:
        failures = 0
        while not self.stop.is_set():
            try:
                options = connect_options(self._dsn, "pgsched events")
                with psycopg.connect(self._dsn, autocommit=True, connect_timeout=10, **options) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if self.position is None:
                        self.position = current_position(conn)
                    self.connected.set()
                    failures = 0
                    yield from self._follow(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self.connected.clear()
                if self.stop.is_set():
                    return
                failures += 1
                delay = min(5.0, 0.1 * 2 ** min(failures, 6))
                log.warning("events: connection lost (%s); resuming from %s in %.1fs", exc, self.position, delay)
                self.stop.wait(delay)

    def _follow(self, conn: psycopg.Connection[Any]) -> Iterator[Event]:
        # After a NOTIFY the row may wait for an older transaction to end
        # before it can be read in order: look again soon, then less often.
        retry = self._poll
        while not self.stop.is_set():
            assert self.position is not None
            found = read_events(conn, self.position, self._batch)
            for i, event in enumerate(found):
                assert event.position is not None
                # The events of one transaction share a position (a batch holds them all): the
                # position moves past a transaction only with its last event, and a stop waits for
                # it, so resuming from the position never skips the rest of a transaction.
                whole = i + 1 == len(found) or found[i + 1].position != event.position
                if whole:
                    self.position = event.position
                yield event
                if whole and self.stop.is_set():
                    return
            if len(found) >= self._batch:
                continue
            if self._wait(conn, retry):
                for _ in conn.notifies(timeout=0.0):  # one read covers every notification waiting
                    pass
                retry = 0.02
            else:
                retry = min(self._poll, retry * 2)

    def _wait(self, conn: psycopg.Connection[Any], timeout: float) -> bool:
        """Wait for a NOTIFY up to timeout; True when one came. Short slices: stop is seen within 0.25 s."""
        deadline = time.monotonic() + timeout
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            came = False
            for _ in conn.notifies(timeout=min(0.25, left), stop_after=1):
                came = True
            if came:
                return True
        return False


class EventHooks:
    """Hooks registered with ``App.on_event``, by state; run by ``run`` where events are followed."""

    def __init__(self) -> None:
        self._hooks: dict[str, list[Hook]] = {state: [] for state in STATES}
        self._loop: asyncio.AbstractEventLoop | None = None

    def register(self, *states: str) -> Callable[[H], H]:
        chosen = states or STATES
        unknown = [s for s in chosen if s not in STATES]
        if unknown:
            raise ValueError(f"events are {', '.join(STATES)}; not {', '.join(map(repr, unknown))}")

        def add(fn: H) -> H:
            for state in chosen:
                if fn not in self._hooks[state]:
                    self._hooks[state].append(fn)
            return fn

        return add

    def __bool__(self) -> bool:
        return any(self._hooks.values())

    def for_state(self, state: str) -> list[Hook]:
        return list(self._hooks.get(state, ()))

    def run(self, event: Event) -> int:
        """Call every hook of the event's state, in registration order; returns how many raised.

        A hook that raises is logged and the others still run: one broken
        hook does not stop the stream.
        """
        failed = 0
        for hook in self._hooks.get(event.state, ()):
            try:
                value = hook(event)
                if inspect.isawaitable(value):
                    if self._loop is None:
                        self._loop = asyncio.new_event_loop()
                    self._loop.run_until_complete(_await(value))
            except Exception:
                failed += 1
                log.exception(
                    "event hook %s failed for job %s (%s)",
                    getattr(hook, "__qualname__", hook),
                    event.id,
                    event.state,
                    extra={"job_id": event.id, "queue": event.queue, "task": event.task},
                )
        return failed

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None


async def _await(value: Any) -> Any:
    return await value
