"""Asset checks: invariants of the graph and of the published index."""

import dagster as dg
import polars as pl

# the modules, not their assets: the defs-folder loader registers each asset once, from its own file
from graphrag_pipeline.defs import graph_assets, index_assets
from graphrag_pipeline.defs.partitions import asset_key, document_keys
from graphrag_pipeline.defs.resources import PipelineSettings
from graphrag_pipeline.index.duckdb_writer import check_index_file
from graphrag_pipeline.storage.files import VERDICTS

GRAPH_CHECK = (
    "Unique nodes; every edge joins two existing, distinct nodes once; not empty while an extracted document has "
    "entities."
)


def _graph_problems(nodes: pl.DataFrame, edges: pl.DataFrame) -> list[str]:
    problems = []
    if nodes["key"].n_unique() != nodes.height:
        problems.append("duplicate node keys")
    keys = nodes.select("key").unique()
    dangling = (
        edges.join(keys, left_on="source_key", right_on="key", how="semi")
        .join(keys, left_on="target_key", right_on="key", how="semi")
        .height
    )
    dangling = edges.height - dangling
    if dangling:
        problems.append(f"{dangling} edges point to missing nodes")
    loops = edges.filter(pl.col("source_key") == pl.col("target_key")).height
    if loops:
        problems.append(f"{loops} self-loops")
    unordered = edges.filter(pl.col("source_key") > pl.col("target_key")).height
    if unordered:
        problems.append(f"{unordered} edges not stored in canonical order")
    dup = edges.height - edges.select("source_key", "target_key").unique().height
    if dup:
        problems.append(f"{dup} duplicate edges")
    return problems


def _empty_graph_problems(instance, settings: PipelineSettings) -> list[str]:
    """Why an empty graph is wrong: an extracted document has entity mentions, or its subgraph
    files are gone (then nobody can tell it had none). Looked at only when the graph is empty, and
    only until the first such document."""
    store = settings.store()
    extracted = instance.get_materialized_partitions(asset_key("doc_subgraph"))
    for key in document_keys(instance):
        if key not in extracted:
            continue
        try:
            info = store.subgraph_info(key)
        except (OSError, ValueError) as exc:  # a damaged info file
            return [f"the graph is empty, and the subgraph of document {key} cannot be read ({exc})"]
        if info is None:
            return [f"the graph is empty, and the subgraph files of extracted document {key} are missing"]
        if int(info.get("entities") or 0) > 0:
            return [f"the graph is empty, but extracted document {key} has {info['entities']} entity mentions"]
    return []


def _graph_check(name: str, settings: PipelineSettings, instance=None) -> dg.AssetCheckResult:
    store = settings.store()
    # the same tables (the resolved graph's are most often hard links of the knowledge graph's): the
    # same verdict (the key leaves out the graphs' manifests, two files naming the same tables)
    tables = [f for f in store.graph_files(name) if f.suffix == ".parquet"]
    key = VERDICTS.key("graph", VERDICTS.identities(tables)) if tables else None
    found = VERDICTS.get(key)
    if found is None:
        nodes, edges = store.read_graph(name, ["key"], ["source_key", "target_key"])
        found = (_graph_problems(nodes, edges), nodes.height, edges.height)
        VERDICTS.put(key, found)
    problems, n_nodes, n_edges = list(found[0]), found[1], found[2]
    if n_nodes == 0 and instance is not None:
        problems += _empty_graph_problems(instance, settings)
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"problems": "; ".join(problems) or "none", "nodes": n_nodes, "edges": n_edges},
    )


@dg.asset_check(
    asset=graph_assets.knowledge_graph,
    description=GRAPH_CHECK,
)
def knowledge_graph_is_consistent(
    context: dg.AssetCheckExecutionContext, settings: PipelineSettings
) -> dg.AssetCheckResult:
    return _graph_check("knowledge_graph", settings, context.instance)


@dg.asset_check(
    asset=graph_assets.resolved_graph,
    description=GRAPH_CHECK,
)
def resolved_graph_is_consistent(
    context: dg.AssetCheckExecutionContext, settings: PipelineSettings
) -> dg.AssetCheckResult:
    return _graph_check("resolved_graph", settings, context.instance)


@dg.asset_check(
    asset=graph_assets.communities,
    description="Every community member is an entity of the resolved graph; parents exist.",
)
def communities_reference_entities(settings: PipelineSettings) -> dg.AssetCheckResult:
    store = settings.store()
    nodes = store.read_graph_nodes("resolved_graph", ["key"])
    df = store.read_communities()
    unknown = set(
        df.select(pl.col("nodes").explode().alias("key"))
        .drop_nulls()
        .join(nodes.select("key"), on="key", how="anti")["key"]
        .to_list()
    )
    ids = set(df["community_id"].to_list())
    orphans = [p for p in df["parent_id"].drop_nulls().to_list() if p not in ids]
    return dg.AssetCheckResult(
        passed=not unknown and not orphans,
        metadata={"unknown_members": len(unknown), "missing_parents": len(orphans), "communities": df.height},
    )


@dg.asset_check(
    asset=index_assets.search_index,
    blocking=True,
    description="The index holds every entity and relation of the resolved graph, a report per reportable community "
    "(2+ members), no stale or duplicate keys, and vectors on every row (the verification a new file passes "
    "before it is published). Blocking; Elasticsearch does not depend on it: it is built from the same inputs "
    "and refuses a missing report itself.",
)
def search_index_is_complete(settings: PipelineSettings) -> dg.AssetCheckResult:
    store = settings.store()
    # the verdict of the publish that wrote this index from these very files, when this process made it
    files = [settings.paths.index_file, *index_assets.index_check_files(store)]
    verdict = VERDICTS.get(VERDICTS.key("index", VERDICTS.identities(files)))
    if verdict is None:
        nodes, edges = store.read_graph("resolved_graph", ["key"], ["source_key", "target_key"])
        # the same verification search_index runs on every index before publishing it
        verdict = check_index_file(settings.paths.index_file, nodes, edges, store.read_communities())
    return dg.AssetCheckResult(passed=verdict.passed, metadata=verdict.to_metadata())
