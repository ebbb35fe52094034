"""The merged knowledge graph, kept up to date per changed document.

Every document's extraction is a pair of Parquet files (its entity and relation mentions). A
build needs them all merged, but reading thousands of small files and merging every row again
costs time in proportion to the corpus. Instead, the mention rows of all documents are kept in
`SHARDS` shard files (a document's shard is a hash of its key), next to the merged graph of the
previous build, published together as one bundle (see `storage.ParquetBundle`):

- a document whose subgraph files changed (size or modification time), appeared or vanished has
  its old rows taken out of its shard and its new rows put in; only those shards are rewritten;
- the entity keys those rows mention are the affected keys; their nodes are merged again from
  all their rows (of every document); edges are merged again only for the pairs those documents
  mention (before or after the change) and around keys that appeared, vanished or were renamed:
  a hub named by the changed document does not bring back its thousands of edges. Every other
  node and edge is the previous build's (`merge.merge_changed`, equal to a full merge by
  construction and by test over random edit sequences);
- degree and PageRank are recomputed over the whole graph (a sparse power iteration: milliseconds);
- the merged graph is stored in key-range slices (storage.sliced_graph): only the slices holding a
  node or an edge that changed are written again, with the small table of every node's metrics.

Without a usable bundle (first build, or files damaged) everything is merged from the
per-document files, which stay the source of truth.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from graphrag_pipeline.extract.subgraph import ENTITY_ROWS, RELATION_ROWS
from graphrag_pipeline.graph import tables
from graphrag_pipeline.graph.merge import (
    _merge_edges,
    _merge_nodes,
    canonical_pairs,
    changed_ends,
    dropped_relations,
    merge_changed,
    of_pairs,
    touching,
)
from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA, empty_nodes, with_metrics
from graphrag_pipeline.storage import sliced_graph
from graphrag_pipeline.storage.files import TABLES, ParquetBundle
from graphrag_pipeline.storage.store import CHUNK_ROWS, extracted_from_other_chunks

SHARDS = 32
# the rule merge.py merges by; a bundle written under another one is merged again from scratch
# (2: descriptions cut to tables.DESCRIPTION_BUDGET; 3: the graph stored in slices)
MERGE_RULE = 3


def merge_rule() -> list[int]:
    """What the bundle records of the rule it was merged by: its number and the description budget
    (a budget changed alone then merges everything again too)."""
    return [MERGE_RULE, tables.DESCRIPTION_BUDGET]


SOURCES_SCHEMA = {"doc_id": pl.Utf8, "signature": pl.Utf8, "dropped": pl.Int64}


def recorded_sources(bundle: ParquetBundle, manifest: dict) -> dict[str, str]:
    """doc_id -> the signature of its files when a bundle (the mentions' or the chunks') last read them."""
    return signatures_of(bundle.read(manifest, "sources"))


def signatures_of(sources: pl.DataFrame) -> dict[str, str]:
    """doc_id -> signature, from a bundle's sources table."""
    return dict(zip(sources["doc_id"].to_list(), sources["signature"].to_list()))


def shard_of(doc_id: str) -> int:
    return zlib.crc32(doc_id.encode("utf-8")) % SHARDS


@dataclass
class MergedGraph:
    nodes: pl.DataFrame  # with degree and pagerank
    edges: pl.DataFrame
    dropped_relations: int  # dropped while extracting documents + while merging
    documents_changed: int  # documents whose mentions were (re)read
    documents_removed: int
    affected_keys: int  # entity keys merged again (-1: everything was merged)
    full: bool  # merged from scratch
    # the bundle's files of the graph's tables (sliced_graph) holding exactly `nodes` and `edges`:
    # the knowledge graph links them instead of encoding the tables again
    files: dict[str, Path] | None = None
    slices_written: int = 0  # graph tables written by this merge (of len(files))
    documents_without_files: int = 0  # documents (all in `optional`: not extracted yet) with no subgraph file


def _with_shard(df: pl.DataFrame) -> pl.DataFrame:
    if df.height == 0:
        return df.with_columns(pl.lit(0, pl.Int64).alias("_shard"))
    shard = {d: shard_of(d) for d in df["doc_id"].unique().to_list()}
    return df.with_columns(pl.col("doc_id").replace_strict(shard, return_dtype=pl.Int64).alias("_shard"))


def update_merged_graph(store, keys: list[str], optional: Collection[str] = ()) -> MergedGraph:
    """Merge the subgraphs of documents `keys`, reusing the previous build's merge (see above).
    Every document not in `optional` must have its subgraph files (Store.MissingInputError
    otherwise); one in `optional` (not extracted yet) adds what it has, possibly nothing."""
    signatures = store.subgraph_signatures(keys)
    merged = _update_merged_graph(store, keys, signatures, optional)
    merged.documents_without_files = sum(1 for s in signatures.values() if s == "missing/missing")
    return merged


def _update_merged_graph(store, keys: list[str], signatures: dict[str, str], optional: Collection[str]) -> MergedGraph:
    bundle = ParquetBundle(store.paths.graph_dir, "mentions")
    manifest = bundle.manifest()
    if manifest is not None and "merge_dropped" in manifest:
        try:
            if manifest.get("merge_rule") == merge_rule():
                return _update(store, bundle, manifest, keys, signatures, optional)
            return _full(
                store,
                bundle,
                manifest,
                keys,
                signatures,
                optional,
                _kept_rows(store, bundle, manifest, keys, signatures, optional),
            )
        except (OSError, KeyError, pl.exceptions.PolarsError):
            pass  # a damaged bundle: merge from the per-document files
    return _full(store, bundle, manifest, keys, signatures, optional)


def _kept_rows(
    store, bundle: ParquetBundle, manifest: dict, keys: list[str], signatures: dict[str, str], optional: Collection[str]
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The mention rows and sources of documents `keys` from a bundle merged under another rule:
    its shards' rows of the documents unchanged since, the files' rows of the others. Merging
    them all again reads 64 shard files instead of 100,000 per-document files (at 50,000
    documents: 282 s for a full merge from the files)."""
    sources = bundle.read(manifest, "sources")
    before = signatures_of(sources)
    changed = [k for k in keys if before.get(k) != signatures[k]]
    kept = pl.Series("d", sorted(set(keys) - set(changed)), dtype=pl.Utf8).implode()
    names = sorted(manifest["tables"])
    frames = []
    for kind, columns in (("entities", ENTITY_ROWS), ("relations", RELATION_ROWS)):
        old = [bundle.read(manifest, n).select(list(columns)) for n in names if n.startswith(kind + "-")]
        if not old:
            raise KeyError(f"the bundle has no {kind} shards")  # merged from the files
        frames.append(pl.concat(old, how="vertical_relaxed").filter(pl.col("doc_id").is_in(kept)))
    new_entities, new_relations = store.read_subgraphs(changed, optional)
    entities = pl.concat([frames[0], new_entities.select(frames[0].columns).cast(frames[0].schema)])
    relations = pl.concat([frames[1], new_relations.select(frames[1].columns).cast(frames[1].schema)])
    order = {k: i for i, k in enumerate(keys)}  # documents in `keys` order, as read from their files
    entities = entities.sort(pl.col("doc_id").replace_strict(order, return_dtype=pl.Int64), maintain_order=True)
    relations = relations.sort(pl.col("doc_id").replace_strict(order, return_dtype=pl.Int64), maintain_order=True)
    sources = pl.concat([sources.filter(pl.col("doc_id").is_in(kept)), _sources(store, changed, signatures)])
    return entities, relations, sources.sort("doc_id")


def _sources(store, keys: list[str], signatures: dict[str, str]) -> pl.DataFrame:
    rows = [(k, signatures[k], int((store.subgraph_info(k) or {}).get("dropped_relations", 0))) for k in keys]
    return pl.DataFrame(rows, schema=SOURCES_SCHEMA, orient="row")


def _full(
    store,
    bundle: ParquetBundle,
    manifest: dict | None,
    keys: list[str],
    signatures: dict[str, str],
    optional: Collection[str] = (),
    rows: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame] | None = None,
) -> MergedGraph:
    """Everything merged again: from the per-document files, or from `rows` (_kept_rows)."""
    if rows is None:
        entities, relations = store.read_subgraphs(keys, optional)
        sources = _sources(store, keys, signatures)
    else:
        entities, relations, sources = rows
    nodes = _merge_nodes(entities) if entities.height else pl.DataFrame(schema=NODE_SCHEMA)
    edges, dropped = _merge_edges(relations, nodes) if relations.height else (pl.DataFrame(schema=EDGE_SCHEMA), 0)
    nodes = with_metrics(nodes, edges)
    cuts = sliced_graph.choose_cuts(edges["source_key"])
    tables = {"sources": sources, **sliced_graph.graph_tables(nodes, edges, cuts)}
    entities, relations = _with_shard(entities), _with_shard(relations)
    for i in range(SHARDS):
        tables[f"entities-{i:02d}"] = entities.filter(pl.col("_shard") == i).drop("_shard")
        tables[f"relations-{i:02d}"] = relations.filter(pl.col("_shard") == i).drop("_shard")
    written = bundle.write(
        tables,
        previous=manifest,
        drop=set((manifest or {}).get("tables", {})),
        merge_dropped=dropped,
        merge_rule=merge_rule(),
        graph_cuts=cuts,
    )
    sliced_graph.remember(bundle, written, nodes, edges)
    return _result(nodes, edges, dropped, sources, len(keys), 0, -1, True, written, bundle)


def _update(
    store,
    bundle: ParquetBundle,
    manifest: dict,
    keys: list[str],
    signatures: dict[str, str],
    optional: Collection[str] = (),
) -> MergedGraph:
    sources = bundle.read(manifest, "sources")
    before = signatures_of(sources)
    changed = [k for k in keys if before.get(k) != signatures[k]]
    removed = sorted(set(before) - set(keys))
    # (prefetched by a build)
    nodes, edges = (sliced_graph.read_part(bundle, manifest, part) for part in ("nodes", "edges"))
    if not changed and not removed:
        return _result(nodes, edges, int(manifest["merge_dropped"]), sources, 0, 0, 0, False, manifest, bundle)
    gone = pl.Series("d", changed + removed, dtype=pl.Utf8).implode()
    new_entities, new_relations = store.read_subgraphs(changed, optional)
    new_entities, new_relations = _with_shard(new_entities), _with_shard(new_relations)
    affected: set[str] = set(new_entities["key"].to_list())
    shards: dict[str, pl.DataFrame] = {}
    old_shards: dict[str, pl.DataFrame] = {}  # the rewritten shards as they were
    for i in sorted({shard_of(d) for d in changed + removed}):
        for kind, fresh in (("entities", new_entities), ("relations", new_relations)):
            name = f"{kind}-{i:02d}"
            old = old_shards[name] = bundle.read(manifest, name)
            if kind == "entities":
                affected |= set(old.filter(pl.col("doc_id").is_in(gone))["key"].to_list())
            add = fresh.filter(pl.col("_shard") == i).drop("_shard").select(old.columns).cast(old.schema)
            shards[name] = pl.concat([old.filter(~pl.col("doc_id").is_in(gone)), add])
    k = pl.Series("k", sorted(affected), dtype=pl.Utf8).implode()
    ents = _scan(bundle, manifest, shards, "entities", pl.col("key").is_in(k)).select(list(ENTITY_ROWS))
    merged = _merge_nodes(ents) if ents.height else empty_nodes()
    # an edge is merged again only when the changed documents mention its pair (before or after)
    # or when one of its ends appeared, vanished or was renamed; every other edge is the previous one
    renamed, flipped = changed_ends(nodes, merged, affected)
    old_rows = [f.filter(pl.col("doc_id").is_in(gone)) for n, f in old_shards.items() if n.startswith("relations-")]
    gone_rels = pl.concat(old_rows, how="vertical_relaxed").select(list(RELATION_ROWS))
    changed_rels = new_relations.drop("_shard").select(list(RELATION_ROWS)).cast(gone_rels.schema)
    pairs = canonical_pairs(pl.concat([gone_rels, changed_rels]).select("source_key", "target_key"))
    ends = pl.concat([pairs["source_key"], pairs["target_key"]]).unique().implode()
    # a cheap test on the stored rows first (both ends among the pairs' ends), the exact one after
    coarse = (pl.col("source_key").is_in(ends) & pl.col("target_key").is_in(ends)) | touching(renamed)
    # the shards not rewritten are read once: their rows are the same before and after
    near = pl.concat(
        [
            _scan(bundle, manifest, shards, "relations", coarse, rewritten=False),
            _scan(bundle, manifest, shards, "relations", coarse, on_disk=False),
        ],
        how="vertical_relaxed",
    ).select(list(RELATION_ROWS))
    rels = of_pairs(near, pairs, renamed)
    # relation rows whose fate (kept or dropped) can change: the changed documents' rows, and the
    # rows of other documents that touch a key which appeared or vanished
    others = near.filter(touching(flipped) & ~pl.col("doc_id").is_in(gone))
    old_nodes = nodes.select("key")
    sources_touched: set[str] = set()  # the source keys of the edges replaced, removed or added
    nodes, edges = merge_changed(nodes, edges, merged, rels, affected, pairs, renamed, touched=sources_touched)
    nodes = with_metrics(nodes, edges)
    # only the slices holding a changed node or edge are written again (the metrics always)
    cuts = list(manifest.get("graph_cuts") or [])
    node_slices = {sliced_graph.slice_of(k, cuts) for k in affected}
    edge_slices = {sliced_graph.slice_of(k, cuts) for k in sources_touched}
    recut = sliced_graph.oversized(nodes, edges, cuts, edge_slices)
    if recut:  # a slice outgrew its share: every slice cut again and written
        cuts = sliced_graph.choose_cuts(edges["source_key"])
        node_slices = edge_slices = None
    graph = sliced_graph.graph_tables(nodes, edges, cuts, node_slices, edge_slices)
    dropped = (
        int(manifest["merge_dropped"])
        - dropped_relations(pl.concat([gone_rels, others], how="vertical_relaxed"), old_nodes)
        + dropped_relations(pl.concat([changed_rels, others], how="vertical_relaxed"), nodes.select("key"))
    )
    new_sources = pl.concat([sources.filter(~pl.col("doc_id").is_in(gone)), _sources(store, changed, signatures)]).sort(
        "doc_id"
    )
    superseded = sliced_graph.memo_keys(bundle, manifest)  # (before the files are replaced)
    written = bundle.write(
        {**shards, "sources": new_sources, **graph},
        previous=manifest,
        drop={t for t in manifest["tables"] if sliced_graph.is_graph_table(t)} if recut else frozenset(),
        merge_dropped=dropped,
        merge_rule=merge_rule(),
        graph_cuts=cuts,
    )
    TABLES.forget(superseded)  # the memo keeps one version of a graph of a million edges
    sliced_graph.remember(bundle, written, nodes, edges)
    counts = (len(changed), len(removed), len(affected))
    return _result(nodes, edges, dropped, new_sources, *counts, False, written, bundle, len(graph))


def _identities(bundle: ParquetBundle, manifest: dict | None, wanted) -> list[tuple | None]:
    """The identities (TableMemo.identity) of the manifest's files of the `wanted` tables, to
    forget them once read; nothing when the memo is off. (A file a write supersedes is forgotten
    by ParquetBundle.write.)"""
    if not TABLES.enabled or not isinstance(manifest, dict) or not isinstance(manifest.get("tables"), dict):
        return []
    return [TABLES.identity(bundle.path(manifest, t)) for t in manifest["tables"] if wanted(t)]


def _scan(
    bundle: ParquetBundle,
    manifest: dict,
    shards: dict[str, pl.DataFrame],
    kind: str,
    where: pl.Expr,
    *,
    rewritten: bool = True,
    on_disk: bool = True,
) -> pl.DataFrame:
    """Rows of every `kind` shard matching `where`: the shards in `shards` from memory (unless not
    `rewritten`), the others from disk (unless not `on_disk`)."""
    names = sorted(n for n in manifest["tables"] if n.startswith(kind + "-"))
    frames = [shards[n].filter(where) for n in names if n in shards] if rewritten else []
    files = [str(bundle.folder / manifest["tables"][n]) for n in names if n not in shards] if on_disk else []
    if files:
        frames.append(pl.scan_parquet(files).filter(where).collect())
    if not frames:  # no rows to scan: an empty table of the shards' columns
        return pl.scan_parquet(bundle.path(manifest, names[0])).head(0).collect() if names else pl.DataFrame()
    return pl.concat(frames, how="vertical_relaxed")


def _result(
    nodes, edges, merge_dropped: int, sources, changed, removed, affected, full, manifest, bundle, slices=None
) -> MergedGraph:
    """nodes: with their metrics. manifest: the bundle's, whose graph tables hold the nodes and edges;
    slices: how many of those this merge wrote (None: all)."""
    dropped = int(merge_dropped) + int(sources["dropped"].sum() or 0)
    files = {t: bundle.path(manifest, t) for t in manifest["tables"] if sliced_graph.is_graph_table(t)}
    written = len(files) if slices is None else slices
    return MergedGraph(nodes, edges, dropped, changed, removed, affected, full, files, written)


# -- the chunks of every document, for the search index ----------------------------------------
CHUNK_SOURCES_SCHEMA = {"doc_id": pl.Utf8, "signature": pl.Utf8}


def all_chunks(store, keys: list[str], optional: Collection[str] = (), held: set[str] | None = None) -> pl.DataFrame:
    """The chunk rows of documents `keys` in document order, kept in shards like the mentions: only
    the chunk files of documents that changed since the last call are read. Every document not in
    `optional` must have its chunk files (Store.MissingInputError otherwise).

    A changed document whose stored subgraph was extracted from other contents than its new chunks
    (chunked again, then its extraction failed) keeps the chunk rows the shards had: the merged graph
    still holds what it extracted before, whose entities cite those chunks, so the index stays
    consistent until the document is extracted again. Such documents are added to `held`, and
    looked at again by the next call."""
    bundle = ParquetBundle(store.paths.graph_dir, "chunks")
    manifest = bundle.manifest()
    signatures = store.signatures("chunks", keys, (".parquet",))
    shards: dict[str, pl.DataFrame] = {}
    # the shards as prefetched by the build (TableMemo.prefetch): not kept once read (the rows are)
    prefetched = _identities(bundle, manifest, lambda t: t.startswith("chunks-"))
    try:
        if manifest is None or "sources" not in manifest["tables"]:
            raise KeyError("no chunk shards yet")
        before = recorded_sources(bundle, manifest)
        changed = [k for k in keys if before.get(k) != signatures[k]]
        # (only a document the shards hold rows of can keep them; one they do not is read anew)
        behind = {k for k in extracted_from_other_contents(store, changed) if k in before}
        changed = [k for k in changed if k not in behind]
        recorded = {**signatures, **{k: before[k] for k in behind}}  # compared again next time
        gone = pl.Series("d", changed + sorted(set(before) - set(keys)), dtype=pl.Utf8).implode()
        fresh = _with_shard(store.read_all_chunks(changed, optional)) if changed else None
        for i in sorted({shard_of(d) for d in gone.explode().to_list()}):
            name = f"chunks-{i:02d}"
            old = bundle.read(manifest, name, remember=True)
            if old.columns != list(CHUNK_ROWS):
                raise KeyError("chunk shards of an older layout")  # written again below, with every column
            add = (
                [fresh.filter(pl.col("_shard") == i).drop("_shard").select(old.columns).cast(old.schema)]
                if fresh is not None
                else []
            )
            shards[name] = pl.concat([old.filter(~pl.col("doc_id").is_in(gone)), *add])
        if shards:
            bundle.write({**shards, "sources": _chunk_sources(keys, recorded)}, previous=manifest)
        frames = [
            shards[n] if n in shards else bundle.read(manifest, n, remember=True)
            for n in sorted(manifest["tables"])
            if n.startswith("chunks-")
        ]
        rows = pl.concat(frames, how="vertical_relaxed")
        if rows.columns != list(CHUNK_ROWS):
            raise KeyError("chunk shards of an older layout")
        if held is not None:  # (the fallback below reads every document's current chunks)
            held |= behind
    except (OSError, KeyError, pl.exceptions.PolarsError):
        rows = _with_shard(store.scan_all_chunks(keys, optional))
        tables = {f"chunks-{i:02d}": rows.filter(pl.col("_shard") == i).drop("_shard") for i in range(SHARDS)}
        bundle.write(
            {**tables, "sources": _chunk_sources(keys, signatures)},
            previous=manifest,
            drop=set((manifest or {}).get("tables", {})),
        )
        rows = rows.drop("_shard")
    TABLES.forget(prefetched)
    order = pl.DataFrame({"doc_id": keys, "_order": range(len(keys))}, schema={"doc_id": pl.Utf8, "_order": pl.Int64})
    return rows.join(order, on="doc_id", how="inner").sort("_order", "position").drop("_order")


def extracted_from_other_contents(store, keys: list[str]) -> set[str]:
    """The documents of `keys` whose stored subgraph was extracted from other contents than their
    stored chunks were made of (a document without a subgraph yet is not among them)."""
    out = set()
    for key in keys:
        try:
            sub = store.subgraph_info(key)
            chunks = store.chunk_info(key) if isinstance(sub, dict) else None
        except (OSError, ValueError):  # unreadable: the readers of the files say so
            continue
        if isinstance(chunks, dict) and extracted_from_other_chunks(sub, chunks):
            out.add(key)
    return out


def _chunk_sources(keys: list[str], signatures: dict[str, str]) -> pl.DataFrame:
    return pl.DataFrame({"doc_id": keys, "signature": [signatures[k] for k in keys]}, schema=CHUNK_SOURCES_SCHEMA)


def prefetch_paths(graph_dir: Path) -> list[Path]:
    """The chunk shards of the last build, which the next update's search index reads whole (for
    `TableMemo.prefetch`); empty before a first build. (The merged graph: `prefetch_graph`.)"""
    chunks = ParquetBundle(graph_dir, "chunks")
    manifest = chunks.manifest()
    if manifest is None:
        return []
    return [chunks.path(manifest, t) for t in sorted(manifest["tables"]) if t.startswith("chunks-")]


def prefetch_graph(graph_dir: Path) -> None:
    """Assemble the last build's merged graph (nodes, edges) into the table memo in the background:
    the next update's merge reads it whole."""
    sliced_graph.prefetch(ParquetBundle(graph_dir, "mentions"))
