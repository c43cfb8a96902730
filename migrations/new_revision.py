"""Freeze changes of sql/ into migrations.

    python migrations/new_revision.py "what changed"     # a new revision NNNN_what_changed
    python migrations/new_revision.py --refreeze-initial  # rewrite 0001 from sql/ (before any release only)

A new revision copies, whole, every function/trigger/view file of sql/ whose
content changed since the last revision (they are CREATE OR REPLACE, so the
whole file is the right delta) and opens the .up.sql with a reminder to
hand-write the ALTERs for tables, types and indexes. Its .down.sql restores
the function files as they were at the previous revision (taken from git:
the commit that last wrote the manifest), drops the functions the revision
added, and reminds to hand-write the rest. Hashes of sql/ files as of the
newest revision are kept in migrations/manifest.json.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SQL = ROOT / "sql"
VERSIONS = ROOT / "migrations" / "versions"
MANIFEST = ROOT / "migrations" / "manifest.json"

sys.path.insert(0, str(ROOT))


def sql_hashes() -> dict[str, str]:
    from pgsched.db.schema import install_files

    return {str(p.relative_to(SQL)): hashlib.sha256(p.read_bytes()).hexdigest() for p in install_files()}


def refreeze_initial() -> None:
    from pgsched.db.schema import install_script

    body = install_script().split("\n", 1)[1]
    (VERSIONS / "0001_initial.up.sql").write_text(
        "-- Frozen copy of sql/ as of revision 0001. Never edit: add a revision.\n" + body
    )
    MANIFEST.write_text(json.dumps(sql_hashes(), indent=2, sort_keys=True) + "\n")
    print("rewrote migrations/versions/0001_initial.up.sql from sql/")


_SIGNATURE = re.compile(r"CREATE OR REPLACE FUNCTION (pgsched\.\w+)\((.*?)\)\s*RETURNS", re.DOTALL)


def _split_top_level(text: str) -> list[str]:
    parts, depth, quoted, current = [], 0, False, []
    for char in text:
        if char == "'":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        elif not quoted and depth == 0 and char == ",":
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [p for p in (part.strip() for part in parts) if p]


def identity(sql_text: str) -> str | None:
    """'pgsched.name(type, type)' of the function a file defines: what DROP FUNCTION needs."""
    found = _SIGNATURE.search(sql_text)
    if found is None:
        return None
    params = re.sub(r"--[^\n]*", "", found.group(2))
    types = []
    for param in _split_top_level(params):
        param = re.split(r"\s+DEFAULT\s+|\s*=\s*", param, maxsplit=1, flags=re.IGNORECASE)[0].split()
        mode = param[0].upper() if param else ""
        if mode == "OUT":
            continue
        if mode in ("IN", "INOUT", "VARIADIC"):
            param = param[1:]
        types.append(" ".join(param[1:]) if len(param) > 1 else " ".join(param))
    return f"{found.group(1)}({', '.join(types)})"


def _returns(sql_text: str) -> str:
    found = re.search(r"\)\s*RETURNS\s+(.*?)\s+LANGUAGE", sql_text, re.DOTALL)
    return " ".join(found.group(1).split()) if found else ""


def _previous_text(name: str) -> str | None:
    """sql/NAME as of the commit that last wrote the manifest (the previous revision), or None."""
    commit = subprocess.run(
        ["git", "log", "-1", "--format=%H", "--", str(MANIFEST.relative_to(ROOT))],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    shown = subprocess.run(["git", "show", f"{commit}:sql/{name}"], cwd=ROOT, capture_output=True, text=True)
    return shown.stdout if shown.returncode == 0 else None


def downgrade_text(number: str, message: str, changed: list[str]) -> str:
    down = [f"-- {number} down: {message}", ""]
    manual = []
    for name in changed:
        if not name.startswith("functions/"):
            manual.append(name)
            continue
        new_id = identity((SQL / name).read_text())
        old = _previous_text(name)
        old_id = identity(old) if old else None
        if new_id and (new_id != old_id or (old and _returns(old) != _returns((SQL / name).read_text()))):
            down.append(f"DROP FUNCTION IF EXISTS {new_id};")
        if old:
            down += [f"-- {name} as of the previous revision", old, ""]
    if manual:
        down.insert(2, "-- hand-write the downgrade of: " + ", ".join(manual) + "\n")
    return "\n".join(down) + "\n"


def new_revision(message: str) -> None:
    old = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    new = sql_hashes()
    changed = [name for name, digest in new.items() if old.get(name) != digest]
    if not changed:
        print("sql/ has not changed since the last revision")
        return
    existing = sorted(p.name[:4] for p in VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py"))
    number = f"{int(existing[-1]) + 1:04d}" if existing else "0001"
    previous = existing[-1] if existing else None
    slug = re.sub(r"[^a-z0-9]+", "_", message.lower()).strip("_")[:40] or "change"
    stem = VERSIONS / f"{number}_{slug}"
    up = [f"-- {number}: {message}", ""]
    for name in changed:
        if name.startswith("functions/") or name in ("40_views.sql", "30_triggers.sql"):
            up += [f"-- {name}", (SQL / name).read_text(), ""]
        else:
            up += [f"-- {name} changed: hand-write the ALTER statements for it here.", ""]
    stem.with_suffix(".up.sql").write_text("\n".join(up))
    stem.with_suffix(".down.sql").write_text(downgrade_text(number, message, changed))
    stem.with_suffix(".py").write_text(
        (VERSIONS / "0001_initial.py")
        .read_text()
        .split('revision = "0001"')[0]
        .replace("initial schema: sharded jobs, history, audit events, fenced functions, roles", message)
        .replace("Revision ID: 0001", f"Revision ID: {number}")
        .replace("Revises:", f"Revises: {previous}")
        .replace("from alembic import context, op", "from alembic import op")
        + f'revision = "{number}"\ndown_revision = {json.dumps(previous) if previous else None}\n'
        + "branch_labels = None\ndepends_on = None\n\n"
        'HERE = Path(__file__).with_suffix("")\n\n\n'
        "def upgrade() -> None:\n"
        '    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".up.sql").read_text().encode())\n\n\n'
        "def downgrade() -> None:\n"
        '    op.get_bind().connection.driver_connection.execute(HERE.with_suffix(".down.sql").read_text().encode())\n'
    )
    MANIFEST.write_text(json.dumps(new, indent=2, sort_keys=True) + "\n")
    print(f"wrote {stem.name}.py/.up.sql/.down.sql with {len(changed)} changed file(s): review the .up.sql")


if __name__ == "__main__":
    if sys.argv[1:] == ["--refreeze-initial"]:
        refreeze_initial()
    elif len(sys.argv) == 2 and sys.argv[1].strip():
        new_revision(sys.argv[1])
    else:
        raise SystemExit(__doc__)
