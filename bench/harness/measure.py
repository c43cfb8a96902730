"""One measurement in a fresh process: ``python -m bench.harness.measure REQUEST.json RESULT.json``.

The orchestrator writes a request (probe the systems, install one system's
schema, or run one case) and reads the result file back; stdout and stderr
go to the case's log. Keeping every measurement in its own interpreter means
no state, cache, pool or thread leaks from one system into the next.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def _probe(request: dict[str, Any]) -> dict[str, Any]:
    """Capabilities of the requested systems (all of them by default), as this interpreter finds them."""
    import platform

    from bench.systems import SYSTEMS, get_system

    caps = {name: get_system(name).probe() for name in request.get("systems") or SYSTEMS}
    for found in caps.values():
        if "versions" in found:
            found["interpreter"] = platform.python_version()
    return caps


def _install(request: dict[str, Any]) -> dict[str, Any]:
    from bench.systems import get_system

    system = get_system(request["system"])
    how = asyncio.run(system.install(request["dsn"], request["caps"]))
    return {"how": how}


def _case(request: dict[str, Any]) -> dict[str, Any]:
    from bench.harness.options import Options
    from bench.scenarios import SCENARIOS, Case, CaseEnv
    from bench.systems import get_system

    case = Case(**request["case"])
    env = CaseEnv(
        dsn=request["dsn"],
        opts=Options.from_json(request["opts"]),
        caps=request["caps"],
        work_dir=Path(request["work_dir"]),
    )
    env.work_dir.mkdir(parents=True, exist_ok=True)
    return SCENARIOS[case.scenario].run(case, get_system(case.system), env)


def main(argv: list[str]) -> int:
    """Run the request in ``argv[0]``; write the result to ``argv[1]``."""
    request_path, result_path = Path(argv[0]), Path(argv[1])
    # Let SIGTERM unwind through the finally blocks (which stop worker processes).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    request = json.loads(request_path.read_text(encoding="utf-8"))
    started = time.perf_counter()
    try:
        kind = request["kind"]
        if kind == "probe":
            payload = _probe(request)
        elif kind == "install":
            payload = _install(request)
        elif kind == "case":
            payload = _case(request)
        else:
            raise ValueError(f"unknown request kind {kind!r}")
        result: dict[str, Any] = {"status": "ok", "result": payload}
    except Exception as exc:
        traceback.print_exc()
        result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    result["wall_s"] = time.perf_counter() - started
    result_path.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
