"""The parent of every command job's program: ties the program's process group to the worker's life.

Run by the command runner as ``python -I -S _supervise.py WORKER_PID ARGV...``
(standard library only, so it starts in milliseconds), as the leader of a new
session, with an empty environment: the program's environment arrives on
stdin (NUL-separated NAME=VALUE, up to EOF), so nothing of the job's ``env``
(``LD_PRELOAD`` and the like) acts on the supervisor itself; the program's
stdin is /dev/null. It asks Linux to send it SIGUSR1 when the worker's thread that
started it dies (PR_SET_PDEATHSIG, which covers SIGKILL of the worker), and
then SIGKILLs its whole process group: the program and everything the program
started, not only its first process. It execs the program (no shell) in a
child and exits as the program did: with its exit status, or killed by the
same signal. SIGTERM sent to the group by the worker (timeout, cancel) reaches
the program; the supervisor itself waits for the program to end.

Resource limits (limits.py) arrive in the variable PGSCHED_LIMITS of that
environment, which the program never sees: the program's process joins the listed cgroups and sets
the rlimits before it execs, and the supervisor writes the program's rusage
(CPU seconds, peak resident memory) as JSON to the report descriptor.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
from types import FrameType
from typing import Any

_PR_SET_PDEATHSIG = 1


def _kill_group(_signum: int = 0, _frame: FrameType | None = None) -> None:
    os.killpg(0, signal.SIGKILL)


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """A handler, not SIG_IGN: handlers are reset by exec, so the program still gets SIGTERM's default."""


def _read_environment() -> dict[str, str]:
    data = b""
    while chunk := os.read(0, 65536):
        data += chunk
    env = {}
    for item in data.split(b"\0"):
        if item:
            name, _, value = item.decode("utf-8", "surrogateescape").partition("=")
            env[name] = value
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return env


def _limits(env: dict[str, str]) -> dict[str, Any]:
    text = env.pop("PGSCHED_LIMITS", "")
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        found = {}
    return found if isinstance(found, dict) else {}


def _apply(limits: dict[str, Any]) -> None:
    """In the program's process, before exec: join the run's cgroups, set its rlimits, drop the report pipe."""
    for procs in limits.get("procs") or ():
        with open(procs, "w") as out:
            out.write(str(os.getpid()))
    rlimits = limits.get("rlimits") or {}
    if "as" in rlimits:
        resource.setrlimit(resource.RLIMIT_AS, (int(rlimits["as"]), int(rlimits["as"])))
    if "cpu" in rlimits:
        resource.setrlimit(resource.RLIMIT_CPU, (int(rlimits["cpu"]), int(rlimits["cpu"]) + 5))
    if isinstance(limits.get("report"), int):
        os.close(limits["report"])


def _report(limits: dict[str, Any], usage: resource.struct_rusage) -> None:
    fd = limits.get("report")
    if not isinstance(fd, int):
        return
    try:
        os.write(
            fd, json.dumps({"cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "maxrss_kb": usage.ru_maxrss}).encode()
        )
        os.close(fd)
    except OSError:
        pass


def main(args: list[str]) -> None:
    parent, argv = int(args[0]), args[1:]
    env = _read_environment()
    limits = _limits(env)
    signal.signal(signal.SIGUSR1, _kill_group)
    signal.signal(signal.SIGTERM, _ignore)
    if sys.platform == "linux":
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGUSR1), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the program outlives a killed worker
            pass
    if os.getppid() != parent:  # the worker died before the death signal was armed
        _kill_group()
    pid = os.fork()
    if pid == 0:
        try:
            _apply(limits)
        except (OSError, ValueError) as exc:
            os.write(2, f"pgsched: cannot apply the resource limits: {exc}\n".encode(errors="replace"))
            os._exit(126)
        try:
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(2, f"pgsched: cannot run {argv[0]!r}: {exc}\n".encode(errors="replace"))
            os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    _, status, usage = os.wait4(pid, 0)
    _report(limits, usage)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        try:
            signal.signal(signum, signal.SIG_DFL)
        except OSError:  # SIGKILL and SIGSTOP keep their default, which is what is wanted
            pass
        os.kill(os.getpid(), signum)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv[1:])
