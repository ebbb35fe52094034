"""The LLM methods end to end through Dagster, against the scripted OpenAI-compatible server:
extraction with gleaning and the logit-bias loop check, LLM resolution, LLM reports, summaries,
query rewrite and answers, caching (a rebuild makes zero calls), an edit paying only for what
changed, and endpoint faults failing only the affected documents."""

from __future__ import annotations

import json

import pytest

from graphrag_pipeline.extract.llm import loop_logit_bias
from graphrag_pipeline_tests.conftest import cli, cli_json
from graphrag_pipeline_tests.fake_llm import KINDS, FakeLLM, _text_of, classify, records_for
from graphrag_pipeline_tests.llm_server import Reply, ScriptedLLMServer

SECRET = "test-key-SECRET-do-not-leak"


@pytest.fixture
def fake():
    return FakeLLM()


@pytest.fixture
def server(fake, monkeypatch, home, corpus):
    with ScriptedLLMServer(fake) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("GRAPHRAG_LLM_MODEL", "fake-model")
        monkeypatch.setenv("GRAPHRAG_LLM_MAX_RETRIES", "2")
        monkeypatch.setenv("GRAPHRAG_LLM_TIMEOUT", "5")
        yield srv


def _failing_when(fake, prompt_test=None, *, kind: str | None = None, status: int = 503):
    """A responder answering HTTP `status` to the requests whose last prompt passes `prompt_test`
    (or whose kind is `kind`), and as `fake` does to every other."""

    def responder(body):
        if (prompt_test is not None and prompt_test(body["messages"][-1]["content"])) or (
            kind is not None and classify(body["messages"]) == kind
        ):
            return Reply(status=status, text="overloaded")
        return fake(body)

    return responder


def kinds(srv, start: int = 0) -> dict[str, int]:
    out: dict[str, int] = {}
    for body in srv.requests[start:]:
        k = classify(body["messages"])
        out[k] = out.get(k, 0) + 1
    return out


def test_general_build_with_gleaning_llm_reports_then_free_rebuild(server, fake, corpus, home):
    fake.glean_text = '("entity"<|>"GLEANED THING"<|>"category"<|>"Found in the second round")<|COMPLETE|>'
    code, out = cli("build", "--corpus", str(corpus), "--method", "general")
    assert code == 0, out
    assert SECRET not in out
    k = kinds(server)
    chunks = sum(json.loads(p.read_text())["chunks"] for p in (home / "tables" / "chunks").glob("*.json"))
    assert k["general_extract"] == chunks
    assert k["general_continue"] == chunks  # default: one gleaning round
    assert "general_loop" not in k  # the loop check only runs between rounds
    assert k["report"] > 0 and k.get("resolution", 0) >= 0
    stats = cli_json("stats", "--json")
    assert stats["llm"]["calls"] == len(server.requests)
    assert stats["llm"]["prompt_tokens"] > 0 and stats["llm"]["completion_tokens"] > 0
    names = {e["name"] for e in cli_json("query", "GLEANED THING", "--json")["entities"]}
    assert "GLEANED THING" in names
    report = json.loads(next((home / "reports").glob("*.json")).read_text())
    assert report["extractive"] is False and report["findings"]

    before = len(server.requests)
    code, out = cli("build", "--corpus", str(corpus), "--method", "general")
    assert code == 0 and "everything is up to date" in out
    assert len(server.requests) == before

    # forget every extraction result: the rebuild asks the LLM again, and the response cache
    # answers every one of those prompts without a single HTTP call
    import shutil
    import sqlite3

    shutil.rmtree(home / "tables" / "doc_subgraph")
    con = sqlite3.connect(home / "cache" / "cache.sqlite")
    con.execute("DELETE FROM extraction")
    con.commit()
    con.close()
    code, out = cli("build", "--corpus", str(corpus), "--method", "general")
    assert code == 0, out
    assert len(server.requests) == before
    assert cli_json("stats", "--json")["llm"]["cache_hits"] >= 2 * chunks  # extraction + gleaning per chunk


def test_general_loop_check_uses_logit_bias_and_single_token(server, fake, corpus, home, monkeypatch):
    monkeypatch.setenv("GRAPHRAG_MAX_GLEANINGS", "3")
    fake.loop_answer = "NO"
    for p in list(corpus.iterdir())[1:]:
        p.unlink()
    code, out = cli("build", "--corpus", str(corpus), "--method", "general")
    assert code == 0, out
    loops = [b for b in server.requests if classify(b["messages"]) == "general_loop"]
    assert loops, "the loop check must run between gleaning rounds"
    for body in loops:
        assert body["max_tokens"] == 1
        assert {int(k): v for k, v in body["logit_bias"].items()} == loop_logit_bias()
    k = kinds(server)
    # NO after the first round stops gleaning: one continuation per chunk, not three
    assert k["general_continue"] == k["general_extract"] == len(loops)


def test_light_build_with_messy_outputs_and_a_failed_chunk(server, fake, corpus, home, monkeypatch):
    fake.quote_fields = False
    for p in list(corpus.iterdir()):
        if p.name not in ("darwin_and_wallace.txt", "turing_and_bletchley_park.txt"):
            p.unlink()

    cut = []

    def override(prompt):
        if "Bletchley" in prompt:
            return "Sorry, I cannot help with that."  # never parses: the chunk fails, the document survives
        if "Wallace" in prompt:  # cut at the endpoint's output limit: parsed as far as it goes, and said
            whole = records_for(_text_of(prompt), True, False)
            cut.append(prompt)
            return Reply(text=whole[: len(whole) // 2], finish_reason="length")
        return None

    fake.extract_override = override
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    info = json.loads((home / "tables" / "doc_subgraph" / "turing_and_bletchley_park.txt.json").read_text())
    assert info["failed_chunks"] and "Sorry" in info["failed_chunks"][0]["raw"]
    darwin = json.loads((home / "tables" / "doc_subgraph" / "darwin_and_wallace.txt.json").read_text())
    assert darwin["entities"] > 5 and not darwin["failed_chunks"]
    # the chunks read from cut answers are recorded with the cache keys of those answers
    assert len(darwin["cut_chunks"]) == len(cut) and all(len(c["answers"]) == 1 for c in darwin["cut_chunks"])
    # the failing chunk was retried a bounded number of times, the others asked once
    k = kinds(server)
    assert k["light_extract"] == 3 * len(info["failed_chunks"]) + sum(
        json.loads(p.read_text())["chunks"] for p in (home / "tables" / "chunks").glob("*.json")
    ) - len(info["failed_chunks"])
    assert cut and f"llm_truncated_answers={len(cut)}" in out
    failed = len(info["failed_chunks"])
    assert f"note: no extraction for {failed} chunk" in out and "of 1 document:" in out and "--refresh failed" in out
    assert f"note: {len(cut)} answer" in out and "cut at the endpoint's output limit" in out, out

    # not asked again by itself (the same prompt would fail again): said at every build
    before = len(server.requests)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0 and "everything is up to date" in out and "--refresh failed" in out
    assert f"note: {len(cut)} answer" in out
    assert len(server.requests) == before

    # the model answers now (a newer model, or a parser that reads what it wrote): asked again when told to
    fake.extract_override = None
    code, out = cli("build", "--corpus", str(corpus), "--method", "light", "--refresh", "failed")
    assert code == 0, out
    said = f"refresh: 2 documents with {failed} failed chunk{'s' if failed > 1 else ''} and {len(cut)} cut answer"
    assert said in out and "extracted again" in out, out
    assert "no extraction" not in out and "cut at the endpoint" not in out
    # the cache answers the chunks that worked; the failed ones and the cut ones are asked again
    assert kinds(server, before)["light_extract"] == failed + len(cut)
    info = json.loads((home / "tables" / "doc_subgraph" / "turing_and_bletchley_park.txt.json").read_text())
    assert not info["failed_chunks"] and info["entities"] > 0
    whole = json.loads((home / "tables" / "doc_subgraph" / "darwin_and_wallace.txt.json").read_text())
    assert not whole["cut_chunks"] and whole["relations"] > darwin["relations"]
    names = {e["name"].lower() for e in cli_json("query", "Bletchley Park", "--json")["entities"]}
    assert any("bletchley" in n for n in names)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0 and "everything is up to date" in out and "no extraction" not in out
    assert "cut at the endpoint" not in out
    # nothing left to ask again
    code, out = cli("build", "--corpus", str(corpus), "--method", "light", "--refresh", "failed")
    assert code == 0 and "refresh: no document has failed chunks or cut answers" in out


def _cut_where_wallace(prompt):
    """The endpoint's output limit cuts, at half way, every extraction answer about Wallace."""
    if "Wallace" in prompt:
        whole = records_for(_text_of(prompt), True, False)
        return Reply(text=whole[: len(whole) // 2], finish_reason="length")
    return None


def test_refresh_failed_asks_again_the_cut_answers_of_a_document_edited_since(server, fake, corpus, home, monkeypatch):
    # found by review: `--refresh failed` retired the cut answers only of the documents that were not
    # already to be extracted again, so an edited document kept the cached cut answers of its
    # unchanged chunks (and the build said no document had any)
    monkeypatch.setenv("GRAPHRAG_CHUNK_TOKENS", "120")
    monkeypatch.setenv("GRAPHRAG_CHUNK_OVERLAP", "10")
    for p in list(corpus.iterdir()):
        if p.name != "darwin_and_wallace.txt":
            p.unlink()

    fake.extract_override = _cut_where_wallace
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    record = home / "tables" / "doc_subgraph" / "darwin_and_wallace.txt.json"
    cut = json.loads(record.read_text())["cut_chunks"]
    chunks = json.loads((home / "tables" / "chunks" / "darwin_and_wallace.txt.json").read_text())["chunks"]
    assert 1 <= len(cut) < chunks, "the scenario needs cut answers in chunks the edit leaves alone"
    doc = corpus / "darwin_and_wallace.txt"
    doc.write_text(doc.read_text(encoding="utf-8") + "\n\nIn 1882 Darwin was buried in Westminster Abbey.\n")
    fake.extract_override = None
    code, out = cli("build", "--corpus", str(corpus), "--method", "light", "--refresh", "failed")
    assert code == 0, out
    assert not json.loads(record.read_text())["cut_chunks"], out
    assert "no document has failed chunks or cut answers" not in out
    assert f"refresh: 1 document with {len(cut)} cut answer" in out, out
    assert "cut at the endpoint" not in out


def _never_parses_where_bletchley(prompt):
    return "Sorry, I cannot help with that." if "Bletchley" in prompt else None


@pytest.mark.parametrize(
    "override, record, said, refreshed",
    [
        # found by review: recorded as cut for both documents since 55b918d, counted once per document
        (
            _cut_where_wallace,
            "cut_chunks",
            "note: 1 answer to the extraction prompts of 2 documents was cut",
            "refresh: 2 documents with 1 cut answer extracted again",
        ),
        (
            _never_parses_where_bletchley,
            "failed_chunks",
            "note: no extraction for 1 chunk of 2 documents:",
            "refresh: 2 documents with 1 failed chunk extracted again",
        ),
    ],
    ids=["cut-answer", "failed-chunk"],
)
def test_a_chunk_two_documents_share_is_counted_once(server, fake, corpus, home, override, record, said, refreshed):
    # a chunk that two documents have (a copied file) is extracted once for both and its cut answer,
    # or its answer that never parses, recorded by each: the notes counted it once per document
    for p in list(corpus.iterdir()):
        p.unlink()
    text = "Darwin corresponded with Wallace. Turing broke the Enigma cipher at Bletchley Park.\n"
    for name in ("notes.txt", "copy_of_notes.txt"):
        (corpus / name).write_text(text, encoding="utf-8")
    (corpus / "beagle.txt").write_text("Darwin sailed on HMS Beagle with Captain FitzRoy.\n", encoding="utf-8")

    fake.extract_override = override
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    for name in ("notes.txt", "copy_of_notes.txt"):
        assert len(json.loads((home / "tables" / "doc_subgraph" / f"{name}.json").read_text())[record]) == 1
    assert said in out, out
    fake.extract_override = None
    code, out = cli("build", "--corpus", str(corpus), "--method", "light", "--refresh", "failed")
    assert code == 0 and refreshed in out, out
    assert "cut at the endpoint" not in out and "no extraction for" not in out, out


def test_failed_chunks_are_counted_by_id_and_an_older_record_as_it_is():
    from graphrag_pipeline.cli import _unique_failed

    found = {
        "a.txt": {"failed": 2, "failed_ids": ["c1", "c2"]},
        "b.txt": {"failed": 1, "failed_ids": ["c2"]},  # a chunk a.txt has too
        "old.txt": {"failed": 3, "cut": []},  # kept in state/failed-chunks.json by an older version
    }
    assert _unique_failed(found, ["a.txt", "b.txt"]) == 2
    assert _unique_failed(found, ["a.txt", "b.txt", "old.txt"]) == 5
    assert _unique_failed(found, ["b.txt", "missing.txt"]) == 1
    # ids that do not account for every failure (or are not strings): the failures count as they are
    found = {"a.txt": {"failed": 2, "failed_ids": ["c1"]}, "b.txt": {"failed": 1, "failed_ids": [["c1"]]}}
    assert _unique_failed(found, ["a.txt", "b.txt"]) == 3


def test_reports_written_without_the_model_are_said_and_asked_again_on_refresh(server, fake, corpus, home):
    # a bad spell of the endpoint: every report answer unusable, so each report is the extractive text
    for p in list(corpus.iterdir()):
        if p.name not in ("darwin_and_wallace.txt", "turing_and_bletchley_park.txt"):
            p.unlink()
    fake.report_override = lambda prompt: ""
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    generators = {json.loads(p.read_text())["generator"] for p in (home / "reports").glob("*.json")}
    assert generators == {"extractive-fallback"}
    total = len(list((home / "reports").glob("*.json")))
    assert f"note: {total} community report" in out and "--refresh failed" in out, out
    # said again at every build (from state/fallback-reports.json: reports unchanged since are not
    # read again), and not asked again by itself
    assert len(json.loads((home / "state" / "fallback-reports.json").read_text())["fallback"]) == total
    before = len(server.requests)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0 and "everything is up to date" in out and f"note: {total} community report" in out
    assert len(server.requests) == before
    # the endpoint answers again: --refresh failed writes them with the model, nothing else is redone
    fake.report_override = None
    code, out = cli("build", "--corpus", str(corpus), "--method", "light", "--refresh", "failed")
    assert code == 0, out
    assert f"refresh: {total} community reports written without the model asked again" in out
    assert kinds(server, before) == {"report": total}
    generators = {json.loads(p.read_text())["generator"] for p in (home / "reports").glob("*.json")}
    assert len(generators) == 1 and generators.pop().startswith("llm:")
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0 and "everything is up to date" in out and "community report" not in out


def test_editing_one_document_pays_only_for_changed_chunks_and_communities(server, fake, corpus, home):
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    start = len(server.requests)
    doc = corpus / "newton_and_the_royal_society.md"
    doc.write_text(
        doc.read_text(encoding="utf-8") + "\n\nIn 1705 Queen Anne knighted Isaac Newton at Trinity College.\n",
        encoding="utf-8",
    )
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    k = kinds(server, start)
    assert 1 <= k.get("light_extract", 0) <= 2  # only the changed chunk(s) of the edited document
    reports_before = start and k.get("report", 0)
    all_reports = len(list((home / "reports").glob("*.json")))
    assert reports_before < all_reports  # only changed communities get a new report


def test_query_rewrite_and_answers(server, fake, corpus, home, monkeypatch):
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    start = len(server.requests)
    res = cli_json("query", "Who was Ada Lovelace?", "--json", "--answer")
    k = kinds(server, start)
    assert k.get("rewrite") == 1 and k.get("local_answer") == 1
    assert res["answer"].startswith("LOCAL ANSWER")
    assert any("LOVELACE" in e["name"].upper() for e in res["entities"]), res["entities"]
    g = cli_json("query", "What are the main themes?", "--mode", "global", "--json", "--answer")
    k = kinds(server, start)
    assert k.get("global_map", 0) >= 1 and k.get("global_reduce") == 1
    assert g["answer"].startswith("GLOBAL ANSWER")
    # the endpoint goes away: a search still answers from the index (the question analysed offline)
    server.stop()
    monkeypatch.setenv("GRAPHRAG_LLM_MAX_RETRIES", "0")
    res = cli_json("query", "Who was Ada Lovelace?", "--mode", "local", "--json")
    assert any("LOVELACE" in e["name"].upper() for e in res["entities"]), res["entities"]


def test_a_global_answer_whose_map_calls_all_failed_is_an_error_not_an_answer(
    server, fake, corpus, home, monkeypatch, capsys
):
    # found by an exploratory run: with every map call failing, global --answer exited 0 with
    # "The community reports contain nothing that answers this question" (made up: none was read)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    monkeypatch.setenv("GRAPHRAG_LLM_MAX_RETRIES", "0")
    original = fake.__call__
    failing = {"maps": 10**6}

    def maps_fail(body):
        if classify(body["messages"]) == "global_map" and failing["maps"] > 0:
            failing["maps"] -= 1
            return Reply(status=503, text="overloaded")
        return original(body)

    server.responder = maps_fail
    code, out = cli("query", "What are the main themes?", "--mode", "global", "--json", "--answer")
    err = capsys.readouterr().err
    assert code == 2, out
    assert "HTTP 503" in err and "nothing that answers" not in out
    # one map call failing of several: the answer is written from the others, and the failure said
    failing["maps"] = 1
    start = len(server.requests)
    code, out = cli("query", "What are the main themes?", "--mode", "global", "--json", "--answer")
    assert code == 0, out
    assert json.loads(out)["answer"].startswith("GLOBAL ANSWER")
    assert kinds(server, start).get("global_map", 0) >= 2


def test_answer_without_llm_explains(home, corpus, capsys):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0
    code, out = cli("query", "Who was Ada Lovelace?", "--json", "--answer")
    assert code == 0 and json.loads(out)["answer"] is None
    assert "no LLM endpoint is set" in capsys.readouterr().err


def test_endpoint_failures_fail_only_the_affected_documents(server, fake, corpus, home):
    for p in list(corpus.iterdir()):
        if p.name not in ("darwin_and_wallace.txt", "curie_radioactivity.md"):
            p.unlink()
    original = fake.__call__
    server.responder = _failing_when(fake, lambda prompt: "Radium Institute" in prompt or "polonium" in prompt)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code != 0
    assert "could not be extracted" in out and "curie_radioactivity.md" in out, out
    # the stages after the documents run on their own: the other document's work is merged
    assert "[graph] merging, resolving and clustering" in out and "knowledge_graph (" in out, out
    assert SECRET not in out
    assert (home / "tables" / "doc_subgraph" / "darwin_and_wallace.txt.json").exists()
    assert not (home / "tables" / "doc_subgraph" / "curie_radioactivity.md.json").exists()
    # the endpoint recovers: the next build extracts only the failed document
    server.responder = original
    start = len(server.requests)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    k = kinds(server, start)
    darwin_chunks = json.loads((home / "tables" / "chunks" / "darwin_and_wallace.txt.json").read_text())["chunks"]
    curie_chunks = json.loads((home / "tables" / "chunks" / "curie_radioactivity.md.json").read_text())["chunks"]
    assert k["light_extract"] <= curie_chunks < curie_chunks + darwin_chunks


def test_a_model_answering_nothing_usable_to_any_extraction_fails_the_build(server, fake, corpus, home, capsys):
    # an endpoint that answers every extraction prompt with an empty text (a wrong model name behind
    # a proxy, a broken deployment): not an empty corpus, so the build must not end "finished"
    for p in list(corpus.iterdir()):
        if p.name not in ("darwin_and_wallace.txt", "turing_and_bletchley_park.txt"):
            p.unlink()
    fake.extract_override = lambda prompt: ""
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    err = capsys.readouterr().err
    assert code == 1, out
    assert "error: no extraction at all" in err and "of 2 documents could not be used" in err, err
    assert "--refresh failed" in err and "build FAILED" in out
    # said again while nothing changed
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 1 and "error: no extraction at all" in capsys.readouterr().err
    # the endpoint answers again: the refresh builds the graph, and the build succeeds
    fake.extract_override = None
    code, out = cli("build", "--corpus", str(corpus), "--method", "light", "--refresh", "failed")
    assert code == 0, out
    assert "no extraction" not in out + capsys.readouterr().err
    assert cli_json("stats", "--json")["entities"] > 0


def test_embedding_calls_are_in_the_ledger_and_the_index_steps_metadata(home, corpus, monkeypatch):
    # found by an exploratory run: the endpoint saw 10 embedding requests, `stats` counted none
    from graphrag_pipeline.llm.client import forget_endpoint_health

    forget_endpoint_health()
    with ScriptedLLMServer() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("GRAPHRAG_EMBEDDING_MODEL", "test-embed")
        code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
        assert code == 0, out
        sent = len(srv.embedding_requests)
        assert sent > 0 and srv.chat_count == 0
        stats = cli_json("stats", "--json")
        assert stats["llm"]["calls"] == sent
        import dagster as dg

        from graphrag_pipeline.defs.partitions import asset_key

        inst = dg.DagsterInstance.get()
        mat = inst.get_latest_materialization_event(asset_key("search_index")).asset_materialization
        assert mat.metadata["llm_calls"].value == sent and mat.metadata["prompt_tokens"].value > 0


def test_no_answer_is_paid_for_when_nothing_fits_the_context(server, fake, corpus, home, capsys):
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    start = len(server.requests)
    code, out = cli("query", "Who was Ada Lovelace?", "--mode", "local", "--json", "--answer", "--max-tokens", "0")
    # nothing fits: an empty result (exit 3), and no answer made up from an empty context
    assert code == 3 and json.loads(out)["answer"] is None, out
    assert "local_answer" not in kinds(server, start)
    assert "no results" in capsys.readouterr().err


def test_a_failed_graph_stage_is_not_run_again_in_the_same_build(server, fake, corpus, home, monkeypatch):
    # found by an exploratory run: resolution failing after its retries in the run after the
    # documents was run again by the build's "[graph]" phase, sending every request a second time
    monkeypatch.setenv("GRAPHRAG_LLM_MAX_RETRIES", "0")
    original = fake.__call__
    server.responder = _failing_when(fake, kind="resolution", status=500)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code != 0
    assert "FAILED" in out and "resolved_graph" in out, out
    assert "[graph] merging, resolving and clustering" not in out, out
    asked = [body["messages"][-1]["content"] for body in server.requests if classify(body["messages"]) == "resolution"]
    assert asked and len(asked) == len(set(asked)), f"{len(asked)} resolution requests, {len(set(asked))} distinct"
    # the endpoint recovers: the next build resolves and publishes
    server.responder = original
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    assert "search_index" in out


def _sources_not_in_chunks(home) -> int:
    """Source ids of the published entities and relations that name no published chunk."""
    import duckdb

    con = duckdb.connect(str(home / "index" / "search_index.duckdb"), read_only=True)
    try:
        return con.execute(
            "SELECT count(*) FROM (SELECT unnest(source_ids) AS s FROM entities UNION ALL "
            "SELECT unnest(source_ids) FROM relations) WHERE s NOT IN (SELECT chunk_id FROM chunks)"
        ).fetchone()[0]
    finally:
        con.close()


def _fails_on_darwin_then_recovers(server, fake, corpus, home, marker: str, *failing_args: str) -> str:
    """A build whose extraction prompts holding `marker` (darwin_and_wallace.txt's) fail: it exits
    non-zero naming the document, and no published entity cites a chunk the index lacks; then a
    build with the endpoint recovered (the outputs of both returned)."""
    original = fake.__call__
    extraction = KINDS["light_extract"]
    server.responder = _failing_when(fake, lambda prompt: marker in prompt and extraction in prompt)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light", *failing_args)
    assert code != 0 and "darwin_and_wallace.txt" in out, out
    assert _sources_not_in_chunks(home) == 0
    entities = cli_json("query", "Who was Charles Darwin?", "--json")["entities"]
    assert entities and all(e["sources"] for e in entities), entities
    server.responder = original
    code, recovered = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, recovered
    return out, recovered


def test_an_edit_whose_extraction_fails_keeps_the_documents_previous_chunks_in_the_index(server, fake, corpus, home):
    # found by an exploratory run: the edited document's new chunks were published while the graph
    # kept what its earlier text gave, so its entities cited chunks the index no longer had
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    assert _sources_not_in_chunks(home) == 0
    doc = corpus / "darwin_and_wallace.txt"
    original_text = doc.read_text()
    doc.write_text(original_text + "\n\nIn 1860 Thomas Huxley debated Samuel Wilberforce at the Oxford museum.\n")
    # the endpoint recovers: the document's new chunks and what they give are published
    _, out = _fails_on_darwin_then_recovers(server, fake, corpus, home, "Wilberforce")
    assert _sources_not_in_chunks(home) == 0
    assert "Wilberforce" in json.dumps(
        cli_json("query", "Who debated Samuel Wilberforce?", "--mode", "naive", "--json")
    )


def test_a_document_chunked_again_whose_extraction_fails_keeps_its_previous_chunks_in_the_index(
    server, fake, corpus, home, monkeypatch
):
    # the same content chunked otherwise (a smaller GRAPHRAG_CHUNK_TOKENS, then `--refresh stale`)
    # gives new chunk ids; the extraction fails, the graph keeps what the old chunks gave: the index
    # must keep the old chunks (the content hash alone does not tell them apart)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    assert _sources_not_in_chunks(home) == 0
    monkeypatch.setenv("GRAPHRAG_CHUNK_TOKENS", "300")
    # (no breaker: the other documents go on, and the failing build publishes the index)
    monkeypatch.setenv("GRAPHRAG_LLM_BREAKER", "1000")
    monkeypatch.setenv("GRAPHRAG_LLM_MAX_RETRIES", "0")
    failed, out = _fails_on_darwin_then_recovers(server, fake, corpus, home, "Wallace", "--refresh", "stale")
    assert "search_index (" in failed, failed  # published, with the old chunks of that document kept
    # the next build finds the document's subgraph behind its chunks and extracts it again
    assert "1 to process" in out, out
    assert _sources_not_in_chunks(home) == 0
    code, out = cli("verify")
    assert code == 0, out


def test_report_answers_on_the_wire_when_a_report_call_fails_are_in_the_ledger(server, fake, corpus, home, monkeypatch):
    # found by an exploratory run: the failed step recorded its usage while other report calls were
    # still on the wire; they were answered (paid, cached) and never counted by `stats`
    import threading

    monkeypatch.setenv("GRAPHRAG_LLM_MAX_RETRIES", "0")
    original = fake.__call__
    lock = threading.Lock()
    answered, failed = [], []

    def one_report_fails(body):
        report = classify(body["messages"]) == "report"
        with lock:
            fail = report and not failed
            (failed if fail else answered).append(1)
        if fail:
            return Reply(status=500, text="report backend down")
        text = original(body)
        return Reply(text=text, delay_s=1.0) if report else text

    server.responder = one_report_fails
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code != 0 and "community_reports" in out, out
    assert failed and len(answered) > 0
    _, stats = cli("stats", "--json")  # (no index was published yet: stats says so and exits 1)
    assert json.loads(stats)["llm"]["calls"] == len(answered)
