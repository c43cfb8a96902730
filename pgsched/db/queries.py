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
ROTATE_READY: Final = QUERIES["rotate_ready"]
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
DASHBOARD_SCANNERS: Final = QUERIES["dashboard_scanners"]
DASHBOARD_SHARD_LEASES: Final = QUERIES["dashboard_shard_leases"]
DASHBOARD_QUEUE_JOBS: Final = QUERIES["dashboard_queue_jobs"]
DASHBOARD_JOB_RUNS: Final = QUERIES["dashboard_job_runs"]
DASHBOARD_DEAD_LETTERS: Final = QUERIES["dashboard_dead_letters"]
DASHBOARD_DEAD_LETTER_COUNTS: Final = QUERIES["dashboard_dead_letter_counts"]
DASHBOARD_OCCURRENCES: Final = QUERIES["dashboard_occurrences"]
DASHBOARD_HISTORY: Final = QUERIES["dashboard_history"]
DASHBOARD_NOW: Final = QUERIES["dashboard_now"]
DASHBOARD_SEARCH_JOBS: Final = QUERIES["dashboard_search_jobs"]
DASHBOARD_BULK_PREVIEW: Final = QUERIES["dashboard_bulk_preview"]
DASHBOARD_BULK_CANCEL: Final = QUERIES["dashboard_bulk_cancel"]
DASHBOARD_BULK_RETRY: Final = QUERIES["dashboard_bulk_retry"]
DASHBOARD_PAUSE_QUEUE: Final = QUERIES["dashboard_pause_queue"]
DASHBOARD_RESUME_QUEUE: Final = QUERIES["dashboard_resume_queue"]
DASHBOARD_PAUSE_SCHEDULE: Final = QUERIES["dashboard_pause_schedule"]
DASHBOARD_RESUME_SCHEDULE: Final = QUERIES["dashboard_resume_schedule"]
DOCTOR_SERVER: Final = QUERIES["doctor_server"]
DOCTOR_XMIN_HOLDERS: Final = QUERIES["doctor_xmin_holders"]
DOCTOR_IDLE_TRANSACTIONS: Final = QUERIES["doctor_idle_transactions"]
DOCTOR_JOBS: Final = QUERIES["doctor_jobs"]
DOCTOR_WORKERS: Final = QUERIES["doctor_workers"]
DOCTOR_SCANNERS: Final = QUERIES["doctor_scanners"]
DOCTOR_ORPHANED_SHARDS: Final = QUERIES["doctor_orphaned_shards"]
DOCTOR_RESOURCE_LIMITS: Final = QUERIES["doctor_resource_limits"]
DOCTOR_SCHEDULES: Final = QUERIES["doctor_schedules"]
DOCTOR_HELD_EVENTS: Final = QUERIES["doctor_held_events"]
DOCTOR_OLDEST_XID: Final = QUERIES["doctor_oldest_xid"]
DOCTOR_NOTIFY_QUEUE: Final = QUERIES["doctor_notify_queue"]
ENQUEUE_NAMED: Final = QUERIES["enqueue_named"]
ENQUEUE_SERVICE_NAMED: Final = QUERIES["enqueue_service_named"]
LAST_POSITIONS: Final = QUERIES["last_positions"]
LIST_JOBS: Final = QUERIES["list_jobs"]
JOB_TIMELINE: Final = QUERIES["job_timeline"]
CANCEL_JOB: Final = QUERIES["cancel_job"]
RETRY_JOB: Final = QUERIES["retry_job"]
DEAD_LETTERS: Final = QUERIES["dead_letters"]
COUNT_DEAD_LETTERS: Final = QUERIES["count_dead_letters"]
DEAD_LETTER_IDS: Final = QUERIES["dead_letter_ids"]
RETRY_EACH: Final = QUERIES["retry_each"]
CONFIGURE_QUEUE: Final = QUERIES["configure_queue"]
TASK_NAMES: Final = QUERIES["task_names"]
UPSERT_SCHEDULE: Final = QUERIES["upsert_schedule"]
UPSERT_SCHEDULE_CLI: Final = QUERIES["upsert_schedule_cli"]
SCHEDULE_STATUS: Final = QUERIES["schedule_status"]
SCHEDULE: Final = QUERIES["schedule"]
DUE_SCHEDULES: Final = QUERIES["due_schedules"]
QUEUE_STATS: Final = QUERIES["queue_stats"]
QUEUE_TOTALS: Final = QUERIES["queue_totals"]
WORKERS_LIVE: Final = QUERIES["workers_live"]
READ_ONLY_SNAPSHOT: Final = QUERIES["read_only_snapshot"]
SNAPSHOT_QUEUES: Final = QUERIES["snapshot_queues"]
WORKERS_LIVE_COUNT: Final = QUERIES["workers_live_count"]
XMIN_HOLDER: Final = QUERIES["xmin_holder"]
DEAD_TUPLES: Final = QUERIES["dead_tuples"]
AVAILABLE_QUEUES: Final = QUERIES["available_queues"]
ACQUIRE_SHARDS: Final = QUERIES["acquire_shards"]
ACQUIRE_IDLE_SHARDS: Final = QUERIES["acquire_idle_shards"]
RELEASE_SHARDS: Final = QUERIES["release_shards"]
NEXT_DUE: Final = QUERIES["next_due"]
SCAN_SHARD: Final = QUERIES["scan_shard"]
ADD_OCCURRENCES: Final = QUERIES["add_occurrences"]
SCHEDULE_ERROR: Final = QUERIES["schedule_error"]
