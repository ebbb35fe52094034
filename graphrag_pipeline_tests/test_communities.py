"""Tests for graphrag_pipeline.core.communities (hierarchical Leiden)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import networkx as nx
import polars as pl
import pytest

from graphrag_pipeline.core.communities import COMMUNITY_SCHEMA, detect_communities


def frames(g: nx.Graph, descriptions: dict | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    descriptions = descriptions or {}
    keys = sorted(g.nodes)
    nodes = pl.DataFrame({"key": keys, "description": [descriptions.get(k, f"about {k}") for k in keys]})
    rows = sorted((min(a, b), max(a, b), float(d.get("weight", 1.0))) for a, b, d in g.edges(data=True))
    edges = pl.DataFrame(
        {"source_key": [r[0] for r in rows], "target_key": [r[1] for r in rows], "weight": [r[2] for r in rows]},
        schema={"source_key": pl.Utf8, "target_key": pl.Utf8, "weight": pl.Float64},
    )
    return nodes, edges


def karate(prefix: str = "k") -> nx.Graph:
    g = nx.karate_club_graph()
    return nx.relabel_nodes(g, {n: f"{prefix}{n:02d}" for n in g})


def cliques(prefix: str, count: int, size: int) -> nx.Graph:
    """`count` cliques of `size` nodes, each weakly linked to the next."""
    g = nx.Graph()
    for c in range(count):
        members = [f"{prefix}{c}_{i}" for i in range(size)]
        g.add_edges_from(itertools.combinations(members, 2), weight=1.0)
        if c + 1 < count:
            g.add_edge(f"{prefix}{c}_0", f"{prefix}{c + 1}_1", weight=0.1)
    return g


def test_empty_graph_has_no_communities_and_says_so():
    nodes, edges = frames(nx.Graph())
    result = detect_communities(nodes, edges)
    assert result.communities.height == 0
    assert result.communities.schema == pl.Schema(COMMUNITY_SCHEMA)
    assert "empty" in result.message


def test_edgeless_graph_has_no_communities_and_says_so():
    g = nx.Graph()
    g.add_nodes_from(["a", "b", "c"])
    nodes, edges = frames(g)
    result = detect_communities(nodes, edges)
    assert result.communities.height == 0
    assert result.communities.schema == pl.Schema(COMMUNITY_SCHEMA)
    assert "3 nodes" in result.message and "no edges" in result.message


def test_deterministic_across_runs():
    nodes, edges = frames(karate())
    a = detect_communities(nodes, edges, max_cluster_size=5)
    b = detect_communities(nodes, edges, max_cluster_size=5)
    cols = ["community_id", "level", "parent_id", "nodes", "size", "weight", "fingerprint"]
    assert a.communities.select(cols).to_dicts() == b.communities.select(cols).to_dicts()
    assert a.message == b.message
    # nor on the order of the input rows
    c = detect_communities(nodes.reverse(), edges.reverse(), max_cluster_size=5)
    assert c.communities.select(cols).to_dicts() == a.communities.select(cols).to_dicts()


_RUN_IN_SUBPROCESS = """
import json, networkx as nx, polars as pl
from graphrag_pipeline.core.communities import detect_communities
g = nx.relabel_nodes(nx.karate_club_graph(), lambda n: f"k{n:02d}")
rows = sorted((min(a, b), max(a, b)) for a, b in g.edges())
nodes = pl.DataFrame({"key": sorted(g.nodes), "description": ["d " + k for k in sorted(g.nodes)]})
edges = pl.DataFrame({"source_key": [a for a, _ in rows], "target_key": [b for _, b in rows],
                      "weight": [1.0] * len(rows)})
df = detect_communities(nodes, edges, max_cluster_size=5).communities
print(json.dumps(df.select("community_id", "parent_id", "nodes").to_dicts()))
"""


def test_community_ids_do_not_depend_on_the_hash_seed():
    # community ids key the report partitions: they must be the same in every process
    outputs = []
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run([sys.executable, "-c", _RUN_IN_SUBPROCESS], env=env, capture_output=True,
                              text=True, timeout=120, check=True)
        outputs.append(json.loads(done.stdout))
    assert outputs[0] and outputs[0] == outputs[1] == outputs[2]


def test_levels_weights_and_parents():
    nodes, edges = frames(karate())
    result = detect_communities(nodes, edges, max_cluster_size=5)
    df = result.communities
    levels = sorted(set(df["level"].to_list()))
    assert len(levels) >= 2
    assert levels == list(range(len(levels)))  # every level present, none skipped
    assert df["community_id"].n_unique() == df.height
    by_id = {r["community_id"]: r for r in df.to_dicts()}
    for level in levels:
        w = df.filter(pl.col("level") == level)["weight"]
        assert w.max() == pytest.approx(1.0)
        assert w.min() > 0
    # level 0 partitions the (connected) graph
    level0 = df.filter(pl.col("level") == 0)
    members0 = [k for ks in level0["nodes"].to_list() for k in ks]
    assert sorted(members0) == sorted(nodes["key"].to_list())
    for row in df.to_dicts():
        assert row["size"] == len(row["nodes"]) and row["nodes"] == sorted(row["nodes"])
        assert row["community_id"] == f"L{row['level']}-{row['fingerprint']}"
        if row["level"] == 0:
            assert row["parent_id"] is None
        else:
            parent = by_id[row["parent_id"]]  # an existing community ...
            assert parent["level"] == row["level"] - 1  # ... one level up ...
            assert set(row["nodes"]) <= set(parent["nodes"])  # ... that contains it
    assert f"{df.height} communities" in result.message


def test_fingerprint_follows_member_descriptions_only():
    g = nx.union(karate("a"), cliques("b", 3, 6))  # two disjoint parts
    nodes, edges = frames(g)
    before = detect_communities(nodes, edges, max_cluster_size=6, use_lcc=False).communities
    changed = "a05"
    nodes2, edges2 = frames(g, {changed: "a rewritten description"})
    after = detect_communities(nodes2, edges2, max_cluster_size=6, use_lcc=False).communities

    def by_members(df):
        return {(r["level"], tuple(r["nodes"])): r["fingerprint"] for r in df.to_dicts()}

    fb, fa = by_members(before), by_members(after)
    assert fb.keys() == fa.keys()  # same clustering: only a description changed
    touched = [k for k in fb if changed in k[1]]
    assert touched
    for k in fb:
        if changed in k[1]:
            assert fa[k] != fb[k], k
        else:
            assert fa[k] == fb[k], k
    untouched_b = {r["community_id"] for r in before.to_dicts() if r["nodes"][0].startswith("b")}
    assert untouched_b and untouched_b <= set(after["community_id"].to_list())


def test_fingerprint_changes_with_internal_edges():
    g = cliques("c", 3, 6)
    nodes, edges = frames(g)
    before = detect_communities(nodes, edges, max_cluster_size=12).communities
    g.remove_edge("c0_2", "c0_3")
    nodes2, edges2 = frames(g)
    after = detect_communities(nodes2, edges2, max_cluster_size=12).communities
    fb = {tuple(r["nodes"]): r["fingerprint"] for r in before.to_dicts()}
    fa = {tuple(r["nodes"]): r["fingerprint"] for r in after.to_dicts()}
    for members, fp in fb.items():
        if members in fa:
            assert (fa[members] != fp) == ("c0_2" in members)


def test_use_lcc_keeps_only_the_largest_component():
    g = nx.union(cliques("big", 2, 6), cliques("small", 1, 4))
    nodes, edges = frames(g)
    lcc = detect_communities(nodes, edges, use_lcc=True).communities
    members = {k for ks in lcc["nodes"].to_list() for k in ks}
    assert members and all(k.startswith("big") for k in members)
    assert len(members) == 12
    everything = detect_communities(nodes, edges, use_lcc=False).communities
    members = {k for ks in everything["nodes"].to_list() for k in ks}
    assert len(members) == 16 and any(k.startswith("small") for k in members)


def test_nonpositive_weights_are_treated_as_one():
    g = cliques("w", 2, 5)
    nodes, edges = frames(g)
    zero = edges.with_columns(pl.lit(0.0).alias("weight"))
    ones = edges.with_columns(pl.lit(1.0).alias("weight"))
    a = detect_communities(nodes, zero).communities
    b = detect_communities(nodes, ones).communities
    assert a["community_id"].to_list() == b["community_id"].to_list()
