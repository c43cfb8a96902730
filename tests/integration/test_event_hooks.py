"""@app.on_event hooks run by App.follow_events: every terminal transition once, in stream order, resumable."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pgsched import App
from pgsched.core.event import Event, parse_payload
from tests.integration.conftest import wait_for


def test_follow_events_runs_hooks_by_state_and_reports_positions(app: App) -> None:
    seen: list[tuple[str, int, str]] = []
    positions: list[int] = []

    @app.task(name="e.ok")
    def ok() -> None: ...

    @app.on_event("completed")
    def on_completed(event: Event) -> None:
        seen.append(("completed-hook", event.id, event.state))

    @app.on_event()
    async def on_any(event: Event) -> None:
        seen.append(("any-hook", event.id, event.state))

    stop = threading.Event()
    follower = threading.Thread(
        target=app.follow_events, kwargs={"since": 0, "stop": stop, "on_position": positions.append}
    )
    follower.start()
    try:
        done = ok.enqueue()
        cancelled = ok.enqueue()
        app.cancel(cancelled)
        app.drain()
        wait_for(lambda: len(seen) == 3, timeout=30, what=lambda: f"three hook calls, got {seen}")
    finally:
        stop.set()
        follower.join(timeout=10)
    assert not follower.is_alive()
    assert seen == [
        ("any-hook", cancelled, "cancelled"),
        ("completed-hook", done, "completed"),
        ("any-hook", done, "completed"),
    ]
    assert positions == sorted(positions)
    assert len(positions) == 2

    # Resuming from the first position: only the later event, and its hooks, again.
    seen.clear()
    stop = threading.Event()
    again = threading.Thread(target=app.follow_events, kwargs={"since": positions[0], "stop": stop})
    again.start()
    try:
        wait_for(lambda: len(seen) == 2, timeout=30, what=lambda: f"two hook calls, got {seen}")
    finally:
        stop.set()
        again.join(timeout=10)
    assert [s[1] for s in seen] == [done, done]


def test_unknown_event_states_are_refused(app: App) -> None:
    with pytest.raises(ValueError, match="completed, dead, cancelled"):
        app.on_event("failed")


@pytest.mark.parametrize("payload", ["", "marker", "[]", '{"id": 1}', '{"id": "x", "queue": "q", "task": "t"}'])
def test_payloads_that_are_not_events_are_ignored(payload: Any) -> None:
    assert parse_payload(payload) is None


class _Crash(BaseException):
    """What a follower dying in a hook looks like to follow_events (no hook-error handling catches it)."""


def _one_transaction_of_three_events(app: App) -> tuple[int, list[int]]:
    """Three jobs cancelled in one transaction (their events share a position); the position before them."""
    import psycopg

    from pgsched.api.events import current_position

    with psycopg.connect(app.dsn, autocommit=True) as conn:
        before = current_position(conn)
        with conn.transaction():
            ids = [int(conn.execute("SELECT pgsched.enqueue('e.batch') AS id").fetchone()[0]) for _ in range(3)]
            for job_id in ids:
                conn.execute("SELECT pgsched.cancel(%s)", [job_id])
    return before, ids


def test_a_follower_stopped_or_dead_inside_a_transaction_skips_none_of_its_events(app: App) -> None:
    before, ids = _one_transaction_of_three_events(app)
    stop = threading.Event()
    seen: list[int] = []
    positions: list[int] = []
    crash_at: list[int] = []

    @app.on_event("cancelled")
    def on_cancelled(event: Event) -> None:
        seen.append(event.id)
        if crash_at and len(seen) == crash_at[0]:
            raise _Crash
        if not crash_at and len(seen) == 1:
            stop.set()  # a SIGTERM after the first event of the transaction

    # Stopped after the first event: the rest of its transaction still runs, then its position is saved.
    last = app.follow_events(since=before, stop=stop, on_position=positions.append)
    assert seen == ids
    assert positions == [last]

    # Dead at the second event: no position was saved inside the transaction, so a restart from the
    # last saved one (before it) runs all three again, at least once, and skips none.
    seen.clear()
    positions.clear()
    crash_at.append(2)
    with pytest.raises(_Crash):
        app.follow_events(since=before, stop=threading.Event(), on_position=positions.append)
    assert seen == ids[:2]
    assert positions == []
