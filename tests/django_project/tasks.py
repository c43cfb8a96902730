"""Django tasks, defined as a Django user does (the pgsched worker imports this module at start)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django_tasks import TaskContext, task


class PaymentDeclined(Exception):
    pass


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
def send_welcome(user_id: int, *, template: str = "welcome") -> dict[str, Any]:
    # The task uses Django's ORM connection on the worker too.
    with connection.cursor() as cur:
        cur.execute("SELECT current_database()")
        (database,) = cur.fetchone()
    return {"user": user_id, "template": template, "database": database}


@task
def charge(amount: int) -> None:
    raise PaymentDeclined(f"card declined for {amount}")


@task(takes_context=True)
def which_attempt(context: TaskContext, tag: str) -> dict[str, Any]:
    return {"attempt": context.attempt, "id": context.task_result.id, "tag": tag}


@task
async def async_double(n: int) -> int:
    return 2 * n


@task(backend="retrying", queue_name="retries")
def flaky(marker: str) -> str:
    raise RuntimeError(f"flaky {marker}")
