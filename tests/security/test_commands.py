"""Issue 10.5: enqueuing a command job needs pgsched_command; no other role gets one in by any path."""

from __future__ import annotations

import pytest
from psycopg.types.json import Jsonb

from pgsched import App
from pgsched.errors import InvalidJob
from tests.security.conftest import DENIED, Deployment, everything
from tests.sql.helpers import Conn, refused

# A command job's args carry its resource limits: config.command_memory_limit and command_cpu_limit unless given.
DEFAULT_LIMITS = {"memory_limit": 512, "cpu_limit": 1.0}
COMMAND_ARGS = Jsonb({"argv": ["sh", "-c", "id > /tmp/pwned"], "env": {}, "cwd": None, "timeout_s": None})

# Every way into pgsched.jobs that a role other than pgsched_command holds.
FORGED = [
    ("SELECT pgsched.enqueue_command(ARRAY['id'])", ()),
    ("SELECT pgsched.enqueue('pgsched.command', %s)", (COMMAND_ARGS,)),
    ("SELECT pgsched.enqueue('pgsched.command', %s, queue => 'commands', labels => ARRAY['pgsched:command'])",
     (COMMAND_ARGS,)),
    ("SELECT * FROM pgsched.enqueue_many(ARRAY['t', 'pgsched.command'], ARRAY['{}', %s]::jsonb[])", (COMMAND_ARGS,)),
    ("SELECT pgsched.enqueue_service('pgsched.command', %s)", (COMMAND_ARGS,)),
    ("INSERT INTO pgsched.jobs (task, args, queue, labels) VALUES ('pgsched.command', %s, 'commands', "
     "ARRAY['pgsched:command'])", (COMMAND_ARGS,)),
    ("INSERT INTO pgsched.jobs (task, args) SELECT 'pgsched.command', %s FROM generate_series(1, 2)", (COMMAND_ARGS,)),
    ("SELECT pgsched.upsert_schedule('evil', '* * * * *', 'pgsched.command', %s)", (COMMAND_ARGS,)),
    ("SELECT pgsched.upsert_schedule('evil', '* * * * *', 'pgsched.command', %s, source => 'code')", (COMMAND_ARGS,)),
    ("INSERT INTO pgsched.schedules (name, cron, task, args) VALUES ('evil', '* * * * *', 'pgsched.command', %s)",
     (COMMAND_ARGS,)),
]  # fmt: skip


@pytest.mark.parametrize(
    "roles",
    [("pgsched_enqueue",), ("pgsched_worker",), ("pgsched_admin",), ("pgsched_enqueue", "pgsched_worker")],
)
def test_no_other_role_can_enqueue_a_command_by_any_path(
    deployment: Deployment, owner: Conn, roles: tuple[str, ...]
) -> None:
    owner.execute("SELECT pgsched.upsert_schedule('nightly', '0 3 * * *', 't')")
    before = everything(owner)
    attacker = deployment.login(*roles)
    for statement, params in FORGED:
        with refused(DENIED):
            attacker.execute(statement, params)
    # and an existing schedule cannot be turned into one
    with refused(DENIED):
        attacker.execute("UPDATE pgsched.schedules SET task = 'pgsched.command' WHERE name = 'nightly'")
    assert everything(owner) == before


def test_pgsched_command_enqueues_commands_and_nothing_else(deployment: Deployment, owner: Conn) -> None:
    commander = deployment.login("pgsched_command")
    row = commander.execute(
        "SELECT pgsched.enqueue_command(ARRAY['echo', 'hi'], timeout => interval '1 minute') AS id"
    ).fetchone()
    assert row is not None
    job = owner.execute("SELECT task, queue, args, labels FROM pgsched.jobs WHERE id = %s", [row["id"]]).fetchone()
    assert job == {
        "task": "pgsched.command",
        "queue": "commands",
        "args": {"argv": ["echo", "hi"], "env": {}, "cwd": None, "timeout_s": 60, **DEFAULT_LIMITS},
        "labels": ["pgsched:command"],
    }
    before = everything(owner)
    for statement in (
        "SELECT pgsched.enqueue('t')",
        "INSERT INTO pgsched.jobs (task, args) VALUES ('t', '{}')",
        "SELECT * FROM pgsched.jobs",
        "SELECT pgsched.cancel(1)",
        "SELECT * FROM pgsched.claim('w', ARRAY['commands'], 1, interval '30 seconds')",
    ):
        with refused(DENIED):
            commander.execute(statement)
    assert everything(owner) == before


def test_a_tenant_bound_command_login_stays_in_its_tenant(deployment: Deployment, owner: Conn) -> None:
    commander = deployment.login("pgsched_command", "pgsched_tenant_scoped", tenant="acme")
    with refused(DENIED):
        commander.execute("SELECT pgsched.enqueue_command(ARRAY['id'], tenant => 'globex')")
    for named in ("", ", tenant => 'acme'"):  # naming no tenant is its own (issue 21.3)
        row = commander.execute(f"SELECT pgsched.enqueue_command(ARRAY['id']{named}) AS id").fetchone()
        assert row is not None
        assert owner.execute("SELECT tenant FROM pgsched.jobs WHERE id = %s", [row["id"]]).fetchone() == {
            "tenant": "acme"
        }


def test_app_enqueue_command_as_an_enqueue_login_is_refused_as_a_privilege(deployment: Deployment) -> None:
    app = App(deployment.login_dsn("pgsched_enqueue"))
    try:
        with pytest.raises(InvalidJob, match="permission denied for function enqueue_command"):
            app.enqueue_command(["id"])
        allowed = App(deployment.login_dsn("pgsched_command"))
        try:
            assert allowed.enqueue_command(["id"]).id > 0
        finally:
            allowed.close()
    finally:
        app.close()
