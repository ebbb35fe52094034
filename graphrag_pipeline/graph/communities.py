"""Hierarchical Leiden communities over the resolved graph, kept stable from one build to the next.

The first build clusters from scratch with graspologic's Rust core (`hierarchical_leiden`: Leiden
on the graph, then again on every community of `max_cluster_size` nodes or more, level by
level). Every later build starts from the previous assignment and lets only the changed part of
the graph move (`frontier_leiden`): nodes whose edges changed and new nodes, then the neighbours
of any node that moves.
Going down the hierarchy, a community whose members and internal edges are unchanged keeps its
whole sub-tree; one that gained or lost members is re-split starting from its previous
sub-communities (or from scratch when it had none). So a small edit changes a few communities
and leaves every other community, its id and its report alone.

A quality guard compares the modularity of the kept top level with a fresh Leiden run on the
same graph (well under a second at 100k edges). Below `quality_floor` x the fresh value, or
when asked, or when the clustering settings changed, everything is re-clustered from scratch;
ids are then still reused wherever a community came out the same.

Community ids key the report partitions. An id is `L<level>-<fingerprint>`, the fingerprint
hashing the level, the members and their texts and the internal edges (an order-free sum of stable
64-bit item hashes, computed over arrays; an edge's item is kept in the state while its description
is unchanged). An id once given stays with its community through the state, whatever later
versions compute as fingerprints. A community keeps its id as long as its
members are the same and less than `refresh_share` of its context (entity and relation texts,
tokens estimated as characters / 4) differs from the content its report was written from (its
"basis"). A community that comes back with members and content it had before - an edit that was
undone - finds its old id, and so its stored report, in the history of recent ids. A graph that
was clustered before (same edges and weights) gets the same partition again from a small memo.

A community's weight is the sum over its nodes of their degree, normalised by the largest weight
of its level, as in the seeds.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import graspologic_native as gn
import numpy as np
import polars as pl
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from graphrag_pipeline.graph.frontier_leiden import CSRGraph, frontier_update, modularity, pair_order
from graphrag_pipeline.settings import default as setting_default

DEFAULT_MAX_CLUSTER_SIZE = setting_default("GRAPHRAG_MAX_CLUSTER_SIZE")
DEFAULT_SEED = 0xDEADBEEF
DEFAULT_QUALITY_FLOOR = 0.98  # kept modularity below this share of a fresh run's -> re-cluster
DEFAULT_REFRESH_SHARE = 0.2  # share of a community's context that must change before its report is rewritten
HISTORY_GENERATIONS = 10  # superseded ids (and their reports) are kept this many clustering changes

COMMUNITY_SCHEMA = {
    "community_id": pl.Utf8,  # L<level>-<fingerprint when the report was written>; the report partition key
    "level": pl.Int64,
    "cluster": pl.Int64,  # internal label (not stable across builds)
    "parent_id": pl.Utf8,  # community_id of the parent cluster, null at level 0
    "nodes": pl.List(pl.Utf8),  # member node keys, sorted
    "size": pl.Int64,
    "weight": pl.Float64,
    "fingerprint": pl.Utf8,  # hash of the current level, members, descriptions and internal edges
}
EDGE_STATE_SCHEMA = {"a": pl.Utf8, "b": pl.Utf8, "w": pl.Float64, "c": pl.UInt64}  # c: hash of the description
# the content item of an edge (its stable id, the stable hash of its description, its tokens), kept with
# the edge state while the description (c) is unchanged: a large community's items are not hashed again
EDGE_ITEM_SCHEMA = {"i": pl.UInt64, "h": pl.UInt64, "t": pl.Int64}
NODE_STATE_SCHEMA = {"key": pl.Utf8, "c": pl.UInt64}  # c: hash of name, type and description
# a node's content item (EDGE_ITEM_SCHEMA's columns), kept with the node state while its text (c) is
# unchanged: the members of a large community changed by an edit are not hashed again (the node
# texts of the graph of 50,000 documents are 120 MB, a hub's description megabytes)
NODE_ITEM_STATE_SCHEMA = {**NODE_STATE_SCHEMA, **EDGE_ITEM_SCHEMA}
# change detection hashes (polars') are compared only with hashes of the same scheme; the report
# bases use a stable hash of their own (blake2b), so a polars upgrade costs work, never reports
HASH_SCHEME = f"polars-{pl.__version__}"
BASIS_SCHEMA = {"community_id": pl.Utf8, "item": pl.UInt64, "content": pl.UInt64, "tokens": pl.Int64}
HISTORY_SCHEMA = {"community_id": pl.Utf8, "level": pl.Int64, "members_hash": pl.Utf8, "last_generation": pl.Int64}
STRUCTURE_SCHEMA = {"label": pl.Int64, "level": pl.Int64, "parent": pl.Int64, "nodes": pl.List(pl.Utf8)}


@dataclass
class CommunityResult:
    communities: pl.DataFrame
    message: str


@dataclass
class CommunityState:
    """What one clustering leaves for the next: its table, the graph it clustered, the content each
    id's report was written from (bases) and the recent ids (history)."""

    table: pl.DataFrame
    edges: pl.DataFrame  # the clustered edge list (a < b, weight)
    bases: pl.DataFrame
    history: pl.DataFrame
    generation: int
    settings: dict
    retired: set[str] = field(default_factory=set)  # ids never to be used again (their reports were deleted)
    nodes: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=NODE_STATE_SCHEMA))
    hash_scheme: str = HASH_SCHEME


@dataclass
class CommunityUpdate:
    communities: pl.DataFrame
    message: str
    state: CommunityState
    metrics: dict = field(default_factory=dict)
    memo: tuple[str, pl.DataFrame] | None = None  # (graph digest, structure) to remember
    retained_ids: set[str] = field(default_factory=set)  # ids whose reports must be kept (current + recent)


@dataclass
class _Cluster:
    label: int
    level: int
    parent: int | None
    members: np.ndarray  # sorted node indices


# -- the clustered graph ----------------------------------------------------------------------
@dataclass
class _Graph:
    keys: list[str]  # all node keys, sorted; index = node id
    csr: CSRGraph
    mask: np.ndarray  # nodes that are clustered (largest connected component, or all with an edge)
    src: np.ndarray
    dst: np.ndarray
    w: np.ndarray  # the clustered edges, src < dst by key order, sorted by (src, dst)
    c: np.ndarray  # hash of each clustered edge's description
    _frame: pl.DataFrame | None = field(default=None, repr=False)
    _matched: tuple | None = field(default=None, repr=False)  # (previous state, _Matched)

    def edge_list(self) -> list[tuple[str, str, float]]:
        # one str object per key, shared by its edges (no string is decoded per edge)
        k = np.array(self.keys, dtype=object)
        return list(zip(k[self.src].tolist(), k[self.dst].tolist(), self.w.tolist()))

    def edge_frame(self) -> pl.DataFrame:
        """The clustered edges as a table (a, b, w, c), in the order of the edge arrays."""
        if self._frame is None:
            keys = pl.Series("k", self.keys, dtype=pl.Utf8)
            self._frame = pl.DataFrame(
                {"a": keys.gather(self.src), "b": keys.gather(self.dst), "w": self.w, "c": self.c},
                schema=EDGE_STATE_SCHEMA,
            )
        return self._frame

    def against(self, previous: CommunityState) -> _Matched:
        """The clustered edges matched with the previous state's edges on (a, b), by node ids and
        arrays (no join of a million pairs of strings). Computed once per state: the change
        detection and the cached items both read it."""
        if self._matched is None or self._matched[0] is not previous:
            self._matched = (previous, _Matched.of(self, previous.edges))
        return self._matched[1]


@dataclass
class _Matched:
    """The previous state's edges in terms of the current graph."""

    old_a: np.ndarray  # per previous edge: its ends as current node ids (-1: a key gone from the graph)
    old_b: np.ndarray
    row: np.ndarray  # per current edge: its row in the previous edges (-1: new)
    seen: np.ndarray  # per previous edge: still among the current edges

    @classmethod
    def of(cls, g: _Graph, prev_edges: pl.DataFrame) -> _Matched:
        n = len(g.keys)
        ids = pl.DataFrame({"k": g.keys, "i": np.arange(n, dtype=np.int64)}, schema={"k": pl.Utf8, "i": pl.Int64})

        def number(col: str) -> np.ndarray:
            out = prev_edges.select(pl.col(col).alias("k")).join(ids, on="k", how="left", maintain_order="left")
            return out["i"].fill_null(-1).to_numpy().astype(np.int64)

        old_a, old_b = number("a"), number("b")
        # the current edges are sorted by (src, dst): one code per pair, found by binary search
        code = g.src * n + g.dst
        known = (old_a >= 0) & (old_b >= 0)
        old_code = np.where(known, old_a * n + old_b, -1)
        at = np.minimum(np.searchsorted(code, old_code), max(len(code) - 1, 0))
        seen = known & (code[at] == old_code) if len(code) else np.zeros(len(old_code), dtype=bool)
        row = np.full(len(code), -1, dtype=np.int64)
        row[at[seen]] = np.flatnonzero(seen)
        return cls(old_a, old_b, row, seen)


def _clustered_graph(nodes: pl.DataFrame, edges: pl.DataFrame, use_lcc: bool) -> _Graph:
    e = edges.select(
        "source_key",
        "target_key",
        pl.when(pl.col("weight") > 0).then(pl.col("weight")).otherwise(1.0).cast(pl.Float64).alias("w"),
        (pl.col("description").hash(7) if "description" in edges.columns else pl.lit(0, pl.UInt64)).alias("c"),
    ).filter(pl.col("source_key") != pl.col("target_key"))  # no self-loops (nor a missing end)
    # every key numbered by its sorted position (polars sorts UTF-8 by bytes: code point order, as
    # Python does); an Enum of the sorted keys turns each edge end into that number without a
    # Python loop over the edges
    ends = [nodes["key"], e["source_key"].unique(), e["target_key"].unique()]
    keys = pl.concat([x.alias("key").cast(pl.Utf8) for x in ends]).unique().sort().to_list()
    numbered = pl.Enum(keys)
    s = e["source_key"].cast(numbered).to_physical().to_numpy().astype(np.int64)
    t = e["target_key"].cast(numbered).to_physical().to_numpy().astype(np.int64)
    src, dst = np.minimum(s, t), np.maximum(s, t)  # ids follow key order: the smaller key first
    w = e["w"].to_numpy().astype(np.float64)
    c = e["c"].to_numpy().astype(np.uint64)
    n = len(keys)
    # one edge per pair, the last row of the pair (as the table gave it), sorted by (src, dst); the
    # resolved graph's edges are (canonical pairs sorted by key): nothing to sort
    code = src * n + dst
    if len(code) > 1 and not bool(np.all(code[1:] > code[:-1])):
        order = pair_order(src, dst, n)
        last = np.ones(len(order), dtype=bool)
        last[:-1] = code[order][1:] != code[order][:-1]
        order = order[last]
        src, dst, w, c = src[order], dst[order], w[order], c[order]
    has_edge = np.zeros(n, dtype=bool)
    has_edge[src] = True
    has_edge[dst] = True
    if use_lcc and len(src):
        # (the pairs in CSR order already: rows `src` sorted, columns `dst` sorted within a row)
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
        adj = csr_matrix((np.ones(len(src)), dst, indptr), shape=(n, n))
        count, comp = connected_components(adj, directed=False)
        sizes = np.bincount(comp, minlength=count)
        smallest_key = np.full(count, n, dtype=np.int64)  # keys are sorted: the first index is the smallest key
        np.minimum.at(smallest_key, comp, np.arange(n))
        # the largest component; among equals the one whose smallest key sorts last (as before)
        best = np.lexsort((smallest_key, sizes))[-1]
        mask = (comp == best) & has_edge
    else:
        mask = has_edge
    keep = mask[src] & mask[dst]
    src, dst, w, c = src[keep], dst[keep], w[keep], c[keep]
    return _Graph(keys, CSRGraph.from_edges(n, src, dst, w), mask, src, dst, w, c)


def _node_hashes(nodes: pl.DataFrame) -> pl.DataFrame:
    cols = [c for c in ("name", "type", "description") if c in nodes.columns]
    return nodes.select("key", pl.struct(cols).hash(7).alias("c")).cast(NODE_STATE_SCHEMA)


def _graph_digest(g: _Graph, settings: dict) -> str:
    """A hash of the clustered graph (node keys, edges, weights to 6 decimals) and the settings."""
    h = hashlib.sha256(repr(sorted(settings.items())).encode())
    clustered = np.flatnonzero(g.mask)
    h.update("\x00".join(g.keys[i] for i in clustered).encode())
    position = np.cumsum(g.mask) - 1  # edges as positions among the clustered keys
    h.update(position[g.src].astype(np.int64).tobytes())
    h.update(position[g.dst].astype(np.int64).tobytes())
    h.update(np.round(g.w, 6).tobytes())
    return h.hexdigest()[:24]


# -- clustering ---------------------------------------------------------------------------------
def _fresh_labels(csr: CSRGraph, seed: int) -> np.ndarray:
    """The quality guard's fresh Leiden partition of the graph: a community per node id. graspologic's
    CSR entry point reads the graph's arrays in place without the GIL; its edge-list entry point
    needs a Python list of every edge (0.23 s at 50,000 documents) and converts it holding the GIL
    (another 0.2-0.5 s of the main thread), and ran 1.2-1.4 s against 0.4-0.6 s (the same
    modularity within seeds' spread: 0.2702-0.2740 against 0.2717-0.2745 over three seeds).
    A node without edges (outside the clustered part) is a community of its own, which
    the modularity over the clustered nodes ignores."""
    _, labels = gn.leiden_csr(csr.indptr, csr.indices.astype(np.int32), csr.weights, csr.n, seed=seed)
    out = np.full(csr.n, -1, dtype=np.int64)
    if labels:
        out[np.fromiter(labels.keys(), np.int64, len(labels))] = np.fromiter(labels.values(), np.int64, len(labels))
    return out


def _fresh_hierarchy(
    edge_list: list[tuple[str, str, float]],
    index: dict[str, int],
    *,
    max_cluster_size: int,
    seed: int,
    level_offset: int = 0,
    parent: int | None = None,
    next_label: int = 0,
) -> tuple[list[_Cluster], int]:
    """graspologic's hierarchical Leiden on an edge list; labels renumbered from `next_label`."""
    clusters = gn.hierarchical_leiden(edge_list, max_cluster_size=max_cluster_size, seed=seed)
    members: dict[tuple[int, int], list[int]] = defaultdict(list)
    parents: dict[tuple[int, int], int | None] = {}
    for c in clusters:
        members[(c.level, c.cluster)].append(index[c.node])
        parents[(c.level, c.cluster)] = c.parent_cluster
    labels = {}
    for key in sorted(members):
        labels[key] = next_label
        next_label += 1
    out = []
    for (level, cluster), m in sorted(members.items()):
        p = parents[(level, cluster)]
        out.append(
            _Cluster(
                labels[(level, cluster)],
                level + level_offset,
                labels[(level - 1, p)] if level > 0 and p is not None else parent,
                np.array(sorted(m), dtype=np.int64),
            )
        )
    return out, next_label


@dataclass
class _Previous:
    """The previous hierarchy in terms of the current node ids."""

    label_at: list[np.ndarray]  # per level: node -> previous label (-1 = none)
    level: dict[int, int]
    parent: dict[int, int | None]
    member_keys: dict[int, frozenset[str]]  # original members (including nodes gone since)
    children: dict[int, list[int]]
    members: dict[int, np.ndarray]  # members still present
    max_label: int
    ids: dict[int, str] = field(default_factory=dict)
    fingerprints: dict[int, str] = field(default_factory=dict)


def _previous_hierarchy(table: pl.DataFrame, g: _Graph) -> _Previous:
    index = {k: i for i, k in enumerate(g.keys)}
    rows = table.sort(["level", "community_id"]).to_dicts()
    label_of = {r["community_id"]: i for i, r in enumerate(rows)}
    depth = (max(r["level"] for r in rows) + 1) if rows else 0
    label_at = [np.full(len(g.keys), -1, dtype=np.int64) for _ in range(depth + 1)]
    prev = _Previous(label_at, {}, {}, {}, defaultdict(list), {}, len(rows))
    for r in rows:
        lab = label_of[r["community_id"]]
        prev.level[lab] = r["level"]
        prev.parent[lab] = label_of.get(r["parent_id"]) if r["parent_id"] else None
        if prev.parent[lab] is not None:
            prev.children[prev.parent[lab]].append(lab)
        prev.member_keys[lab] = frozenset(r["nodes"])
        prev.ids[lab] = r["community_id"]
        prev.fingerprints[lab] = r["fingerprint"]
        present = np.array(sorted(index[k] for k in r["nodes"] if k in index), dtype=np.int64)
        prev.members[lab] = present
        label_at[r["level"]][present] = lab
    return prev


def _changes(g: _Graph, node_hashes: pl.DataFrame, previous: CommunityState) -> tuple[np.ndarray, np.ndarray]:
    """(moved, touched): `moved` are the nodes whose edges were added, removed or re-weighted and
    the nodes new to the clustering (they start the frontier); `touched` adds the nodes whose own
    text or whose edges' descriptions changed (their communities' content is looked at again)."""
    index = {k: i for i, k in enumerate(g.keys)}
    n = len(g.keys)

    def mark(keys: list[str]) -> np.ndarray:
        out = np.zeros(n, dtype=bool)
        hit = [index[k] for k in keys if k in index]
        out[hit] = True
        return out

    def ends(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The nodes at either end of the edges (a, b); -1 (a key gone from the graph) is skipped."""
        out = np.zeros(n, dtype=bool)
        both = np.concatenate([a, b])
        out[both[both >= 0]] = True
        return out

    m = g.against(previous)
    prev = previous.edges
    same = m.row >= 0  # current edges that were there before
    old = m.row[same]
    # re-weighted: compared as polars compares (a missing old weight counts as a change)
    w_old = prev["w"].gather(old)
    reweighted = ((pl.Series(g.w[same]) - w_old).abs() > 1e-9).fill_null(True).to_numpy()
    changed = ~same
    changed[np.flatnonzero(same)[reweighted]] = True
    moved = ends(g.src[changed], g.dst[changed]) | ends(m.old_a[~m.seen], m.old_b[~m.seen])
    moved |= g.mask & ~ends(m.old_a, m.old_b)  # new to the clustering
    touched = moved.copy()
    if previous.hash_scheme != HASH_SCHEME or previous.nodes.height == 0:
        touched[:] = True
    else:
        # edges added or removed are in `moved` already; here the kept edges whose description changed
        c_old = prev["c"].gather(old) if "c" in prev.columns else pl.Series(values=[None] * len(old), dtype=pl.UInt64)
        text = (pl.Series(g.c[same]) != c_old).fill_null(True).to_numpy()
        at = np.flatnonzero(same)[text]
        touched |= ends(g.src[at], g.dst[at])
        nodes_now = node_hashes.join(previous.nodes, on="key", how="left", suffix="_old")
        touched |= mark(nodes_now.filter(pl.col("c_old").is_null() | (pl.col("c") != pl.col("c_old")))["key"].to_list())
    return moved & g.mask, touched & g.mask


def _sub_edge_list(g: _Graph, members: np.ndarray) -> list[tuple[str, str, float]]:
    inside = np.zeros(len(g.keys), dtype=bool)
    inside[members] = True
    keep = inside[g.src] & inside[g.dst]
    k = g.keys
    return [(k[a], k[b], float(x)) for a, b, x in zip(g.src[keep].tolist(), g.dst[keep].tolist(), g.w[keep].tolist())]


def _update_hierarchy(
    g: _Graph, prev: _Previous, affected: np.ndarray, *, max_cluster_size: int, seed: int
) -> tuple[list[_Cluster], dict]:
    index = {k: i for i, k in enumerate(g.keys)}
    stats = {"moved_nodes": 0, "frontier_nodes": 0, "subtrees_kept": 0, "subtrees_updated": 0, "subtrees_fresh": 0}
    next_label = prev.max_label
    out: list[_Cluster] = []

    start = np.where(g.mask, prev.label_at[0] if prev.label_at else -1, -1)
    frontier = affected & g.mask
    stats["frontier_nodes"] = int(frontier.sum())
    top = frontier_update(g.csr, g.mask, start, frontier, next_label)
    next_label = top.next_label
    stats["moved_nodes"] += top.moved

    def copy_subtree(label: int) -> None:
        for child in sorted(prev.children.get(label, [])):
            out.append(_Cluster(child, prev.level[child], label, prev.members[child]))
            copy_subtree(child)

    def process(level: int, labels: np.ndarray, scope: np.ndarray, parent: int | None) -> None:
        nonlocal next_label
        idx = np.flatnonzero(scope)
        groups: dict[int, list[int]] = defaultdict(list)
        for i, lab in zip(idx.tolist(), labels[idx].tolist()):
            groups[lab].append(i)
        for lab in sorted(groups):
            members = np.array(groups[lab], dtype=np.int64)
            out.append(_Cluster(lab, level, parent, members))
            if len(members) < max_cluster_size:
                continue
            keys = frozenset(g.keys[i] for i in members)
            if prev.level.get(lab) == level and prev.member_keys.get(lab) == keys and not affected[members].any():
                copy_subtree(lab)
                stats["subtrees_kept"] += 1
                continue
            sub = np.zeros(len(g.keys), dtype=bool)
            sub[members] = True
            child = np.full(len(g.keys), -1, dtype=np.int64)
            if level + 1 < len(prev.label_at):
                below = prev.label_at[level + 1][members]
                ok = np.array([b >= 0 and prev.parent.get(int(b)) == lab for b in below.tolist()], dtype=bool)
                child[members[ok]] = below[ok]
            if not (child[members] >= 0).any():
                sub_edges = _sub_edge_list(g, members)
                if not sub_edges:
                    continue
                fresh, next_label = _fresh_hierarchy(
                    sub_edges,
                    index,
                    max_cluster_size=max_cluster_size,
                    seed=seed,
                    level_offset=level + 1,
                    parent=lab,
                    next_label=next_label,
                )
                if sum(1 for c in fresh if c.level == level + 1) > 1:
                    out.extend(fresh)
                stats["subtrees_fresh"] += 1
                continue
            local = (affected & sub) | (sub & (child < 0))
            upd = frontier_update(g.csr, sub, child, local, next_label)
            next_label = upd.next_label
            stats["moved_nodes"] += upd.moved
            stats["subtrees_updated"] += 1
            if len(set(upd.labels[members].tolist())) > 1:
                process(level + 1, upd.labels, sub, lab)

    process(0, top.labels, g.mask.copy(), None)
    return out, stats


def _structure_frame(clusters: list[_Cluster], keys: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"label": c.label, "level": c.level, "parent": c.parent, "nodes": [keys[i] for i in c.members]}
            for c in clusters
        ],
        schema=STRUCTURE_SCHEMA,
    )


def _clusters_from_structure(df: pl.DataFrame, index: dict[str, int]) -> list[_Cluster] | None:
    out = []
    for r in df.to_dicts():
        if any(k not in index for k in r["nodes"]):
            return None
        out.append(
            _Cluster(
                r["label"], r["level"], r["parent"], np.array(sorted(index[k] for k in r["nodes"]), dtype=np.int64)
            )
        )
    return out


# -- content, fingerprints and ids --------------------------------------------------------------
def _h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 arrays (wrapping arithmetic: the same numbers on every machine)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _fingerprint(
    level: int,
    node_item: np.ndarray,
    node_content: np.ndarray,
    edge_item: np.ndarray,
    edge_content: np.ndarray,
    edge_weight: np.ndarray,
) -> str:
    """A hash of the level, the members (their stable ids and texts) and the internal edges (ids,
    descriptions, weights to 6 decimals). The order of members and edges does not matter: it is a
    sum of mixed 64-bit item hashes (computed over arrays, not edge by edge), then SHA-256."""
    nodes = _mix(node_item ^ _mix(node_content))
    weights = np.round(np.asarray(edge_weight, dtype=np.float64) * 1e6).astype(np.int64).view(np.uint64)
    edges = _mix(edge_item ^ _mix(edge_content ^ _mix(weights)))
    with np.errstate(over="ignore"):
        node_sum, edge_sum = int(nodes.sum(dtype=np.uint64)), int(edges.sum(dtype=np.uint64))
    text = f"L{level}\x00{len(node_item)}\x00{node_sum}\x00{len(edge_item)}\x00{edge_sum}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _members_hash(level: int, members: list[str]) -> str:
    return hashlib.sha256((f"L{level}\x00" + "\x00".join(members)).encode()).hexdigest()[:24]


@dataclass
class _Items:
    """Content items (stable id, stable hash of the text, estimated tokens) of nodes or edges, as
    arrays over all of them; `have` marks those computed, `t` < 0 one without text (no item)."""

    i: np.ndarray
    h: np.ndarray
    t: np.ndarray
    have: np.ndarray

    @classmethod
    def empty(cls, n: int) -> _Items:
        return cls(np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.full(n, -1, np.int64), np.zeros(n, dtype=bool))

    def take(self, at: np.ndarray) -> _Content:
        at = at[self.t[at] >= 0]
        return _Content(self.i[at], self.h[at], self.t[at])


@dataclass
class _Content:
    """A community's content items as arrays: item ids, content hashes, tokens (one entry per item)."""

    i: np.ndarray
    h: np.ndarray
    t: np.ndarray

    @classmethod
    def of(cls, rows: list[tuple[int, int, int]]) -> _Content:
        i, h, t = zip(*rows) if rows else ((), (), ())
        return cls(np.array(i, dtype=np.uint64), np.array(h, dtype=np.uint64), np.array(t, dtype=np.int64))

    def __add__(self, other: _Content) -> _Content:
        return _Content(*(np.concatenate([a, b]) for a, b in ((self.i, other.i), (self.h, other.h), (self.t, other.t))))

    def last(self) -> _Content:
        """One entry per item, the last one given (as a dict built from the rows keeps)."""
        ids, first = np.unique(self.i[::-1], return_index=True)
        at = len(self.i) - 1 - first
        return _Content(ids, self.h[at], self.t[at])


_NO_CONTENT = _Content(np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.int64))


def _cached_node_items(g: _Graph, node_hashes: pl.DataFrame, previous: CommunityState | None) -> _Items:
    """The items the previous state computed for nodes whose text is unchanged (same hash, same scheme)."""
    out = _Items.empty(len(g.keys))
    if (
        previous is None
        or previous.hash_scheme != HASH_SCHEME
        or not set(NODE_ITEM_STATE_SCHEMA) <= set(previous.nodes.columns)
    ):
        return out
    positions = pl.DataFrame({"key": g.keys, "_at": np.arange(len(g.keys), dtype=np.int64)})
    old = previous.nodes.select(list(NODE_ITEM_STATE_SCHEMA)).rename({"c": "c_old"})
    kept = (
        node_hashes.join(old, on="key", how="inner")
        .filter((pl.col("c") == pl.col("c_old")) & pl.col("i").is_not_null())
        .join(positions, on="key", how="inner")
    )
    at = kept["_at"].to_numpy()
    out.i[at], out.h[at], out.t[at] = kept["i"].to_numpy(), kept["h"].to_numpy(), kept["t"].to_numpy()
    out.have[at] = True
    return out


def _node_items(g: _Graph, nodes: pl.DataFrame, wanted: np.ndarray, cached: _Items | None = None) -> _Items:
    """The items of the nodes `wanted` (a node missing from `nodes` has an id but no text item), those
    in `cached` (_cached_node_items) taken from there; `cached` gains the others."""
    out = cached if cached is not None else _Items.empty(len(g.keys))
    wanted = wanted[~out.have[wanted]]
    if not wanted.size:
        return out
    keys = [g.keys[i] for i in wanted.tolist()]
    out.i[wanted] = [_h64("n\x00" + k) for k in keys]
    out.have[wanted] = True
    sub = nodes.filter(pl.col("key").is_in(pl.Series("k", keys, dtype=pl.Utf8).implode()))
    cols = set(sub.columns)
    names = sub["name"].to_list() if "name" in cols else sub["key"].to_list()
    types = sub["type"].to_list() if "type" in cols else [""] * sub.height
    position = dict(zip(keys, wanted.tolist()))
    for key, name, etype, desc in zip(sub["key"].to_list(), names, types, sub["description"].to_list()):
        text = f"{name}\x00{etype}\x00{desc or ''}"
        j = position[key]
        out.h[j], out.t[j] = _h64(text), len(text) // 4 + 1
    return out


def _cached_edge_items(g: _Graph, previous: CommunityState | None) -> _Items:
    """The items the previous state computed for edges whose description is unchanged (same hash, same scheme)."""
    out = _Items.empty(len(g.src))
    if (
        previous is None
        or previous.hash_scheme != HASH_SCHEME
        or not set(EDGE_ITEM_SCHEMA) <= set(previous.edges.columns)
        or "c" not in previous.edges.columns
    ):
        return out
    # the edges present before and now with the same description hash, whose items were kept
    m = g.against(previous)
    j = np.flatnonzero(m.row >= 0)
    old = previous.edges.select("c", *EDGE_ITEM_SCHEMA)[m.row[j]]
    got = ((pl.Series(g.c[j]) == old["c"]) & old["i"].is_not_null()).fill_null(False).to_numpy()
    j, old = j[got], old.filter(pl.Series(got))
    out.i[j], out.h[j], out.t[j] = old["i"].to_numpy(), old["h"].to_numpy(), old["t"].to_numpy()
    out.have[j] = True
    return out


def _fill_edge_items(g: _Graph, edges: pl.DataFrame, wanted: np.ndarray, items: _Items) -> None:
    """Compute the items of the edges `wanted` not in `items` yet (their text: the description, when
    the edges have one; the last row of a pair repeated, as the clustering takes its weight)."""
    todo = wanted[~items.have[wanted]]
    if not todo.size:
        return
    a = [g.keys[x] for x in g.src[todo].tolist()]
    b = [g.keys[x] for x in g.dst[todo].tolist()]
    items.i[todo] = [_h64(f"e\x00{x}\x00{y}") for x, y in zip(a, b)]
    items.have[todo] = True
    if "description" not in edges.columns:
        return
    ends = pl.Series("k", sorted(set(a) | set(b)), dtype=pl.Utf8).implode()
    texts = (
        edges.filter(pl.col("source_key").is_in(ends) & pl.col("target_key").is_in(ends))
        .select(
            pl.min_horizontal("source_key", "target_key").alias("a"),
            pl.max_horizontal("source_key", "target_key").alias("b"),
            "description",
        )
        .unique(["a", "b"], keep="last", maintain_order=True)
    )
    want = pl.DataFrame({"j": todo, "a": a, "b": b}, schema={"j": pl.Int64, "a": pl.Utf8, "b": pl.Utf8})
    for j, desc in want.join(texts, on=["a", "b"], how="inner").select("j", "description").iter_rows():
        text = desc or ""
        items.h[j], items.t[j] = _h64(text), len(text) // 4 + 1


def _internal_edges(g: _Graph, clusters: list[_Cluster]) -> dict[int, np.ndarray]:
    """Per cluster label: the positions (in g's edge arrays, ascending) of its internal edges."""
    by_level: dict[int, list[_Cluster]] = defaultdict(list)
    for c in clusters:
        by_level[c.level].append(c)
    out: dict[int, np.ndarray] = {}
    none = np.zeros(0, dtype=np.int64)
    for cs in by_level.values():
        lab = np.full(len(g.keys), -1, dtype=np.int64)
        for c in cs:
            lab[c.members] = c.label
        ls = lab[g.src]
        idx = np.flatnonzero((ls >= 0) & (ls == lab[g.dst]))
        order = np.argsort(ls[idx], kind="stable")
        idx, labs = idx[order], ls[idx][order]
        uniq, starts = np.unique(labs, return_index=True)
        ends = np.append(starts[1:], len(labs)).astype(np.int64)
        found = {int(u): idx[s:e] for u, s, e in zip(uniq.tolist(), starts.tolist(), ends.tolist())}
        for c in cs:
            out[c.label] = found.get(c.label, none)
    return out


def _describe(
    g: _Graph,
    clusters: list[_Cluster],
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    clean: dict[int, str],
    edge_items: _Items,
    node_items: _Items | None = None,
) -> tuple[dict[int, dict], dict[int, list]]:
    """Per cluster label: member keys, fingerprint and (raw) weight; and the content items of the
    clusters not in `clean` (label -> fingerprint of an unchanged community, whose work is skipped).
    `edge_items` and `node_items` (cached items of unchanged edges and nodes) gain the items computed
    here."""
    keys = g.keys
    degree = np.diff(g.csr.indptr)
    dirty = [c for c in clusters if c.label not in clean]
    internal = _internal_edges(g, dirty)
    none = np.zeros(0, dtype=np.int64)
    wanted_nodes = np.unique(np.concatenate([c.members for c in dirty])) if dirty else none
    wanted_edges = np.unique(np.concatenate([internal[c.label] for c in dirty])) if dirty else none
    node_items = _node_items(g, nodes, wanted_nodes, node_items)
    _fill_edge_items(g, edges, wanted_edges, edge_items)
    info, items = {}, {}
    for c in clusters:
        members = [keys[i] for i in c.members.tolist()]
        weight = float(degree[c.members].sum())
        if c.label in clean:
            info[c.label] = {"members": members, "fingerprint": clean[c.label], "weight": weight}
            continue
        m, e = c.members, internal[c.label]
        info[c.label] = {
            "members": members,
            "weight": weight,
            "fingerprint": _fingerprint(
                c.level, node_items.i[m], node_items.h[m], edge_items.i[e], edge_items.h[e], g.w[e]
            ),
        }
        items[c.label] = node_items.take(m) + edge_items.take(e)
    return info, items


def _table(clusters: list[_Cluster], info: dict[int, dict], ids: dict[int, str]) -> pl.DataFrame:
    """The communities table; `ids` (label -> id) where known, else ids from fingerprints."""
    ids = dict(ids)
    for c in clusters:
        ids.setdefault(c.label, f"L{c.level}-{info[c.label]['fingerprint']}")
    max_w: dict[int, float] = defaultdict(float)
    for c in clusters:
        max_w[c.level] = max(max_w[c.level], info[c.label]["weight"])
    rows = []
    for c in clusters:
        w = info[c.label]["weight"]
        rows.append(
            {
                "community_id": ids[c.label],
                "level": c.level,
                "cluster": c.label,
                "parent_id": ids[c.parent] if c.parent is not None else None,
                "nodes": info[c.label]["members"],
                "size": len(c.members),
                "weight": (w / max_w[c.level]) if max_w[c.level] > 0 else 0.0,
                "fingerprint": info[c.label]["fingerprint"],
            }
        )
    return pl.DataFrame(rows, schema=COMMUNITY_SCHEMA).sort(
        ["level", "weight", "community_id"], descending=[False, True, False]
    )


def changed_share(basis: list[tuple[int, int, int]], current: list[tuple[int, int, int]]) -> float:
    """Share of a community's context (in estimated tokens) that differs from its basis."""
    return _changed_share(_Content.of(basis), _Content.of(current))


def _changed_share(basis: _Content, current: _Content) -> float:
    """changed_share over arrays: an item added, removed or with other content counts with the
    larger of its token counts (integer sums: the same share as item by item)."""
    old, new = basis.last(), current.last()
    old_total, new_total = int(old.t.sum()), int(new.t.sum())
    _, a, b = np.intersect1d(old.i, new.i, assume_unique=True, return_indices=True)
    differs = old.h[a] != new.h[b]
    changed = (old_total - int(old.t[a].sum())) + (new_total - int(new.t[b].sum()))  # only on one side
    changed += int(np.maximum(old.t[a], new.t[b])[differs].sum())
    return changed / max(old_total, new_total, 1)


def _assign_ids(
    clusters: list[_Cluster],
    info: dict,
    items: dict,
    previous: CommunityState | None,
    refresh_share: float,
    retired: set[str],
    generation: int,
) -> tuple[dict[int, str], dict]:
    """An id for every cluster. A recent community with the same level and members whose basis is
    close enough to the current content lends its id; otherwise the id follows the current
    fingerprint. Retired ids (reports deleted or lost) are never handed out again."""
    stats = {"kept_ids": 0, "content_refreshed": 0}
    candidates: dict[tuple[int, str], list[tuple[int, str]]] = defaultdict(list)
    bases: dict[str, _Content] = {}
    current_ids: set[str] = set()
    if previous is not None and previous.history.height:
        current_ids = set(previous.table["community_id"].to_list())
        for cid, level, mh, gen in previous.history.select(
            "community_id", "level", "members_hash", "last_generation"
        ).iter_rows():
            if cid not in retired:
                candidates[(level, mh)].append((gen, cid))
        wanted = {
            cid
            for c in clusters
            if c.label in items
            for _, cid in candidates.get((c.level, _members_hash(c.level, info[c.label]["members"])), [])
        }
        if wanted:
            rows = previous.bases.filter(pl.col("community_id").is_in(list(wanted)))
            for (cid,), part in rows.partition_by("community_id", as_dict=True, maintain_order=True).items():
                bases[cid] = _Content(part["item"].to_numpy(), part["content"].to_numpy(), part["tokens"].to_numpy())
    ids: dict[int, str] = {}
    for c in clusters:
        if c.label not in items:
            continue  # unchanged: keeps its id
        fp_id = f"L{c.level}-{info[c.label]['fingerprint']}"
        found = candidates.get((c.level, _members_hash(c.level, info[c.label]["members"])))
        if found:
            shares = [(_changed_share(bases.get(cid, _NO_CONTENT), items[c.label]), -gen, cid) for gen, cid in found]
            share, _, best = min(shares)
            if share <= refresh_share or best == fp_id:
                ids[c.label] = best
                stats["kept_ids"] += 1
                continue
            if any(cid in current_ids for _, cid in found):
                stats["content_refreshed"] += 1
        cid, n = fp_id, 0
        while cid in retired:  # a key whose report was deleted: Dagster still counts it materialized
            n += 1
            cid = f"{fp_id}-{generation}" + (f".{n}" if n > 1 else "")
        ids[c.label] = cid
    return ids, stats


# -- the update ---------------------------------------------------------------------------------
def _empty_state(settings: dict, generation: int, previous: CommunityState | None) -> CommunityState:
    # every earlier id is retired: their reports go, and Dagster must not mistake a returning key for a written one
    retired = set(previous.retired | set(previous.history["community_id"].to_list())) if previous else set()
    return CommunityState(
        pl.DataFrame(schema=COMMUNITY_SCHEMA),
        pl.DataFrame(schema=EDGE_STATE_SCHEMA),
        pl.DataFrame(schema=BASIS_SCHEMA),
        pl.DataFrame(schema=HISTORY_SCHEMA),
        generation,
        settings,
        retired,
    )


def update_communities(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    previous: CommunityState | None = None,
    *,
    max_cluster_size: int = DEFAULT_MAX_CLUSTER_SIZE,
    seed: int = DEFAULT_SEED,
    use_lcc: bool = True,
    full_recluster: bool = False,
    quality_floor: float = DEFAULT_QUALITY_FLOOR,
    refresh_share: float = DEFAULT_REFRESH_SHARE,
    memo=None,
    lost_ids: set[str] | None = None,
) -> CommunityUpdate:
    """Cluster the graph, starting from `previous` when given (see the module docstring).

    `lost_ids`: ids of the previous build whose reports are gone although Dagster counts them as
    written; they are retired, so the community gets a new id and a new report partition.
    `memo(digest)` may return the structure of a graph clustered before (same edges, weights and
    settings); the update returns the structure of this graph for the caller to remember.
    """
    settings = {"max_cluster_size": int(max_cluster_size), "seed": int(seed), "use_lcc": bool(use_lcc)}
    generation = (previous.generation + 1) if previous else 1
    if nodes.height == 0 or edges.height == 0:
        message = (
            "graph is empty: no communities"
            if nodes.height == 0
            else f"graph has {nodes.height} nodes but no edges: no communities"
        )
        state = _empty_state(settings, generation, previous)
        return CommunityUpdate(
            state.table, message, state, {"communities": 0, "reclustered": True, "recluster_reason": "no edges"}
        )
    g = _clustered_graph(nodes, edges, use_lcc)
    if len(g.src) == 0:
        state = _empty_state(settings, generation, previous)
        return CommunityUpdate(
            state.table,
            f"graph has {nodes.height} nodes but no edges: no communities",
            state,
            {"communities": 0, "reclustered": True, "recluster_reason": "no edges"},
        )
    # the quality guard's fresh Leiden runs beside everything up to the frontier update (graspologic's
    # Rust core releases the GIL: on two cores the update no longer waits for it); it starts first
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fresh-leiden") as pool:
        fresh_run = pool.submit(_fresh_labels, g.csr, seed)
        index = {k: i for i, k in enumerate(g.keys)}
        node_hashes = _node_hashes(nodes)
        digest = _graph_digest(g, settings)
        metrics: dict = {}

        reason = None
        if previous is None or previous.table.height == 0:
            reason = "first clustering"
        elif previous.settings != settings:
            reason = f"clustering settings changed ({previous.settings} -> {settings})"
        elif full_recluster:
            reason = "full re-clustering was asked for"

        clusters = None
        remembered = memo(digest) if (memo and reason in (None, "first clustering")) else None
        if remembered is not None:
            clusters = _clusters_from_structure(remembered, index)
            if clusters is not None:
                metrics["source"] = "memo (this graph was clustered before)"
        prev, touched = None, None
        if clusters is None and reason is None:
            prev = _previous_hierarchy(previous.table, g)
            affected, touched = _changes(g, node_hashes, previous)
            clusters, stats = _update_hierarchy(g, prev, affected, max_cluster_size=max_cluster_size, seed=seed)
            metrics.update(stats, source="frontier update", affected_nodes=int(affected.sum()))
        fresh_at = fresh_run.result()
    # scored on the CSR graph, as the kept partition is (not by handing the edge list to Rust again)
    fresh_quality = modularity(g.csr, g.mask, fresh_at)
    if prev is not None:
        kept_quality = _top_modularity(g, clusters)
        if kept_quality < quality_floor * fresh_quality:
            reason = (
                f"modularity of the kept partition {kept_quality:.4f} < {quality_floor} x fresh Leiden's "
                f"{fresh_quality:.4f}"
            )
            metrics["modularity_before_recluster"] = round(kept_quality, 6)
            clusters, prev = None, None
    if clusters is None:
        clusters, _ = _fresh_hierarchy(g.edge_list(), index, max_cluster_size=max_cluster_size, seed=seed)
        metrics["source"] = "fresh Leiden"
    if prev is None:  # else the kept partition was scored above
        kept_quality = _top_modularity(g, clusters)

    # a community that kept its label, its members and the text of its members and edges keeps its
    # id, fingerprint and basis without being looked at again
    retired = (previous.retired if previous else set()) | set(lost_ids or ())
    clean = {}
    if prev is not None:
        for c in clusters:
            if (
                prev.level.get(c.label) == c.level
                and not touched[c.members].any()
                and prev.ids[c.label] not in retired
                and prev.member_keys[c.label] == frozenset(g.keys[i] for i in c.members)
            ):
                clean[c.label] = prev.fingerprints[c.label]
    edge_items = _cached_edge_items(g, previous)
    node_items = _cached_node_items(g, node_hashes, previous)
    info, items = _describe(g, clusters, nodes, edges, clean, edge_items, node_items)
    ids_clean = {label: prev.ids[label] for label in clean} if prev is not None else {}
    ids, id_stats = _assign_ids(clusters, info, items, previous, refresh_share, retired, generation)
    df = _table(clusters, info, {**ids, **ids_clean})
    metrics["communities_unchanged"] = len(clean)

    prev_ids = set(previous.table["community_id"].to_list()) if previous else set()
    now_ids = df["community_id"].to_list()
    new_ids = [c for c in now_ids if c not in prev_ids]
    metrics.update(
        {
            "communities": df.height,
            "communities_changed": len(new_ids),
            "communities_removed": len(prev_ids - set(now_ids)),
            "communities_kept": df.height - len(new_ids),
            "modularity_kept": round(kept_quality, 6),
            "modularity_fresh": round(fresh_quality, 6),
            "reclustered": reason is not None,
            "recluster_reason": reason or "",
            **id_stats,
        }
    )
    node_state = _node_state(g, node_hashes, node_items)
    state = _next_state(previous, df, clusters, info, items, g, edge_items, settings, generation, retired, node_state)
    per_level = df.group_by("level").len().sort("level")
    levels = ", ".join(f"level {lvl}: {n}" for lvl, n in per_level.iter_rows())
    message = f"{df.height} communities over {int(g.mask.sum())} nodes ({levels})"
    retained = set(state.history["community_id"].to_list())
    return CommunityUpdate(df, message, state, metrics, (digest, _structure_frame(clusters, g.keys)), retained)


def _top_modularity(g: _Graph, clusters: list[_Cluster]) -> float:
    labels = np.full(len(g.keys), -1, dtype=np.int64)
    for c in clusters:
        if c.level == 0:
            labels[c.members] = c.label
    return modularity(g.csr, g.mask, labels)


def _next_state(
    previous: CommunityState | None,
    df: pl.DataFrame,
    clusters: list[_Cluster],
    info: dict,
    items: dict,
    g: _Graph,
    edge_items: _Items,
    settings: dict,
    generation: int,
    retired: set[str],
    node_state: pl.DataFrame,
) -> CommunityState:
    id_of = dict(zip(df["cluster"].to_list(), df["community_id"].to_list()))
    old_bases = previous.bases if previous else pl.DataFrame(schema=BASIS_SCHEMA)
    known = set(old_bases["community_id"].unique().to_list())
    fresh_ids, fresh = [], []
    history_rows = []
    for c in clusters:
        cid = id_of[c.label]
        history_rows.append((cid, c.level, _members_hash(c.level, info[c.label]["members"]), generation))
        if cid not in known and c.label in items:
            fresh_ids.append(cid)
            fresh.append(items[c.label])
            known.add(cid)
    history = pl.DataFrame(history_rows, schema=HISTORY_SCHEMA, orient="row")
    retired = set(retired)
    if previous is not None and previous.history.height:
        older = previous.history.filter(~pl.col("community_id").is_in(history["community_id"].implode()))
        keep = (pl.col("last_generation") > generation - HISTORY_GENERATIONS) & ~pl.col("community_id").is_in(
            list(retired)
        )
        retired |= set(older.filter(~keep)["community_id"].to_list())  # their reports will be deleted
        history = pl.concat([history, older.filter(keep)])
    live = history["community_id"].implode()
    bases = pl.concat(
        [
            old_bases.filter(pl.col("community_id").is_in(live)),
            _basis_frame(fresh_ids, fresh),
        ]
    )
    have = pl.Series(edge_items.have)
    known = pl.DataFrame(
        {"i": edge_items.i, "h": edge_items.h, "t": edge_items.t}, schema=EDGE_ITEM_SCHEMA
    ).with_columns(pl.when(have).then(pl.all()))  # null where not computed
    edge_state = pl.concat([g.edge_frame(), known], how="horizontal")
    return CommunityState(df, edge_state, bases, history, generation, settings, retired, node_state)


def _node_state(g: _Graph, node_hashes: pl.DataFrame, node_items: _Items) -> pl.DataFrame:
    """The nodes' text hashes with their content items where computed (null elsewhere)."""
    positions = pl.DataFrame({"key": g.keys, "_at": np.arange(len(g.keys), dtype=np.int64)})
    at = node_hashes.join(positions, on="key", how="left", maintain_order="left")["_at"]
    found = at.is_not_null().to_numpy()
    idx = at.fill_null(0).to_numpy()
    have = found & node_items.have[idx] & (node_items.t[idx] >= 0)
    items = pl.DataFrame(
        {"i": node_items.i[idx], "h": node_items.h[idx], "t": node_items.t[idx]}, schema=EDGE_ITEM_SCHEMA
    ).with_columns(pl.when(pl.Series(have)).then(pl.all()))  # null where not computed
    return pl.concat([node_hashes.select(list(NODE_STATE_SCHEMA)), items], how="horizontal")


def _basis_frame(ids: list[str], contents: list[_Content]) -> pl.DataFrame:
    """The basis rows (community id, item, content, tokens) of the communities `ids`."""
    counts = np.array([len(x.i) for x in contents], dtype=np.int64)
    every = [_NO_CONTENT, *contents]
    return pl.DataFrame(
        {
            "community_id": pl.Series(ids, dtype=pl.Utf8).gather(np.repeat(np.arange(len(ids)), counts)),
            "item": np.concatenate([x.i for x in every]),
            "content": np.concatenate([x.h for x in every]),
            "tokens": np.concatenate([x.t for x in every]),
        },
        schema=BASIS_SCHEMA,
    )


def detect_communities(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    *,
    max_cluster_size: int = DEFAULT_MAX_CLUSTER_SIZE,
    seed: int = DEFAULT_SEED,
    use_lcc: bool = True,
) -> CommunityResult:
    """Cluster from scratch (no previous state); an empty or edgeless graph yields zero communities and a message."""
    update = update_communities(nodes, edges, None, max_cluster_size=max_cluster_size, seed=seed, use_lcc=use_lcc)
    return CommunityResult(update.communities, update.message)
