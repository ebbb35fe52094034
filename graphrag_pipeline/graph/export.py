"""Exporting the graph for Gephi and other tools."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import polars as pl

from graphrag_pipeline.storage.files import atomic_path


def write_graphml(nodes: pl.DataFrame, edges: pl.DataFrame, out: Path) -> None:
    """GraphML with scalar attributes only (lists are joined with "; ")."""
    g = nx.Graph()
    for n in nodes.to_dicts():
        g.add_node(
            n["key"],
            label=n["name"],
            type=n["type"],
            description=n["description"] or "",
            degree=int(n["degree"]),
            pagerank=float(n["pagerank"]),
            documents="; ".join(n["doc_ids"] or []),
        )
    for e in edges.to_dicts():
        g.add_edge(
            e["source_key"],
            e["target_key"],
            weight=float(e["weight"]),
            description=e["description"] or "",
            keywords="; ".join(e["keywords"] or []),
        )
    with atomic_path(Path(out), ".graphml") as tmp:
        nx.write_graphml(g, tmp)
