"""Command jobs: the runner that ``pgsched worker --commands`` uses, and the checks of ``App.enqueue_command``.

A command job (``pgsched.enqueue_command``) is stored as task
``pgsched.command`` with args ``{argv, env, cwd, timeout_s}`` and the label
``pgsched:command``; only workers that serve commands offer that label, so no
other worker ever claims one. The runner starts the program:

- without a shell (argv is exec'd as given; ``["sh", "-c", "..."]`` asks for one);
- in a new session, so in its own process group, which every kill addresses;
- with ``env`` over a minimal base environment (``base_environment``): PATH,
  LANG, HOME, then PGSCHED_JOB_ID / PGSCHED_JOB_ATTEMPT / PGSCHED_LEASE_TOKEN
  over both; never the worker's own environment, except the variables named
  by ``--command-pass-env``; the supervisor itself runs with none;
- in ``cwd`` (default: the worker user's home), stdin from /dev/null;
- under a small supervisor (``_supervise.py``, the group's leader) that, on
  Linux, gets a death signal (PR_SET_PDEATHSIG) when the worker dies, even by
  SIGKILL, and then kills the whole group: the program and all it started.

It enforces the command's own timeout (args ``timeout_s``): at the timeout,
at a cancel request, at a lost lease and at the worker's shutdown, the group
gets SIGTERM, then SIGKILL after ``kill_grace`` seconds. The job's own time
limit (its ``timeout`` column: ``timeout_s`` + config.command_timeout_margin,
as start() recorded it in ``ctx.timeout``) belongs to the worker and the
database, which fail the run only when the runner did not end it: so the
runner sends SIGKILL at the latest ``COLLECT_S`` seconds before that limit,
whatever ``kill_grace`` says, to have the output and exit code recorded in
time. When the program
exits, what is left of its group is killed. Whatever happened, the result
holds ``exit_code`` (negative: the signal that ended it), ``stdout`` and
``stderr`` (the last 64 kB of each, decoded as UTF-8 with replacement),
``duration_s``, the byte counts of both streams, and ``timed_out``.
"""

from __future__ import annotations

import logging
import os
import pwd
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pgsched.core.job import ClaimedJob, JobContext
from pgsched.core.outcome import format_seconds
from pgsched.errors import LeaseLost, RunFailed, WorkerStopping
from pgsched.runtime.command_progress import ProgressLines
from pgsched.runtime.limits import Mechanism, Run, RunLimits, mechanism

if TYPE_CHECKING:
    from pgsched.core.registry import Registry
    from pgsched.runtime.options import WorkerOptions

log = logging.getLogger(__name__)

COMMAND_TASK = "pgsched.command"
COMMAND_LABEL = "pgsched:command"
COMMAND_QUEUE = "commands"
OUTPUT_CAP = 64 * 1024  # bytes kept of each of stdout and stderr (the tail)
# Seconds the runner keeps, before the job's own time limit, to collect and report what the program left
# after its SIGKILL (0.5 s of lingering output, 1 s of the killed group's last writes, and slack).
COLLECT_S = 2.0
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Limits enqueue_command() enforces too; checked here first for a clear error before any round trip.
MAX_ARGV = 4096
MAX_ARG_BYTES = 128 * 1024
MAX_ARGV_BYTES = 256 * 1024
MAX_ENV = 1000
MAX_ENV_BYTES = 256 * 1024

# The program's parent: arms the death signal and kills the group when the worker dies.
SUPERVISOR = str(Path(__file__).with_name("_supervise.py"))


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandOptions:
    """How a worker runs command jobs."""

    pass_env: Sequence[str] = ()  # names of the worker's own variables handed to every command
    kill_grace: float = 5.0  # seconds between SIGTERM and SIGKILL to the process group
    poll_interval: float = 0.05  # how often the runner looks at cancels and the clock

    def __post_init__(self) -> None:
        if self.kill_grace < 0:
            raise ValueError("the kill grace must be 0 or more seconds")
        for name in self.pass_env:
            if not _env_name_ok(name):
                raise ValueError(f"{name!r} is not an environment variable name")


def base_environment(pass_env: Sequence[str] = ()) -> dict[str, str]:
    """What every command starts from: PATH, LANG, HOME, plus the worker's variables named in pass_env."""
    env = {"PATH": BASE_PATH, "LANG": "C.UTF-8", "HOME": _home()}
    for name in pass_env:
        value = os.environ.get(name)
        if value is not None:
            env[name] = value
    return env


def check_command(
    argv: Sequence[str], env: Mapping[str, Any] | None, cwd: str | None, timeout: float | None
) -> tuple[list[str], dict[str, str]]:
    """Refuse what enqueue_command would refuse, and what PostgreSQL cannot carry (NUL), with a clear ValueError."""
    if isinstance(argv, str | bytes):
        raise TypeError("argv must be a sequence of strings (the program and its arguments), not a string")
    args = list(argv)
    if not args:
        raise ValueError("argv must name a program: at least one element")
    if len(args) > MAX_ARGV:
        raise ValueError(f"argv has {len(args)} elements: at most {MAX_ARGV}")
    for i, arg in enumerate(args):
        if not isinstance(arg, str):
            raise TypeError(f"argv element {i + 1} must be a string, not {type(arg).__name__}")
        if "\x00" in arg:
            raise ValueError(f"argv element {i + 1} contains a NUL byte")
        if len(arg.encode()) > MAX_ARG_BYTES:
            raise ValueError(f"argv element {i + 1} is larger than {MAX_ARG_BYTES // 1024} kB")
    if not args[0]:
        raise ValueError("argv's first element, the program, is empty")
    if sum(len(a.encode()) for a in args) > MAX_ARGV_BYTES:
        raise ValueError(f"argv is larger than {MAX_ARGV_BYTES // 1024} kB in all")
    variables: dict[str, str] = {}
    for name, value in (env or {}).items():
        if not isinstance(name, str) or not _env_name_ok(name):
            raise ValueError(f"env name {name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        if not isinstance(value, str):
            raise TypeError(f"env value of {name} must be a string, not {type(value).__name__}")
        if "\x00" in value:
            raise ValueError(f"env value of {name} contains a NUL byte")
        variables[name] = value
    if len(variables) > MAX_ENV or sum(len(k) + len(v.encode()) + 6 for k, v in variables.items()) > MAX_ENV_BYTES:
        raise ValueError(f"env is too large: at most {MAX_ENV} variables and {MAX_ENV_BYTES // 1024} kB")
    if cwd is not None and (not isinstance(cwd, str) or "\x00" in cwd or not cwd.startswith("/")):
        raise ValueError(f"cwd must be an absolute path without NUL bytes, not {cwd!r}")
    if timeout is not None and not 0 < timeout <= 366 * 86400:
        raise ValueError(f"timeout must be positive and at most 366 days, not {timeout!r} s")
    return args, variables


def make_handler(options: CommandOptions) -> Any:
    """The handler of task pgsched.command for a worker with these options."""

    def run_command(
        ctx: JobContext,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float | None = None,
        memory_limit: int | None = None,
        cpu_limit: float | None = None,
        **_ignored: Any,
    ) -> dict[str, Any]:
        return run(ctx, argv, env or {}, cwd, timeout_s, options, RunLimits.from_args(memory_limit, cpu_limit))

    return run_command


class _Tail:
    """The last OUTPUT_CAP bytes of a stream, and how many bytes it had (and its progress lines, if watched)."""

    __slots__ = ("data", "progress", "total")

    def __init__(self, progress: ProgressLines | None = None) -> None:
        self.data = bytearray()
        self.total = 0
        self.progress = progress

    def add(self, chunk: bytes) -> None:
        if self.progress is not None:
            self.progress.feed(chunk)
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > OUTPUT_CAP:
            del self.data[: len(self.data) - OUTPUT_CAP]

    def text(self) -> str:
        # JSON in PostgreSQL carries no NUL: shown as U+FFFD like any undecodable byte.
        return self.data.decode("utf-8", errors="replace").replace("\x00", "\ufffd")


def run(
    ctx: JobContext,
    argv: list[str],
    env: Mapping[str, str],
    cwd: str | None,
    timeout_s: float | None,
    options: CommandOptions,
    limits: RunLimits | None = None,
) -> dict[str, Any]:
    """Run one command job to its end; returns its result, or raises RunFailed / LeaseLost / WorkerStopping."""
    environment = base_environment(options.pass_env)
    environment.update(env)
    # pgsched's own variables last: the job's env cannot pose as another job or another lease.
    environment.update(
        PGSCHED_JOB_ID=str(ctx.id), PGSCHED_JOB_ATTEMPT=str(ctx.attempt), PGSCHED_LEASE_TOKEN=str(ctx.lease_token)
    )
    out, err = _Tail(ProgressLines(ctx)), _Tail()
    started = time.monotonic()
    limited = _open_limits(ctx, limits or RunLimits(), timeout_s, err)
    environment.update(limited.env)  # last: a job's own env never names the limits
    try:
        # The supervisor starts with an empty environment (the job's LD_PRELOAD and the like never run
        # in it) and reads the program's from its stdin, which the program gets as /dev/null.
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", SUPERVISOR, str(os.getpid()), *argv],
            env={},
            cwd=cwd or environment.get("HOME") or "/",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=limited.pass_fds,
        )
        _hand_environment(proc, environment)
    except (OSError, ValueError) as exc:
        err.add(f"pgsched: cannot run {argv[0]!r}: {exc}\n".encode())
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        result = _result(code, out, err, started, timed_out=False)
        result.update(limited.finish(None))
        raise RunFailed(f"command could not start: {exc}", result) from None
    limited.started()
    extra = {"job_id": ctx.id, "task": ctx.task, "pid": proc.pid}
    log.info("job %s: started %s (pid %s)", ctx.id, argv[0], proc.pid, extra=extra)
    deadline = None if timeout_s is None else started + float(timeout_s)
    # The latest SIGKILL that leaves time to report before the worker's and the database's limit (ctx.timeout).
    last_kill = None if ctx.timeout is None else started + max(0.0, ctx.timeout - COLLECT_S)
    why: str | None = None
    kill_at = term_at = 0.0
    killed = False
    with selectors.DefaultSelector() as streams:
        assert proc.stdout is not None
        assert proc.stderr is not None
        streams.register(proc.stdout, selectors.EVENT_READ, out)
        streams.register(proc.stderr, selectors.EVENT_READ, err)
        while proc.poll() is None:
            _read(streams, options.poll_interval, proc)
            now = time.monotonic()
            if why is None:
                why = _stop_reason(ctx, deadline, now)
                if why is not None:
                    log.info("job %s: %s; SIGTERM to process group %s", ctx.id, why, proc.pid, extra=extra)
                    _signal_group(proc.pid, signal.SIGTERM)
                    term_at = now
                    kill_at = now + options.kill_grace
                    if last_kill is not None and kill_at > last_kill:
                        kill_at = max(now, last_kill)
                        log.warning(
                            "job %s: SIGKILL in %.1fs, not the %.1fs kill grace, to report before the job's "
                            "%g s limit (config.command_timeout_margin)",
                            ctx.id,
                            kill_at - now,
                            options.kill_grace,
                            ctx.timeout,
                            extra=extra,
                        )
            elif not killed and now >= kill_at:
                log.warning("job %s: still running %.1fs after SIGTERM; SIGKILL", ctx.id, now - term_at, extra=extra)
                _signal_group(proc.pid, signal.SIGKILL)
                killed = True
        # The program is gone: take what its group still writes for a moment, then end the group.
        linger = time.monotonic() + min(0.5, max(options.kill_grace, 0.05))
        while streams.get_map() and time.monotonic() < linger:
            _read(streams, 0.05, None)
        _signal_group(proc.pid, signal.SIGKILL)
        last = time.monotonic() + 1.0  # what the killed group wrote before it died
        while streams.get_map() and time.monotonic() < last:
            _read(streams, 0.05, None)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    code = proc.returncode
    result = _result(code, out, err, started, timed_out=why == "timed out")
    result.update(limited.finish(code))
    if why == "lease lost":
        raise LeaseLost(f"job {ctx.id}: lease lost while its command ran")
    if why == "worker stopping":
        raise WorkerStopping(f"job {ctx.id}: the worker is stopping; the command was stopped and will run again")
    if why == "cancelled":
        raise RunFailed("cancelled: the command was stopped after the cancel request", result)
    if result["oom_killed"]:
        raise RunFailed(f"killed: memory limit {result['memory_limit_mib']} MiB exceeded", result)
    if why == "timed out":
        raise RunFailed(f"timed out after {float(timeout_s or 0):g} s", result)
    if code == -signal.SIGXCPU and limited.limits.cpus is not None:
        raise RunFailed(f"killed: CPU time limit exceeded (cpu_limit {limited.limits.cpus:g} x timeout)", result)
    if code != 0:
        raise RunFailed(_exit_reason(code, err), result)
    return result


def _open_limits(ctx: JobContext, limits: RunLimits, timeout_s: float | None, err: _Tail) -> Run:
    """The run's cgroups and rlimits; when its groups cannot be made, rlimits (said in stderr and the log)."""
    found = mechanism()
    try:
        return found.open(limits, f"run-{ctx.id}-{ctx.lease_token}-{os.getpid()}", timeout_s)
    except OSError as exc:
        log.warning("job %s: could not make its cgroups (%s); rlimits only", ctx.id, exc, extra={"job_id": ctx.id})
        err.add(f"pgsched: cgroups unavailable ({exc}); limits by rlimit\n".encode(errors="replace"))
        return Mechanism("rlimit", {}, f"cgroups failed: {exc}").open(limits, "", timeout_s)


def overrun_error(job: ClaimedJob, limit: float) -> str:
    """Why the worker failed a command job at its own limit: the runner did not end it (the database says the same)."""
    timeout_s = job.args.get("timeout_s")
    shown = format_seconds(limit)
    if not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool):
        return f"timed out after {shown} s"
    return (
        f"timed out after {shown} s: the command runner did not end the command within the margin of its "
        f"{format_seconds(timeout_s)} s timeout"
    )


def _stop_reason(ctx: JobContext, deadline: float | None, now: float) -> str | None:
    if ctx.lease_lost:
        return "lease lost"
    if ctx.cancel_requested:
        return "cancelled"
    if ctx.stopping:
        return "worker stopping"
    if deadline is not None and now >= deadline:
        return "timed out"
    return None


def _hand_environment(proc: subprocess.Popen[bytes], environment: Mapping[str, str]) -> None:
    """Write the program's environment to the supervisor's stdin, NUL-separated NAME=VALUE, and close it."""
    assert proc.stdin is not None
    payload = b"".join(f"{name}={value}".encode() + b"\0" for name, value in environment.items())
    try:
        proc.stdin.write(payload)
    except BrokenPipeError:  # the supervisor died at start; its exit status tells what happened
        pass
    finally:
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass


def _read(streams: selectors.BaseSelector, timeout: float, proc: subprocess.Popen[bytes] | None) -> None:
    """Read what the pipes have (up to timeout); a closed pipe is unregistered."""
    if not streams.get_map():
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        return
    for key, _ in streams.select(timeout):
        chunk = os.read(key.fd, 65536)
        if chunk:
            key.data.add(chunk)
        else:
            streams.unregister(key.fileobj)


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def _result(code: int | None, out: _Tail, err: _Tail, started: float, *, timed_out: bool) -> dict[str, Any]:
    result: dict[str, Any] = {
        "exit_code": code,
        "stdout": out.text(),
        "stderr": err.text(),
        "duration_s": round(time.monotonic() - started, 3),
        "stdout_bytes": out.total,
        "stderr_bytes": err.total,
        "timed_out": timed_out,
    }
    if code is not None and code < 0:
        result["signal"] = _signal_name(-code)
    return result


def _exit_reason(code: int, err: _Tail) -> str:
    lines = [line for line in err.text().splitlines() if line.strip()]
    reason = f"command killed by {_signal_name(-code)}" if code < 0 else f"command exited with code {code}"
    return f"{reason}: {lines[-1][:300]}" if lines else reason


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _home() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir or "/"
    except KeyError:
        return "/"


def _env_name_ok(name: str) -> bool:
    return (
        bool(name)
        and len(name) <= 256
        and (name[0].isalpha() or name[0] == "_")
        and name.isascii()
        and all(c.isalnum() or c == "_" for c in name)
    )


def serve_commands(app: Registry, worker_options: WorkerOptions, options: CommandOptions | None = None) -> None:
    """Make a worker of ``app`` run command jobs (what ``--commands`` does).

    Registers the task pgsched.command with the runner and adds the label
    pgsched:command to the labels the worker offers; the queues are the
    caller's to choose (the CLI adds ``commands``).
    """
    if COMMAND_TASK not in app.tasks:
        app.task(name=COMMAND_TASK, queue=COMMAND_QUEUE)(make_handler(options or CommandOptions()))
    if COMMAND_LABEL not in worker_options.labels:
        worker_options.labels = (*worker_options.labels, COMMAND_LABEL)
