"""`pgsched worker`: run tasks from queues."""

from __future__ import annotations

import sys

import click

from pgsched.cli.common import handle_errors, state


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@click.command()
@click.option(
    "--app",
    "app_ref",
    required=True,
    envvar="PGSCHED_APP",
    help="Where your tasks are registered: MODULE:ATTRIBUTE of a pgsched.App.",
)
@click.option("--queues", "-q", default="default", show_default=True, help="Comma-separated queues to serve.")
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, 10000),
    default=10,
    show_default=True,
    help="Jobs run at once (threads for sync handlers; async handlers share the same slots).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0, 100000),
    default=None,
    help="Jobs leased ahead of free slots [default: = concurrency].",
)
@click.option(
    "--lease",
    type=click.FloatRange(1, None),
    default=30.0,
    show_default=True,
    help="Lease length in seconds; heartbeats renew it every lease/3.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0.01, None),
    default=1.0,
    show_default=True,
    help="Seconds between polls when no NOTIFY arrives.",
)
@click.option(
    "--shutdown-timeout",
    type=click.FloatRange(0, None),
    default=30.0,
    show_default=True,
    help="On SIGTERM/SIGINT: seconds to let running jobs finish before handing them back.",
)
@click.option("--labels", default="", help="Comma-separated labels this worker offers (jobs may require labels).")
@click.option("--name", default=None, help="Worker name [default: host:pid:random].")
@click.option("--burst", is_flag=True, help="Exit 0 once no due work is left.")
@click.option(
    "--no-listen",
    is_flag=True,
    help="Do not LISTEN (e.g. behind PgBouncer transaction pooling): poll for work, and every 0.5 s for cancels.",
)
@click.option("--no-prepare", is_flag=True, help="No server-side prepared statements (PgBouncer < 1.21).")
@click.option(
    "--no-housekeeping",
    is_flag=True,
    help="Leave promoting due jobs, expiring dead leases and vacuuming pgsched.jobs to scanners.",
)
@click.option(
    "--vacuum-interval",
    type=click.FloatRange(0, None),
    default=5.0,
    show_default=True,
    help="Every this many seconds, VACUUM the partitions of pgsched.jobs that have piled up dead rows, and "
    "ANALYZE those whose size changed a lot (needs the tables' owner, or MAINTAIN on PostgreSQL 17+; "
    "0: leave it to autovacuum).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="PORT",
    help="Serve this worker's Prometheus metrics at http://0.0.0.0:PORT/metrics (queue-wide gauges: dashboard).",
)
@click.pass_context
@handle_errors
def worker(
    ctx: click.Context,
    app_ref: str,
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
    metrics_port: int | None,
) -> None:
    """Run a worker: claim due jobs of QUEUES and run their handlers.

    \b
    Signals: SIGTERM or SIGINT stops claiming, lets running jobs finish for
    --shutdown-timeout seconds, then asks the rest to stop and hands them
    back to the queue. A second signal hands everything back at once.
    """
    from pgsched.loader import load_app
    from pgsched.worker import Worker, WorkerOptions

    app = load_app(app_ref)
    app.configure(state(ctx).resolve())
    options = WorkerOptions(
        queues=_split(queues),
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
        metrics_port=metrics_port,
    )
    sys.exit(Worker(app, options).run())


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
    from pgsched.scanner import Scanner, ScannerOptions

    dsn = state(ctx).resolve()
    if app_ref:
        from pgsched.loader import load_app

        app = load_app(app_ref)
        app.configure(dsn)
        app.sync_schedules()
        app.close()
    options = ScannerOptions(
        name=name, lease=lease, listen=not no_listen, prepare=not no_prepare, vacuum_interval=vacuum_interval
    )
    sys.exit(Scanner(dsn, options).run())


@click.command()
@click.option(
    "--app",
    "app_ref",
    required=True,
    envvar="PGSCHED_APP",
    help="Where your tasks are registered: MODULE:ATTRIBUTE of a pgsched.App.",
)
@click.option("--queues", "-q", default="default", show_default=True, help="Comma-separated queues to serve.")
@click.option("--concurrency", "-c", type=click.IntRange(1, 10000), default=10, show_default=True)
@click.option("--shutdown-timeout", type=click.FloatRange(0, None), default=30.0, show_default=True)
@click.pass_context
@handle_errors
def run(ctx: click.Context, app_ref: str, queues: str, concurrency: int, shutdown_timeout: float) -> None:
    """Run a worker and a scanner in one process (for small deployments)."""
    import threading

    from pgsched.loader import load_app
    from pgsched.scanner import Scanner, ScannerOptions
    from pgsched.worker import Worker, WorkerOptions

    dsn = state(ctx).resolve()
    app = load_app(app_ref)
    app.configure(dsn)
    # The worker vacuums; one vacuum thread per process is enough.
    scan = Scanner(dsn, ScannerOptions(install_signal_handlers=False, vacuum_interval=0))
    thread = threading.Thread(target=scan.run, name="pgsched-scanner", daemon=True)
    thread.start()
    try:
        code = Worker(
            app,
            WorkerOptions(queues=_split(queues), concurrency=concurrency, shutdown_timeout=shutdown_timeout),
        ).run()
    finally:
        scan.stop()
        thread.join(timeout=10)
    sys.exit(code)


def register(group: click.Group) -> None:
    group.add_command(worker)
    group.add_command(scanner)
    group.add_command(run)
