"""An App with status event hooks for `pgsched events --app`: each hook appends a line to $EVENTS_OUT."""

from __future__ import annotations

import os

from pgsched import App
from pgsched.core.event import Event

app = App()


def _record(kind: str, event: Event) -> None:
    with open(os.environ["EVENTS_OUT"], "a") as out:
        out.write(f"{kind} {event.id} {event.state} {event.position}\n")


@app.on_event("dead", "cancelled")
def trouble(event: Event) -> None:
    _record("trouble", event)


@app.on_event()
def every(event: Event) -> None:
    _record("every", event)


@app.on_event("completed")
def broken(event: Event) -> None:
    raise RuntimeError("a broken hook does not stop the others")
