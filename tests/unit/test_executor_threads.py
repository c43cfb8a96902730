"""How many handler threads the executor starts (pgsched.runtime.executor): as many as sync jobs need at once."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from pgsched import App
from pgsched.core.job import JobContext
from pgsched.core.outcome import Kind, Outcome
from pgsched.runtime.executor import Executor
from tests.unit.test_held import _ctx

pytestmark = pytest.mark.unit

DEADLINE = 10.0


def _handler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pgsched-handler-") and t.is_alive()]


def _job(job_id: int, task: str) -> JobContext:
    ctx = _ctx(job_id, token=job_id)
    ctx.job = replace(ctx.job, task=task)
    return ctx


class _Done:
    def __init__(self) -> None:
        self.outcomes: dict[int, Outcome] = {}
        self.changed = threading.Condition()

    def __call__(self, ctx: JobContext, outcome: Outcome) -> None:
        with self.changed:
            self.outcomes[ctx.id] = outcome
            self.changed.notify_all()

    def wait_for(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.outcomes) >= n, timeout=DEADLINE), self.outcomes


def _executor(app: App, concurrency: int, done: _Done) -> Executor:
    return Executor(concurrency, resolve=app.tasks.get, done=done)


def test_coroutine_handlers_at_concurrency_1000_start_no_handler_thread() -> None:
    app = App(dsn="postgresql:///unused", name="threads")

    @app.task(name="co")
    async def co() -> None:
        return None

    before = len(_handler_threads())
    done = _Done()
    ex = _executor(app, 1000, done)
    ex.start()
    try:
        ex.submit_many([_job(i, "co") for i in range(1, 201)])
        done.wait_for(200)
        assert all(o.kind is Kind.COMPLETE for o in done.outcomes.values())
        assert len(_handler_threads()) == before  # the event loop ran them all: no thread per slot
    finally:
        ex.shutdown()


def test_the_thread_pool_grows_to_as_many_sync_jobs_as_run_at_once_and_no_further() -> None:
    app = App(dsn="postgresql:///unused", name="threads")
    together = threading.Barrier(4, timeout=DEADLINE)

    @app.task(name="meet")
    def meet() -> None:
        together.wait()  # passes only once four handlers run at the same time, each on a thread of its own

    @app.task(name="quick")
    def quick() -> None:
        return None

    before = {t.ident for t in _handler_threads()}
    done = _Done()
    ex = _executor(app, 8, done)
    ex.start()
    try:
        assert not {t.ident for t in _handler_threads()} - before  # none started before a sync job needs one
        ex.submit_many([_job(i, "meet") for i in range(1, 5)])
        done.wait_for(4)
        assert all(o.kind is Kind.COMPLETE for o in done.outcomes.values()), done.outcomes
        ours = {t.ident for t in _handler_threads()} - before
        assert len(ours) == 4
        # one at a time, the idle threads take the jobs: no new thread
        for i in range(5, 25):
            ex.submit_many([_job(i, "quick")])
            done.wait_for(i)
        assert {t.ident for t in _handler_threads()} - before == ours
    finally:
        ex.shutdown()


def test_sync_jobs_beyond_the_idle_threads_all_run_when_the_pool_is_full() -> None:
    app = App(dsn="postgresql:///unused", name="threads")
    release = threading.Event()
    running = threading.Semaphore(0)

    @app.task(name="hold")
    def hold() -> None:
        running.release()
        assert release.wait(DEADLINE)

    done = _Done()
    ex = _executor(app, 3, done)
    ex.start()
    try:
        ex.submit_many([_job(i, "hold") for i in range(1, 10)])  # 3 run, 6 wait for a slot
        for _ in range(3):
            assert running.acquire(timeout=DEADLINE)
        release.set()
        done.wait_for(9)
        assert sorted(done.outcomes) == list(range(1, 10))
        assert all(o.kind is Kind.COMPLETE for o in done.outcomes.values())
    finally:
        ex.shutdown()
