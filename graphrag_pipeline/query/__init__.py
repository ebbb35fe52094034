"""Query the published search index (no Dagster needed): local, global and naive search.

from graphrag_pipeline.query import open_index, query
with open_index() as index:
    result = query(index, "Who sailed on HMS Beagle?", mode="local")
    print(result.to_dict())

The names below are imported when first used: the CLI's argument parser reads the search
parameters (query.search) without loading the index reader (polars, DuckDB: 0.18 s), so a build
starts its corpus survey that much earlier.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_WHERE = {
    "DuckDBIndex": "graphrag_pipeline.index.duckdb_reader",
    "IndexNotFoundError": "graphrag_pipeline.index.duckdb_reader",
    "IndexUnreadableError": "graphrag_pipeline.index.duckdb_reader",
    "open_index": "graphrag_pipeline.index.duckdb_reader",
    "QueryResult": "graphrag_pipeline.query.search",
    "SearchParams": "graphrag_pipeline.query.search",
    "global_search": "graphrag_pipeline.query.search",
    "local_search": "graphrag_pipeline.query.search",
    "naive_search": "graphrag_pipeline.query.search",
    "query": "graphrag_pipeline.query.search",
}

__all__ = [
    "DuckDBIndex",
    "IndexNotFoundError",
    "IndexUnreadableError",
    "open_index",
    "QueryResult",
    "SearchParams",
    "local_search",
    "global_search",
    "naive_search",
    "query",
]

if TYPE_CHECKING:
    from graphrag_pipeline.index.duckdb_reader import DuckDBIndex, IndexNotFoundError, IndexUnreadableError, open_index
    from graphrag_pipeline.query.search import (
        QueryResult,
        SearchParams,
        global_search,
        local_search,
        naive_search,
        query,
    )


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # (looked up once)
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
