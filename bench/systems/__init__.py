"""The systems the benchmark compares, one module each, behind one small interface.

A system module never imports its library at module level, so the orchestrator
can list systems, variants and configurations without importing any of them.
"""

from __future__ import annotations

import importlib

from bench.systems.base import System

#: Registry: system name -> "module:attribute" of its System instance, in table order.
SYSTEMS: dict[str, str] = {
    "raw": "bench.systems.raw:SYSTEM",
    "pgsched": "bench.systems.pgsched:SYSTEM",
    "procrastinate": "bench.systems.procrastinate:SYSTEM",
    "pgqueuer": "bench.systems.pgqueuer:ASYNCPG",
    "pgqueuer-psycopg": "bench.systems.pgqueuer:PSYCOPG",
    "chancy": "bench.systems.chancy:SYSTEM",
    "oban": "bench.systems.oban:SYSTEM",
    "dbos": "bench.systems.dbos:SYSTEM",
}


def get_system(name: str) -> System:
    """Return the System registered under ``name``."""
    module_name, _, attribute = SYSTEMS[name].partition(":")
    system = getattr(importlib.import_module(module_name), attribute)
    assert isinstance(system, System)
    return system


__all__ = ["SYSTEMS", "System", "get_system"]
