"""Hierarchical Leiden communities over the resolved graph (graspologic's Rust core).

Every level is kept. A community's weight is the sum over its nodes of rank (degree) x node
weight (1), normalised by the largest community weight of its level, as in the seeds. Its
fingerprint hashes its level and content (member keys and descriptions, internal edges), so an
unchanged community keeps its fingerprint - and its report - across rebuilds.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

import graspologic_native as gn
import networkx as nx
import polars as pl

DEFAULT_MAX_CLUSTER_SIZE = 12
DEFAULT_SEED = 0xDEADBEEF

COMMUNITY_SCHEMA = {
    "community_id": pl.Utf8,  # fingerprint-based key, also the report partition key
    "level": pl.Int64,
    "cluster": pl.Int64,  # graspologic's cluster number (not stable across runs)
    "parent_id": pl.Utf8,  # community_id of the parent cluster, null at level 0
    "nodes": pl.List(pl.Utf8),  # member node keys, sorted
    "size": pl.Int64,
    "weight": pl.Float64,
    "fingerprint": pl.Utf8,
}


@dataclass
class CommunityResult:
    communities: pl.DataFrame
    message: str


def stable_largest_connected_component(g: nx.Graph) -> nx.Graph:
    if g.number_of_nodes() == 0:
        return g
    comp = max(nx.connected_components(g), key=lambda c: (len(c), sorted(c)[0] if c else ""))
    return g.subgraph(comp).copy()


def _fingerprint(level: int, members: list[str], nodes: dict, edges: list[tuple]) -> str:
    h = hashlib.sha256(f"L{level}".encode())
    for key in members:
        h.update(b"\x00n" + key.encode() + b"\x01" + nodes.get(key, "").encode())
    for e in edges:
        h.update(b"\x00e" + "\x01".join(map(str, e)).encode())
    return h.hexdigest()[:16]


def detect_communities(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    *,
    max_cluster_size: int = DEFAULT_MAX_CLUSTER_SIZE,
    seed: int = DEFAULT_SEED,
    use_lcc: bool = True,
) -> CommunityResult:
    """Run hierarchical Leiden; an empty or edgeless graph yields zero communities and a message."""
    empty = pl.DataFrame(schema=COMMUNITY_SCHEMA)
    if nodes.height == 0:
        return CommunityResult(empty, "graph is empty: no communities")
    if edges.height == 0:
        return CommunityResult(empty, f"graph has {nodes.height} nodes but no edges: no communities")
    g = nx.Graph()
    g.add_nodes_from(nodes["key"].to_list())
    for s, t, w in zip(edges["source_key"], edges["target_key"], edges["weight"]):
        g.add_edge(s, t, weight=float(w) if w and w > 0 else 1.0)
    if use_lcc:
        g = stable_largest_connected_component(g)
    # each edge as (smaller key, larger key): networkx orients edges by node order, which follows the
    # input rows and, after the LCC copy, set (hash-seed) order; Leiden's result, and so every
    # community id, would otherwise change with the row order and from one process to the next
    edge_list = sorted((min(s, t), max(s, t), d["weight"]) for s, t, d in g.edges(data=True))
    clusters = gn.hierarchical_leiden(edge_list, max_cluster_size=max_cluster_size, seed=seed)

    members: dict[tuple[int, int], set[str]] = defaultdict(set)
    parent: dict[tuple[int, int], int | None] = {}
    for c in clusters:
        members[(c.level, c.cluster)].add(c.node)
        parent[(c.level, c.cluster)] = c.parent_cluster
    degree = dict(g.degree())
    descriptions = dict(zip(nodes["key"].to_list(), nodes["description"].to_list()))
    rows = []
    for (level, cluster), keys in members.items():
        member_list = sorted(keys)
        sub_edges = sorted(  # oriented (smaller, larger): a subgraph view orients by set order
            (min(s, t), max(s, t), round(float(d["weight"]), 6))
            for s, t, d in g.subgraph(member_list).edges(data=True)
        )
        fp = _fingerprint(level, member_list, descriptions, sub_edges)
        weight = float(sum(degree.get(k, 0) * 1.0 for k in member_list))
        rows.append((level, cluster, member_list, weight, fp))

    ids = {(lvl, cl): f"L{lvl}-{fp}" for lvl, cl, _, _, fp in rows}
    max_w: dict[int, float] = defaultdict(float)
    for lvl, _, _, w, _ in rows:
        max_w[lvl] = max(max_w[lvl], w)
    out = []
    for lvl, cl, member_list, w, fp in rows:
        p = parent.get((lvl, cl))
        parent_id = ids.get((lvl - 1, p)) if p is not None and lvl > 0 else None
        out.append({
            "community_id": ids[(lvl, cl)], "level": lvl, "cluster": cl, "parent_id": parent_id,
            "nodes": member_list, "size": len(member_list),
            "weight": (w / max_w[lvl]) if max_w[lvl] > 0 else 0.0, "fingerprint": fp,
        })
    df = pl.DataFrame(out, schema=COMMUNITY_SCHEMA).sort(["level", "weight", "community_id"], descending=[False, True, False])
    per_level = df.group_by("level").len().sort("level")
    levels = ", ".join(f"level {l}: {n}" for l, n in per_level.iter_rows())
    return CommunityResult(df, f"{df.height} communities over {g.number_of_nodes()} nodes ({levels})")
