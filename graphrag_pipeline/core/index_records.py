"""Search-index records built from the resolved graph, communities, reports and chunks.

Tables (polars): entities, relations, community_reports, chunks, nhop (pre-computed neighbour
paths with edge weights), ty2ents (entity type -> sample entities). Entity vectors embed the entity
name; relation vectors embed "source->target: description"; report vectors embed title + summary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import polars as pl

from .reports import CommunityReport

NHOP_MAX_NEIGHBOURS = 16
NHOP_MAX_SECOND = 4
TY2ENTS_SAMPLES = 10


@dataclass
class IndexTables:
    entities: pl.DataFrame
    relations: pl.DataFrame
    community_reports: pl.DataFrame
    chunks: pl.DataFrame
    nhop: pl.DataFrame
    ty2ents: pl.DataFrame

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name).height for name in ("entities", "relations", "community_reports", "chunks", "nhop", "ty2ents")}


def _vectors(embedder, texts: list[str], previous: pl.DataFrame | None = None, batch: int = 512) -> pl.Series:
    """Vectors of `texts`; those found in `previous` (columns text, embedding) are reused, not recomputed."""
    import numpy as np

    dim = embedder.dim
    dtype = pl.Array(pl.Float32, dim)
    if not texts:
        return pl.Series("embedding", [], dtype=dtype)
    frame = pl.DataFrame({"text": texts}, schema={"text": pl.Utf8})
    if previous is not None and previous.height and previous.schema.get("embedding") == dtype:
        frame = frame.join(previous.unique("text", keep="first"), on="text", how="left", maintain_order="left")
    else:
        frame = frame.with_columns(pl.lit(None, dtype=dtype).alias("embedding"))
    todo = frame.with_row_index("i").filter(pl.col("embedding").is_null())
    if todo.height:
        fresh = todo["text"].to_list()
        arr = np.vstack([embedder.embed(fresh[i : i + batch]) for i in range(0, len(fresh), batch)]).astype("float32")
        filled = pl.Series("embedding", arr, dtype=dtype)
        frame = frame.with_row_index("i").join(todo.select("i").with_columns(filled.alias("new")), on="i", how="left",
                                               maintain_order="left")
        frame = frame.with_columns(pl.coalesce("embedding", "new").alias("embedding"))
    return frame["embedding"].alias("embedding")


def nhop_paths(edges: pl.DataFrame) -> pl.DataFrame:
    """For each node, its 2-hop paths along its strongest edges, with the edge weights.

    As in RAGFlow, a path is a full walk of two edges; a neighbour with no further edge gives a
    1-hop path (RAGFlow drops it). At most NHOP_MAX_NEIGHBOURS first hops (strongest first, then
    by key) and NHOP_MAX_SECOND second hops each, so hubs stay bounded. Vectorised with polars.
    """
    schema = {"entity_key": pl.Utf8, "path": pl.List(pl.Utf8), "weights": pl.List(pl.Float64)}
    if edges.height == 0:
        return pl.DataFrame(schema=schema)
    e = edges.select(pl.col("source_key").alias("a"), pl.col("target_key").alias("b"), pl.col("weight").cast(pl.Float64).alias("w"))
    both = pl.concat([e, e.select(pl.col("b").alias("a"), pl.col("a").alias("b"), "w")]).filter(pl.col("a") != pl.col("b"))
    ranked = both.sort(["a", "w", "b"], descending=[False, True, False])
    first = ranked.group_by("a", maintain_order=True).head(NHOP_MAX_NEIGHBOURS)
    second = (
        # the best NHOP_MAX_SECOND + 1 edges of each neighbour suffice: excluding the way back drops at most one
        first.join(ranked.group_by("a", maintain_order=True).head(NHOP_MAX_SECOND + 1).rename({"a": "b", "b": "c", "w": "w2"}),
                   on="b", how="inner")
        .filter(pl.col("c") != pl.col("a"))
        .sort(["a", "w", "b", "w2", "c"], descending=[False, True, False, True, False])
        .group_by(["a", "b"], maintain_order=True)
        .head(NHOP_MAX_SECOND)
    )
    two = second.select(
        pl.col("a").alias("entity_key"),
        pl.concat_list("a", "b", "c").alias("path"),
        pl.concat_list("w", "w2").alias("weights"),
        "w", "b", "w2", "c",
    )
    dead_ends = first.join(second.select("a", "b").unique(), on=["a", "b"], how="anti").select(
        pl.col("a").alias("entity_key"),
        pl.concat_list("a", "b").alias("path"),
        pl.concat_list("w").alias("weights"),
        "w", "b", pl.lit(None, pl.Float64).alias("w2"), pl.lit(None, pl.Utf8).alias("c"),
    )
    out = pl.concat([two, dead_ends]).sort(["entity_key", "w", "b", "w2", "c"], descending=[False, True, False, True, False],
                                          nulls_last=True)
    return out.select("entity_key", "path", "weights").cast(schema)


def build_index_tables(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    communities: pl.DataFrame,
    reports: list[CommunityReport],
    chunks: pl.DataFrame,
    embedder,
    previous: dict[str, pl.DataFrame] | None = None,
) -> IndexTables:
    """chunks: chunk_id, doc_id, doc (relative path), position, text.

    previous: per table, (text, embedding) of the last published index built with the same
    embedder; vectors of unchanged texts are reused, so an update embeds only what changed."""
    previous = previous or {}
    membership: dict[str, list[str]] = {}
    for cid, members in zip(communities["community_id"].to_list(), communities["nodes"].to_list()):
        for key in members:
            membership.setdefault(key, []).append(cid)
    entities = nodes.select("key", "name", "type", "description", "pagerank", "degree", "source_ids", "doc_ids").with_columns(
        pl.col("key").map_elements(lambda k: membership.get(k, []), return_dtype=pl.List(pl.Utf8)).alias("community_ids"),
    )
    entities = entities.with_columns(_vectors(embedder, entities["name"].to_list(), previous.get("entities")))

    rel_text = [f"{s}->{t}: {d}" for s, t, d in zip(edges["source"], edges["target"], edges["description"])]
    relations = edges.select("source_key", "target_key", "source", "target", "description", "keywords", "weight", "source_ids").with_columns(
        _vectors(embedder, rel_text, previous.get("relations"))
    )

    names = dict(zip(nodes["key"].to_list(), nodes["name"].to_list()))
    weights = dict(zip(communities["community_id"].to_list(), communities["weight"].to_list()))
    members_of = dict(zip(communities["community_id"].to_list(), communities["nodes"].to_list()))
    rep_rows = []
    for r in reports:
        member_keys = list(members_of.get(r.community_id, []))
        rep_rows.append({
            "community_id": r.community_id, "level": r.level, "title": r.title, "summary": r.summary,
            "rating": float(r.rating), "rating_explanation": r.rating_explanation,
            "findings": json.dumps([f.__dict__ for f in r.findings], ensure_ascii=False),
            "entity_keys": member_keys, "entity_names": [names.get(k, k) for k in member_keys],
            "weight": float(weights.get(r.community_id, 0.0)), "extractive": r.extractive, "text": r.text(),
        })
    report_schema = {
        "community_id": pl.Utf8, "level": pl.Int64, "title": pl.Utf8, "summary": pl.Utf8, "rating": pl.Float64,
        "rating_explanation": pl.Utf8, "findings": pl.Utf8, "entity_keys": pl.List(pl.Utf8),
        "entity_names": pl.List(pl.Utf8), "weight": pl.Float64, "extractive": pl.Boolean, "text": pl.Utf8,
    }
    reports_df = pl.DataFrame(rep_rows, schema=report_schema)
    reports_df = reports_df.with_columns(_vectors(embedder, [f"{t}\n{s}" for t, s in zip(reports_df["title"], reports_df["summary"])],
                                                  previous.get("community_reports")))

    chunk_df = chunks.select("chunk_id", "doc_id", "doc", "position", "text").with_columns(
        _vectors(embedder, chunks["text"].to_list(), previous.get("chunks")))

    nhop = nhop_paths(edges)
    ty2ents = (
        nodes.sort(["pagerank", "key"], descending=[True, False])
        .group_by("type", maintain_order=True)
        .agg(pl.col("name").head(TY2ENTS_SAMPLES).alias("entities"), pl.len().alias("count"))
        .sort(["count", "type"], descending=[True, False])
    )
    return IndexTables(entities, relations, reports_df, chunk_df, nhop, ty2ents)
