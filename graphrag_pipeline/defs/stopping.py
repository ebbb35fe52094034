"""Asset bodies stop for good when the build was asked to stop (see interrupts.py).

Dagster retries an interrupted step that has a retry policy; after SIGINT/SIGTERM to a CLI build the
interruption becomes a failure without retries, every LLM client of the process is cancelled, and a
step that has not started yet does not start. (The wrapper every asset body has also tells the
progress listener which step runs, and pushes what the body wrote to a home on object storage before
Dagster reports the step done: see PipelineSettings.push_written.)"""

from __future__ import annotations

import functools
import signal

import dagster as dg

from graphrag_pipeline import interrupts, progress
from graphrag_pipeline.defs.llm_step import current_run_id, usage_recorded_on_failure
from graphrag_pipeline.llm.client import cancel_all_clients


def _stopped(signo: int) -> dg.Failure:
    cancel_all_clients()
    return dg.Failure(
        description=f"stopped by {signal.Signals(signo).name}",
        allow_retries=False,
        metadata={"stopped_by": signal.Signals(signo).name},
    )


# runs whose termination reached one of their steps: their later steps do not start (the in-process
# executor does not look for interrupts between steps; Dagster's single SIGINT is spent in one step)
_TERMINATED_RUNS: set[str] = set()


def _terminated() -> dg.Failure:
    cancel_all_clients()
    if (run_id := current_run_id()) is not None:
        _TERMINATED_RUNS.add(run_id)
    return dg.Failure(
        description="stopped: the run was terminated (from the UI, the API or the run launcher)",
        allow_retries=False,
        metadata={"stopped_by": "run termination"},
    )


def stoppable(fn):
    @functools.wraps(fn)
    def body(*args, **kwargs):
        if signo := interrupts.requested():
            raise _stopped(signo)
        if _TERMINATED_RUNS and current_run_id() in _TERMINATED_RUNS:
            raise _terminated()
        try:
            # the step a build's progress display names; what its LLM calls cost is recorded however it ends
            with progress.step(fn.__name__), usage_recorded_on_failure():
                result = fn(*args, **kwargs)
            settings = kwargs.get("settings")
            if hasattr(settings, "push_written"):  # a home on object storage: in the bucket before the step is done
                settings.push_written()
            return result
        except BaseException as exc:
            if signo := interrupts.requested():
                raise _stopped(signo) from None
            if isinstance(exc, (KeyboardInterrupt, dg.DagsterExecutionInterruptedError)):
                # a run terminated outside a CLI build (the daemon's runs, the UI's): Dagster raises
                # its interruption in the step, which the step's retry policy would retry (paying
                # the LLM calls again), finishing the run as if nothing had been asked
                raise _terminated() from None
            raise

    return body
