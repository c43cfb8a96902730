"""Every way in offers the policy names and value ranges of pgsched.core.policies and pgsched.core.limits.

tests/sql/test_limits.py holds those modules to the database; this holds the CLI, the App and JobSpec to them.
"""

from __future__ import annotations

from enum import StrEnum

import click
import pytest

from pgsched import App, JobSpec
from pgsched.cli import main as cli
from pgsched.core import cron, limits
from pgsched.core.policies import (
    ConcurrencyPolicy,
    ConflictPolicy,
    DependencyPolicy,
    GapPolicy,
    KeyScope,
    MisfirePolicy,
    OverlapPolicy,
    values,
)


def _option(path: str, name: str) -> click.Option:
    command: click.Command = cli
    for part in path.split():
        assert isinstance(command, click.Group)
        command = command.commands[part]
    for param in command.params:
        if isinstance(param, click.Option) and name in param.opts:
            return param
    raise AssertionError(f"pgsched {path} has no {name}")


@pytest.mark.parametrize(
    ("path", "name", "policy"),
    [
        ("schedules add", "--gap", GapPolicy),
        ("schedules add", "--overlap", OverlapPolicy),
        ("schedules add", "--misfire", MisfirePolicy),
        ("schedules add", "--concurrency", ConcurrencyPolicy),
        ("schedules preview", "--gap", GapPolicy),
        ("schedules preview", "--overlap", OverlapPolicy),
        ("enqueue", "--on-dependency-failure", DependencyPolicy),
        ("enqueue", "--on-conflict", ConflictPolicy),
        ("enqueue", "--key-scope", KeyScope),
    ],
)
def test_cli_choices_are_the_enums_values(path: str, name: str, policy: type[StrEnum]) -> None:
    option = _option(path, name)
    assert isinstance(option.type, click.Choice)
    assert list(option.type.choices) == values(policy)
    assert option.default is None or option.default in values(policy)


@pytest.mark.parametrize(
    ("path", "name", "low", "high"),
    [
        ("enqueue", "--priority", limits.PRIORITY_MIN, limits.PRIORITY_MAX),
        ("enqueue", "--max-attempts", limits.MAX_ATTEMPTS_MIN, limits.MAX_ATTEMPTS_MAX),
        ("enqueue-command", "--max-attempts", limits.MAX_ATTEMPTS_MIN, limits.MAX_ATTEMPTS_MAX),
        ("schedules add", "--max-attempts", limits.MAX_ATTEMPTS_MIN, limits.MAX_ATTEMPTS_MAX),
        ("schedules add", "--misfire-cap", 1, limits.MISFIRE_CAP_MAX),
        ("queues configure", "--concurrency", 1, limits.QUEUE_CONCURRENCY_MAX),
        ("queues configure", "--key-concurrency", 1, limits.QUEUE_CONCURRENCY_MAX),
    ],
)
def test_cli_ranges_are_the_limits(path: str, name: str, low: int, high: int) -> None:
    option = _option(path, name)
    assert isinstance(option.type, click.IntRange)
    assert (option.type.min, option.type.max) == (low, high)


def test_cron_module_names_the_same_enums() -> None:
    assert (cron.GapPolicy, cron.OverlapPolicy, cron.MisfirePolicy) == (GapPolicy, OverlapPolicy, MisfirePolicy)


@pytest.mark.parametrize(
    ("key", "policy"),
    [("gap", GapPolicy), ("overlap", OverlapPolicy), ("misfire", MisfirePolicy), ("concurrency", ConcurrencyPolicy)],
)
def test_app_cron_takes_every_value_of_the_enum_and_no_other(key: str, policy: type[StrEnum]) -> None:
    app = App(dsn="postgresql://unused")
    nightly = app.task(name="nightly")(lambda: None)
    for value in values(policy):
        app.cron("0 2 * * *", name=f"s-{key}-{value}", **{key: value})(nightly)  # type: ignore[arg-type]
        assert app.schedules[f"s-{key}-{value}"].__getattribute__(key) == value
    with pytest.raises(ValueError, match=f"{key} policy must be one of {', '.join(values(policy))}"):
        app.cron("0 2 * * *", name="bad", **{key: "sometimes"})(nightly)  # type: ignore[arg-type]


def test_jobspec_takes_the_limits_and_refuses_one_past_them() -> None:
    JobSpec(task="t", priority=limits.PRIORITY_MIN)
    JobSpec(task="t", priority=limits.PRIORITY_MAX)
    JobSpec(task="t", max_attempts=limits.MAX_ATTEMPTS_MIN)
    for bad in ({"priority": limits.PRIORITY_MIN - 1}, {"priority": limits.PRIORITY_MAX + 1}, {"max_attempts": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            JobSpec(task="t", **bad)  # type: ignore[arg-type]
    for policy, field in (
        (ConflictPolicy, "on_conflict"),
        (KeyScope, "key_scope"),
        (DependencyPolicy, "on_dependency_failure"),
    ):
        for value in values(policy):
            JobSpec(task="t", **{field: value})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=field):
            JobSpec(task="t", **{field: "sometimes"})  # type: ignore[arg-type]


def test_a_task_name_longer_than_the_limit_is_refused_at_registration() -> None:
    app = App(dsn="postgresql://unused")
    app.task(name="a" * limits.TASK_NAME_MAX)(lambda: None)
    with pytest.raises(ValueError, match="not a valid task name"):
        app.task(name="a" * (limits.TASK_NAME_MAX + 1))(lambda: None)
