"""The LLM side of one asset step: its client when the step's method uses one, and the usage the
step paid for, recorded in the ledger and shown in the step's metadata."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar

from graphrag_pipeline.llm.usage import LLMUsage, open_ledger

log = logging.getLogger("graphrag_pipeline.llm")

# the StepLLMs made by the asset body running now (see usage_recorded_on_failure)
_OPEN_STEPS: ContextVar[list | None] = ContextVar("graphrag_open_llm_steps", default=None)


def current_run_id() -> str | None:
    """The Dagster run this step belongs to (None outside a step, e.g. an asset called in a test)."""
    import dagster as dg

    try:
        return dg.OpExecutionContext.get().run_id
    except dg.DagsterInvariantViolationError:
        return None


class StepLLM:
    def __init__(self, step: str, settings, llm, *, used: bool):
        """``used``: whether the step's method calls the LLM at all (no client is made otherwise;
        ``client`` is also None when no endpoint is configured). A step with a client spends from
        its run's budget (`llm.budget.join_run`: shared by the run's processes when the caches are
        in Postgres)."""
        self.step = step
        self._paths = settings.paths
        self.recorded = False
        self.client = llm.client(settings.paths) if used else None
        steps = _OPEN_STEPS.get()
        if steps is not None and self.client is not None:
            steps.append(self)
        run_id = current_run_id() if self.client is not None else None
        if run_id:
            from graphrag_pipeline.llm import budget

            budget.join_run(run_id, settings.paths)

    def record(self, usage: LLMUsage | None = None) -> LLMUsage:
        """Record the step's usage (by default everything its client did) and return it."""
        if usage is None:
            usage = self.client.usage_snapshot() if self.client else LLMUsage()
        open_ledger(self._paths).record(self.step, usage)
        self.recorded = True
        return usage


@contextmanager
def usage_recorded_on_failure():
    """Around an asset body: when it stops with an exception before its LLM steps recorded their
    usage (a build stopped by a signal cancels the calls in flight, a failure after paid calls), what
    their clients were paid for still goes into the ledger, so `stats` counts every paid call."""
    steps: list[StepLLM] = []
    token = _OPEN_STEPS.set(steps)
    try:
        yield
    except BaseException:
        for step in steps:
            if not step.recorded:
                try:
                    step.record()
                except Exception as exc:  # noqa: BLE001 - the body's own error is the one to raise
                    log.warning("the LLM usage of %s could not be recorded: %s", step.step, exc)
        raise
    finally:
        _OPEN_STEPS.reset(token)


def llm_metadata(usage: LLMUsage) -> dict:
    """The usage as materialization metadata; ``cost_usd`` is a float Dagster plots over time (0.0
    when no call was made; calls at an unknown price are counted in ``llm_unpriced_calls``)."""
    meta = {
        "llm_calls": usage.calls,
        "llm_cache_hits": usage.cache_hits,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cost_usd": float(round(usage.cost_usd, 6)),
    }
    if usage.unpriced_calls:
        meta["llm_unpriced_calls"] = usage.unpriced_calls
    if usage.truncated:  # answers cut at the endpoint's output limit: parsed as far as they go
        meta["llm_truncated_answers"] = usage.truncated
    return meta


def stop_metadata(budget_exceeded: bool) -> dict:
    """What a step failing because the client stopped making calls tells the CLI: the build's
    budget would be passed (``budget_exceeded``) or the endpoint is down (``endpoint_down``)."""
    return {"budget_exceeded": True} if budget_exceeded else {"endpoint_down": True}


USAGE_KEYS = ("llm_calls", "llm_cache_hits", "prompt_tokens", "completion_tokens", "cost_usd", "llm_truncated_answers")


def run_llm_summary(materializations) -> dict[str, float]:
    """A run's LLM usage: the sum over its steps of what `llm_metadata` put in their metadata.
    Each step's totals are repeated on every partition it wrote, so each asset counts once."""
    seen, total = set(), {}
    for mat in materializations:
        if mat.asset_key in seen:
            continue
        seen.add(mat.asset_key)
        for key in USAGE_KEYS:
            if key in mat.metadata:
                total[key] = total.get(key, 0) + mat.metadata[key].value
    return total


def tag_run_with_usage(instance, run_id: str, materializations) -> dict[str, str]:
    """Tag a finished run with its LLM usage (`graphrag/llm_calls`, `graphrag/prompt_tokens`, ...),
    so the UI's run list shows what each run paid for; a run none of whose steps reports LLM usage
    (publishing the index) gets none. Tags, not an asset: the usage belongs to the run, and the
    runs table shows and filters tags."""
    summary = run_llm_summary(materializations)
    if not summary:
        return {}
    tags = {f"graphrag/{k}": (f"{v:.6f}" if isinstance(v, float) else str(v)) for k, v in summary.items()}
    instance.add_run_tags(run_id, tags)
    return tags


@contextmanager
def endpoint_down_fails_the_step(step: StepLLM | None = None, *, after: str = ""):
    """A dead LLM endpoint (its circuit breaker open) or a spent budget fails the step without
    Dagster's retries: each retry would pay the breaker's calls again. So does a call that failed
    after the client's own retries (an endpoint dying between calls fails one call before the
    breaker opens; Dagster's retries tripled the requests). What the step's client spent until then
    is recorded in the ledger. The CLI sees `endpoint_down` / `budget_exceeded` and stops the build.
    after: said after the error (e.g. what was left as it was)."""
    import dagster as dg

    from graphrag_pipeline.llm.client import LLMBudgetExceeded, LLMCancelled, LLMCircuitOpen, LLMError

    try:
        yield
    except LLMCancelled:
        raise  # a stop asked for (a signal): `stoppable` says so
    except LLMError as exc:
        meta = stop_metadata(isinstance(exc, LLMBudgetExceeded)) if isinstance(exc, LLMCircuitOpen) else {}
        if step is not None:
            meta.update(llm_metadata(step.record()))
        description = f"{exc}; {after}" if after else str(exc)
        raise dg.Failure(description=description, metadata=meta, allow_retries=False) from None
