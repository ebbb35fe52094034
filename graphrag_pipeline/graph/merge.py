"""Merging document subgraphs into one knowledge graph.

Same entity key -> one node: display name = its most frequent surface form, type by majority vote,
descriptions de-duplicated (first-seen order), cut to DESCRIPTION_BUDGET and joined, chunk and
document ids unioned.
Relations are undirected: same unordered pair -> one edge with summed weight and unioned
descriptions, keywords and ids. Relations whose endpoint is not a node are dropped and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from graphrag_pipeline.extract.subgraph import ENTITY_ROWS, RELATION_ROWS
from graphrag_pipeline.graph.tables import (
    DESCRIPTION_SEP,
    EDGE_SCHEMA,
    NODE_SCHEMA,
    capped_descriptions,
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
        .with_columns(capped_descriptions(pl.col("descriptions")))
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
        .with_columns(capped_descriptions(pl.col("descriptions")))
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
    *,
    touched: set[str] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The merged graph after a change that touched only the entity keys `affected`. `merged`:
    the nodes of those keys merged again from all their entity rows (of every document); every
    other node is the previous one. An edge depends only on its own mention rows and on the
    existence and display names of its two ends, so only the edges of `pairs` (canonical_pairs of
    the changed documents' relation rows, before and after) and the edges touching `renamed`
    (changed_ends) are merged again; `relations` must hold every mention row of those pairs and
    keys. The result equals a full merge (degree and pagerank are not computed here). `touched`,
    when given, receives the source keys of every edge replaced, removed or added."""
    keys = pl.Series("key", sorted(affected), dtype=pl.Utf8).implode()
    previous_nodes = previous_nodes.select(list(NODE_SCHEMA)).cast(NODE_SCHEMA)
    merged = merged.select(list(NODE_SCHEMA)).cast(NODE_SCHEMA)
    gone = _positions(previous_nodes.select(pl.col("key").is_in(keys)))
    nodes = splice_sorted(previous_nodes, gone, merged, ["key"])
    fresh, _ = _merge_edges(relations, nodes) if relations.height else (empty_edges(), 0)
    # stored edges are in canonical order (source_key < target_key), as the pairs are
    previous_edges = previous_edges.select(list(EDGE_SCHEMA)).cast(EDGE_SCHEMA)
    ends = previous_edges.select("source_key", "target_key").with_row_index("_i")
    hit = ends.filter(touching(renamed))["_i"]
    # the pairs' source keys first (one column probed): the join then sees a few rows, not every edge
    near = ends.filter(pl.col("source_key").is_in(pairs["source_key"].unique().implode()))
    paired = near.join(pairs, on=["source_key", "target_key"], how="semi")["_i"]
    gone = np.union1d(hit.to_numpy(), paired.to_numpy()).astype(np.int64)
    added = of_pairs(fresh, pairs, renamed).select(list(EDGE_SCHEMA)).cast(EDGE_SCHEMA)
    if touched is not None:
        touched.update(previous_edges["source_key"].gather(gone).to_list(), added["source_key"].to_list())
    edges = splice_sorted(previous_edges, gone, added, EDGE_KEY)
    return nodes, edges


EDGE_KEY = ["source_key", "target_key"]


def _positions(mask: pl.DataFrame) -> np.ndarray:
    """The row numbers where a one-column boolean table is true."""
    return np.flatnonzero(mask.to_series().fill_null(False).to_numpy()).astype(np.int64)


def splice_sorted(previous: pl.DataFrame, gone: np.ndarray, fresh: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """`previous` (sorted by `by`, keys unique) without its rows at positions `gone`, with the rows
    of `fresh` (same columns; keys unique and none among the rows kept) in key order: what
    concat([kept, fresh]).sort(by) gives, built from slices of `previous` between the few changed
    places. A filter and a sort would copy every row (a hub's node lists tens of thousands of ids
    at 50,000 documents) for an update that changes a few hundred; the slices are views, not copied
    into one table (the graph is stored in slices, see storage.sliced_graph, and read back as
    chunks anyway). Falls back to that sort when the keys do not allow the shortcut (not sorted, or
    a key holding the separator)."""
    fresh = fresh.sort(by)

    def composite(df: pl.DataFrame) -> pl.Series:
        return df[by[0]] if len(by) == 1 else df.select(pl.concat_str(by, separator="\x00")).to_series()

    old, new = composite(previous), composite(fresh)
    separated = len(by) == 1 or not any(
        df.select(pl.any_horizontal(pl.col(c).str.contains("\x00", literal=True).any() for c in by)).item()
        for df in (previous, fresh)
    )
    if not previous.height or not separated or not old.is_sorted():
        keep = np.ones(previous.height, dtype=bool)
        keep[gone] = False
        return pl.concat([previous.filter(pl.Series(keep)), fresh]).sort(by)
    at = old.search_sorted(new, side="left").to_numpy().astype(np.int64)  # fresh row i goes before previous row at[i]
    dropped = set(gone.tolist())
    frames, start, i = [], 0, 0
    for cut in np.union1d(gone, at).tolist():
        if cut > start:
            frames.append(previous.slice(start, cut - start))
        j = int(np.searchsorted(at, cut, side="right"))
        if j > i:
            frames.append(fresh.slice(i, j - i))
            i = j
        start = cut + 1 if cut in dropped else cut
    if start < previous.height:
        frames.append(previous.slice(start, previous.height - start))
    return pl.concat(frames, how="vertical", rechunk=False) if frames else previous.clear()


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
