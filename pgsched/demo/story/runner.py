"""The order of the scenes, the scratch databases they run in, and the story as text or data."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgsched.db import schema
from pgsched.demo.story import scenes_jobs, scenes_race, scenes_schedules
from pgsched.demo.story.stage import Q, SceneResult, Stage, day, hms, stamp
from pgsched.errors import ConfigurationError, from_psycopg

log = logging.getLogger(__name__)

SHARDS = 8
DAY_ONE = datetime(2099, 3, 28, 12, 0, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Scene:
    """One numbered scene: what it shows, and when on the pretend clock it starts."""

    title: str
    play: Callable[[Stage], None]
    start: datetime = DAY_ONE


SCENES: tuple[Scene, ...] = (
    Scene("A job enqueued for later starts on the dot, not before", scenes_jobs.delayed_job),
    Scene("Two scanners split the shards; one dies and the other takes over", scenes_race.scanner_takeover),
    Scene("A worker stalls past its lease: the job runs twice, its effect happens once", scenes_jobs.crashed_worker),
    Scene("One idempotency key, one job, also after it completed", scenes_jobs.idempotency),
    Scene("A daily 02:30 in Europe/Berlin when the clocks spring forward", scenes_schedules.dst_gap),
    Scene(
        "A daily 02:30 in Europe/Berlin when the clocks fall back",
        scenes_schedules.dst_overlap,
        datetime(2099, 10, 24, 12, 0, tzinfo=UTC),
    ),
    Scene(
        "Two hours of downtime under each misfire policy",
        scenes_schedules.downtime,
        datetime(2099, 6, 1, 8, 55, tzinfo=UTC),
    ),
    Scene("A cancel racing a claim, in both orders", scenes_race.cancel_races_claim),
)

HEADER = (
    "pgsched story: the scheduler's promises, scene by scene, on a pretend clock.\n"
    "Times are UTC on a pretend clock set in 2099, handed to the SQL functions as p_now, so the\n"
    "real clock decides nothing. Each scene runs in a fresh scratch database, dropped afterwards.\n"
)


@dataclass
class Story:
    """The scenes that ran, in order."""

    scenes: list[SceneResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(scene.ok for scene in self.scenes)

    def text(self) -> str:
        """The story in plain words: the same bytes on every run (what `pgsched demo --story` prints)."""
        blocks = [HEADER, *(render_scene(scene) for scene in self.scenes), footer(self.scenes)]
        return "\n".join(blocks)

    def as_dict(self) -> dict[str, Any]:
        """The same story as data: scenes, their steps with values, and their checked claims."""
        return {
            "clock": "pretend (UTC, passed as p_now)",
            "ok": self.ok,
            "scenes": [
                {
                    "number": scene.number,
                    "title": scene.title,
                    "steps": [{"at": stamp(step.at), "text": step.text, "values": step.values} for step in scene.steps],
                    "claims": [{"text": check.text, "holds": check.holds} for check in scene.checks],
                }
                for scene in self.scenes
            ],
        }


def footer(scenes: Sequence[SceneResult]) -> str:
    held = sum(check.holds for scene in scenes for check in scene.checks)
    total = sum(len(scene.checks) for scene in scenes)
    return f"{held} of {total} claims hold.\n"


def render_scene(scene: SceneResult) -> str:
    lines = [f"Scene {scene.number}. {scene.title}"]
    shown_day = None
    for step in scene.steps:
        today = day(step.at)
        if today != shown_day:
            lines.append(f"  {today} ({step.at.astimezone(UTC):%A})")
            shown_day = today
        lines.append(f"  {hms(step.at):<12}  {step.text}")
    lines += [f"  {'✓' if check.holds else '✗'} {check.text}" for check in scene.checks]
    return "\n".join(lines) + "\n"


def with_database(dsn: str, database: str) -> str:
    """The same connection settings, another database."""
    params = conninfo_to_dict(dsn)
    params["dbname"] = database
    return make_conninfo("", **params)


def run_story(
    dsn: str,
    scenes: Sequence[int] | None = None,
    *,
    keep: bool = False,
    on_scene: Callable[[SceneResult], None] | None = None,
) -> Story:
    """Play the scenes (all by default) in scratch databases on the server of ``dsn``.

    The role of ``dsn`` must be allowed to create databases; it owns the scratch databases,
    which is what lets it move the functions' clock. With ``keep`` each scene's database is
    left in place (named in its result) for inspection; otherwise all are dropped, whatever
    happens. ``on_scene`` sees each scene as soon as it is played.
    """
    numbers = list(scenes) if scenes else list(range(1, len(SCENES) + 1))
    for number in numbers:
        if not 1 <= number <= len(SCENES):
            raise ConfigurationError(f"there is no scene {number}: scenes are 1 to {len(SCENES)}")
    prefix = f"pgsched_story_{os.getpid()}_{secrets.token_hex(3)}"
    story = Story()
    created: list[str] = []
    with _terminate_as_exit(), _scratch(dsn, created, keep=keep) as make:
        template = make(f"{prefix}_template", None)
        with psycopg.connect(with_database(dsn, template), autocommit=True) as conn:
            schema.install_fresh(conn, shards=SHARDS)
            conn.execute(Q["tables"])
        for number in numbers:
            scene = SCENES[number - 1]
            result = SceneResult(number, scene.title)
            database = make(f"{prefix}_scene{number}", template)
            stage = Stage(with_database(dsn, database), result, scene.start)
            try:
                scene.play(stage)
            finally:
                stage.close()
            if keep:
                result.database, result.dsn = database, stage.dsn
            story.scenes.append(result)
            if on_scene is not None:
                on_scene(result)
    return story


@contextmanager
def _scratch(dsn: str, created: list[str], *, keep: bool) -> Iterator[Callable[[str, str | None], str]]:
    """Creates databases on request; drops them all at the end (kept scenes' excepted when keep)."""

    def make(name: str, template: str | None) -> str:
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template or "template0")
        )
        # Recorded before it exists: an interrupt that lands while the server creates it (or
        # just after) still finds it in the list, and the drop is IF EXISTS.
        created.append(name)
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(statement)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise ConfigurationError(
                "the story needs a role that may create databases (it plays each scene in a scratch "
                f"database of its own and drops it): {exc.diag.message_primary}"
            ) from exc
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc
        return name

    try:
        yield make
    finally:
        doomed = [name for name in created if not keep or name.endswith("_template")]
        _drop(dsn, doomed)


def _drop(dsn: str, names: list[str]) -> None:
    if not names:
        return
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name in reversed(names):
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        log.error("could not drop the story's scratch databases %s: %s", ", ".join(names), exc)
        print(f"warning: scratch databases left behind: {', '.join(names)} ({exc})", file=sys.stderr)


@contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C does, so the scratch databases are dropped on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
