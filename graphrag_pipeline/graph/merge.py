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


def canonical_pairs(rows: pl.DataFrame) -> pl.DataFrame:
    """The unordered pairs of relation rows, once each, as edges store them (source_key <= target_key)."""
    return rows.select(
        pl.min_horizontal("source_key", "target_key").alias("source_key"),
        pl.max_horizontal("source_key", "target_key").alias("target_key"),
    ).unique()


def touching(keys: set[str]) -> pl.Expr:
    """Rows (relation rows or edges) with an end among `keys`."""
    k = pl.Series("k", sorted(keys), dtype=pl.Utf8).implode()
    return pl.col("source_key").is_in(k) | pl.col("target_key").is_in(k)


def of_pairs(df: pl.DataFrame, pairs: pl.DataFrame, keys: set[str]) -> pl.DataFrame:
    """The rows of `df` (relation rows or edges, in their order) whose unordered pair is one of
    `pairs` (canonical_pairs) or which touch one of `keys`."""
    hit = pairs.select(pl.col("source_key").alias("_a"), pl.col("target_key").alias("_b"), pl.lit(True).alias("_hit"))
    return (
        df.with_columns(
            pl.min_horizontal("source_key", "target_key").alias("_a"),
            pl.max_horizontal("source_key", "target_key").alias("_b"),
        )
        .join(hit, on=["_a", "_b"], how="left", maintain_order="left")
        .filter(pl.col("_hit").is_not_null() | touching(keys))
        .drop("_a", "_b", "_hit")
    )


def changed_ends(previous_nodes: pl.DataFrame, merged: pl.DataFrame, affected: set[str]) -> tuple[set[str], set[str]]:
    """Of the `affected` keys (`merged`: their nodes merged again): those whose node appeared,
    vanished or changed its display name, and of those the ones that appeared or vanished."""
    keys = pl.Series("key", sorted(affected), dtype=pl.Utf8).implode()
    before = set(previous_nodes.filter(pl.col("key").is_in(keys)).select("key", "name").iter_rows())
    after = set(merged.select("key", "name").iter_rows())
    renamed = {key for key, _ in before ^ after}
    flipped = {key for key, _ in before} ^ {key for key, _ in after}
    return renamed, flipped


def merge_changed(
    previous_nodes: pl.DataFrame,
    previous_edges: pl.DataFrame,
    merged: pl.DataFrame,
    relations: pl.DataFrame,
    affected: set[str],
    pairs: pl.DataFrame,
    renamed: set[str],
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The merged graph after a change that touched only the entity keys `affected`. `merged`:
    the nodes of those keys merged again from all their entity rows (of every document); every
    other node is the previous one. An edge depends only on its own mention rows and on the
    existence and display names of its two ends, so only the edges of `pairs` (canonical_pairs of
    the changed documents' relation rows, before and after) and the edges touching `renamed`
    (changed_ends) are merged again; `relations` must hold every mention row of those pairs and
    keys. The result equals a full merge (degree and pagerank are not computed here)."""
    keys = pl.Series("key", sorted(affected), dtype=pl.Utf8).implode()
    nodes = pl.concat(
        [
            previous_nodes.filter(~pl.col("key").is_in(keys)).select(list(NODE_SCHEMA)).cast(NODE_SCHEMA),
            merged.select(list(NODE_SCHEMA)).cast(NODE_SCHEMA),
        ]
    ).sort("key")
    fresh, _ = _merge_edges(relations, nodes) if relations.height else (empty_edges(), 0)
    # stored edges are in canonical order (source_key < target_key), as the pairs are
    kept = previous_edges.filter(~touching(renamed)).join(pairs, on=["source_key", "target_key"], how="anti")
    edges = pl.concat(
        [
            kept.select(list(EDGE_SCHEMA)).cast(EDGE_SCHEMA),
            of_pairs(fresh, pairs, renamed).select(list(EDGE_SCHEMA)).cast(EDGE_SCHEMA),
        ]
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
