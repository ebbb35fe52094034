"""End to end through Dagster: build the bundled corpus in a temporary GRAPHRAG_HOME, then edit,
delete and break documents and check that exactly the right partitions re-run."""

from __future__ import annotations

import json

import dagster as dg
import duckdb
import pytest

from graphrag_pipeline_tests.conftest import cli, cli_json


def _runs(instance, *job_names: str) -> list:
    return [r for r in instance.get_runs() if r.job_name in job_names]


DOC_JOBS = ("documents_job", "corpus_job")  # runs that process documents


def _materialized(instance, asset: str, run_id: str | None = None) -> list[str]:
    records = instance.fetch_materializations(dg.AssetKey(asset), limit=10000).records
    return sorted(r.partition_key for r in records if run_id is None or r.run_id == run_id)


def _latest_metadata(instance, asset: str) -> dict:
    ev = instance.get_latest_materialization_event(dg.AssetKey(asset))
    return {k: v.value for k, v in ev.asset_materialization.metadata.items()}


def _index_names(home, table: str, column: str) -> set[str]:
    con = duckdb.connect(str(home / "index" / "search_index.duckdb"), read_only=True)
    try:
        return {r[0] for r in con.execute(f"SELECT {column} FROM {table}").fetchall()}
    finally:
        con.close()


@pytest.fixture
def built(home, corpus, instance):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    return out


def test_build_materializes_everything_with_metadata_and_checks(built, home, instance):
    assert "check FAILED" not in built
    for check in (
        "knowledge_graph_is_consistent",
        "resolved_graph_is_consistent",
        "communities_reference_entities",
        "search_index_is_complete",
    ):
        assert check in built
    stats = cli_json("stats", "--json")
    assert stats["documents"] == 7
    for key in ("chunks", "entities", "relations", "communities", "community_reports"):
        assert isinstance(stats[key], int) and stats[key] > 0, key
    assert stats["llm"] == {
        "calls": 0,
        "cache_hits": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,
        "unpriced_calls": 0,
    }

    inst = instance()
    # documents are processed in one batch run (which then merges and clusters), not one run per document
    assert len(_runs(inst, *DOC_JOBS)) == 1
    assert len(inst.get_runs()) == 2  # documents + graph, then reports + index
    assert len(_materialized(inst, "chunks")) == 7
    expectations = {
        "chunks": ("chunks", "preview"),
        "doc_subgraph": ("entity_mentions", "preview"),
        "knowledge_graph": ("entities", "top_entities"),
        "resolved_graph": ("candidate_pairs", "merges"),
        "communities": ("communities", "levels"),
        "community_reports": ("reports", "preview"),
        "search_index": ("entities", "type_pool"),
    }
    for asset, keys in expectations.items():
        meta = _latest_metadata(inst, asset)
        for key in keys:
            assert key in meta, (asset, key)
    assert (
        _latest_metadata(inst, "knowledge_graph")["entities"] == stats["entities"]
        or _latest_metadata(inst, "resolved_graph")["entities"] == stats["entities"]
    )
    assert "Darwin" in _latest_metadata(inst, "knowledge_graph")["top_entities"]

    reports = json.loads(next((home / "reports").glob("*.json")).read_text())
    assert reports["extractive"] is True and "Extractive report" in reports["summary"]


def test_second_build_does_nothing(built, home, corpus, instance):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0
    assert "everything is up to date" in out
    inst = instance()
    assert len(inst.get_runs()) == 2


def test_query_finds_expected_entities(built):
    # --mode local: the default mode is now mix (issue 11)
    result = cli_json("query", "Who sailed with Charles Darwin on HMS Beagle?", "--mode", "local", "--json")
    assert set(result) == {"mode", "entities", "relations", "community_reports", "chunks", "context", "answer"}
    assert result["mode"] == "local" and result["answer"] is None
    names = {e["name"] for e in result["entities"]}
    assert {"Charles Darwin", "Beagle"} & names or any("Darwin" in n for n in names)
    assert any("Darwin" in r["source"] + r["target"] for r in result["relations"])
    assert len(result["community_reports"]) == 1
    for e in result["entities"]:
        assert set(e) == {"name", "type", "description", "score", "sources"}  # sources: issue 11
    assert "Entities" in result["context"]

    zh = cli_json("query", "郑和从哪里出发下西洋？", "--json")
    assert "郑和" in {e["name"] for e in zh["entities"]}

    glob = cli_json("query", "Royal Society in London", "--mode", "global", "--json")
    assert glob["mode"] == "global" and glob["community_reports"]
    assert {"title", "summary", "rating"} <= set(glob["community_reports"][0])

    naive = cli_json("query", "Enigma and the Bombe at Bletchley Park", "--mode", "naive", "--json")
    assert naive["chunks"][0]["doc"] == "turing_and_bletchley_park.txt"


def test_query_refuses_bad_numbers_and_stops_quietly_when_its_reader_goes(built, home, capsys):
    import os
    import subprocess
    import sys

    # a count below 0 reached DuckDB's LIMIT (a traceback, exit 1); now argparse's exit 2
    for flag, value in (("--chunk-topn", "-5"), ("--ent-topn", "2.5"), ("--ent-sim-threshold", "nan")):
        with pytest.raises(SystemExit) as stop:
            cli("query", "Darwin", "--mode", "naive", flag, value)
        assert stop.value.code == 2
        assert f"argument {flag}:" in capsys.readouterr().err
    # `query ... | head -1` where head has gone: no BrokenPipeError traceback, SIGPIPE's status
    env = {**os.environ, "GRAPHRAG_HOME": str(home)}
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from graphrag_pipeline.cli import run; run()", "query", "Charles Darwin"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
        )
    finally:
        os.close(write_end)
    err = proc.stderr.decode()
    assert proc.returncode == 141 and "Traceback" not in err, err


def test_editing_one_document_reruns_only_its_partitions_and_changed_reports(built, home, corpus, instance):
    inst = instance()
    reports_before = _materialized(inst, "community_reports")
    doc = corpus / "curie_radioactivity.md"
    doc.write_text(
        doc.read_text(encoding="utf-8") + "\n\nIn 1921 Marie Curie toured the United States, where "
        "President Warren Harding presented her with a gram of radium bought by American women.\n",
        encoding="utf-8",
    )
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    runs = _runs(inst, *DOC_JOBS)
    assert len(runs) == 2
    latest = runs[0]
    assert _materialized(inst, "chunks", latest.run_id) == ["curie_radioactivity.md"]
    assert _materialized(inst, "doc_subgraph", latest.run_id) == ["curie_radioactivity.md"]
    meta = _latest_metadata(inst, "doc_subgraph")
    assert meta["chunks_extracted"] >= 1 and meta["chunks_extracted"] < 3  # only the changed chunk(s)

    reports_after = _materialized(inst, "community_reports")
    regenerated = [k for k in reports_after if reports_after.count(k) > reports_before.count(k)]
    live = set(inst.get_dynamic_partitions("communities"))
    # only communities whose content changed got a (new) report; the others kept theirs
    assert regenerated, "the edit should change at least one community"
    assert all(k not in reports_before for k in regenerated)
    assert len(regenerated) < len(live)
    assert any("Warren Harding" in n for n in _index_names(home, "entities", "name"))


def test_deleting_a_document_removes_its_partitions_and_contributions(built, home, corpus, instance):
    assert "郑和" in _index_names(home, "entities", "name")
    (corpus / "zheng_he_voyages_zh.txt").unlink()
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    assert "zheng_he_voyages_zh.txt" not in inst.get_dynamic_partitions("documents")
    names = _index_names(home, "entities", "name")
    # entities only the deleted document mentioned are gone; one the other Chinese text shares stays
    assert "王景弘" not in names and "刘家港" not in names
    assert "郑和" in names
    assert "Charles Darwin" in names or "Darwin" in names
    assert "zheng_he_voyages_zh.txt" not in _index_names(home, "chunks", "doc")
    assert not list((home / "tables" / "chunks").glob("zheng_he_voyages_zh.txt*"))
    # nothing re-ran for the other documents
    assert len(_runs(inst, *DOC_JOBS)) == 1


def test_bad_files_are_skipped_with_a_message_and_others_build(home, corpus, instance, monkeypatch):
    (corpus / "empty.txt").write_bytes(b"")
    (corpus / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    (corpus / "noise.md").write_bytes(bytes((i * 37 + 128) % 256 | 0x80 for i in range(4000)))
    big = "Ada Lovelace wrote notes on the Analytical Engine of Charles Babbage. " * 3000
    (corpus / "huge.txt").write_text(
        big + "\n\nThe Tail Entity Society appears only at the very end.", encoding="utf-8"
    )
    monkeypatch.setenv("GRAPHRAG_MAX_DOCUMENT_BYTES", "100000")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    meta = _latest_metadata(inst, "chunks")
    assert meta["skipped"] == 3
    skipped = meta["skipped_documents"]
    for name in ("empty.txt", "image.txt", "noise.md"):
        assert name in skipped
    assert "binary" in skipped and "empty" in skipped
    info = json.loads((home / "tables" / "chunks" / "huge.txt.json").read_text())
    assert info["status"] == "truncated" and "100,000" in info["message"]
    names = _index_names(home, "entities", "name")
    assert "Tail Entity Society" not in names
    assert {"chunks", "doc"} and "darwin_and_wallace.txt" in _index_names(home, "chunks", "doc")
    assert "huge.txt" in _index_names(home, "chunks", "doc")


def test_export_graphml(built, tmp_path):
    import networkx as nx

    out = tmp_path / "g.graphml"
    code, text = cli("export", "--format", "graphml", "--out", str(out))
    assert code == 0, text
    g = nx.read_graphml(out)
    stats = cli_json("stats", "--json")
    assert g.number_of_nodes() == stats["entities"] and g.number_of_edges() == stats["relations"]
    assert any(d.get("label") == "郑和" for _, d in g.nodes(data=True))
    # a mistyped home: an error, and no folders made there
    missing = tmp_path / "no-such-home"
    code, text = cli("--home", str(missing), "export", "--out", str(tmp_path / "x.graphml"))
    assert code == 2 and not missing.exists()


def test_a_file_deleted_before_its_run_is_skipped_not_fatal(home, corpus, instance):
    inst = instance()
    inst.add_dynamic_partitions("documents", ["darwin_and_wallace.txt", "ghost.txt"])
    from graphrag_pipeline.definitions import defs
    from graphrag_pipeline.ingest.corpus_sync import range_tags

    result = defs.resolve_job_def("documents_job").execute_in_process(
        instance=inst, tags=range_tags(["darwin_and_wallace.txt", "ghost.txt"]), raise_on_error=False
    )
    assert result.success
    meta = _latest_metadata(inst, "chunks")
    assert meta["skipped"] == 1 and "ghost.txt" in meta["skipped_documents"]
    assert json.loads((home / "tables" / "chunks" / "ghost.txt.json").read_text())["status"] == "missing"
