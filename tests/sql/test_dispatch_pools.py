"""Worker pools: default labels from the queue or the task, and due jobs no live worker's labels can take."""

from __future__ import annotations

from pgsched.db import queries
from tests.sql.helpers import Conn, enqueue, register_tasks, scalar
from tests.sql.test_dispatch_aging import configure


def labels(conn: Conn, job_id: int) -> list[str]:
    return list(scalar(conn, "SELECT labels FROM pgsched.jobs WHERE id = %s", [job_id]))


def test_jobs_take_their_queues_default_labels(conn: Conn) -> None:
    configure(conn, "gpu-work", labels=["gpu"])
    assert labels(conn, enqueue(conn, queue="gpu-work")) == ["gpu"]
    assert labels(conn, enqueue(conn, queue="gpu-work", labels=["cpu"])) == ["cpu"]  # given labels win
    conn.execute("INSERT INTO pgsched.jobs (task, queue) VALUES ('t', 'gpu-work')")
    assert scalar(conn, "SELECT labels FROM pgsched.jobs ORDER BY id DESC LIMIT 1") == ["gpu"]
    assert labels(conn, enqueue(conn, queue="default")) == []


def test_a_tasks_default_labels_come_before_its_queues(conn: Conn) -> None:
    configure(conn, "default", labels=["pool-a"])
    register_tasks(conn, [{"name": "render", "labels": ["gpu", "big"]}])
    assert labels(conn, enqueue(conn, "render")) == ["gpu", "big"]
    assert labels(conn, enqueue(conn, "other")) == ["pool-a"]


def unserved(conn: Conn) -> list[tuple[str, list[str], int]]:
    return [(r["queue"], list(r["labels"]), r["available"]) for r in conn.execute(queries.UNSERVED_LABELS)]


def test_due_jobs_whose_labels_no_live_worker_offers_are_reported(conn: Conn) -> None:
    enqueue(conn, labels=["gpu"])
    enqueue(conn, labels=["gpu"])
    enqueue(conn)  # no labels: any worker takes it
    conn.execute("SELECT pgsched.register_worker('w1', queues => '{default}', labels => '{cpu}')")
    assert unserved(conn) == [("default", ["gpu"], 2)]
    conn.execute("SELECT pgsched.register_worker('w2', queues => '{other}', labels => '{gpu}')")
    assert unserved(conn) == [("default", ["gpu"], 2)]  # offers gpu, but not on this queue
    conn.execute("SELECT pgsched.register_worker('w3', queues => '{*}', labels => '{gpu,cpu}')")
    assert unserved(conn) == []
    conn.execute("SELECT pgsched.pause_queue('default')")
    conn.execute("SELECT pgsched.unregister_worker('w3')")
    assert unserved(conn) == []  # paused: waiting is expected
