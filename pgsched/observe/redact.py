"""Keeping DSN passwords out of output and logs: redact(text), a logging filter, and a safe DSN description.

libpq and psycopg quote parts of a DSN back in some errors (a malformed
percent-encoded token: ``invalid percent-encoded token: "p%zz"``), and a DSN
printed by mistake carries its password. Every line the CLI prints or logs
goes through ``redact``: the passwords of the DSNs the process was given are
replaced wherever they appear (as written and percent-decoded), and so are
the password parts of anything shaped like a DSN.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Final
from urllib.parse import unquote, urlsplit

import psycopg

MASK: Final = "***"

# The password of a URI (scheme://user:PASSWORD@host), of a key/value DSN
# (password=PASSWORD or password='PASS WORD'), of a URI query (?password=...),
# and the token psycopg quotes when percent-decoding fails.
_URI_PASSWORD: Final = re.compile(r"(?i)((?:\b[a-z][a-z0-9+.-]*:)?//[^\s:/@]*:)([^\s@]*)(@)")
_KV_PASSWORD: Final = re.compile(r"""(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)""")
_BAD_TOKEN: Final = re.compile(r'(?i)(invalid percent-encoded token:\s*")([^"]*)(")')

_secrets: set[str] = set()
_lock = threading.Lock()


def dsn_passwords(dsn: str) -> set[str]:
    """The password of dsn in every form it may be echoed back in (raw, decoded); found even in a malformed DSN."""
    found: set[str] = set()
    try:
        value = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
        if value:
            found.add(str(value))
    except psycopg.Error:
        pass
    for match in _URI_PASSWORD.finditer(dsn):
        found.add(match.group(2))
    for match in _KV_PASSWORD.finditer(dsn):
        found.add(match.group(2).strip("'"))
    found |= {unquote(value) for value in found}
    return {value for value in found if value}


def remember(dsn: str | None) -> None:
    """Redact this DSN's password from everything redact() sees from now on in this process."""
    if dsn:
        passwords = dsn_passwords(dsn)
        with _lock:
            _secrets.update(passwords)


def redact(text: str) -> str:
    """text with every remembered password and every DSN-shaped password replaced by MASK."""
    text = _URI_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3) if m.group(2) else m.group(0), text)
    text = _KV_PASSWORD.sub(lambda m: m.group(1) + MASK, text)
    text = _BAD_TOKEN.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)  # longest first: no half-masked overlap
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def describe(dsn: str) -> str:
    """Where dsn points, for a log line: 'database NAME on HOST:PORT as USER', never the password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "database (unreadable DSN)"
    host = str(params.get("host") or params.get("hostaddr") or "")
    if not host:
        try:
            host = urlsplit(dsn).hostname or ""
        except ValueError:
            host = ""
    where = host if host and not host.startswith("/") else f"socket {host}" if host else "the default socket"
    if params.get("port"):
        where += f":{params['port']}"
    name = params.get("dbname") or params.get("user") or "(default)"
    user = f" as {params['user']}" if params.get("user") else ""
    return redact(f"database {name} on {where}{user}")


class RedactingFilter(logging.Filter):
    """A handler filter that redacts each record's message and traceback (the CLI installs it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
