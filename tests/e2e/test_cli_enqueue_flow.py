"""`pgsched enqueue --on-conflict replace` (a debounce) and `--key-scope`, in-process."""

from __future__ import annotations

import json

from click.testing import CliRunner

from pgsched.cli import main
from tests.e2e.clirun import connect


def invoke(dsn: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--dsn", dsn, *args], catch_exceptions=False)
    return result.exit_code, result.output


def test_replace_moves_the_job_and_a_started_one_is_refused(dsn: str) -> None:
    code, out = invoke(dsn, "enqueue", "t.flush", '{"n": 1}', "--idempotency-key", "u:1", "--delay", "1h")
    assert code == 0, out
    first = int(out)
    code, out = invoke(
        dsn, "enqueue", "t.flush", '{"n": 2}', "--idempotency-key", "u:1", "--delay", "5s",
        "--on-conflict", "replace", "--json",
    )  # fmt: skip
    assert code == 0, out
    assert json.loads(out)["id"] == first
    with connect(dsn) as conn:
        row = conn.execute("SELECT args, run_at - now() < interval '1 minute' AS soon FROM pgsched.jobs").fetchone()
        assert row == {"args": {"n": 2}, "soon": True}
    # Without a delay, the replaced job is due now.
    code, out = invoke(dsn, "enqueue", "t.flush", '{"n": 3}', "--idempotency-key", "u:1", "--on-conflict", "replace")
    assert (code, int(out)) == (0, first)
    with connect(dsn) as conn:
        conn.execute("SELECT * FROM pgsched.claim('w', '{default}', 1, '1 minute', '{}', NULL)")
    code, out = invoke(dsn, "enqueue", "t.flush", '{"n": 4}', "--idempotency-key", "u:1", "--on-conflict", "replace")
    assert code == 1
    assert f"held by job {first}, which is running" in out


def test_key_scope_active_frees_the_key_when_the_job_ends(dsn: str) -> None:
    code, out = invoke(dsn, "enqueue", "t.once", "--idempotency-key", "k", "--key-scope", "active")
    assert code == 0, out
    first = int(out)
    with connect(dsn) as conn:
        conn.execute("SELECT pgsched.cancel(%s)", [first])
    code, out = invoke(dsn, "enqueue", "t.once", "--idempotency-key", "k")
    assert code == 0, out
    assert int(out) != first


def test_replace_and_key_scope_need_a_key(dsn: str) -> None:
    for option in (["--on-conflict", "replace"], ["--key-scope", "active"]):
        code, out = invoke(dsn, "enqueue", "t.x", *option)
        assert code == 2
        assert "needs --idempotency-key" in out
    code, out = invoke(dsn, "enqueue", "t.x", "--idempotency-key", "k", "--key-scope", "forever")
    assert code == 2
    assert "'forever' is not one of" in out
    with connect(dsn) as conn:
        assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone() == {"n": 0}
