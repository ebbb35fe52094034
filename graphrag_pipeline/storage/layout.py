"""The layout of GRAPHRAG_HOME: one folder per kind of output, every path named here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Paths:
    """Every file the pipeline writes lives under one home directory."""

    home: Path

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def tables(self) -> Path:
        return self.home / "tables"

    def doc_dir(self, asset: str) -> Path:
        return self.tables / asset

    @property
    def graph_dir(self) -> Path:
        return self.home / "graph"

    @property
    def reports_dir(self) -> Path:
        return self.home / "reports"

    @property
    def state_dir(self) -> Path:
        """What the CLI remembers between builds (e.g. the corpus files it has hashed)."""
        return self.home / "state"

    @property
    def cache_db(self) -> Path:
        return self.home / "cache" / "cache.sqlite"

    @property
    def index_dir(self) -> Path:
        return self.home / "index"

    @property
    def index_file(self) -> Path:
        return self.index_dir / "search_index.duckdb"

    def ensure(self) -> Paths:
        for p in (self.tables, self.graph_dir, self.reports_dir, self.cache_db.parent, self.index_dir):
            p.mkdir(parents=True, exist_ok=True)
        return self
