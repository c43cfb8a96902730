"""The limits of a job's values, as Python checks them before a round trip: the one place they are written.

The database is the authority: the functions' checks of a job's values (_job_problem, _check_run_options,
_check_trace_context, run by every writer of pgsched.jobs, its insert trigger included), the CHECK
constraints of the other tables, and _check_resource_limits refuse a bad value whatever wrote it. Python
repeats only what saves a round trip or fails earlier (a task's name at registration, a JobSpec's priority,
the CLI's option ranges), with the numbers and patterns below, never a literal of its own. A value with no
check in Python (a queue name, an idempotency key's or a tenant's length, a concurrency key) is left to the
database, whose error names the value and the rule. ``tests/sql/test_limits.py`` holds these to the
installed schema at their boundaries.
"""

from __future__ import annotations

import re
from typing import Final

# pgsched.jobs.task and schedules.task (rule jobs_task_valid, CHECK schedules_task_valid): a letter or _, then
# letters, digits, _ . : -
TASK_NAME_MAX: Final = 200
TASK_NAME: Final = re.compile(rf"[A-Za-z_][A-Za-z0-9_.:-]{{0,{TASK_NAME_MAX - 1}}}")
# pgsched.jobs.priority (rule jobs_priority_range): higher runs first.
PRIORITY_MIN: Final = -1_000_000
PRIORITY_MAX: Final = 1_000_000
# max_attempts of a job, a task and a schedule (rules jobs_max_attempts_positive, jobs_max_attempts_range, and
# the CHECKs of the same names of tasks and schedules); NULL: the default.
MAX_ATTEMPTS_MIN: Final = 1
MAX_ATTEMPTS_MAX: Final = 1_000_000
# A schedule's misfire cap (CHECK schedules_misfire_cap_range): occurrences run late under misfire 'all'.
MISFIRE_CAP_MAX: Final = 10_000
# A queue's concurrency and key_concurrency limits (CHECK queues_concurrency_range).
QUEUE_CONCURRENCY_MAX: Final = 1_000_000
# A service's or command's resource limits (_check_resource_limits): 0 means none.
MEMORY_LIMIT_MIN: Final = 4  # MiB
MEMORY_LIMIT_MAX: Final = 4_194_304  # MiB (4 TiB)
CPU_LIMIT_MIN: Final = 0.01  # CPUs
CPU_LIMIT_MAX: Final = 1024.0  # CPUs
