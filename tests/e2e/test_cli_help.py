"""Every command of the operator's CLI answers --help with what it does and the options a user acts on."""

from __future__ import annotations

import pytest

from tests.e2e.clirun import run

EMBEDDED_NOTE = "even when --dsn, PGSCHED_DSN or DATABASE_URL point elsewhere"


@pytest.mark.parametrize(
    ("command", "phrases"),
    [
        (
            ["enqueue"],
            ["TASK [ARGS_JSON]", "--delay DURATION", "--run-at ISO8601", "--idempotency-key", "--depends-on", "--json"],
        ),
        (["jobs"], ["list", "show", "cancel", "retry"]),
        (
            ["jobs", "list"],
            ["--state [scheduled|waiting|available|running|completed|dead|cancelled]", "--limit", "--json"],
        ),
        (["jobs", "show"], ["ID", "audit events", "--json"]),
        (["jobs", "cancel"], ["cancel_requested", "not_found", "--json"]),
        (["jobs", "retry"], ["not_retryable", "--json"]),
        (["dlq"], ["--queue", "--limit", "--json", "retry"]),
        (["dlq", "retry"], ["--all", "--yes", "--queue"]),
        (["stats"], ["--watch", "--interval", "lease expired", "lag p50/p95/p99", "--json"]),
        (["queues"], ["list", "pause", "resume"]),
        (["queues", "pause"], ["NAME", "enqueues still work", "--json"]),
        (["db"], ["start", "stop", "status", "dsn", "psql", EMBEDDED_NOTE]),
        (["db", "start"], [EMBEDDED_NOTE, "--json"]),
        (["db", "dsn"], ['psql "$(pgsched db dsn)"', "--no-start", EMBEDDED_NOTE]),
        (["db", "psql"], ["passed on to psql", EMBEDDED_NOTE]),
        (["bench"], ["raw-SQL ceiling", "bench/run.py", "--quick"]),
        (["scanner"], ["--lease", "expands recurring schedules", "epoch-fenced"]),
        (["run"], ["worker and a scanner in one process", "--app"]),
        (["schedules"], ["add", "list", "remove", "pause", "resume", "preview"]),
        (["schedules", "preview"], ["--count", "DST", "--json"]),
        (["migrate"], ["--shards", "--json"]),
        (["worker"], ["--app", "--concurrency", "--burst", "--shutdown-timeout", "SIGTERM"]),
        (["events"], ["--follow", "--since", "--position-file", "--app", "gap-free", "--json"]),
    ],
    ids=" ".join,
)
def test_help(command: list[str], phrases: list[str]) -> None:
    result = run(*command, "--help")

    assert result.code == 0, str(result)
    text = " ".join(result.out.split())  # undo click's line wrapping
    for phrase in phrases:
        assert phrase in text, f"{phrase!r} missing from `pgsched {' '.join(command)} --help`:\n{result.out}"
