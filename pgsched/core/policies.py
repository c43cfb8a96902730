"""The policy names a job or a schedule takes: one enum per kind, the one place Python writes them.

The database holds the same lists in its CHECK constraints (sql/10_tables.sql, sql/15_scheduling.sql)
and enqueue()'s own checks; ``tests/sql/test_limits.py`` holds each enum to them. The CLI's choices,
the App's checks and the scanner's expansion all take their values from here.
"""

from __future__ import annotations

from enum import StrEnum


class GapPolicy(StrEnum):
    """What a fixed-time schedule does at a local time that does not exist (spring forward)."""

    RUN = "run"  # fire at the first valid instant after the gap (cronsim / Debian cron)
    SKIP = "skip"  # do not fire that occurrence at all


class OverlapPolicy(StrEnum):
    """What a fixed-time schedule does at a local time that happens twice (fall back)."""

    ONCE = "once"  # fire at the first pass only (cronsim / Debian cron)
    TWICE = "twice"  # fire at both passes


class MisfirePolicy(StrEnum):
    """Which occurrences missed while no scanner ran are run late."""

    SKIP = "skip"  # none
    LATEST = "latest"  # only the most recent one
    ALL = "all"  # every one, up to a cap (the oldest are dropped beyond it)


class ConcurrencyPolicy(StrEnum):
    """What a schedule's occurrence does when the previous run is still going (schedules.concurrency)."""

    ALLOW = "allow"  # run anyway
    SKIP = "skip"  # do not run this one
    QUEUE = "queue"  # run it after the previous one
    REPLACE = "replace"  # cancel the previous run and run this one


class ConflictPolicy(StrEnum):
    """enqueue(on_conflict => ...): what an idempotency key another job holds does."""

    KEEP = "keep"  # the holder stays as it is (the default, also None)
    REPLACE = "replace"  # the holder, not yet started, takes this call's args, run_at and priority (debounce)


class KeyScope(StrEnum):
    """enqueue(key_scope => ...): how long a job's idempotency key is held."""

    ACTIVE = "active"  # while the job is active
    RETENTION = "retention"  # also for the retention after it ended (the install's default)


class DependencyPolicy(StrEnum):
    """enqueue(on_dependency_failure => ...): what a dependency ending dead or cancelled does to the job."""

    CANCEL = "cancel"  # cancel the dependent (the default)
    WAIT = "wait"  # leave it waiting for a redrive
    RUN = "run"  # run it once every dependency finished, whatever the outcome


def values(policy: type[StrEnum]) -> list[str]:
    """The policy's names, in their order: what a CLI option offers (click.Choice)."""
    return [member.value for member in policy]


def one_of(policy: type[StrEnum]) -> str:
    """The policy's names for a message: 'a', 'b' or 'c'."""
    quoted = [repr(member.value) for member in policy]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}"
