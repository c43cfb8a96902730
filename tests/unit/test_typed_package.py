"""The package is typed: mypy --strict on application code sees tasks and handles as pgsched types them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

USER_CODE = """
from pgsched import App

app = App()


@app.task(queue="emails")
def send_welcome(user_id: int) -> str:
    return str(user_id)


reveal_type(send_welcome)
send_welcome.enqueue(42).wait(timeout="soon")
"""


def test_mypy_strict_on_user_code_sees_typed_tasks(tmp_path: Path) -> None:
    """About 5 s on a busy machine: mypy reads pgsched and its dependencies once, with a cold cache."""
    (tmp_path / "user.py").write_text(USER_CODE)

    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )

    out = proc.stdout + proc.stderr
    assert "py.typed" not in out, out
    assert "untyped" not in out, out
    assert 'Revealed type is "pgsched.core.task.Task[[user_id: int], str]"' in out, out
    assert '"wait" of "JobHandle" has incompatible type "str"' in out, "a misuse is caught: " + out
