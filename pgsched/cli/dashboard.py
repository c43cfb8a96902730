"""`pgsched dashboard`: the web dashboard (pages, JSON API, actions and Prometheus /metrics)."""

from __future__ import annotations

import ipaddress
import logging

import click

from pgsched.cli.common import check_read_dsn, handle_errors, state

log = logging.getLogger(__name__)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port to listen on.")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing: actions answer 403.")
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name browsers use to reach the dashboard (repeatable; also $PGSCHED_DASHBOARD_ALLOWED_HOSTS, "
    "comma-separated). Always allowed: the --host address, localhost, 127.0.0.1, [::1]. '*' allows any.",
)
@click.option(
    "--read-dsn",
    default=None,
    metavar="DSN",
    help="Read pages, JSON and /metrics from this server (a streaming replica); actions still go to --dsn.",
)
@click.pass_context
@handle_errors
def dashboard(
    ctx: click.Context, host: str, port: int, read_only: bool, allowed_hosts: tuple[str, ...], read_dsn: str | None
) -> None:
    """Serve the web dashboard: queues, jobs, dead letters, schedules, and /metrics.

    \b
    Pages:    /  /queues/QUEUE  /jobs (search)  /jobs/ID  /dead  /schedules
    JSON:     the same under /api/ (e.g. /api/overview)
    Metrics:  /metrics (Prometheus; queue gauges read from the database at each scrape)
    Actions:  cancel, retry, pause/resume queues and schedules, bulk cancel/retry of
              a search (/jobs/bulk/VERB; POST; off with --read-only)

    Basic auth is required when PGSCHED_DASHBOARD_USER and
    PGSCHED_DASHBOARD_PASSWORD are set. A request whose Host header is not an
    allowed host gets 400 (DNS rebinding cannot reach the dashboard).
    """
    from pgsched.extras import require

    require("dashboard")
    import uvicorn

    from pgsched.dashboard import create_app
    from pgsched.dashboard.middleware import allowed_hosts_from_env, credentials_from_env

    if read_dsn:
        check_read_dsn(state(ctx).resolve(), read_dsn)
    credentials = credentials_from_env()
    hosts = [*([] if _is_unspecified(host) else [host]), *allowed_hosts]
    app = create_app(
        state(ctx).resolve(), read_only=read_only, auth=credentials, allowed_hosts=hosts, read_dsn=read_dsn
    )
    if _is_unspecified(host) and not allowed_hosts and not allowed_hosts_from_env():
        log.warning(
            "the dashboard listens on every address but answers only to localhost, 127.0.0.1 and [::1]: "
            "name the hosts browsers use with --allowed-host or PGSCHED_DASHBOARD_ALLOWED_HOSTS"
        )
    if credentials is None and not _is_loopback(host):
        log.warning(
            "the dashboard listens on %s without authentication: set PGSCHED_DASHBOARD_USER and "
            "PGSCHED_DASHBOARD_PASSWORD, or use --read-only",
            host,
        )
    shown = f"[{host}]" if ":" in host else host
    log.info("dashboard on http://%s:%d/%s", shown, port, " (read-only)" if read_only else "")
    uvicorn.run(app, host=host, port=port, log_level="warning", server_header=False, ws="none", lifespan="on")


def register(group: click.Group) -> None:
    group.add_command(dashboard)
