"""Staleness by code version: the extraction settings (method, model, prompts, chunking) are the
code version of the per-document assets, so Dagster marks the partitions built under other
settings as stale; a build only reports them (a new model is a paid decision) and
`build --refresh stale` processes exactly them."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster._core.definitions.data_version import StaleCauseCategory, StaleStatus

from graphrag_pipeline.code_versions import code_versions
from graphrag_pipeline_tests.conftest import cli
from graphrag_pipeline_tests.fake_llm import FakeLLM, classify
from graphrag_pipeline_tests.llm_server import ScriptedLLMServer


@pytest.fixture
def server(monkeypatch, home, corpus):
    with ScriptedLLMServer(FakeLLM()) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("GRAPHRAG_LLM_MODEL", "fake-model")
        monkeypatch.setenv("GRAPHRAG_LLM_TIMEOUT", "5")
        yield srv


def resolver(instance, defs):
    """Dagster's own staleness resolver (what the UI shows), over the definitions' asset graph."""
    from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
    from dagster._core.definitions.data_version import CachingStaleStatusResolver
    from dagster._time import get_current_datetime

    graph = defs.resolve_asset_graph()
    view = AssetGraphView(
        temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
        instance=instance,
        asset_graph=graph,
    )
    return CachingStaleStatusResolver(instance=instance, asset_graph=graph, loading_context=view)


def extraction_calls(srv, start: int = 0) -> list[dict]:
    return [b for b in srv.requests[start:] if classify(b["messages"]).endswith("_extract")]


def test_a_new_model_marks_doc_subgraph_stale_and_only_refresh_re_extracts(server, corpus, instance, monkeypatch):
    from graphrag_pipeline.definitions import current_defs
    from graphrag_pipeline.defs.staleness import stale_by_code_version

    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    inst = instance()
    docs = inst.get_dynamic_partitions("documents")
    defs = current_defs()
    status = resolver(inst, defs)
    assert {status.get_status(dg.AssetKey("doc_subgraph"), k) for k in docs} == {StaleStatus.FRESH}
    assert stale_by_code_version(inst, defs, docs) == {"chunks": [], "doc_subgraph": []}
    first_extractions = extraction_calls(server)
    assert first_extractions and {b["model"] for b in first_extractions} == {"fake-model"}

    monkeypatch.setenv("GRAPHRAG_LLM_MODEL", "fake-model-2")
    defs = current_defs()  # definitions loaded again under the new settings (as a reload of the UI does)
    status = resolver(inst, defs)
    for key in docs:
        assert status.get_status(dg.AssetKey("doc_subgraph"), key) == StaleStatus.STALE
        causes = status.get_stale_root_causes(dg.AssetKey("doc_subgraph"), key)
        assert [(c.category, c.reason) for c in causes] == [(StaleCauseCategory.CODE, "has a new code version")]
        assert status.get_status(dg.AssetKey("chunks"), key) == StaleStatus.FRESH  # chunking did not change
    # the CLI's one-query view agrees with Dagster's resolver
    assert stale_by_code_version(inst, defs, docs) == {"chunks": [], "doc_subgraph": sorted(docs)}

    before = len(server.requests)
    code, out = cli("build", "--corpus", str(corpus))
    assert code == 0, out
    assert f"note: {len(docs)} documents were built under other settings" in out
    assert "--refresh stale" in out and out.count("note: ") == 2
    # the whole-corpus assets whose settings name the model are said too, and not run (paid calls)
    assert "note: built under other settings: knowledge_graph (" in out and "fake-model-2" in out
    assert len(server.requests) == before  # nothing re-extracted, no call at all
    assert len(stale_by_code_version(inst, current_defs(), docs)["doc_subgraph"]) == len(docs)

    seen_runs = {r.run_id for r in inst.get_runs()}
    code, out = cli("build", "--corpus", str(corpus), "--refresh", "stale")
    assert code == 0, out
    assert f"refresh: {len(docs)} documents built under other settings are processed again" in out
    again = extraction_calls(server, before)
    assert len(again) == len(first_extractions) and {b["model"] for b in again} == {"fake-model-2"}
    # each run is tagged with the LLM calls it paid for (the UI's run list shows them)
    runs = [r for r in inst.get_runs() if r.tags.get("graphrag/llm_calls") is not None]
    refresh_runs = [r for r in runs if r.run_id not in seen_runs]
    assert sum(int(r.tags["graphrag/llm_calls"]) for r in refresh_runs) == len(server.requests) - before
    status = resolver(inst, current_defs())
    assert {status.get_status(dg.AssetKey("doc_subgraph"), k) for k in docs} == {StaleStatus.FRESH}
    code, out = cli("build", "--corpus", str(corpus))
    assert code == 0 and "everything is up to date" in out and "note: " not in out


def test_fast_does_not_depend_on_the_model_but_chunking_does(home, monkeypatch):
    monkeypatch.setenv("GRAPHRAG_METHOD", "fast")
    fast = code_versions()
    monkeypatch.setenv("GRAPHRAG_LLM_MODEL", "another-model")
    assert code_versions() == fast
    monkeypatch.setenv("GRAPHRAG_METHOD", "light")
    light = code_versions()
    monkeypatch.setenv("GRAPHRAG_LLM_MODEL", "a-third-model")
    changed = {k for k, v in code_versions().items() if v != light[k]}
    assert changed == {"doc_subgraph", "knowledge_graph", "resolved_graph", "community_reports"}
    monkeypatch.setenv("GRAPHRAG_CHUNK_TOKENS", "500")
    assert code_versions()["chunks"] != light["chunks"]


def test_an_edited_extraction_prompt_changes_the_version_and_the_cache_key(home, monkeypatch):
    from graphrag_pipeline.extract.batch import settings_fingerprint
    from graphrag_pipeline.llm import prompts

    monkeypatch.setenv("GRAPHRAG_METHOD", "general")
    version, key = code_versions()["doc_subgraph"], settings_fingerprint("general")
    monkeypatch.setattr(prompts, "GENERAL_EXTRACTION", prompts.GENERAL_EXTRACTION + "\nBe brief.")
    assert code_versions()["doc_subgraph"] != version
    assert settings_fingerprint("general") != key  # a cached extraction from the old prompt is not reused
    assert settings_fingerprint("fast") == "fast-v2"


def test_a_document_written_again_makes_what_is_built_from_it_stale(home, corpus, instance, monkeypatch):
    """Code versions must not freeze the data versions: a document chunked again (its text may have
    changed) gives its partition a new data version, so Dagster shows the knowledge graph built from
    the old one as stale, as it did before assets had code versions."""
    from graphrag_pipeline.definitions import current_defs
    from graphrag_pipeline.ingest.corpus_sync import range_tags

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    inst = instance()
    defs = current_defs()
    kg = dg.AssetKey("knowledge_graph")
    assert resolver(inst, defs).get_status(kg) == StaleStatus.FRESH
    key = sorted(inst.get_dynamic_partitions("documents"))[0]
    monkeypatch.setenv("GRAPHRAG_CORPUS", str(corpus))
    result = defs.resolve_job_def("documents_job").execute_in_process(instance=inst, tags=range_tags([key]))
    assert result.success
    status = resolver(inst, defs)
    assert status.get_status(kg) == StaleStatus.STALE
    assert status.get_status(dg.AssetKey("doc_subgraph"), key) == StaleStatus.FRESH  # written in the same run


def test_a_new_maximum_cluster_size_is_applied_by_the_next_build(home, corpus, instance, monkeypatch):
    """A setting of a whole-corpus asset (here `communities`' maximum cluster size) changed with no
    document changed: the next build says so and clusters again under it (it was left until some
    document changed, found by a sweep); the build after that has nothing to do."""
    from dagster._core.definitions.data_version import CODE_VERSION_TAG

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    key = dg.AssetKey("communities")
    first = instance().get_latest_materialization_event(key)
    monkeypatch.setenv("GRAPHRAG_MAX_CLUSTER_SIZE", "4")
    code, out = cli("build", "--corpus", str(corpus))
    assert code == 0, out
    assert "settings changed since the last build: communities (v1|max_cluster_size=12 -> v1|max_cluster_size=4)" in out
    ev = instance().get_latest_materialization_event(key)
    assert ev.run_id != first.run_id
    assert ev.asset_materialization.tags[CODE_VERSION_TAG].endswith("max_cluster_size=4")
    meta = ev.asset_materialization.metadata
    assert meta["reclustered"].value and "clustering settings changed" in meta["recluster_reason"].value
    code, out = cli("build", "--corpus", str(corpus))
    assert code == 0 and "settings changed" not in out and "everything is up to date" in out, out
    assert instance().get_latest_materialization_event(key).run_id == ev.run_id


def test_after_a_method_switch_reports_of_the_other_kind_are_written_again(home, monkeypatch):
    """A community whose content survives `--switch-method` keeps its partition and its stored
    report: a home switched from fast kept extractive reports for good (a sweep found 19 of 133).
    The build's to-do list takes every report of the other kind of writer (an LLM report that fell
    back to the extractive text counts as the LLM's) until none is left outside it; a switch undone
    before that is looked at again; a new model or GRAPHRAG_LLM_REPORTS turned on under the same
    method is not a reason (paid calls: the UI's decision)."""
    from graphrag_pipeline.cli import _reports_of_another_method
    from graphrag_pipeline.reports.offline import CommunityReport
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    paths = Paths(home)
    paths.state_dir.mkdir(parents=True, exist_ok=True)
    store = Store(paths)

    def report(cid: str, generator: str) -> None:
        store.write_report(
            CommunityReport(cid, 0, f"title {cid}", "summary", 1.0, "why", [], [], generator == "extractive", generator)
        )

    for cid in "abcd":
        report(cid, "extractive")
    keys = ["a", "b", "c", "d", "e"]  # e: no report yet (already in the to-do list)
    assert _reports_of_another_method(paths, store, "fast", keys, ["e"]) == ["e"]  # all of fast's kind: marked
    # switched to light: the extractive ones are written again (a fallback counts as the LLM's)
    report("c", "extractive-fallback")
    assert _reports_of_another_method(paths, store, "light", keys, ["e"]) == ["a", "b", "d", "e"]
    # the switch undone before a light build finished: fast looks again, and rewrites what the LLM wrote
    report("a", "llm:model-1#abc")
    assert _reports_of_another_method(paths, store, "fast", keys, []) == ["a", "c"]
    report("a", "extractive")
    report("c", "extractive")
    assert _reports_of_another_method(paths, store, "fast", keys, []) == []  # marked for fast
    # light again, all rewritten by the LLM (another model for one: still the LLM's kind): marked
    assert _reports_of_another_method(paths, store, "light", keys, ["a", "b", "c", "d", "e"]) == keys
    for cid, model in zip(keys, ["model-1", "model-1", "model-2", "model-1", "model-1"]):
        report(cid, f"llm:{model}#abc")
    assert _reports_of_another_method(paths, store, "light", keys, []) == []
    # GRAPHRAG_LLM_REPORTS turned off under the same method: nothing is rewritten by itself
    monkeypatch.setenv("GRAPHRAG_LLM_REPORTS", "false")
    assert _reports_of_another_method(paths, store, "light", keys, []) == []


def test_failed_and_cut_chunks_are_read_again_only_for_documents_whose_files_changed(tmp_path):
    """Which documents have failed chunks (or chunks read from cut answers) is remembered with their
    subgraph files' signatures: a document re-extracted by any run (a sensor's, a backfill) is read
    again, a damaged record counts none and does not stop the build, the others are not read."""
    from types import SimpleNamespace

    from graphrag_pipeline.cli import _chunk_problems
    from graphrag_pipeline.storage.files import DamagedFileError

    class Store:
        def __init__(self):
            self.paths = SimpleNamespace(state_dir=tmp_path)
            self.sig = {"a": "1", "b": "1", "c": "1"}
            self.info = {
                "a": {"failed_chunks": [{"chunk_id": "a1"}, {"chunk_id": "a2"}]},
                "b": {"failed_chunks": [], "cut_chunks": [{"chunk_id": "b1", "answers": ["k1", "k2"]}]},
                "c": None,
            }
            self.reads = []

        def subgraph_signatures(self, keys):
            return {k: self.sig[k] for k in keys}

        def subgraph_info(self, key):
            self.reads.append(key)
            if self.info[key] == "damaged":
                raise DamagedFileError(f"{key}.json is damaged", key)
            return self.info[key]

    store = Store()
    both = {
        "a": {"failed": 2, "failed_ids": ["a1", "a2"], "cut": []},
        "b": {"failed": 0, "failed_ids": [], "cut": ["k1", "k2"]},
    }
    assert _chunk_problems(store, ["a", "b", "c"]) == both
    assert sorted(store.reads) == ["a", "b", "c"]
    store.reads.clear()
    assert _chunk_problems(store, ["a", "b", "c"]) == both and store.reads == []  # nothing changed
    # `a` extracted again elsewhere, now whole; `b` damaged; `c` removed from the corpus
    store.info.update(a={"failed_chunks": []}, b="damaged")
    store.sig.update(a="2", b="2")
    assert _chunk_problems(store, ["a", "b"]) == {} and sorted(store.reads) == ["a", "b"]
    # a marker that cannot be read is rebuilt
    (tmp_path / "failed-chunks.json").write_text("{not json")
    store.info.update(b={"failed_chunks": [{"chunk_id": "b2"}]})
    store.sig.update(b="3")
    assert _chunk_problems(store, ["a", "b"]) == {"b": {"failed": 1, "failed_ids": ["b2"], "cut": []}}
    # found by review: what a damaged or hand-edited record holds in place of lists and strings
    # crashed the end of a build (an unhashable answer) or printed "with  extracted again" (an
    # empty one); it is left out, and a failure recorded without its chunk's id still counts
    from graphrag_pipeline.cli import _unique_failed

    store.info.update(
        a=["not", "a", "record"],
        b={"failed_chunks": 5, "cut_chunks": [{"chunk_id": "b1", "answers": [["k"], "", None, 7, "k3"]}, "x"]},
        c={"failed_chunks": [{}, {"chunk_id": 9}], "cut_chunks": {"answers": ["k4"]}},
    )
    store.sig.update(a="4", b="4", c="4")
    found = _chunk_problems(store, ["a", "b", "c"])
    assert found == {
        "b": {"failed": 0, "failed_ids": [], "cut": ["k3"]},
        "c": {"failed": 2, "failed_ids": [], "cut": []},
    }
    assert _unique_failed(found, ["a", "b", "c"]) == 2
    # and the same of what the marker remembers (read as it is while the files are unchanged)
    import json

    (tmp_path / "failed-chunks.json").write_text(
        json.dumps(
            {
                "signatures": {"a": "4", "b": "4", "c": "4"},
                "chunk_problems": {
                    "a": ["junk"],
                    "b": {"failed": True, "failed_ids": [["x"]], "cut": [["k"], "", None, "k5"]},
                    "c": {"failed": 3},
                },
            }
        )
    )
    store.reads.clear()
    found = _chunk_problems(store, ["a", "b", "c"])
    assert store.reads == [] and found == {
        "b": {"failed": 0, "failed_ids": [], "cut": ["k5"]},
        "c": {"failed": 3, "failed_ids": [], "cut": []},
    }
    assert _unique_failed(found, ["a", "b", "c"]) == 3
