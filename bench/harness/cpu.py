"""The machine's CPU time over a measurement, from ``/proc/stat``: how busy its cores were, and the core-seconds spent.

Everything on the machine counts (PostgreSQL's backends, the workers, the harness's own polling), which is the
point: a drain that leaves cores idle is bound by its round trips, one that keeps them all busy by the work
each job costs, and that cost (core-microseconds per job) is what bounds it once more processes are added.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Sample:
    """Cumulative jiffies since boot, over all cores."""

    total: int
    idle: int


def sample() -> Sample | None:
    """The machine's counters now; None where ``/proc/stat`` is not available."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    return Sample(total=sum(values[:8]), idle=values[3] + (values[4] if len(values) > 4 else 0))


def busy(before: Sample | None, after: Sample | None) -> tuple[float, float] | None:
    """(busy fraction of all cores, busy core-seconds) between two samples; None without both."""
    if before is None or after is None or after.total <= before.total:
        return None
    total = after.total - before.total
    spent = total - (after.idle - before.idle)
    return spent / total, spent / _TICKS
