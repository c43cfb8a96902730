"""Where a database error becomes a pgsched error for the layers above: ``with translated():``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from pgsched.errors import from_psycopg


@contextmanager
def translated() -> Iterator[None]:
    """Run the block; a psycopg error leaving it is raised as its pgsched error (errors.from_psycopg), from it.

    Code above the database layer uses this instead of catching psycopg's errors itself.
    """
    try:
        yield
    except psycopg.Error as exc:
        raise from_psycopg(exc) from exc
