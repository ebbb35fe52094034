"""The published search index (DuckDB, patched by delta or rebuilt aside, swapped in whole) and its
Elasticsearch copy (following the same delta when it can)."""

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import dagster as dg
import polars as pl

# the modules, not their assets: the defs-folder loader registers each asset once, from its own file
from graphrag_pipeline.defs import document_assets, graph_assets
from graphrag_pipeline.defs.llm_step import StepLLM, endpoint_down_fails_the_step, llm_metadata
from graphrag_pipeline.defs.metadata import OWNERS, md_table
from graphrag_pipeline.defs.partitions import KEY_PREFIX, NotMaterialized, document_keys, missing_inputs_failure
from graphrag_pipeline.defs.resources import LLMSettings, PipelineSettings
from graphrag_pipeline.defs.stopping import stoppable
from graphrag_pipeline.graph.mentions import all_chunks
from graphrag_pipeline.index.duckdb_writer import IncompleteIndexError, missing_reports_completeness, publish_index
from graphrag_pipeline.index.embedding import EndpointEmbedder, HashingEmbedder
from graphrag_pipeline.index.es_writer import EsConfig, EsIndexError, sync_records
from graphrag_pipeline.index.records import (
    COLUMNS,
    ReportRowsMemo,
    RowHashMemo,
    SourcesMemo,
    build_index_rows,
    collect_report_rows,
)
from graphrag_pipeline.storage.files import VERDICTS
from graphrag_pipeline.storage.store import MissingInputError, Store


class SearchIndexConfig(dg.Config):
    full_rebuild: bool = False  # write the whole index anew even when a delta would do (also compacts the file)


class ElasticsearchConfig(dg.Config):
    full_rebuild: bool = False  # write a new index and swap the alias even when a sync would do


def _type_pool_preview(path) -> dg.MarkdownMetadataValue:
    from graphrag_pipeline.index.duckdb_reader import attach_read_only, release

    con = attach_read_only(path)
    try:
        pool = con.sql('SELECT type, entities, "count" FROM ty2ents ORDER BY "count" DESC, type').pl()
    finally:
        release(con)
    return md_table(
        pool.with_columns(pl.col("entities").list.head(5).list.join(", ")).to_dicts(), ["type", "count", "entities"]
    )


def _incomplete(message: str, verdict) -> dg.Failure:
    # retrying cannot help: the inputs lack something; the published index was left as it was
    return dg.Failure(
        description=f"{message}; the published index was left untouched",
        metadata=verdict.to_metadata(),
        allow_retries=False,
    )


@dataclass
class IndexInputs:
    """What an index is built from (_index_inputs), and the asset's memos (written back by `remember`)."""

    store: Store
    nodes: pl.DataFrame
    edges: pl.DataFrame
    communities: pl.DataFrame
    reports: pl.DataFrame  # report_base_rows of every reportable community
    chunks: pl.DataFrame
    doc_keys: list[str]
    held: set[str]  # documents whose extraction is behind their chunks (see all_chunks)
    sources: SourcesMemo
    hashes: RowHashMemo
    report_rows: ReportRowsMemo

    def remember(self, asset: str) -> None:
        """Write the memos back (once the records are built from them)."""
        self.store.write_report_sources(asset, self.sources)
        self.store.write_row_hashes(asset, self.hashes)
        self.store.write_report_rows(asset, self.report_rows)

    def metadata(self) -> dict:
        return {
            "documents_behind_their_chunks": len(self.held),
            # (the other relations' row hashes, the other reports' rows: those of the files read before)
            "relations_hashed": self.hashes.hashed,
            "reports_read": self.report_rows.read,
        }


def _index_inputs(context: dg.AssetExecutionContext, settings: PipelineSettings, asset: str) -> IndexInputs:
    """What an index is built from, read through the store: the resolved graph, the communities,
    every reportable community's report, the chunks of every document (a missing input fails), the
    asset's memos of report sources, row hashes and report rows."""
    store = settings.store()
    doc_keys = document_keys(context.instance)
    optional = NotMaterialized(context.instance, "chunks", doc_keys)  # asked only when chunk files are missing
    held: set[str] = set()
    # the chunks are read beside the graph (polars decodes without holding the GIL)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-chunks") as pool:
        # a document not chunked yet may have no chunk files; every chunked one must have them
        chunks = pool.submit(all_chunks, store, doc_keys, optional=optional, held=held)
        # the relations' hashes are reused for the edge files read, the same before and after the read
        hashes = store.read_row_hashes(asset)
        rows = {k: v.len() for k, v in hashes.known.items()}
        before = store.edge_segments("resolved_graph", rows)
        # the columns the records are built from (not the description fragments: half the bytes)
        nodes, edges = store.read_graph("resolved_graph", list(COLUMNS["entities"]), list(COLUMNS["relations"]))
        after = store.edge_segments("resolved_graph", {**rows, **dict(before or [])})
        hashes.segments = before if before == after else None
        try:
            chunk_df = chunks.result()
        except MissingInputError as exc:
            raise missing_inputs_failure(exc, asset) from None
    comms = store.read_communities()
    # every reportable community of the communities table needs its report file: a missing one is
    # an error, never a silently smaller index
    report_rows = store.read_report_rows(asset)
    reports, missing = collect_report_rows(comms, store.report_identity, store.read_report, report_rows)
    if missing:
        verdict = missing_reports_completeness(missing, reports.height + len(missing))
        raise _incomplete(
            f"{len(missing)} of {reports.height + len(missing)} reportable communities have no report file "
            f"(first: {', '.join(missing[:5])})",
            verdict,
        )
    if held:
        context.log.warning(
            f"{len(held)} documents changed but their extraction did not finish "
            f"(first: {', '.join(sorted(held)[:5])}): "
            "the index keeps their previous chunks, which the graph's entities cite, until they are extracted"
        )
    sources = store.read_report_sources(asset)
    return IndexInputs(store, nodes, edges, comms, reports, chunk_df, doc_keys, held, sources, hashes, report_rows)


def index_check_files(store) -> list:
    """The files whose content the index's verification compares it with: the resolved graph's
    nodes and edges, and the communities."""
    return [*store.graph_files("resolved_graph"), store.communities_file()]


# what a failed embeddings call leaves (a delta or a new index is published whole or not at all)
_LEFT_AS_IT_WAS = "the published index was left untouched"


def _embedder(step: str, settings: PipelineSettings, llm: LLMSettings) -> tuple:
    """The step's embedder, and its StepLLM (whose usage - the embedding calls - the step records)."""
    used = llm.embedding_model != "hashing"
    step_llm = StepLLM(step, settings, llm, used=used)
    if used and step_llm.client is None:
        raise dg.Failure(
            f"GRAPHRAG_EMBEDDING_MODEL={llm.embedding_model} needs an endpoint: set OPENAI_API_KEY or OPENAI_BASE_URL"
        )
    return (EndpointEmbedder(step_llm.client) if used else HashingEmbedder()), step_llm


@dg.asset(
    key_prefix=KEY_PREFIX,
    deps=[
        graph_assets.resolved_graph,
        graph_assets.communities,
        graph_assets.community_reports,
        document_assets.chunks,
    ],
    group_name="index",
    kinds={"duckdb"},
    pool="llm",  # embeddings come from the endpoint when GRAPHRAG_EMBEDDING_MODEL names a model
    owners=OWNERS,
    tags={"stage": "index"},
    # no automation condition: publish_sensor (sensors.py) publishes it once the reports of new communities exist
    retry_policy=dg.RetryPolicy(max_retries=2, delay=5),
    description="Entities, relations, community reports and chunks with embeddings, n-hop paths and the type pool. "
    "Published by delta (only changed rows are written) or rebuilt whole; verified complete before it is published.",
)
@stoppable
def search_index(
    context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings, config: SearchIndexConfig
) -> dg.MaterializeResult:
    started = time.perf_counter()
    # the files the verification reads, identified before they are read (search_index_is_complete
    # re-uses the verdict for the same files and the index as published)
    verified_files = VERDICTS.identities(index_check_files(settings.store()))
    inputs = _index_inputs(context, settings, "search_index")
    comms = inputs.communities
    embedder, step = _embedder("search_index", settings, llm)
    inputs_seconds = time.perf_counter() - started
    try:
        with endpoint_down_fails_the_step(step, after=_LEFT_AS_IT_WAS):
            result = publish_index(
                settings.paths.index_file,
                inputs.nodes,
                inputs.edges,
                comms,
                inputs.reports,
                inputs.chunks,
                embedder,
                {"method": settings.method, "documents": len(inputs.doc_keys), "communities": comms.height},
                full_rebuild=config.full_rebuild,
                log=context.log.info,
                sources=inputs.sources,
                hashes=inputs.hashes,
            )
    except IncompleteIndexError as exc:
        raise _incomplete(str(exc), exc.completeness) from None
    usage = step.record()
    if result.verdict is not None:
        published = VERDICTS.identities([settings.paths.index_file])
        VERDICTS.put(VERDICTS.key("index", [*published, *verified_files]), result.verdict)
    inputs.remember("search_index")
    counts = dict(result.meta.get("counts", {}))
    changes = result.to_metadata()
    seconds = time.perf_counter() - started
    context.log.info(
        f"{result.mode} publish of {settings.paths.index_file} ({result.size / 1e6:.1f} MB) in {seconds:.1f}s "
        f"({result.reason}): {changes['rows_inserted']} rows inserted, {changes['rows_updated']} updated, "
        f"{changes['rows_deleted']} deleted, {changes['rows_unchanged']} unchanged; {counts}"
    )
    return dg.MaterializeResult(
        metadata={
            **{k: v for k, v in counts.items()},
            **{k: v for k, v in changes.items() if k not in ("row_changes", "phase_seconds")},
            "row_changes": md_table(
                [{"table": t, **d} for t, d in changes["row_changes"].items()],
                ["table", "inserted", "updated", "deleted", "unchanged"],
            ),
            "row_changes_json": dg.MetadataValue.json(changes["row_changes"]),
            "seconds": round(seconds, 3),
            "phase_seconds": dg.MetadataValue.json({"inputs": round(inputs_seconds, 3), **changes["phase_seconds"]}),
            "documents": len(inputs.doc_keys),
            **inputs.metadata(),
            "communities": comms.height,
            "reportable_communities": inputs.reports.height,
            "path": dg.MetadataValue.path(str(settings.paths.index_file)),
            "size_bytes": result.size,
            "embedding_model": embedder.model_id,
            **(llm_metadata(usage) if step.client is not None else {}),
            "type_pool": _type_pool_preview(settings.paths.index_file),
        }
    )


@dg.asset(
    key_prefix=KEY_PREFIX,
    deps=[
        graph_assets.resolved_graph,
        graph_assets.communities,
        graph_assets.community_reports,
        document_assets.chunks,
    ],
    group_name="index",
    kinds={"elasticsearch"},
    pool="llm",  # embeddings come from the endpoint when GRAPHRAG_EMBEDDING_MODEL names a model
    owners=OWNERS,
    tags={"stage": "index"},
    # no automation condition: publish_sensor (sensors.py) publishes it with search_index; its inputs
    # change only before a `communities` materialization, which that sensor follows (eager here
    # requested it a second time, beside publish_sensor's run)
    retry_policy=dg.RetryPolicy(max_retries=3, delay=10, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS),
    description="The search index in Elasticsearch (when GRAPHRAG_ES_URL is set), built from the same inputs and "
    "records as the DuckDB index (never from its file): only records whose content changed are written and "
    "vanished ones deleted; a full rebuild swaps the alias atomically.",
)
@stoppable
def elasticsearch_index(
    context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings, config: ElasticsearchConfig
) -> dg.MaterializeResult:
    cfg = EsConfig.from_env(settings.home)
    if cfg is None:
        return dg.MaterializeResult(
            metadata={"skipped": "GRAPHRAG_ES_URL is not set; the DuckDB index is the only index"}
        )
    started = time.perf_counter()
    inputs = _index_inputs(context, settings, "elasticsearch_index")
    comms = inputs.communities
    embedder, step = _embedder("elasticsearch_index", settings, llm)
    # no n-hop paths here: sync_records computes them where edges changed
    rows = build_index_rows(
        inputs.nodes,
        inputs.edges,
        comms,
        inputs.reports,
        inputs.chunks,
        nhop=False,
        sources=inputs.sources,
        hashes=inputs.hashes,
    )
    inputs.remember("elasticsearch_index")
    inputs_seconds = time.perf_counter() - started
    context.log.info(f"publishing {sum(rows.counts().values())} records to {cfg.url} alias {cfg.alias}")
    try:
        with endpoint_down_fails_the_step(step, after=_LEFT_AS_IT_WAS):
            stats = sync_records(
                cfg,
                rows,
                embedder,
                {"method": settings.method, "documents": len(inputs.doc_keys), "communities": comms.height},
                settings.paths.index_dir / "elasticsearch",
                full_rebuild=config.full_rebuild,
                log=context.log.info,
            )
    except EsIndexError as exc:
        raise dg.Failure(description=str(exc), metadata={"url": cfg.url, "alias": cfg.alias}) from None
    usage = step.record()
    context.log.info(
        f"{stats.path} ({stats.reason}) {stats.index}: {stats.written} written, "
        f"{stats.deleted} deleted, {stats.unchanged} unchanged in {stats.seconds:.1f}s"
    )
    return dg.MaterializeResult(
        metadata={
            **stats.to_metadata(),
            "url": cfg.url,
            "alias": cfg.alias,
            "records": stats.written + stats.unchanged,
            **inputs.metadata(),
            "seconds": round(time.perf_counter() - started, 2),
            "inputs_seconds": round(inputs_seconds, 3),
            "embedding_model": embedder.model_id,
            **(llm_metadata(usage) if step.client is not None else {}),
        }
    )
