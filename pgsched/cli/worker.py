"""`pgsched worker`: run tasks from queues."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pgsched.cli.common import handle_errors, state

RECYCLE_EXIT_CODE = 75  # pgsched.runtime.worker.RECYCLE_EXIT_CODE (not imported here: the CLI loads the worker lazily)

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

    from pgsched.api.app import App
    from pgsched.runtime.options import WorkerOptions

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger(__name__)


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


class MetricsAddress(click.ParamType):  # type: ignore[type-arg,unused-ignore]
    """[HOST:]PORT for --metrics-port: a bare port listens on 127.0.0.1 only."""

    name = "[HOST:]PORT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, int]:
        if isinstance(value, tuple):
            return (str(value[0]), int(value[1]))
        text = str(value).strip()
        host, sep, port = text.rpartition(":")
        if not sep:
            host = DEFAULT_METRICS_HOST
        host = host.strip("[]")
        if not port.isdigit() or not 0 <= int(port) <= 65535 or (sep and not host):
            self.fail(f"{text!r} is not PORT or HOST:PORT (e.g. 9100, 0.0.0.0:9100, [::]:9100)", param, ctx)
        return host, int(port)


DEFAULT_METRICS_HOST = "127.0.0.1"
METRICS_HELP = (
    "Serve Prometheus metrics at http://HOST:PORT/metrics; a bare PORT listens on 127.0.0.1 only, "
    "0.0.0.0:PORT (or [::]:PORT) on every interface."
)


def worker_options(fn: F) -> F:
    """The options `pgsched worker` and `pgsched run` share."""
    options = [
        click.option(
            "--app",
            "app_ref",
            default=None,
            envvar="PGSCHED_APP",
            help="Where your tasks are registered: MODULE:ATTRIBUTE of a pgsched.App (optional with --commands).",
        ),
        click.option(
            "--commands",
            is_flag=True,
            help="Also run command jobs (pgsched.enqueue_command): adds the queue 'commands' when --queues is not "
            "given (alone: serves only it). Programs run without a shell, in their own process group, with a "
            "minimal environment (docs/commands.md).",
        ),
        click.option(
            "--command-pass-env",
            "command_pass_env",
            multiple=True,
            metavar="NAME",
            help="Hand this variable of the worker's own environment to every command (repeat for several); "
            "by default commands see none of it.",
        ),
        click.option(
            "--command-kill-grace",
            type=click.FloatRange(0, None),
            default=5.0,
            show_default=True,
            help="Seconds between SIGTERM and SIGKILL when a command times out, is cancelled or the worker stops "
            "(cut short to end 2 s before the command's timeout + config.command_timeout_margin).",
        ),
        click.option(
            "--queues",
            "-q",
            default="default",
            show_default=True,
            help="Comma-separated queues to serve; '*' serves every queue, also those that appear later.",
        ),
        click.option(
            "--concurrency",
            "-c",
            type=click.IntRange(1, 10000),
            default=10,
            show_default=True,
            help="Jobs run at once (threads for sync handlers; async handlers share the same slots).",
        ),
        click.option(
            "--prefetch",
            type=click.IntRange(0, 100000),
            default=None,
            help="Jobs leased ahead of free slots [default: = concurrency].",
        ),
        click.option(
            "--lease",
            type=click.FloatRange(1, None),
            default=30.0,
            show_default=True,
            help="Lease length in seconds; heartbeats renew it every lease/3.",
        ),
        click.option(
            "--poll-interval",
            type=click.FloatRange(0.01, None),
            default=1.0,
            show_default=True,
            help="Seconds between polls when no NOTIFY arrives.",
        ),
        click.option(
            "--shutdown-timeout",
            type=click.FloatRange(0, None),
            default=30.0,
            show_default=True,
            help="On SIGTERM/SIGINT: seconds to let running jobs finish before handing them back.",
        ),
        click.option(
            "--labels", default="", help="Comma-separated labels this worker offers (jobs may require labels)."
        ),
        click.option("--name", default=None, help="Worker name [default: host:pid:random]."),
        click.option(
            "--burst",
            is_flag=True,
            help="Exit 0 once no due work is left: nothing due, nothing running here, no completion of its own "
            "still being written; due jobs held back by a queue's limits or rate are waited for (and logged).",
        ),
        click.option(
            "--no-listen",
            is_flag=True,
            help="Do not LISTEN (e.g. behind PgBouncer transaction pooling): poll for work, every 0.5 s for cancels.",
        ),
        click.option("--no-prepare", is_flag=True, help="No server-side prepared statements (PgBouncer < 1.21)."),
        click.option(
            "--no-housekeeping",
            is_flag=True,
            help="Leave promoting due jobs, expiring dead leases and vacuuming pgsched.jobs to scanners.",
        ),
        click.option(
            "--vacuum-interval",
            type=click.FloatRange(0, None),
            default=5.0,
            show_default=True,
            help="Every this many seconds, VACUUM the partitions of pgsched.jobs that have piled up dead rows, "
            "and ANALYZE those whose size changed a lot (needs the tables' owner, or MAINTAIN on PostgreSQL 17+; "
            "0: leave it to autovacuum).",
        ),
        click.option(
            "--metrics-port",
            "metrics",
            type=MetricsAddress(),
            default=None,
            help=METRICS_HELP + " The worker's own counters and histograms (queue-wide gauges: scanner, dashboard).",
        ),
        click.option(
            "--pool",
            type=click.Choice(["thread", "process"]),
            default="thread",
            show_default=True,
            envvar="PGSCHED_POOL",
            help="Where sync handlers run: threads (an overrunning one is abandoned), or child processes "
            "(an overrunning one is killed and replaced). See docs/timeouts.md.",
        ),
        click.option(
            "--max-abandoned-threads",
            "max_abandoned",
            type=click.IntRange(1, None),
            default=None,
            help="Recycle the worker process once this many threads are still stuck in handlers that overran "
            "their timeout, or in event loops a handler blocked [default: concurrency / 2, at least 1].",
        ),
        click.option(
            "--recycle",
            type=click.Choice(["reexec", "exit"]),
            default="reexec",
            show_default=True,
            envvar="PGSCHED_RECYCLE",
            help="How a recycled worker comes back: re-execute itself in place (same PID, same arguments), "
            f"or exit with code {RECYCLE_EXIT_CODE} for a supervisor to restart it.",
        ),
        click.option(
            "--loop-block-timeout",
            type=click.FloatRange(0, None),
            default=10.0,
            show_default=True,
            help="Seconds the async handlers' event loop may stay blocked before the worker abandons it: the job "
            "blocking it fails, the others on it are handed back, a fresh loop runs the next ones (0: off). "
            "Abandoned loops count toward --max-abandoned-threads.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _load_app(ctx: click.Context, app_ref: str | None, commands: bool, dsn: str) -> App:
    """The app whose tasks the worker runs (an empty one for --commands alone)."""
    from pgsched.api.app import App
    from pgsched.api.loader import load_app

    if app_ref is None and not commands:
        raise click.UsageError("give --app MODULE:APP (your tasks), --commands (command jobs), or both", ctx)
    app = App() if app_ref is None else load_app(app_ref)
    app.configure(dsn)
    return app


def _serve_commands(app: App, worker_opts: WorkerOptions, options: dict[str, Any]) -> None:
    if not options.get("commands"):
        return
    from pgsched.runtime.commands import CommandOptions, serve_commands

    serve_commands(
        app,
        worker_opts,
        CommandOptions(pass_env=tuple(options["command_pass_env"]), kill_grace=options["command_kill_grace"]),
    )


def _worker_options(
    *,
    app_ref: str | None = None,
    queues: str,
    concurrency: int,
    prefetch: int | None,
    lease: float,
    poll_interval: float,
    shutdown_timeout: float,
    labels: str,
    name: str | None,
    burst: bool,
    no_listen: bool,
    no_prepare: bool,
    no_housekeeping: bool,
    vacuum_interval: float,
    metrics: tuple[str, int] | None,
    pool: str = "thread",
    max_abandoned: int | None = None,
    loop_block_timeout: float = 10.0,
    commands: bool = False,
    **_: Any,
) -> WorkerOptions:
    from pgsched.runtime.options import WorkerOptions

    served = _split(queues)
    if commands and click.get_current_context().get_parameter_source("queues") is click.core.ParameterSource.DEFAULT:
        from pgsched.runtime.commands import COMMAND_QUEUE

        served = [COMMAND_QUEUE] if app_ref is None else [*served, COMMAND_QUEUE]
    return WorkerOptions(
        queues=served,
        concurrency=concurrency,
        prefetch=prefetch,
        lease=lease,
        poll_interval=poll_interval,
        shutdown_timeout=shutdown_timeout,
        labels=_split(labels),
        name=name,
        burst=burst,
        listen=not no_listen,
        prepare=not no_prepare,
        housekeeping=not no_housekeeping,
        vacuum_interval=vacuum_interval,
        metrics_port=None if metrics is None else metrics[1],
        metrics_host=DEFAULT_METRICS_HOST if metrics is None else metrics[0],
        pool=pool,
        app_ref=app_ref,
        max_abandoned=max_abandoned,
        loop_block_timeout=loop_block_timeout,
    )


def _exit_or_reexec(code: int, recycle: str) -> None:
    """Exit with the worker's code; a recycled worker (code 75) re-executes itself unless --recycle exit."""
    if code == RECYCLE_EXIT_CODE and recycle == "reexec":
        import os

        argv = [sys.executable, "-m", "pgsched", *sys.argv[1:]]
        log.warning("re-executing the worker in place (pid %d): %s", os.getpid(), " ".join(argv[2:]))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, argv)
    sys.exit(code)


@click.command()
@worker_options
@click.pass_context
@handle_errors
def worker(ctx: click.Context, /, app_ref: str | None, recycle: str, **options: Any) -> None:
    """Run a worker: claim due jobs of QUEUES and run their handlers.

    \b
    Signals: SIGTERM or SIGINT stops claiming, lets running jobs finish for
    --shutdown-timeout seconds, then asks the rest to stop and hands them
    back to the queue. A second signal hands everything back at once.
    Exit codes: 0 stopped; 75 recycled (with --recycle exit: restart it).
    """
    from pgsched.runtime.worker import Worker

    app = _load_app(ctx, app_ref, options["commands"], state(ctx).resolve())
    worker_opts = _worker_options(app_ref=app_ref, **options)
    _serve_commands(app, worker_opts, options)
    _exit_or_reexec(Worker(app, worker_opts).run(), recycle)


@click.command()
@click.option(
    "--app",
    "app_ref",
    default=None,
    envvar="PGSCHED_APP",
    help="Optional MODULE:ATTRIBUTE of a pgsched.App whose @app.cron schedules are synced at start.",
)
@click.option(
    "--lease",
    type=click.FloatRange(1, None),
    default=10.0,
    show_default=True,
    help="Shard lease in seconds: a dead scanner's shards are taken over after this.",
)
@click.option("--name", default=None, help="Scanner name [default: scanner:host:pid:random].")
@click.option(
    "--metrics-port",
    "metrics",
    type=MetricsAddress(),
    default=None,
    help=METRICS_HELP + " The queue-wide gauges read from the database at each scrape (depth, oldest due age, "
    "dead letters, expired leases, live workers).",
)
@click.option("--no-listen", is_flag=True, help="Do not LISTEN for new scheduled jobs (poll every second).")
@click.option("--no-prepare", is_flag=True, help="No server-side prepared statements (PgBouncer < 1.21).")
@click.option(
    "--vacuum-interval",
    type=click.FloatRange(0, None),
    default=5.0,
    show_default=True,
    help="Every this many seconds, VACUUM the partitions of pgsched.jobs that have piled up dead rows, and "
    "ANALYZE those whose size changed a lot (needs the tables' owner, or MAINTAIN on PostgreSQL 17+; "
    "0: leave it to autovacuum).",
)
@click.pass_context
@handle_errors
def scanner(
    ctx: click.Context,
    app_ref: str | None,
    lease: float,
    name: str | None,
    metrics: tuple[str, int] | None,
    no_listen: bool,
    no_prepare: bool,
    vacuum_interval: float,
) -> None:
    """Run a scanner: keep time for the shards it owns.

    \b
    It expires dead workers' leases, promotes due delayed jobs (waking
    workers), expands recurring schedules into jobs over a rolling horizon,
    creates/drops history partitions and vacuums the hot partitions. Run any number: they split the
    shards between them by epoch-fenced leases.
    """
    from pgsched.runtime.scanner import Scanner, ScannerOptions

    dsn = state(ctx).resolve()
    if app_ref:
        from pgsched.api.loader import load_app

        app = load_app(app_ref)
        app.configure(dsn)
        app.sync_schedules()
        app.close()
    options = ScannerOptions(
        name=name, lease=lease, listen=not no_listen, prepare=not no_prepare, vacuum_interval=vacuum_interval
    )
    with _queue_metrics(dsn, metrics):
        code = Scanner(dsn, options).run()
    sys.exit(code)


@click.command()
@worker_options
@click.option(
    "--scanner-lease",
    type=click.FloatRange(1, None),
    default=10.0,
    show_default=True,
    help="The scanner's shard lease in seconds (see `pgsched scanner --lease`).",
)
@click.pass_context
@handle_errors
def run(ctx: click.Context, /, app_ref: str | None, scanner_lease: float, recycle: str, **options: Any) -> None:
    """Run a worker and a scanner in one process (for small deployments).

    Takes every option of `pgsched worker`; --metrics-port serves the worker's
    metrics and the queue-wide gauges together.
    """
    import threading

    from pgsched.runtime.scanner import Scanner, ScannerOptions
    from pgsched.runtime.worker import Worker

    dsn = state(ctx).resolve()
    app = _load_app(ctx, app_ref, options["commands"], dsn)
    worker_opts = _worker_options(app_ref=app_ref, **options)
    _serve_commands(app, worker_opts, options)
    metrics = None if worker_opts.metrics_port is None else (worker_opts.metrics_host, worker_opts.metrics_port)
    worker_opts.metrics_port = None  # served below, with the queue gauges
    # The worker vacuums; one vacuum thread per process is enough.
    scan = Scanner(
        dsn,
        ScannerOptions(
            install_signal_handlers=False,
            vacuum_interval=0,
            lease=scanner_lease,
            listen=worker_opts.listen,
            prepare=worker_opts.prepare,
        ),
    )
    work = Worker(app, worker_opts)
    with _queue_metrics(dsn, metrics, work.metrics):
        thread = threading.Thread(target=scan.run, name="pgsched-scanner", daemon=True)
        thread.start()
        try:
            code = work.run()
        finally:
            scan.stop()
            thread.join(timeout=10)
    _exit_or_reexec(code, recycle)


@contextmanager
def _queue_metrics(dsn: str, address: tuple[str, int] | None, *extra: Collector) -> Iterator[None]:
    """Serve the queue-wide gauges (and extra collectors) at address for the duration of the block."""
    if address is None:
        yield
        return
    from psycopg_pool import ConnectionPool

    from pgsched.observe.metrics import MetricsServer, QueueCollector, worker_registry

    pool: ConnectionPool[Any] = ConnectionPool(
        dsn, min_size=0, max_size=1, timeout=10, open=True, kwargs={"autocommit": True}, name="pgsched-metrics"
    )
    registry = worker_registry(*extra)
    registry.register(QueueCollector(pool))
    server = MetricsServer(registry, host=address[0], port=address[1])
    try:
        server.start()
        log.info("Prometheus metrics at %s/metrics", server.url)
        yield
    finally:
        server.stop()
        pool.close()


def register(group: click.Group) -> None:
    group.add_command(worker)
    group.add_command(scanner)
    group.add_command(run)
