"""`pgsched queues`: the queues with their settings, paused, resumed and configured."""

from __future__ import annotations

import click

from pgsched.api.dispatch import CLEARABLE
from pgsched.cli.common import (
    emit_json,
    emit_table,
    fail,
    handle_errors,
    parse_duration,
    state,
)
from pgsched.cli.stats import NOW_HEADINGS, table_cells
from pgsched.core.limits import QUEUE_CONCURRENCY_MAX
from pgsched.db import queries

PAUSE = "SELECT pgsched.pause_queue(%s) AS paused"
RESUME = "SELECT pgsched.resume_queue(%s) AS was_paused"


@click.group()
def queues() -> None:
    """List queues; pause and resume them (stored in the database, every worker obeys)."""


@queues.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
@handle_errors
def list_queues(ctx: click.Context, as_json: bool) -> None:
    """List queues that hold jobs, finished some in the last 5 minutes, or were paused."""
    from pgsched.api.dispatch import describe

    with state(ctx).connect() as conn:
        rows = conn.execute(queries.QUEUE_STATS).fetchall()
        policies = {p["queue"]: p for p in conn.execute(queries.QUEUE_POLICIES).fetchall()}
    for name in policies.keys() - {r["queue"] for r in rows}:
        rows.append({"queue": name})  # configured, nothing queued yet
    rows.sort(key=lambda r: str(r["queue"]))
    for r in rows:
        p = policies.get(r["queue"])
        r["policy"] = {k: v for k, v in p.items() if k != "queue"} if p else None
    if as_json:
        emit_json(rows)
    elif rows:
        cells = [{**table_cells(r, NOW_HEADINGS), "dispatch policy": describe(r["policy"] or {})} for r in rows]
        emit_table(cells, [*NOW_HEADINGS.values(), "dispatch policy"])
    else:
        click.echo("no queues yet")


@queues.command("pause")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the queue's state as JSON.")
@click.option("--force", is_flag=True, help="Pause NAME even if pgsched knows no such queue (yet).")
@click.pass_context
@handle_errors
def pause_queue(ctx: click.Context, name: str, as_json: bool, force: bool) -> None:
    """Stop workers claiming jobs of queue NAME (enqueues still work) until it is resumed.

    Takes effect at each worker's next claim; running jobs finish normally.
    A name no job, task, schedule, worker or queue setting uses is refused
    (a typo would pause nothing) unless --force is given.
    """
    with state(ctx).connect() as conn:
        row = conn.execute(queries.IS_KNOWN_QUEUE, {"q": name}).fetchone()
        if not force and not (row and row["known"]):
            fail(
                f"no queue named {name!r}: no job, task, schedule, live worker or queue setting uses it "
                "(`pgsched queues list` shows them; --force pauses it anyway)"
            )
        conn.execute(PAUSE, [name])
    if as_json:
        emit_json({"queue": name, "paused": True})
    else:
        click.echo(f"queue {name} paused: workers stop claiming from it; enqueues still work")


@queues.command("configure")
@click.argument("name")
@click.option(
    "--concurrency",
    type=click.IntRange(1, QUEUE_CONCURRENCY_MAX),
    help="At most N jobs leased at once, across workers.",
)
@click.option(
    "--key-concurrency",
    type=click.IntRange(1, QUEUE_CONCURRENCY_MAX),
    help="At most N running per job concurrency_key.",
)
@click.option("--rate", metavar="N/PERIOD", help="At most N starts per PERIOD (100/1s, 10/min, 5000/1h).")
@click.option("--key-rate", metavar="N/PERIOD", help="At most N starts per PERIOD per concurrency_key.")
@click.option("--aging", metavar="DURATION", help="A waiting job gains one priority step per DURATION (30s, 5m).")
@click.option(
    "--tenant-fairness/--no-tenant-fairness",
    default=None,
    help="Claims share the queue between tenants with due jobs, in proportion to their weights.",
)
@click.option(
    "--tenant-weight",
    "tenant_weights",
    multiple=True,
    metavar="TENANT=WEIGHT",
    help="A tenant's share under fairness (repeatable; WEIGHT from 0.001 to 1000, others weigh 1); "
    "replaces the weights set before and turns fairness on.",
)
@click.option("--labels", metavar="A,B", help="Default labels of the queue's jobs (a worker pool).")
@click.option(
    "--clear",
    "clear",
    multiple=True,
    type=click.Choice(CLEARABLE),
    help="Remove a setting (repeatable); 'all' removes every one and turns fairness off.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the resulting settings as JSON.")
@click.pass_context
@handle_errors
def configure_queue(
    ctx: click.Context,
    name: str,
    concurrency: int | None,
    key_concurrency: int | None,
    rate: str | None,
    key_rate: str | None,
    aging: str | None,
    tenant_fairness: bool | None,
    tenant_weights: tuple[str, ...],
    labels: str | None,
    clear: tuple[str, ...],
    as_json: bool,
) -> None:
    """Set the dispatch policy of queue NAME (docs/dispatch.md); options not given stay as they are.

    \b
      pgsched queues configure emails --concurrency 20 --rate 100/1s
      pgsched queues configure reports --aging 5m --tenant-fairness
      pgsched queues configure reports --tenant-weight acme=3 --tenant-weight globex=2
      pgsched queues configure api --key-concurrency 2 --key-rate 10/1m
      pgsched queues configure emails --clear rate
    Every worker obeys at its next claim. Needs pgsched_admin.
    """
    from pgsched.api.dispatch import configure_queue as configure
    from pgsched.api.dispatch import describe, parse_rate, parse_tenant_weights

    period = None
    rate_n = key_rate_n = None
    try:
        if rate is not None:
            rate_n, period = parse_rate(rate, parse_duration)
        if key_rate is not None:
            key_rate_n, key_period = parse_rate(key_rate, parse_duration)
            if period is not None and key_period != period:
                raise click.BadParameter("--rate and --key-rate share one period", param_hint="--key-rate")
            period = key_period
        aging_td = parse_duration(aging) if aging is not None else None
        weights = parse_tenant_weights(tenant_weights) if tenant_weights else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    label_list = [x.strip() for x in labels.split(",")] if labels is not None else None
    with state(ctx).connect() as conn:
        settings = configure(
            conn,
            name,
            concurrency=concurrency,
            key_concurrency=key_concurrency,
            rate=rate_n,
            key_rate=key_rate_n,
            rate_period=period,
            aging=aging_td,
            tenant_fairness=tenant_fairness,
            labels=label_list,
            clear=clear,
            tenant_weights=weights,
        )
    if as_json:
        emit_json(settings)
        return
    click.echo(f"queue {name}: {describe(settings)}")
    if settings.get("restamped"):
        click.echo(f"{settings['restamped']} waiting jobs took their new place in the claim order")


@queues.command("resume")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the queue's state as JSON.")
@click.pass_context
@handle_errors
def resume_queue(ctx: click.Context, name: str, as_json: bool) -> None:
    """Let workers claim jobs of queue NAME again (and wake them)."""
    with state(ctx).connect() as conn:
        row = conn.execute(RESUME, [name]).fetchone()
    was_paused = bool(row and row["was_paused"])
    if as_json:
        emit_json({"queue": name, "paused": False, "was_paused": was_paused})
    elif was_paused:
        click.echo(f"queue {name} resumed")
    else:
        click.echo(f"queue {name} was not paused")


def register(group: click.Group) -> None:
    group.add_command(queues)
