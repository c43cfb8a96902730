"""Issue 10.5: command jobs run by a worker that serves commands, as a user sees their outcomes."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from pgsched import App, InvalidJob
from pgsched.runtime.commands import COMMAND_LABEL, OUTPUT_CAP, CommandOptions, serve_commands
from pgsched.runtime.worker import Worker, WorkerOptions
from tests.integration.conftest import Running, events, job, wait_for, wait_state

Conn = psycopg.Connection[dict[str, Any]]
# A command job's args carry its resource limits: config.command_memory_limit and command_cpu_limit unless given.
DEFAULT_LIMITS = {"memory_limit": 512, "cpu_limit": 1.0}


@pytest.fixture
def command_worker(app: App, conn: Conn) -> Iterator[Callable[..., Running]]:
    """command_worker(kill_grace=..., pass_env=...) -> a started worker serving commands."""
    # Retries come quickly, so a test sees every attempt.
    conn.execute("INSERT INTO pgsched.queues (name, backoff_base, backoff_max) VALUES ('commands', '50 ms', '100 ms')")
    started: list[Running] = []

    def start(kill_grace: float = 0.5, pass_env: tuple[str, ...] = (), **options: Any) -> Running:
        options.setdefault("lease", 10)
        opts = WorkerOptions(queues=["commands"], install_signal_handlers=False, poll_interval=0.2, **options)
        serve_commands(app, opts, CommandOptions(kill_grace=kill_grace, pass_env=pass_env))
        running = Running(Worker(app, opts))
        started.append(running)
        return running.start()

    yield start
    for running in started:
        if running.thread.is_alive():
            running.stop()


def _gone(pid: int) -> bool:
    """True once no process pid runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between the open and the read
        return True


def _pid(path: Path) -> int:
    text = wait_for(lambda: path.exists() and path.read_text().strip(), 15, what=f"{path} written")
    return int(text)


def test_exit_0_completes_with_exit_code_output_and_duration(app: App, conn: Conn, command_worker: Any) -> None:
    command_worker()
    job = app.enqueue_command(["sh", "-c", "echo out; echo err >&2"])
    row = wait_state(conn, job.id, "completed", "dead", timeout=30)
    assert row["state"] == "completed"
    result = row["result"]
    assert (result["exit_code"], result["stdout"], result["stderr"], result["timed_out"]) == (
        0,
        "out\n",
        "err\n",
        False,
    )
    assert 0 <= result["duration_s"] < 30
    assert row["task"] == "pgsched.command"
    assert row["queue"] == "commands"
    assert COMMAND_LABEL in row["labels"]


def test_exit_3_is_retried_by_policy_then_dead_with_each_attempt_recorded(
    app: App, conn: Conn, command_worker: Any
) -> None:
    command_worker()
    job = app.enqueue_command(
        ["sh", "-c", 'echo "attempt $PGSCHED_JOB_ATTEMPT"; echo boom >&2; exit 3'], max_attempts=2
    )
    row = wait_state(conn, job.id, "completed", "dead", timeout=30)
    assert row["state"] == "dead"
    assert row["attempt"] == 2
    assert row["error"] == "command exited with code 3: boom"
    assert row["result"]["exit_code"] == 3
    assert row["result"]["stdout"] == "attempt 2\n"
    failed = events(conn, job.id, "failed")
    assert len(failed) == 1
    assert failed[0]["detail"]["result"]["exit_code"] == 3
    assert failed[0]["detail"]["result"]["stdout"] == "attempt 1\n"
    assert failed[0]["detail"]["error"] == "command exited with code 3: boom"


def test_timeout_kills_the_whole_process_group(app: App, conn: Conn, command_worker: Any, tmp_path: Path) -> None:
    command_worker()
    script = f"echo working; sleep 300 & echo $! > {tmp_path}/grandchild; echo $$ > {tmp_path}/child; wait"
    job = app.enqueue_command(["sh", "-c", script], timeout=1.0, max_attempts=1)
    child, grandchild = _pid(tmp_path / "child"), _pid(tmp_path / "grandchild")
    row = wait_state(conn, job.id, "completed", "dead", timeout=30)
    assert row["state"] == "dead"
    assert row["error"] == "timed out after 1 s"  # the runner's, with the output: the margin was not needed
    assert row["result"]["stdout"] == "working\n"
    assert row["result"]["timed_out"] is True
    assert row["result"]["exit_code"] == -15
    assert row["result"]["signal"] == "SIGTERM"
    assert row["result"]["duration_s"] >= 1.0
    wait_for(lambda: _gone(child) and _gone(grandchild), 10, what="child and grandchild gone")


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace(
    app: App, conn: Conn, command_worker: Any, tmp_path: Path
) -> None:
    command_worker(kill_grace=0.5)
    # An ignored signal stays ignored across fork and exec: the sleeping grandchild ignores it too.
    script = f"trap '' TERM; sleep 300 & echo $! > {tmp_path}/grandchild; wait; wait"
    job = app.enqueue_command(["sh", "-c", script], timeout=0.5, max_attempts=1)
    grandchild = _pid(tmp_path / "grandchild")
    row = wait_state(conn, job.id, "completed", "dead", timeout=30)
    assert (row["result"]["exit_code"], row["result"]["signal"]) == (-9, "SIGKILL")
    assert row["result"]["duration_s"] >= 1.0
    wait_for(lambda: _gone(grandchild), 10, what="grandchild gone")


def test_cancel_while_running_stops_the_program_and_keeps_its_output(
    app: App, conn: Conn, command_worker: Any, tmp_path: Path
) -> None:
    command_worker()
    job = app.enqueue_command(["sh", "-c", f"echo started; echo $$ > {tmp_path}/child; exec sleep 300"])
    child = _pid(tmp_path / "child")
    assert app.cancel(job.id) == "cancel_requested"
    row = wait_state(conn, job.id, "completed", "dead", "cancelled", timeout=30)
    assert row["state"] == "cancelled"
    assert row["result"]["exit_code"] == -15
    assert row["result"]["stdout"] == "started\n"
    assert row["error"] == "cancelled: the command was stopped after the cancel request"
    wait_for(lambda: _gone(child), 10, what="cancelled command gone")


def test_stdout_and_stderr_keep_their_last_64_kB_decoded_safely(app: App, conn: Conn, command_worker: Any) -> None:
    command_worker()
    code = (
        "import sys; sys.stdout.buffer.write(b'a' * 200000 + b'END\\xff\\x00');"
        " sys.stderr.buffer.write('é'.encode() * 70000)"
    )
    job = app.enqueue_command([sys.executable, "-c", code])
    result = wait_state(conn, job.id, "completed", "dead", timeout=30)["result"]
    assert result["exit_code"] == 0
    assert (result["stdout_bytes"], result["stderr_bytes"]) == (200005, 140000)
    assert len(result["stdout"].encode()) <= OUTPUT_CAP + 8
    assert result["stdout"].endswith("aEND\ufffd\ufffd")
    assert set(result["stderr"]) == {"é"}
    assert len(result["stderr"]) == OUTPUT_CAP // 2


def test_the_environment_is_minimal_and_never_the_workers(
    app: App, conn: Conn, command_worker: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PGSCHED_TEST_SECRET", "s3cret")
    monkeypatch.setenv("PGSCHED_TEST_SHARED", "shared")
    command_worker(pass_env=("PGSCHED_TEST_SHARED",))
    job = app.enqueue_command(["env"], env={"GREETING": "hello", "PATH": "/usr/bin:/bin"}, cwd=str(tmp_path))
    seen = dict(
        line.split("=", 1)
        for line in wait_state(conn, job.id, "completed", "dead", timeout=30)["result"]["stdout"].splitlines()
    )
    assert "PGSCHED_TEST_SECRET" not in seen
    assert seen["PGSCHED_TEST_SHARED"] == "shared"
    assert seen["GREETING"] == "hello"
    assert seen["PATH"] == "/usr/bin:/bin"  # the job's env wins over the base
    assert seen["PGSCHED_JOB_ID"] == str(job.id)
    assert seen["PGSCHED_JOB_ATTEMPT"] == "1"
    assert set(seen) <= {
        "PATH", "LANG", "HOME", "GREETING", "PGSCHED_TEST_SHARED", "PGSCHED_JOB_ID", "PGSCHED_JOB_ATTEMPT",
        "PGSCHED_LEASE_TOKEN", "PWD", "SHLVL", "_",
    }  # fmt: skip
    pwd = app.enqueue_command(["pwd"], cwd=str(tmp_path))
    assert wait_state(conn, pwd.id, "completed", "dead", timeout=30)["result"]["stdout"] == f"{tmp_path}\n"


def test_the_jobs_env_reaches_only_the_program_and_cannot_replace_pgscheds_own_variables(
    app: App, conn: Conn, command_worker: Any
) -> None:
    command_worker()
    # The program's parent is pgsched's supervisor: its environment at start is in /proc/PPID/environ.
    script = 'echo "$PGSCHED_JOB_ID $PGSCHED_JOB_ATTEMPT $PGSCHED_LEASE_TOKEN"; tr "\\0" "\\n" < /proc/$PPID/environ'
    hostile = {
        "PGSCHED_JOB_ID": "777777",
        "PGSCHED_JOB_ATTEMPT": "99",
        "PGSCHED_LEASE_TOKEN": "424242",
        "LD_PRELOAD": "/nonexistent/pgsched-test.so",
        "JOB_MARKER": "from-the-job",
    }
    job = app.enqueue_command(["sh", "-c", script], env=hostile)
    row = wait_state(conn, job.id, "completed", "dead", timeout=30)
    ours, *supervisor = row["result"]["stdout"].splitlines()
    token = conn.execute("SELECT lease_token FROM pgsched.job_history WHERE id = %s", [job.id]).fetchone()
    assert token is not None
    assert ours == f"{job.id} 1 {token['lease_token']}", "pgsched's own variables are applied last"
    assert not [v for v in supervisor if v.startswith(("LD_PRELOAD=", "JOB_MARKER=", "PGSCHED_"))], supervisor
    assert row["result"]["exit_code"] == 0


def test_no_shell_unless_argv_asks_for_one(app: App, conn: Conn, command_worker: Any) -> None:
    command_worker()
    job = app.enqueue_command(["echo", "$HOME; exit 1", "*"])
    row = wait_state(conn, job.id, "completed", "dead", timeout=30)
    assert row["result"]["stdout"] == "$HOME; exit 1 *\n"


def test_a_program_that_cannot_start_fails_with_exit_code_127(app: App, conn: Conn, command_worker: Any) -> None:
    command_worker()
    job = app.enqueue_command(["no-such-program-pgsched"], max_attempts=1)
    row = wait_state(conn, job.id, "completed", "dead", timeout=30)
    assert row["state"] == "dead"
    assert row["result"]["exit_code"] == 127
    assert "cannot run 'no-such-program-pgsched'" in row["result"]["stderr"]


def test_a_worker_without_commands_never_claims_a_command(app: App, conn: Conn) -> None:
    job = app.enqueue_command(["true"])
    options = WorkerOptions(queues=["*"], install_signal_handlers=False, poll_interval=0.1, burst=True)
    Running(Worker(app, options)).start().join(30)
    row = conn.execute("SELECT state, attempt FROM pgsched.jobs WHERE id = %s", [job.id]).fetchone()
    assert row == {"state": "available", "attempt": 0}


@pytest.mark.parametrize(
    ("argv", "kwargs", "error"),
    [
        ([], {}, "at least one element"),
        ("ls -l", {}, "not a string"),
        ([""], {}, "the program, is empty"),
        (["ls", 3], {}, "element 2 must be a string"),
        (["ls", "a\x00b"], {}, "element 2 contains a NUL byte"),
        (["ls"], {"env": {"A": 1}}, "env value of A must be a string"),
        (["ls"], {"env": {"A": "x\x00"}}, "env value of A contains a NUL byte"),
        (["ls"], {"env": {"A=B": "x"}}, "not a variable name"),
        (["ls"], {"env": {f"V{i}": "x" for i in range(1001)}}, "env is too large"),
        (["ls", "x" * 200_000], {}, "larger than 128 kB"),
        (["ls", *(["x" * 100_000] * 3)], {}, "larger than 256 kB in all"),
        (["ls"] * 5000, {}, "at most 4096"),
        (["ls"], {"cwd": "relative/dir"}, "absolute path"),
        (["ls"], {"timeout": 0}, "timeout must be positive"),
        (["ls"], {"timeout": "5"}, "seconds or a timedelta"),
        (["ls"], {"max_attempts": 0}, "at least 1"),
    ],
)
def test_a_bad_command_is_refused_before_anything_is_enqueued(
    app: App, conn: Conn, argv: Any, kwargs: dict[str, Any], error: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        app.enqueue_command(argv, **kwargs)
    assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone() == {"n": 0}


@pytest.mark.parametrize(
    ("call", "params", "error"),
    [
        ("argv => %s::text[]", [[]], "argv must name a program"),
        ("argv => %s::text[]", [None], "argv must name a program"),
        ("argv => %s::text[]", [["ls", None]], "argv element 2 is NULL"),
        ("argv => %s::text[]", [[""]], "the program, is empty"),
        ("argv => ARRAY[ARRAY['a'], ARRAY['b']]", [], "one-dimensional"),
        ("argv => %s::text[]", [["ls", "x" * 200_000]], "argv is too large"),
        ("argv => ARRAY['ls'], env => %s", [Jsonb({"A": 1})], "env value of 'A' must be a string, not number"),
        ("argv => ARRAY['ls'], env => %s", [Jsonb(["A"])], "env must be a JSON object"),
        ("argv => ARRAY['ls'], env => %s", [Jsonb({"1A": "x"})], "not a variable name"),
        ("argv => ARRAY['ls'], env => %s", [Jsonb({f"V{i}": "" for i in range(1001)})], "env is too large"),
        ("argv => ARRAY['ls'], cwd => %s", ["tmp"], "must be an absolute path"),
        ("argv => ARRAY['ls'], timeout => %s::interval", ["-1 second"], "timeout -00:00:01 must be positive"),
        ("argv => ARRAY['ls'], queue => %s", ["bad queue"], "not a valid queue name"),
        ("argv => ARRAY['ls'], max_attempts => %s", [0], "max_attempts 0 is not allowed"),
    ],
)
def test_enqueue_command_in_sql_refuses_bad_input_naming_it(
    conn: Conn, call: str, params: list[Any], error: str
) -> None:
    with pytest.raises(psycopg.Error, match=error):
        conn.execute(f"SELECT pgsched.enqueue_command({call})", params)  # type: ignore[arg-type]
    assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone() == {"n": 0}


def test_enqueue_command_stores_the_timeout_with_the_job_and_dedupes_by_key(app: App, conn: Conn) -> None:
    first = conn.execute(
        "SELECT pgsched.enqueue_command(ARRAY['sleep', '1'], '{\"X\": \"1\"}', '/tmp', interval '90 seconds',"
        " idempotency_key => 'nightly', priority => 5, labels => ARRAY['gpu']) AS id"
    ).fetchone()
    assert first is not None
    row = conn.execute("SELECT * FROM pgsched.jobs WHERE id = %s", [first["id"]]).fetchone()
    assert row is not None
    assert row["args"] == {"argv": ["sleep", "1"], "env": {"X": "1"}, "cwd": "/tmp", "timeout_s": 90, **DEFAULT_LIMITS}
    assert (row["task"], row["queue"], row["priority"]) == ("pgsched.command", "commands", 5)
    assert row["timeout"] == timedelta(seconds=120)  # 90 s + config.command_timeout_margin: the database's deadline
    assert row["labels"] == ["gpu", COMMAND_LABEL]
    again = app.enqueue_command(["sleep", "1"], env={"X": "1"}, cwd="/tmp", timeout=90, idempotency_key="nightly")
    assert again.id == first["id"]
    with pytest.raises(InvalidJob, match="nightly"):
        app.enqueue_command(["sleep", "2"], idempotency_key="nightly")


def test_enqueue_command_async(app: App, conn: Conn) -> None:
    async def enqueue() -> int:
        return (await app.enqueue_command_async(["true"], queue="ops", timeout=5)).id

    job_id = asyncio.run(enqueue())
    row = conn.execute("SELECT queue, args FROM pgsched.jobs WHERE id = %s", [job_id]).fetchone()
    assert row == {"queue": "ops", "args": {"argv": ["true"], "env": {}, "cwd": None, "timeout_s": 5, **DEFAULT_LIMITS}}


def test_the_command_task_is_refused_on_every_other_path(conn: Conn) -> None:
    for statement in (
        "SELECT pgsched.enqueue('pgsched.command', '{\"argv\": [\"id\"]}')",
        "SELECT * FROM pgsched.enqueue_many(ARRAY['t', 'pgsched.command'])",
        "SELECT pgsched.enqueue_service('pgsched.command')",
        "SELECT pgsched.upsert_schedule('evil', '* * * * *', 'pgsched.command')",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="reserved for command jobs"):
            conn.execute(statement)
    assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone() == {"n": 0}
    assert conn.execute("SELECT count(*) AS n FROM pgsched.schedules").fetchone() == {"n": 0}


def test_the_kill_grace_and_pass_env_options_are_checked() -> None:
    with pytest.raises(ValueError, match="kill grace"):
        CommandOptions(kill_grace=-1)
    with pytest.raises(ValueError, match="not an environment variable name"):
        CommandOptions(pass_env=("A=B",))
    assert os.environ.get("PGSCHED_TEST_SECRET") is None


def test_a_worker_killed_by_sigkill_takes_its_command_and_all_it_started_with_it(
    dsn: str, app: App, tmp_path: Path
) -> None:
    from tests.e2e.clirun import command, environment

    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [*command(), "worker", "--commands", "--lease", "5", "--poll-interval", "0.2"],
        env=environment({"PGSCHED_DSN": dsn}),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        script = f"sleep 300 & echo $! > {tmp_path}/grandchild; echo $$ > {tmp_path}/child; wait"
        app.enqueue_command(["sh", "-c", script])
        child, grandchild = _pid(tmp_path / "child"), _pid(tmp_path / "grandchild")
        assert not _gone(child)
        worker.kill()
        worker.wait(10)
        wait_for(lambda: _gone(child) and _gone(grandchild), 10, what="the command's processes gone with the worker")
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        log.close()


def test_retry_redrives_a_command_as_it_was_written(app: App, conn: Conn) -> None:
    job = app.enqueue_command(["echo", "again"], timeout=5, run_at=None, delay=None)
    assert app.cancel(job.id) == "cancelled"
    assert app.retry(job.id) == "retried"
    row = conn.execute("SELECT task, args, labels, state, timeout FROM pgsched.jobs WHERE id = %s", [job.id]).fetchone()
    assert row == {
        "task": "pgsched.command",
        "args": {"argv": ["echo", "again"], "env": {}, "cwd": None, "timeout_s": 5, **DEFAULT_LIMITS},
        "labels": [COMMAND_LABEL],
        "state": "available",
        "timeout": timedelta(seconds=35),  # its deadline again: 5 s + the margin
    }
    untimed = app.enqueue_command(["true"])
    assert app.cancel(untimed.id) == "cancelled"
    assert app.retry(untimed.id) == "retried"
    assert conn.execute("SELECT timeout FROM pgsched.jobs WHERE id = %s", [untimed.id]).fetchone() == {"timeout": None}


# -- the deadline of a command job: its timeout + config.command_timeout_margin --------------------------------


class StuckSink(logging.Handler):
    """A log sink that stops taking records (a full pipe, a stuck syslog): whoever logs the trigger blocks in the
    logging call, and with ``everyone`` so does every thread that logs after it, until ``release``."""

    def __init__(self, trigger: Callable[[logging.LogRecord], bool], *, everyone: bool) -> None:
        super().__init__(logging.INFO)
        self.trigger = trigger
        self.everyone = everyone
        self.stuck = threading.Event()
        self.release = threading.Event()
        self.blocked: list[str] = []  # the messages of the records stuck in their logging call

    def handle(self, record: logging.LogRecord) -> bool:  # no handler lock: each caller blocks on its own
        if not self.stuck.is_set() and self.trigger(record):
            self.stuck.set()
        elif not (self.everyone and self.stuck.is_set()):
            return True
        if not self.release.is_set():
            self.blocked.append(record.getMessage())
            self.release.wait(120)
        return True

    def emit(self, record: logging.LogRecord) -> None:  # pragma: no cover - handle() takes every record
        pass


@pytest.fixture
def stuck_sink() -> Iterator[Callable[..., StuckSink]]:
    logger = logging.getLogger("pgsched")
    level = logger.level
    sinks: list[StuckSink] = []

    def install(trigger: Callable[[logging.LogRecord], bool], *, everyone: bool = False) -> StuckSink:
        sink = StuckSink(trigger, everyone=everyone)
        sinks.append(sink)
        logger.addHandler(sink)
        logger.setLevel(logging.INFO)
        return sink

    yield install
    for sink in sinks:
        sink.release.set()
        logger.removeHandler(sink)
    logger.setLevel(level)


def _sigterm_of(job_id: int) -> Callable[[logging.LogRecord], bool]:
    """The runner's record of its SIGTERM at the command's timeout, for this job."""
    return lambda r: "SIGTERM to process group" in r.msg and bool(r.args) and r.args[0] == job_id  # type: ignore[index]


def _hangs_on_attempt_1(pid_file: Path) -> list[str]:
    script = (
        f'echo "attempt $PGSCHED_JOB_ATTEMPT"; [ "$PGSCHED_JOB_ATTEMPT" = 1 ]'
        f" && echo $$ > {pid_file} && exec sleep 300; echo done"
    )
    return ["sh", "-c", script]


MARGIN_ERROR = "timed out after 3 s: the command runner did not end the command within the margin of its 1 s timeout"


def test_a_sigterm_deaf_command_is_killed_in_time_to_report_within_the_margin(
    app: App, conn: Conn, command_worker: Any, tmp_path: Path
) -> None:
    """A kill grace longer than the margin is cut short: SIGKILL comes early enough to record the output before the
    worker's and the database's limit (timeout + margin) would fail the run without it."""
    conn.execute("UPDATE pgsched.config SET command_timeout_margin = '3 seconds'")
    command_worker(kill_grace=60)
    script = f"trap '' TERM; echo working; sleep 300 & echo $! > {tmp_path}/grandchild; wait; wait"
    queued = app.enqueue_command(["sh", "-c", script], timeout=1, max_attempts=1)
    assert (job(conn, queued.id) or {})["timeout"] == timedelta(seconds=4)
    grandchild = _pid(tmp_path / "grandchild")
    row = wait_state(conn, queued.id, "completed", "dead", timeout=30)
    assert row["error"] == "timed out after 1 s"
    result = row["result"]
    assert (result["exit_code"], result["signal"], result["timed_out"], result["stdout"]) == (
        -9,
        "SIGKILL",
        True,
        "working\n",
    )
    assert 2.0 <= result["duration_s"] < 4.0  # SIGKILL at 4 - 2 s (COLLECT_S), not at 1 + 60 s
    wait_for(lambda: _gone(grandchild), 10, what="grandchild gone")


def test_a_hung_runner_is_failed_by_the_worker_at_timeout_plus_margin_and_retried(
    app: App, conn: Conn, command_worker: Any, stuck_sink: Any, tmp_path: Path
) -> None:
    """The runner blocks (in a stuck logging call) right at the command's timeout: the worker's own limit fails
    the run, its thread is abandoned, the job is retried; what the runner reports once unstuck is dropped."""
    conn.execute("UPDATE pgsched.config SET command_timeout_margin = '2 seconds'")
    running = command_worker(kill_grace=0.5)
    queued = app.enqueue_command(_hangs_on_attempt_1(tmp_path / "pid"), timeout=1, max_attempts=2)
    sink = stuck_sink(_sigterm_of(queued.id))
    program = _pid(tmp_path / "pid")
    row = wait_state(conn, queued.id, "completed", "dead", timeout=60)
    assert sink.stuck.is_set()
    assert (row["state"], row["attempt"], row["result"]["stdout"]) == ("completed", 2, "attempt 2\ndone\n")
    [failed] = events(conn, queued.id, "failed")
    assert (failed["attempt"], failed["detail"]["error"]) == (1, MARGIN_ERROR)
    assert running.worker._executor.abandoned == 1
    assert not _gone(program)  # nobody ended the hung run's program yet
    sink.release.set()  # the runner goes on: it kills the program and reports, too late
    wait_for(lambda: _gone(program), 15, what="the hung run's program gone")
    wait_for(lambda: running.worker._executor.abandoned == 0, 15, what="the abandoned runner returned")
    assert len(events(conn, queued.id, "failed")) == 1
    assert (job(conn, queued.id) or {})["result"]["stdout"] == "attempt 2\ndone\n"


def test_the_database_fails_a_command_whose_worker_hangs_while_its_heartbeats_continue(
    app: App, conn: Conn, command_worker: Any, stuck_sink: Any, tmp_path: Path
) -> None:
    """The runner and the worker's own time limit both block in a stuck log sink; the heartbeat thread (which logs
    nothing while it works) keeps the lease alive. Housekeeping fails the run at timeout + margin + grace under its
    token; the retry runs once the worker is unstuck, and the hung run's late outcome is refused."""
    conn.execute("UPDATE pgsched.config SET command_timeout_margin = '2 seconds', timeout_grace = '1 second'")
    running = command_worker(kill_grace=0.5, lease=3)  # a lease shorter than the deadline: heartbeats must go on
    queued = app.enqueue_command(_hangs_on_attempt_1(tmp_path / "pid"), timeout=1, max_attempts=2)
    sink = stuck_sink(_sigterm_of(queued.id), everyone=True)
    program = _pid(tmp_path / "pid")
    [claimed] = wait_for(lambda: events(conn, queued.id, "claimed"), 30, what="the first claim")
    failed = wait_for(lambda: events(conn, queued.id, "failed"), 30, what="the deadline's failure")
    assert (failed[0]["attempt"], failed[0]["detail"]["error"]) == (1, MARGIN_ERROR)
    assert (failed[0]["at"] - claimed["at"]).total_seconds() >= 4.0  # 1 s + 2 s margin + 1 s grace
    assert not events(conn, queued.id, "lease_expired")  # the heartbeats went on
    # The worker could not have written it: its time limit is stuck in the sink too, before failing the job.
    wait_for(
        lambda: any("sync handler still running after its 3 s timeout" in m for m in sink.blocked),
        15,
        what=lambda: f"the worker's own limit stuck in the sink: {sink.blocked}",
    )
    assert not _gone(program)
    sink.release.set()
    row = wait_state(conn, queued.id, "completed", "dead", timeout=60)
    assert (row["state"], row["attempt"], row["result"]["stdout"]) == ("completed", 2, "attempt 2\ndone\n")
    wait_for(lambda: _gone(program), 15, what="the hung run's program gone")
    wait_for(lambda: running.worker._executor.abandoned == 0, 15, what="the abandoned runner returned")
    assert len(events(conn, queued.id, "failed")) == 1  # the worker's late failure and the runner's result: refused
    late = conn.execute(
        "SELECT accepted FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[])",
        [queued.id, claimed["token"]],
    ).fetchone()
    assert late == {"accepted": False}


def test_the_process_pool_runs_commands_on_the_workers_threads_with_the_same_limits(
    app: App, conn: Conn, command_worker: Any
) -> None:
    """With --pool process, a command's runner stays in the worker (its program has its own process group): the
    runner's timeout still reports, and a quick command completes."""
    command_worker(pool="process", app_ref="tests.integration.timeouts_app:app", concurrency=1)
    # The program's parent is the supervisor; the supervisor's parent is the process that ran the runner.
    quick = app.enqueue_command(["sh", "-c", "awk '{print $4}' /proc/$PPID/stat"])
    row = wait_state(conn, quick.id, "completed", "dead", timeout=60)
    assert (row["state"], row["result"]["stdout"]) == ("completed", f"{os.getpid()}\n")
    slow = app.enqueue_command(["sh", "-c", "echo working; exec sleep 300"], timeout=1, max_attempts=1)
    row = wait_state(conn, slow.id, "completed", "dead", timeout=30)
    assert (row["error"], row["result"]["stdout"], row["result"]["exit_code"]) == (
        "timed out after 1 s",
        "working\n",
        -15,
    )
