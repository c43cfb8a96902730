"""Worker processes: start them, release them together, count their jobs, stop them.

A measurement starts N fresh worker processes (``spawn``). Each imports its
system, connects, builds its app, then reports ready and blocks; the clock
starts when all are ready and released at once, so interpreter start-up and
imports are never timed but the library's own worker start-up is. Instead of
a system's worker, a process can run a plain loop (``loop="module:function"``,
called as ``function(dsn, config, ctx)``): the SQL-level claimers of the
fencing, sharding and audit scenarios.

Jobs are counted in shared memory: each process owns one slot of an int64
array and is its only writer, so counting costs a few hundred nanoseconds and
no lock. In the latency scenario the handler also writes ``"<i> <time.time()>"``
to a per-process file opened with O_APPEND, after reading the clock, so the
write never delays the time it records.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import multiprocessing.context
import multiprocessing.sharedctypes
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.systems.base import Caps, DrainConfig

_SPAWN = multiprocessing.get_context("spawn")


class WorkerContext:
    """What a worker process gets from the harness: the hit callback, the start gate, the stop flag."""

    def __init__(
        self,
        slot: int,
        counts: Any,
        ready: Any,
        go: Any,
        stop: Any,
        latency_path: str | None,
    ) -> None:
        self.slot = slot
        self._counts = counts
        self._ready = ready
        self._go = go
        self._stop = stop
        self._fd: int | None = None
        if latency_path:
            self._fd = os.open(latency_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self.hit: Callable[[int], None] = self._hit_timed
        else:
            self.hit = self._hit_count

    def _hit_count(self, i: int) -> None:
        self._counts[self.slot] += 1

    def add(self, jobs: int) -> None:
        """Count ``jobs`` finished jobs at once (the SQL-level loops count per batch)."""
        self._counts[self.slot] += jobs

    def _hit_timed(self, i: int) -> None:
        now = time.time()
        assert self._fd is not None
        os.write(self._fd, b"%d %.6f\n" % (i, now))
        self._counts[self.slot] += 1

    def ready_and_wait(self) -> None:
        """Report ready, then block until the harness starts the clock."""
        self._ready.set()
        self._go.wait()

    def stop_requested(self) -> bool:
        """Whether the harness asked this worker to stop."""
        return bool(self._stop.is_set())

    async def wait_stop(self, poll: float = 0.02) -> None:
        """Sleep until the harness asks this worker to stop."""
        while not self._stop.is_set():
            await asyncio.sleep(poll)


def _worker_main(
    system_name: str,
    loop: str | None,
    dsn: str,
    config: dict[str, Any],
    caps: Caps,
    slot: int,
    counts: Any,
    ready: Any,
    go: Any,
    stop: Any,
    latency_path: str | None,
    log_path: str,
) -> None:
    """Entry point of one worker process."""
    log = open(log_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness stops workers itself
    from bench.systems import get_system

    try:
        ctx = WorkerContext(slot, counts, ready, go, stop, latency_path)
        if loop:
            module_name, _, attribute = loop.partition(":")
            getattr(importlib.import_module(module_name), attribute)(dsn, DrainConfig(**config), ctx)
        else:
            get_system(system_name).run_worker(dsn, DrainConfig(**config), ctx, caps)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)


class WorkerFailed(RuntimeError):
    """A worker process died or never became ready."""


class WorkerPool:
    """N worker processes of one system and configuration (or of one plain loop, see the module doc)."""

    def __init__(
        self,
        system_name: str,
        dsn: str,
        config: DrainConfig,
        caps: Caps,
        log_dir: Path,
        *,
        latency_dir: Path | None = None,
        loop: str | None = None,
    ) -> None:
        self.processes = config.processes
        self._counts = _SPAWN.RawArray("q", self.processes)
        self._stop = _SPAWN.Event()
        self._go = _SPAWN.Event()
        self._ready = [_SPAWN.Event() for _ in range(self.processes)]
        self.latency_files: list[Path] = []
        self.log_files: list[Path] = []
        self._procs: list[multiprocessing.context.SpawnProcess] = []
        for slot in range(self.processes):
            latency_path = None
            if latency_dir is not None:
                path = latency_dir / f"hits-{slot}.txt"
                path.unlink(missing_ok=True)
                self.latency_files.append(path)
                latency_path = str(path)
            log_path = log_dir / f"worker-{slot}.log"
            self.log_files.append(log_path)
            proc = _SPAWN.Process(
                target=_worker_main,
                name=f"bench-worker-{system_name}-{slot}",
                args=(
                    system_name,
                    loop,
                    dsn,
                    asdict(config),
                    caps,
                    slot,
                    self._counts,
                    self._ready[slot],
                    self._go,
                    self._stop,
                    latency_path,
                    str(log_path),
                ),
                daemon=False,
            )
            self._procs.append(proc)

    def start(self, timeout: float = 120.0) -> None:
        """Start every process and wait until all are ready (connected, built)."""
        for proc in self._procs:
            proc.start()
        deadline = time.monotonic() + timeout
        for event in self._ready:
            while not event.wait(0.05):
                self.check_alive()
                if time.monotonic() > deadline:
                    raise WorkerFailed(f"workers not ready after {timeout:.0f} s{self._log_tail()}")

    def go(self) -> float:
        """Release all workers at once; return the start time (perf_counter)."""
        started = time.perf_counter()
        self._go.set()
        return started

    def done(self) -> int:
        """Jobs handled so far, over all processes."""
        return int(sum(self._counts))

    def check_alive(self) -> None:
        """Raise WorkerFailed if a process exited with an error."""
        for proc in self._procs:
            if proc.exitcode not in (None, 0):
                raise WorkerFailed(f"{proc.name} exited with {proc.exitcode}{self._log_tail()}")

    def _log_tail(self) -> str:
        """The last line of the first worker log that has one (full tails go to stderr)."""
        last = ""
        for path in self.log_files:
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            except OSError:
                continue
            if lines:
                print(f"--- {path.name}", *lines[-30:], sep="\n", file=sys.stderr)
                last = last or lines[-1]
        return f": {last}" if last else ""

    def stop(self, timeout: float = 30.0) -> None:
        """Ask every process to stop; terminate, then kill, those that do not."""
        self._stop.set()
        self._go.set()
        deadline = time.monotonic() + timeout
        for proc in self._procs:
            if proc.pid is None:
                continue
            proc.join(max(0.1, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)

    def latency_hits(self) -> dict[int, float]:
        """Handler start time per job ``i`` (the first one, should a job run twice)."""
        hits: dict[int, float] = {}
        for path in self.latency_files:
            if not path.exists():
                continue
            for line in path.read_text(encoding="utf-8").splitlines():
                i, _, stamp = line.partition(" ")
                hits.setdefault(int(i), float(stamp))
        return hits
