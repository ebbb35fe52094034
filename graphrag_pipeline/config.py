"""Settings read from environment variables (no Dagster import: the CLI and the query module use it too)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
METHODS = ("fast", "light", "general")


def default_home() -> Path:
    """`GRAPHRAG_HOME`, else `.graphrag` inside the project checkout (git-ignored), else ~/.graphrag."""
    env = os.environ.get("GRAPHRAG_HOME")
    if env:
        return Path(env).expanduser().resolve()
    if (PROJECT_ROOT / "pyproject.toml").exists():
        return PROJECT_ROOT / ".graphrag"
    return Path.home() / ".graphrag"


def default_corpus() -> Path:
    env = os.environ.get("GRAPHRAG_CORPUS")
    if env:
        return Path(env).expanduser().resolve()
    return PROJECT_ROOT / "data" / "corpus"


def default_method() -> str:
    """`GRAPHRAG_METHOD` wins; otherwise `light` when an OpenAI key is set, else the offline `fast`."""
    method = os.environ.get("GRAPHRAG_METHOD", "").strip().lower()
    if method:
        if method not in METHODS:
            raise ValueError(f"GRAPHRAG_METHOD must be one of {', '.join(METHODS)}, got {method!r}")
        return method
    return "light" if os.environ.get("OPENAI_API_KEY") else "fast"


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

    def ensure(self) -> "Paths":
        for p in (self.tables, self.graph_dir, self.reports_dir, self.cache_db.parent, self.index_dir):
            p.mkdir(parents=True, exist_ok=True)
        return self
