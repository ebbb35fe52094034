"""The spending limit of one build (GRAPHRAG_MAX_COST_USD), shared by every LLM client of the process.

A CLI build runs all its Dagster runs in its own process (``execute_in_process``), so one
accountant per process holds the spend across the steps and runs of a build; `graphrag-pipeline
build` starts it anew (``start_build``). Runs launched from the UI or the daemon run each step in
its own process (on any machine): when the caches are in Postgres (`llm.pg_store`), every step
process of a run joins the run's account in the database (``join_run``), so the limit holds per
run across its processes; with the SQLite cache it holds per step process. A CLI build with the
caches in Postgres keeps its account there too.

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


class SharedBudgetAccountant:
    """A BudgetAccountant whose spend and reservations are in the cache database (`pg_store.PgBudget`),
    shared by every process that uses the same account, with the same rules. A wait for calls in
    flight polls the database every ``poll_s`` seconds (other processes' settlements are not
    signalled)."""

    def __init__(self, shared, limit_usd: float | None):
        self.shared = shared
        self.limit_usd = limit_usd
        self.account = shared.account

    @property
    def spent_usd(self) -> float:
        return self.shared.state()[0]

    @property
    def reserved_usd(self) -> float:
        return self.shared.state()[1]

    @property
    def refused(self) -> int:
        return self.shared.state()[2]

    def reserve(self, usd: float, *, stopped=lambda: False, poll_s: float = 0.2) -> Refusal | None:
        import time

        while True:
            outcome, spent, reserved = self.shared.try_reserve(usd)
            if outcome == "held":
                return None
            if outcome == "refused" or stopped():
                return Refusal(self.limit_usd, spent, reserved, usd)
            time.sleep(poll_s)

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        self.shared.settle(reserved_usd, actual_usd)


_lock = threading.Lock()
_current: BudgetAccountant | SharedBudgetAccountant | None = None
_build_started = False  # this process's accountant was started by a CLI build (not joined by a step)


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


def _shared(paths, account: str, limit_usd: float | None) -> SharedBudgetAccountant | None:
    """An account in the cache database when the home's caches are in Postgres and a limit is set."""
    if limit_usd is None or paths is None:
        return None
    from graphrag_pipeline.llm.pg_store import PgBudget, cache_target
    from graphrag_pipeline.settings import knowledge_base

    target = cache_target(paths)
    if target is None:
        return None
    return SharedBudgetAccountant(PgBudget(target, knowledge_base(), account, limit_usd), limit_usd)


def start_build(limit_usd: float | None, paths=None) -> BudgetAccountant | SharedBudgetAccountant:
    """A new accountant for a build of this process (the previous spend is forgotten); with
    ``paths`` of a home whose caches are in Postgres, a new account there (``build:<uuid>``)."""
    import uuid

    global _current, _build_started
    accountant = _shared(paths, f"build:{uuid.uuid4()}", limit_usd) or BudgetAccountant(limit_usd)
    with _lock:
        _current, _build_started = accountant, True
    return accountant


def join_run(run_id: str, paths) -> BudgetAccountant | SharedBudgetAccountant:
    """The accountant of a step of the Dagster run ``run_id``: the build's when this process started
    one (a CLI build), else the run's account in the cache database (``run:<run_id>``, shared by
    all the run's step processes) when the caches are in Postgres, else the process's own."""
    global _current
    with _lock:
        if _build_started or (isinstance(_current, SharedBudgetAccountant) and _current.account == f"run:{run_id}"):
            return _current
    from graphrag_pipeline.settings import setting

    accountant = _shared(paths, f"run:{run_id}", setting("GRAPHRAG_MAX_COST_USD"))
    if accountant is None:
        return current()
    with _lock:
        _current = accountant
    return accountant


def worst_case_usd(price: Price, prompt_tokens: int, max_tokens: int | None) -> float:
    return price.cost(prompt_tokens, max_tokens if max_tokens is not None else WORST_COMPLETION_TOKENS)
