"""The pytest plugin (pgsched.testing) as a user meets it: a tiny project's own suite, run by pytest in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SHOP = '''
"""A user's tasks and the code that enqueues them."""
import psycopg
from pgsched import App

app = App()


@app.task(name="shop.receipt")
def send_receipt(order_id: int) -> dict:
    with psycopg.connect(app.dsn) as conn:
        conn.execute("UPDATE orders SET receipt_sent = true WHERE id = %s", [order_id])
    return {"order": order_id}


@app.task(name="shop.flaky", max_attempts=3)
def flaky() -> None:
    raise RuntimeError("payment provider down")


def place_order(conn, order_id):
    conn.execute("INSERT INTO orders (id) VALUES (%s)", [order_id])
    return send_receipt.enqueue(order_id, conn=conn)
'''

TESTS = """
import pytest

import shop


@pytest.fixture
def orders(pgsched_conn):
    pgsched_conn.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, receipt_sent bool DEFAULT false)")
    pgsched_conn.execute("TRUNCATE orders")
    return pgsched_conn


def test_an_order_sends_its_receipt(pgsched_app, orders):
    assert pgsched_app is shop.app
    with orders.transaction():
        job = shop.place_order(orders, 1)
    result = pgsched_app.drain()
    assert result.completed == 1
    assert job.wait(timeout=5) == {"order": 1}
    assert orders.execute("SELECT receipt_sent FROM orders").fetchone() == (True,)


def test_every_test_starts_with_no_jobs(pgsched_app, orders):
    assert orders.execute("SELECT count(*) FROM pgsched.job_history").fetchone() == (0,)
    assert orders.execute("SELECT count(*) FROM pgsched.jobs").fetchone() == (0,)


def test_a_rolled_back_order_enqueues_nothing(pgsched_app, orders):
    with pytest.raises(ZeroDivisionError):
        with orders.transaction():
            shop.place_order(orders, 2)
            1 / 0
    assert pgsched_app.drain().ran == 0


def test_a_failing_task_surfaces_in_the_test(pgsched_app, orders):
    shop.flaky.enqueue()
    with pytest.raises(RuntimeError, match="payment provider down"):
        pgsched_app.drain(raise_errors=True)
"""


def run_suite(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PGSCHED_", "DATABASE_URL", "PYTEST_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        cwd=project,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "shop.py").write_text(textwrap.dedent(SHOP))
    (tmp_path / "test_shop.py").write_text(textwrap.dedent(TESTS))
    (tmp_path / "pytest.ini").write_text("[pytest]\npgsched_app = shop:app\n")
    return tmp_path


def test_a_users_suite_gets_a_clean_pgsched_in_its_own_database(project: Path, empty_dsn: str) -> None:
    """Slow (~25 s): runs a user's own pytest suite in a subprocess, as a user would, against a real database."""
    # An empty database: the plugin installs pgsched into it (the user's tables sit beside it).
    done = run_suite(project, {"PGSCHED_TESTING_DSN": empty_dsn})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
    # Again on the same database, now installed: nothing left over from the first run breaks it.
    again = run_suite(project, {"PGSCHED_TESTING_DSN": empty_dsn})
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.slow
def test_without_a_database_the_plugin_starts_a_throwaway_server(project: Path) -> None:
    (project / "test_shop.py").write_text(
        "def test_it_runs(pgsched_app):\n    pgsched_app.enqueue('x.y')\n    assert pgsched_app.drain().dead == 1\n"
    )
    done = run_suite(project, {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
