"""Resource limits of command and service jobs: per-job parameters over the install-wide defaults in pgsched.config."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.sql.helpers import Conn, job, nothing_enqueued, refused, scalar

CASTS = {"memory_limit": "integer", "cpu_limit": "real"}  # a Python float is a double precision


def _named(named: dict[str, Any]) -> str:
    return ", ".join(f"{k} => %({k})s::{CASTS[k]}" for k in named)


def command(conn: Conn, **named: Any) -> int:
    names = _named(named)
    sep = ", " if named else ""
    return int(scalar(conn, f"SELECT pgsched.enqueue_command(ARRAY['true']{sep}{names})", named))  # type: ignore[arg-type]


def service(conn: Conn, **named: Any) -> int:
    names = _named(named)
    sep = ", " if named else ""
    return int(scalar(conn, f"SELECT pgsched.enqueue_service('svc'{sep}{names})", named))  # type: ignore[arg-type]


def test_the_defaults_are_the_seeds_per_type_defaults(conn: Conn) -> None:
    row = conn.execute(
        "SELECT command_memory_limit, command_cpu_limit, service_memory_limit, service_cpu_limit FROM pgsched.config"
    ).fetchone()
    assert row == {
        "command_memory_limit": 512,
        "command_cpu_limit": 1.0,
        "service_memory_limit": 1024,
        "service_cpu_limit": 2.0,
    }


def test_a_command_takes_the_install_defaults_unless_it_names_its_own(conn: Conn) -> None:
    default = job(conn, command(conn))
    assert default is not None
    assert (default["args"]["memory_limit"], default["args"]["cpu_limit"]) == (512, 1.0)
    own = job(conn, command(conn, memory_limit=64, cpu_limit=0.5))
    assert own is not None
    assert (own["args"]["memory_limit"], own["args"]["cpu_limit"]) == (64, 0.5)
    none = job(conn, command(conn, memory_limit=0, cpu_limit=0))  # 0: no limit
    assert none is not None
    assert (none["args"]["memory_limit"], none["args"]["cpu_limit"]) == (None, None)
    conn.execute("UPDATE pgsched.config SET command_memory_limit = NULL, command_cpu_limit = 1.5")
    changed = job(conn, command(conn))
    assert changed is not None
    assert (changed["args"]["memory_limit"], changed["args"]["cpu_limit"]) == (None, 1.5)


def test_a_service_keeps_its_limits_in_its_row_and_history(conn: Conn) -> None:
    default = job(conn, service(conn))
    assert default is not None
    assert (default["memory_limit"], default["cpu_limit"]) == (1024, 2.0)
    own_id = service(conn, memory_limit=256, cpu_limit=0.25)
    own = job(conn, own_id)
    assert own is not None
    assert (own["memory_limit"], own["cpu_limit"]) == (256, 0.25)
    conn.execute("SELECT pgsched.cancel(%s)", [own_id])
    row = conn.execute("SELECT memory_limit, cpu_limit FROM pgsched.job_history WHERE id = %s", [own_id]).fetchone()
    assert row == {"memory_limit": 256, "cpu_limit": 0.25}


@pytest.mark.parametrize(
    ("function", "named", "column"),
    [
        (command, {"memory_limit": -1}, "memory_limit"),
        (command, {"memory_limit": 3}, "memory_limit"),
        (command, {"memory_limit": 4194305}, "memory_limit"),
        (command, {"cpu_limit": -0.5}, "cpu_limit"),
        (command, {"cpu_limit": 0.001}, "cpu_limit"),
        (command, {"cpu_limit": float("nan")}, "cpu_limit"),
        (command, {"cpu_limit": 2000.0}, "cpu_limit"),
        (service, {"memory_limit": -5}, "memory_limit"),
        (service, {"cpu_limit": float("inf")}, "cpu_limit"),
    ],
)
def test_bad_limits_are_refused_naming_the_parameter_and_nothing_is_enqueued(
    conn: Conn, function: Any, named: dict[str, Any], column: str
) -> None:
    with refused("22023") as info:
        function(conn, **named)
    assert info.value.diag.column_name == column
    assert column in str(info.value)
    assert nothing_enqueued(conn)


@pytest.mark.parametrize(
    "setting",
    [
        "command_memory_limit = 0",
        "command_memory_limit = -1",
        "service_memory_limit = 3",
        "command_cpu_limit = 0",
        "service_cpu_limit = 'NaN'",
        "service_cpu_limit = 5000",
    ],
)
def test_bad_settings_are_refused_by_their_constraint(conn: Conn, setting: str) -> None:
    with pytest.raises(psycopg.errors.CheckViolation, match="config_resource_limits_range"):
        conn.execute(f"UPDATE pgsched.config SET {setting}")  # type: ignore[arg-type]
    assert scalar(conn, "SELECT command_memory_limit FROM pgsched.config") == 512
