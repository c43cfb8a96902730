"""Services for the resource limit tests that need an importable app (the process pool's children)."""

from __future__ import annotations

import os
from pathlib import Path

from pgsched import App, JobContext

app = App()


@app.service(name="limits.hog", max_attempts=1)
def hog(mib: int, ctx: JobContext) -> int:
    """Takes mib MiB of memory (touching every page), then returns the process id."""
    held = b"x" * (mib * 1024 * 1024)
    return os.getpid() if held else 0


@app.service(name="limits.memory", max_attempts=1)
def memory_limit() -> str:
    """The memory limit of this process's cgroup (v1), or 'none'."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        limit = Path(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        if "memory" in controllers.split(",") and "pgsched" in path and limit.exists():
            return limit.read_text().strip()
    return "none"
