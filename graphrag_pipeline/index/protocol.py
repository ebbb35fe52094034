"""The seams of the index: what the query module asks of a search index, and what an embedder is.

`SearchIndex` lists exactly what query/search.py uses of an index; the DuckDB reader
(duckdb_reader.DuckDBIndex) and the Elasticsearch reader (es_reader.EsIndex) both implement it, and
graphrag_pipeline_tests/test_protocols.py checks that their signatures match these.

Rows are plain dicts (the keys each backend fills are the same: see the readers). Entity rows carry
`source_ids` (chunk ids) and `doc_ids` (document keys), relation rows `source_ids`, report rows
`documents` (corpus paths): the sources a result cites."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from graphrag_pipeline.llm.protocol import EmbeddingClient


@runtime_checkable
class Embedder(Protocol):
    """Texts to float32 vectors of one dimension (index/embedding.py: hashing and endpoint)."""

    @property
    def model_id(self) -> str:
        """Names the model and its dimension: an index is only updated with the embedder it was built with."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """One row per text, in order; (0, dim) for no texts."""
        ...

    def embed_one(self, text: str) -> np.ndarray: ...


@runtime_checkable
class SearchIndex(Protocol):
    """A published search index, as local, global and naive search read it."""

    def embedder(self, client: EmbeddingClient | None = None) -> Embedder:
        """The embedder the index was built with (an endpoint model needs the client)."""
        ...

    def type_pool(self) -> dict[str, list[str]]:
        """Entity type -> its top entity names."""
        ...

    def entities_by_vector(self, vector: np.ndarray, k: int, threshold: float) -> list[dict]: ...

    def relations_by_vector(self, vector: np.ndarray, k: int, threshold: float) -> list[dict]: ...

    def nhop(self, keys: list[str]) -> list[dict]:
        """The stored n-hop paths starting at these entities."""
        ...

    def keys_of_types(self, types: list[str], candidates: list[str], k: int) -> set[str]: ...

    def relations_by_pairs(self, pairs: list[tuple[str, str]]) -> list[dict]: ...

    def reports_for_entities(self, keys: list[str], k: int) -> list[dict]: ...

    def reports_by_importance(self, vector: np.ndarray, k: int) -> list[dict]:
        """The k reports of the broadest level, highest rating, highest community weight first; the
        similarity to `vector` (returned as `sim`) breaks ties."""
        ...

    def chunks_by_ids(self, chunk_ids: list[str], text: bool = False) -> list[dict]:
        """One row per (chunk, document) holding it: chunk_id, doc_id, doc (corpus path), its first
        position there (and text when asked), ordered by chunk id and document key."""
        ...

    def chunks_by_vector(self, vector: np.ndarray, k: int) -> list[dict]: ...

    def batch(self, calls: list[tuple[Callable[..., Any], tuple]]) -> list:
        """Several independent calls of this index's own methods, as (bound method, arguments) pairs:
        their results in order. Elasticsearch answers them in one request (_msearch); DuckDB calls
        them one after the other."""
        ...


@runtime_checkable
class GraphLookup(Protocol):
    """What the HTTP service (serve/) reads of an index besides search: an entity, its relations, its
    source chunks, and chunks by id. Both readers implement it (checked by test_serve.py)."""

    def entities_by_keys(self, keys: list[str]) -> list[dict]: ...

    def relations_of(self, key: str, k: int) -> list[dict]:
        """The relations of one entity, heaviest first."""
        ...

    def entity_sources(self, key: str) -> list[str]:
        """The ids of the chunks the entity was extracted from."""
        ...

    def chunk_texts(self, ids: list[str]) -> list[dict]: ...
