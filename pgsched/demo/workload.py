"""The demo workload: its tasks (``pgsched.demo:app``, re-exported by the package) and one tagged run of them
through worker processes."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row

from pgsched.api.app import App
from pgsched.core.job import JobContext
from pgsched.core.task import JobSpec
from pgsched.errors import PgschedError

app = App(name="pgsched-demo")

QUEUE_FAST = "demo.fast"
QUEUE_IO = "demo.io"
QUEUE_RETRY = "demo.retry"
QUEUES = (QUEUE_FAST, QUEUE_IO, QUEUE_RETRY)
APP_REFERENCE = "pgsched.demo:app"


class DemoFailed(PgschedError):
    """The demo could not run (a worker did not start, the database refused the jobs)."""


class TransientError(Exception):
    """A failure that goes away when the job is tried again."""


# -- the tasks ------------------------------------------------------------


@app.task(name="demo.quick", queue=QUEUE_FAST)
def quick(n: int) -> int:
    """Almost no work: what is measured is the scheduler's own overhead per job."""
    return n * n


@app.task(name="demo.report", queue=QUEUE_FAST)
def report(n: int, due_in: float) -> dict[str, Any]:
    """A delayed job: enqueued with run_at a few seconds ahead."""
    return {"n": n, "due_in_s": due_in}


@app.task(name="demo.io", queue=QUEUE_IO)
def simulated_io(n: int, ms: int) -> None:
    """A blocking call to something slow (a few milliseconds), on a handler thread."""
    time.sleep(ms / 1000)


@app.task(name="demo.fetch", queue=QUEUE_IO)
async def fetch(n: int, ms: int) -> int:
    """An async handler: awaits a few milliseconds on the worker's event loop."""
    await asyncio.sleep(ms / 1000)
    return n


@app.task(
    name="demo.flaky",
    queue=QUEUE_RETRY,
    max_attempts=5,
    retry_backoff=0.2,
    retry_backoff_max=1.0,
    retry_jitter=0.5,
)
def flaky(n: int, failures: int, ctx: JobContext) -> int:
    """Fails its first ``failures`` attempts, then succeeds on a retry."""
    if ctx.attempt <= failures:
        raise TransientError(f"simulated transient failure (attempt {ctx.attempt} of {failures + 1})")
    return ctx.attempt


@app.task(name="demo.always_fails", queue=QUEUE_RETRY, max_attempts=3, retry_backoff=0.2, retry_backoff_max=1.0)
def always_fails(n: int) -> None:
    """Fails every attempt: it ends in the dead letters after max_attempts."""
    raise RuntimeError("simulated permanent failure: this job always fails")


# -- the plan -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """The jobs of one run, tagged by their idempotency keys ``demo:<run>:<n>``."""

    run: str
    specs: list[JobSpec]
    per_task: dict[str, int]
    expected_dead: int
    expected_retried: int

    @property
    def tag(self) -> str:
        """A LIKE pattern matching this run's idempotency keys."""
        return f"demo:{self.run}:%"


def new_run_id() -> str:
    """A short, sortable, unique run id (no LIKE wildcards in it)."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def make_plan(total: int, run: str, now: datetime, *, seed: int = 7) -> Plan:
    """The job mix for ``total`` jobs: delays are counted from ``now``, the database's clock."""
    if total < 10:
        raise ValueError("the demo needs at least 10 jobs")
    rng = random.Random(seed)
    counts = {
        always_fails.name: 1,
        flaky.name: max(1, total * 2 // 100),
        report.name: max(1, total // 10),
        simulated_io.name: max(1, total // 4),
        fetch.name: max(1, total // 10),
    }
    counts[quick.name] = total - sum(counts.values())
    kinds = [name for name, count in counts.items() for _ in range(count)]
    rng.shuffle(kinds)

    specs: list[JobSpec] = []
    for n, kind in enumerate(kinds):
        key = f"demo:{run}:{n}"
        if kind == report.name:
            due_in = round(2.0 + 3.0 * rng.random(), 3)
            specs.append(
                report.using(idempotency_key=key, run_at=now + timedelta(seconds=due_in)).job(n=n, due_in=due_in)
            )
        elif kind == simulated_io.name:
            specs.append(simulated_io.using(idempotency_key=key).job(n=n, ms=rng.randint(2, 10)))
        elif kind == fetch.name:
            specs.append(fetch.using(idempotency_key=key).job(n=n, ms=rng.randint(2, 10)))
        elif kind == flaky.name:
            specs.append(flaky.using(idempotency_key=key).job(n=n, failures=1 + n % 2))
        elif kind == always_fails.name:
            specs.append(always_fails.using(idempotency_key=key).job(n=n))
        else:
            specs.append(quick.using(idempotency_key=key).job(n=n))
    return Plan(
        run=run,
        specs=specs,
        per_task=counts,
        expected_dead=counts[always_fails.name],
        expected_retried=counts[flaky.name] + counts[always_fails.name],
    )


# -- what the run reports -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Where this run's jobs are, read from the database."""

    total: int
    completed: int = 0
    dead: int = 0
    cancelled: int = 0
    scheduled: int = 0
    available: int = 0
    running: int = 0
    elapsed: float = 0.0

    @property
    def finished(self) -> int:
        return self.completed + self.dead + self.cancelled

    @property
    def rate(self) -> float:
        """Jobs finished per second since the run was enqueued."""
        return self.finished / self.elapsed if self.elapsed > 0 else 0.0


class Reporter(Protocol):
    """Where the run tells what it is doing (the CLI draws it)."""

    def step(self, message: str) -> None: ...

    def progress(self, snapshot: Snapshot) -> None: ...

    def progress_done(self) -> None: ...


@dataclass(kw_only=True)
class WorkerReport:
    name: str
    pid: int
    exit_code: int | None
    log: str


@dataclass(kw_only=True)
class Summary:
    """The outcome of one run; ``ok`` when every job is accounted for and only the doomed one died."""

    run: str
    total: int
    completed: int = 0
    dead: int = 0
    cancelled: int = 0
    unfinished: int = 0
    retried: int = 0  # jobs that needed more than one attempt, whatever their end
    recovered: int = 0  # of those, the ones that completed
    attempts: int = 0
    expected_dead: int = 0
    expected_retried: int = 0
    dead_job_ids: list[int] = field(default_factory=list)
    per_task: dict[str, dict[str, int]] = field(default_factory=dict)
    throughput_per_s: float = 0.0  # finished jobs / run_s
    peak_per_s: int = 0  # the most jobs finished within one second
    lag_p50_s: float | None = None
    lag_p99_s: float | None = None
    run_s: float = 0.0  # first enqueue to last finish, by the database's clock
    wall_s: float = 0.0  # the whole command, server start included
    workers: list[WorkerReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


# -- SQL: this run's jobs are those with its id range and key prefix --------

_PROGRESS = """
SELECT count(*) FILTER (WHERE r.state = 'completed') AS completed,
       count(*) FILTER (WHERE r.state = 'dead') AS dead,
       count(*) FILTER (WHERE r.state = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE r.state = 'scheduled') AS scheduled,
       count(*) FILTER (WHERE r.state = 'available') AS available,
       count(*) FILTER (WHERE r.state = 'running') AS running
FROM (
    SELECT h.state FROM pgsched.job_history h
    WHERE h.id BETWEEN %(lo)s AND %(hi)s AND h.idempotency_key LIKE %(tag)s AND h.finished_at >= %(since)s
    UNION ALL
    SELECT j.state FROM pgsched.jobs j
    WHERE j.id BETWEEN %(lo)s AND %(hi)s AND j.idempotency_key LIKE %(tag)s
) r
"""

_PER_TASK = """
SELECT h.task, h.state::text AS state, count(*) AS jobs,
       count(*) FILTER (WHERE h.attempt > 1) AS retried, sum(h.attempt) AS attempts
FROM pgsched.job_history h
WHERE h.id BETWEEN %(lo)s AND %(hi)s AND h.idempotency_key LIKE %(tag)s AND h.finished_at >= %(since)s
GROUP BY 1, 2
ORDER BY 1, 2
"""

_TIMING = """
SELECT count(DISTINCT h.id) AS distinct_jobs,
       percentile_cont(0.5) WITHIN GROUP (
           ORDER BY EXTRACT(EPOCH FROM h.started_at - h.run_at)::double precision) AS lag_p50,
       percentile_cont(0.99) WITHIN GROUP (
           ORDER BY EXTRACT(EPOCH FROM h.started_at - h.run_at)::double precision) AS lag_p99,
       EXTRACT(EPOCH FROM max(h.finished_at) - %(since)s::timestamptz)::double precision AS run_s
FROM pgsched.job_history h
WHERE h.id BETWEEN %(lo)s AND %(hi)s AND h.idempotency_key LIKE %(tag)s AND h.finished_at >= %(since)s
"""

_PEAK = """
SELECT coalesce(max(s.n), 0) AS peak
FROM (SELECT count(*) AS n
      FROM pgsched.job_history h
      WHERE h.id BETWEEN %(lo)s AND %(hi)s AND h.idempotency_key LIKE %(tag)s AND h.finished_at >= %(since)s
      GROUP BY date_trunc('second', h.finished_at)) s
"""

_DEAD = """
SELECT h.id, h.task
FROM pgsched.job_history h
WHERE h.id BETWEEN %(lo)s AND %(hi)s AND h.idempotency_key LIKE %(tag)s AND h.finished_at >= %(since)s
  AND h.state = 'dead'
ORDER BY h.id
"""

_LEFTOVER = "SELECT count(*) AS n FROM pgsched.jobs WHERE queue = ANY(%s)"

_READY = "SELECT count(*) AS n FROM pgsched.workers WHERE name = ANY(%s)"


# -- worker processes -----------------------------------------------------


@dataclass
class WorkerProcess:
    """One `pgsched worker` subprocess serving the demo queues, logging to its own file."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def worker_command(name: str, concurrency: int, poll_interval: float) -> list[str]:
    """The command line of one worker (the DSN travels in PGSCHED_DSN, out of the process list)."""
    return [
        sys.executable, "-m", "pgsched", "worker",
        "--app", APP_REFERENCE,
        "--queues", ",".join(QUEUES),
        "--concurrency", str(concurrency),
        "--poll-interval", str(poll_interval),
        "--name", name,
    ]  # fmt: skip


def start_workers(
    dsn: str, run: str, count: int, concurrency: int, poll_interval: float, log_dir: Path
) -> list[WorkerProcess]:
    """Start ``count`` worker processes in sessions of their own (a terminal's Ctrl-C reaches only us)."""
    env = dict(os.environ, PGSCHED_DSN=dsn, PYTHONUNBUFFERED="1")
    started: list[WorkerProcess] = []
    for i in range(1, count + 1):
        name = f"demo-{run}-w{i}"
        log_path = log_dir / f"worker-{i}.log"
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                worker_command(name, concurrency, poll_interval),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        started.append(WorkerProcess(name, proc, log_path))
    return started


def wait_ready(conn: psycopg.Connection[Any], workers: Sequence[WorkerProcess], timeout: float) -> None:
    """Wait until every worker has registered (its task policies are in by then)."""
    deadline = time.monotonic() + timeout
    names = [w.name for w in workers]
    while True:
        for worker in workers:
            if worker.proc.poll() is not None:
                raise DemoFailed(
                    f"worker {worker.name} exited with {worker.proc.returncode} while starting; "
                    f"its log ({worker.log_path}) ends with:\n{worker.log_tail()}"
                )
        row = _one(conn, _READY, [names])
        if int(row["n"]) == len(names):
            return
        if time.monotonic() > deadline:
            raise DemoFailed(f"the workers did not register within {timeout:.0f}s; see {workers[0].log_path}")
        time.sleep(0.05)


def stop_workers(workers: Sequence[WorkerProcess], timeout: float) -> list[WorkerReport]:
    """SIGTERM every worker, wait for them, and SIGKILL whatever is still there after ``timeout``."""
    for worker in workers:
        if worker.proc.poll() is None:
            worker.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    reports: list[WorkerReport] = []
    for worker in workers:
        try:
            code: int | None = worker.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            worker.proc.wait()
            code = None
        reports.append(WorkerReport(name=worker.name, pid=worker.proc.pid, exit_code=code, log=str(worker.log_path)))
    return reports


# -- the run --------------------------------------------------------------


@dataclass(kw_only=True)
class DemoOptions:
    jobs: int = 3000
    workers: int = 2
    concurrency: int = 8
    poll_interval: float = 0.5
    timeout: float = 120.0
    log_dir: Path | None = None


def run_demo(dsn: str, options: DemoOptions, reporter: Reporter, *, started: float | None = None) -> Summary:
    """Start the workers, enqueue one tagged run, follow it to the end, stop the workers, and sum it up."""
    started = time.monotonic() if started is None else started
    run = new_run_id()
    log_dir = options.log_dir or Path(tempfile.gettempdir()) / "pgsched-demo" / run
    log_dir.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    workers: list[WorkerProcess] = []
    reports: list[WorkerReport] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            reporter.step(
                f"starting {options.workers} workers ({APP_REFERENCE}, concurrency {options.concurrency}, "
                f"queues {', '.join(QUEUES)}); logs in {log_dir}"
            )
            workers = start_workers(dsn, run, options.workers, options.concurrency, options.poll_interval, log_dir)
            wait_ready(conn, workers, timeout=60.0)
            leftover = int(_one(conn, _LEFTOVER, [list(QUEUES)])["n"])
            if leftover:
                reporter.step(f"{leftover} jobs of earlier, interrupted runs wait in the demo queues: they run too")
            params, plan = _enqueue(conn, options.jobs, run, reporter)
            problems += _follow(conn, params, plan, workers, options.timeout, reporter)
        finally:
            if workers:
                reporter.step("stopping the workers (SIGTERM)")
                reports = stop_workers(workers, timeout=40.0)
        summary = _summarize(conn, params, plan)
    summary.workers = reports
    for report_ in reports:
        if report_.exit_code != 0:
            problems.append(f"worker {report_.name} exited with {report_.exit_code} (log: {report_.log})")
    summary.problems = problems + summary.problems + _check(summary)
    summary.wall_s = round(time.monotonic() - started, 3)
    return summary


def _enqueue(conn: psycopg.Connection[Any], total: int, run: str, reporter: Reporter) -> tuple[dict[str, Any], Plan]:
    row = _one(conn, "SELECT clock_timestamp() AS now")
    since: datetime = row["now"]
    plan = make_plan(total, run, since)
    ids: list[int] = []
    batch = 1000
    with conn.transaction():  # the whole run or nothing: an interrupted enqueue leaves no partial run
        for start in range(0, len(plan.specs), batch):
            ids += app.enqueue_many(plan.specs[start : start + batch], conn=conn)
    if len(set(ids)) != total:
        raise DemoFailed(f"enqueued {len(set(ids))} distinct jobs, expected {total}")
    reporter.step(
        f"enqueued {total} jobs (run {run}): " + ", ".join(f"{count} {task}" for task, count in plan.per_task.items())
    )
    return {"lo": min(ids), "hi": max(ids), "tag": plan.tag, "since": since}, plan


def _follow(
    conn: psycopg.Connection[Any],
    params: dict[str, Any],
    plan: Plan,
    workers: Sequence[WorkerProcess],
    timeout: float,
    reporter: Reporter,
) -> list[str]:
    """Poll the database until every job of the run is finished; report progress on the way."""
    total = len(plan.specs)
    begun = time.monotonic()
    problems: list[str] = []
    try:
        while True:
            row = _one(conn, _PROGRESS, params)
            snap = Snapshot(total=total, elapsed=time.monotonic() - begun, **{k: int(v) for k, v in row.items()})
            reporter.progress(snap)
            if snap.finished >= total:
                return problems
            alive = [w for w in workers if w.proc.poll() is None]
            if len(alive) < len(workers) and not problems:
                gone = [w for w in workers if w not in alive]
                problems += [f"worker {w.name} died during the run (exit {w.proc.returncode})" for w in gone]
            if not alive:
                problems.append(f"every worker is gone with {total - snap.finished} of {total} jobs unfinished")
                return problems
            if snap.elapsed > timeout:
                problems.append(
                    f"timed out after {timeout:.0f}s with {total - snap.finished} of {total} jobs unfinished"
                )
                return problems
            time.sleep(0.2)
    finally:
        reporter.progress_done()


def _summarize(conn: psycopg.Connection[Any], params: dict[str, Any], plan: Plan) -> Summary:
    summary = Summary(
        run=plan.run,
        total=len(plan.specs),
        expected_dead=plan.expected_dead,
        expected_retried=plan.expected_retried,
    )
    per_task: dict[str, dict[str, int]] = {
        task: {"jobs": count, "completed": 0, "dead": 0, "cancelled": 0, "retried": 0, "attempts": 0}
        for task, count in plan.per_task.items()
    }
    for row in _all(conn, _PER_TASK, params):
        entry = per_task.setdefault(
            row["task"], {"jobs": 0, "completed": 0, "dead": 0, "cancelled": 0, "retried": 0, "attempts": 0}
        )
        entry[row["state"]] = entry.get(row["state"], 0) + int(row["jobs"])
        entry["retried"] += int(row["retried"])
        entry["attempts"] += int(row["attempts"])
        if row["state"] == "completed":
            summary.recovered += int(row["retried"])
    summary.per_task = per_task
    summary.completed = sum(e["completed"] for e in per_task.values())
    summary.dead = sum(e["dead"] for e in per_task.values())
    summary.cancelled = sum(e["cancelled"] for e in per_task.values())
    summary.retried = sum(e["retried"] for e in per_task.values())
    summary.attempts = sum(e["attempts"] for e in per_task.values())

    timing = _one(conn, _TIMING, params)
    finished_rows = summary.completed + summary.dead + summary.cancelled
    summary.unfinished = summary.total - int(timing["distinct_jobs"])
    if finished_rows != int(timing["distinct_jobs"]):
        summary.problems.append(
            f"{finished_rows} history rows for {timing['distinct_jobs']} jobs: a job finished twice"
        )
    summary.lag_p50_s = _round(timing["lag_p50"])
    summary.lag_p99_s = _round(timing["lag_p99"])
    summary.run_s = _round(timing["run_s"]) or 0.0
    summary.throughput_per_s = round(finished_rows / summary.run_s, 1) if summary.run_s else 0.0
    summary.peak_per_s = int(_one(conn, _PEAK, params)["peak"])
    summary.dead_job_ids = [int(r["id"]) for r in _all(conn, _DEAD, params)]
    return summary


def _check(summary: Summary) -> list[str]:
    """The numbers must add up: every job finished once, and only the always-failing ones are dead."""
    problems: list[str] = []
    if summary.completed + summary.dead != summary.total:
        problems.append(
            f"completed ({summary.completed}) + dead ({summary.dead}) != total ({summary.total}); "
            f"{summary.unfinished} unfinished, {summary.cancelled} cancelled"
        )
    doomed = summary.per_task.get(always_fails.name, {})
    if summary.dead != summary.expected_dead or doomed.get("dead", 0) != summary.expected_dead:
        problems.append(
            f"{summary.dead} dead jobs, expected exactly the {summary.expected_dead} of {always_fails.name}"
        )
    if summary.per_task.get(flaky.name, {}).get("completed", 0) != summary.per_task.get(flaky.name, {}).get("jobs"):
        problems.append(f"not every {flaky.name} job completed after its retries")
    return problems


def _all(conn: psycopg.Connection[Any], query: str, params: Any = None) -> list[dict[str, Any]]:
    # Rows as dicts on a cursor of their own: the connection keeps tuple rows for App.enqueue_many().
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params).fetchall()


def _one(conn: psycopg.Connection[Any], query: str, params: Any = None) -> dict[str, Any]:
    rows = _all(conn, query, params)
    if len(rows) != 1:
        raise DemoFailed(f"expected one row, got {len(rows)}")
    return rows[0]


def _round(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)
