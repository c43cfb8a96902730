"""One scene's stage: its scratch database, the pretend clock, the actors' SQL calls, and the narration."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import groupby
from pathlib import Path
from typing import Any, Final, LiteralString

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pgsched.errors import PgschedError
from pgsched.runtime.scanner import plan_occurrences

QUEUE: Final = "story"


class StoryFailed(PgschedError):
    """A scene could not be staged as written (a race that did not happen the way it was set up)."""


def _load() -> dict[str, LiteralString]:
    text: str = Path(__file__).with_name("queries.sql").read_text()
    found: dict[str, LiteralString] = {}
    for block in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, _, body = block.partition("\n")
        lines = [line for line in body.splitlines() if line.strip() and not line.startswith("--")]
        query: str = "\n".join(lines)
        found[name.strip()] = query
    return found


Q: Final = _load()


@dataclass(frozen=True, slots=True)
class Step:
    """One thing that happened, at a time on the pretend clock, with the values it showed."""

    at: datetime
    text: str
    values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Check:
    """A scene's claim, checked against its database before the scene ends."""

    text: str
    holds: bool


@dataclass
class SceneResult:
    """What one scene did: its steps and checked claims, and facts for whoever inspects its database."""

    number: int
    title: str
    steps: list[Step] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    database: str | None = None  # set when the scratch database is kept
    dsn: str | None = None

    @property
    def ok(self) -> bool:
        return all(check.holds for check in self.checks)


def hms(moment: datetime) -> str:
    """A time on the pretend clock as UTC HH:MM:SS (fractions only when there are any)."""
    utc = moment.astimezone(UTC)
    return utc.strftime("%H:%M:%S.%f")[:-3] if utc.microsecond else utc.strftime("%H:%M:%S")


def day(moment: datetime) -> str:
    """The UTC date of a time on the pretend clock, with its weekday."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d")


def stamp(moment: datetime | None) -> str | None:
    """A time on the pretend clock as ISO 8601 UTC with a Z, for the JSON story."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def shard_list(shards: Iterable[int]) -> str:
    """[0, 1, 2, 3, 6] -> '0-3, 6'."""
    ordered = sorted(shards)
    if not ordered:
        return "none"
    runs: list[list[int]] = [[ordered[0], ordered[0]]]
    for shard in ordered[1:]:
        if shard == runs[-1][1] + 1:
            runs[-1][1] = shard
        else:
            runs.append([shard, shard])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def holdings(shards: dict[int, int]) -> str:
    """{0: 1, 1: 1, 4: 2} -> 'shards 0-1 at epoch 1, shard 4 at epoch 2'."""
    if not shards:
        return "no shards"
    parts = []
    for epoch, group in groupby(sorted(shards.items(), key=lambda kv: (kv[1], kv[0])), key=lambda kv: kv[1]):
        members = [shard for shard, _ in group]
        parts.append(f"shard{'s' if len(members) > 1 else ''} {shard_list(members)} at epoch {epoch}")
    return ", ".join(parts)


class Stage:
    """The scratch database of one scene, driven on a pretend clock that only moves when told.

    Every SQL function that reads time is called with ``p_now`` = the pretend clock, on a
    connection of the database's owner (the only role that may move a function's clock).
    """

    def __init__(self, dsn: str, result: SceneResult, start: datetime) -> None:
        self.dsn = dsn
        self.result = result
        self.now = start
        self.conn = self.connect()

    def close(self) -> None:
        self.conn.close()

    def connect(self) -> psycopg.Connection[dict[str, Any]]:
        """A connection of the database's owner; times come back in UTC whatever the server's zone."""
        conn = psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row)
        conn.execute("SET TIME ZONE 'UTC'")
        return conn

    # -- the clock and the narration -------------------------------------

    def at(self, moment: datetime) -> None:
        if moment < self.now:
            raise ValueError(f"the pretend clock only moves forward ({moment} < {self.now})")
        self.now = moment

    def wait(self, seconds: float) -> None:
        self.at(self.now + timedelta(seconds=seconds))

    def say(self, text: str, **values: Any) -> None:
        self.result.steps.append(Step(self.now, text, values))

    def check(self, text: str, holds: bool) -> None:
        self.result.checks.append(Check(text, bool(holds)))

    def fact(self, **facts: Any) -> None:
        self.result.facts.update(facts)

    # -- the actors' calls -------------------------------------------------

    def one(self, query: str, conn: psycopg.Connection[Any] | None = None, /, **params: Any) -> dict[str, Any]:
        """The one row of the named query of queries.sql, with the pretend clock as %(now)s."""
        row = (conn or self.conn).execute(Q[query], {"now": self.now, **params}).fetchone()
        assert row is not None, query
        return dict(row)

    def all(self, query: str, conn: psycopg.Connection[Any] | None = None, /, **params: Any) -> list[Any]:
        """Every row of the named query of queries.sql, with the pretend clock as %(now)s."""
        return list((conn or self.conn).execute(Q[query], {"now": self.now, **params}).fetchall())

    def enqueue(self, task: str, key: str, run_at: datetime | None = None, args: dict[str, Any] | None = None) -> int:
        """pgsched.enqueue with an idempotency key (which also fixes the job's shard)."""
        row = self.one("enqueue", task=task, args=Jsonb(args or {}), queue=QUEUE, run_at=run_at or self.now, key=key)
        return int(row["id"])

    def key_on_shard(self, stem: str, shards: Iterable[int]) -> str:
        """The first key stem-1, stem-2, ... whose jobs land on one of ``shards``."""
        wanted = set(shards)
        for n in range(1, 1000):
            key = f"{stem}-{n}"
            if self.one("shard_for_key", key=key)["shard"] in wanted:
                return key
        raise StoryFailed(f"no key of {stem}-N lands on shards {sorted(wanted)}")  # pragma: no cover

    def promote(self) -> int:
        return int(self.one("promote_due")["n"])

    def expire(self) -> int:
        return int(self.one("expire_leases")["n"])

    def claim(
        self, worker: str, lease: float = 30, n: int = 1, conn: psycopg.Connection[Any] | None = None
    ) -> list[dict[str, Any]]:
        return self.all("claim", conn, worker=worker, queues=[QUEUE], n=n, lease=timedelta(seconds=lease))

    def complete(self, job_id: int, token: int) -> bool:
        return bool(self.one("complete", id=job_id, token=token)["accepted"])

    def heartbeat(self, job_id: int, token: int, lease: float = 30) -> dict[str, Any]:
        return self.one("heartbeat", id=job_id, token=token, lease=timedelta(seconds=lease))

    def job(self, job_id: int) -> dict[str, Any]:
        return self.one("job", id=job_id)

    def events(self, job_id: int) -> list[dict[str, Any]]:
        return self.all("events", id=job_id)

    def acquire(self, scanner: str, lease: float = 10) -> dict[int, int]:
        """pgsched.acquire_shards: the shards the scanner holds afterwards, with their epochs."""
        rows = self.all("acquire_shards", scanner=scanner, lease=timedelta(seconds=lease))
        return {int(r["shard"]): int(r["epoch"]) for r in rows}

    def scan(self, scanner: str, shards: dict[int, int]) -> tuple[int, int]:
        """pgsched.scan_shard over each held shard; returns (expired, promoted) in all."""
        expired = promoted = 0
        for shard, epoch in sorted(shards.items()):
            row = self.one("scan_shard", scanner=scanner, shard=shard, epoch=epoch)
            expired += int(row["expired"])
            promoted += int(row["promoted"])
        return expired, promoted

    def expand(self, scanner: str, shards: dict[int, int], name: str) -> int:
        """Expand one schedule the way a scanner does, with the pretend clock as its 'now'.

        The decisions come from the scanner's own `plan_occurrences` (cron, DST and
        misfire policies) and are filed by pgsched.add_occurrences, fenced by the epoch.
        """
        row = self.one("schedule", name=name)
        plan: list[dict[str, Any]] = []
        start = until = self.now
        if row["enabled"]:
            changed = row["expanded_version"] != row["version"]
            start = self.now if changed or row["expanded_until"] is None else row["expanded_until"]
            plan, until = plan_occurrences(row, start, self.now + row["horizon"], self.now)
        created = self.one(
            "add_occurrences",
            scanner=scanner,
            shard=row["shard"],
            epoch=shards[row["shard"]],
            name=name,
            version=row["version"],
            plan=json.dumps(plan),
            start=start,
            until=until,
        )["created"]
        return int(created)

    @contextmanager
    def blocked_call(self, conn: psycopg.Connection[Any], name: str, **params: Any) -> Iterator[list[Any]]:
        """Run a call on ``conn`` in a thread and yield once it waits for a lock; its rows
        fill the yielded list when it returns (after the ``with`` block, which must free the lock)."""
        out: list[Any] = []
        failure: list[BaseException] = []
        query, args = Q[name], {"now": self.now, **params}

        def call() -> None:
            try:
                out.extend(conn.execute(query, args).fetchall())
            except BaseException as exc:  # handed to the caller below
                failure.append(exc)

        pid = conn.info.backend_pid
        thread = threading.Thread(target=call, name=f"story-{name}", daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not self.one("blocked", pid=pid)["blocked"]:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise StoryFailed(f"{name} did not wait for the lock (finished: {not thread.is_alive()})")
            time.sleep(0.01)
        yield out
        thread.join(timeout=30)
        if failure:
            raise failure[0]
        if thread.is_alive():
            raise StoryFailed(f"{name} still waits after the lock was freed")
