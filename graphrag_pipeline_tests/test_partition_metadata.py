"""What the UI shows per partition: one run over many document partitions gives each partition's
materialization its own document's figures (on top of the run's totals); each community report
partition says its community's title, level and size; table assets carry Dagster's table metadata."""

from __future__ import annotations

import json

import dagster as dg

from graphrag_pipeline.defs.document_assets import chunks, doc_subgraph
from graphrag_pipeline.defs.graph_assets import communities, community_reports, knowledge_graph, resolved_graph
from graphrag_pipeline.defs.partitions import community_partitions
from graphrag_pipeline.ingest.corpus_sync import range_tags
from graphrag_pipeline_tests.test_assets import dagster_instance, resources, settings  # noqa: F401 - fixtures


def by_partition(result: dg.ExecuteInProcessResult, asset) -> dict[str, dict]:
    return {
        m.partition: {k: v.value for k, v in m.metadata.items()}
        for m in result.asset_materializations_for_node(asset.op.name)
    }


def test_each_document_partition_of_one_run_carries_its_own_figures(dagster_instance, resources, settings):  # noqa: F811
    keys = ["curie_radioactivity.md", "darwin_and_wallace.txt"]
    result = dg.materialize(
        [chunks, doc_subgraph], instance=dagster_instance, resources=resources, tags=range_tags(keys)
    )
    assert result.success
    store = settings.store()
    chunk_meta, sub_meta = by_partition(result, chunks), by_partition(result, doc_subgraph)
    assert set(chunk_meta) == set(sub_meta) == set(keys)
    for key in keys:
        rows = store.read_chunks(key)
        entities, relations = store.read_subgraphs([key])
        c, s = chunk_meta[key], sub_meta[key]
        assert c["document"] == s["document"] == key  # the corpus path (here the same as the key)
        assert c["document_chunks"] == c["dagster/row_count"] == rows.height > 0
        assert c["document_tokens"] == sum(rows["tokens"]) and c["document_status"] == "ok"
        assert s["document_entities"] == entities["key"].n_unique() > 0
        assert s["document_relations"] == relations.height and s["dagster/row_count"] == entities.height
        assert entities["name"][0] in s["document_preview"]
        # the run's totals are on every partition too
        assert c["documents"] == s["documents"] == 2
    a, b = keys
    assert chunk_meta[a]["document_tokens"] != chunk_meta[b]["document_tokens"]
    assert sub_meta[a]["document_entities"] != sub_meta[b]["document_entities"]


def test_community_partitions_say_their_title_level_and_size(dagster_instance, resources, settings):  # noqa: F811
    keys = dagster_instance.get_dynamic_partitions("documents")
    assert dg.materialize(
        [chunks, doc_subgraph], instance=dagster_instance, resources=resources, tags=range_tags(keys)
    ).success
    graph = dg.materialize(
        [knowledge_graph, resolved_graph, communities], instance=dagster_instance, resources=resources
    )
    assert graph.success
    comm = {k: v.value for k, v in graph.asset_materializations_for_node("communities")[0].metadata.items()}
    assert comm["dagster/row_count"] == comm["communities"]
    assert "community_id" in [c.name for c in comm["dagster/column_schema"].columns]
    kg = {k: v.value for k, v in graph.asset_materializations_for_node("knowledge_graph")[0].metadata.items()}
    assert {"key", "name", "type"} <= {c.name for c in kg["dagster/column_schema"].columns}

    parts = dagster_instance.get_dynamic_partitions(community_partitions.name)[:3]
    result = dg.materialize([community_reports], instance=dagster_instance, resources=resources, tags=range_tags(parts))
    assert result.success
    meta = by_partition(result, community_reports)
    table = settings.store().read_communities()
    for key in parts:
        report = settings.store().read_report(key)
        row = table.filter(table["community_id"] == key).row(0, named=True)
        m = meta[key]
        assert m["title"] == report.title and m["title"]
        assert m["level"] == row["level"] and m["size"] == row["size"] >= 2
        assert m["report_status"] == "written" and m["generator"] == "extractive"
        assert m["summary"].startswith(report.summary[:50])


def test_assets_have_owners_and_tags():
    from graphrag_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    for key in graph.materializable_asset_keys:
        node = graph.get(key)
        assert node.owners == ["team:graphrag"], key
        assert node.tags.get("stage"), key
    assert graph.get(dg.AssetKey("doc_subgraph")).tags["llm"] == "extraction"
    assert json.dumps(graph.get(dg.AssetKey("chunks")).metadata["dagster/column_schema"].value.columns[0].name)


def test_many_partitions_are_deleted_in_one_statement_and_the_others_kept(tmp_path):
    import dagster as dg

    from graphrag_pipeline.defs.partitions import change_partitions

    parts = dg.DynamicPartitionsDefinition(name="some_communities")
    with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
        change_partitions(inst, parts, add=[f"c{i}" for i in range(1200)])
        change_partitions(inst, parts, add=["new"], delete=[f"c{i}" for i in range(1, 1200)] + ["absent"])
        assert inst.get_dynamic_partitions("some_communities") == ["c0", "new"]
        change_partitions(inst, parts, delete=["c0"])  # one key: Dagster's own call
        assert inst.get_dynamic_partitions("some_communities") == ["new"]
