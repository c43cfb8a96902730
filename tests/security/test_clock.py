"""Issue 8.1: nobody but the owner moves the clock (p_now), whatever role it SETs."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from tests.security.conftest import DENIED, Deployment, everything
from tests.sql.helpers import Conn, claim_one, db_now, enqueue, maintain, pair, refused, scalar

GRANTED = ("pgsched_enqueue", "pgsched_worker", "pgsched_admin")


def clock_functions(conn: Conn) -> list[tuple[str, str]]:
    """(name, identity arguments) of every pgsched function with a p_now parameter that a granted role may call."""
    rows = conn.execute(
        """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'pgsched' AND 'p_now' = ANY (p.proargnames)
          AND (has_function_privilege('pgsched_enqueue', p.oid, 'EXECUTE')
               OR has_function_privilege('pgsched_worker', p.oid, 'EXECUTE')
               OR has_function_privilege('pgsched_admin', p.oid, 'EXECUTE'))
        ORDER BY 1
        """
    ).fetchall()
    return [(r["proname"], r["args"]) for r in rows]


def call_with_clock(conn: Conn, function: str, when: object) -> None:
    """SELECT pgsched.<function>(p_now => when) with every other argument at its default, or NULL."""
    args = conn.execute(
        """
        SELECT a.name, a.n > p.pronargs - p.pronargdefaults AS has_default
        FROM pg_proc p, unnest(p.proargnames[1:p.pronargs]) WITH ORDINALITY AS a(name, n)
        WHERE p.oid = (SELECT oid FROM pg_proc WHERE proname = %s
                       AND pronamespace = 'pgsched'::regnamespace)
        """,
        [function],
    ).fetchall()
    parts = [sql.SQL("p_now => %(when)s")]
    for a in args:
        if a["name"] != "p_now" and not a["has_default"]:
            parts.append(sql.SQL("{} => NULL").format(sql.Identifier(a["name"])))
    conn.execute(
        sql.SQL("SELECT * FROM pgsched.{}({})").format(sql.Identifier(function), sql.SQL(", ").join(parts)),
        {"when": when},
    )


def test_the_clock_functions_are_the_ones_expected(owner: Conn) -> None:
    names = {name for name, _ in clock_functions(owner)}
    assert {"maintain", "expire_leases", "promote_due", "complete", "claim", "heartbeat", "fail"} <= names
    assert {"snooze", "release", "cancel", "retry", "scan_shard", "acquire_shards", "add_occurrences"} <= names


@pytest.mark.parametrize("granted", GRANTED)
def test_no_granted_role_moves_any_clock(deployment: Deployment, owner: Conn, granted: str) -> None:
    enqueue(owner, run_at=db_now(owner) + timedelta(hours=1))  # delayed
    enqueue(owner)
    claim_one(owner)  # leased
    before = everything(owner)
    attacker = deployment.login(granted)
    tried = 0
    for name, _ in clock_functions(owner):
        if not scalar(owner, "SELECT has_function_privilege(%s, %s::regproc, 'EXECUTE')", [granted, f"pgsched.{name}"]):
            continue
        for when in ("2126-01-01", "1970-01-01"):
            with refused(DENIED) as info:
                call_with_clock(attacker, name, when)
            assert "move the clock" in str(info.value), (name, str(info.value))
            tried += 1
    # pgsched_enqueue holds no function with a clock; the others hold many
    assert tried >= (0 if granted == "pgsched_enqueue" else 20), tried
    assert everything(owner) == before


def test_set_role_does_not_help(deployment: Deployment, owner: Conn, admin_dsn: str) -> None:
    job_id = enqueue(owner)
    token = pair(claim_one(owner))[1]
    before = everything(owner)
    worker = deployment.login("pgsched_admin")
    for role in ("pgsched_worker", "pgsched_admin", "pgsched_enqueue"):
        worker.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        for statement, params in (
            ("SELECT pgsched.maintain(p_now => now() + interval '100 years')", None),
            ("SELECT pgsched.expire_leases(p_now => now() + interval '2 hours')", None),
            ("SELECT pgsched.promote_due(p_now => now() + interval '1 day')", None),
            (
                "SELECT * FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], p_now => '1970-01-01')",
                [job_id, token],
            ),
        ):
            with pytest.raises(psycopg.Error) as info:
                worker.execute(statement, params)
            assert info.value.sqlstate == DENIED, (role, statement, str(info.value))
        worker.execute("RESET ROLE")
    assert everything(owner) == before


def test_the_owner_and_superusers_still_drive_time(deployment: Deployment, owner: Conn) -> None:
    later = db_now(owner) + timedelta(days=1)
    job_id = enqueue(owner, run_at=later)
    assert scalar(owner, "SELECT pgsched.promote_due(p_now => %s)", [later]) == 1
    maintain(owner, now=later)
    with psycopg.connect(deployment.dsn, autocommit=True) as su:
        assert su.execute("SELECT pgsched.expire_leases(p_now => %s)", [later]).fetchone() == (0,)
    assert scalar(owner, "SELECT state::text FROM pgsched.jobs WHERE id = %s", [job_id]) == "available"


def test_a_null_clock_is_the_database_clock_for_everyone(deployment: Deployment, owner: Conn) -> None:
    enqueue(owner)
    worker = deployment.login("pgsched_worker")
    got = claim_one(worker)
    assert worker.execute(
        "SELECT accepted FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], p_now => NULL)",
        list(pair(got)),
    ).fetchone() == {"accepted": True}
    worker.execute("SELECT pgsched.maintain(NULL), pgsched.expire_leases(NULL), pgsched.promote_due(NULL)")
