"""The graph as two polars tables, and the graph metrics computed on it.

nodes: key (str, unique), name (display), type, description (joined), descriptions (list[str]),
       source_ids (list[str] chunk ids), doc_ids (list[str]), degree (int), pagerank (float)
edges: source_key < target_key (undirected, unique pair), source, target (display names),
       description, descriptions (list[str]), keywords (list[str]), weight (float),
       source_ids (list[str]), doc_ids (list[str])
"""

from __future__ import annotations

import networkx as nx
import polars as pl

DESCRIPTION_SEP = "\n"

NODE_SCHEMA = {
    "key": pl.Utf8,
    "name": pl.Utf8,
    "type": pl.Utf8,
    "description": pl.Utf8,
    "descriptions": pl.List(pl.Utf8),
    "source_ids": pl.List(pl.Utf8),
    "doc_ids": pl.List(pl.Utf8),
    "degree": pl.Int64,
    "pagerank": pl.Float64,
}

EDGE_SCHEMA = {
    "source_key": pl.Utf8,
    "target_key": pl.Utf8,
    "source": pl.Utf8,
    "target": pl.Utf8,
    "description": pl.Utf8,
    "descriptions": pl.List(pl.Utf8),
    "keywords": pl.List(pl.Utf8),
    "weight": pl.Float64,
    "source_ids": pl.List(pl.Utf8),
    "doc_ids": pl.List(pl.Utf8),
}


def empty_nodes() -> pl.DataFrame:
    return pl.DataFrame(schema=NODE_SCHEMA)


def empty_edges() -> pl.DataFrame:
    return pl.DataFrame(schema=EDGE_SCHEMA)


def to_networkx(nodes: pl.DataFrame, edges: pl.DataFrame) -> nx.Graph:
    """An undirected weighted networkx graph keyed by node key (attributes kept minimal)."""
    g = nx.Graph()
    g.add_nodes_from(nodes["key"].to_list())
    g.add_weighted_edges_from(
        zip(edges["source_key"].to_list(), edges["target_key"].to_list(), edges["weight"].to_list())
    )
    return g


def with_metrics(nodes: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """Return nodes with `degree` and weighted `pagerank` recomputed from edges."""
    if nodes.height == 0:
        return nodes.with_columns(pl.lit(0, pl.Int64).alias("degree"), pl.lit(0.0).alias("pagerank"))
    g = to_networkx(nodes, edges)
    if g.number_of_edges() == 0:
        pr = {k: 1.0 / g.number_of_nodes() for k in g.nodes}
    else:
        pr = nx.pagerank(g, weight="weight")
    keys = nodes["key"].to_list()
    return nodes.with_columns(
        pl.Series("degree", [g.degree(k) for k in keys], dtype=pl.Int64),
        pl.Series("pagerank", [float(pr.get(k, 0.0)) for k in keys], dtype=pl.Float64),
    )
