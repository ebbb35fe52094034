"""Query the published search index (no Dagster needed): local, global and naive search.

from graphrag_pipeline.query import open_index, query
with open_index() as index:
    result = query(index, "Who sailed on HMS Beagle?", mode="local")
    print(result.to_dict())
"""

from graphrag_pipeline.index.duckdb_reader import DuckDBIndex, IndexNotFoundError, IndexUnreadableError, open_index
from graphrag_pipeline.query.search import QueryResult, SearchParams, global_search, local_search, naive_search, query

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
