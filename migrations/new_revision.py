"""Freeze changes of sql/ into migrations.

    python migrations/new_revision.py "what changed"     # a new revision NNNN_what_changed
    python migrations/new_revision.py --refreeze-initial  # rewrite 0001 from sql/ (before any release only)

A new revision copies, whole, every function/trigger/view file of sql/ whose
content changed since the last revision (they are CREATE OR REPLACE, so the
whole file is the right delta) and opens the .up.sql with a reminder to
hand-write the ALTERs for tables, types and indexes. Hashes of sql/ files as
of the newest revision are kept in migrations/manifest.json.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SQL = ROOT / "sql"
VERSIONS = ROOT / "migrations" / "versions"
MANIFEST = ROOT / "migrations" / "manifest.json"

sys.path.insert(0, str(ROOT))


def sql_hashes() -> dict[str, str]:
    from pgsched.schema import install_files

    return {str(p.relative_to(SQL)): hashlib.sha256(p.read_bytes()).hexdigest() for p in install_files()}


def refreeze_initial() -> None:
    from pgsched.schema import install_script

    body = install_script().split("\n", 1)[1]
    (VERSIONS / "0001_initial.up.sql").write_text(
        "-- Frozen copy of sql/ as of revision 0001. Never edit: add a revision.\n" + body
    )
    MANIFEST.write_text(json.dumps(sql_hashes(), indent=2, sort_keys=True) + "\n")
    print("rewrote migrations/versions/0001_initial.up.sql from sql/")


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
    stem.with_suffix(".down.sql").write_text(f"-- {number}: hand-write the downgrade of '{message}'.\n")
    stem.with_suffix(".py").write_text(
        (VERSIONS / "0001_initial.py")
        .read_text()
        .split('revision = "0001"')[0]
        .replace("initial schema: sharded jobs, history, audit events, fenced functions, roles", message)
        .replace("Revision ID: 0001", f"Revision ID: {number}")
        .replace("Revises:", f"Revises: {previous}")
        + f'revision = "{number}"\ndown_revision = {previous!r}\nbranch_labels = None\ndepends_on = None\n\n'
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
