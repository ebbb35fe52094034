"""The published search index (DuckDB), rebuilt aside and swapped in whole."""


import time

import dagster as dg
import polars as pl

from ..core.duckdb_index import previous_vectors, write_duckdb_index
from ..core.embedding import EndpointEmbedder, HashingEmbedder
from ..core.es_index import EsConfig, EsIndexError, build_documents, publish, read_duckdb_tables
from ..core.index_records import build_index_tables
from .document_assets import chunks
from .graph_assets import EAGER, communities, community_reports, resolved_graph
from .metadata import md_table
from .partitions import community_partitions, documents_partitions
from .resources import LLMSettings, PipelineSettings

class ElasticsearchConfig(dg.Config):
    full_rebuild: bool = False  # write a new index and swap the alias even when a sync would do


# eager, but never in the same tick as one of its inputs: otherwise the index would be published
# right after new communities appear and before their reports exist
PUBLISH_WHEN_SETTLED = EAGER & ~dg.AutomationCondition.any_deps_match(
    dg.AutomationCondition.will_be_requested()
).with_label("no input requested this tick")


@dg.asset(
    deps=[resolved_graph, communities, community_reports, chunks],
    group_name="index",
    kinds={"duckdb"},
    automation_condition=PUBLISH_WHEN_SETTLED,
    retry_policy=dg.RetryPolicy(max_retries=2, delay=5),
    description="Entities, relations, community reports and chunks with embeddings, n-hop paths and the type pool.",
)
def search_index(context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings) -> dg.MaterializeResult:
    store = settings.store()
    started = time.perf_counter()
    nodes, edges = store.read_graph("resolved_graph")
    comms = store.read_communities()
    live = set(context.instance.get_dynamic_partitions(community_partitions.name))
    reports, missing = [], 0
    for cid in comms.filter(pl.col("size") >= 2)["community_id"].to_list():
        report = store.read_report(cid) if cid in live else None
        if report is None:
            missing += 1
            continue
        reports.append(report)
    doc_keys = context.instance.get_dynamic_partitions(documents_partitions.name)
    chunk_df = store.read_all_chunks(doc_keys)
    client = llm.client(settings.paths.cache_db) if llm.embedding_model != "hashing" else None
    if llm.embedding_model != "hashing" and client is None:
        raise dg.Failure(f"GRAPHRAG_EMBEDDING_MODEL={llm.embedding_model} needs an endpoint: set OPENAI_API_KEY or OPENAI_BASE_URL")
    embedder = EndpointEmbedder(client) if client else HashingEmbedder()
    previous = previous_vectors(settings.paths.index_file, embedder.model_id)
    tables = build_index_tables(nodes, edges, comms, reports, chunk_df, embedder, previous)
    size = write_duckdb_index(tables, settings.paths.index_file, {
        "embedding_model": embedder.model_id, "embedding_dim": embedder.dim, "method": settings.method,
        "documents": len(doc_keys), "communities": comms.height, "built_at": time.time(),
    })
    counts = tables.counts()
    if missing:
        context.log.warning(f"{missing} communities have no report yet; they are left out of this index")
    context.log.info(f"published {settings.paths.index_file} ({size / 1e6:.1f} MB) in {time.perf_counter() - started:.1f}s: {counts}")
    return dg.MaterializeResult(metadata={
        **{k: v for k, v in counts.items()},
        "documents": len(doc_keys),
        "communities": comms.height,
        "reports_missing": missing,
        "path": dg.MetadataValue.path(str(settings.paths.index_file)),
        "size_bytes": size,
        "embedding_model": embedder.model_id,
        "type_pool": md_table(tables.ty2ents.with_columns(pl.col("entities").list.head(5).list.join(", ")).to_dicts(), ["type", "count", "entities"]),
    })


@dg.asset(
    deps=[search_index],
    group_name="index",
    kinds={"elasticsearch"},
    automation_condition=EAGER,
    retry_policy=dg.RetryPolicy(max_retries=3, delay=10, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS),
    description="The search index in Elasticsearch (when GRAPHRAG_ES_URL is set): changed records written, vanished ones deleted; a full rebuild swaps the alias atomically.",
)
def elasticsearch_index(context: dg.AssetExecutionContext, settings: PipelineSettings, config: ElasticsearchConfig) -> dg.MaterializeResult:
    cfg = EsConfig.from_env(settings.home)
    if cfg is None:
        return dg.MaterializeResult(metadata={"skipped": "GRAPHRAG_ES_URL is not set; the DuckDB index is the only index"})
    tables, meta = read_duckdb_tables(settings.paths.index_file)
    docs = build_documents(tables, meta)
    context.log.info(f"syncing {len(docs)} records to {cfg.url} alias {cfg.alias}")
    try:
        stats = publish(cfg, docs, int(meta["embedding_dim"]), full_rebuild=config.full_rebuild)
    except EsIndexError as exc:
        raise dg.Failure(description=str(exc), metadata={"url": cfg.url, "alias": cfg.alias}) from None
    context.log.info(f"{'rebuilt' if stats.full_rebuild else 'updated'} {stats.index}: {stats.written} written, "
                     f"{stats.deleted} deleted, {stats.unchanged} unchanged in {stats.seconds:.1f}s")
    return dg.MaterializeResult(metadata={
        **stats.to_metadata(), "url": cfg.url, "alias": cfg.alias, "records": len(docs), "seconds": round(stats.seconds, 2),
    })
