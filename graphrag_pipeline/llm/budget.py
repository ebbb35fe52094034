"""The spending limit of one build (GRAPHRAG_MAX_COST_USD), shared by every LLM client of the process.

A CLI build runs all its Dagster runs in its own process (``execute_in_process``), so one
accountant per process holds the spend across the steps and runs of a build; `graphrag-pipeline
build` starts it anew (``start_build``). Runs launched from the UI run each step in its own
process: there the limit holds per step process.

Before each request a client reserves the call's worst case - its prompt tokens plus
``max_tokens`` (or ``WORST_COMPLETION_TOKENS`` when the call sets none) completion tokens at the
price - and the request is only made when what was spent, what the calls in flight reserved and
this reservation stay within the limit. When the answer arrives the reservation becomes the real
cost. So concurrent calls can never together pass the limit (unless a model writes more than
``WORST_COMPLETION_TOKENS`` tokens unasked), and a refused call costs nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from graphrag_pipeline.llm.pricing import Price

WORST_COMPLETION_TOKENS = 16384  # a call without max_tokens: the longest answer of current chat models (gpt-4o-mini)


@dataclass
class Refusal:
    limit_usd: float
    spent_usd: float
    reserved_usd: float
    needed_usd: float


class BudgetAccountant:
    """Spend so far against an optional limit (None: no limit, but spend is still counted)."""

    def __init__(self, limit_usd: float | None = None):
        self.limit_usd = limit_usd
        self.spent_usd = 0.0
        self.reserved_usd = 0.0
        self.refused = 0
        self._cond = threading.Condition()

    def reserve(self, usd: float, *, stopped=lambda: False, poll_s: float = 0.5) -> Refusal | None:
        """Hold ``usd`` for a call about to be made; a Refusal (nothing held) when what was spent
        and this call could pass the limit. When only the calls in flight stand in the way, wait
        for them to settle (their reservations are worst cases, most of which is given back): a
        budget is never declared spent by reservations alone. ``stopped()`` ends a wait early
        (the caller then checks why); it is polled every ``poll_s`` seconds."""
        with self._cond:
            while True:
                if self.limit_usd is not None and self.spent_usd + usd > self.limit_usd + 1e-12:
                    self.refused += 1
                    return Refusal(self.limit_usd, self.spent_usd, self.reserved_usd, usd)
                if (
                    self.limit_usd is None
                    or self.reserved_usd == 0
                    or self.spent_usd + self.reserved_usd + usd <= self.limit_usd + 1e-12
                ):
                    self.reserved_usd += usd
                    return None
                if stopped():
                    return Refusal(self.limit_usd, self.spent_usd, self.reserved_usd, usd)
                self._cond.wait(poll_s)

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        """The call reserved ``reserved_usd`` and cost ``actual_usd`` (0 when it failed)."""
        with self._cond:
            self.reserved_usd = max(0.0, self.reserved_usd - reserved_usd)
            self.spent_usd += actual_usd
            self._cond.notify_all()


_lock = threading.Lock()
_current: BudgetAccountant | None = None


def current() -> BudgetAccountant:
    """The process's accountant: the one the build started, else one with GRAPHRAG_MAX_COST_USD
    as its limit (a step process of a run launched from the UI). Only the clients of pipeline steps
    consult it (`LLMClient(budgeted=True)`): queries and `serve` are not builds."""
    global _current
    with _lock:
        if _current is None:
            from graphrag_pipeline.settings import setting

            _current = BudgetAccountant(setting("GRAPHRAG_MAX_COST_USD"))
        return _current


def start_build(limit_usd: float | None) -> BudgetAccountant:
    """A new accountant for a build of this process (the previous spend is forgotten)."""
    global _current
    with _lock:
        _current = BudgetAccountant(limit_usd)
    return _current


def worst_case_usd(price: Price, prompt_tokens: int, max_tokens: int | None) -> float:
    return price.cost(prompt_tokens, max_tokens if max_tokens is not None else WORST_COMPLETION_TOKENS)
