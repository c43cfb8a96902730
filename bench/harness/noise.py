"""How busy the machine was with work that is not the benchmark's, while a case ran.

The machine may be shared. Around each case the orchestrator samples the
machine's busy CPU time (/proc/stat) and subtracts what the benchmark itself
used: its own process tree (reaped children included) and the PostgreSQL
server (the postmaster, its live children and those it reaped). What is left,
divided by cores x wall time, is the share of the machine other processes took.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _machine_busy() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def _proc_times(pid: int, *, reaped: bool) -> float:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[11..14] are utime, stime, cutime, cstime (stat fields 14-17).
    ticks = int(fields[11]) + int(fields[12])
    if reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(x) for x in path.read_text().split()]
    except OSError:
        return []


class ForeignCpu:
    """Samples before and after a case; ``share()`` is the machine share others used in between."""

    def __init__(self, postmaster_pid: int | None) -> None:
        self.postmaster_pid = postmaster_pid
        self._start: tuple[float, float, float] | None = None

    def _ours(self) -> float:
        total = _proc_times(os.getpid(), reaped=True)
        for child in _children(os.getpid()):
            total += _proc_times(child, reaped=True)
        if self.postmaster_pid:
            total += _proc_times(self.postmaster_pid, reaped=True)
            total += sum(_proc_times(c, reaped=False) for c in _children(self.postmaster_pid))
        return total

    def start(self) -> None:
        self._start = (time.monotonic(), _machine_busy(), self._ours())

    def share(self) -> float | None:
        """Fraction (0-1) of all cores used by other processes since start(); None if unknown."""
        if self._start is None or self.postmaster_pid is None:
            return None
        wall0, busy0, ours0 = self._start
        wall = time.monotonic() - wall0
        if wall <= 0:
            return None
        foreign = (_machine_busy() - busy0) - (self._ours() - ours0)
        return max(0.0, foreign) / (wall * (os.cpu_count() or 1))


def wait_quiet(postmaster_pid: int | None, max_wait: float, threshold: float = 0.10) -> float:
    """Wait (up to ``max_wait`` s) for a 1-second window in which others use < ``threshold`` of the machine.

    Returns the seconds waited. Used by ``--wait-quiet`` on shared machines.
    """
    started = time.monotonic()
    probe = ForeignCpu(postmaster_pid or -1)
    while time.monotonic() - started < max_wait:
        probe.start()
        time.sleep(1.0)
        share = probe.share()
        if share is not None and share < threshold:
            break
    return time.monotonic() - started
