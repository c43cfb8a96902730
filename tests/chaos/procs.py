"""Workers and scanners as real processes (`python -m pgsched ...`), their logs in files, and a small supervisor."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Proc:
    """One `pgsched` subprocess; stdout and stderr go to ``log``."""

    def __init__(self, name: str, args: list[str], log_dir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.args = args
        self.log = log_dir / f"{name}.log"
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            out.write(f"--- start #{self.starts + 1}: {' '.join(self.args)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "pgsched", *self.args],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                env=self.env,
                start_new_session=True,
            )
        self.starts += 1
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int | None:
        assert self.popen is not None
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            self.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (after SIGCONT, in case it is paused) and wait; SIGKILL if it does not exit."""
        if not self.alive():
            return self.popen.returncode if self.popen else None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        code = self.wait(timeout)
        if code is None:
            self.kill()
        return code

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.text().splitlines()[-lines:])


class Supervisor:
    """Restarts processes that die (as systemd or Kubernetes would), counting the restarts."""

    def __init__(self, procs: list[Proc], delay: float = 0.3) -> None:
        self.procs = procs
        self.delay = delay
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            for proc in self.procs:
                if not proc.alive():
                    time.sleep(self.delay)
                    if self._stop.is_set():
                        return
                    proc.start()
                    self.restarts += 1

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(RuntimeError):
            self._thread.join(5)
