"""`pgsched queues configure --tenant-weight`, in-process: weights set, shown, cleared, refused."""

from __future__ import annotations

import json

from click.testing import CliRunner

from pgsched.cli import main


def invoke(dsn: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--dsn", dsn, *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_tenant_weights_turn_fairness_on_and_show_in_the_policy(dsn: str) -> None:
    code, out = invoke(dsn, "queues", "configure", "q", "--tenant-weight", "acme=3", "--tenant-weight", "beta=0.5")
    assert code == 0, out
    assert out.strip() == "queue q: tenant fairness (weights acme=3, beta=0.5)"
    code, out = invoke(dsn, "queues", "configure", "q", "--json")
    assert json.loads(out)["tenant_weights"] == {"acme": 3, "beta": 0.5}
    code, out = invoke(dsn, "queues", "configure", "q", "--clear", "tenant_weights")
    assert (code, out.strip()) == (0, "queue q: tenant fairness")


def test_bad_weights_are_refused_and_change_nothing(dsn: str) -> None:
    code, out = invoke(dsn, "queues", "configure", "q", "--tenant-weight", "acme")
    assert code == 2
    assert "TENANT=WEIGHT" in out
    code, out = invoke(dsn, "queues", "configure", "q", "--tenant-weight", "acme=0")
    assert code == 1
    assert "from 0.001 to 1000" in out
    code, out = invoke(dsn, "queues", "configure", "q", "--json")
    assert json.loads(out)["tenant_weights"] is None
