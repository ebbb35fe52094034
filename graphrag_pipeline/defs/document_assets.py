"""Per-document assets: `chunks` and `doc_subgraph`, one dynamic partition per corpus file.

A run materializes a whole range of partitions in one step (single-run backfill policy), so a
thousand documents cost one run, not a thousand. A bad file never fails its neighbours: it is
recorded as skipped, with the reason in the logs and in the metadata.

Each partition's materialization carries the batch's totals and its own document's figures
(`document_*`, added per partition key). Its code version is made of the method, model, prompts
and chunking (see `graphrag_pipeline.code_versions`), so the partitions built under other settings
show as stale, and the CLI finds them in one query (`stale_by_code_version`).
"""

import time

import dagster as dg

from graphrag_pipeline import progress as progress_events
from graphrag_pipeline.defs.llm_step import StepLLM, llm_metadata, stop_metadata
from graphrag_pipeline.defs.metadata import OWNERS, add_partition_metadata, md_table, table_schema, versioned
from graphrag_pipeline.defs.partitions import KEY_PREFIX, documents_partitions, missing_inputs_failure, not_materialized
from graphrag_pipeline.defs.resources import LLMSettings, PipelineSettings
from graphrag_pipeline.defs.stopping import stoppable
from graphrag_pipeline.extract.batch import extract_documents
from graphrag_pipeline.extract.subgraph import ENTITY_ROWS, RELATION_ROWS
from graphrag_pipeline.ingest.document_chunks import chunk_document
from graphrag_pipeline.ingest.documents import find_corpus_files
from graphrag_pipeline.storage.files import DamagedFileError
from graphrag_pipeline.storage.store import CHUNK_ROWS, MissingInputError, partition_key_problem

DOC_RETRY = dg.RetryPolicy(max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


def _refuse_invalid_keys(keys: list[str]) -> None:
    """Fail the run, before anything is written, when a partition key cannot name files inside the
    home (e.g. "../x" or "/abs" added by hand in Dagster's UI): no retry can help."""
    bad = [(k, p) for k in keys if (p := partition_key_problem(k)) is not None]
    if not bad:
        return
    shown = "; ".join(f"{k!r}: {p}" for k, p in bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
    raise dg.Failure(
        description=f"{len(bad)} of {len(keys)} partition keys are not valid document keys, so nothing was written "
        f"(invalid document partition key {shown}). No corpus file has such a key: delete these "
        "partitions of `documents` (a `graphrag-pipeline build` removes them).",
        allow_retries=False,
    )


@dg.asset(
    key_prefix=KEY_PREFIX,
    partitions_def=documents_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="documents",
    kinds={"polars", "parquet"},
    owners=OWNERS,
    tags={"stage": "ingest"},
    metadata={"dagster/column_schema": table_schema(CHUNK_ROWS)},
    description="Token windows of each document (tiktoken cl100k_base); chunk id = hash of its text.",
)
@stoppable
def chunks(context: dg.AssetExecutionContext, settings: PipelineSettings) -> dg.MaterializeResult:
    keys = context.partition_keys
    _refuse_invalid_keys(keys)
    store = settings.store()
    files = find_corpus_files(settings.corpus, keys)
    rows, skipped, truncated = [], [], []
    per_document = {}
    total_chunks = total_tokens = 0
    progress_events.start("chunking", len(keys), "documents", "chunking")
    for i, key in enumerate(keys, 1):
        doc = chunk_document(
            key, files.get(key), settings.max_document_bytes, settings.chunk_tokens, settings.chunk_overlap
        )
        for level, message in doc.log:
            getattr(context.log, level)(message)
        if doc.chunks is not None:
            store.write_chunks(key, doc.chunks, doc.info)
        if doc.row is not None:
            total_chunks += doc.row["chunks"]
            total_tokens += doc.row["tokens"]
            rows.append(doc.row)
        if doc.skipped:
            skipped.append({"document": doc.document, "reason": doc.skipped})
        elif doc.truncated:
            truncated.append({"document": doc.document, "reason": doc.truncated})
        per_document[key] = {
            "document": doc.document,
            "document_status": (doc.row or {}).get("status") or doc.info.get("status") or "unreadable",
            "document_chunks": (doc.row or {}).get("chunks", 0),
            "document_tokens": (doc.row or {}).get("tokens", 0),
            "dagster/row_count": (doc.row or {}).get("chunks", 0),
            "document_note": doc.skipped or doc.truncated or "",
        }
        progress_events.advance("chunking")
        if i % 100 == 0 or i == len(keys):
            context.log.info(f"chunked {i}/{len(keys)} documents ({total_chunks} chunks so far)")
    progress_events.finish("chunking")
    add_partition_metadata(context, per_document)
    return versioned(
        context,
        {
            "documents": len(keys),
            "chunks": total_chunks,
            "tokens": total_tokens,
            "skipped": len(skipped),
            "truncated": len(truncated),
            "preview": md_table(rows, ["document", "status", "chunks", "tokens"]),
            "skipped_documents": md_table(skipped, ["document", "reason"], width=160),
            "truncated_documents": md_table(truncated, ["document", "reason"], width=160),
            # what a person must know about, for the CLI to print (skipped or cut documents)
            "notices": dg.MetadataValue.json(
                [{"document": r["document"], "note": r["reason"]} for r in skipped + truncated][:200]
            ),
        },
    )


@dg.asset(
    key_prefix=KEY_PREFIX,
    partitions_def=documents_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=[chunks],
    group_name="documents",
    kinds={"polars", "parquet"},
    pool="llm",
    retry_policy=DOC_RETRY,
    owners=OWNERS,
    tags={"stage": "extract", "llm": "extraction"},
    metadata={
        "dagster/column_schema": table_schema(ENTITY_ROWS),  # the entities table; relations below
        "relations_schema": table_schema(RELATION_ROWS),
    },
    description="Entities and relations extracted from each document's chunks (cached per chunk hash).",
)
@stoppable
def doc_subgraph(
    context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings
) -> dg.MaterializeResult:
    keys = context.partition_keys
    _refuse_invalid_keys(keys)
    store = settings.store()
    method = settings.method
    step = StepLLM("doc_subgraph", settings, llm, used=method != "fast")
    client = step.client
    try:
        infos = {key: store.chunk_info(key) or {} for key in keys}
        all_chunks = store.read_all_chunks(keys)  # one scan of the batch's files, not one read per document
    except DamagedFileError as exc:
        raise dg.Failure(
            description=f"{exc}: materialize `chunks` of this document again (a `graphrag-pipeline build` does it)",
            allow_retries=False,
        ) from exc
    except MissingInputError as exc:  # never extracted as an empty document
        if exc.missing.keys() & not_materialized(context.instance, "chunks", keys):
            raise dg.Failure(
                description=f"doc_subgraph cannot read its inputs: {exc}. Materialize `chunks` of these documents "
                "first (a `graphrag-pipeline build` does it); nothing was written.",
                allow_retries=False,
            ) from None
        raise missing_inputs_failure(exc, "doc_subgraph") from None
    if client is not None:
        context.log.info(
            f"extracting {all_chunks.height} chunks of {len(keys)} documents with {method} via {client.describe()}"
        )

    last_log = [time.monotonic()]

    def progress(done: int, total: int) -> None:
        # every few seconds, not every chunk: each log line is an event written to the instance
        if done == total or time.monotonic() - last_log[0] >= 10:
            last_log[0] = time.monotonic()
            context.log.info(f"extraction: {done}/{total} chunks")

    result = extract_documents(
        keys,
        all_chunks,
        method,
        settings.extraction_cache(),
        client,
        llm.extraction_settings(method) if client else None,
        progress,
    )
    stats = result.stats
    for failure in stats.failed_chunks:
        context.log.warning(f"{failure['doc_id']}: chunk {failure['chunk_id']} failed: {failure['error']}")
    if stats.llm.truncated:
        context.log.warning(
            f"{stats.llm.truncated} answers were cut at the endpoint's output limit (finish_reason=length) and "
            f"parsed as far as they go ({len(stats.cut_chunks)} chunks): raise the server's maximum output tokens, "
            "then `graphrag-pipeline build --refresh failed` asks them again"
        )
    rows = []
    per_document = {}
    mentions = {"entity_mentions": 0, "relation_mentions": 0, "dropped_relations": 0}
    for doc in result.documents:
        sub = doc.subgraph
        mentions["entity_mentions"] += sub.entities.height
        mentions["relation_mentions"] += sub.relations.height
        mentions["dropped_relations"] += sub.dropped_relations
        store.write_subgraph(
            doc.key,
            sub.entities,
            sub.relations,
            {
                "content_hash": infos[doc.key].get("content_hash"),
                # the chunk table read (a document chunked again, whose extraction then failed, is found)
                "chunks_checksum": (infos[doc.key].get("checksums") or {}).get(".parquet"),
                "method": method,
                "entities": sub.entities.height,
                "relations": sub.relations.height,
                "dropped_relations": sub.dropped_relations,
                "failed_chunks": doc.failed_chunks,
                "cut_chunks": doc.cut_chunks,
            },
        )
        row = {
            "document": infos[doc.key].get("relpath") or doc.key,
            "chunks": doc.chunks,
            "failed_chunks": len(doc.failed_chunks),
            "entities": sub.entities["key"].n_unique() if sub.entities.height else 0,
            "relations": sub.relations.height,
        }
        rows.append(row)
        per_document[doc.key] = {**_document_metadata(row, sub.entities), "dagster/row_count": sub.entities.height}
    step.record(stats.llm)
    metadata = {
        "documents": len(keys),
        "method": method,
        **mentions,
        "chunks_extracted": stats.extracted,
        "cache_hits": stats.cache_hits,
        "failed_chunks": len(stats.failed_chunks),
        "cut_chunks": len(stats.cut_chunks),
        "failed_documents": len(stats.failed_documents),
        **llm_metadata(stats.llm),
        "preview": md_table(rows, ["document", "chunks", "failed_chunks", "entities", "relations"]),
    }
    if stats.failed_documents:
        failures = [{"document": k, "error": v} for k, v in stats.failed_documents.items()]
        if stats.circuit_open:
            # the endpoint is down (or the budget spent): retrying the step would only pay the breaker again
            left = stats.documents_left
            stored = len(keys) - len(left)
            raise dg.Failure(
                description=f"{len(left)} of {len(keys)} documents could not be extracted and are left for the "
                f"next build "
                f"({', '.join(left[:10])}{' ...' if len(left) > 10 else ''})"
                + (f"; the other {stored} were stored and will not be extracted again. " if stored else ". ")
                + stats.circuit_open,
                metadata={
                    **metadata,
                    "not_attempted_chunks": stats.not_attempted,
                    **stop_metadata(stats.budget_exceeded),
                    "failed": md_table(failures, ["document", "error"], width=200),
                },
                allow_retries=False,
            )
        raise dg.Failure(
            description=f"{len(failures)} of {len(keys)} documents could not be extracted (the LLM endpoint failed); "
            + (
                f"the other {len(keys) - len(failures)} were stored and will not be extracted again. "
                if len(failures) < len(keys)
                else ""
            )
            + f"First error: {failures[0]['document']}: {failures[0]['error']}",
            metadata={**metadata, "failed": md_table(failures, ["document", "error"], width=200)},
        )
    add_partition_metadata(context, per_document)
    return versioned(context, metadata)


def _document_metadata(row: dict, entities) -> dict:
    """One document's own figures, for its partition's materialization (numbers stay numbers, so
    Dagster plots them per partition)."""
    top = []
    if entities.height:
        top = entities.unique(subset=["key"], keep="first", maintain_order=True).select("name", "type").head(10)
        top = top.to_dicts()
    return {
        "document": row["document"],
        "document_chunks": row["chunks"],
        "document_failed_chunks": row["failed_chunks"],
        "document_entities": row["entities"],
        "document_relations": row["relations"],
        "document_preview": md_table(top, ["name", "type"], limit=10),
    }
