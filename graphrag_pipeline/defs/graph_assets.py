"""Whole-corpus assets: knowledge_graph -> resolved_graph -> communities -> community_reports.

Each body loads its inputs from the store, calls one core function, stores the result and
describes it in metadata. Declarative automation carries changes downstream.
"""

import time

import dagster as dg
import polars as pl

from graphrag_pipeline.defs import (
    document_assets,
)  # the module, not its assets: each asset is loaded once, from its own file
from graphrag_pipeline.defs.llm_step import StepLLM, endpoint_down_fails_the_step, llm_metadata
from graphrag_pipeline.defs.metadata import OWNERS, add_partition_metadata, md_table, table_schema, versioned
from graphrag_pipeline.defs.partitions import (
    KEY_PREFIX,
    NotMaterialized,
    asset_key,
    change_partitions,
    community_partitions,
    document_keys,
    missing_inputs_failure,
)
from graphrag_pipeline.defs.resources import LLMSettings, PipelineSettings
from graphrag_pipeline.defs.stopping import stoppable
from graphrag_pipeline.graph.communities import HISTORY_GENERATIONS, update_communities
from graphrag_pipeline.graph.mentions import update_merged_graph
from graphrag_pipeline.graph.resolution import LLMJudge, merge_entities, plan_resolution
from graphrag_pipeline.graph.summaries import summarise_long_descriptions
from graphrag_pipeline.reports.schedule import report_partition_changes, reportable_ids, write_reports
from graphrag_pipeline.storage.files import DamagedFileError
from graphrag_pipeline.storage.store import MissingInputError

EAGER = dg.AutomationCondition.eager()


def _top_entities(nodes: pl.DataFrame, n: int = 15) -> dg.MarkdownMetadataValue:
    rows = (
        # the shown columns only: sorting every column gathered the nodes' lists of chunk and document ids
        # (a hub names tens of thousands), 0.25 s at 50,000 documents
        nodes.select("name", "type", "degree", "pagerank", "description")
        .top_k(n, by="pagerank")
        .sort("pagerank", descending=True, maintain_order=True)
        # a hub's description joins thousands of fragments: the preview shows its start
        .with_columns(pl.col("description").str.slice(0, 300))
        .to_dicts()
    )
    for r in rows:
        r["pagerank"] = f"{r['pagerank']:.4f}"
    return md_table(rows, ["name", "type", "degree", "pagerank", "description"], limit=n)


@dg.asset(
    key_prefix=KEY_PREFIX,
    deps=[document_assets.doc_subgraph],
    group_name="graph",
    kinds={"polars", "networkx"},
    automation_condition=EAGER,
    pool="llm",  # long descriptions are summarised by the LLM (methods other than fast)
    owners=OWNERS,
    tags={"stage": "graph", "llm": "summaries"},
    description="All document subgraphs merged: one node per entity name, relation weights summed, PageRank.",
)
@stoppable
def knowledge_graph(
    context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings
) -> dg.MaterializeResult:
    store = settings.store()
    keys = document_keys(context.instance)
    # a document not extracted yet may have no subgraph; every extracted one must have its files
    # (which documents are not extracted is asked of the instance only when files are missing)
    pending = NotMaterialized(context.instance, "doc_subgraph", keys)
    try:
        merged = update_merged_graph(store, keys, optional=pending)
    except MissingInputError as exc:
        raise missing_inputs_failure(exc, "knowledge_graph") from None
    step = StepLLM("knowledge_graph", settings, llm, used=settings.method != "fast")
    with endpoint_down_fails_the_step(step):
        nodes, edges, summary = summarise_long_descriptions(
            merged.nodes, merged.edges, step.client, language=llm.language
        )
    usage = step.record()
    if summary.failed:
        context.log.warning(
            f"{summary.failed} long descriptions could not be summarised; their fragments are kept joined"
        )
    # a graph no summary changed is linked to the merge's files instead of being encoded again
    unchanged = nodes is merged.nodes and edges is merged.edges
    store.write_graph("knowledge_graph", nodes, edges, files=merged.files if unchanged else None)
    removed = store.sweep_orphans(set(keys))  # None: the same documents as the last sweep's
    if merged.dropped_relations:
        # relations naming an entity the extraction did not list: ordinary, counted in the metadata
        context.log.info(f"ignored {merged.dropped_relations} relations due to missing entities")
    how = (
        "from scratch"
        if merged.full
        else (
            f"{merged.documents_changed} changed and {merged.documents_removed} removed "
            f"documents, {merged.affected_keys} entities merged again"
        )
    )
    context.log.info(f"merged {len(keys)} documents into {nodes.height} entities and {edges.height} relations ({how})")
    return dg.MaterializeResult(
        metadata={
            "documents": len(keys),
            # documents with no subgraph file at all (every one of them is not extracted yet: an
            # extracted document without its files fails the merge)
            "documents_not_extracted": merged.documents_without_files,
            "entities": nodes.height,
            "relations": edges.height,
            "dagster/row_count": nodes.height,
            "dagster/column_schema": table_schema(nodes),
            "documents_changed": merged.documents_changed,
            "documents_removed": merged.documents_removed,
            "entities_merged_again": merged.affected_keys if not merged.full else nodes.height,
            "merged_from_scratch": merged.full,
            "graph_slices_written": f"{merged.slices_written} of {len(merged.files or {})}",
            "dropped_relations": merged.dropped_relations,
            "orphan_files_removed": removed or 0,
            "orphan_sweep": "skipped: the same documents as the last sweep, less than a day ago"
            if removed is None
            else "every document's files listed",
            "summarised_descriptions": summary.summarised_nodes + summary.summarised_edges,
            **llm_metadata(usage),
            "top_entities": _top_entities(nodes),
        }
    )


@dg.asset(
    key_prefix=KEY_PREFIX,
    deps=[knowledge_graph],
    group_name="graph",
    kinds={"polars", "networkx"},
    automation_condition=EAGER,
    pool="llm",  # candidate pairs are judged by the LLM (GRAPHRAG_LLM_RESOLUTION)
    owners=OWNERS,
    tags={"stage": "graph", "llm": "resolution"},
    description="Entity resolution: pre-filtered same-type pairs involving new entities, judged and merged.",
)
@stoppable
def resolved_graph(
    context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings
) -> dg.MaterializeResult:
    store = settings.store()
    nodes = store.read_graph_nodes("knowledge_graph")
    try:
        state = store.read_state("resolution", {})
        state_problem = None
    except DamagedFileError as exc:  # the verdicts are a cache: without them every entity is judged again
        state, state_problem = {}, str(exc)
        context.log.warning(f"{exc}: resolving every entity again")
    step = StepLLM("resolved_graph", settings, llm, used=settings.method != "fast" and llm.use_for_resolution)
    client = step.client
    judge = LLMJudge(client) if client else None
    judge_id = f"llm:{client.model}" if client else "offline"
    with endpoint_down_fails_the_step(step):
        plan = plan_resolution(nodes, state, judge=judge, judge_id=judge_id)
    usage = step.record()
    if plan.pairs:
        _, edges = store.read_graph("knowledge_graph", node_columns=["key"])
        out_nodes, edges, mapping = merge_entities(nodes, edges, plan.pairs)
        store.write_graph("resolved_graph", out_nodes, edges)
        relations = edges.height
    else:  # nothing to merge: the knowledge graph is the resolved graph, copied byte for byte
        out_nodes, mapping = nodes, {}
        store.copy_graph("knowledge_graph", "resolved_graph")  # checks the files' ends before copying
        relations = store.graph_edge_count("resolved_graph")
    store.write_state("resolution", plan.state)
    context.log.info(
        f"resolved {plan.candidates} candidate pairs, {len(mapping)} merged "
        f"({len(plan.changed)} new or changed entities)"
    )
    merges = [{"merged": k, "into": v} for k, v in sorted(mapping.items())]
    return dg.MaterializeResult(
        metadata={
            "entities": out_nodes.height,
            "relations": relations,
            "dagster/row_count": out_nodes.height,
            "dagster/column_schema": table_schema(out_nodes),
            "new_entities": len(plan.changed),
            "candidate_pairs": plan.candidates,
            "merged_pairs": len(mapping),
            "judge": judge_id if client else "offline (normalised name equality)",
            "unparsed_answers": judge.unparsed if judge else 0,
            **llm_metadata(usage),
            "merges": md_table(merges, ["merged", "into"]),
            "top_entities": _top_entities(out_nodes),
            **({"state_repaired": state_problem} if state_problem else {}),
        }
    )


class CommunitiesConfig(dg.Config):
    full_recluster: bool = False  # cluster from scratch even when the kept partition is good enough


@dg.asset(
    key_prefix=KEY_PREFIX,
    deps=[resolved_graph],
    group_name="graph",
    kinds={"polars"},
    automation_condition=EAGER,
    owners=OWNERS,
    tags={"stage": "graph"},
    description="Hierarchical Leiden communities (all levels), kept stable across builds: only the changed "
    "frontier of the graph moves; one `communities` partition per reportable community.",
)
@stoppable
def communities(
    context: dg.AssetExecutionContext, settings: PipelineSettings, config: CommunitiesConfig
) -> dg.MaterializeResult:
    store = settings.store()
    # the columns clustering and report fingerprints use (not the lists of ids and fragments)
    nodes, edges = store.read_graph(
        "resolved_graph", ["key", "name", "type", "description"], ["source_key", "target_key", "weight", "description"]
    )
    previous = store.read_community_state()
    instance = context.instance
    written = instance.get_materialized_partitions(asset_key("community_reports"))
    present = store.stored_report_ids()
    lost = {k for k in written if k not in present}  # counted as written, but the file is gone
    started = time.perf_counter()
    update = update_communities(
        nodes,
        edges,
        previous,
        max_cluster_size=settings.max_cluster_size,
        use_lcc=settings.use_lcc,
        full_recluster=config.full_recluster,
        memo=store.recall_partition,
        lost_ids=lost,
    )
    elapsed = time.perf_counter() - started
    df = update.communities
    store.write_community_state(update.state)
    if update.memo:
        # as many clustered graphs as clustering changes whose ids are kept: an edit undone after
        # up to that many other edits finds both its partition and its communities' ids and reports
        store.remember_partition(*update.memo, keep=HISTORY_GENERATIONS)
    m = update.metrics
    context.log.info(
        f"{update.message} in {elapsed:.2f}s: {m.get('communities_changed', 0)} new or changed, "
        f"{m.get('communities_kept', 0)} kept ({m.get('source', '')})"
    )
    if m.get("reclustered") and previous is not None:
        context.log.warning(f"re-clustered from scratch: {m.get('recluster_reason')}")

    # one report partition per community of 2+ nodes, keyed by its id
    wanted = reportable_ids(df)
    new, gone = report_partition_changes(wanted, instance.get_dynamic_partitions(community_partitions.name), written)
    change_partitions(instance, community_partitions, new, gone)
    deleted = store.remove_reports_except(update.retained_ids)
    lost_now = lost & set(previous.table["community_id"].to_list()) if previous is not None else set()
    if lost_now:
        context.log.warning(
            f"{len(lost_now)} reports counted as written were missing (e.g. {sorted(lost_now)[0]}); "
            "their communities get new report partitions"
        )
    levels = (
        df.group_by("level")
        .agg(pl.len().alias("communities"), pl.col("size").max().alias("largest"))
        .sort("level")
        .to_dicts()
    )
    fresh = m.get("modularity_fresh") or 0.0
    return dg.MaterializeResult(
        metadata={
            "communities": df.height,
            "dagster/row_count": df.height,
            "dagster/column_schema": table_schema(df),
            "reportable": len(wanted),
            "communities_changed": m.get("communities_changed", 0),
            "communities_kept": m.get("communities_kept", 0),
            "communities_removed": m.get("communities_removed", 0),
            "modularity_kept": dg.MetadataValue.float(float(m.get("modularity_kept", 0.0))),
            "modularity_fresh": dg.MetadataValue.float(float(fresh)),
            "modularity_ratio": dg.MetadataValue.float(
                round(m.get("modularity_kept", 0.0) / fresh, 4) if fresh else 1.0
            ),
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
            "preview": md_table(
                df.head(20).with_columns(pl.col("nodes").list.head(6).list.join(", ")).to_dicts(),
                ["community_id", "level", "size", "weight", "nodes"],
            ),
        }
    )


@dg.asset(
    key_prefix=KEY_PREFIX,
    deps=[communities],
    partitions_def=community_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="graph",
    kinds={"json"},
    pool="llm",
    retry_policy=dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS),
    # no automation condition: publish_sensor (sensors.py) writes the missing partitions and the index in one run
    owners=OWNERS,
    tags={"stage": "reports", "llm": "reports"},
    description="One report per community, regenerated only when the community's content (fingerprint) changes.",
)
@stoppable
def community_reports(
    context: dg.AssetExecutionContext, settings: PipelineSettings, llm: LLMSettings
) -> dg.MaterializeResult:
    step = StepLLM("community_reports", settings, llm, used=settings.method != "fast" and llm.use_for_reports)
    with endpoint_down_fails_the_step(step):
        result = write_reports(
            settings.store(), context.partition_keys, step.client, language=llm.language, log=context.log
        )
    usage = step.record()
    rows = [
        {"community": k, "title": r.title, "rating": r.rating, "size": result.sizes[k], "extractive": r.extractive}
        for k, r in result.written.items()
    ]
    add_partition_metadata(context, _report_partition_metadata(settings.store(), result))
    return versioned(
        context,
        {
            "reports": len(result.written),
            "reused": len(result.reused),
            "superseded": len(result.superseded),
            "extractive": result.extractive,
            "fallbacks": len(result.fallbacks),
            **llm_metadata(usage),
            "preview": md_table(rows, ["community", "title", "rating", "size", "extractive"]),
        },
    )


def _report_partition_metadata(store, result) -> dict[str, dict]:
    """What each community partition's materialization says about its own community: the report's
    title, level, size (members), rating, who wrote it and its summary; `report_status` says
    whether it was written now, kept from an earlier run, or no longer names a community."""
    out = {}
    reports = [(k, r, "written", result.sizes.get(k)) for k, r in result.written.items()]
    reports += [(k, store.read_report(k), "kept", None) for k in result.reused]
    for key, report, status, size in reports:
        if report is None:
            continue
        out[key] = {
            "report_status": status,
            "title": report.title,
            "level": report.level,
            "size": size if size is not None else len(report.entities),
            "rating": dg.MetadataValue.float(float(report.rating)),
            "generator": report.generator or ("extractive" if report.extractive else "llm"),
            "summary": dg.MetadataValue.md(report.summary[:600] + ("\u2026" if len(report.summary) > 600 else "")),
        }
    for key in result.superseded:
        out[key] = {"report_status": "superseded", "title": "(no longer a community: superseded by a newer build)"}
    return out
