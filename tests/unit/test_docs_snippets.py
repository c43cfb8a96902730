"""Snippets of docs/ that users copy work as copied: ini values without comments, wait()'s return value used as
the result, install and run lines that a wheel user can follow."""

from __future__ import annotations

import re
from pathlib import Path

import iniconfig

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_the_pytest_ini_of_testing_md_reads_as_meant() -> None:
    (ini,) = blocks(DOCS / "testing.md", "ini")
    values = dict(iniconfig.IniConfig("pytest.ini", data=ini)["pytest"].items())
    assert values["pgsched_app"] == "myapp.tasks:app", "pytest takes an inline comment as part of the value"
    assert values["pgsched_dsn"] == "postgresql://localhost/myapp_test"


def test_no_snippet_reads_an_attribute_of_what_wait_returns() -> None:
    """wait() returns the job's result itself (the handler's return value), not an object holding it."""
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for block in blocks(path, "python"):
            assert not re.search(r"\.wait(?:_async)?\([^)]*\)\s*\.\w", block), f"{path.name}: {block}"


def test_the_fastapi_docs_install_what_the_example_needs_and_run_what_a_wheel_user_has() -> None:
    text = (DOCS / "fastapi.md").read_text()
    (shell,) = blocks(DOCS / "fastapi.md", "sh")
    example = (ROOT / "examples" / "fastapi_app.py").read_text()
    assert 'scope="function"' in example
    (install,) = [line for line in shell.splitlines() if line.startswith("pip install")]
    assert "'fastapi>=0.121'" in install, "Depends(scope=...) needs FastAPI 0.121"
    assert "examples." not in shell, "the wheel ships no examples/ package: run the file the reader saved"
    assert "uvicorn fastapi_app:api" in shell
    assert "not in the wheel" in text
