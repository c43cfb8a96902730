"""How a worker runs: its options, checked before it starts, and its default name."""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from pgsched.errors import ConfigurationError


@dataclass(kw_only=True)
class WorkerOptions:
    """How a worker runs. Durations are seconds."""

    queues: Sequence[str] = ("default",)
    concurrency: int = 10
    prefetch: int | None = None  # jobs leased beyond concurrency, waiting for a slot (default: concurrency)
    lease: float = 30.0
    heartbeat_interval: float | None = None  # default: lease / 3
    poll_interval: float = 1.0
    shutdown_timeout: float = 30.0
    burst: bool = False
    name: str | None = None
    labels: Sequence[str] = ()
    listen: bool = True
    housekeeping: bool = True  # promote due jobs, expire dead leases, expand schedules (also without a scanner)
    vacuum_interval: float = 5.0  # vacuum/analyze pgsched.jobs' partitions when needed (0: leave it to autovacuum)
    prepare: bool = True  # server-side prepared statements (off behind PgBouncer < 1.21)
    install_signal_handlers: bool = True
    completion_batch: int = 1000
    completion_flush_interval: float = 0.002
    max_claim: int = 1000
    check_schema: bool = True
    metrics_port: int | None = None  # serve Prometheus metrics on this port (0: any free port)
    metrics_host: str = "127.0.0.1"  # the address metrics_port listens on (0.0.0.0: every interface)
    stats: dict[str, int] = field(default_factory=dict)
    pool: str = "thread"  # sync handlers on threads, or "process": in child processes (docs/timeouts.md)
    app_ref: str | None = None  # MODULE:ATTRIBUTE of the app, for the process pool's children
    max_abandoned: int | None = None  # abandoned threads and event loops before recycling (default: concurrency // 2)
    loop_block_timeout: float = 10.0  # seconds the event loop may be blocked before it is abandoned (0: off)

    def validate(self) -> None:
        if not self.queues:
            raise ConfigurationError("a worker needs at least one queue")
        if self.concurrency < 1:
            raise ConfigurationError("concurrency must be at least 1")
        if self.lease < 1:
            raise ConfigurationError("the lease must be at least 1 second")
        if self.heartbeat_interval is not None and not 0 < self.heartbeat_interval < self.lease:
            raise ConfigurationError("the heartbeat interval must be shorter than the lease")
        if self.poll_interval <= 0:
            raise ConfigurationError("the poll interval must be positive")
        if self.vacuum_interval < 0:
            raise ConfigurationError("the vacuum interval must be positive, or 0 to leave vacuuming to autovacuum")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigurationError("the metrics port must be between 0 and 65535")
        if self.pool not in ("thread", "process"):
            raise ConfigurationError(f"the pool must be 'thread' or 'process', not {self.pool!r}")
        if self.pool == "process" and not self.app_ref:
            raise ConfigurationError("the process pool needs the app as MODULE:ATTRIBUTE (app_ref, --app)")
        if self.max_abandoned is not None and self.max_abandoned < 1:
            raise ConfigurationError("max_abandoned must be at least 1")
        if self.loop_block_timeout < 0:
            raise ConfigurationError("the loop block timeout must be positive, or 0 to turn the watchdog off")


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{random.randrange(16**4):04x}"
