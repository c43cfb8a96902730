"""Prometheus metrics: queue state read from the database at each scrape, and a worker's own counters.

Two collectors, one per point of view:

* ``QueueCollector`` asks PostgreSQL at every scrape (``pgsched.queue_stats``,
  ``pgsched.dead_letters``, ``pgsched.workers_live``) in one read-only
  snapshot, so the numbers are exact now, per queue, never a cached average.
  They are gauges only (depth, oldest due age, dead letters, expired leases):
  what the database holds now. Serve them once (``pgsched dashboard`` at
  ``/metrics``, or ``pgsched scanner --metrics-port``), not from every worker.
* ``WorkerMetrics`` counts what one worker process did: counters
  (``pgsched_jobs_finished_total``) and histograms (run time, start lag) that
  only grow while the process lives, so ``rate()`` and
  ``histogram_quantile()`` over ``sum by (queue)`` of every worker are right
  across scrapes, restarts included (a restart is a counter reset, which
  PromQL handles). History rows cannot serve as counters: retention drops
  them. Counting a job takes no lock: each thread adds to its own tally, and
  a scrape sums the tallies.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import psycopg
from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from pgsched.db import queries
from pgsched.errors import ConfigurationError

if TYPE_CHECKING:
    from pgsched.core.job import ClaimedJob

log = logging.getLogger(__name__)

ACTIVE_STATES: Final = ("scheduled", "waiting", "available", "running")
FINISHED_STATES: Final = ("completed", "dead", "cancelled")
# What became of a job a worker ran: the label values of pgsched_worker_jobs_total{outcome}.
# passed_over: a job of a task this worker does not know, handed back for one that knows it.
OUTCOMES: Final = ("completed", "retried", "snoozed", "dead", "cancelled", "lost", "passed_over")
CLAIM_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Seconds, for handler run time and start lag: milliseconds to an hour.
JOB_BUCKETS: Final = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """Per-queue rows (the named query snapshot_queues), the number of live workers, the oldest holder of the
    xmin horizon (xmin_holder; None: nothing holds it) and dead rows per table (dead_tuples), read in one
    transaction."""

    queues: list[dict[str, Any]]
    workers_live: int
    horizon: dict[str, Any] | None = None
    dead_tuples: list[dict[str, Any]] = field(default_factory=list)


def read_snapshot(conn: psycopg.Connection[Any]) -> QueueSnapshot:
    """Read a QueueSnapshot now, in one repeatable-read, read-only transaction."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(queries.READ_ONLY_SNAPSHOT)
        queues = cur.execute(queries.SNAPSHOT_QUEUES).fetchall()
        row = cur.execute(queries.WORKERS_LIVE_COUNT).fetchone()
        horizon = cur.execute(queries.XMIN_HOLDER).fetchone()
        dead = cur.execute(queries.DEAD_TUPLES).fetchall()
    return QueueSnapshot(queues=queues, workers_live=int(row["n"]) if row else 0, horizon=horizon, dead_tuples=dead)


async def read_snapshot_async(conn: psycopg.AsyncConnection[Any]) -> QueueSnapshot:
    """read_snapshot for an asyncio connection."""
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(queries.READ_ONLY_SNAPSHOT)
        queues = await (await cur.execute(queries.SNAPSHOT_QUEUES)).fetchall()
        row = await (await cur.execute(queries.WORKERS_LIVE_COUNT)).fetchone()
        horizon = await (await cur.execute(queries.XMIN_HOLDER)).fetchone()
        dead = await (await cur.execute(queries.DEAD_TUPLES)).fetchall()
    return QueueSnapshot(queues=queues, workers_live=int(row["n"]) if row else 0, horizon=horizon, dead_tuples=dead)


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def replica_families(state: dict[str, Any]) -> list[Metric]:
    """The read server's role and staleness (pgsched.db.replica.replica_state), for a dashboard with --read-dsn."""
    standby = GaugeMetricFamily("pgsched_read_replica", "1 if the metrics were read from a standby (--read-dsn).")
    standby.add_metric([], 1 if state["in_recovery"] else 0)
    lag = GaugeMetricFamily(
        "pgsched_replica_lag_seconds",
        "How far the standby the metrics were read from is behind (0: all it received is replayed).",
    )
    lag.add_metric([], 0.0 if not state["in_recovery"] else _number(state["lag_s"]))
    return [standby, lag]


def queue_families(snap: QueueSnapshot | None) -> list[Metric]:
    """The database metric families for a snapshot (None: the database could not be read)."""
    up = GaugeMetricFamily("pgsched_database_up", "1 if the last scrape could read pgsched's views, else 0.")
    up.add_metric([], 0 if snap is None else 1)
    if snap is None:
        return [up]
    q = ["queue"]
    jobs = GaugeMetricFamily(
        "pgsched_jobs",
        "Active jobs per queue and state (scheduled, waiting: for dependencies, available, running: started,"
        " claimed: waiting for a slot).",
        labels=["queue", "state"],
    )
    oldest = GaugeMetricFamily(
        "pgsched_oldest_due_age_seconds", "How long the oldest due, unclaimed job has waited (0: none).", labels=q
    )
    retrying = GaugeMetricFamily("pgsched_retrying_jobs", "Jobs waiting to run again after a failed attempt.", labels=q)
    expired = GaugeMetricFamily(
        "pgsched_expired_leases", "Running jobs whose lease ran out and that nobody took back yet.", labels=q
    )
    dead = GaugeMetricFamily("pgsched_dead_letters", "Dead jobs awaiting a decision (pgsched.dead_letters).", labels=q)
    paused = GaugeMetricFamily("pgsched_queue_paused", "1 if the queue is paused (no claims), else 0.", labels=q)
    workers = GaugeMetricFamily("pgsched_workers_live", "Workers that reported within the last minute.")
    workers.add_metric([], snap.workers_live)
    for row in snap.queues:
        name = str(row["queue"])
        for state in ACTIVE_STATES:
            jobs.add_metric([name, state], row[state])
        jobs.add_metric([name, "claimed"], row["claimed"])
        oldest.add_metric([name], _number(row["oldest_due_age_s"]))
        retrying.add_metric([name], row["retrying"])
        expired.add_metric([name], row["lease_expired"])
        dead.add_metric([name], row["dead_letters"])
        paused.add_metric([name], 1 if row["paused"] else 0)
    horizon_s = GaugeMetricFamily(
        "pgsched_xmin_horizon_age_seconds",
        "How long the oldest transaction holding back vacuum (a snapshot, or an xid idle in a transaction) has been"
        " open (0: none, or a replication slot).",
    )
    horizon_xids = GaugeMetricFamily(
        "pgsched_xmin_horizon_age_xids",
        "How many transactions back the oldest holder keeps vacuum's horizon (0: none).",
    )
    h = snap.horizon
    horizon_s.add_metric([], float(h["age_s"] or 0) if h else 0.0)
    horizon_xids.add_metric([], float(h["xid_age"] or 0) if h else 0.0)
    dead_tuples = GaugeMetricFamily(
        "pgsched_dead_tuples",
        "Dead row versions per pgsched table, a partitioned table's partitions summed (statistics' count).",
        labels=["table"],
    )
    for t in snap.dead_tuples:
        dead_tuples.add_metric([str(t["table"])], float(t["dead"]))
    return [up, jobs, oldest, retrying, expired, dead, paused, workers, horizon_s, horizon_xids, dead_tuples]


class QueueCollector(Collector):
    """Reads pgsched's views from the database at every scrape (one short read-only transaction)."""

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self._pool = pool

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterator[Metric]:
        snap: QueueSnapshot | None
        try:
            with self._pool.connection() as conn:
                snap = read_snapshot(conn)
        except psycopg.Error as exc:
            log.warning("metrics: could not read queue state: %s", exc)
            snap = None
        yield from queue_families(snap)


class StaticCollector(Collector):
    """Metric families already read (the dashboard reads them asynchronously, then renders)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self._families


class WorkerMetrics(Collector):
    """One worker's counters, exposed by ``pgsched worker --metrics-port``.

    ``count()`` is on the hot path: it adds to a dict owned by the calling
    thread (no lock, O(1)); ``collect()`` sums those dicts at scrape time.
    """

    def __init__(
        self,
        *,
        name: str = "",
        concurrency: int = 0,
        running: Callable[[], int] | None = None,
        version: str = "",
        loops_abandoned: Callable[[], int] | None = None,
        progress: Callable[[], Iterable[tuple[str, str, int, float]]] | None = None,
    ) -> None:
        self.name = name
        self.concurrency = concurrency
        self.running: Callable[[], int] = running or (lambda: 0)
        # (queue, task, job id, fraction) of each running job that reported progress (ctx.progress)
        self.progress: Callable[[], Iterable[tuple[str, str, int, float]]] = progress or (lambda: ())
        self.version = version
        self.loops_abandoned: Callable[[], int] = loops_abandoned or (lambda: 0)
        self.claim_seconds = Histogram(
            "pgsched_claim_seconds",
            "Time of one claim round trip (pgsched.claim of a batch), in seconds.",
            registry=None,
            buckets=CLAIM_BUCKETS,
        )
        self._local = threading.local()
        self._tallies: list[dict[tuple[str, str, str], int]] = []
        self._claims: list[dict[tuple[str, str], int]] = []
        self._durations: list[dict[tuple[str, str], list[float]]] = []
        self._lags: list[dict[tuple[str, str], list[float]]] = []
        self._new_thread = threading.Lock()

    def _tally(self) -> dict[tuple[str, str, str], int]:
        tally: dict[tuple[str, str, str], int] | None = getattr(self._local, "tally", None)
        if tally is None:
            tally = {}
            with self._new_thread:  # once per thread
                self._tallies.append(tally)
            self._local.tally = tally
        return tally

    def count(self, queue: str, task: str, outcome: str, n: int = 1) -> None:
        """Add n jobs of (queue, task) that ended with outcome (one of OUTCOMES)."""
        tally = self._tally()
        key = (queue, task, outcome)
        tally[key] = tally.get(key, 0) + n

    def count_claimed(self, batch: Iterable[tuple[str, str]]) -> None:
        """Count one claimed batch, given as (queue, task) per job."""
        claims: dict[tuple[str, str], int] | None = getattr(self._local, "claims", None)
        if claims is None:
            claims = {}
            with self._new_thread:
                self._claims.append(claims)
            self._local.claims = claims
        for key in batch:
            claims[key] = claims.get(key, 0) + 1

    def claimed_jobs(self, jobs: Sequence[ClaimedJob], lease: float) -> list[float | None]:
        """Count a claimed batch; returns how long each job had been due when it was claimed (the database's
        clock), from which its start lag is observed when its handler starts (observe_start_lag)."""
        self.count_claimed((job.queue, job.task) for job in jobs)
        return [
            None if job.lease_expires_at is None else (job.lease_expires_at - job.run_at).total_seconds() - lease
            for job in jobs
        ]

    def observe_start_lag(self, queue: str, task: str, seconds: float) -> None:
        """Observe one handler start of (queue, task), seconds after its job was due."""
        _observe(self._histogram("lags", self._lags), (queue, task), max(0.0, seconds))

    def observe_run(self, queue: str, task: str, seconds: float) -> None:
        """Observe one handler run of (queue, task) that took seconds."""
        _observe(self._histogram("durations", self._durations), (queue, task), seconds)

    def _histogram(self, name: str, tallies: list[dict[tuple[str, str], list[float]]]) -> dict[Any, list[float]]:
        tally: dict[tuple[str, str], list[float]] | None = getattr(self._local, name, None)
        if tally is None:
            tally = {}
            with self._new_thread:
                tallies.append(tally)
            setattr(self._local, name, tally)
        return tally

    def totals(self) -> dict[tuple[str, str, str], int]:
        """Jobs per (queue, task, outcome), summed over threads."""
        return _sum_tallies(self._tallies, self._new_thread)

    def claimed(self) -> dict[tuple[str, str], int]:
        """Jobs claimed per (queue, task), summed over threads."""
        return _sum_tallies(self._claims, self._new_thread)

    def describe(self) -> list[Metric]:
        return [*self._families({}, {}, 0), self._progress_family(())]

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.totals(), self.claimed(), self.running())
        yield self._progress_family(self.progress())
        yield _histogram_family(
            "pgsched_job_duration_seconds",
            "Handler run time of the jobs this worker ran, by queue and task, in seconds.",
            _sum_histograms(self._durations, self._new_thread),
        )
        yield _histogram_family(
            "pgsched_job_start_lag_seconds",
            "Start lag (handler started - due) of the jobs this worker started, by queue and task, in seconds.",
            _sum_histograms(self._lags, self._new_thread),
        )

    @staticmethod
    def _progress_family(rows: Iterable[tuple[str, str, int, float]]) -> Metric:
        family = GaugeMetricFamily(
            "pgsched_worker_job_progress",
            "Last progress report (0 to 1, ctx.progress) of each job this worker runs now that reported one.",
            labels=["queue", "task", "job_id"],
        )
        for queue, task, job_id, fraction in sorted(rows):
            family.add_metric([queue, task, str(job_id)], fraction)
        return family

    def _families(
        self, totals: dict[tuple[str, str, str], int], claimed: dict[tuple[str, str], int], running: int
    ) -> Iterator[Metric]:
        finished = CounterMetricFamily(
            "pgsched_jobs_finished",
            "Jobs this worker finished, by queue, task and terminal state (completed, dead, cancelled).",
            labels=["queue", "task", "state"],
        )
        for (queue, task, outcome), n in sorted(totals.items()):
            if outcome in FINISHED_STATES:
                finished.add_metric([queue, task, outcome], n)
        yield finished
        jobs = CounterMetricFamily(
            "pgsched_worker_jobs",
            "Jobs this worker ran, by queue, task and outcome (" + ", ".join(OUTCOMES) + ").",
            labels=["queue", "task", "outcome"],
        )
        for key, n in sorted(totals.items()):
            jobs.add_metric(list(key), n)
        claims = CounterMetricFamily(
            "pgsched_worker_claimed_jobs", "Jobs this worker claimed, by queue and task.", labels=["queue", "task"]
        )
        for ckey, n in sorted(claimed.items()):
            claims.add_metric(list(ckey), n)
        yield jobs
        yield claims
        yield GaugeMetricFamily(
            "pgsched_worker_running", "Jobs this worker holds now: running, or leased and waiting for a slot.", running
        )
        yield GaugeMetricFamily("pgsched_worker_concurrency", "Handler slots of this worker.", self.concurrency)
        yield CounterMetricFamily(
            "pgsched_worker_loops_abandoned",
            "Event loops this worker abandoned to an async handler that blocked them past --loop-block-timeout.",
            value=self.loops_abandoned(),
        )
        info = GaugeMetricFamily("pgsched_worker_info", "This worker's name and version.", labels=["worker", "version"])
        info.add_metric([self.name, self.version], 1)
        yield info
        yield from self.claim_seconds.collect()


def _observe(tally: dict[tuple[str, str], list[float]], key: tuple[str, str], value: float) -> None:
    # One count per bucket (not cumulative) and +Inf, then the sum: one list per key, owned by this thread.
    counts = tally.get(key)
    if counts is None:
        counts = tally[key] = [0.0] * (len(JOB_BUCKETS) + 2)
    counts[bisect.bisect_left(JOB_BUCKETS, value)] += 1
    counts[-1] += value


def _sum_histograms(
    tallies: list[dict[tuple[str, str], list[float]]], lock: threading.Lock
) -> dict[tuple[str, str], list[float]]:
    with lock:
        snapshot = list(tallies)
    out: dict[tuple[str, str], list[float]] = {}
    for tally in snapshot:
        for key, counts in tally.copy().items():
            row = counts.copy()  # list.copy is atomic under the GIL
            total = out.setdefault(key, [0.0] * len(row))
            for i, n in enumerate(row):
                total[i] += n
    return out


def _histogram_family(name: str, doc: str, data: dict[tuple[str, str], list[float]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=["queue", "task"])
    for (queue, task), counts in sorted(data.items()):
        cumulative = 0.0
        buckets: list[tuple[str, float]] = []
        for bound, n in zip((*JOB_BUCKETS, math.inf), counts[:-1], strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == math.inf else repr(float(bound)), cumulative))
        family.add_metric([queue, task], buckets, counts[-1])
    return family


def _sum_tallies(tallies: list[dict[Any, int]], lock: threading.Lock) -> dict[Any, int]:
    with lock:
        snapshot = list(tallies)
    out: dict[Any, int] = {}
    for tally in snapshot:
        for key, n in tally.copy().items():  # dict.copy is atomic under the GIL
            out[key] = out.get(key, 0) + n
    return out


@dataclass
class MetricsServer:
    """prometheus_client's HTTP server in a daemon thread, serving one registry."""

    registry: CollectorRegistry
    host: str = "127.0.0.1"
    port: int = 0
    _server: Any = None
    _thread: threading.Thread | None = None

    def start(self) -> int:
        """Listen and serve; returns the port (useful with port 0)."""
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            raise ConfigurationError(f"cannot serve metrics on {self.host}:{self.port}: {exc}") from exc
        self.port = int(self._server.server_port)
        return self.port

    @property
    def url(self) -> str:
        """http://HOST:PORT of the server (IPv6 addresses in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def worker_registry(*collectors: Collector) -> CollectorRegistry:
    """A registry with these collectors (a worker's counters, queue gauges) and the process and platform metrics."""
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry
