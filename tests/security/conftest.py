"""A hostile deployment: pgsched installed by a non-superuser owner, and one login role per pgsched role.

The owner holds no SUPERUSER and no CREATEROLE: the four pgsched roles exist
beforehand (made by a superuser here, as a DBA would) and the owner holds
ADMIN OPTION on them, which is all `install_fresh` needs to grant them. The
logins are the attackers: each test tries to break a rule as one of them and
checks, as the owner, that nothing changed.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from pgsched.db import schema
from tests.pgserver import database_dsn
from tests.sql.helpers import Conn

ROLES = ("pgsched_enqueue", "pgsched_worker", "pgsched_admin", "pgsched_tenant_scoped", "pgsched_command")
DENIED = "42501"  # insufficient_privilege
_counter = itertools.count()


def role_dsn(dsn: str, role: str, password: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    info.update(user=role, password=password)
    return psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})


def connect(dsn: str) -> Conn:
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


@dataclass
class Owner:
    name: str
    password: str


@pytest.fixture(scope="session")
def secure_template(admin_dsn: str) -> Iterator[tuple[str, Owner]]:
    """A template database with pgsched installed by a NOSUPERUSER NOCREATEROLE owner."""
    owner = Owner(f"pgsched_owner_{secrets.token_hex(4)}", secrets.token_hex(12))
    template = f"pgsched_secure_{os.getpid()}"
    with psycopg.connect(admin_dsn, autocommit=True) as su:
        su.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB PASSWORD {}").format(
                sql.Identifier(owner.name), sql.Literal(owner.password)
            )
        )
        for role in ROLES:
            exists = su.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone()
            if not exists:
                su.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
            su.execute(
                sql.SQL("GRANT {} TO {} WITH ADMIN OPTION").format(sql.Identifier(role), sql.Identifier(owner.name))
            )
        su.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(template), sql.Identifier(owner.name)))
    template_dsn = role_dsn(database_dsn(admin_dsn, template), owner.name, owner.password)
    with psycopg.connect(template_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
        schema.install_fresh(conn)
        conn.execute("CREATE TABLE pgsched.alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO pgsched.alembic_version VALUES (%s)", [schema.head_revision()])
    yield template, owner
    with psycopg.connect(admin_dsn, autocommit=True) as su:
        su.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(template)))
        # It granted the pgsched roles to each other: drop those grants with it.
        su.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(owner.name)))
        try:
            su.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(owner.name)))
        except psycopg.errors.DependentObjectsStillExist:
            pass  # still the grantor of a membership another install relies on; the server is temporary


@dataclass
class Deployment:
    """One fresh database of the secure template, its owner, a superuser, and attacker logins."""

    admin_dsn: str
    dsn: str  # the superuser's
    owner_dsn: str
    owner: Conn
    created: list[str] = field(default_factory=list)
    open: list[Conn] = field(default_factory=list)

    def login_dsn(self, *granted: str, tenant: str | None = None) -> str:
        """A new LOGIN role granted exactly `granted`, bound to `tenant` when given; its DSN."""
        name = f"pgsched_login_{secrets.token_hex(5)}"
        password = secrets.token_hex(12)
        with psycopg.connect(self.admin_dsn, autocommit=True) as su:
            su.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name), sql.Literal(password)))
            self.created.append(name)
            for role in granted:
                su.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(name)))
        if tenant is not None:
            self.owner.execute("SELECT pgsched.bind_tenant(%s::regrole, %s)", [name, tenant])
        return role_dsn(self.dsn, name, password)

    def login(self, *granted: str, tenant: str | None = None) -> Conn:
        conn = connect(self.login_dsn(*granted, tenant=tenant))
        self.open.append(conn)
        return conn


@pytest.fixture
def deployment(admin_dsn: str, secure_template: tuple[str, Owner]) -> Iterator[Deployment]:
    template, owner = secure_template
    name = f"s_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(admin_dsn, autocommit=True) as su:
        su.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER {} STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(template), sql.Identifier(owner.name)
            )
        )
    dsn = database_dsn(admin_dsn, name)
    owner_dsn = role_dsn(dsn, owner.name, owner.password)
    with connect(owner_dsn) as owner_conn:
        found = Deployment(admin_dsn, dsn, owner_dsn, owner_conn)
        try:
            yield found
        finally:
            for c in found.open:
                c.close()
    with psycopg.connect(admin_dsn, autocommit=True) as su:
        su.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        for role in found.created:
            su.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def owner(deployment: Deployment) -> Conn:
    """The schema owner's connection: it seeds, drives time and checks that nothing changed."""
    return deployment.owner


def everything(conn: Conn) -> dict[str, Any]:
    """Every table an attack could touch, as the owner sees it, to compare before and after."""
    tables = [
        "jobs",
        "job_history",
        "job_events",
        "idempotency_keys",
        "config",
        "tasks",
        "queues",
        "schedules",
        "schedule_occurrences",
        "tenant_roles",
        "workers",
        "shard_leases",
        "scanners",
    ]
    found: dict[str, Any] = {}
    for table in tables:
        query = sql.SQL("SELECT * FROM pgsched.{} t ORDER BY t::text").format(sql.Identifier(table))
        found[table] = conn.execute(query).fetchall()
    return found
