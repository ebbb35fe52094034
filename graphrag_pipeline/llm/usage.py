"""Counting what LLM work a step did (calls made, answers served from cache, tokens)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class LLMUsage:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: LLMUsage) -> None:
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


_TOTALS_SQL = (
    "SELECT coalesce(sum(calls),0), coalesce(sum(cache_hits),0), coalesce(sum(prompt_tokens),0),"
    " coalesce(sum(completion_tokens),0) FROM llm_usage"
)


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
            " prompt_tokens INT, completion_tokens INT)"
        )
        return con

    def record(self, step: str, usage: LLMUsage) -> None:
        import time

        if not (usage.calls or usage.cache_hits):
            return
        con = self._con()
        try:
            con.execute(
                "INSERT INTO llm_usage VALUES (?, ?, ?, ?, ?, ?)",
                (time.time(), step, usage.calls, usage.cache_hits, usage.prompt_tokens, usage.completion_tokens),
            )
        finally:
            con.close()

    def totals(self) -> LLMUsage:
        con = self._con()
        try:
            row = con.execute(_TOTALS_SQL).fetchone()
        finally:
            con.close()
        return LLMUsage(*map(int, row))


def read_usage_totals(path) -> LLMUsage:
    """The ledger's totals, read without writing anything (no folder, file or table is created).
    No database, or no ledger in it yet, means nothing was used: zeros. A file that cannot be read
    raises OSError or sqlite3.DatabaseError, whose text says why."""
    import sqlite3

    from graphrag_pipeline.llm.cache import connect_read_only

    try:
        con = connect_read_only(path, timeout_s=10.0)
    except FileNotFoundError:
        return LLMUsage()
    try:
        row = con.execute(_TOTALS_SQL).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return LLMUsage()
        raise
    finally:
        con.close()
    return LLMUsage(*map(int, row))
