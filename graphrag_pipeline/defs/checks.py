"""Asset checks: invariants of the graph and of the published index."""


import duckdb
import dagster as dg
import polars as pl

from .graph_assets import communities, knowledge_graph, resolved_graph
from .index_assets import search_index
from .resources import PipelineSettings


def _graph_problems(nodes: pl.DataFrame, edges: pl.DataFrame) -> list[str]:
    problems = []
    if nodes["key"].n_unique() != nodes.height:
        problems.append("duplicate node keys")
    keys = set(nodes["key"].to_list())
    dangling = sum(1 for s, t in zip(edges["source_key"], edges["target_key"]) if s not in keys or t not in keys)
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


def _graph_check(name: str, settings: PipelineSettings) -> dg.AssetCheckResult:
    nodes, edges = settings.store().read_graph(name)
    problems = _graph_problems(nodes, edges)
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": "; ".join(problems) or "none",
                                                               "nodes": nodes.height, "edges": edges.height})


@dg.asset_check(asset=knowledge_graph, description="Unique nodes; every edge joins two existing, distinct nodes once.")
def knowledge_graph_is_consistent(settings: PipelineSettings) -> dg.AssetCheckResult:
    return _graph_check("knowledge_graph", settings)


@dg.asset_check(asset=resolved_graph, description="Unique nodes; every edge joins two existing, distinct nodes once.")
def resolved_graph_is_consistent(settings: PipelineSettings) -> dg.AssetCheckResult:
    return _graph_check("resolved_graph", settings)


@dg.asset_check(asset=communities, description="Every community member is an entity of the resolved graph; parents exist.")
def communities_reference_entities(settings: PipelineSettings) -> dg.AssetCheckResult:
    store = settings.store()
    nodes, _ = store.read_graph("resolved_graph")
    df = store.read_communities()
    keys = set(nodes["key"].to_list())
    unknown = {k for members in df["nodes"].to_list() for k in members if k not in keys}
    ids = set(df["community_id"].to_list())
    orphans = [p for p in df["parent_id"].drop_nulls().to_list() if p not in ids]
    return dg.AssetCheckResult(
        passed=not unknown and not orphans,
        metadata={"unknown_members": len(unknown), "missing_parents": len(orphans), "communities": df.height},
    )


@dg.asset_check(asset=search_index, description="The index holds every entity and relation of the resolved graph, a report per reportable community, and vectors for all.")
def search_index_is_complete(settings: PipelineSettings) -> dg.AssetCheckResult:
    store = settings.store()
    nodes, edges = store.read_graph("resolved_graph")
    reportable = store.read_communities().filter(pl.col("size") >= 2).height
    con = duckdb.connect(str(settings.paths.index_file), read_only=True)
    try:
        n_ent, n_rel, n_rep = (con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ("entities", "relations", "community_reports"))
        no_vec = con.execute("SELECT (SELECT count(*) FROM entities WHERE embedding IS NULL) + (SELECT count(*) FROM relations WHERE embedding IS NULL)").fetchall()[0][0]
    finally:
        con.close()
    passed = n_ent == nodes.height and n_rel == edges.height and n_rep == reportable and no_vec == 0
    return dg.AssetCheckResult(passed=passed, metadata={
        "entities": n_ent, "graph_entities": nodes.height, "relations": n_rel, "graph_relations": edges.height,
        "reports": n_rep, "reportable_communities": reportable, "rows_without_vector": no_vec,
    })
