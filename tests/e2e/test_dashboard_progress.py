"""The dashboard shows a running job's progress with its elapsed time, and durable steps in the job's timeline."""

from __future__ import annotations

from collections.abc import Callable

from psycopg.types.json import Jsonb

from tests.e2e.clirun import claim, enqueue
from tests.e2e.test_dashboard import Conn, Served, db, serve  # noqa: F401 (fixtures)


def test_running_jobs_show_progress_and_elapsed_time_and_steps_in_the_timeline(
    serve: Callable[..., Served],  # noqa: F811
    db: Conn,  # noqa: F811
) -> None:
    job_id = enqueue(db, "t.long", queue="qp")
    claim(db, "qp", worker="w-1")
    row = db.execute("SELECT lease_token FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
    assert row is not None
    db.execute(
        "UPDATE pgsched.jobs SET claimed_at = now() - interval '65 seconds', started_at = now() - interval '65 seconds'"
        " WHERE id = %s",
        [job_id],
    )
    db.execute(
        "SELECT pgsched.report_progress(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[], ARRAY[0.42]::real[],"
        " ARRAY['page 42'])",
        [job_id, row["lease_token"]],
    )
    db.execute("SELECT pgsched.record_step(%s, %s, 'download', %s)", [job_id, row["lease_token"], Jsonb({"n": 1})])
    with serve().client() as http:
        queue_page = http.get("/queues/qp").text
        job_page = http.get(f"/jobs/{job_id}").text
    assert "42% page 42 · 1m0" in queue_page
    assert "elapsed" in queue_page
    assert "42% page 42" in job_page
    assert "download" in job_page
    assert ">step<" in job_page
