"""`pgsched demo --story`: the same bytes on every run, scratch databases cleaned up, and each scene's
claim true in the database the scene left behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import click
import psycopg
import pytest
from psycopg.rows import dict_row

from pgsched.cli.demo import demo
from pgsched.demo.story import SCENES, Story, run_story
from pgsched.demo.story.runner import HEADER, render_scene
from pgsched.demo.story.stage import Stage
from tests.e2e.clirun import ROOT, Result, command, environment, run

pytestmark = pytest.mark.slow


def story(admin_dsn: str, *args: str) -> Result:
    return run("--dsn", admin_dsn, "demo", "--story", *args, timeout=240)


def scratch_databases(admin_dsn: str, prefix: str = "pgsched_story_") -> list[str]:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s) ORDER BY 1", [prefix]
        ).fetchall()
    return [row[0] for row in rows]


@pytest.fixture(scope="module")
def first_run(admin_dsn: str) -> Result:
    result = story(admin_dsn)
    assert result.code == 0, str(result)
    return result


def test_the_story_prints_the_same_text_on_every_run(admin_dsn: str, first_run: Result) -> None:
    second = story(admin_dsn)

    assert second.code == 0, str(second)
    assert second.out == first_run.out
    total = sum(first_run.out.count(mark) for mark in ("✓", "✗"))
    assert first_run.out.endswith(f"{total} of {total} claims hold.\n")
    assert "✗" not in first_run.out
    for number, scene in enumerate(SCENES, 1):
        assert f"Scene {number}. {scene.title}\n" in first_run.out
    assert scratch_databases(admin_dsn) == [], "the scratch databases were not dropped"


def test_one_scene_prints_its_own_part_of_the_story(admin_dsn: str, first_run: Result) -> None:
    result = story(admin_dsn, "--scene", "3")

    assert result.code == 0, str(result)
    head, _, rest = result.out.partition("\nScene 3.")
    assert head == HEADER
    block = "Scene 3." + rest.rsplit("\n\n", 1)[0] + "\n"
    assert "\n" + block + "\n" in first_run.out
    assert "Scene 2." not in result.out
    assert "Scene 4." not in result.out


def test_json_is_the_same_story_as_data(admin_dsn: str, first_run: Result) -> None:
    """Slow (~25 s): plays the whole story a second time (eight scenes in scratch databases) as JSON."""
    result = story(admin_dsn, "--json")

    assert result.code == 0, str(result)
    data = result.json()
    assert data["ok"] is True
    assert [scene["number"] for scene in data["scenes"]] == list(range(1, len(SCENES) + 1))
    lines = first_run.out.splitlines()
    for scene in data["scenes"]:
        for step in scene["steps"]:
            assert datetime.fromisoformat(step["at"]).year == 2099  # the pretend clock, never the real one
            at = datetime.fromisoformat(step["at"]).strftime("%H:%M:%S")
            assert any(line.startswith(f"  {at}") and line.endswith(step["text"]) for line in lines), step
        assert all(claim["holds"] for claim in scene["claims"])
    crash = data["scenes"][2]["steps"]
    claims = [step["values"] for step in crash if step["values"].get("worker") in ("worker-1", "worker-2")]
    assert [(v["worker"], v["attempt"], v["token"]) for v in claims] == [("worker-1", 1, 1), ("worker-2", 2, 2)]
    assert json.loads(story(admin_dsn, "--json", "--scene", "3").out)["scenes"][0] == data["scenes"][2]


def test_usage_errors_and_a_role_that_cannot_create_databases(admin_dsn: str) -> None:
    no_story = run("--dsn", admin_dsn, "demo", "--scene", "2")
    assert no_story.code == 2
    assert "--scene and --keep go with --story" in no_story.err
    assert story(admin_dsn, "--scene", str(len(SCENES) + 1)).code == 2
    (scene_option,) = [p for p in demo.params if p.name == "scene"]
    assert isinstance(scene_option.type, click.IntRange)
    assert scene_option.type.max == len(SCENES)

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS story_nocreatedb")
        conn.execute("CREATE ROLE story_nocreatedb LOGIN NOCREATEDB")
    try:
        params = psycopg.conninfo.conninfo_to_dict(admin_dsn)
        params["user"] = "story_nocreatedb"
        refused = story(psycopg.conninfo.make_conninfo("", **params))
        assert refused.code == 1, str(refused)
        assert "error: the story needs a role that may create databases" in refused.err
        assert "Traceback" not in refused.err
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute("DROP ROLE story_nocreatedb")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_story_drops_its_scratch_databases(admin_dsn: str, signum: int) -> None:
    proc = subprocess.Popen(
        [*command(), "--dsn", admin_dsn, "demo", "--story"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment(),
        cwd=ROOT,
        text=True,
    )
    prefix = f"pgsched_story_{proc.pid}_"
    try:
        deadline = time.monotonic() + 120
        while len(scratch_databases(admin_dsn, prefix)) < 2:  # the template and a scene's database
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the story created no scratch database"
            time.sleep(0.05)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, out
    assert scratch_databases(admin_dsn, prefix) == [], err


# -- each scene's claim, checked in the database it left behind ------------------------------


@pytest.fixture(scope="module")
def kept(admin_dsn: str) -> Iterator[Story]:
    played = run_story(admin_dsn, keep=True)
    try:
        yield played
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            for scene in played.scenes:
                conn.execute(f'DROP DATABASE IF EXISTS "{scene.database}" WITH (FORCE)')


def db(kept: Story, number: int) -> psycopg.Connection[dict[str, Any]]:
    scene = kept.scenes[number - 1]
    assert scene.number == number
    assert scene.dsn is not None
    conn = psycopg.connect(scene.dsn, autocommit=True, row_factory=dict_row)
    conn.execute("SET TIME ZONE 'UTC'")
    return conn


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_the_kept_story_is_the_printed_one(kept: Story, first_run: Result) -> None:
    assert kept.ok
    assert kept.text() == first_run.out
    for scene in kept.scenes:
        assert render_scene(scene) in first_run.out


def test_scene_1_the_job_started_on_the_dot(kept: Story) -> None:
    facts = kept.scenes[0].facts
    with db(kept, 1) as conn:
        job = conn.execute("SELECT * FROM pgsched.job_history WHERE id = %s", [facts["job_id"]]).fetchone()
        claims = conn.execute("SELECT at FROM pgsched.job_timeline WHERE kind = 'claimed'").fetchall()
    assert job is not None
    assert job["state"] == "completed"
    assert job["run_at"] == job["started_at"] == at("2099-03-28T12:05:00")
    assert [c["at"] for c in claims] == [at("2099-03-28T12:05:00")]


def test_scene_2_the_takeover_raised_the_epoch_and_the_old_epoch_is_refused(kept: Story) -> None:
    facts = kept.scenes[1].facts
    assert facts["new_epoch"] > facts["old_epoch"]
    with db(kept, 2) as conn:
        lease = conn.execute("SELECT * FROM pgsched.shard_leases WHERE shard = %s", [facts["shard"]]).fetchone()
        assert lease is not None
        assert (lease["owner"], lease["epoch"]) == ("scanner-b", facts["new_epoch"])
        job = conn.execute("SELECT state FROM pgsched.jobs WHERE id = %s", [facts["job_id"]]).fetchone()
        assert job == {"state": "available"}
        # The dead scanner's write, tried again here: still refused.
        with pytest.raises(psycopg.Error) as refused:
            conn.execute(
                "SELECT * FROM pgsched.scan_shard('scanner-a', %s, %s, p_now => '2099-03-28 12:00:30Z')",
                [facts["shard"], facts["old_epoch"]],
            )
        assert refused.value.sqlstate == "PS409"
        refused_job = conn.execute("SELECT state FROM pgsched.jobs WHERE id = %s", [facts["refused_job_id"]]).fetchone()
        assert refused_job == {"state": "available"}  # promoted by scanner-b, after scanner-a was refused


def test_scene_3_the_refused_completion_changed_nothing_and_the_effect_happened_once(kept: Story) -> None:
    facts = kept.scenes[2].facts
    with db(kept, 3) as conn:
        charges = conn.execute("SELECT * FROM story.charges").fetchall()
        assert [(c["key"], c["token"], c["charged_by"]) for c in charges] == [
            (facts["key"], facts["token"], "worker-2")
        ]
        job = conn.execute("SELECT * FROM pgsched.job_history WHERE id = %s", [facts["job_id"]]).fetchone()
        assert job is not None
        assert (job["state"], job["attempt"], job["lease_token"], job["leased_by"]) == (
            "completed", 2, facts["token"], "worker-2",
        )  # fmt: skip
        assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone() == {"n": 0}
        events = conn.execute("SELECT kind, token FROM pgsched.job_timeline").fetchall()
        assert [(e["kind"], e["token"]) for e in events] == [
            ("claimed", facts["stale_token"]), ("lease_expired", facts["stale_token"]),
            ("claimed", facts["token"]), ("completed", facts["token"]),
        ]  # fmt: skip
        # The stale completion once more: refused, and neither the job nor its trail moves.
        stale = conn.execute(
            "SELECT accepted FROM pgsched.complete(ARRAY[%s]::bigint[], ARRAY[%s]::bigint[],"
            " p_now => '2099-03-28 12:01:00Z')",
            [facts["job_id"], facts["stale_token"]],
        ).fetchone()
        assert stale == {"accepted": False}
        again = conn.execute("SELECT * FROM pgsched.job_history WHERE id = %s", [facts["job_id"]]).fetchone()
        assert again == job
        assert conn.execute("SELECT count(*) AS n FROM pgsched.job_timeline").fetchone() == {"n": 4}


def test_scene_4_one_job_for_the_key(kept: Story) -> None:
    facts = kept.scenes[3].facts
    with db(kept, 4) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM pgsched.jobs) AS active,"
            " (SELECT count(*) FROM pgsched.job_history WHERE idempotency_key = %s AND state = 'completed') AS done",
            [facts["key"]],
        ).fetchone()
        assert counts == {"active": 0, "done": 1}
        again = conn.execute(
            "SELECT pgsched.enqueue('story.welcome', '{\"user\": 42}', 'story', '2099-03-28 13:00:00Z',"
            " idempotency_key => %s) AS id",
            [facts["key"]],
        ).fetchone()
        assert again == {"id": facts["job_id"]}
        assert conn.execute("SELECT count(*) AS n FROM pgsched.jobs").fetchone() == {"n": 0}


def occurrences(conn: psycopg.Connection[dict[str, Any]]) -> dict[str, list[tuple[str, datetime | None]]]:
    """Per schedule: each occurrence's decision, and when its job started if it ran."""
    rows = conn.execute(
        "SELECT o.schedule, o.decision, h.started_at FROM pgsched.schedule_occurrences o"
        " LEFT JOIN pgsched.job_history h ON h.id = o.job_id AND h.state = 'completed' ORDER BY o.schedule, o.fire_at"
    ).fetchall()
    found: dict[str, list[tuple[str, datetime | None]]] = {}
    for row in rows:
        found.setdefault(row["schedule"], []).append((row["decision"], row["started_at"]))
    return found


def test_scene_5_the_spring_gap_moves_or_skips_the_run(kept: Story) -> None:
    with db(kept, 5) as conn:
        found = occurrences(conn)
        active = conn.execute("SELECT count(*) AS n FROM pgsched.jobs WHERE state <> 'scheduled'").fetchone()
    assert found["berlin-gap-run"] == [("fire", at("2099-03-29T01:00:00"))]  # 03:00 CEST, the end of the gap
    assert found["berlin-gap-skip"] == [("skipped_gap", None)]
    assert active == {"n": 0}


def test_scene_6_the_fall_overlap_runs_once_or_twice(kept: Story) -> None:
    with db(kept, 6) as conn:
        found = occurrences(conn)
    assert found["berlin-overlap-once"] == [
        ("fire", at("2099-10-25T00:30:00")),  # 02:30 CEST
        ("skipped_dst_overlap", None),
    ]
    assert found["berlin-overlap-twice"] == [
        ("fire", at("2099-10-25T00:30:00")),  # 02:30 CEST
        ("fire", at("2099-10-25T01:30:00")),  # 02:30 CET
    ]


def test_scene_7_each_misfire_policy_ran_what_it_promises(kept: Story) -> None:
    facts = kept.scenes[6].facts
    with db(kept, 7) as conn:
        rows = conn.execute(
            "SELECT schedule, run_at FROM pgsched.job_history"
            " WHERE state = 'completed' AND run_at > '2099-06-01 09:00Z' AND run_at <= %s ORDER BY schedule, run_at",
            [datetime.fromisoformat(facts["back"])],
        ).fetchall()
    ran: dict[str, list[str]] = {}
    for row in rows:
        ran.setdefault(row["schedule"], []).append(row["run_at"].strftime("%H:%M:%S"))
    assert "every-15-skip" not in ran
    assert ran["every-15-latest"] == ["11:00:00"]
    assert 1 <= len(ran["every-15-all"]) <= 3
    assert ran["every-15-all"][-1] == "11:00:00"
    assert ran == {name: times for name, times in facts["ran"].items() if times}


def test_scene_8_cancel_and_claim_never_both_win(kept: Story) -> None:
    facts = kept.scenes[7].facts
    with db(kept, 8) as conn:
        history = {
            row["id"]: row
            for row in conn.execute("SELECT id, state, attempt, started_at FROM pgsched.job_history").fetchall()
        }
        claimed = {
            row["job_id"] for row in conn.execute("SELECT job_id FROM pgsched.job_timeline WHERE kind = 'claimed'")
        }
    ran, never = history[facts["claimed_then_cancelled"]], history[facts["cancelled_before_claim"]]
    assert (ran["state"], ran["attempt"]) == ("cancelled", 1)
    assert (never["state"], never["attempt"], never["started_at"]) == ("cancelled", 0, None)
    assert claimed == {facts["claimed_then_cancelled"]}


# -- docs/guarantees.md: the SQL it tells a reader to run ---------------------------------------

GUARANTEES = ROOT / "docs" / "guarantees.md"


def guarantee_blocks(kind: str) -> list[tuple[list[int], str]]:
    """The page's ```sql blocks whose first line is ``-- <kind>``, with the scenes of their section."""
    found: list[tuple[list[int], str]] = []
    scenes: list[int] = []
    for part in re.split(r"^## ", GUARANTEES.read_text(), flags=re.MULTILINE)[1:]:
        title = part.splitlines()[0]
        scenes = [int(n) for n in re.findall(r"\d+", title.split(".")[0])] if title.startswith("Scene") else []
        for block in re.findall(r"^```sql\n(.*?)^```", part, flags=re.MULTILINE | re.DOTALL):
            if block.startswith(f"-- {kind}\n"):
                found.append((scenes, block))
    return found


def statements(block: str) -> list[tuple[str, str | None]]:
    """Each statement of a block, with the SQLSTATE its ``-- refused: XXXXX`` comment expects."""
    out: list[tuple[str, str | None]] = []
    current: list[str] = []
    for line in block.splitlines():
        code, _, comment = line.partition("--")
        if not code.strip() and not current:
            continue
        current.append(code)
        if code.rstrip().endswith(";"):
            refused = re.search(r"refused: (\w{5})", comment)
            out.append(("\n".join(current), refused.group(1) if refused else None))
            current = []
    assert not current, f"a statement without its semicolon: {current}"
    return out


def run_block(conn: psycopg.Connection[Any], block: str) -> None:
    for statement, refused in statements(block):
        if refused is None:
            conn.execute(statement.encode())
            continue
        with pytest.raises(psycopg.Error) as error:
            conn.execute(statement.encode())
        assert error.value.sqlstate == refused, statement


@pytest.mark.parametrize(
    ("scenes", "block"), guarantee_blocks("replay"), ids=lambda v: str(v) if isinstance(v, list) else ""
)
def test_the_guarantees_page_replays_each_scene_in_psql(dsn: str, scenes: list[int], block: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        run_block(conn, block)


def test_the_guarantees_page_looks_at_what_each_scene_left(kept: Story) -> None:
    blocks = guarantee_blocks("look")
    assert sorted(n for scenes, _ in blocks for n in scenes) == list(range(1, len(SCENES) + 1))
    assert len(guarantee_blocks("replay")) >= 4
    for scenes, block in blocks:
        for number in scenes:
            with db(kept, number) as conn:
                for statement, _ in statements(block):
                    assert conn.execute(statement.encode()).fetchall(), f"scene {number}: no rows from {statement}"


def test_a_scene_that_fails_leaves_no_scratch_database(admin_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgsched.demo.story import runner

    def breaks(stage: Stage) -> None:
        stage.enqueue("story.report", "report-1")
        raise RuntimeError("the scene broke")

    before = scratch_databases(admin_dsn)
    monkeypatch.setattr(runner, "SCENES", (runner.SCENES[0], runner.Scene("breaks", breaks)))
    with pytest.raises(RuntimeError, match="the scene broke"):
        run_story(admin_dsn)
    assert scratch_databases(admin_dsn) == before
