"""Whole-corpus assets: knowledge_graph -> resolved_graph -> communities -> community_reports.

Each body loads its inputs from the store, calls one core function, stores the result and
describes it in metadata. Declarative automation carries changes downstream.
"""


import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import dagster as dg
import polars as pl

from graphrag_pipeline.graph.communities import update_communities
from graphrag_pipeline.llm.client import LLMCircuitOpen
from graphrag_pipeline.graph.mentions import update_merged_graph
from graphrag_pipeline.reports.offline import CommunityReport, extractive_report
from graphrag_pipeline.reports.llm import fits_budget, llm_report, report_generator
from graphrag_pipeline.graph.resolution import LLMJudge, resolve_incremental
from graphrag_pipeline.graph.summaries import summarise_long_descriptions
from graphrag_pipeline.llm.usage import LLMUsage, UsageLedger
from graphrag_pipeline.defs import document_assets  # the module, not its assets: each asset is loaded once, from its own file
from graphrag_pipeline.defs.metadata import md_table
from graphrag_pipeline.defs.partitions import community_partitions, document_keys
from graphrag_pipeline.defs.resources import LLMSettings, PipelineSettings
from graphrag_pipeline.defs.stopping import stoppable

EAGER = dg.AutomationCondition.eager()


@contextmanager
def endpoint_down_fails_the_step():
    """A dead LLM endpoint (its circuit breaker open) fails the step without Dagster's retries: each
    retry would pay the breaker's calls again. The CLI sees `endpoint_down` and stops the build."""
    try:
        yield
    except LLMCircuitOpen as exc:
        raise dg.Failure(description=str(exc), metadata={"endpoint_down": True}, allow_retries=False) from None


def _top_entities(nodes: pl.DataFrame, n: int = 15) -> dg.MarkdownMetadataValue:
    rows = nodes.sort("pagerank", descending=True).head(n).select("name", "type", "degree", "pagerank", "description").to_dicts()
    for r in rows:
        r["pagerank"] = f"{r['pagerank']:.4f}"
    return md_table(rows, ["name", "type", "degree", "pagerank", "description"], limit=n)


@dg.asset(
    deps=[document_assets.doc_subgraph],
    group_name="graph",
    kinds={"polars", "networkx"},
    automation_condition=EAGER,
    description="All document subgraphs merged: one node per entity name, relation weights summed, PageRank.",
)
@stoppable
def knowledge_graph(context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings) -> dg.MaterializeResult:
    store = settings.store()
    keys = document_keys(context.instance)
    merged = update_merged_graph(store, keys)
    client = llm.client(settings.paths.cache_db) if settings.method != "fast" else None
    with endpoint_down_fails_the_step():
        nodes, edges, summary = summarise_long_descriptions(merged.nodes, merged.edges, client, language=llm.language)
    usage = client.usage_snapshot() if client else LLMUsage()
    UsageLedger(settings.paths.cache_db).record("knowledge_graph", usage)
    if summary.failed:
        context.log.warning(f"{summary.failed} long descriptions could not be summarised; their fragments are kept joined")
    store.write_graph("knowledge_graph", nodes, edges)
    removed = store.remove_orphans(set(keys))
    if merged.dropped_relations:
        context.log.warning(f"ignored {merged.dropped_relations} relations due to missing entities")
    how = "from scratch" if merged.full else (f"{merged.documents_changed} changed and {merged.documents_removed} removed "
                                              f"documents, {merged.affected_keys} entities merged again")
    context.log.info(f"merged {len(keys)} documents into {nodes.height} entities and {edges.height} relations ({how})")
    return dg.MaterializeResult(metadata={
        "documents": len(keys),
        "entities": nodes.height,
        "relations": edges.height,
        "dagster/row_count": nodes.height,
        "documents_changed": merged.documents_changed,
        "documents_removed": merged.documents_removed,
        "entities_merged_again": merged.affected_keys if not merged.full else nodes.height,
        "merged_from_scratch": merged.full,
        "dropped_relations": merged.dropped_relations,
        "orphan_files_removed": removed,
        "summarised_descriptions": summary.summarised_nodes + summary.summarised_edges,
        **_llm_metadata(usage),
        "top_entities": _top_entities(nodes),
    })


@dg.asset(
    deps=[knowledge_graph],
    group_name="graph",
    kinds={"polars", "networkx"},
    automation_condition=EAGER,
    description="Entity resolution: pre-filtered same-type pairs involving new entities, judged and merged.",
)
@stoppable
def resolved_graph(context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings) -> dg.MaterializeResult:
    store = settings.store()
    nodes, edges = store.read_graph("knowledge_graph")
    state = store.read_state("resolution", {})
    client = llm.client(settings.paths.cache_db) if settings.method != "fast" and llm.use_for_resolution else None
    judge = LLMJudge(client) if client else None
    judge_id = f"llm:{client.model}" if client else "offline"
    with endpoint_down_fails_the_step():
        result = resolve_incremental(nodes, edges, state, judge=judge, judge_id=judge_id)
    usage = client.usage_snapshot() if client else LLMUsage()
    UsageLedger(settings.paths.cache_db).record("resolved_graph", usage)
    store.write_graph("resolved_graph", result.nodes, result.edges)
    store.write_state("resolution", result.state)
    context.log.info(f"resolved {result.candidates} candidate pairs, {result.merged} merged ({len(result.changed)} new entities)")
    merges = [{"merged": k, "into": v} for k, v in sorted(result.mapping.items())]
    return dg.MaterializeResult(metadata={
        "entities": result.nodes.height,
        "relations": result.edges.height,
        "new_entities": len(result.changed),
        "candidate_pairs": result.candidates,
        "merged_pairs": result.merged,
        "judge": judge_id if client else "offline (normalised name equality)",
        "unparsed_answers": judge.unparsed if judge else 0,
        **_llm_metadata(usage),
        "merges": md_table(merges, ["merged", "into"]),
        "top_entities": _top_entities(result.nodes),
    })


class CommunitiesConfig(dg.Config):
    full_recluster: bool = False  # cluster from scratch even when the kept partition is good enough


@dg.asset(
    deps=[resolved_graph],
    group_name="graph",
    kinds={"polars"},
    automation_condition=EAGER,
    description="Hierarchical Leiden communities (all levels), kept stable across builds: only the changed "
                "frontier of the graph moves; one `communities` partition per reportable community.",
)
@stoppable
def communities(context: dg.AssetExecutionContext, settings: PipelineSettings, config: CommunitiesConfig) -> dg.MaterializeResult:
    store = settings.store()
    nodes, edges = store.read_graph("resolved_graph")
    previous = store.read_community_state()
    instance = context.instance
    written = instance.get_materialized_partitions(dg.AssetKey("community_reports"))
    lost = {k for k in written if not store.has_report(k)}  # counted as written, but the file is gone
    started = time.perf_counter()
    update = update_communities(nodes, edges, previous, max_cluster_size=settings.max_cluster_size, use_lcc=settings.use_lcc,
                                full_recluster=config.full_recluster, memo=store.recall_partition, lost_ids=lost)
    elapsed = time.perf_counter() - started
    df = update.communities
    store.write_community_state(update.state)
    if update.memo:
        store.remember_partition(*update.memo)
    m = update.metrics
    context.log.info(f"{update.message} in {elapsed:.2f}s: {m.get('communities_changed', 0)} new or changed, "
                     f"{m.get('communities_kept', 0)} kept ({m.get('source', '')})")
    if m.get("reclustered") and previous is not None:
        context.log.warning(f"re-clustered from scratch: {m.get('recluster_reason')}")

    # one report partition per community of 2+ nodes, keyed by its id
    wanted = df.filter(pl.col("size") >= 2)["community_id"].to_list()
    existing = set(instance.get_dynamic_partitions(community_partitions.name))
    # returning ids (their reports are stored) first, then the ones needing a report: those end up
    # contiguous at the end of the partition order, one partition range, so one run writes them
    new = sorted((k for k in wanted if k not in existing), key=lambda k: k not in written)
    gone = sorted(existing - set(wanted))
    if new:
        instance.add_dynamic_partitions(community_partitions.name, new)
    for key in gone:
        instance.delete_dynamic_partition(community_partitions.name, key)
    deleted = store.remove_reports_except(update.retained_ids)
    lost_now = lost & set(previous.table["community_id"].to_list()) if previous is not None else set()
    if lost_now:
        context.log.warning(f"{len(lost_now)} reports counted as written were missing (e.g. {sorted(lost_now)[0]}); "
                            "their communities get new report partitions")
    levels = df.group_by("level").agg(pl.len().alias("communities"), pl.col("size").max().alias("largest")).sort("level").to_dicts()
    fresh = m.get("modularity_fresh") or 0.0
    return dg.MaterializeResult(metadata={
        "communities": df.height,
        "dagster/row_count": df.height,
        "reportable": len(wanted),
        "communities_changed": m.get("communities_changed", 0),
        "communities_kept": m.get("communities_kept", 0),
        "communities_removed": m.get("communities_removed", 0),
        "modularity_kept": dg.MetadataValue.float(float(m.get("modularity_kept", 0.0))),
        "modularity_fresh": dg.MetadataValue.float(float(fresh)),
        "modularity_ratio": dg.MetadataValue.float(round(m.get("modularity_kept", 0.0) / fresh, 4) if fresh else 1.0),
        "reclustered": bool(m.get("reclustered")),
        "recluster_reason": m.get("recluster_reason") or "not re-clustered: only the changed frontier moved",
        "clustering": m.get("source", ""),
        "frontier_nodes": m.get("frontier_nodes", 0),
        "moved_nodes": m.get("moved_nodes", 0),
        "new_report_partitions": len(new),
        "removed_report_partitions": len(gone),
        "reports_lost": len(lost_now),
        "reports_deleted": deleted,
        "seconds": round(elapsed, 2),
        "message": update.message,
        "levels": md_table(levels, ["level", "communities", "largest"]),
        "preview": md_table(df.head(20).with_columns(pl.col("nodes").list.head(6).list.join(", ")).to_dicts(),
                            ["community_id", "level", "size", "weight", "nodes"]),
    })


@dg.asset(
    deps=[communities],
    partitions_def=community_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="graph",
    kinds={"json"},
    pool="llm",
    retry_policy=dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS),
    automation_condition=dg.AutomationCondition.on_missing() & ~dg.AutomationCondition.any_deps_in_progress(),
    description="One report per community, regenerated only when the community's content (fingerprint) changes.",
)
@stoppable
def community_reports(context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings) -> dg.MaterializeResult:
    store = settings.store()
    nodes, edges = store.read_graph("resolved_graph")
    table = {r["community_id"]: r for r in store.read_communities().to_dicts()}
    children: dict[str, list[str]] = {}
    for row in table.values():
        if row["parent_id"]:
            children.setdefault(row["parent_id"], []).append(row["community_id"])
    client = llm.client(settings.paths.cache_db) if settings.method != "fast" and llm.use_for_reports else None
    missing = [k for k in context.partition_keys if k not in table]
    # a community id names its content: a report already stored for it by the same writer (an id that
    # came back after an edit was undone, or a partition run again) is kept, not paid for twice
    generator = report_generator(client)
    reused = [k for k in context.partition_keys if k in table and (r := store.read_report(k)) and r.generator == generator]
    keys = [k for k in context.partition_keys if k in table and k not in set(reused)]
    written: dict[str, CommunityReport] = {}
    fallbacks: list[dict] = []

    def sub_reports(cid: str) -> dict[str, CommunityReport]:
        found = {}
        for child in children.get(cid, []):
            rep = written.get(child) or store.read_report(child)
            if rep is not None:
                found[child] = rep
        return found

    def make(cid: str):
        community = table[cid]
        if client is None:
            return extractive_report(community, nodes, edges), None
        outcome = llm_report(client, community, nodes, edges, language=llm.language,
                             sub_reports=sub_reports(cid), children=children.get(cid, []))
        return outcome.report, (outcome.error or "unparsable answer") if outcome.fallback else None

    # Every community whose tables fit the prompt is written at once (maximum concurrency); the
    # large ones follow, deepest level first, so they can use the reports of their sub-communities.
    large = [k for k in keys if client is not None and children.get(k) and not fits_budget(table[k], nodes, edges)]
    waves = [[k for k in keys if k not in set(large)]]
    for level in sorted({table[k]["level"] for k in large}, reverse=True):
        waves.append([k for k in large if table[k]["level"] == level])
    pool = ThreadPoolExecutor(max_workers=client.max_concurrent if client else 1, thread_name_prefix="report")
    try:
        for wave in waves:
            for cid, (report, fallback) in zip(wave, pool.map(make, wave)):
                store.write_report(report)
                written[cid] = report
                if fallback:
                    fallbacks.append({"community": cid, "reason": fallback})
                    context.log.warning(f"report of {cid}: LLM answer unusable ({fallback}); extractive report written instead")
            context.log.info(f"reports: {len(written)}/{len(keys)} written")
    except BaseException as exc:
        # run terminated or endpoint failed: stop all LLM work now; finished reports stay stored
        if client is not None:
            client.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(exc, LLMCircuitOpen):
            with endpoint_down_fails_the_step():
                raise
        raise
    pool.shutdown()
    if missing:
        context.log.warning(f"{len(missing)} report partitions no longer match a community (superseded by a newer build)")
    if reused:
        context.log.info(f"{len(reused)} reports were already stored for their community ids and are kept")
    usage = client.usage_snapshot() if client else LLMUsage()
    UsageLedger(settings.paths.cache_db).record("community_reports", usage)
    rows = [{"community": k, "title": r.title, "rating": r.rating, "size": table[k]["size"], "extractive": r.extractive}
            for k, r in written.items()]
    return dg.MaterializeResult(metadata={
        "reports": len(written),
        "reused": len(reused),
        "superseded": len(missing),
        "extractive": sum(1 for r in written.values() if r.extractive),
        "fallbacks": len(fallbacks),
        **_llm_metadata(usage),
        "preview": md_table(rows, ["community", "title", "rating", "size", "extractive"]),
    })


def _llm_metadata(usage: LLMUsage) -> dict:
    return {"llm_calls": usage.calls, "llm_cache_hits": usage.cache_hits,
            "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
