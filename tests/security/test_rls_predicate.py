"""Issue 8.9: the tenant predicate holds under a hostile search_path (operators are schema-qualified)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from tests.security.conftest import Deployment
from tests.sql.helpers import Conn, claim, enqueue, scalar


def test_a_hostile_equals_operator_does_not_widen_a_tenant(deployment: Deployment, owner: Conn) -> None:
    mine = enqueue(owner, tenant="acme")
    enqueue(owner, tenant="globex")
    enqueue(owner)
    attacker = deployment.login("pgsched_worker", tenant="acme")
    login = scalar(attacker, "SELECT session_user::text")
    with psycopg.connect(deployment.dsn, autocommit=True) as su:
        su.execute(sql.SQL("CREATE SCHEMA evil AUTHORIZATION {}").format(sql.Identifier(login)))
    attacker.execute("CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true'")
    attacker.execute("CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always)")
    attacker.execute("SET search_path = evil, pg_catalog, pgsched")
    assert scalar(attacker, "SELECT 'a'::text = 'b'::text") is True  # the trap is armed
    assert [r["id"] for r in attacker.execute("SELECT id FROM pgsched.jobs").fetchall()] == [mine]
    assert scalar(attacker, "SELECT pgsched._tenant_visible('globex')") is False
    assert scalar(attacker, "SELECT pgsched._tenant_visible(NULL)") is False
    assert scalar(attacker, "SELECT pgsched._tenant_visible('acme')") is True
    assert [r["id"] for r in claim(attacker, 10, start_shard=None)] == [mine]
