"""The pgsched application benchmark workers load: ``--app bench.apps.pgsched_app:app``.

One task, ``noop``, whose only argument is ``i``. Its handler is a coroutine
like the peers' (set PGSCHED_BENCH_HANDLER=sync for a plain ``def``). The
harness points ``hit`` at its counter before the worker starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from pgsched import App


def _ignore(i: int) -> None:
    return None


#: Set by the benchmark's worker process to its ``ctx.hit``.
hit: Callable[[int], None] = _ignore

app = App(dsn=os.environ.get("PGSCHED_DSN") or None, name="pgsched-bench")

if os.environ.get("PGSCHED_BENCH_HANDLER") == "sync":

    @app.task(name="noop")
    def noop(i: int = 0) -> None:
        """No-op job (sync handler)."""
        hit(i)

else:

    @app.task(name="noop")
    async def noop(i: int = 0) -> None:
        """No-op job (async handler)."""
        hit(i)
