"""Search-index records built from the resolved graph, communities, reports and chunks.

Tables (polars): entities, relations, community_reports, chunks, nhop (pre-computed neighbour
paths, ranked; their edges' weights are read from `relations`), ty2ents (entity type -> sample
entities). Entity vectors embed the entity name; relation vectors embed "source->target:
description"; report vectors embed title + summary.

Every row carries `row_hash`, a 64-bit hash of its content columns (everything but the vector).
With the primary key of each table (KEYS) it lets a publish compare the new records with the
published index by reading keys and hashes only, and write just the rows that differ
(index/duckdb_writer.py). Records are built without vectors first
(`build_index_rows`, cheap); vectors are added only to the rows that need them (`add_vectors`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from graphrag_pipeline import progress
from graphrag_pipeline.index.protocol import Embedder
from graphrag_pipeline.reports.offline import CommunityReport
from graphrag_pipeline.storage.files import in_slices

NHOP_MAX_NEIGHBOURS = 16
NHOP_MAX_SECOND = 4
TY2ENTS_SAMPLES = 10
# source chunk ids an entity or relation record keeps (the first, by id): a hub entity names
# thousands (15,000 at 50,000 generated documents) and each edit that touched it rewrote them all,
# in the record, its hash and the index file (whose checkpoint rewrote every such row appended
# since); queries look up 20 (query/search._SOURCE_LOOKUP) and the graph keeps every id
SOURCE_IDS_KEPT = 100

TABLES = ("entities", "relations", "community_reports", "chunks", "nhop", "ty2ents")
VECTOR_TABLES = ("entities", "relations", "community_reports", "chunks")
HASH = "row_hash"
HASH_SCHEME = f"struct-polars-{pl.__version__}"
_SEED = 0x6772617068
# the primary key of each table; a key may hold several rows (nhop: the paths of one entity; chunks: an
# identical paragraph repeated in one document), which are then compared and replaced as one group
KEYS = {
    "entities": ("key",),
    "relations": ("source_key", "target_key"),
    "community_reports": ("community_id",),
    "chunks": ("doc_id", "chunk_id"),
    "nhop": ("entity_key",),
    "ty2ents": ("type",),
}
# content columns, in table order (then `embedding` for VECTOR_TABLES, then `row_hash`)
COLUMNS = {
    "entities": ("key", "name", "type", "description", "pagerank", "degree", "source_ids", "doc_ids"),
    "relations": ("source_key", "target_key", "source", "target", "description", "keywords", "weight", "source_ids"),
    "community_reports": (
        "community_id",
        "level",
        "title",
        "summary",
        "rating",
        "rating_explanation",
        "findings",
        "entity_keys",
        "entity_names",
        "weight",
        "extractive",
        "text",
        "documents",
    ),
    "chunks": ("chunk_id", "doc_id", "doc", "position", "text", "page_start", "page_end", "section"),
    "nhop": ("entity_key", "path", "rank"),
    "ty2ents": ("type", "entities", "count"),
}
REPORT_SCHEMA = {
    "community_id": pl.Utf8,
    "level": pl.Int64,
    "title": pl.Utf8,
    "summary": pl.Utf8,
    "rating": pl.Float64,
    "rating_explanation": pl.Utf8,
    "findings": pl.Utf8,
    "entity_keys": pl.List(pl.Utf8),
    "entity_names": pl.List(pl.Utf8),
    "weight": pl.Float64,
    "extractive": pl.Boolean,
    "text": pl.Utf8,
    "documents": pl.List(pl.Utf8),
}
# a report's sources: the documents its members come from, those behind the most members first
REPORT_MAX_DOCUMENTS = 10
# a path's rank is its position among the entity's paths (0 = strongest first hop). The edges' weights
# are not stored with the paths: an edit that re-weights a hub's edges would rewrite the paths of
# every entity reaching the hub (341,000 of 505,000 rows at 50,000 documents) though not one path
# moved; a reader takes the weights from the relations it fetches for the paths anyway.
NHOP_SCHEMA = {"entity_key": pl.Utf8, "path": pl.List(pl.Utf8), "rank": pl.Int32}


def table_columns(table: str) -> list[str]:
    """All columns of a published table, in order."""
    return [*COLUMNS[table], *(["embedding"] if table in VECTOR_TABLES else []), HASH]


@dataclass
class IndexTables:
    entities: pl.DataFrame
    relations: pl.DataFrame
    community_reports: pl.DataFrame
    chunks: pl.DataFrame
    nhop: pl.DataFrame
    ty2ents: pl.DataFrame

    def counts(self) -> dict[str, int]:
        return {name: getattr(self, name).height for name in TABLES}

    def get(self, name: str) -> pl.DataFrame:
        return getattr(self, name)


def rows_with_keys(df: pl.DataFrame, wanted: pl.DataFrame, keys: Iterable[str]) -> pl.DataFrame:
    """The rows of `df` whose `keys` are among `wanted`'s rows, in `df`'s order: a semi join, after
    a filter on the first key column alone when the key has several (a few changed relations among
    834k: one column probed, then a join of a few rows; the join of the whole table cost 0.07-0.4 s)."""
    keys = list(keys)
    if len(keys) > 1:
        df = df.filter(pl.col(keys[0]).is_in(wanted[keys[0]].unique().implode()))
    return df.join(wanted.select(keys), on=keys, how="semi", maintain_order="left")


def row_hashes(df: pl.DataFrame, columns: Iterable[str]) -> pl.Series:
    """64-bit hashes of the rows' content: polars' own hash of the row as a struct, with a fixed seed
    (fields, list elements and list boundaries kept apart, doubles by their bits; as JSON first it
    cost twice as much on 800,000 relations and the id lists of popular entities). Polars
    guarantees the hash only within one version, so HASH_SCHEME names the version: an index hashed
    by another one is rebuilt whole."""
    columns = list(columns)
    if df.height == 0:
        return pl.Series(HASH, [], dtype=pl.UInt64)
    # in chunks of SLICE_ROWS rows: 5x faster on 800,000 relations than one chunk (same hashes)
    return in_slices(df.select(columns)).select(pl.struct(columns).hash(_SEED).alias(HASH))[HASH]


def with_hash(table: str, df: pl.DataFrame) -> pl.DataFrame:
    return df.select(list(COLUMNS[table])).with_columns(row_hashes(df, COLUMNS[table]).alias(HASH))


# what the hashes of a RowHashMemo were made by (the hash, the relation columns, the source ids kept)
ROW_HASH_MEMO_SCHEME = f"{HASH_SCHEME}|{','.join(COLUMNS['relations'])}|{SOURCE_IDS_KEPT}"


@dataclass
class RowHashMemo:
    """The relations' row hashes as last computed, per file of the graph's edges they were made from.

    A relation record is its edge, row for row (some columns; the first SOURCE_IDS_KEPT ids), and the
    graph keeps its edges in slices of some 4,000 (storage.sliced_graph), of which an update rewrites
    the few it changed: the rows of a file read before hash as they did then. At 50,000 documents,
    hashing 834,000 relations cost 0.1 s alone and 0.3-0.4 s inside a build (the two cores shared
    with the step's other work); an update hashes the rows of the slices it rewrote.

    segments: (identity, rows) of the files the edges given to build_index_rows were read from, in
    the order they were put end to end (identity: device, inode, size and modification time, as
    text); None when not known: every row is hashed. known: identity -> hashes, as last computed;
    build_index_rows replaces it by the hashes of `segments`. hashed: the rows it hashed."""

    segments: list[tuple[str, int]] | None = None
    known: dict[str, pl.Series] = field(default_factory=dict)
    hashed: int = 0
    changed: bool = False  # `known` is not what was read (to be written back)

    def relation_hashes(self, relations: pl.DataFrame) -> pl.Series:
        """row_hashes of `relations` (the records, made from the edges `segments` describe)."""
        columns = COLUMNS["relations"]
        segments = self.segments
        if segments is None or sum(n for _, n in segments) != relations.height:
            self.changed = bool(self.known) or segments is not None
            self.known, self.hashed = {}, relations.height
            return row_hashes(relations, columns)
        known: dict[str, pl.Series] = {}
        pieces, offset, hashed = [], 0, 0
        for identity, n in segments:
            piece = self.known.get(identity)
            if piece is None or piece.len() != n:
                piece = row_hashes(relations.slice(offset, n), columns)
                hashed += n
            known[identity] = piece
            pieces.append(piece)
            offset += n
        self.changed = hashed > 0 or known.keys() != self.known.keys()
        self.known, self.hashed = known, hashed
        if not pieces:
            return row_hashes(relations, columns)
        return pl.concat(pieces).alias(HASH)


# what a vector embeds (embed_texts here, _TEXTS in duckdb_writer): recorded in the index, so vectors
# are reused across a rebuild only for texts made the same way. Change it with either of them.
EMBED_TEXT_SCHEME = "texts-1"


# the columns embed_texts reads, per table
TEXT_COLUMNS = {
    "entities": ("name",),
    "relations": ("source", "target", "description"),
    "community_reports": ("title", "summary"),
    "chunks": ("text",),
}


def embed_texts(table: str, df: pl.DataFrame) -> list[str]:
    """The text each row's vector embeds (from its TEXT_COLUMNS)."""
    if table == "entities":
        return df["name"].to_list()
    if table == "relations":
        return [f"{s}->{t}: {d}" for s, t, d in zip(df["source"], df["target"], df["description"])]
    if table == "community_reports":
        return [f"{t}\n{s}" for t, s in zip(df["title"], df["summary"])]
    if table == "chunks":
        return df["text"].to_list()
    raise ValueError(f"{table} has no vectors")


def _vectors(embedder: Embedder, texts: list[str], previous: pl.DataFrame | None = None, batch: int = 512) -> pl.Series:
    """Vectors of `texts`; those found in `previous` (columns text, embedding) are reused, not recomputed."""
    import numpy as np

    dim = embedder.dim
    dtype = pl.Array(pl.Float32, dim)
    if not texts:
        return pl.Series("embedding", [], dtype=dtype)
    frame = pl.DataFrame({"text": texts}, schema={"text": pl.Utf8})
    if previous is not None and previous.height and previous.schema.get("embedding") == dtype:
        frame = frame.join(previous.unique("text", keep="first"), on="text", how="left", maintain_order="left")
    else:
        frame = frame.with_columns(pl.lit(None, dtype=dtype).alias("embedding"))
    todo = frame.with_row_index("i").filter(pl.col("embedding").is_null())
    if todo.height:
        fresh = todo["text"].to_list()
        progress.start("embedding", len(fresh), "texts", "embedding")
        try:
            parts = []
            for i in range(0, len(fresh), batch):
                parts.append(embedder.embed(fresh[i : i + batch]))
                progress.advance("embedding", len(parts[-1]))
        finally:
            progress.finish("embedding")
        arr = np.vstack(parts).astype("float32")
        filled = pl.Series("embedding", arr, dtype=dtype)
        frame = frame.with_row_index("i").join(
            todo.select("i").with_columns(filled.alias("new")), on="i", how="left", maintain_order="left"
        )
        frame = frame.with_columns(pl.coalesce("embedding", "new").alias("embedding"))
    return frame["embedding"].alias("embedding")


def with_vectors(
    table: str, df: pl.DataFrame, embedder: Embedder, previous: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Rows of `table` (with row_hash) with their vectors, in published column order."""
    return df.with_columns(_vectors(embedder, embed_texts(table, df), previous)).select(table_columns(table))


# how the hops of a node are ranked: strongest edge first, then by key
_RANK = dict(by=["a", "w", "b"], descending=[False, True, False])


def _both_ways(edges: pl.DataFrame) -> pl.DataFrame:
    """Both directions of every edge as (a, b, w), self-loops dropped."""
    e = edges.select(
        pl.col("source_key").alias("a"), pl.col("target_key").alias("b"), pl.col("weight").cast(pl.Float64).alias("w")
    )
    return pl.concat([e, e.select(pl.col("b").alias("a"), pl.col("a").alias("b"), "w")]).filter(
        pl.col("a") != pl.col("b")
    )


def _leaving(edges: pl.DataFrame, keys: pl.Series) -> pl.DataFrame:
    """The rows of _both_ways(edges) whose `a` is one of `keys` (an imploded Series), taken from
    the edges touching them (both directions of every edge would copy 1.7M rows at 50k)."""
    near = edges.filter(pl.col("source_key").is_in(keys) | pl.col("target_key").is_in(keys))
    return _both_ways(near).filter(pl.col("a").is_in(keys))


def _strongest(both: pl.DataFrame, k: int) -> pl.DataFrame:
    """Per node `a` of `both` (rows a, b, w), its `k` first rows in _RANK order, in that order:
    what sort(**_RANK) then group_by("a").head(k) give, with each node's rows ranked on their own
    (a hub's 100,000 directions are not sorted with everyone else's: 0.26 -> 0.06 s at 50k)."""
    top = both.group_by("a").agg(pl.col("b", "w").sort_by(["w", "b"], descending=[True, False]).head(k))
    return top.explode(["b", "w"]).select(both.columns).sort(**_RANK)


def nhop_paths(edges: pl.DataFrame, only: Iterable[str] | None = None) -> pl.DataFrame:
    """For each node, its 2-hop paths along its strongest edges, ranked (see NHOP_SCHEMA).

    As in RAGFlow, a path is a full walk of two edges; a neighbour with no further edge gives a
    1-hop path (RAGFlow drops it). At most NHOP_MAX_NEIGHBOURS first hops (strongest first, then
    by key) and NHOP_MAX_SECOND second hops each, so hubs stay bounded. Vectorised with polars.

    only: compute the paths of these nodes alone (the same rows the whole computation gives them).
    A node's paths depend only on its own edges and on those of its neighbours, so after an edit
    only the endpoints of changed edges and their neighbours need new paths (see `nhop_affected`).
    """
    if edges.height == 0:
        return pl.DataFrame(schema=NHOP_SCHEMA)
    # the best NHOP_MAX_SECOND + 1 edges of each neighbour suffice: excluding the way back drops at most one
    if only is None:
        ranked = _both_ways(edges).sort(**_RANK)
        first = ranked.group_by("a", maintain_order=True).head(NHOP_MAX_NEIGHBOURS)
        onward = ranked.group_by("a", maintain_order=True).head(NHOP_MAX_SECOND + 1)
    else:
        # the directions leaving the wanted nodes, then those leaving their first hops, from the
        # edges touching them; the first hops include hubs, whose edges are most of the graph
        first = _strongest(_leaving(edges, pl.Series("a", list(only), dtype=pl.Utf8).implode()), NHOP_MAX_NEIGHBOURS)
        onward = _strongest(_leaving(edges, first["b"].unique().implode()), NHOP_MAX_SECOND + 1)
    second = (
        first.join(onward.rename({"a": "b", "b": "c", "w": "w2"}), on="b", how="inner")
        .filter(pl.col("c") != pl.col("a"))
        .sort(["a", "w", "b", "w2", "c"], descending=[False, True, False, True, False])
        .group_by(["a", "b"], maintain_order=True)
        .head(NHOP_MAX_SECOND)
    )
    two = second.select(
        pl.col("a").alias("entity_key"),
        pl.concat_list("a", "b", "c").alias("path"),
        "w",
        "b",
        "w2",
        "c",
    )
    dead_ends = first.join(second.select("a", "b").unique(), on=["a", "b"], how="anti").select(
        pl.col("a").alias("entity_key"),
        pl.concat_list("a", "b").alias("path"),
        "w",
        "b",
        pl.lit(None, pl.Float64).alias("w2"),
        pl.lit(None, pl.Utf8).alias("c"),
    )
    out = pl.concat([two, dead_ends]).sort(
        ["entity_key", "w", "b", "w2", "c"], descending=[False, True, False, True, False], nulls_last=True
    )
    rank = pl.int_range(pl.len(), dtype=pl.Int32).over("entity_key")
    return out.select("entity_key", "path", rank.alias("rank")).cast(NHOP_SCHEMA)


# The order nhop_paths gives the paths of one entity, as SQL (readers of a patched index, where the
# rows of re-computed entities sit at the end of the table, sort by it).
NHOP_ORDER_SQL = "entity_key, rank"


def nhop_affected(old_edges: pl.DataFrame, edges: pl.DataFrame, touched: Iterable[str] | None = None) -> set[str]:
    """The nodes whose n-hop paths may differ between two edge sets (columns source_key, target_key, weight).

    touched: when the caller knows them, the endpoints of every edge added, removed or changed (a
    superset is fine: it only costs paths computed again to the same rows); `old_edges` then needs
    only the old edges touching those nodes.

    A node Y's paths read its own strongest NHOP_MAX_NEIGHBOURS edges (first hops) and, for each
    first hop X, X's strongest NHOP_MAX_SECOND + 1 edges (second hops). So they can change only
    when Y is an endpoint of an edge added, removed or re-weighted (its first hops may change), or
    when one of Y's first hops X is such an endpoint AND X's ranked list of strongest neighbours
    changed (which ones, in which order: the paths hold no weights). A hub that gains weight on its
    edges but keeps its strongest neighbours in their order leaves the nodes that pass through it
    their paths (in a dense graph, most nodes reach some hub)."""
    cols = ["source_key", "target_key", "weight"]
    a = old_edges.select(pl.col("source_key"), pl.col("target_key"), pl.col("weight").cast(pl.Float64))
    b = edges.select(pl.col("source_key"), pl.col("target_key"), pl.col("weight").cast(pl.Float64))
    if touched is None:
        changed = pl.concat(
            [a.join(b, on=cols, how="anti", nulls_equal=True), b.join(a, on=cols, how="anti", nulls_equal=True)]
        )
        touched = set(changed["source_key"].to_list()) | set(changed["target_key"].to_list())
    else:
        touched = set(touched)
    if not touched:
        return set()
    x = pl.Series("k", sorted(touched), dtype=pl.Utf8).implode()

    def second_hops(df: pl.DataFrame) -> dict[str, list]:
        ends = df.filter(pl.col("source_key").is_in(x) | pl.col("target_key").is_in(x))
        top = _strongest(_leaving(ends, x), NHOP_MAX_SECOND + 1)
        return {k: g["b"].to_list() for (k,), g in top.group_by("a", maintain_order=True)}

    before, after = second_hops(a), second_hops(b)
    hubs = [k for k in touched if before.get(k) != after.get(k)]
    if not hubs:
        return touched
    h = pl.Series("h", sorted(hubs), dtype=pl.Utf8).implode()
    # the nodes with such a hub among their first hops (in the new graph: an untouched node's
    # first hops are the same in both)
    near = b.filter(pl.col("source_key").is_in(h) | pl.col("target_key").is_in(h))
    candidates = pl.Series(
        "c", sorted(set(near["source_key"].to_list()) | set(near["target_key"].to_list())), dtype=pl.Utf8
    ).implode()
    cand_edges = b.filter(pl.col("source_key").is_in(candidates) | pl.col("target_key").is_in(candidates))
    first = _strongest(_leaving(cand_edges, candidates), NHOP_MAX_NEIGHBOURS).filter(pl.col("b").is_in(h))
    return touched | set(first["a"].to_list())


def collect_reports(
    communities: pl.DataFrame, read_report: Callable[[str], CommunityReport | None]
) -> tuple[list[CommunityReport], list[str]]:
    """The report of every reportable community (2+ members) of the communities table, and the ids
    of those whose report cannot be read (a missing report is never silently left out).
    collect_report_rows is what the index stages use; this plain form stays for the index-series
    benchmark, which drives older versions of this module through it, and as the tests' oracle."""
    reports, missing = [], []
    for cid in communities.filter(pl.col("size") >= 2)["community_id"].to_list():
        report = read_report(cid)
        if report is None:
            missing.append(cid)
        else:
            reports.append(report)
    return reports, missing


# what an index row takes from the report itself (the other columns come from the community and the graph)
REPORT_BASE_SCHEMA = {
    k: t for k, t in REPORT_SCHEMA.items() if k not in ("entity_keys", "entity_names", "weight", "documents")
}
# what a ReportRowsMemo's rows were made by: change it with report_base_rows (or CommunityReport.text)
REPORT_ROWS_SCHEME = "report-rows-1"
REPORT_ROWS_MEMO_SCHEMA = {"file": pl.Utf8, **REPORT_BASE_SCHEMA}


def report_base_rows(reports: list[CommunityReport]) -> pl.DataFrame:
    """Per report, the columns of its index row that come from the report (REPORT_BASE_SCHEMA)."""
    return pl.DataFrame(
        {
            "community_id": [r.community_id for r in reports],
            "level": [r.level for r in reports],
            "title": [r.title for r in reports],
            "summary": [r.summary for r in reports],
            "rating": [float(r.rating) for r in reports],
            "rating_explanation": [r.rating_explanation for r in reports],
            "findings": [json.dumps([f.__dict__ for f in r.findings], ensure_ascii=False) for r in reports],
            "extractive": [r.extractive for r in reports],
            "text": [r.text() for r in reports],
        },
        schema=REPORT_BASE_SCHEMA,
    )


@dataclass
class ReportRowsMemo:
    """The report_base_rows of every report as last read, by its community and the identity of its
    file (device, inode, size, modification time: a report is written whole, under a new inode). At
    50,000 documents, reading and parsing the 2,000 report files, then writing each one's findings
    as JSON again, cost 0.3-0.5 s of every update, which writes a few dozen reports.
    collect_report_rows replaces `rows` by the current files' rows; `read`: the reports it read."""

    rows: pl.DataFrame | None = None  # REPORT_ROWS_MEMO_SCHEMA
    read: int = 0
    changed: bool = False  # `rows` is not what was read (to be written back)


def collect_report_rows(
    communities: pl.DataFrame,
    identity: Callable[[str], str | None],
    read_report: Callable[[str], CommunityReport | None],
    memo: ReportRowsMemo | None = None,
) -> tuple[pl.DataFrame, list[str]]:
    """collect_reports as report_base_rows (in the same order), and the ids of the reportable
    communities whose report cannot be read: a report whose file has the identity (`identity(cid)`,
    None when there is no file) it had in `memo` is not read again."""
    memo = memo if memo is not None else ReportRowsMemo()
    known = memo.rows if memo.rows is not None else pl.DataFrame(schema=REPORT_ROWS_MEMO_SCHEMA)
    at = {f: i for i, f in enumerate(known["file"].to_list())}
    kept_at, kept_pos, fresh, fresh_files, fresh_pos, missing = [], [], [], [], [], []
    for cid in communities.filter(pl.col("size") >= 2)["community_id"].to_list():
        ident = identity(cid)
        file = f"{cid}|{ident}"
        pos = len(kept_pos) + len(fresh_pos)
        if ident is not None and file in at:
            kept_at.append(at[file])
            kept_pos.append(pos)
            continue
        report = read_report(cid) if ident is not None else None
        if report is None:
            missing.append(cid)
        else:
            fresh.append(report)
            fresh_files.append(file)
            fresh_pos.append(pos)
    columns = list(REPORT_ROWS_MEMO_SCHEMA)
    new = report_base_rows(fresh).with_columns(pl.Series("file", fresh_files, dtype=pl.Utf8)).select(columns)
    rows = new
    if kept_at:  # in the communities' order again
        kept = known[kept_at].with_columns(pl.Series("_pos", kept_pos, dtype=pl.Int64))
        new = new.with_columns(pl.Series("_pos", fresh_pos, dtype=pl.Int64))
        rows = pl.concat([kept, new]).sort("_pos").drop("_pos")
    memo.changed = bool(fresh) or len(kept_at) != known.height
    memo.rows, memo.read = rows, len(fresh)
    return rows.drop("file"), missing


SOURCES_MEMO_SCHEMA = {"community_id": pl.Utf8, "signature": pl.UInt64, "documents": pl.List(pl.Utf8)}
SOURCES_PATHS_SCHEMA = {"doc_id": pl.Utf8, "doc": pl.Utf8}
# what a memo's lists also depend on: the cut, and the hash (polars guarantees it within a version)
SOURCES_MEMO_SCHEME = f"documents-{REPORT_MAX_DOCUMENTS}-polars-{pl.__version__}"


@dataclass
class SourcesMemo:
    """The documents of each report as last computed, under a signature of what they depend on
    (the members and the document ids of each member), with the corpus path of each document id
    then (`paths`). A report whose signature is unchanged takes its documents from here: at
    50,000 documents, ranking the documents of every report again counts millions of (member,
    document) pairs, while an edit changes the members' documents of a few reports. A document
    id whose path changed since (a Unicode twin taking the key) voids the whole memo. Both tables
    are read before and replaced by each build of the rows."""

    table: pl.DataFrame | None = None
    paths: pl.DataFrame | None = None

    def usable(self, paths: pl.DataFrame) -> bool:
        if self.table is None or self.paths is None or not self.table.height:
            return False
        moved = self.paths.join(paths, on="doc_id", how="inner").filter(pl.col("doc") != pl.col("doc_right"))
        return moved.height == 0


def _report_documents(
    out: pl.DataFrame, nodes: pl.DataFrame, chunks: pl.DataFrame | None, sources: SourcesMemo | None
) -> pl.DataFrame:
    """Per report row (`_i`), its `documents` (see _report_rows), reusing `sources` where it can."""
    paths = (
        chunks.select("doc_id", "doc").unique("doc_id", keep="first")
        if chunks is not None and chunks.height
        else pl.DataFrame(schema={"doc_id": pl.Utf8, "doc": pl.Utf8})
    )
    latest = nodes.select("key", "doc_ids").unique("key", keep="last")
    member_rows = out.select("_i", pl.col("entity_keys").alias("key")).explode("key").drop_nulls("key")
    todo = out.select("_i")
    signed = None
    if sources is not None:
        # a document id stands for one corpus path; the memo is exact only while every document a
        # node names has chunks (otherwise the inner join below drops it): then all is computed
        named = latest.select(pl.col("doc_ids").explode().drop_nulls().unique())
        if named.join(paths.select(pl.col("doc_id").alias("doc_ids")), on="doc_ids", how="anti").height == 0:
            node_sig = latest.select("key", pl.struct("key", "doc_ids").hash(_SEED).alias("h"))
            signed = (
                member_rows.join(node_sig, on="key", how="left")
                .with_columns(pl.col("h").fill_null(pl.col("key").hash(_SEED)))
                .group_by("_i")
                .agg(pl.col("h").sort())
                .select("_i", pl.col("h").hash(_SEED).alias("signature"))
            )
            signed = out.select("_i", "community_id").join(signed, on="_i", how="left")
            signed = signed.with_columns(pl.col("signature").fill_null(0))
            if sources.usable(paths):
                hits = signed.join(sources.table, on=["community_id", "signature"], how="inner").unique("_i")
                todo = todo.join(hits.select("_i"), on="_i", how="anti")
            else:
                hits = None
    # documents numbered in path order, so the counting, ranking and ties run on integers: a report
    # of a top-level community counts hundreds of thousands of (member, document) pairs at 50,000 documents
    numbered = paths.sort("doc", "doc_id").with_row_index("_d")
    members = member_rows.join(todo, on="_i", how="semi")
    fresh = todo.join(_ranked_documents(members, latest, numbered), on="_i", how="left").with_columns(
        pl.col("documents").fill_null(pl.lit([], dtype=pl.List(pl.Utf8)))
    )
    documents = fresh.cast({"documents": pl.List(pl.Utf8)})
    if signed is not None:
        if hits is not None and hits.height:
            documents = pl.concat([documents, hits.select("_i", pl.col("documents").cast(pl.List(pl.Utf8)))])
        sources.table = (
            signed.join(documents, on="_i", how="left")
            .select(list(SOURCES_MEMO_SCHEMA))
            .cast(SOURCES_MEMO_SCHEMA)
            .unique(["community_id", "signature"], keep="first")
        )
        sources.paths = paths.select(list(SOURCES_PATHS_SCHEMA)).cast(SOURCES_PATHS_SCHEMA)
    elif sources is not None:
        sources.table = sources.paths = None
    return documents


def _ranked_documents(members: pl.DataFrame, latest: pl.DataFrame, numbered: pl.DataFrame) -> pl.DataFrame:
    """Per report (`_i` of `members`: _i, key), the paths of its members' documents: the documents
    named by most members first, ties in path order (`numbered`: doc_id, doc, _d by path), at most
    REPORT_MAX_DOCUMENTS; a member listed twice counts twice, a document without chunks not at all.
    Counted on integer arrays, one report at a time (a top-level community of 50,000 documents
    counts millions of (member, document) pairs: a group-by of the pairs cost twice as much)."""
    empty = pl.DataFrame(schema={"_i": members.schema["_i"], "documents": pl.List(pl.Utf8)})
    if not members.height or not numbered.height:
        return empty
    # each member node's documents as numbers, nodes numbered `_n`, its numbers at ptr[_n]:ptr[_n + 1]
    keys = latest.join(members.select("key").unique(), on="key", how="semi").with_row_index("_n")
    pairs = (
        keys.select("_n", "doc_ids")
        .explode("doc_ids")
        .join(numbered.select(pl.col("doc_id").alias("doc_ids"), "_d"), on="doc_ids", how="inner")
        .sort("_n", maintain_order=True)
    )
    ptr = np.zeros(keys.height + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs["_n"].to_numpy(), minlength=keys.height), out=ptr[1:])
    docs = pairs["_d"].to_numpy().astype(np.int64)
    rows = members.join(keys.select("key", "_n"), on="key", how="inner").sort("_i", maintain_order=True)
    report = rows["_i"].to_numpy().astype(np.int64)
    node = rows["_n"].to_numpy().astype(np.int64)
    # the member rows' document numbers one after another: report r's are a contiguous run
    length = ptr[node + 1] - ptr[node]
    total = int(length.sum())
    if not total:
        return empty
    starts = np.cumsum(length) - length
    flat = docs[np.repeat(ptr[node] - starts, length) + np.arange(total)]
    owner = np.repeat(report, length)
    bounds = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1], True])
    n_docs, keep = numbered.height, REPORT_MAX_DOCUMENTS
    out_i, out_d = [], []
    for a, b in zip(bounds[:-1], bounds[1:]):
        if (b - a) * 8 < n_docs:  # a few pairs: sorted, rather than counted over every document
            named, counts = np.unique(flat[a:b], return_counts=True)
        else:
            counts = np.bincount(flat[a:b], minlength=n_docs)
            named = np.flatnonzero(counts)
            counts = counts[named]
        if len(named) > keep:  # only documents counted at least as often as the keep-th can be kept
            wanted = counts >= np.partition(counts, len(named) - keep)[len(named) - keep]
            named, counts = named[wanted], counts[wanted]
        top = named[np.lexsort((named, -counts))][:keep]
        out_i.append(np.full(len(top), owner[a], dtype=np.int64))
        out_d.append(top)
    ranked = pl.DataFrame(
        {"_i": np.concatenate(out_i), "_d": np.concatenate(out_d)}, schema={"_i": pl.Int64, "_d": pl.Int64}
    )
    return (
        ranked.join(numbered.select(pl.col("_d").cast(pl.Int64), "doc"), on="_d", how="left", maintain_order="left")
        .group_by("_i", maintain_order=True)
        .agg(pl.col("doc").alias("documents"))
        .cast({"_i": members.schema["_i"]})
    )


def _report_rows(
    reports: list[CommunityReport] | pl.DataFrame,
    communities: pl.DataFrame,
    nodes: pl.DataFrame,
    chunks: pl.DataFrame | None = None,
    sources: SourcesMemo | None = None,
) -> pl.DataFrame:
    """One row per report: its text, the community's members (keys and names), weight and documents
    (corpus paths of the members' documents, most members first, at most REPORT_MAX_DOCUMENTS).
    Columnar: thousands of reports are assembled without a Python dict per row. `reports`: the
    reports, or their report_base_rows (collect_report_rows)."""
    base = reports if isinstance(reports, pl.DataFrame) else report_base_rows(reports)
    comm = communities.select(
        "community_id", pl.col("nodes").alias("entity_keys"), pl.col("weight").cast(pl.Float64).round_sig_figs(3)
    )
    comm = comm.unique("community_id", keep="first", maintain_order=True)
    out = base.with_row_index("_i").join(comm, on="community_id", how="left", maintain_order="left")
    names = nodes.select("key", "name").unique("key", keep="last")
    members = (
        out.select("_i", pl.col("entity_keys").alias("key"))
        .explode("key")
        .drop_nulls("key")
        .join(names, on="key", how="left", maintain_order="left")
        .group_by("_i", maintain_order=True)
        .agg(pl.coalesce("name", "key").alias("entity_names"))
    )
    empty = pl.lit([], dtype=pl.List(pl.Utf8))
    documents = _report_documents(out, nodes, chunks, sources)
    out = (
        out.join(members, on="_i", how="left", maintain_order="left")
        .join(documents, on="_i", how="left", maintain_order="left")
        .with_columns(
            pl.col("entity_keys").fill_null(empty),
            pl.col("entity_names").fill_null(empty),
            pl.col("weight").fill_null(0.0),
            pl.col("documents").fill_null(empty),
        )
    )
    return out.select(list(REPORT_SCHEMA)).cast(REPORT_SCHEMA)


_PAGE_COLUMNS = {"page_start": pl.Int64, "page_end": pl.Int64, "section": pl.Utf8}


def _with_pages(chunks: pl.DataFrame) -> pl.DataFrame:
    """Chunk rows with their page columns (null where a caller's table has none)."""
    missing = [pl.lit(None, dtype=t).alias(c) for c, t in _PAGE_COLUMNS.items() if c not in chunks.columns]
    return chunks.with_columns(missing) if missing else chunks


def kept_sources(entities: pl.DataFrame, chunks: pl.DataFrame) -> pl.DataFrame:
    """`entities` with at most SOURCE_IDS_KEPT source ids each (the first, by id) and, of their
    documents, those that hold the chunks kept (what a query's lookup filters by; see
    query/search._locate). Entities with fewer ids keep their lists as they are.

    chunks: chunk_id, doc_id of every chunk. A kept chunk only one document holds names a document
    of the entity; one several hold (an identical paragraph) names those of them the entity lists."""
    long = entities["source_ids"].list.len() > SOURCE_IDS_KEPT
    if not long.any():
        return entities
    # (narrow frames: a hub's lists are long, its description too)
    chunk_docs = chunks.select(pl.col("chunk_id").alias("_c"), "doc_id").unique()
    chunk_docs = chunk_docs.with_columns((pl.len().over("_c") > 1).alias("_shared"))
    pairs = (
        entities.select("key", pl.col("source_ids").list.head(SOURCE_IDS_KEPT).alias("_c"))
        .filter(long)
        .explode("_c")
        .join(chunk_docs, on="_c", how="inner")
    )
    several = pairs.filter("_shared")
    if several.height:
        named = (
            entities.select("key", pl.col("doc_ids").alias("doc_id"))
            .join(several.select("key").unique(), on="key", how="semi")
            .explode("doc_id")
        )
        pairs = pl.concat([pairs.filter(~pl.col("_shared")), several.join(named, on=["key", "doc_id"], how="semi")])
    docs = pairs.group_by("key").agg(pl.col("doc_id").unique().sort().alias("_docs"))
    # (joined on the key column alone: the entity rows are wide, hubs' descriptions long)
    docs = entities.select("key").join(docs, on="key", how="left", maintain_order="left")["_docs"]
    # an entity none of whose kept chunks is found (no chunk rows given) keeps its first documents
    cut = pl.coalesce(pl.lit(docs), pl.col("doc_ids").list.head(SOURCE_IDS_KEPT))
    return entities.with_columns(
        pl.col("source_ids").list.head(SOURCE_IDS_KEPT),
        pl.when(long).then(cut).otherwise(pl.col("doc_ids")).alias("doc_ids"),
    )


def build_index_rows(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    communities: pl.DataFrame,
    reports: list[CommunityReport] | pl.DataFrame,
    chunks: pl.DataFrame,
    nhop: bool = True,
    sources: SourcesMemo | None = None,
    hashes: RowHashMemo | None = None,
) -> IndexTables:
    """Every record of the index with its row_hash but WITHOUT vectors (cheap; see add_vectors).

    chunks: chunk_id, doc_id, doc (relative path), position, text.
    nhop=False leaves the nhop table empty (a delta publish computes only the paths that can change).
    sources: the reports' documents as last computed (SourcesMemo), reused and brought up to date.
    hashes: the relations' row hashes as last computed (RowHashMemo), reused and brought up to date."""
    # an entity's communities are not part of its record: the report rows list their members, and a
    # community that gains one member takes a new id, which would rewrite the record of every member
    # (thousands in a top-level community) after a one-paragraph edit
    # PageRank and community weights to 3 significant digits: every change of the graph moves them
    # a little everywhere, and a record rewritten (in Elasticsearch too) for a shift in the fifth digit
    # would make every update cost in proportion to the corpus; rankings keep their order
    entities = nodes.select(
        "key",
        "name",
        "type",
        "description",
        pl.col("pagerank").round_sig_figs(3),
        "degree",
        "source_ids",
        "doc_ids",
    )
    entities = kept_sources(entities, chunks)
    relations = edges.select(*COLUMNS["relations"]).with_columns(pl.col("source_ids").list.head(SOURCE_IDS_KEPT))

    reports_df = _report_rows(reports, communities, nodes, chunks, sources)
    chunk_df = _with_pages(chunks).select(*COLUMNS["chunks"])
    nhop_df = nhop_paths(edges) if nhop else pl.DataFrame(schema=NHOP_SCHEMA)
    ty2ents = (
        nodes.sort(["pagerank", "key"], descending=[True, False])
        .group_by("type", maintain_order=True)
        .agg(pl.col("name").head(TY2ENTS_SAMPLES).alias("entities"), pl.len().alias("count"))
        .sort(["count", "type"], descending=[True, False])
    )
    frames = {
        "entities": entities,
        "relations": relations,
        "community_reports": reports_df,
        "chunks": chunk_df,
        "nhop": nhop_df,
        "ty2ents": ty2ents,
    }
    hashed = {name: with_hash(name, df) for name, df in frames.items() if name != "relations" or hashes is None}
    if hashes is not None:
        relations = relations.select(list(COLUMNS["relations"]))
        hashed["relations"] = relations.with_columns(hashes.relation_hashes(relations))
    return IndexTables(**{name: hashed[name] for name in frames})


def add_vectors(
    tables: IndexTables, embedder: Embedder, previous: dict[str, pl.DataFrame] | None = None
) -> IndexTables:
    """The tables with vectors on every row of the VECTOR_TABLES (texts found in `previous` reused)."""
    previous = previous or {}
    return replace(tables, **{t: with_vectors(t, tables.get(t), embedder, previous.get(t)) for t in VECTOR_TABLES})


def build_index_tables(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    communities: pl.DataFrame,
    reports: list[CommunityReport] | pl.DataFrame,
    chunks: pl.DataFrame,
    embedder: Embedder,
    previous: dict[str, pl.DataFrame] | None = None,
) -> IndexTables:
    """chunks: chunk_id, doc_id, doc (relative path), position, text.

    previous: per table, (text, embedding) of the last published index built with the same
    embedder; vectors of unchanged texts are reused, so an update embeds only what changed."""
    return add_vectors(build_index_rows(nodes, edges, communities, reports, chunks), embedder, previous)
