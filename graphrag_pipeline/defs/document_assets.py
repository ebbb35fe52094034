"""Per-document assets: `chunks` and `doc_subgraph`, one dynamic partition per corpus file.

A run materializes a whole range of partitions in one step (single-run backfill policy), so a
thousand documents cost one run, not a thousand. A bad file never fails its neighbours: it is
recorded as skipped, with the reason in the logs and in the metadata.
"""


import polars as pl
import dagster as dg

from ..core.chunking import chunk_text
from ..core.documents import file_hash, read_document, scan_corpus
from ..core.extraction import ExtractionStats, extract_chunks
from ..core.subgraph import build_doc_subgraph
from .metadata import md_table
from .partitions import documents_partitions
from .resources import PipelineSettings

DOC_RETRY = dg.RetryPolicy(max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


@dg.asset(
    partitions_def=documents_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="documents",
    kinds={"polars", "parquet"},
    description="Token windows of each document (tiktoken cl100k_base); chunk id = hash of its text.",
)
def chunks(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
    store = settings.store()
    files = {f.key: f for f in scan_corpus(settings.corpus)}
    rows, skipped = [], []
    total_chunks = total_tokens = 0
    keys = context.partition_keys
    for i, key in enumerate(keys, 1):
        f = files.get(key)
        if f is None:
            skipped.append({"document": key, "reason": "file no longer in the corpus"})
            context.log.warning(f"{key}: file no longer in the corpus; skipped (its partition will be removed)")
            store.write_chunks(key, pl.DataFrame(), {"relpath": None, "content_hash": None, "status": "missing", "chunks": 0})
            continue
        content_hash = file_hash(f.path)
        doc = read_document(f.path, settings.max_document_bytes)
        if doc.message:
            (context.log.warning if not doc.usable else context.log.info)(f"{f.relpath}: {doc.message}")
        pieces = chunk_text(doc.text, settings.chunk_tokens, settings.chunk_overlap) if doc.usable else []
        df = pl.DataFrame(
            {
                "chunk_id": [c.id for c in pieces], "doc_id": [key] * len(pieces), "doc": [f.relpath] * len(pieces),
                "position": [c.position for c in pieces], "text": [c.text for c in pieces], "tokens": [c.tokens for c in pieces],
            },
            schema={"chunk_id": pl.Utf8, "doc_id": pl.Utf8, "doc": pl.Utf8, "position": pl.Int64, "text": pl.Utf8, "tokens": pl.Int64},
        )
        tokens = int(df["tokens"].sum()) if df.height else 0
        store.write_chunks(key, df, {
            "relpath": f.relpath, "content_hash": content_hash, "status": doc.status, "message": doc.message,
            "encoding": doc.encoding, "chunks": df.height, "tokens": tokens,
        })
        total_chunks += df.height
        total_tokens += tokens
        rows.append({"document": f.relpath, "status": doc.status, "chunks": df.height, "tokens": tokens})
        if not doc.usable:
            skipped.append({"document": f.relpath, "reason": doc.message})
        if i % 100 == 0 or i == len(keys):
            context.log.info(f"chunked {i}/{len(keys)} documents ({total_chunks} chunks so far)")
    return dg.MaterializeResult(metadata={
        "documents": len(keys),
        "chunks": total_chunks,
        "tokens": total_tokens,
        "skipped": len(skipped),
        "preview": md_table(rows, ["document", "status", "chunks", "tokens"]),
        "skipped_documents": md_table(skipped, ["document", "reason"], width=160),
    })


@dg.asset(
    partitions_def=documents_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[chunks],
    group_name="documents",
    kinds={"polars", "parquet"},
    pool="llm",
    retry_policy=DOC_RETRY,
    description="Entities and relations extracted from each document's chunks (cached per chunk hash).",
)
def doc_subgraph(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
    store = settings.store()
    cache = settings.extraction_cache()
    stats = ExtractionStats()
    rows = []
    keys = context.partition_keys
    total_entities = total_relations = dropped = 0
    for i, key in enumerate(keys, 1):
        info = store.chunk_info(key) or {}
        chunk_df = store.read_chunks(key)
        extractions = extract_chunks(chunk_df, settings.method, cache, stats)
        sub = build_doc_subgraph(key, extractions)
        store.write_subgraph(key, sub.entities, sub.relations, {
            "content_hash": info.get("content_hash"), "method": settings.method,
            "entities": sub.entities.height, "relations": sub.relations.height, "dropped_relations": sub.dropped_relations,
        })
        total_entities += sub.entities.height
        total_relations += sub.relations.height
        dropped += sub.dropped_relations
        rows.append({"document": info.get("relpath") or key, "chunks": chunk_df.height,
                     "entities": sub.entities["key"].n_unique() if sub.entities.height else 0,
                     "relations": sub.relations.height})
        if i % 100 == 0 or i == len(keys):
            context.log.info(f"extracted {i}/{len(keys)} documents ({stats.extracted} chunks extracted, {stats.cache_hits} cached)")
    return dg.MaterializeResult(metadata={
        "documents": len(keys),
        "method": settings.method,
        "entity_mentions": total_entities,
        "relation_mentions": total_relations,
        "dropped_relations": dropped,
        "chunks_extracted": stats.extracted,
        "cache_hits": stats.cache_hits,
        "llm_calls": stats.llm.calls,
        "llm_cache_hits": stats.llm.cache_hits,
        "prompt_tokens": stats.llm.prompt_tokens,
        "completion_tokens": stats.llm.completion_tokens,
        "preview": md_table(rows, ["document", "chunks", "entities", "relations"]),
    })
