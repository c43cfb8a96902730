"""Resource limits of command runs: a cgroup per run (v2, or the v1 memory and cpu hierarchies), else rlimits.

``mechanism()`` finds, once per process, how this worker can limit a run:

- **cgroup v2** where the unified hierarchy has the ``memory`` and ``cpu``
  controllers and the worker may create groups below its own
  (``<own>/pgsched/run-...`` with ``memory.max``, ``memory.swap.max`` 0 and
  ``cpu.max``);
- **cgroup v1** where the ``memory`` (and ``cpu``) hierarchies are mounted and
  writable (``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes``,
  ``cpu.cfs_quota_us``), each group made below the worker's own;
- else **rlimit**: ``RLIMIT_AS`` for memory (address space, which is more
  than resident memory: allocations past it fail, nothing is killed) and
  ``RLIMIT_CPU`` of cpu_limit x timeout CPU seconds when the job has a
  timeout (a rate is not enforced). What it cannot enforce is logged once.

A run gets its limits from the runner through the supervisor
(``_supervise.py``): the variable PGSCHED_LIMITS (set last, so a job's own
env cannot name it; the supervisor removes it) lists the groups' process
files to join and the rlimits to set in the program's process before it
execs, and a pipe on which the supervisor reports the program's rusage (CPU
seconds, peak resident memory). After the run the groups say the peak memory
and whether the kernel's OOM killer ended the program; processes left in them
(daemons that left the process group) are killed and the groups removed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV = "PGSCHED_LIMITS"
COMMAND_LABEL = "pgsched:command"  # commands.COMMAND_LABEL (commands imports this module)
CPU_PERIOD_US = 100_000
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The limits of one run: MiB of memory and CPUs (None: unlimited)."""

    memory_mib: int | None = None
    cpus: float | None = None

    @classmethod
    def from_args(cls, memory_limit: Any, cpu_limit: Any) -> RunLimits:
        """From a command job's args (enqueue_command checked them; anything else is no limit)."""
        memory = memory_limit if isinstance(memory_limit, int) and not isinstance(memory_limit, bool) else None
        cpus = cpu_limit if isinstance(cpu_limit, int | float) and not isinstance(cpu_limit, bool) else None
        return cls(
            memory_mib=memory if memory is not None and memory > 0 else None,
            cpus=float(cpus) if cpus is not None and math.isfinite(cpus) and cpus > 0 else None,
        )


@dataclass(frozen=True, slots=True)
class _Group:
    """One cgroup of a run: its directory and the version of its hierarchy."""

    path: Path
    version: int
    controller: str  # 'memory' or 'cpu' (v1), 'unified' (v2)


class Mechanism:
    """How this process limits runs: ``name`` is 'cgroup v2', 'cgroup v1' or 'rlimit'."""

    def __init__(self, name: str, bases: Mapping[str, tuple[Path, int]], detail: str) -> None:
        self.name = name
        self._bases = dict(bases)  # controller -> (pgsched's folder in it, version)
        self.detail = detail
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    @property
    def controllers(self) -> tuple[str, ...]:
        return tuple(sorted(self._bases))

    def describe(self) -> str:
        return f"{self.name} ({self.detail})"

    def open(self, limits: RunLimits, run: str, timeout_s: float | None) -> Run:
        """Prepare one run's groups and rlimits; the caller passes ``Run.env`` and ``Run.pass_fds`` to Popen."""
        groups: list[_Group] = []
        rlimits: dict[str, int] = {}
        try:
            memory = self._bases.get("memory") or self._bases.get("unified")
            if memory is not None:
                groups.append(self._make(memory, "memory", run, limits))
            else:
                if limits.memory_mib is not None:
                    rlimits["as"] = limits.memory_mib * MIB
                    self._once("memory", "memory limits are RLIMIT_AS (address space): allocations past it fail")
            cpu = self._bases.get("cpu") or self._bases.get("unified")
            if limits.cpus is not None:
                if cpu is not None and cpu is not memory:
                    groups.append(self._make(cpu, "cpu", run, limits))
                elif cpu is None:
                    if timeout_s:
                        rlimits["cpu"] = max(1, math.ceil(limits.cpus * timeout_s))
                    self._once(
                        "cpu",
                        "cpu_limit is not enforced as a rate without a cgroup; RLIMIT_CPU caps a run with a timeout "
                        "at cpu_limit x timeout CPU seconds",
                    )
        except OSError:
            for group in groups:
                _remove(group)
            raise
        return Run(self, limits, groups, rlimits)

    def confine(self, pid: int, limits: RunLimits, run: str) -> Run:
        """Put a running process (a handler child of --pool process) under limits: into the run's groups, else
        its rlimits set from outside (prlimit). Its usage and the removal of the groups come with ``finish``."""
        confined = self.open(limits, run, None)
        confined.started()
        try:
            for group in confined.groups:
                _write(group.path / "cgroup.procs", str(pid))
            if "as" in confined.rlimits:
                resource.prlimit(pid, resource.RLIMIT_AS, (confined.rlimits["as"], confined.rlimits["as"]))
        except OSError:
            confined.finish(None)
            raise
        return confined

    def sweep(self) -> int:
        """Remove the groups of runs whose worker died (a SIGKILLed worker leaves its groups behind); returns how
        many. Groups are named run-<job>-<token>-<worker pid>; those of live workers are left alone."""
        removed = 0
        for folder, version in set(self._bases.values()):
            try:
                children = [p for p in folder.iterdir() if p.is_dir() and p.name.startswith("run-")]
            except OSError:
                continue
            for path in children:
                pid = path.name.rsplit("-", 1)[-1]
                if pid.isdigit() and not _alive(int(pid)):
                    _remove(_Group(path, version, "memory" if version == 1 else "unified"))
                    removed += 1
        return removed

    def _make(self, base: tuple[Path, int], controller: str, run: str, limits: RunLimits) -> _Group:
        folder, version = base
        group = _Group(folder / run, version, controller if version == 1 else "unified")
        group.path.mkdir(exist_ok=True)
        if version == 2:
            if limits.memory_mib is not None:
                _write(group.path / "memory.max", str(limits.memory_mib * MIB))
                _write(group.path / "memory.swap.max", "0", optional=True)
            if limits.cpus is not None:
                _write(group.path / "cpu.max", f"{max(1000, round(limits.cpus * CPU_PERIOD_US))} {CPU_PERIOD_US}")
        elif controller == "memory" and limits.memory_mib is not None:
            _write(group.path / "memory.limit_in_bytes", str(limits.memory_mib * MIB))
            _write(group.path / "memory.memsw.limit_in_bytes", str(limits.memory_mib * MIB), optional=True)
            _write(group.path / "memory.swappiness", "0", optional=True)
        elif controller == "cpu" and limits.cpus is not None:
            _write(group.path / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(group.path / "cpu.cfs_quota_us", str(max(1000, round(limits.cpus * CPU_PERIOD_US))))
        return group

    def _once(self, what: str, message: str) -> None:
        with self._lock:
            if what in self._warned:
                return
            self._warned.add(what)
        log.warning("resource limits: %s (%s)", message, self.describe())


class Run:
    """One run's limits: the environment and descriptor for the supervisor, then the usage and the cleanup."""

    def __init__(self, mechanism: Mechanism, limits: RunLimits, groups: list[_Group], rlimits: dict[str, int]) -> None:
        self.mechanism = mechanism
        self.limits = limits
        self.groups = groups
        self.rlimits = rlimits
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        spec = {"procs": [str(g.path / "cgroup.procs") for g in groups], "rlimits": rlimits, "report": self._write_fd}
        self.env = {ENV: json.dumps(spec)}
        self.pass_fds = (self._write_fd,)

    def started(self) -> None:
        """The supervisor has its copy of the report pipe (or never started): close ours."""
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1

    def finish(self, exit_code: int | None) -> dict[str, Any]:
        """After the run: peak memory, CPU seconds, whether it was killed for memory; the groups removed."""
        self.started()
        report = self._report()
        usage: dict[str, Any] = {
            "memory_limit_mib": self.limits.memory_mib,
            "cpu_limit": self.limits.cpus,
            "limits": self.mechanism.name,
            "cpu_s": report.get("cpu_s"),
            "peak_memory_mib": None,
            "oom_killed": False,
        }
        peak = report.get("maxrss_kb")
        if isinstance(peak, int | float):
            usage["peak_memory_mib"] = round(peak / 1024, 1)
        for group in self.groups:
            if group.controller in ("memory", "unified"):
                found = _peak_bytes(group)
                if found is not None:
                    usage["peak_memory_mib"] = round(found / MIB, 1)
                usage["oom_killed"] = exit_code == -signal.SIGKILL and _oom_kills(group) > 0
        for group in self.groups:
            _remove(group)
        return usage

    def _report(self) -> dict[str, Any]:
        chunks = []
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                chunk = os.read(self._read_fd, 4096)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            if not chunk:
                break
            chunks.append(chunk)
        os.close(self._read_fd)
        try:
            found = json.loads(b"".join(chunks) or b"{}")
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}


def _write(path: Path, value: str, *, optional: bool = False) -> None:
    try:
        path.write_text(value)
    except OSError:
        if not optional:
            raise


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _peak_bytes(group: _Group) -> int | None:
    text = _read(group.path / ("memory.peak" if group.version == 2 else "memory.max_usage_in_bytes"))
    return int(text) if text and text.strip().isdigit() else None


def _oom_kills(group: _Group) -> int:
    text = _read(group.path / ("memory.events" if group.version == 2 else "memory.oom_control")) or ""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    if group.version == 1:  # kernels before 4.13 do not count OOM kills: a hit limit and a SIGKILL say it
        return int((_read(group.path / "memory.failcnt") or "0").strip() or 0)
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(group: _Group) -> None:
    """Kill what is left in the group (processes that left the program's process group), then remove it."""
    deadline = time.monotonic() + 2.0
    while True:
        for pid in (_read(group.path / "cgroup.procs") or "").split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError, ValueError):
                pass
        try:
            group.path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                log.warning("could not remove cgroup %s: %s", group.path, exc)
                return
            time.sleep(0.02)


# -- finding the mechanism ----------------------------------------------------------


_found: Mechanism | None = None
_found_lock = threading.Lock()


def mechanism() -> Mechanism:
    """How this process limits runs (found once, then kept)."""
    global _found
    with _found_lock:
        if _found is None:
            _found = detect()
            swept = _found.sweep()
            if swept:
                log.info("resource limits: removed %d cgroups left by workers that died", swept)
        return _found


def resource_limits(labels: Sequence[str]) -> str | None:
    """What a worker offering these labels registers: its mechanism if it runs command jobs, else None."""
    return mechanism().describe() if COMMAND_LABEL in labels else None


def detect() -> Mechanism:
    """Try cgroup v2, then v1, else rlimits: the first under which a group can be made and removed."""
    own = _own_groups()
    mounts = _cgroup_mounts()
    v2 = _try_v2(mounts, own)
    if v2 is not None:
        return v2
    v1 = _try_v1(mounts, own)
    if v1 is not None:
        return v1
    return Mechanism("rlimit", {}, "no writable cgroup: RLIMIT_AS, RLIMIT_CPU")


def _own_groups() -> dict[str, str]:
    """This process's group per v1 controller, and '' for v2 (from /proc/self/cgroup)."""
    found: dict[str, str] = {}
    for line in (_read(Path("/proc/self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            found[controller] = parts[2]
    return found


def _cgroup_mounts() -> list[tuple[Path, str, set[str]]]:
    """(mount point, 'cgroup' or 'cgroup2', options) of each cgroup file system."""
    found = []
    for line in (_read(Path("/proc/self/mounts")) or "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            found.append((Path(fields[1]), fields[2], set(fields[3].split(","))))
    return found


def _pgsched_folder(mount: Path, own: str) -> Path | None:
    """pgsched's folder below this process's own group in a hierarchy, made if missing; None if not writable."""
    for base in (mount / own.lstrip("/"), mount):
        if not base.is_dir():
            continue
        folder = base / "pgsched"
        try:
            folder.mkdir(exist_ok=True)
            probe = folder / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            probe.rmdir()
        except OSError:
            continue
        return folder
    return None


def _try_v2(mounts: list[tuple[Path, str, set[str]]], own: dict[str, str]) -> Mechanism | None:
    for point, kind, _options in mounts:
        if kind != "cgroup2":
            continue
        available = set((_read(point / "cgroup.controllers") or "").split())
        if not {"memory", "cpu"} <= available:
            continue
        folder = _pgsched_folder(point, own.get("", "/"))
        if folder is None:
            continue
        # The parent must hand the controllers down; pgsched's folder holds no process, so it can.
        try:
            (folder.parent / "cgroup.subtree_control").write_text("+memory +cpu")
        except OSError:
            pass
        try:
            (folder / "cgroup.subtree_control").write_text("+memory +cpu")
        except OSError:
            continue
        return Mechanism("cgroup v2", {"unified": (folder, 2)}, f"memory, cpu under {folder}")
    return None


def _try_v1(mounts: list[tuple[Path, str, set[str]]], own: dict[str, str]) -> Mechanism | None:
    bases: dict[str, tuple[Path, int]] = {}
    for controller, needed in (("memory", "memory.limit_in_bytes"), ("cpu", "cpu.cfs_quota_us")):
        for point, kind, options in mounts:
            if kind != "cgroup" or controller not in options:
                continue
            folder = _pgsched_folder(point, own.get(controller, "/"))
            if folder is not None and (folder / needed).exists():
                bases[controller] = (folder, 1)
                break
    if "memory" not in bases:
        return None
    where = ", ".join(f"{c} under {bases[c][0]}" for c in sorted(bases))
    mechanism = Mechanism("cgroup v1", bases, where)
    if "cpu" not in bases:
        mechanism.detail += "; no writable cpu hierarchy: cpu_limit not enforced as a rate"
    return mechanism
