"""The interface every benchmarked system implements, and the small types it trades in.

A system is measured in fresh subprocesses of a benchmark venv (``venv``:
bench/.venv, or bench/.venv-py312 for a peer that needs Python >= 3.12); the
methods below run there. The orchestrator only reads the declarative parts (names,
variants, configurations) and never imports a system's library.

Every system runs the same no-op task, named ``noop``, whose only argument is a
small integer ``i``; its handler calls ``ctx.hit(i)`` (see
``bench.harness.workers.WorkerContext``), which counts the job and, in the
latency scenario, records the handler's start time.
"""

from __future__ import annotations

import abc
import contextlib
import importlib.metadata
import importlib.util
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from bench.harness.workers import WorkerContext

Role = Literal["baseline", "peer", "subject"]
Caps = dict[str, Any]


@dataclass(frozen=True)
class EnqueueVariant:
    """One way of enqueueing (a row of the enqueue table)."""

    id: str
    label: str
    #: Rows of one group are compared with each other: "one-by-one" or "batch".
    group: str
    batch: int = 1


@dataclass(frozen=True)
class DrainConfig:
    """One worker configuration (a row of the drain table)."""

    id: str
    label: str
    processes: int
    settings: dict[str, Any] = field(default_factory=dict)
    #: The system's out-of-the-box settings.
    default: bool = False
    #: Part of ``--quick``.
    quick: bool = False
    #: Also drained at the big size with ``--big``.
    big: bool = False
    #: Handlers that run at once in one process, as the tables show it ("1 (loop)" for a sequential loop).
    concurrency: str = ""
    #: Most jobs one claim takes.
    claim: str = ""


class Producer(Protocol):
    """Enqueues one latency-probe job per call; opened before the first call is timed."""

    async def enqueue(self, i: int) -> None: ...


class System(abc.ABC):
    """A job queue under test. Subclasses fill in the class attributes and methods."""

    #: Short name used on the command line (``--systems``).
    name: str
    #: Name shown in the tables.
    title: str
    role: Role
    #: Database the system gets on the private server.
    database: str
    #: Modules that must import for the system to run.
    modules: tuple[str, ...] = ()
    #: Distributions whose versions the results record.
    distributions: tuple[str, ...] = ()
    #: The benchmark virtualenv whose interpreter runs this system's probe, schema install,
    #: measurements and worker processes (a key of ``bench.harness.bootstrap.VENVS``).
    venv: str = "main"
    #: Tables emptied before every measurement.
    truncate_tables: tuple[str, ...] = ()
    #: SQL returning one boolean: is any job not yet finished and persisted?
    unfinished_sql: str = ""
    #: SQL returning one integer: jobs finished (for the post-run check).
    finished_sql: str = ""
    #: SQL returning one integer: jobs waiting (for the post-enqueue check).
    queued_sql: str = ""
    #: SQL returning ``(i, due time as epoch seconds)`` for every job, waiting or finished, that still shows it.
    due_times_sql: str = ""
    #: SQL returning ``(i, start - due in seconds)`` with both times from the database's clock (empty: unknown).
    db_start_lag_sql: str = ""

    # -- discovery (orchestrator, via a probe subprocess) ------------------------------

    def probe(self) -> Caps:
        """Versions and capabilities, found in the venv; ``{"missing": reason}`` if unusable."""
        venv = "bench/.venv" if self.venv == "main" else f"bench/.venv-{self.venv}"
        for module in self.modules:
            if importlib.util.find_spec(module) is None:
                return {"missing": f"{module} is not installed in {venv}"}
        return {"versions": distribution_versions(self.distributions)}

    def skip_reason(self, scenario: str, caps: Caps) -> str | None:
        """Why this system cannot run ``scenario`` now (None: it can)."""
        missing = caps.get("missing")
        return str(missing) if missing else None

    # -- schema ------------------------------------------------------------------------

    @abc.abstractmethod
    async def install(self, dsn: str, caps: Caps) -> str:
        """Install the system's schema with its own tooling; return how it was done."""

    # -- enqueue -----------------------------------------------------------------------

    @abc.abstractmethod
    def enqueue_variants(self, caps: Caps) -> list[EnqueueVariant]:
        """The enqueue rows this system has."""

    @abc.abstractmethod
    async def enqueue(self, dsn: str, variant: EnqueueVariant, n: int, caps: Caps) -> float:
        """Enqueue ``n`` jobs as ``variant`` says; return the seconds the enqueueing took.

        Connections and apps are opened before the clock starts.
        """

    @abc.abstractmethod
    async def prefill(self, dsn: str, n: int, caps: Caps) -> None:
        """Enqueue ``n`` jobs quickly (untimed), for a drain."""

    # -- workers -----------------------------------------------------------------------

    @abc.abstractmethod
    def drain_configs(self, caps: Caps) -> list[DrainConfig]:
        """The drain rows this system has."""

    @abc.abstractmethod
    def latency_config(self, caps: Caps) -> DrainConfig:
        """The configuration of the idle listening worker in the latency scenario."""

    @abc.abstractmethod
    def run_worker(self, dsn: str, config: DrainConfig, ctx: WorkerContext, caps: Caps) -> None:
        """Run one worker process until ``ctx`` says stop.

        Connect and build everything first, then call ``ctx.ready_and_wait()``:
        the clock starts when every worker process is ready.
        """

    @abc.abstractmethod
    def producer(self, dsn: str, caps: Caps) -> AbstractAsyncContextManager[Producer]:
        """An open enqueuer for the latency scenario (job ``i`` carries ``i``)."""

    # -- delayed jobs (optional) -------------------------------------------------------

    def delayed_configs(self, caps: Caps) -> list[DrainConfig]:
        """Idle workers that wait for jobs due in the future (none: the system has no delayed jobs)."""
        return []

    async def enqueue_at(self, dsn: str, jobs: list[tuple[int, datetime]], caps: Caps) -> None:
        """Enqueue job ``i`` due at its time, for each pair, with the system's own API for delayed jobs.

        Called with the jobs in due order; all should be stored well before the first is due.
        """
        raise NotImplementedError

    #: SQL returning one boolean: is any *due* job not yet finished? (A far-future backlog stays.)
    unfinished_due_sql: str = ""

    async def prefill_far_future(self, dsn: str, n: int, caps: Caps) -> None:
        """Enqueue ``n`` jobs due in about a month (untimed), for the scale scenario."""
        raise NotImplementedError

    def side_processes(self, dsn: str, config: DrainConfig, log_dir: Path) -> AbstractContextManager[None]:
        """Processes a configuration needs besides its workers (pgsched's scanner), for the block's duration."""
        return contextlib.nullcontext()


def distribution_versions(names: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``names`` (absent ones are left out)."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def chunks(n: int, size: int) -> Iterator[range]:
    """Ranges of at most ``size`` covering ``range(n)``."""
    for start in range(0, n, size):
        yield range(start, min(n, start + size))
