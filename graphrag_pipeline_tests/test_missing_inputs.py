"""A missing input is an error, never an empty frame: a step asked for the outputs of documents
Dagster records as materialized fails naming the missing files and partitions, and publishes
nothing; documents not processed yet, and documents skipped as empty, stay legitimate."""

from __future__ import annotations

import hashlib
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from graphrag_pipeline_tests.conftest import cli, cli_json


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(job: str, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """A job run straight through Dagster (not through the CLI, whose build repairs a home first)."""
    from graphrag_pipeline.definitions import current_defs

    return current_defs().resolve_job_def(job).execute_in_process(instance=instance, raise_on_error=False)


def _failure(result: dg.ExecuteInProcessResult, step: str) -> str:
    failures = {e.step_key: e.event_specific_data.error.message for e in result.get_step_failure_events()}
    assert step in failures, failures
    return failures[step]


@pytest.fixture
def built(home, corpus, instance):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    return instance(), cli_json("stats", "--json")


def test_a_missing_upstream_partition_file_fails_the_asset_with_a_clear_message(home, corpus, built):
    inst, stats = built
    index, graph = home / "index" / "search_index.duckdb", home / "graph" / "knowledge_graph.manifest.json"
    before = _digest(index), _digest(graph)
    key = "darwin_and_wallace.txt"
    relations = home / "tables" / "doc_subgraph" / f"{key}.relations.parquet"
    relations.unlink()
    (home / "tables" / "doc_subgraph" / f"{key}.json").unlink()

    result = _run("graph_job", inst)
    assert not result.success
    message = _failure(result, "knowledge_graph")
    assert str(relations) in message and key in message and "materialized" in message
    assert "graphrag-pipeline build" in message  # how to repair
    assert "entities.parquet" not in message  # only what is missing is named
    # nothing was written over the good outputs, and nothing downstream ran
    assert (_digest(index), _digest(graph)) == before
    assert not [m for m in result.get_asset_materialization_events()]

    # the index job reads the chunks: they are all there, so it is not blocked by this
    # the CLI's build finds the document damaged and extracts it again: the home is whole
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert relations.exists()
    assert cli_json("stats", "--json") == stats


def test_steps_on_another_machine_fail_instead_of_publishing_an_empty_graph(home, corpus, built, tmp_path, monkeypatch):
    """One instance, another GRAPHRAG_HOME for the step (as on a worker whose disk does not hold the
    documents' files): the step fails naming the files; the first home's index is untouched."""
    inst, _ = built
    index = home / "index" / "search_index.duckdb"
    before = _digest(index)
    other = tmp_path / "other-machine"
    monkeypatch.setenv("GRAPHRAG_HOME", str(other))
    result = _run("graph_job", inst)
    message = _failure(result, "knowledge_graph")
    assert "of 7 document(s) are missing" in message
    assert str(other / "tables" / "doc_subgraph" / "darwin_and_wallace.txt.entities.parquet") in message
    assert not (other / "graph" / "knowledge_graph.manifest.json").exists()
    assert _digest(index) == before


def test_the_index_is_not_published_without_a_chunked_documents_chunks(home, corpus, built):
    inst, stats = built
    index = home / "index" / "search_index.duckdb"
    before = _digest(index)
    chunk_file = home / "tables" / "chunks" / "turing_and_bletchley_park.txt.parquet"
    chunk_file.unlink()
    message = _failure(_run("index_job", inst), "search_index")
    assert str(chunk_file) in message and "turing_and_bletchley_park.txt" in message
    assert "Exceeded max_retries" not in message  # failed at once: a retry cannot bring the file back
    assert _digest(index) == before
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert chunk_file.exists() and cli_json("stats", "--json") == stats


def test_doc_subgraph_refuses_to_extract_a_document_whose_chunks_are_gone(home, corpus, built):
    inst, _ = built
    key = "curie_radioactivity.md"
    chunk_file = home / "tables" / "chunks" / f"{key}.parquet"
    chunk_file.unlink()
    subgraph = home / "tables" / "doc_subgraph" / f"{key}.entities.parquet"
    before = _digest(subgraph)
    from graphrag_pipeline.definitions import current_defs

    job = current_defs().resolve_job_def("documents_job")
    result = job.execute_in_process(
        instance=inst, raise_on_error=False, op_selection=["doc_subgraph"], partition_key=key
    )
    message = _failure(result, "doc_subgraph")
    assert str(chunk_file) in message and key in message
    assert _digest(subgraph) == before  # not replaced by an empty subgraph


def test_documents_not_processed_yet_and_empty_documents_are_not_errors(home, corpus, built):
    inst, stats = built
    (corpus / "empty.txt").write_text("")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out  # skipped as empty: stored with empty tables, read as such
    assert cli_json("stats", "--json")["entities"] == stats["entities"]
    # a partition added (by the sensor, or by hand) but not materialized yet has no files
    inst.add_dynamic_partitions("documents", ["not_yet.txt"])
    result = _run("graph_job", inst)
    assert result.success
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["knowledge_graph"]["documents_not_extracted"].value == 1
    assert meta["knowledge_graph"]["entities"].value == stats["entities"]
    # and still counted by the next merge, which reads no document (none of them changed)
    result = _run("graph_job", inst)
    assert result.success
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["knowledge_graph"]["documents_not_extracted"].value == 1


def test_the_graph_and_index_ask_which_documents_are_unprocessed_only_when_files_are_missing(
    home, corpus, built, monkeypatch
):
    """Listing an asset's materialized partitions groups every materialization event of it (a
    cost that grows with the corpus and its history): the merge and the index ask it only for a
    document whose files are missing, never in an ordinary update."""
    inst, stats = built
    asked: list[str] = []
    listing = dg.DagsterInstance.get_materialized_partitions

    def counted(self, asset_key, *args, **kwargs):
        asked.append(asset_key.path[-1])
        return listing(self, asset_key, *args, **kwargs)

    monkeypatch.setattr(dg.DagsterInstance, "get_materialized_partitions", counted)
    doc = corpus / "darwin_and_wallace.txt"
    doc.write_text(doc.read_text() + "\n\nAlfred Russel Wallace wrote to Charles Darwin from Ternate in 1858.\n")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert "1 to process" in out
    assert "doc_subgraph" not in asked and "chunks" not in asked, asked
    assert cli_json("stats", "--json")["documents"] == stats["documents"]

    # a document whose subgraph files are missing: the merge asks, and finds it extracted (an error)
    (home / "tables" / "doc_subgraph" / "darwin_and_wallace.txt.relations.parquet").unlink()
    result = _run("graph_job", inst)
    assert not result.success and "darwin_and_wallace.txt" in _failure(result, "knowledge_graph")
    assert "doc_subgraph" in asked


def test_readers_of_many_documents_name_what_is_missing(tmp_path):
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import MissingInputError, Store

    store = Store(Paths(tmp_path / "home"))
    ents = pl.DataFrame(
        {"key": ["A"], "name": ["A"], "type": ["PERSON"], "description": ["d"], "doc_id": ["a"], "chunk_id": ["c"]}
    )
    from graphrag_pipeline.extract.subgraph import ENTITY_ROWS, RELATION_ROWS

    ents = ents.with_columns([pl.lit(None, dtype=t).alias(c) for c, t in ENTITY_ROWS.items() if c not in ents.columns])
    store.write_subgraph("a", ents.select(list(ENTITY_ROWS)).cast(ENTITY_ROWS), pl.DataFrame(schema=RELATION_ROWS), {})
    with pytest.raises(MissingInputError) as err:
        store.read_subgraphs(["a", "b"])
    assert list(err.value.missing) == ["b"] and "b.entities.parquet" in str(err.value)
    found, _ = store.read_subgraphs(["a", "b"], optional={"b"})  # b: not extracted yet
    assert found["key"].to_list() == ["A"]
    with pytest.raises(MissingInputError, match="`chunks` files of 1 document"):
        store.scan_all_chunks(["a"])
    assert store.read_all_chunks(["a"], optional=["a"]).height == 0
    # not an OSError: no fallback that reads "what is there" swallows it
    assert not isinstance(err.value, OSError)


def test_the_consistency_check_fails_an_empty_graph_when_documents_have_entities(home, corpus, built):
    from graphrag_pipeline.defs.checks import _graph_check
    from graphrag_pipeline.defs.resources import PipelineSettings
    from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    inst, _ = built
    settings = PipelineSettings().resolved()  # from the environment, as for a run
    assert _graph_check("knowledge_graph", settings, inst).passed
    Store(Paths(home)).write_graph(
        "knowledge_graph", pl.DataFrame(schema=NODE_SCHEMA), pl.DataFrame(schema=EDGE_SCHEMA)
    )
    result = _graph_check("knowledge_graph", settings, inst)
    assert not result.passed
    assert "entity mentions" in result.metadata["problems"].value
