"""`pgsched demo`: run a real workload end to end through worker processes, then show where to look; with
``--story``, print the story scene by scene (or as JSON) and say where kept databases are."""

from __future__ import annotations

import os
import sys
import time
import warnings
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from pgsched.cli.common import EXIT_FAILURE, CliState, emit_json, handle_errors, state
from pgsched.observe.redact import redact

if TYPE_CHECKING:
    from pgsched.demo import Snapshot, Summary

EXIT_INTERRUPTED = 130  # as a shell reports a command stopped by Ctrl-C


def play_story(cli: CliState, scene: int | None, *, keep: bool, as_json: bool) -> None:
    """Run the story on the server of the configured DSN (else the embedded one) and print it."""
    from pgsched.demo.story import SceneResult, run_story
    from pgsched.demo.story.runner import HEADER, footer, render_scene

    with warnings.catch_warnings():
        # platformdirs, inside the embedded server's package, warns when XDG_RUNTIME_DIR is unset.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        dsn = cli.resolve(migrate=False)

    def show(result: SceneResult) -> None:
        click.echo("\n" + render_scene(result), nl=False)

    if not as_json:
        click.echo(HEADER, nl=False)
    try:
        story = run_story(dsn, [scene] if scene else None, keep=keep, on_scene=None if as_json else show)
    except KeyboardInterrupt:
        click.echo("interrupted: the scratch databases were dropped", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if as_json:
        emit_json(story.as_dict())
    else:
        click.echo("\n" + footer(story.scenes), nl=False)
    if keep:
        click.echo("kept the scratch databases (drop them with DROP DATABASE ... WITH (FORCE)):", err=True)
        for result in story.scenes:
            click.echo(f"  scene {result.number}: {result.database}  {result.dsn}", err=True)
    if not story.ok:
        sys.exit(EXIT_FAILURE)


class RichReporter:
    """Steps as dim lines and a progress bar of finished jobs (completed + dead) out of the total."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def step(self, message: str) -> None:
        self.console.print(f"[dim]·[/dim] {message}", highlight=False)

    def progress(self, snapshot: Snapshot) -> None:
        if self._progress is None:
            self._progress = Progress(
                TextColumn("[bold]jobs"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:>6.0f} jobs/s"),
                TextColumn("[dim]{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=self.console,
            )
            self._progress.start()
            self._task = self._progress.add_task("jobs", total=snapshot.total, rate=0.0, detail="")
        assert self._task is not None
        detail = (
            f"running {snapshot.running} · due {snapshot.available} · scheduled {snapshot.scheduled}"
            f" · dead {snapshot.dead}"
        )
        self._progress.update(self._task, completed=snapshot.finished, rate=snapshot.rate, detail=detail)

    def progress_done(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _fmt_s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _print_summary(console: Console, summary: Summary) -> None:
    table = Table(title=f"demo run {summary.run}", show_header=False, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("note", style="dim")
    table.add_row("jobs", f"{summary.total}", "")
    table.add_row("completed", f"{summary.completed}", "")
    table.add_row(
        "retried",
        f"{summary.retried}",
        f"needed more than one attempt: {summary.recovered} completed on a retry, "
        f"{summary.retried - summary.recovered} gave up ({summary.attempts} attempts in all)",
    )
    table.add_row("dead", f"{summary.dead}", f"expected {summary.expected_dead} (demo.always_fails, 3 attempts)")
    table.add_row("throughput", f"{summary.throughput_per_s:.0f} jobs/s", f"peak {summary.peak_per_s} in one second")
    table.add_row(
        "start lag p50",
        _fmt_s(summary.lag_p50_s),
        f"started_at - run_at, from pgsched.job_history; includes the initial backlog (all {summary.total} jobs "
        "are due at once, so most wait for a free slot)",
    )
    table.add_row("start lag p99", _fmt_s(summary.lag_p99_s), "the same, including the initial backlog")
    table.add_row("run time", _fmt_s(summary.run_s), "first enqueue to last finish (database clock)")
    table.add_row("wall time", _fmt_s(summary.wall_s), "the whole command, server start included")
    console.print(table)

    tasks = Table(header_style="bold")
    for col in ("task", "jobs", "completed", "dead", "retried", "attempts"):
        tasks.add_column(col, justify="left" if col == "task" else "right")
    for name, entry in summary.per_task.items():
        tasks.add_row(name, *(str(entry.get(k, 0)) for k in ("jobs", "completed", "dead", "retried", "attempts")))
    console.print(tasks)

    exits = ", ".join(f"{w.name}: exit {w.exit_code}" for w in summary.workers)
    console.print(f"workers stopped with SIGTERM: {exits}", highlight=False)
    if summary.ok:
        console.print(
            "[green]✓[/green] every job is accounted for: completed + dead == jobs, and only the "
            "always-failing job is dead"
        )
    else:
        console.print("[red]✗ the numbers do not add up:[/red]")
        for problem in summary.problems:
            console.print(f"  - {problem}", highlight=False)


def _print_look_inside(console: Console, dsn: str, pgsched_cmd: str, run: str, embedded: bool) -> None:
    console.print()
    console.print("[bold]Look inside[/bold]")
    where = " (embedded server: `pgsched db dsn` prints it)" if embedded else ""
    console.print(f"  DSN{where}:", highlight=False)
    console.print(f"    {dsn}", highlight=False, soft_wrap=True)
    psql = f"{pgsched_cmd} db psql" if embedded else f'psql "{dsn}"'
    console.print(f"  open psql:  {psql}", highlight=False, soft_wrap=True)
    queries = (
        "SELECT * FROM pgsched.queue_stats;",
        "SELECT * FROM pgsched.dead_letters;",
        "SELECT kind, count(*) FROM pgsched.job_timeline GROUP BY 1;",
        "SELECT id, task, state, attempt, started_at - run_at AS lag FROM pgsched.job_history\n"
        f"      WHERE idempotency_key LIKE 'demo:{run}:%' ORDER BY attempt DESC, id LIMIT 10;",
    )
    console.print("  then, for example:")
    for query in queries:
        console.print(f"    {query}", highlight=False, soft_wrap=True)
    console.print("  or from the command line:", highlight=False)
    console.print(f"    {pgsched_cmd} stats", highlight=False, soft_wrap=True)
    console.print(f"    {pgsched_cmd} dlq", highlight=False, soft_wrap=True)


@click.command()
@click.option(
    "--jobs",
    "-n",
    type=click.IntRange(10, 200_000),
    default=3000,
    show_default=True,
    help="How many jobs to enqueue.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=2,
    show_default=True,
    help="How many `pgsched worker` processes to start.",
)
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, 256),
    default=8,
    show_default=True,
    help="Handler slots per worker.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0.05, 10),
    default=0.5,
    show_default=True,
    help="The workers' poll interval, which also paces promotion of due delayed jobs and retries.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(5, None),
    default=120.0,
    show_default=True,
    help="Give up when the jobs are not all finished after this many seconds.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (progress goes to stderr).")
@click.option(
    "--story",
    is_flag=True,
    help="Instead, walk through the scheduler's guarantees scene by scene on a pretend clock, in scratch "
    "databases of its own (the same text on every run).",
)
@click.option("--scene", type=click.IntRange(1, 8), default=None, help="With --story: play only this scene.")
@click.option(
    "--keep", is_flag=True, help="With --story: keep the scenes' scratch databases for inspection (named on stderr)."
)
@click.pass_context
@handle_errors
def demo(
    ctx: click.Context,
    jobs: int,
    workers: int,
    concurrency: int,
    poll_interval: float,
    timeout: float,
    as_json: bool,
    story: bool,
    scene: int | None,
    keep: bool,
) -> None:
    """Run a real workload end to end and sum it up.

    \b
    With no DSN configured this starts (or reuses) the embedded PostgreSQL and
    migrates it; with --dsn or PGSCHED_DSN the schema is migrated there too.
    Then it starts worker processes (`pgsched worker --app pgsched.demo:app`),
    enqueues quick, I/O-bound, async, delayed, flaky and always-failing jobs,
    follows them until each one is completed or dead, stops the workers with
    SIGTERM, and prints completed/retried/dead counts, throughput and start
    lag. Each run tags its jobs (idempotency keys demo:<run>:<n>), so runs can
    be repeated against the same database. Exits 0 when every job is
    accounted for and only the always-failing job is dead.

    \b
    With --story it instead plays numbered scenes on a pretend clock (passed
    to the SQL functions as p_now) in scratch databases it creates on the
    same server and drops afterwards: a job due later, scanners taking over a
    dead one's shards, a stalled worker fenced off, idempotency keys, DST
    changes and misfire policies, a cancel racing a claim. Its role must be
    allowed to CREATE DATABASE. See docs/guarantees.md.
    """
    if story:
        play_story(state(ctx), scene, keep=keep, as_json=as_json)
        return
    if scene is not None or keep:
        raise click.UsageError("--scene and --keep go with --story")
    from pgsched.db.schema import ensure_installed
    from pgsched.demo import DemoOptions, run_demo

    started = time.monotonic()
    cli = state(ctx)
    console = Console(stderr=as_json, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 110  # logs and pipes: room for the progress line and the tables
    embedded = cli.dsn is None
    if embedded:
        console.print("[dim]·[/dim] starting the embedded PostgreSQL (or reusing it) and migrating it")
    with warnings.catch_warnings():
        # platformdirs, inside the embedded server's package, warns when XDG_RUNTIME_DIR is unset.
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        dsn = cli.resolve()
    ensure_installed(dsn)

    summary = run_demo(
        dsn,
        DemoOptions(jobs=jobs, workers=workers, concurrency=concurrency, poll_interval=poll_interval, timeout=timeout),
        RichReporter(console),
        started=started,
    )
    if as_json:
        emit_json(summary.as_dict())
    else:
        _print_summary(console, summary)
        parent = ctx.parent
        from_flag = parent is not None and parent.get_parameter_source("dsn") is ParameterSource.COMMANDLINE
        shown = dsn if embedded else redact(dsn)  # the embedded server's DSN has no password
        pgsched_cmd = f"pgsched --dsn '{shown}'" if from_flag else "pgsched"
        _print_look_inside(console, shown, pgsched_cmd, summary.run, embedded)
    if not summary.ok:
        sys.exit(EXIT_FAILURE)


def register(group: click.Group) -> None:
    group.add_command(demo)
