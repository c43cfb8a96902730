"""`pgsched queues configure` end to end, and the policy in `queues list`, `stats` and `doctor`."""

from __future__ import annotations

from tests.e2e.clirun import Cli, connect


def test_configure_shows_and_clears_a_policy(dsn: str) -> None:
    cli = Cli(dsn)
    settings = cli.json(
        "queues", "configure", "reports", "--concurrency", "20", "--rate", "100/1s", "--aging", "5m",
        "--tenant-fairness",
    )  # fmt: skip
    assert settings | {"restamped": 0} == {
        "queue": "reports", "concurrency": 20, "key_concurrency": None, "rate": 100, "key_rate": None,
        "rate_period_s": 1, "aging_s": 300, "tenant_fairness": True, "tenant_weights": None, "labels": None,
        "restamped": 0,
    }  # fmt: skip
    out = cli.ok("queues", "configure", "reports", "--key-concurrency", "2").out
    assert out.strip() == "queue reports: concurrency 20, 2 running per key, rate 100/1s, aging 5m, tenant fairness"

    (row,) = [q for q in cli.json("queues", "list") if q["queue"] == "reports"]
    assert (row["policy"]["concurrency"], row["policy"]["tenant_fairness"]) == (20, True)
    assert "concurrency 20" in cli.ok("queues", "list").out
    assert [p["queue"] for p in cli.json("stats")["policies"]] == ["reports"]

    cleared = cli.json("queues", "configure", "reports", "--clear", "rate", "--no-tenant-fairness")
    assert (cleared["rate"], cleared["rate_period_s"], cleared["tenant_fairness"]) == (None, None, False)
    assert cleared["concurrency"] == 20
    everything = cli.json("queues", "configure", "reports", "--clear", "all")
    assert (everything["concurrency"], everything["aging_s"]) == (None, None)


def test_bad_settings_are_refused_with_a_message(dsn: str) -> None:
    cli = Cli(dsn)
    for args, message in (
        (["--rate", "ten/1s"], "is not a rate"),
        (["--rate", "100/1s", "--key-rate", "5/1m"], "share one period"),
        (["--aging", "2d"], "between 1 millisecond and 1 day"),
        (["--concurrency", "0"], "0 is not in the range"),
    ):
        result = cli("queues", "configure", "q", *args)
        assert result.code != 0, str(result)
        assert message in result.err, str(result)


def test_unserved_labels_show_in_stats_and_doctor(dsn: str) -> None:
    cli = Cli(dsn)
    with connect(dsn) as conn:
        conn.execute("SELECT pgsched.enqueue('t.gpu', queue => 'render', labels => '{gpu}')")
        conn.execute("SELECT pgsched.register_worker('cpu-box', 'h', 1, ARRAY['render'], ARRAY['cpu'], 4, 'test')")
    (unserved,) = cli.json("stats")["unserved_labels"]
    assert (unserved["queue"], unserved["labels"], unserved["available"]) == ("render", ["gpu"], 1)
    assert "UNSERVED" in cli.ok("stats").out
    doctor = cli("doctor")
    assert "worker pools" in doctor.out, str(doctor)
    assert "render need gpu" in doctor.out, str(doctor)


def test_jobs_no_live_worker_knows_show_as_unserved_tasks_in_stats_and_doctor(dsn: str) -> None:
    """Issue 21.5: a job handed back for its task (pgsched.pass_over) while no live worker has registered it."""
    cli = Cli(dsn)
    with connect(dsn) as conn:
        conn.execute("SELECT pgsched.enqueue('mailer.send', queue => 'shared')")
        conn.execute(
            "SELECT pgsched.register_worker('billing-box', queues => ARRAY['shared'], tasks => ARRAY['billing.charge'])"
        )
        conn.execute(
            "SELECT pgsched.pass_over(ARRAY[id], ARRAY[lease_token])"
            " FROM pgsched.claim('billing-box', ARRAY['shared'], 1, '30 seconds')"
        )
    (unserved,) = cli.json("stats")["unserved_tasks"]
    assert (unserved["queue"], unserved["task"], unserved["jobs"]) == ("shared", "mailer.send", 1)
    assert 0 < unserved["dead_in_s"] <= 600
    assert "UNSERVED: jobs whose task no live worker has registered" in cli.ok("stats").out
    doctor = cli("doctor")
    assert "unserved tasks" in doctor.out, str(doctor)
    assert "1 of mailer.send in shared" in doctor.out, str(doctor)
    with connect(dsn) as conn:  # a worker that knows the task arrives: no longer unserved
        conn.execute(
            "SELECT pgsched.register_worker('mailer-box', queues => ARRAY['shared'], tasks => ARRAY['mailer.send'])"
        )
    assert cli.json("stats")["unserved_tasks"] == []
