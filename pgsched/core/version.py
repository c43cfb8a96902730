"""The package's version (pyproject.toml's): ``pgsched.__version__``, a worker's registration, traces."""

from __future__ import annotations

from typing import Final

VERSION: Final = "0.1.0"
