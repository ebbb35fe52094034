"""Tests for graphrag_pipeline.graph.communities (hierarchical Leiden)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import networkx as nx
import polars as pl
import pytest

from graphrag_pipeline.graph.communities import COMMUNITY_SCHEMA, detect_communities


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
from graphrag_pipeline.graph.communities import detect_communities
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
        done = subprocess.run(
            [sys.executable, "-c", _RUN_IN_SUBPROCESS], env=env, capture_output=True, text=True, timeout=120, check=True
        )
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


# ---------------------------------------------------------------------------------------------
# stable communities: the previous partition is kept, only the changed frontier moves
# ---------------------------------------------------------------------------------------------
import numpy as np  # noqa: E402

from graphrag_pipeline.graph.communities import changed_share, update_communities  # noqa: E402
from graphrag_pipeline.graph.frontier_leiden import CSRGraph, frontier_update, modularity, pair_order  # noqa: E402


def planted(groups: int = 12, size: int = 30, p_in: float = 0.3, p_out: float = 0.004, seed: int = 3) -> nx.Graph:
    g = nx.random_partition_graph([size] * groups, p_in, p_out, seed=seed)
    g = nx.relabel_nodes(g, {n: f"n{n:04d}" for n in g})
    rng = np.random.default_rng(seed)
    for a, b in g.edges:
        g[a][b]["weight"] = float(rng.integers(1, 4))
    return g


def ids_by_members(df: pl.DataFrame) -> dict:
    return {(r["level"], tuple(r["nodes"])): r["community_id"] for r in df.to_dicts()}


def test_frontier_update_moves_only_frontier_nodes():
    # two triangles joined by one edge; a new node 6 tied to the first triangle joins it, nothing else moves
    edges = [(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5), (2, 3), (6, 0), (6, 1)]
    src, dst = np.array([a for a, _ in edges]), np.array([b for _, b in edges])
    graph = CSRGraph.from_edges(7, src, dst, np.ones(len(edges)))
    mask = np.ones(7, dtype=bool)
    labels = np.array([0, 0, 0, 1, 1, 1, -1])
    frontier = np.zeros(7, dtype=bool)
    out = frontier_update(graph, mask, labels, frontier, next_label=2)
    assert out.labels.tolist() == [0, 0, 0, 1, 1, 1, 0]
    assert modularity(graph, mask, out.labels) > modularity(graph, mask, np.array([0, 0, 0, 1, 1, 1, 2]))
    # a node outside the frontier keeps a bad label; inside the frontier it moves
    bad = np.array([0, 0, 1, 1, 1, 1, 0])
    assert frontier_update(graph, mask, bad, frontier, 2).labels.tolist() == bad.tolist()
    frontier[2] = True
    assert frontier_update(graph, mask, bad, frontier, 2).labels[2] == 0


def test_frontier_update_splits_disconnected_and_merges_new_fragments():
    # a "community" made of two separate triangles is split; a new triangle of new nodes ends up together
    edges = [(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5), (2, 3), (6, 7), (6, 8), (7, 8), (8, 0)]
    src, dst = np.array([a for a, _ in edges]), np.array([b for _, b in edges])
    graph = CSRGraph.from_edges(9, src, dst, np.ones(len(edges)))
    mask = np.ones(9, dtype=bool)
    labels = np.array([0, 0, 0, 1, 1, 1, -1, -1, -1])
    out = frontier_update(graph, mask, labels, np.zeros(9, dtype=bool), next_label=2)
    assert len({int(out.labels[i]) for i in (6, 7, 8)}) == 1  # the new triangle is one community
    assert out.labels[0] == 0 and out.labels[3] == 1
    q = modularity(graph, mask, out.labels)
    import graspologic_native as gn

    el = [(str(a), str(b), 1.0) for a, b in edges]
    assert q == pytest.approx(gn.modularity(el, {str(i): int(out.labels[i]) for i in range(9)}), abs=1e-9)


def test_small_change_keeps_most_communities_and_their_ids():
    g = planted()
    nodes, edges = frames(g)
    first = update_communities(nodes, edges, None, max_cluster_size=12)
    assert first.metrics["reclustered"] and first.metrics["recluster_reason"] == "first clustering"
    assert max(first.communities["level"].to_list()) >= 1  # groups of 30 are split below 12 members
    # one new entity tied to two nodes of one group, one re-weighted edge
    a, b = sorted(g.edges)[10]
    g[a][b]["weight"] += 2
    g.add_edge("new-entity", "n0001", weight=2.0)
    g.add_edge("new-entity", "n0002", weight=1.0)
    nodes2, edges2 = frames(g)
    second = update_communities(nodes2, edges2, first.state, max_cluster_size=12)
    m = second.metrics
    assert not m["reclustered"] and m["source"] == "frontier update"
    before, after = ids_by_members(first.communities), ids_by_members(second.communities)
    kept = set(before.values()) & set(after.values())
    assert m["communities_changed"] == len(set(after.values()) - set(before.values()))
    assert 1 <= m["communities_changed"] <= 8 and len(kept) >= len(before) - 8
    assert m["modularity_kept"] >= 0.98 * m["modularity_fresh"]
    # untouched communities: same members, same id
    for key, cid in before.items():
        if "n0001" not in key[1] and a not in key[1] and b not in key[1]:
            assert after.get(key) == cid, key
    assert any("new-entity" in key[1] for key in after)


def test_quality_guard_and_settings_force_a_fresh_clustering():
    g = planted(groups=6)
    nodes, edges = frames(g)
    first = update_communities(nodes, edges, None, max_cluster_size=12)
    guarded = update_communities(nodes, edges, first.state, max_cluster_size=12, quality_floor=1.5)
    assert guarded.metrics["reclustered"] and "modularity of the kept partition" in guarded.metrics["recluster_reason"]
    # ids follow content: a fresh clustering of the same graph gives the same communities and ids
    assert ids_by_members(guarded.communities) == ids_by_members(first.communities)
    asked = update_communities(nodes, edges, first.state, max_cluster_size=12, full_recluster=True)
    assert asked.metrics["recluster_reason"] == "full re-clustering was asked for"
    other = update_communities(nodes, edges, first.state, max_cluster_size=20)
    assert "settings changed" in other.metrics["recluster_reason"]


def test_an_undone_edit_gets_the_same_communities_and_ids_back():
    g = planted(groups=8)
    nodes, edges = frames(g)
    memo = {}
    first = update_communities(nodes, edges, None, max_cluster_size=12, memo=memo.get)
    memo[first.memo[0]] = first.memo[1]
    g2 = g.copy()
    for i in range(5):
        g2.add_edge(f"x{i}", "n0005", weight=3.0)
        g2.add_edge(f"x{i}", "n0100", weight=3.0)
    second = update_communities(*frames(g2), first.state, max_cluster_size=12, memo=memo.get)
    memo[second.memo[0]] = second.memo[1]
    assert second.metrics["communities_changed"] >= 1
    third = update_communities(nodes, edges, second.state, max_cluster_size=12, memo=memo.get)
    assert third.metrics["source"].startswith("memo")
    assert ids_by_members(third.communities) == ids_by_members(first.communities)
    assert set(third.communities["community_id"]) <= third.retained_ids


def test_report_ids_follow_material_content_changes_only():
    g = planted(groups=4, size=10)
    nodes, edges = frames(g)
    first = update_communities(nodes, edges, None, max_cluster_size=50)
    target = first.communities.sort("size", descending=True).row(0, named=True)
    member = target["nodes"][0]
    # a small change to one member's description: below the share, the id (and report) stays
    small = {k: f"about {k}" for k in g}
    small[member] = f"about {member}, also noted"
    second = update_communities(*frames(g, small), first.state, max_cluster_size=50)
    assert ids_by_members(second.communities)[(0, tuple(target["nodes"]))] == target["community_id"]
    # rewriting most descriptions of the community is material: a new id, so a new report
    big = dict(small)
    for k in target["nodes"]:
        big[k] = f"{k} is described completely differently now, at much greater length than before " * 3
    third = update_communities(*frames(g, big), second.state, max_cluster_size=50)
    new_id = ids_by_members(third.communities)[(0, tuple(target["nodes"]))]
    assert new_id != target["community_id"]
    assert third.metrics["content_refreshed"] >= 1
    # the share rule itself
    basis = [(1, 10, 40), (2, 20, 60)]
    assert changed_share(basis, basis) == 0.0
    assert changed_share(basis, [(1, 11, 40), (2, 20, 60)]) == pytest.approx(0.4)
    assert changed_share(basis, [(1, 10, 40)]) == pytest.approx(0.6)


def test_lost_reports_retire_their_ids():
    g = planted(groups=4, size=10)
    nodes, edges = frames(g)
    first = update_communities(nodes, edges, None, max_cluster_size=50)
    lost = first.communities["community_id"][0]
    second = update_communities(nodes, edges, first.state, max_cluster_size=50, lost_ids={lost})
    ids = set(second.communities["community_id"].to_list())
    assert lost not in ids and lost in second.state.retired
    assert any(i.startswith(lost + "-") for i in ids)  # same community, a new key
    third = update_communities(nodes, edges, second.state, max_cluster_size=50, full_recluster=True)
    assert lost not in set(third.communities["community_id"].to_list())


def test_community_state_round_trip_and_damage(tmp_path):
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    store = Store(Paths(tmp_path))
    assert store.read_community_state() is None
    g = planted(groups=4, size=10)
    first = update_communities(*frames(g), None, max_cluster_size=50)
    store.write_community_state(first.state)
    back = store.read_community_state()
    assert back is not None and back.generation == first.state.generation
    assert back.table.equals(first.state.table) and back.bases.height == first.state.bases.height
    # a second generation replaces the first; a damaged manifest means "no state" (cluster afresh)
    store.write_community_state(update_communities(*frames(g), back, max_cluster_size=50).state)
    files = sorted(p.name for p in (tmp_path / "graph").glob("communities-state.*.parquet"))
    assert len(files) == 5 and all(".g2." in f for f in files)
    (tmp_path / "graph" / "communities-state.manifest.json").write_text("{not json")
    assert store.read_community_state() is None


def test_unchanged_communities_are_not_looked_at_again_and_a_new_hash_scheme_keeps_ids():
    g = planted(groups=6)
    nodes, edges = frames(g)
    first = update_communities(nodes, edges, None, max_cluster_size=12)
    g[sorted(g.edges)[3][0]][sorted(g.edges)[3][1]]["weight"] += 1
    second = update_communities(*frames(g), first.state, max_cluster_size=12)
    assert second.metrics["communities_unchanged"] >= first.communities.height - 10
    # hashes from another polars version are not comparable: everything is looked at, ids stay
    second.state.hash_scheme = "polars-0.0"
    third = update_communities(*frames(g), second.state, max_cluster_size=12)
    assert third.metrics["communities_unchanged"] == 0
    assert ids_by_members(third.communities) == ids_by_members(second.communities)


def test_cached_edge_items_give_what_computing_them_again_gives():
    """Edge content items are kept in the state while an edge's description is unchanged; an update
    with them must give the same ids, fingerprints and report bases as one that hashes every edge."""
    g = planted(groups=6)
    descriptions = {n: f"entity {n}" for n in g}
    for i, (a, b) in enumerate(sorted(g.edges)):
        g[a][b]["description"] = f"relation {i}"
    nodes, edges = frames(g, descriptions)
    edges = edges.with_columns(pl.format("relation {}-{}", "source_key", "target_key").alias("description"))
    first = update_communities(nodes, edges, None, max_cluster_size=12)
    # the first clustering computed the item of every edge inside a community (not those between them)
    assert 0 < first.state.edges["i"].null_count() < first.state.edges.height / 4
    a, b = sorted(g.edges)[5]
    edited = edges.with_columns(
        pl.when((pl.col("source_key") == a) & (pl.col("target_key") == b))
        .then(pl.lit("a reworded relation"))
        .otherwise(pl.col("description"))
        .alias("description")
    )
    g.add_edge("newcomer", a, weight=2.0)
    nodes2 = pl.concat([nodes, pl.DataFrame({"key": ["newcomer"], "description": ["new"]})], how="diagonal")
    edges2 = pl.concat(
        [edited, pl.DataFrame({"source_key": [a], "target_key": ["newcomer"], "weight": [2.0], "description": ["x"]})],
        how="diagonal_relaxed",
    )
    cached = update_communities(nodes2, edges2, first.state, max_cluster_size=12)
    from dataclasses import replace

    state = replace(first.state, edges=first.state.edges.select("a", "b", "w", "c"))  # no items: all hashed again
    fresh = update_communities(nodes2, edges2, state, max_cluster_size=12)
    cols = ["community_id", "level", "nodes", "fingerprint"]
    assert cached.communities.select(cols).to_dicts() == fresh.communities.select(cols).to_dicts()
    assert cached.state.bases.sort(pl.all()).equals(fresh.state.bases.sort(pl.all()))
    assert cached.metrics["communities_changed"] >= 1
    # the reworded edge's item was hashed again: same item id, another content hash
    pair = (pl.col("a") == min(a, b)) & (pl.col("b") == max(a, b))
    row, before = cached.state.edges.filter(pair), first.state.edges.filter(pair)
    assert row["i"].item() == before["i"].item() and row["h"].item() != before["h"].item()


def test_cached_node_items_give_what_computing_them_again_gives(monkeypatch):
    """Node content items are kept in the state while a node's text is unchanged; an update with them
    gives the same ids, fingerprints and report bases as one that hashes every member's text, and
    hashes only the texts that changed."""
    from dataclasses import replace

    from graphrag_pipeline.graph import communities

    g = planted(groups=6)
    descriptions = {n: f"entity {n} " * 20 for n in g}
    nodes, edges = frames(g, descriptions)
    first = update_communities(nodes, edges, None, max_cluster_size=12)
    assert first.state.nodes["i"].null_count() == 0 and first.state.nodes.height == nodes.height
    a = sorted(g.nodes)[7]
    nodes2 = nodes.with_columns(
        pl.when(pl.col("key") == a)
        .then(pl.lit("a reworded entity"))
        .otherwise(pl.col("description"))
        .alias("description")
    )
    hashed = []
    h64 = communities._h64
    monkeypatch.setattr(communities, "_h64", lambda text: hashed.append(text) or h64(text))
    cached = update_communities(nodes2, edges, first.state, max_cluster_size=12)
    node_texts = [t for t in hashed if not t.startswith(("n\x00", "e\x00")) and "entity" in t]
    assert node_texts == [f"{a}\x00\x00a reworded entity"], node_texts  # (name, type, description)
    hashed.clear()
    state = replace(first.state, nodes=first.state.nodes.select("key", "c"))  # no items: all hashed again
    fresh = update_communities(nodes2, edges, state, max_cluster_size=12)
    assert len([t for t in hashed if "entity" in t]) > 20
    cols = ["community_id", "level", "nodes", "fingerprint"]
    assert cached.communities.select(cols).to_dicts() == fresh.communities.select(cols).to_dicts()
    assert cached.state.bases.sort(pl.all()).equals(fresh.state.bases.sort(pl.all()))
    # the items computed afresh are those kept; the kept state also carries the items of the nodes
    # not looked at this time
    computed = fresh.state.nodes.drop_nulls()
    assert 0 < computed.height < nodes.height and cached.state.nodes["i"].null_count() == 0
    assert computed.sort("key").equals(cached.state.nodes.join(computed.select("key"), on="key").sort("key"))
    # the reworded member's communities have another fingerprint (their ids: the share rule)
    with_a = pl.col("nodes").list.contains(a)
    before_fp = set(first.communities.filter(with_a)["fingerprint"].to_list())
    assert before_fp and not before_fp & set(cached.communities.filter(with_a)["fingerprint"].to_list())
    row, before = (x.filter(pl.col("key") == a) for x in (cached.state.nodes, first.state.nodes))
    assert row["i"].item() == before["i"].item() and row["h"].item() != before["h"].item()


def test_degrees_within_a_mask_read_from_its_rows_equal_a_pass_over_every_edge():
    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(1, 80))
        m = int(rng.integers(0, 300))
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
        keep = src != dst
        g = CSRGraph.from_edges(n, src[keep], dst[keep], rng.random(int(keep.sum())) * 3)
        mask = rng.random(n) < rng.random() * 0.3  # small masks take the rows-only path
        inside = mask[g.indices]
        row = np.repeat(np.arange(g.n), np.diff(g.indptr))
        want = np.where(mask, np.bincount(row[inside], weights=g.weights[inside], minlength=g.n), 0.0)
        assert np.array_equal(g.degrees(mask), want), trial


def test_pair_order_is_the_stable_sort_by_both_ends_below_and_above_the_radix_bound():
    """pair_order's two 16-bit passes give exactly the stable sort of the pair codes (ties keep their
    order), on both sides of 65,536 nodes, where it sorts the codes instead."""
    rng = np.random.default_rng(11)
    for n in (1, 2, 7, 300, 65536, 65537, 200000):
        for m in (0, 1, 5000):
            a = rng.integers(0, n, m)
            b = rng.integers(0, n, m)
            expected = np.argsort(a.astype(np.int64) * n + b, kind="stable")
            got = pair_order(a, b, n)
            assert np.array_equal(got, expected), (n, m)
    # the edges of a built graph come out sorted by (row, neighbour), as before
    g = CSRGraph.from_edges(4, np.array([0, 1, 0, 2]), np.array([3, 2, 1, 3]), np.array([1.0, 2.0, 3.0, 4.0]))
    assert g.indices.tolist() == [1, 3, 0, 2, 1, 3, 0, 2]
    assert g.indptr.tolist() == [0, 2, 4, 6, 8]


def test_a_graph_of_sorted_pairs_is_built_without_sorting_both_directions_and_equals_the_general_build(monkeypatch):
    """Pairs given once, sorted, the smaller end first (the clustered graph's edges): CSRGraph.from_edges
    builds the same arrays as from both directions sorted (below and above 65,536 nodes), and
    _clustered_graph finds the same graph from the resolved graph's sorted edges as from the
    same edges in another order."""
    import polars as pl

    from graphrag_pipeline.graph import communities, frontier_leiden

    rng = np.random.default_rng(5)
    calls = []
    triangle = frontier_leiden.CSRGraph._from_triangle
    monkeypatch.setattr(CSRGraph, "_from_triangle", classmethod(lambda cls, *a: calls.append(1) or triangle(*a)))

    def general(n, src, dst, w):  # both directions, sorted by pair_order
        a, b, ww = np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([w, w])
        order = pair_order(a, b, n)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(a[order], minlength=n), out=indptr[1:])
        return indptr, b[order], ww[order], a[order]

    for n in (2, 9, 300, 70000):
        for m in (1, 40, 3000):
            a, b = rng.integers(0, n, m), rng.integers(0, n, m)
            pairs = np.unique(np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1)[a != b], axis=0)
            if not len(pairs):
                continue
            src, dst, w = pairs[:, 0], pairs[:, 1], rng.random(len(pairs))
            calls.clear()
            g = CSRGraph.from_edges(n, src, dst, w)
            assert calls == [1], (n, m)
            for got, want in zip((g.indptr, g.indices, g.weights, g.rows), general(n, src, dst, w)):
                assert np.array_equal(got, want), (n, m)
            calls.clear()
            CSRGraph.from_edges(n, dst, src, w)  # the larger end first: the general build
            assert calls == []

    # the clustered graph of a resolved graph's edges (sorted pairs) and of the same edges shuffled
    keys = [f"k{i:03d}" for i in range(120)]
    pairs = sorted({tuple(sorted(rng.choice(keys, 2, replace=False).tolist())) for _ in range(400)})
    edges = pl.DataFrame(
        {
            "source_key": [p[0] for p in pairs],
            "target_key": [p[1] for p in pairs],
            "weight": rng.integers(0, 4, len(pairs)).astype(float),
            "description": [f"{p[0]} {p[1]}" for p in pairs],
        }
    )
    nodes = pl.DataFrame({"key": keys})
    for lcc in (False, True):
        sorted_graph = communities._clustered_graph(nodes, edges, lcc)
        shuffled = communities._clustered_graph(nodes, edges.sample(fraction=1.0, shuffle=True, seed=1), lcc)
        for attr in ("src", "dst", "w", "c", "mask"):
            assert np.array_equal(getattr(sorted_graph, attr), getattr(shuffled, attr)), (lcc, attr)
        for attr in ("indptr", "indices", "weights", "rows"):
            assert np.array_equal(getattr(sorted_graph.csr, attr), getattr(shuffled.csr, attr)), (lcc, attr)
