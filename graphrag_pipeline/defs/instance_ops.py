"""Keeping the Dagster instance of a home usable after crashes: runs whose process is gone, pool
slots they still hold, and a bounded, visible wait for a slot of the `llm` pool - before a run, and
(sleeping, stoppable) inside a run's in-process executor."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import datetime

import dagster as dg

from graphrag_pipeline import interrupts

CLI_TAG = "graphrag/cli"  # runs started by `graphrag-pipeline build` (in its own process)
PID_TAG = "graphrag/pid"
HOST_TAG = "graphrag/host"
KB_TAG = "graphrag/kb"  # the knowledge base (GRAPHRAG_KB) a build run is for: homes can share one instance
LLM_POOL = "llm"

_IN_PROGRESS = [
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.CANCELING,
    dg.DagsterRunStatus.NOT_STARTED,
]


def cli_run_tags() -> dict[str, str]:
    from graphrag_pipeline.settings import knowledge_base

    return {CLI_TAG: "build", PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname(), KB_TAG: knowledge_base()}


def alone_since(instance: dg.DagsterInstance, since: datetime) -> Callable[[], bool]:
    """A check for storage.store.DocStats: whether no run but this build process's own has been in
    progress on `instance` since `since` (a run of the daemon or of the UI may have written
    documents' files meanwhile; the build lock keeps out only other builds)."""
    pid, host = str(os.getpid()), socket.gethostname()

    def own(run: dg.DagsterRun) -> bool:
        tags = run.tags
        return tags.get(CLI_TAG) == "build" and tags.get(PID_TAG) == pid and tags.get(HOST_TAG) == host

    def check() -> bool:
        recent = instance.get_runs(filters=dg.RunsFilter(updated_after=since))
        running = instance.get_runs(filters=dg.RunsFilter(statuses=_IN_PROGRESS))
        return all(own(run) for run in (*recent, *running))

    return check


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _build_runs_in_progress(instance: dg.DagsterInstance):
    """The runs started by a `build` on this host that are still in progress."""
    host = socket.gethostname()
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=_IN_PROGRESS)):
        if run.tags.get(CLI_TAG) == "build" and run.tags.get(HOST_TAG) == host:
            yield run


def recover_dead_runs(instance: dg.DagsterInstance, *, home_locked: bool = True) -> list[str]:
    """Mark failed the runs a `build` process left in progress when it died (kill -9, power loss) and
    free the pool slots they hold; free the slots of any run that is no longer in progress.

    With the home's build lock held no other build of this home runs, so an in-progress build run of
    this host whose process is gone (or is not a build any more) is dead. The lock says nothing
    about another knowledge base's builds on a shared instance (runs tagged with another
    GRAPHRAG_KB, or untagged ones of the default before the tag existed): theirs count as dead
    only when their process is gone. Runs started elsewhere (the UI, the daemon) are left to
    Dagster's run monitoring. Returns one message per repair."""
    from graphrag_pipeline.settings import DEFAULT_KB, knowledge_base

    messages = []
    kb = knowledge_base()
    for run in _build_runs_in_progress(instance):
        tags = run.tags
        pid = int(tags.get(PID_TAG) or 0)
        locked = home_locked and tags.get(KB_TAG, DEFAULT_KB) == kb
        if pid == os.getpid() or (not locked and pid and _alive(pid)):
            continue
        reason = f"the build process that ran it (pid {pid}) is gone"
        instance.report_run_failed(run, message=f"Marked failed by a later build: {reason}.")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        messages.append(
            f"run {run.run_id[:8]} ({run.job_name}) was left in progress: {reason}; marked failed, its pool slots freed"
        )
    storage = instance.event_log_storage
    try:
        holders = storage.get_concurrency_run_ids()
    except NotImplementedError:
        holders = set()
    for run_id in sorted(holders):
        run = instance.get_run_by_id(run_id)
        if run is None or run.status not in _IN_PROGRESS:
            storage.free_concurrency_slots_for_run(run_id)
            messages.append(f"pool slots held by run {run_id[:8]}, which is no longer running, were freed")
    return messages


def cancel_own_runs(instance: dg.DagsterInstance, reason: str) -> list[str]:
    """Mark canceled the runs of this build process still in progress (a signal can land while
    Dagster sets a run up or writes its events, outside the handlers that end it), and free their
    pool slots: the UI does not show them running until the next build recovers them. The run ids."""
    pid = str(os.getpid())
    done = []
    for run in _build_runs_in_progress(instance):
        if run.tags.get(PID_TAG) == pid:
            instance.report_run_canceled(run, message=reason)
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            done.append(run.run_id)
    return done


def pool_holders(instance: dg.DagsterInstance, pool: str = LLM_POOL) -> tuple[int, list[str]]:
    """(free slots, run ids holding slots) of a pool; free is -1 when the pool has no limit."""
    storage = instance.event_log_storage
    try:
        info = storage.get_concurrency_info(pool)
    except NotImplementedError:
        return -1, []
    limit = info.slot_count or instance.global_op_concurrency_default_limit
    if not limit:
        return -1, []
    holders = sorted({slot.run_id for slot in info.claimed_slots})
    return max(0, limit - len(info.claimed_slots)), holders


def wait_for_pool(instance: dg.DagsterInstance, pool: str = LLM_POOL, *, timeout_s: float = 600.0, say=print) -> None:
    """Wait (sleeping, interruptible) until `pool` has a free slot, saying once which runs hold it;
    raise TimeoutError with that explanation after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    announced = False
    while True:
        free, holders = pool_holders(instance, pool)
        # a stop that landed in the query above may have been swallowed on its way out: SQLAlchemy
        # catches (and logs) an exception raised while it closes a connection; the signal is on record
        if (signo := interrupts.requested()) is not None:
            raise interrupts.Stop(signo)
        if free != 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"no slot of the '{pool}' pool became free in {timeout_s:.0f}s; it is held by run(s) "
                f"{', '.join(h[:8] for h in holders)} (see the Dagster UI); try again later"
            )
        if not announced:
            say(
                f"  waiting for a slot of the '{pool}' pool, held by run(s) {', '.join(h[:8] for h in holders)} "
                f"(at most {timeout_s:.0f}s; Ctrl-C stops)"
            )
            announced = True
        if (signo := interrupts.wait(1.0)) is not None:
            raise interrupts.Stop(signo)


_SAY = [print]  # where install_sleeping_slot_wait's message goes (the last caller's `say`)
SLOT_POLL_S = 0.5  # how often a step waiting for a pool slot inside a run looks again (Dagster throttles its queries)


def install_sleeping_slot_wait(say=None) -> None:
    """Make a run executed in this process (`execute_in_process`, the CLI's way) sleep while a step
    waits for a pool slot, and stop that wait when the build is asked to stop.

    `wait_for_pool` runs before each run, but the slot can still be taken between it and the step's
    claim (another run's step was assigned it, or the run's first steps ran meanwhile). Then Dagster
    1.13's in-process executor loops on `ActiveExecution.sleep_til_ready`, which sleeps 0 s while a
    claim is pending (the pending-claim interval is min(0, ...) - never positive), at 100 % CPU; and
    during a run Dagster's signal handlers only note SIGINT/SIGTERM, which this loop never checks, so
    the build could not be stopped. The replacement sleeps up to SLOT_POLL_S, says once per run which
    steps wait, and raises Dagster's interruption when interrupts.py saw a stop: the run ends
    interrupted (its pending claims withdrawn) and the CLI reports the stop. Only the in-process
    executor calls this method. Idempotent; the last `say` given is used (print without one). The
    definitions install it too (definitions.py, without `say`), for the daemon's runs, which execute
    in process (sensors.py): there a termination Dagster noted stops the wait the same way."""
    from dagster._core.errors import DagsterExecutionInterruptedError
    from dagster._core.execution.plan.active import ActiveExecution
    from dagster._utils.interrupts import check_captured_interrupt, pop_captured_interrupt

    if say is not None:
        _SAY[0] = say
    if getattr(ActiveExecution.sleep_til_ready, "graphrag_sleeping", False):
        return

    def sleep_til_ready(self) -> None:
        context = self._instance_concurrency_context
        waiting = context.pending_claim_steps() if context is not None else []
        if waiting and not getattr(self, "_graphrag_announced", False):
            self._graphrag_announced = True
            _SAY[0](f"  waiting for a pool slot for step(s) {', '.join(sorted(waiting))} (Ctrl-C stops)")
        pause = self.sleep_interval()  # > 0 only while a step waits for its retry
        signo = interrupts.wait(min(pause, SLOT_POLL_S) if pause > 0 else SLOT_POLL_S)
        if signo is None and check_captured_interrupt():  # a run worker (no interrupts.install()) asked to stop
            signo = 15
        if signo is not None:
            pop_captured_interrupt()  # Dagster noted it too: its teardown would raise it again
            run_id, instance = getattr(context, "_run_id", None), getattr(context, "_instance", None)
            run = instance.get_run_by_id(run_id) if run_id and instance is not None else None
            if run is not None:  # Dagster then records the run as canceled, not as failed unexpectedly
                instance.report_run_canceling(run, message="Stop asked for while waiting for a pool slot.")
            raise DagsterExecutionInterruptedError(f"stopped by signal {signo} while waiting for a pool slot")

    sleep_til_ready.graphrag_sleeping = True
    ActiveExecution.sleep_til_ready = sleep_til_ready
