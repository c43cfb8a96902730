"""Run pgsched's benchmark: ``python bench/run.py [--quick] [--rounds N] [--only ...] [--systems ...]``.

Sets everything up by itself: a virtualenv for the peers (bench/.venv), a
private PostgreSQL cluster, each system's schema; then measures the scenarios
round by round and writes bench/results/. ``--help`` lists the options and
bench/README.md explains how to read the tables.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
# Import the harness as ``bench.*`` from the repository root, never as
# top-level modules from bench/ (which is what ``python bench/run.py`` puts first).
if sys.path and Path(sys.path[0] or ".").resolve() == BENCH_DIR:
    sys.path[0] = str(REPO_DIR)
else:
    sys.path.insert(0, str(REPO_DIR))

from bench.harness import bootstrap  # noqa: E402


def main() -> int:
    """Bootstrap the virtualenv, re-run inside it, then hand over to the orchestrator."""
    if os.environ.get(bootstrap.IN_VENV_ENV) != "1":
        if any(arg in ("-h", "--help", "--list") for arg in sys.argv[1:]) and bootstrap.venv_python().exists():
            bootstrap.reexec_in_venv(Path(__file__))
        embedded = "embedded" in sys.argv[1:] or "--pg=embedded" in sys.argv[1:]
        bootstrap.ensure_venv(embedded=embedded, refresh="--reinstall" in sys.argv[1:])
        bootstrap.reexec_in_venv(Path(__file__))  # does not return
    from bench.harness.cli import main as orchestrate

    return orchestrate(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
