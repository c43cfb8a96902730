"""The history checker, after Jepsen's total-queue: what went in must come out, once in effect.

The history is built from the enqueue acknowledgements the test collected
(job ids returned to it), the probe's chaos.runs and chaos.effects, and the
final states in pgsched.jobs / pgsched.job_history. Pass rule: nothing lost,
nothing unexpected, no effect twice, and every repeated run of a job came
with a higher attempt and a new, higher fencing token.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import dict_row


@dataclass
class Report:
    scenario: str
    enqueued: int = 0
    runs: int = 0
    completed: int = 0
    lost: list[int] = field(default_factory=list)
    unexpected: list[int] = field(default_factory=list)
    duplicate_runs: int = 0  # jobs that ran more than once
    extra_runs: int = 0  # runs beyond the first, over all jobs
    duplicate_effects: list[str] = field(default_factory=list)
    missing_effects: list[int] = field(default_factory=list)  # completed, but no effect recorded
    stale_refused: int = 0  # effects the fence refused
    bad_reruns: list[str] = field(default_factory=list)  # a rerun without a higher attempt and token
    overwritten: list[int] = field(default_factory=list)  # a job with two terminal records
    still_leased: list[int] = field(default_factory=list)
    recovery_s: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.duplicate_effects
            or self.bad_reruns
            or self.overwritten
            or self.missing_effects
        )

    def table(self) -> str:
        rec = "-" if self.recovery_s is None else f"{self.recovery_s:.1f}s"
        rows = [
            ("scenario", self.scenario),
            ("enqueued (acked)", self.enqueued),
            ("runs", self.runs),
            ("completed", self.completed),
            ("lost", len(self.lost)),
            ("unexpected", len(self.unexpected)),
            ("duplicate runs (jobs / extra runs)", f"{self.duplicate_runs} / {self.extra_runs}"),
            ("duplicate effects", len(self.duplicate_effects)),
            ("stale effects refused", self.stale_refused),
            ("reruns without new attempt+token", len(self.bad_reruns)),
            ("terminal state overwritten", len(self.overwritten)),
            ("still leased at the end", len(self.still_leased)),
            ("recovery time", rec),
            *((k, v) for k, v in self.notes.items()),
            ("verdict", "PASS" if self.ok else "FAIL"),
        ]
        width = max(len(str(k)) for k, _ in rows)
        line = "+" + "-" * (width + 2) + "+" + "-" * 40 + "+"
        out = [line] + [f"| {k!s:<{width}} | {v!s:<38} |" for k, v in rows] + [line]
        if not self.ok:
            out.append(
                f"lost={self.lost[:20]} unexpected={self.unexpected[:20]} dup_effects={self.duplicate_effects[:20]}"
                f" bad_reruns={self.bad_reruns[:10]} overwritten={self.overwritten[:20]}"
                f" missing_effects={self.missing_effects[:20]}"
            )
        return "\n".join(out)


def check(
    dsn: str,
    scenario: str,
    acked: Iterable[int],
    *,
    expect: Mapping[int, str] | None = None,
    task: str = "chaos.probe",
) -> Report:
    """expect maps job ids to the terminal state they must end in (default: 'completed')."""
    acked_ids = set(acked)
    expect = dict(expect or {})
    report = Report(scenario=scenario, enqueued=len(acked_ids))
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        runs = conn.execute("SELECT * FROM chaos.runs ORDER BY job_id, token").fetchall()
        effects = conn.execute("SELECT * FROM chaos.effects").fetchall()
        finals = conn.execute(
            "SELECT id, state::text AS state, lease_token, count(*) OVER (PARTITION BY id) AS n"
            " FROM pgsched.job_history WHERE task = %s",
            [task],
        ).fetchall()
        active = conn.execute(
            "SELECT id, state::text AS state, leased_by FROM pgsched.jobs WHERE task = %s", [task]
        ).fetchall()
        retried = {
            r["job_id"]
            for r in conn.execute("SELECT DISTINCT job_id FROM pgsched.job_events WHERE kind = 'retried'").fetchall()
        }

    report.runs = sum(1 for r in runs if r["job_id"] in acked_ids)
    by_job: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by_job[r["job_id"]].append(r)
    final: dict[int, str] = {}
    for row in finals:
        final[row["id"]] = row["state"]
        if row["n"] > 1 and row["id"] not in retried:
            report.overwritten.append(row["id"])
    active_state = {row["id"]: row["state"] for row in active}
    report.still_leased = sorted(row["id"] for row in active if row["state"] == "running")

    for job_id in sorted(acked_ids):
        want = expect.get(job_id, "completed")
        got = final.get(job_id)
        if got != want:
            report.lost.append(job_id)
        if got == "completed":
            report.completed += 1
    known = acked_ids | set(final) | set(active_state)
    report.unexpected = sorted({r["job_id"] for r in runs if r["job_id"] not in acked_ids and r["job_id"] not in known})
    report.unexpected += sorted({e["job_id"] for e in effects if e["job_id"] not in known})

    effect_jobs = {e["job_id"] for e in effects}
    applied: dict[int, int] = defaultdict(int)
    for r in runs:
        if r["effect"] == "applied":
            applied[r["job_id"]] += 1
        if r["effect"] == "stale":
            report.stale_refused += 1
    report.duplicate_effects = [f"job {j}: {n} effects" for j, n in applied.items() if n > 1]
    report.missing_effects = sorted(j for j in acked_ids if final.get(j) == "completed" and j not in effect_jobs)

    for job_id, job_runs in by_job.items():
        if job_id not in acked_ids or len(job_runs) < 2:
            continue
        report.duplicate_runs += 1
        report.extra_runs += len(job_runs) - 1
        ordered = sorted(job_runs, key=lambda r: r["token"])
        for prev, nxt in itertools.pairwise(ordered):
            if not (nxt["token"] > prev["token"] and nxt["attempt"] > prev["attempt"]):
                report.bad_reruns.append(
                    f"job {job_id}: attempt {prev['attempt']} token {prev['token']}"
                    f" then attempt {nxt['attempt']} token {nxt['token']}"
                )
    return report


def emit(report: Report) -> None:
    print(f"\n[chaos] {report.scenario}\n{report.table()}", flush=True)
