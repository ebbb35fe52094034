"""The graph as two polars tables, and the graph metrics computed on it.

nodes: key (str, unique), name (display), type, description (joined), descriptions (list[str]),
       source_ids (list[str] chunk ids), doc_ids (list[str]), degree (int), pagerank (float)
edges: source_key < target_key (undirected, unique pair), source, target (display names),
       description, descriptions (list[str]), keywords (list[str]), weight (float),
       source_ids (list[str]), doc_ids (list[str])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from graphrag_pipeline.graph.frontier_leiden import pair_order

if TYPE_CHECKING:  # (imported where used: the corpus survey's process reads these schemas, not the metrics)
    from scipy.sparse import csr_matrix

DESCRIPTION_SEP = "\n"
# what a node or edge keeps of its mentions' descriptions: the distinct ones in first-seen order
# while they fit in this many characters joined (the first one always). Without a bound, the row of
# an entity named in most documents grows with the corpus (2.2 MB of text at 50,000 documents,
# rewritten by every update that mentions it); an LLM summary reads the first 6,000 tokens only
# (summaries.MAX_INPUT_TOKENS), which this keeps of ordinary prose.
DESCRIPTION_BUDGET = 32_000


def capped_descriptions(fragments: pl.Expr) -> pl.Expr:
    """A list column of descriptions cut to what DESCRIPTION_BUDGET keeps (see capped_list)."""
    size = pl.element().str.len_chars() + len(DESCRIPTION_SEP)
    limit = DESCRIPTION_BUDGET + len(DESCRIPTION_SEP)
    return fragments.list.eval(pl.element().filter((size.cum_sum() <= limit) | (pl.int_range(pl.len()) == 0)))


def capped_list(fragments: list[str]) -> list[str]:
    """The first `fragments` whose joined length is at most DESCRIPTION_BUDGET (the first always)."""
    out: list[str] = []
    used = 0
    for fragment in fragments:
        used += len(fragment) + len(DESCRIPTION_SEP)
        if out and used > DESCRIPTION_BUDGET + len(DESCRIPTION_SEP):
            break
        out.append(fragment)
    return out


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


def _adjacency(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> csr_matrix:
    """The symmetric weighted adjacency matrix of edges given once: duplicate entries are summed, like
    a multigraph's weights, so there is one stored entry per pair of neighbours (a zero sum too)."""
    from scipy.sparse import csr_matrix

    rows = np.concatenate([src, dst])
    cols = np.concatenate([dst, src])
    w = np.concatenate([weight, weight]).astype(np.float64)
    # entries sorted by (row, column) with two radix passes; when no pair repeats (the merged graph's
    # edges are unique pairs) that is the CSR form already: 0.57 -> 0.16 s on 867,000 edges, where
    # scipy sorts to sum duplicates
    order = pair_order(rows, cols, n)
    r, c = rows[order], cols[order]
    if len(r) > 1 and bool(np.any((r[1:] == r[:-1]) & (c[1:] == c[:-1]))):
        return csr_matrix((w, (rows, cols)), shape=(n, n))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=n), out=indptr[1:])
    return csr_matrix((w[order], c, indptr), shape=(n, n))


def _upper(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> csr_matrix | None:
    """The upper triangle of the symmetric adjacency (`_adjacency` is it plus its transpose), when the
    edges are given in its CSR order already - each pair once, source before target, sorted by
    (source, target), as the merged graph's edges are (canonical pairs, sorted by key): built without
    a sort or a copy of both directions. None when they are not."""
    from scipy.sparse import csr_matrix

    if len(src) and not bool(np.all(src < dst)):
        return None
    same = src[1:] == src[:-1]
    if not bool(np.all((src[1:] > src[:-1]) | (same & (dst[1:] > dst[:-1])))):
        return None
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return csr_matrix((weight.astype(np.float64), dst, indptr), shape=(n, n))


def _pagerank_upper(u: csr_matrix) -> np.ndarray:
    """`pagerank` of the graph whose adjacency is u + u.T, with u from `_upper`: A D^-1 x taken as
    u y + u.T y for y = D^-1 x (the same terms, summed in another order)."""
    n = u.shape[0]
    # each node's weight: its row of the triangle and its column
    row_sums = np.asarray(u.sum(axis=1)).ravel()
    inv, dangling = _inverse_weights(row_sums + np.bincount(u.indices, weights=u.data, minlength=n))

    def spread(x: np.ndarray) -> np.ndarray:
        y = inv * x
        return u @ y + u.T @ y

    return _iterate(n, dangling, spread)


def _inverse_weights(out_weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1 / each node's total edge weight (0 for a node without any), and which nodes have none."""
    dangling = out_weight == 0
    return np.divide(1.0, out_weight, out=np.zeros(len(out_weight)), where=~dangling), dangling


def _iterate(n: int, dangling: np.ndarray, spread, alpha: float = 0.85, max_iter: int = 100, tol: float = 1.0e-6):
    """The PageRank iteration of `pagerank`, where spread(x) is A D^-1 x."""
    x = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        last = x
        x = alpha * (spread(last) + last[dangling].sum() / n) + (1.0 - alpha) / n
        if np.abs(x - last).sum() < n * tol:
            return x
    return x  # networkx raises here; a ranking that has not fully converged is still a ranking


def pagerank(a: csr_matrix, *, alpha: float = 0.85, max_iter: int = 100, tol: float = 1.0e-6) -> np.ndarray:
    """Weighted PageRank of the undirected graph whose `_adjacency` is `a`.

    The same iteration as networkx's `pagerank` (each node spreads its rank over its edges in
    proportion to their weight; nodes without edges spread it over every node; teleport 1 - alpha;
    stop when the L1 change is below n x tol), on a scipy sparse matrix: a 100k-edge graph takes
    milliseconds instead of the second networkx needs to build its graph.
    """
    from scipy.sparse import csr_matrix

    n = a.shape[0]
    if n == 0:
        return np.zeros(0)
    inv, dangling = _inverse_weights(np.asarray(a.sum(axis=1)).ravel())
    # (D^-1 A)^T = A D^-1 for the symmetric A: each stored entry scaled by the inverse weight of its
    # column (no diagonal product and no transposed copy of a million-entry matrix)
    transition = csr_matrix((a.data * inv[a.indices], a.indices, a.indptr), shape=(n, n))
    return _iterate(n, dangling, lambda x: transition @ x, alpha, max_iter, tol)


def with_metrics(nodes: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """Return nodes with `degree` (number of neighbours) and weighted `pagerank` recomputed from edges.

    Keys are numbered by polars joins, not Python dicts: the metrics are recomputed over the whole
    graph on every update, so this must stay cheap at a million edges."""
    if nodes.height == 0:
        return nodes.with_columns(pl.lit(0, pl.Int64).alias("degree"), pl.lit(0.0).alias("pagerank"))
    pairs = edges.select("source_key", "target_key", "weight").filter(pl.col("source_key") != pl.col("target_key"))
    # an edge to a node missing from `nodes` still counts, as in a networkx graph: such keys are
    # numbered after the nodes, in order of first appearance
    index = nodes.select(pl.col("key").cast(pl.Utf8)).with_row_index("i", offset=0)
    ends = pl.concat([edges.select(pl.col("source_key").alias("key")), edges.select(pl.col("target_key").alias("key"))])
    extra = (
        ends.with_row_index("_o")
        .join(index, on="key", how="anti")
        .group_by("key")
        .agg(pl.col("_o").min())
        .sort("_o")
        .select("key")
    )
    if extra.height:
        index = pl.concat([index, extra.with_row_index("i", offset=nodes.height).select("i", "key")])
    n = index.height
    w = pairs["weight"].fill_null(1.0).to_numpy().astype(np.float64)
    if index["key"].is_duplicated().any() or index["key"].null_count():
        # not a valid graph (a duplicate node key, an edge without an end): numbered by joins, as before
        ids = index.rename({"key": "k"})
        numbered_rows = pairs.join(
            ids.rename({"k": "source_key", "i": "s"}), on="source_key", how="left", maintain_order="left"
        ).join(ids.rename({"k": "target_key", "i": "t"}), on="target_key", how="left", maintain_order="left")
        src = numbered_rows["s"].to_numpy().astype(np.int64)
        dst = numbered_rows["t"].to_numpy().astype(np.int64)
        w = numbered_rows["weight"].fill_null(1.0).to_numpy().astype(np.float64)
    else:
        # each end numbered by its place in `index` (an Enum of those keys: no join of a million edges)
        numbered = pl.Enum(index["key"])
        src = pairs["source_key"].cast(numbered).to_physical().to_numpy().astype(np.int64)
        dst = pairs["target_key"].cast(numbered).to_physical().to_numpy().astype(np.int64)
    # distinct neighbours: the stored entries of the symmetric matrix once duplicates are summed (a
    # sparse build is linear; sorting every pair as one array cost 8x more at 800,000 edges). The
    # PageRank iterates on the same matrix: one build of it, not two (0.2 s at 50,000 documents)
    u = _upper(n, src, dst, w)
    if u is not None:  # the merged graph's edges: 0.2 -> 0.05 s at 834,000 edges
        degree = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
        pr = _pagerank_upper(u) if len(src) else np.full(n, 1.0 / n)
    else:
        a = _adjacency(n, src, dst, w)
        degree = np.diff(a.indptr)
        pr = pagerank(a) if len(src) else np.full(n, 1.0 / n)
    return nodes.with_columns(
        pl.Series("degree", degree[: nodes.height], dtype=pl.Int64),
        pl.Series("pagerank", pr[: nodes.height], dtype=pl.Float64),
    )
