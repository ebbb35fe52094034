"""Incremental builds at the community level, end to end through the CLI and Dagster: a small edit
changes a few communities, only their reports are written, and an edit that is undone brings
every community, id and report back."""

from __future__ import annotations

import dagster as dg
import pytest

from graphrag_pipeline_tests.conftest import cli, cli_json

EDIT = (
    "\n\nIn 1921 Marie Curie toured the United States, where President Warren Harding presented her with a "
    "gram of radium bought by American women. Irene Curie travelled with her mother to New York.\n"
)
COUNTS = ("documents", "chunks", "entities", "relations", "communities", "community_reports")


def _build(corpus, *extra: str) -> str:
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast", *extra)
    assert code == 0, out
    return out


def _metadata(instance, asset: str) -> dict:
    ev = instance.get_latest_materialization_event(dg.AssetKey(asset))
    return {k: v.value for k, v in ev.asset_materialization.metadata.items()}


def _report_writes(instance, since_run_ids: set[str]) -> list[str]:
    records = instance.fetch_materializations(dg.AssetKey("community_reports"), limit=10000).records
    return [r.partition_key for r in records if r.run_id not in since_run_ids]


def _counts() -> dict:
    stats = cli_json("stats", "--json")
    return {k: stats[k] for k in COUNTS}


@pytest.fixture
def built(home, corpus, instance):
    _build(corpus)
    return instance


def test_an_edit_changes_few_communities_and_writes_only_their_reports(built, home, corpus):
    inst = built()
    partitions_before = set(inst.get_dynamic_partitions("communities"))
    runs_before = {r.run_id for r in inst.get_runs()}
    doc = corpus / "curie_radioactivity.md"
    doc.write_text(doc.read_text(encoding="utf-8") + EDIT, encoding="utf-8")
    out = _build(corpus)
    inst = built()
    meta = _metadata(inst, "communities")
    # the metadata says how many communities changed and how good the kept partition is
    for key in (
        "communities_changed",
        "communities_kept",
        "modularity_kept",
        "modularity_fresh",
        "reclustered",
        "recluster_reason",
        "frontier_nodes",
    ):
        assert key in meta, key
    assert meta["reclustered"] is False
    assert meta["modularity_kept"] >= 0.98 * meta["modularity_fresh"] > 0
    assert 1 <= meta["communities_changed"] < meta["communities"] / 2
    partitions_after = set(inst.get_dynamic_partitions("communities"))
    new_partitions = partitions_after - partitions_before
    assert meta["new_report_partitions"] == len(new_partitions) >= 1
    # only the reports of the changed communities were written, each once
    written = _report_writes(inst, runs_before)
    assert sorted(written) == sorted(new_partitions)
    assert len(partitions_after & partitions_before) > len(new_partitions)
    assert "communities_changed=" in out


def test_edit_build_revert_build_restores_everything(built, home, corpus):
    inst = built()
    first = _counts()
    reports_first = set(inst.get_dynamic_partitions("communities"))
    doc = corpus / "curie_radioactivity.md"
    original = doc.read_bytes()
    doc.write_text(original.decode("utf-8") + EDIT, encoding="utf-8")
    _build(corpus)
    edited = _counts()
    assert edited["entities"] > first["entities"]
    runs_before_revert = {r.run_id for r in built().get_runs()}
    doc.write_bytes(original)
    out = _build(corpus)
    inst = built()
    assert _counts() == first
    assert set(inst.get_dynamic_partitions("communities")) == reports_first
    # every report came back from storage: the revert wrote none
    assert _report_writes(inst, runs_before_revert) == []
    assert "check FAILED" not in out and "search_index_is_complete" in out
    for report in (home / "reports").glob("*.json"):
        assert report.stat().st_size > 0
    assert all((home / "reports" / f"{k}.json").exists() for k in reports_first)
    result = cli_json("query", "What was discovered about radioactivity?", "--mode", "global", "--json")
    assert result["community_reports"]
    local = cli_json("query", "Who was Marie Curie?", "--json")
    assert local["community_reports"]


def test_an_edit_undone_after_six_other_edits_restores_everything(built, home, corpus):
    # found by an exploratory run: after 5 or more edits, undoing them no longer brought back the
    # first build's communities (5 clustered graphs were remembered, 10 clustering changes' ids)
    inst = built()
    first = _counts()
    reports_first = set(inst.get_dynamic_partitions("communities"))
    memo = home / "graph" / "partition_memo"
    (first_partition,) = memo.glob("*.parquet")  # how the first build's graph was clustered
    doc = corpus / "curie_radioactivity.md"
    original = doc.read_bytes()
    people = ["Albert Einstein", "Niels Bohr", "Max Planck", "Lise Meitner", "Ernest Rutherford", "Otto Hahn"]
    for i, person in enumerate(people):
        doc.write_text(
            original.decode("utf-8") + f"\n\nIn {1911 + i} {person} wrote to Marie Curie from Brussels.\n",
            encoding="utf-8",
        )
        _build(corpus)
    runs_before_revert = {r.run_id for r in built().get_runs()}
    # on a small corpus the frontier update may find the same partition again by itself; on a large
    # one the first build's partition, remembered, is what brings its communities back
    assert first_partition.exists() and len(list(memo.glob("*.parquet"))) == 1 + len(people)
    doc.write_bytes(original)
    _build(corpus)
    inst = built()
    assert _counts() == first
    assert set(inst.get_dynamic_partitions("communities")) == reports_first
    assert _report_writes(inst, runs_before_revert) == []


def test_recluster_flag_clusters_from_scratch_and_keeps_ids(built, home, corpus):
    inst = built()
    ids = set(inst.get_dynamic_partitions("communities"))
    out = _build(corpus, "--recluster")
    inst = built()
    meta = _metadata(inst, "communities")
    assert meta["reclustered"] is True and "asked" in meta["recluster_reason"]
    # the same graph clusters the same way: every community keeps its id and report
    assert set(inst.get_dynamic_partitions("communities")) == ids
    assert "0 of" in out  # no report to write


def test_a_lost_report_is_written_again_under_a_new_key(built, home, corpus):
    inst = built()
    victim = sorted(inst.get_dynamic_partitions("communities"))[0]
    (home / "reports" / f"{victim}.json").unlink()
    out = _build(corpus, "--recluster")  # the same graph: the same communities come back
    inst = built()
    partitions = set(inst.get_dynamic_partitions("communities"))
    assert victim not in partitions
    assert any(k.startswith(victim + "-") for k in partitions)  # the same community, a key never used before
    assert all((home / "reports" / f"{k}.json").exists() for k in partitions)
    assert _metadata(inst, "communities")["reports_lost"] == 1
    assert "check FAILED" not in out and "1 of" in out  # exactly that report is written
