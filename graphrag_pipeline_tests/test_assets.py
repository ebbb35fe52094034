"""The assets as Dagster runs them, without the CLI: `dg.materialize` with explicit resources on an
ephemeral instance, over a private GRAPHRAG_HOME and a copy of the bundled corpus (method fast)."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pytest

from graphrag_pipeline.defs import checks
from graphrag_pipeline.defs.checks import (
    communities_reference_entities,
    knowledge_graph_is_consistent,
    search_index_is_complete,
)
from graphrag_pipeline.defs.document_assets import chunks, doc_subgraph
from graphrag_pipeline.defs.graph_assets import communities, community_reports, knowledge_graph, resolved_graph
from graphrag_pipeline.defs.index_assets import elasticsearch_index, search_index
from graphrag_pipeline.defs.partitions import community_partitions, documents_partitions
from graphrag_pipeline.defs.resources import LLMSettings, PipelineSettings
from graphrag_pipeline.ingest.corpus_sync import range_tags
from graphrag_pipeline.ingest.documents import scan_corpus

DOC = "darwin_and_wallace.txt"


@pytest.fixture
def settings(home, corpus) -> PipelineSettings:
    return PipelineSettings(home=str(home), corpus_dir=str(corpus), requested_method="fast")


@pytest.fixture
def resources(settings) -> dict:
    return {"settings": settings, "llm": LLMSettings()}  # no OPENAI_* variables: no LLM client


@pytest.fixture
def dagster_instance(corpus):
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(documents_partitions.name, [f.key for f in scan_corpus(corpus)])
    return instance


def metadata(result: dg.ExecuteInProcessResult, asset) -> dict:
    [mat] = result.asset_materializations_for_node(asset.op.name)
    return {k: v.value for k, v in mat.metadata.items()}


def check_results(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {
        e.event_specific_data.check_name: e.event_specific_data.passed
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION
    }


def build_graph(instance, resources) -> dg.ExecuteInProcessResult:
    """Every document (one run over the whole partition range, as the CLI does), then the graph."""
    keys = instance.get_dynamic_partitions(documents_partitions.name)
    docs = dg.materialize([chunks, doc_subgraph], instance=instance, resources=resources, tags=range_tags(keys))
    assert docs.success
    graph = dg.materialize(
        [knowledge_graph, resolved_graph, communities, knowledge_graph_is_consistent, communities_reference_entities],
        instance=instance,
        resources=resources,
    )
    assert graph.success
    return graph


def test_chunks_and_doc_subgraph_of_one_document_partition(dagster_instance, resources, settings):
    result = dg.materialize([chunks, doc_subgraph], partition_key=DOC, instance=dagster_instance, resources=resources)
    assert result.success
    store = settings.store()
    rows = store.read_chunks(DOC)
    chunk_meta = metadata(result, chunks)
    assert chunk_meta["documents"] == 1 and chunk_meta["skipped"] == 0
    assert chunk_meta["chunks"] == rows.height > 0 and chunk_meta["tokens"] == sum(rows["tokens"])
    assert set(rows["doc_id"]) == {DOC} and "Darwin" in rows["text"][0]

    sub_meta = metadata(result, doc_subgraph)
    entities, relations = store.read_subgraphs([DOC])
    assert sub_meta["method"] == "fast" and sub_meta["failed_chunks"] == 0
    assert sub_meta["entity_mentions"] == entities.height > 0 and sub_meta["relation_mentions"] == relations.height
    assert any("Darwin" in name for name in entities["name"].to_list())
    # only this partition was materialized; the other documents were left alone
    assert dagster_instance.get_materialized_partitions(chunks.key) == {DOC}
    assert store.chunk_info("curie_radioactivity.md") is None


def test_a_partition_key_that_is_not_a_file_name_is_refused(dagster_instance, resources, settings):
    dagster_instance.add_dynamic_partitions(documents_partitions.name, ["../outside"])
    result = dg.materialize(
        [chunks], partition_key="../outside", instance=dagster_instance, resources=resources, raise_on_error=False
    )
    assert not result.success
    [failure] = result.get_step_failure_events()
    assert "../outside" in failure.event_specific_data.error.message
    assert not (settings.paths.home.parent / "outside.json").exists()


def test_graph_and_communities_on_top_of_the_documents(dagster_instance, resources, settings):
    result = build_graph(dagster_instance, resources)
    store = settings.store()
    kg_nodes, kg_edges = store.read_graph("knowledge_graph")
    kg = metadata(result, knowledge_graph)
    assert kg["documents"] == 7 and kg["entities"] == kg_nodes.height > 0 and kg["relations"] == kg_edges.height
    nodes, edges = store.read_graph("resolved_graph")
    resolved = metadata(result, resolved_graph)
    assert resolved["entities"] == nodes.height <= kg_nodes.height and resolved["relations"] == edges.height

    comm = metadata(result, communities)
    df = store.read_communities()
    assert comm["communities"] == df.height > 0
    assert {"modularity_kept", "modularity_fresh", "modularity_ratio", "communities_changed"} <= comm.keys()
    assert 0.0 < comm["modularity_fresh"] <= 1.0
    # one report partition per community of 2+ members, added by the asset itself
    reportable = set(df.filter(pl.col("size") >= 2)["community_id"].to_list())
    assert comm["reportable"] == len(reportable)
    assert set(dagster_instance.get_dynamic_partitions(community_partitions.name)) == reportable
    assert check_results(result) == {"knowledge_graph_is_consistent": True, "communities_reference_entities": True}


def test_resolution_with_damaged_verdicts_judges_every_entity_again(dagster_instance, resources, settings):
    # a run the CLI did not start (a sensor's, the UI's) meets an emptied resolution state: the
    # step says so and resolves from scratch, as a first build does, instead of failing every run
    build_graph(dagster_instance, resources)
    store = settings.store()
    before = store.read_graph("resolved_graph")
    state = settings.paths.graph_dir / "resolution.json"
    state.write_bytes(b"")
    result = dg.materialize([resolved_graph], instance=dagster_instance, resources=resources)
    assert result.success
    resolved = metadata(result, resolved_graph)
    assert "resolution.json" in resolved["state_repaired"] and "empty" in resolved["state_repaired"]
    assert resolved["new_entities"] == resolved["entities"]  # every entity judged again
    after = store.read_graph("resolved_graph")
    assert after[0].equals(before[0]) and after[1].equals(before[1])
    assert store.read_state("resolution")["signatures"]


def test_one_community_report_partition(dagster_instance, resources, settings):
    build_graph(dagster_instance, resources)
    first, *others = dagster_instance.get_dynamic_partitions(community_partitions.name)
    result = dg.materialize([community_reports], partition_key=first, instance=dagster_instance, resources=resources)
    assert result.success
    assert metadata(result, community_reports)["reports"] == 1
    store = settings.store()
    report = store.read_report(first)
    assert report is not None and report.community_id == first and report.title and report.extractive
    assert others and not set(others) & store.stored_report_ids()
    assert dagster_instance.get_materialized_partitions(community_reports.key) == {first}


def _all_reports(instance, resources) -> None:
    keys = instance.get_dynamic_partitions(community_partitions.name)
    assert dg.materialize([community_reports], instance=instance, resources=resources, tags=range_tags(keys)).success


def test_search_index_and_its_blocking_check(dagster_instance, resources, settings):
    build_graph(dagster_instance, resources)
    _all_reports(dagster_instance, resources)
    result = dg.materialize(
        [search_index, search_index_is_complete, elasticsearch_index], instance=dagster_instance, resources=resources
    )
    assert result.success
    assert check_results(result) == {"search_index_is_complete": True}
    meta = metadata(result, search_index)
    nodes, edges = settings.store().read_graph("resolved_graph")
    from graphrag_pipeline.query import DuckDBIndex

    with DuckDBIndex(settings.paths.index_file) as index:
        counts = index.counts()
    assert counts["entities"] == nodes.height and counts["relations"] == edges.height
    assert meta["documents"] == 7 and meta["reportable_communities"] == counts["community_reports"] > 0
    assert meta["embedding_model"].startswith("hashing")


def test_a_failing_search_index_check_does_not_block_elasticsearch_which_reads_its_own_inputs(
    dagster_instance, resources, settings, monkeypatch
):
    build_graph(dagster_instance, resources)
    _all_reports(dagster_instance, resources)

    class Failing:
        passed = False

        @staticmethod
        def to_metadata():
            return {"problems": "made to fail by the test"}

    monkeypatch.setattr(checks, "check_index_file", lambda *a, **kw: Failing())
    result = dg.materialize(
        [search_index, search_index_is_complete, elasticsearch_index],
        instance=dagster_instance,
        resources=resources,
        raise_on_error=False,
    )
    assert check_results(result) == {"search_index_is_complete": False}
    assert not result.success
    assert dagster_instance.get_latest_materialization_event(search_index.key) is not None
    # Elasticsearch is built from the graph, communities, reports and chunks, not from the DuckDB file
    assert dagster_instance.get_latest_materialization_event(elasticsearch_index.key) is not None
    assert {k.path[-1] for k in elasticsearch_index.dependency_keys} == {
        "resolved_graph",
        "communities",
        "community_reports",
        "chunks",
    }


def test_checks_reuse_a_verdict_on_the_same_files_only(dagster_instance, resources, settings, monkeypatch):
    # in a CLI build (the table memo on) the index check re-uses the verdict of the publish that wrote
    # the index from the same files, and the resolved graph's check that of the knowledge graph when its
    # files are hard links of the other's; a file replaced or changed since is checked again
    import duckdb

    from graphrag_pipeline.storage.files import remembering

    calls = {"index": 0, "graph": 0}
    real_index, real_graph = checks.check_index_file, checks._graph_problems

    def counted_index(*a, **kw):
        calls["index"] += 1
        return real_index(*a, **kw)

    def counted_graph(*a, **kw):
        calls["graph"] += 1
        return real_graph(*a, **kw)

    monkeypatch.setattr(checks, "check_index_file", counted_index)
    monkeypatch.setattr(checks, "_graph_problems", counted_graph)
    with remembering():
        build_graph(dagster_instance, resources)
        _all_reports(dagster_instance, resources)
        result = dg.materialize(
            [search_index, search_index_is_complete], instance=dagster_instance, resources=resources
        )
        assert check_results(result) == {"search_index_is_complete": True} and calls["index"] == 0
        graph_calls = calls["graph"]
        assert graph_calls == 1  # the resolved graph is a hard link of the knowledge graph: checked once

        con = duckdb.connect(str(settings.paths.index_file))
        con.execute("DELETE FROM entities WHERE key = (SELECT min(key) FROM entities)")
        con.close()
        verdict = search_index_is_complete(settings=settings)
        assert calls["index"] == 1 and not verdict.passed and "missing" in verdict.metadata["problems"].text

        store = settings.store()
        nodes, edges = store.read_graph("resolved_graph")
        store.write_graph("resolved_graph", nodes, pl.concat([edges, edges.head(1)]))  # a duplicate edge
        verdict = checks._graph_check("resolved_graph", settings)
        assert calls["graph"] == graph_calls + 1 and not verdict.passed
        assert "1 duplicate edges" in verdict.metadata["problems"].text
