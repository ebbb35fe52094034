"""Merging document subgraphs into one knowledge graph.

Same entity key -> one node: display name = its most frequent surface form, type by majority vote,
descriptions de-duplicated (first-seen order) and joined, chunk and document ids unioned.
Relations are undirected: same unordered pair -> one edge with summed weight and unioned
descriptions, keywords and ids. Relations whose endpoint is not a node are dropped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from graphrag_pipeline.extract.subgraph import ENTITY_ROWS, RELATION_ROWS
from graphrag_pipeline.graph.tables import (
    DESCRIPTION_SEP,
    EDGE_SCHEMA,
    NODE_SCHEMA,
    empty_edges,
    empty_nodes,
    with_metrics,
)


@dataclass
class MergeResult:
    nodes: pl.DataFrame
    edges: pl.DataFrame
    dropped_relations: int


def _unique_list(col: str) -> pl.Expr:
    return pl.col(col).unique(maintain_order=True)


def _mode_first(df: pl.DataFrame, by: str, col: str) -> pl.DataFrame:
    """Per group, the most frequent value of col (ties: first seen)."""
    return (
        df.with_row_index("_i")
        .group_by(by, col)
        .agg(pl.len().alias("_n"), pl.col("_i").min().alias("_first"))
        .sort(["_n", "_first"], descending=[True, False])
        .group_by(by, maintain_order=True)
        .agg(pl.col(col).first())
    )


def _merge_nodes(entities: pl.DataFrame) -> pl.DataFrame:
    """One node per key (NODE_SCHEMA, degree and pagerank not computed), sorted by key."""
    entities = entities.select(list(ENTITY_ROWS)).sort(["doc_id", "position"], maintain_order=True)
    names = _mode_first(entities, "key", "name")
    types = _mode_first(entities, "key", "type")
    described = (
        entities.filter(pl.col("description") != "")
        .group_by("key", maintain_order=True)
        .agg(_unique_list("description").alias("descriptions"))
    )
    ids = entities.group_by("key").agg(
        pl.col("source_id").unique().sort().alias("source_ids"),
        pl.col("doc_id").unique().sort().alias("doc_ids"),
    )
    return (
        ids.join(names, on="key")
        .join(types, on="key")
        .join(described, on="key", how="left")
        .with_columns(pl.col("descriptions").fill_null(pl.lit([], pl.List(pl.Utf8))))
        .with_columns(
            pl.col("descriptions").list.join(DESCRIPTION_SEP).alias("description"),
            pl.lit(0, pl.Int64).alias("degree"),
            pl.lit(0.0).alias("pagerank"),
        )
        .select(list(NODE_SCHEMA))
        .cast(NODE_SCHEMA)
        .sort("key")
    )


def _merge_edges(relations: pl.DataFrame, nodes: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """One edge per unordered pair of existing nodes (EDGE_SCHEMA), sorted; and the rows dropped."""
    relations = relations.select(list(RELATION_ROWS)).sort(["doc_id", "position"], maintain_order=True)
    node_keys = nodes.select("key")
    rel = relations.with_columns(
        pl.min_horizontal("source_key", "target_key").alias("a"),
        pl.max_horizontal("source_key", "target_key").alias("b"),
    ).filter(pl.col("a") != pl.col("b"))
    kept = rel.join(node_keys, left_on="a", right_on="key", how="semi").join(
        node_keys, left_on="b", right_on="key", how="semi"
    )
    dropped = relations.height - kept.height
    if kept.height == 0:
        return empty_edges(), dropped
    display = nodes.select("key", "name")
    edges = (
        kept.group_by("a", "b", maintain_order=True)
        .agg(
            pl.col("description").filter(pl.col("description") != "").unique(maintain_order=True).alias("descriptions"),
            pl.col("keywords")
            .list.explode(keep_nulls=False, empty_as_null=False)
            .unique(maintain_order=True)
            .alias("keywords"),
            pl.col("weight").sum().alias("weight"),
            pl.col("source_id").unique().sort().alias("source_ids"),
            pl.col("doc_id").unique().sort().alias("doc_ids"),
        )
        .rename({"a": "source_key", "b": "target_key"})
        .join(display.rename({"key": "source_key", "name": "source"}), on="source_key")
        .join(display.rename({"key": "target_key", "name": "target"}), on="target_key")
        .with_columns(pl.col("descriptions").list.join(DESCRIPTION_SEP).alias("description"))
        .select(list(EDGE_SCHEMA))
        .cast(EDGE_SCHEMA)
        .sort("source_key", "target_key")
    )
    return edges, dropped


def merge_subgraphs(entities: pl.DataFrame, relations: pl.DataFrame) -> MergeResult:
    """Merge the entity and relation rows of many documents (see subgraph.py for their columns)."""
    if entities.height == 0:
        return MergeResult(empty_nodes(), empty_edges(), relations.height)
    nodes = _merge_nodes(entities)
    edges, dropped = _merge_edges(relations, nodes)
    return MergeResult(with_metrics(nodes, edges), edges, dropped)


def merge_affected(
    previous_nodes: pl.DataFrame,
    previous_edges: pl.DataFrame,
    entities: pl.DataFrame,
    relations: pl.DataFrame,
    affected: set[str],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The merged graph after a change that touched only the entity keys `affected`.

    `entities` and `relations` are ALL the mention rows (of every document) of the affected keys:
    entity rows with such a key, relation rows with such an endpoint. Every other node and edge is
    taken from the previous merge unchanged; the result equals a full merge (degree and pagerank
    are not computed here)."""
    keys = pl.Series("key", sorted(affected), dtype=pl.Utf8).implode()
    nodes = pl.concat(
        [
            previous_nodes.filter(~pl.col("key").is_in(keys)).select(list(NODE_SCHEMA)).cast(NODE_SCHEMA),
            _merge_nodes(entities) if entities.height else empty_nodes(),
        ]
    ).sort("key")
    touched = pl.col("source_key").is_in(keys) | pl.col("target_key").is_in(keys)
    fresh, _ = _merge_edges(relations, nodes) if relations.height else (empty_edges(), 0)
    edges = pl.concat(
        [previous_edges.filter(~touched).select(list(EDGE_SCHEMA)).cast(EDGE_SCHEMA), fresh.filter(touched)]
    ).sort("source_key", "target_key")
    return nodes, edges


def dropped_relations(relations: pl.LazyFrame | pl.DataFrame, node_keys: pl.DataFrame) -> int:
    """Relation rows that no edge keeps: self-loops and rows with an endpoint that is not a node."""
    rel = relations.lazy().select("source_key", "target_key").filter(pl.col("source_key") != pl.col("target_key"))
    total = relations.lazy().select(pl.len()).collect().item()
    keys = node_keys.lazy().select("key")
    kept = (
        rel.join(keys, left_on="source_key", right_on="key", how="semi")
        .join(keys, left_on="target_key", right_on="key", how="semi")
        .select(pl.len())
        .collect()
        .item()
    )
    return int(total - kept)
