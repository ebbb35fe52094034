"""A document's subgraph: the extraction records of its chunks as two flat tables.

entities: doc_id, position (chunk position), source_id (chunk id), key, name, type, description
relations: doc_id, position, source_id, source_key, target_key, source, target, description,
           keywords (list[str]), weight
Relations whose endpoints were not extracted in the same chunk are dropped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from graphrag_pipeline.extract.records import Extraction, clean_name, clean_type, entity_key

ENTITY_ROWS = {
    "doc_id": pl.Utf8,
    "position": pl.Int64,
    "source_id": pl.Utf8,
    "key": pl.Utf8,
    "name": pl.Utf8,
    "type": pl.Utf8,
    "description": pl.Utf8,
}
RELATION_ROWS = {
    "doc_id": pl.Utf8,
    "position": pl.Int64,
    "source_id": pl.Utf8,
    "source_key": pl.Utf8,
    "target_key": pl.Utf8,
    "source": pl.Utf8,
    "target": pl.Utf8,
    "description": pl.Utf8,
    "keywords": pl.List(pl.Utf8),
    "weight": pl.Float64,
}


@dataclass
class DocSubgraph:
    entities: pl.DataFrame
    relations: pl.DataFrame
    dropped_relations: int


def build_doc_subgraph(doc_id: str, extractions: list[tuple[int, str, Extraction]]) -> DocSubgraph:
    """Flatten (position, chunk_id, extraction) triples of one document into tables."""
    ents, rels = [], []
    dropped = 0
    for position, chunk_id, ext in extractions:
        names = {}
        for e in ext.entities:
            key = entity_key(e.name)
            if not key:
                continue
            names.setdefault(key, clean_name(e.name))
            ents.append(
                (doc_id, position, chunk_id, key, clean_name(e.name), clean_type(e.type), e.description.strip())
            )
        dropped += ext.dropped_relations
        for r in ext.relations:
            s, t = entity_key(r.source), entity_key(r.target)
            if s not in names or t not in names or s == t:
                dropped += 1
                continue
            rels.append(
                (
                    doc_id,
                    position,
                    chunk_id,
                    s,
                    t,
                    names[s],
                    names[t],
                    r.description.strip(),
                    [k for k in r.keywords if k],
                    float(r.weight),
                )
            )
    return DocSubgraph(
        pl.DataFrame(ents, schema=ENTITY_ROWS, orient="row"),
        pl.DataFrame(rels, schema=RELATION_ROWS, orient="row"),
        dropped,
    )
