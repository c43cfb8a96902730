"""Scenes of recurring schedules: a named zone's DST changes with their policies, and downtime with
each misfire policy. Expansion and promotion go through the scanner's own code and SQL functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from pgsched.demo.story.stage import Stage, hms, holdings, stamp

ZONE = "Europe/Berlin"
SCANNER = "scanner-1"
LEASE = 3600.0  # one scanner alone: a long lease keeps the narration short


def _schedule(stage: Stage, name: str, cron: str, timezone: str = "UTC", **policies: Any) -> None:
    params: dict[str, Any] = {
        "gap_policy": "run",
        "overlap_policy": "once",
        "misfire_policy": "latest",
        "misfire_cap": 100,
        "misfire_grace": timedelta(minutes=1),
        "concurrency": "skip",
        "horizon": timedelta(days=1),
    }
    params.update(policies)
    stage.one("upsert_schedule", name=name, cron=cron, task="story.tick", timezone=timezone, queue="story", **params)


def _local(moment: datetime) -> str:
    return moment.astimezone(ZoneInfo(ZONE)).strftime("%H:%M %Z")


def _occurrences(stage: Stage, names: list[str]) -> list[dict[str, Any]]:
    return stage.all("occurrences", names=names)


def _say_decisions(stage: Stage, names: list[str]) -> list[dict[str, Any]]:
    rows = _occurrences(stage, names)
    for row in rows:
        job = f"job {row['job_id']}" if row["job_id"] is not None else "no job"
        stage.say(
            f"  {row['schedule']}: nominal {row['nominal']} -> {row['decision']} at {hms(row['fire_at'])} UTC "
            f"= {_local(row['fire_at'])}, {job}" + (f" ({row['reason']})" if row["reason"] else ""),
            schedule=row["schedule"],
            nominal=row["nominal"],
            fire_at=stamp(row["fire_at"]),
            dst=row["dst"],
            decision=row["decision"],
            job_id=row["job_id"],
        )
    return rows


def _tick(stage: Stage, shards: dict[int, int], worker: str = "worker-1") -> list[dict[str, Any]]:
    """A scanner tick (renew, scan) and a worker that runs and completes everything available."""
    shards.update(stage.acquire(SCANNER, LEASE))
    _expired, promoted = stage.scan(SCANNER, shards)
    ran = sorted(stage.claim(worker, n=100), key=lambda lease: lease["id"])
    for lease in ran:
        stage.complete(lease["id"], lease["lease_token"])
    ids = ", ".join(str(lease["id"]) for lease in ran)
    work = f"{worker} runs and completes job{'s' if len(ran) > 1 else ''} {ids}" if ran else "nothing to run"
    stage.say(
        f"scanner tick: {promoted} promoted; {work}",
        promoted=promoted,
        ran=[lease["id"] for lease in ran],
    )
    return ran


def dst_gap(stage: Stage) -> None:
    """A daily 02:30 in Europe/Berlin on the spring-forward day: moved to 03:00 CEST, or skipped."""
    spring = ["berlin-gap-run", "berlin-gap-skip"]
    _schedule(stage, spring[0], "30 2 * * *", ZONE, gap_policy="run")
    _schedule(stage, spring[1], "30 2 * * *", ZONE, gap_policy="skip")
    shards = stage.acquire(SCANNER, LEASE)
    stage.say(
        f"two schedules '30 2 * * *' in {ZONE}: {spring[0]} (gap_policy run) and {spring[1]} (gap_policy skip); "
        f"{SCANNER} holds every shard and expands them a day ahead",
        schedules=spring,
    )
    for name in spring:
        stage.expand(SCANNER, shards, name)
    stage.say(f"on 2099-03-29 clocks in {ZONE} jump from 02:00 CET to 03:00 CEST: 02:30 does not exist")
    gap = _say_decisions(stage, spring)
    fire = min(row["fire_at"] for row in gap if row["job_id"] is not None)
    stage.at(fire - timedelta(seconds=1))
    early = _tick(stage, shards)
    stage.at(fire)
    on_time = _tick(stage, shards)
    decisions = {row["schedule"]: row["decision"] for row in gap}
    stage.fact(decisions=decisions, ran_at=stamp(fire))
    stage.check(
        f"{spring[0]} ran once, at 03:00 CEST and not a second early; {spring[1]} did not run",
        not early and len(on_time) == 1 and decisions == {spring[0]: "fire", spring[1]: "skipped_gap"},
    )


def dst_overlap(stage: Stage) -> None:
    """A daily 02:30 in Europe/Berlin on the fall-back day: once at the first pass, or at both."""
    fall = ["berlin-overlap-once", "berlin-overlap-twice"]
    _schedule(stage, fall[0], "30 2 * * *", ZONE, overlap_policy="once")
    _schedule(stage, fall[1], "30 2 * * *", ZONE, overlap_policy="twice")
    shards = stage.acquire(SCANNER, LEASE)
    stage.say(
        f"two schedules '30 2 * * *' in {ZONE}: {fall[0]} (overlap_policy once) and {fall[1]} "
        f"(overlap_policy twice); {SCANNER} holds every shard and expands them a day ahead",
        schedules=fall,
    )
    for name in fall:
        stage.expand(SCANNER, shards, name)
    stage.say(f"on 2099-10-25 clocks in {ZONE} fall back from 03:00 CEST to 02:00 CET: 02:30 happens twice")
    overlap = _say_decisions(stage, fall)
    for moment in sorted({row["fire_at"] for row in overlap if row["job_id"] is not None}):
        stage.at(moment)
        _tick(stage, shards)
    ran_at: dict[str, list[datetime]] = {name: [] for name in fall}
    for row in _occurrences(stage, fall):
        if row["state"] == "completed":
            ran_at[row["schedule"]].append(row["started_at"])
    stage.fact(ran_at={name: [stamp(t) for t in times] for name, times in ran_at.items()})
    stage.check(
        f"{fall[0]} ran once (the first 02:30, CEST), {fall[1]} twice (02:30 CEST and, an hour later, 02:30 CET)",
        len(ran_at[fall[0]]) == 1
        and len(ran_at[fall[1]]) == 2
        and ran_at[fall[1]][1] - ran_at[fall[1]][0] == timedelta(hours=1),
    )


def downtime(stage: Stage) -> None:
    """Every 15 minutes, then two hours with no scanner: what each misfire policy runs when it is back."""
    policies = {"every-15-skip": "skip", "every-15-latest": "latest", "every-15-all": "all"}
    for name, policy in policies.items():
        _schedule(
            stage, name, "*/15 * * * *", misfire_policy=policy, misfire_cap=3, concurrency="allow",
            horizon=timedelta(hours=1),
        )  # fmt: skip
    names = list(policies)
    shards = stage.acquire(SCANNER, LEASE)
    for name in names:
        stage.expand(SCANNER, shards, name)
    stage.say(
        "three schedules '*/15 * * * *' (UTC), misfire_grace 1 minute, misfire_cap 3, concurrency allow, "
        "misfire_policy skip, latest and all; expanded an hour ahead",
        schedules=policies,
    )
    first = min(row["fire_at"] for row in _occurrences(stage, names))
    stage.at(first)
    _tick(stage, shards)
    stage.wait(5 * 60)
    stage.say("the scanner and the workers go down (a deploy gone wrong)")

    stage.at(first + timedelta(hours=2, minutes=10))
    shards = stage.acquire(SCANNER, LEASE)
    stage.say(f"{SCANNER} is back after two hours; its lease had lapsed, so it takes {holdings(shards)}")
    for name in names:
        stage.expand(SCANNER, shards, name)
    back = stage.now
    _tick(stage, shards)
    rows = [row for row in _occurrences(stage, names) if first < row["fire_at"] <= back]
    ran: dict[str, list[str]] = {name: [] for name in names}
    for name in names:
        mine = [row for row in rows if row["schedule"] == name]
        for row in mine:
            if row["state"] == "completed":
                ran[name].append(hms(row["fire_at"]))
        stage.say(
            f"  {name} (misfire_policy {policies[name]}): {len(mine)} occurrences fell in the downtime",
            schedule=name,
            ran=ran[name],
        )
        groups: dict[str, list[str]] = {}
        for row in mine:
            groups.setdefault(_outcome(row), []).append(row["fire_at"].astimezone(UTC).strftime("%H:%M"))
        for outcome, times in groups.items():
            stage.say(f"    {', '.join(times)}: {outcome}", schedule=name, outcome=outcome, fire_at=times)
    stage.fact(ran={name: list(times) for name, times in ran.items()}, back=stamp(back))
    stage.check("misfire_policy skip ran none of the missed occurrences", not ran["every-15-skip"])
    stage.check("latest ran only the most recent one", ran["every-15-latest"] == [hms(max(r["fire_at"] for r in rows))])
    stage.check("all ran the most recent ones, at most misfire_cap (3)", 1 <= len(ran["every-15-all"]) <= 3)


def _outcome(row: dict[str, Any]) -> str:
    """What became of one occurrence, as the database recorded it."""
    if row["state"] == "completed":
        return f"ran (started {hms(row['started_at'])})"
    if row["job_id"] is None:
        return f"never queued: the expansion decided {row['decision']} ({row['reason']})"
    if row["state"] in ("cancelled", "dead"):
        why = str(row["error"] or row["reason"] or row["decision"]).split(": due at")[0]
        return f"queued, then {row['state']} when promoted ({why})"
    return f"still {row['state']} ({row['decision']})"
