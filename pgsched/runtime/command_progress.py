"""Progress of command jobs: ``PGSCHED_PROGRESS <fraction> [note]`` lines on the program's stdout (docs/steps.md)."""

from __future__ import annotations

import math

from pgsched.core.job import JobContext

PREFIX = b"PGSCHED_PROGRESS "
MAX_LINE = 4096  # bytes of a partial line kept while waiting for its end


class ProgressLines:
    """Finds progress lines in a stream as it is read, and reports each to the job's context."""

    __slots__ = ("_ctx", "_partial")

    def __init__(self, ctx: JobContext) -> None:
        self._ctx = ctx
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()[-MAX_LINE:]
        for line in lines:
            if line.startswith(PREFIX):
                self._report(line[len(PREFIX) :])

    def _report(self, rest: bytes) -> None:
        text = rest.decode("utf-8", errors="replace").replace("\x00", "\ufffd").strip()
        head, _, note = text.partition(" ")
        try:
            fraction = float(head)
        except ValueError:
            return
        if not (math.isfinite(fraction) and 0 <= fraction <= 1):
            return
        self._ctx.progress(fraction, note.strip()[:1000] or None)
