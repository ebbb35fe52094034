"""Counting what LLM work a step did (calls made, answers served from cache, tokens, USD)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class LLMUsage:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0  # of the calls made at a known price
    unpriced_calls: int = 0  # calls made at an unknown price (their cost is not in cost_usd)
    # answers the endpoint cut at its output limit (finish_reason "length"), fresh or from the cache;
    # said in the steps' metadata, not kept in the ledger
    truncated: int = 0

    def add(self, other: LLMUsage) -> None:
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost_usd += other.cost_usd
        self.unpriced_calls += other.unpriced_calls
        self.truncated += other.truncated

    def minus(self, other: LLMUsage) -> LLMUsage:
        """What was used since ``other`` (an earlier snapshot of the same counter)."""
        return LLMUsage(
            self.calls - other.calls,
            self.cache_hits - other.cache_hits,
            self.prompt_tokens - other.prompt_tokens,
            self.completion_tokens - other.completion_tokens,
            self.cost_usd - other.cost_usd,
            self.unpriced_calls - other.unpriced_calls,
            self.truncated - other.truncated,
        )

    def row(self) -> tuple:
        """The counters in the ledger's column order (`_COLUMNS`)."""
        return tuple(getattr(self, c) for c in _COLUMNS)

    def to_dict(self) -> dict[str, int | float]:
        out = asdict(self)
        out["cost_usd"] = round(self.cost_usd, 6)
        if not self.truncated:  # not kept in the ledger: totals read from it never have any
            del out["truncated"]
        return out

    def describe_cost(self) -> str:
        """``$0.0123``, with a note when some calls had no known price."""
        if self.calls and self.unpriced_calls == self.calls:
            return "cost unknown (no price for the model)"
        text = f"${self.cost_usd:.4f}"
        if self.unpriced_calls:
            text += f" + {self.unpriced_calls} calls at an unknown price"
        return text


_COLUMNS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "cost_usd", "unpriced_calls")
_NEW_COLUMNS = {"cost_usd": "REAL", "unpriced_calls": "INT"}  # added after the first ledgers were written


def _totals_sql(present: set[str]) -> str:
    """The totals over the ledger; columns an older ledger lacks count as 0."""
    parts = [f"coalesce(sum({c}),0)" if c in present else "0" for c in _COLUMNS]
    return f"SELECT {', '.join(parts)} FROM llm_usage"


def usage_from_row(row) -> LLMUsage:
    """The usage of a row of totals in the order of ``_COLUMNS``."""
    return LLMUsage(*(float(v) if c == "cost_usd" else int(v) for c, v in zip(_COLUMNS, row)))


def _columns(con) -> set[str]:
    return {r[1] for r in con.execute("PRAGMA table_info(llm_usage)").fetchall()}


class UsageLedger:
    """A running total of LLM usage per step, kept in the cache database (safe across processes)."""

    def __init__(self, path):
        import sqlite3
        from pathlib import Path

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._sqlite3 = sqlite3

    def _con(self):
        con = self._sqlite3.connect(self.path, timeout=120, isolation_level=None)
        con.execute("PRAGMA busy_timeout=120000")
        con.execute(
            "CREATE TABLE IF NOT EXISTS llm_usage (at REAL, step TEXT, calls INT, cache_hits INT,"
            " prompt_tokens INT, completion_tokens INT, cost_usd REAL, unpriced_calls INT)"
        )
        present = _columns(con)
        for name, kind in _NEW_COLUMNS.items():  # a ledger written before costs were counted
            if name not in present:
                try:
                    con.execute(f"ALTER TABLE llm_usage ADD COLUMN {name} {kind} DEFAULT 0")
                except self._sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):  # another process added it just now
                        raise
        return con

    def record(self, step: str, usage: LLMUsage) -> None:
        import time

        if not (usage.calls or usage.cache_hits):
            return
        con = self._con()
        try:
            con.execute(
                "INSERT INTO llm_usage (at, step, calls, cache_hits, prompt_tokens, completion_tokens, cost_usd,"
                " unpriced_calls) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), step, *usage.row()),
            )
        finally:
            con.close()

    def by_step_since(self, since: float) -> dict[str, LLMUsage]:
        """Usage recorded at or after ``since`` (a time.time()), per step: what one build used."""
        con = self._con()
        try:
            rows = con.execute(
                "SELECT step, "
                + _totals_sql(set(_COLUMNS)).removeprefix("SELECT ").replace(" FROM llm_usage", "")
                + " FROM llm_usage WHERE at >= ? GROUP BY step",
                (since,),
            ).fetchall()
        finally:
            con.close()
        return {r[0]: usage_from_row(r[1:]) for r in rows}

    def totals(self) -> LLMUsage:
        con = self._con()
        try:
            row = con.execute(_totals_sql(set(_COLUMNS))).fetchone()
        finally:
            con.close()
        return usage_from_row(row)


def open_ledger(paths):
    """The home's ledger: in the Postgres database of the caches when there is one (one knowledge
    base's rows), else in the home's SQLite file (see `llm.cache.open_cache`)."""
    from graphrag_pipeline.llm.pg_store import PgUsageLedger, cache_target
    from graphrag_pipeline.settings import knowledge_base

    target = cache_target(paths)
    return UsageLedger(paths.cache_db) if target is None else PgUsageLedger(target, knowledge_base())


def read_ledger_totals(paths) -> LLMUsage:
    """The home's ledger totals, read without writing anything, whichever store holds it (see
    `read_usage_totals`; an unreachable database raises CacheStoreError naming its host)."""
    from graphrag_pipeline.llm.pg_store import cache_target, read_pg_usage_totals
    from graphrag_pipeline.settings import knowledge_base

    target = cache_target(paths)
    return read_usage_totals(paths.cache_db) if target is None else read_pg_usage_totals(target, knowledge_base())


def read_usage_totals(path) -> LLMUsage:
    """The ledger's totals, read without writing anything (no folder, file or table is created; an
    older ledger without the cost columns is read as it is). No database, or no ledger in it yet,
    means nothing was used: zeros. A file that cannot be read raises OSError or
    sqlite3.DatabaseError, whose text says why."""
    import sqlite3

    from graphrag_pipeline.llm.cache import connect_read_only

    try:
        con = connect_read_only(path, timeout_s=10.0)
    except FileNotFoundError:
        return LLMUsage()
    try:
        present = _columns(con)
        if not present:
            return LLMUsage()
        row = con.execute(_totals_sql(present)).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return LLMUsage()
        raise
    finally:
        con.close()
    return usage_from_row(row)
