"""Sustained load: minutes at a fixed enqueue rate near capacity; does anything drift?

1. Capacity: the same worker (``pgsched worker`` at its defaults, one process)
   drains ``sustained_probe_jobs`` pre-enqueued jobs; its rate is the capacity.
2. Load: a producer process enqueues at ``sustained_load`` x that rate for
   ``sustained_s`` seconds (``pgsched.enqueue_many`` every 10 ms, the args
   built in the database so the producer takes little CPU), while the worker
   (listening, housekeeping on, no scanner) runs the jobs.
3. Sampling, from the measuring process:
   - every second, a side connection times one ``pgsched.claim(…, 10, …)``
     inside a transaction it rolls back (the claim the worker makes, without
     taking its jobs); pg_stat_statements is not loaded on the private server;
   - every 10 s: the worker's own mean claim time over the window (its
     ``pgsched_claim_seconds`` histogram, scraped from ``--metrics-port``),
     jobs enqueued and handled, due jobs waiting, and ``n_dead_tup`` /
     ``n_live_tup`` / autovacuum runs summed over pgsched.jobs' partitions.

The table shows the series per minute (per 10 s when the run is shorter than
5 minutes) and a verdict comparing the last window, and the worst one, with
the first.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import socket
import statistics
import time
import urllib.request
from dataclasses import replace
from typing import Any

from bench.harness import db
from bench.harness.options import Options
from bench.harness.workers import WorkerPool
from bench.scenarios.base import (
    Case,
    CaseEnv,
    Metrics,
    RowSummary,
    Scenario,
    fmt_ratio,
    percentile,
    status_cell,
    table,
)
from bench.scenarios.drain import measure_drain
from bench.systems import pgsched_sql
from bench.systems.base import Caps, DrainConfig, System

_SPAWN = multiprocessing.get_context("spawn")

WORKER = DrainConfig("defaults", "pgsched worker (defaults: concurrency 10), 1 process, no scanner", 1, {"args": []})
TICK_S = 0.01
SAMPLE_S = 10.0
#: After the load stops, how long the worker gets to finish what is still queued.
CATCH_UP_S = 120.0
#: Flat: every window's claim times within this factor of the first window's, and the last
#: window's peak of dead tuples within DEAD_FACTOR of the first's.
FLAT_FACTOR = 1.5
DEAD_FACTOR = 2.0

ENQUEUE = (
    "SELECT count(*) FROM pgsched.enqueue_many(array_fill('noop'::text, ARRAY[%s]),"
    " ARRAY(SELECT jsonb_build_object('i', g) FROM generate_series(%s::integer, %s::integer) g))"
)
TABLE_STATS = """
SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(n_live_tup), 0), coalesce(sum(autovacuum_count), 0)
FROM pg_stat_user_tables
WHERE schemaname = 'pgsched' AND relname ~ '^jobs_s[0-9]+$'
"""
DEPTH = "SELECT count(*) FROM pgsched.jobs WHERE state = 'available'"


def _produce(dsn: str, rate: float, stop: Any, sent: Any, ready: Any) -> None:
    """Producer process: enqueue at ``rate`` jobs/s until ``stop`` is set; ``sent`` counts."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        ready.set()
        origin = time.monotonic()
        total = 0
        while not stop.is_set():
            k = min(5000, int(rate * (time.monotonic() - origin)) - total)
            if k > 0:
                conn.execute(ENQUEUE, (k, total, total + k - 1), prepare=True).fetchone()
                total += k
                sent.value = total
            time.sleep(TICK_S)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _claim_histogram(port: int) -> tuple[float, float] | None:
    """The worker's pgsched_claim_seconds (sum, count), or None if it cannot be read."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    found = dict(re.findall(r"^pgsched_claim_seconds_(sum|count)(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE))
    if "sum" not in found or "count" not in found:
        return None
    return float(found["sum"]), float(found["count"])


class SustainedScenario(Scenario):
    """A time series under a fixed load near capacity."""

    name = "sustained"
    title = "Sustained load near capacity: claim latency and dead tuples over time"
    description = "minutes at a fixed enqueue rate (70% of the measured drain rate): claim timing, dead tuples"
    primary = "probe_p50_first"
    higher_is_better = False
    summary_metrics = (
        "capacity",
        "rate",
        "probe_p50_ratio",
        "probe_p50_worst_ratio",
        "worker_claim_ratio",
        "worker_claim_worst_ratio",
        "dead_ratio",
    )
    long = True
    max_rounds = 1

    def sizes(self, opts: Options) -> str:
        return (
            f"{opts.sustained_s / 60:g} min at {opts.sustained_load:.0%} of the capacity measured first "
            f"(a drain of {opts.sustained_probe_jobs:,} jobs by the same worker); one round. "
            "*probe claim*: pgsched.claim(10) timed every second from a side connection (rolled back); "
            "*worker claim*: the worker's own mean claim time (its metrics); dead/live tuples: "
            "pg_stat_user_tables summed over pgsched.jobs' partitions, sampled every 10 s"
        )

    def progress(self, metrics: Metrics) -> str:
        return f"{metrics['rate']:,.0f} jobs/s for {metrics['seconds']:.0f} s: {metrics['verdict'][:60]}"

    def timeout_s(self, opts: Options) -> float:
        return opts.sustained_s + 600.0

    def cases(self, system: System, caps: Caps, opts: Options) -> list[Case]:
        if system.name != "pgsched":
            return []
        return [
            Case(
                scenario=self.name,
                system=system.name,
                id="defaults",
                label=WORKER.label,
                group="sustained",
                params={"seconds": opts.sustained_s, "load": opts.sustained_load},
            )
        ]

    def run(self, case: Case, system: System, env: CaseEnv) -> Metrics:
        opts = env.opts
        seconds = float(case.params["seconds"])
        capacity = measure_drain(system, env, WORKER, opts.sustained_probe_jobs)["jobs_per_s"]
        rate = capacity * float(case.params["load"])
        port = _free_port()
        config = replace(WORKER, settings={"args": ["--metrics-port", str(port)], "listen": True})
        stop, ready = _SPAWN.Event(), _SPAWN.Event()
        sent = _SPAWN.Value("q", 0, lock=False)
        producer = _SPAWN.Process(target=_produce, args=(env.dsn, rate, stop, sent, ready), name="bench-producer")
        samples: list[dict[str, Any]] = []
        with db.connect(env.dsn) as conn, db.connect(env.dsn) as probe:
            db.reset(conn, system.truncate_tables)
            notes = db.settle(conn, system.truncate_tables)
            pool = WorkerPool(system.name, env.dsn, config, env.caps, env.work_dir)
            try:
                pool.start()
                pool.go()
                time.sleep(1.0)  # the worker connects, registers and starts listening
                producer.start()
                if not ready.wait(60):
                    raise RuntimeError("the producer did not start")
                started = time.monotonic()
                last = {"t": 0.0, "sent": 0, "done": 0, "hist": _claim_histogram(port)}
                probes: list[float] = []
                k = 0
                while (elapsed := time.monotonic() - started) < seconds:
                    k += 1
                    time.sleep(max(0.0, started + k - time.monotonic()))
                    pool.check_alive()
                    if not producer.is_alive():
                        raise RuntimeError(f"the producer exited with {producer.exitcode}")
                    probe.execute("BEGIN")
                    t0 = time.perf_counter()
                    probe.execute(pgsched_sql.CLAIM, ("bench-probe", 10, k), prepare=True).fetchall()
                    probes.append((time.perf_counter() - t0) * 1000.0)
                    probe.execute("ROLLBACK")
                    if k % int(SAMPLE_S) == 0:
                        sample = self._sample(conn, pool, port, sent.value, time.monotonic() - started, last, probes)
                        samples.append(sample)
                        print(json.dumps(sample), flush=True)  # the measurement's log keeps the series
                        probes = []
            finally:
                stop.set()
                producer.join(10)
                if producer.is_alive():
                    producer.terminate()
                    producer.join(5)
                enqueued = int(sent.value)
                ended = time.monotonic()
                while pool.done() < enqueued and time.monotonic() < ended + CATCH_UP_S:
                    time.sleep(0.05)
                caught_up_s = time.monotonic() - ended
                pool.stop()
            finished = int(db.scalar(conn, system.finished_sql))
            waiting = int(db.scalar(conn, "SELECT count(*) FROM pgsched.jobs"))
        # Nothing lost: every job enqueued is either finished or still in the queue.
        if finished + waiting != enqueued:
            raise RuntimeError(f"{enqueued:,} jobs enqueued, {finished:,} finished and {waiting:,} still queued")
        if waiting:
            notes.append(
                f"{waiting:,} jobs were still queued {CATCH_UP_S:.0f} s after the load stopped (none lost: "
                f"{finished:,} finished + {waiting:,} queued = {enqueued:,} enqueued)"
            )
        metrics = self._summary(samples, capacity, rate, elapsed, enqueued, notes)
        metrics |= {"left_queued": waiting, "catch_up_s": caught_up_s}
        return metrics

    @staticmethod
    def _sample(
        conn: Any,
        pool: WorkerPool,
        port: int,
        sent: int,
        t: float,
        last: dict[str, Any],
        probes: list[float],
    ) -> dict[str, Any]:
        dead, live, autovacuums = conn.execute(TABLE_STATS).fetchone()
        depth = int(db.scalar(conn, DEPTH))
        done = pool.done()
        hist = _claim_histogram(port)
        worker_claim = None
        if hist and last["hist"] and hist[1] > last["hist"][1]:
            worker_claim = (hist[0] - last["hist"][0]) / (hist[1] - last["hist"][1]) * 1000.0
        window = t - last["t"]
        sample = {
            "t": round(t, 1),
            "enqueued_per_s": (sent - last["sent"]) / window,
            "handled_per_s": (done - last["done"]) / window,
            "probe_ms": probes,
            "worker_claim_ms": worker_claim,
            "worker_claims": None if not hist or not last["hist"] else hist[1] - last["hist"][1],
            "worker_claim_sum_s": None if not hist or not last["hist"] else hist[0] - last["hist"][0],
            "dead_tup": int(dead),
            "live_tup": int(live),
            "autovacuums": int(autovacuums),
            "depth": depth,
        }
        last.update(t=t, sent=sent, done=done, hist=hist)
        return sample

    @staticmethod
    def _summary(
        samples: list[dict[str, Any]], capacity: float, rate: float, seconds: float, enqueued: int, notes: list[str]
    ) -> Metrics:
        if len(samples) < 2:
            raise RuntimeError("too few samples for a time series")
        width = 60.0 if seconds >= 300 else SAMPLE_S
        windows = _windows(samples, width)
        first, last = windows[0], windows[-1]

        def ratio(key: str) -> float | None:
            a, b = first.get(key), last.get(key)
            return None if not a or b is None else b / a

        probe_ratio = ratio("probe_p50")
        worker_ratio = ratio("worker_claim_ms")
        dead_ratio = ratio("dead_max")
        worst_probe = _worst(windows, "probe_p50")
        worst_worker = _worst(windows, "worker_claim_ms")
        keeping_up = last["depth_end"] <= max(100.0, rate * 2)
        bounded = dead_ratio is None or dead_ratio <= DEAD_FACTOR
        flat = (
            all(r is None or r <= FLAT_FACTOR for r in (probe_ratio, worker_ratio, worst_probe[0], worst_worker[0]))
            and bounded
            and keeping_up
        )
        slowest = min(windows, key=lambda w: w["handled_per_s"])
        verdict = (
            f"{'flat' if flat else 'NOT flat'} (last vs first {width:g} s window; flat = claim times within "
            f"{FLAT_FACTOR:g}× of the first window throughout, peak dead tuples within {DEAD_FACTOR:g}×, and "
            "keeping up): probe claim p50 last/first "
            f"{fmt_ratio(probe_ratio)}, worst/first {fmt_ratio(worst_probe[0])} ({worst_probe[1]}); worker mean "
            f"claim last/first {fmt_ratio(worker_ratio)}, worst/first {fmt_ratio(worst_worker[0])} "
            f"({worst_worker[1]}); handled/s at least {slowest['handled_per_s']:,.0f} "
            f"({slowest['start']:g}–{slowest['end']:g} s) for {rate:,.0f} enqueued/s; peak dead tuples last/first "
            f"{fmt_ratio(dead_ratio)} ({first['dead_max']:,} → {last['dead_max']:,}); due jobs waiting at the end: "
            f"{last['depth_end']:,} ({'keeping up' if keeping_up else 'falling behind'})"
        )
        return {
            "capacity": capacity,
            "rate": rate,
            "seconds": seconds,
            "enqueued": enqueued,
            "probe_p50_first": first.get("probe_p50"),
            "probe_p50_ratio": probe_ratio,
            "probe_p50_worst_ratio": worst_probe[0],
            "worker_claim_worst_ratio": worst_worker[0],
            "worker_claim_ratio": worker_ratio,
            "dead_ratio": dead_ratio,
            "flat": flat,
            "verdict": verdict,
            "window_s": width,
            "windows": windows,
            "samples": samples,
            "notes": notes,
        }

    def raw_reference(self, case: Case, metric: str, same_round: list[tuple[Case, Metrics]]) -> float | None:
        return None

    def render(self, rows: list[RowSummary], opts: Options) -> list[str]:
        lines: list[str] = []
        for row in rows:
            status = status_cell(row)
            if status or not row.results:
                lines += [f"{row.title}, {row.case.label}: {status or 'no result'}"]
                continue
            m = row.results[0]
            lines += [
                f"{row.title}, {row.case.label}: capacity {m['capacity']:,.0f} jobs/s (drain), "
                f"load {m['rate']:,.0f} jobs/s for {m['seconds']:.0f} s ({m['enqueued']:,} jobs); after the load "
                f"stopped, {m['catch_up_s']:.0f} s to finish the rest"
                + (f" ({m['left_queued']:,} still queued then)." if m["left_queued"] else "."),
                "",
            ]
            out = []
            for w in m["windows"]:
                out.append(
                    [
                        f"{w['start']:g}–{w['end']:g}",
                        f"{w['enqueued_per_s']:,.0f}",
                        f"{w['handled_per_s']:,.0f}",
                        _ms(w.get("probe_p50")),
                        _ms(w.get("probe_p99")),
                        _ms(w.get("worker_claim_ms")),
                        f"{w['dead_max']:,}",
                        f"{w['live_max']:,}",
                        str(w["autovacuums"]),
                        f"{w['depth_max']:,}",
                    ]
                )
            lines += table(
                [
                    "seconds",
                    "enqueued/s",
                    "handled/s",
                    "probe claim p50 ms",
                    "probe claim p99 ms",
                    "worker mean claim ms",
                    "dead tuples (peak)",
                    "live tuples (peak)",
                    "autovacuums",
                    "due waiting (peak)",
                ],
                out,
            )
            lines += ["", f"**Verdict** — {m['verdict']}."]
        return lines


def _worst(windows: list[dict[str, Any]], key: str) -> tuple[float | None, str]:
    """The largest ratio of a window's ``key`` to the first window's, and which window it was."""
    base = windows[0].get(key)
    values = [(w[key] / base, f"{w['start']:g}–{w['end']:g} s") for w in windows if base and w.get(key) is not None]
    return max(values) if values else (None, "—")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _windows(samples: list[dict[str, Any]], width: float) -> list[dict[str, Any]]:
    """The 10-second samples grouped into windows of ``width`` seconds."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for sample in samples:
        groups.setdefault(int((sample["t"] - 0.5) // width), []).append(sample)
    out = []
    previous_autovacuums = 0
    for index in sorted(groups):
        group = groups[index]
        probes = [p for s in group for p in s["probe_ms"]]
        claims = sum(s["worker_claims"] or 0 for s in group)
        claim_sum = sum(s["worker_claim_sum_s"] or 0.0 for s in group)
        autovacuums = group[-1]["autovacuums"]
        out.append(
            {
                "start": index * width,
                "end": (index + 1) * width,
                "enqueued_per_s": statistics.fmean(s["enqueued_per_s"] for s in group),
                "handled_per_s": statistics.fmean(s["handled_per_s"] for s in group),
                "probe_p50": percentile(probes, 50) if probes else None,
                "probe_p99": percentile(probes, 99) if probes else None,
                "worker_claim_ms": claim_sum / claims * 1000.0 if claims else None,
                "dead_max": max(s["dead_tup"] for s in group),
                "live_max": max(s["live_tup"] for s in group),
                "autovacuums": autovacuums - previous_autovacuums,
                "depth_max": max(s["depth"] for s in group),
                "depth_end": group[-1]["depth"],
            }
        )
        previous_autovacuums = autovacuums
    return out
