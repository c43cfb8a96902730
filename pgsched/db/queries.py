"""The SQL statements the Python side sends, named blocks of the .sql files under db/sql/, loaded once.

Each file holds the queries of one concern (enqueue.sql, work.sql, jobs.sql, ...); each query is a block that
starts with ``-- name: <name>``, and a name is unique across the files.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final, LiteralString

SQL_DIR: Final = Path(__file__).with_name("sql")


def _load() -> dict[str, LiteralString]:
    found: dict[str, LiteralString] = {}
    for path in sorted(SQL_DIR.glob("*.sql")):
        text: str = path.read_text()
        for block in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
            name, _, body = block.partition("\n")
            lines = [line for line in body.splitlines() if line.strip() and not line.startswith("--")]
            query: str = "\n".join(lines).rstrip(";")
            if name.strip() in found:
                raise RuntimeError(f"query {name.strip()!r} is named twice (again in {path.name})")
            found[name.strip()] = query
    return found


QUERIES: Final = _load()
ENQUEUE: Final = QUERIES["enqueue"]
ENQUEUE_MANY: Final = QUERIES["enqueue_many"]
ENQUEUE_COMMAND: Final = QUERIES["enqueue_command"]
ENQUEUE_SERVICE: Final = QUERIES["enqueue_service"]
CLAIM: Final = QUERIES["claim"]
CLAIM_AND_START: Final = QUERIES["claim_and_start"]
START: Final = QUERIES["start"]
NEXT_START: Final = QUERIES["next_start"]
CANCELS_REQUESTED: Final = QUERIES["cancels_requested"]
HEARTBEAT: Final = QUERIES["heartbeat"]
COMPLETE: Final = QUERIES["complete"]
FAIL: Final = QUERIES["fail"]
SNOOZE: Final = QUERIES["snooze"]
RELEASE: Final = QUERIES["release"]
PASS_OVER: Final = QUERIES["pass_over"]
CANCEL: Final = QUERIES["cancel"]
RETRY: Final = QUERIES["retry"]
PROMOTE_DUE: Final = QUERIES["promote_due"]
EXPIRE_LEASES: Final = QUERIES["expire_leases"]
MAINTAIN: Final = QUERIES["maintain"]
ROLLUP_QUEUE_HISTORY: Final = QUERIES["rollup_queue_history"]
REGISTER_TASKS: Final = QUERIES["register_tasks"]
REGISTER_WORKER: Final = QUERIES["register_worker"]
UNREGISTER_WORKER: Final = QUERIES["unregister_worker"]
DUE_QUEUES: Final = QUERIES["due_queues"]
HELD_BACK: Final = QUERIES["held_back"]
UNSERVED_QUEUES: Final = QUERIES["unserved_queues"]
IS_KNOWN_QUEUE: Final = QUERIES["is_known_queue"]
VACUUM_CANDIDATES: Final = QUERIES["vacuum_candidates"]
READ_EVENTS: Final = QUERIES["read_events"]
EVENTS_POSITION: Final = QUERIES["events_position"]
JOB_STATUS: Final = QUERIES["job_status"]
TASK_RESULT: Final = QUERIES["task_result"]
SHOW_JOB: Final = QUERIES["show_job"]
DASHBOARD_JOB: Final = QUERIES["dashboard_job"]
QUEUE_POLICIES: Final = QUERIES["queue_policies"]
UNSERVED_LABELS: Final = QUERIES["unserved_labels"]
UNSERVED_TASKS: Final = QUERIES["unserved_tasks"]
WORKER_POOLS: Final = QUERIES["worker_pools"]
REPORT_PROGRESS: Final = QUERIES["report_progress"]
RECORD_STEP: Final = QUERIES["record_step"]
JOB_STEPS: Final = QUERIES["job_steps"]
JOB_PROGRESS: Final = QUERIES["job_progress"]
JOB_LIMITS: Final = QUERIES["job_limits"]
DEPENDENCY_OUTCOMES: Final = QUERIES["dependency_outcomes"]
