"""`graphrag-pipeline serve` through real HTTP: a uvicorn server on a free 127.0.0.1 port over a
home built from the bundled corpus with the CLI (the CLI's own server in a subprocess, the app of
create_app in a thread where a test needs other settings)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time

import pytest

from graphrag_pipeline.index.duckdb_reader import DuckDBIndex
from graphrag_pipeline.index.es_reader import EsIndex
from graphrag_pipeline.index.protocol import GraphLookup
from graphrag_pipeline.serve import create_app
from graphrag_pipeline_tests.conftest import cli, cli_json
from graphrag_pipeline_tests.serve_support import (
    QUESTION,
    build_home,
    clean_env,
    free_port,
    http,
    running,
    same_result,
    wait_healthy,
)
from graphrag_pipeline_tests.test_elasticsearch import es_env, es_up  # noqa: F401 - fixtures
from graphrag_pipeline_tests.test_protocols import signature_problems


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(home, corpus) built once for the tests that only read it."""
    return build_home(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(built):
    """`graphrag-pipeline serve` itself, in a subprocess on a free port."""
    home, _ = built
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphrag_pipeline.cli", "serve", "--port", str(port), "--log-level", "warning"],
        env=clean_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc=proc)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query_json(home, question: str, mode: str = "local") -> dict:
    import os

    old = os.environ.get("GRAPHRAG_HOME")
    os.environ["GRAPHRAG_HOME"] = str(home)
    try:
        return cli_json("query", question, "--mode", mode, "--json")
    finally:
        if old is None:
            os.environ.pop("GRAPHRAG_HOME", None)
        else:
            os.environ["GRAPHRAG_HOME"] = old


@pytest.mark.parametrize("cls", [DuckDBIndex, EsIndex])
def test_both_index_readers_have_the_graph_lookup_signatures(cls):
    assert issubclass(cls, GraphLookup)
    assert signature_problems(GraphLookup, cls) == []


def test_health_says_what_is_served(server, built):
    status, body = http("GET", f"{server}/health")
    assert status == 200 and body["status"] == "ok"
    assert body["index"]["backend"] == "duckdb" and body["index"]["counts"]["entities"] > 0
    assert body["index"]["index_version"] >= 1
    assert set(body["modes"]) >= {"local", "global", "naive"} and body["auth"] is False


@pytest.mark.parametrize("mode", ["mix", "local", "global", "naive"])
def test_post_query_is_the_json_of_query_json(server, built, mode):
    home, _ = built
    status, body = http("POST", f"{server}/query", {"question": QUESTION, "mode": mode})
    assert status == 200, body
    assert same_result(body, query_json(home, QUESTION, mode))
    assert body["mode"] == mode and (body["entities"] or body["community_reports"] or body["chunks"])


def test_search_params_are_passed_on(server):
    status, body = http("POST", f"{server}/query", {"question": QUESTION, "params": {"ent_topn": 2, "rel_topn": 1}})
    assert status == 200 and len(body["entities"]) == 2 and len(body["relations"]) <= 1


def test_entity_lookup_with_neighbours_and_sources(server):
    status, body = http("GET", f"{server}/entities/charles%20darwin?neighbours=5")
    assert status == 200, body
    assert body["entity"]["name"] == "Charles Darwin" and body["entity"]["type"] == "PERSON"
    assert 0 < len(body["relations"]) <= 5
    assert all("Charles Darwin" in (r["source"], r["target"]) for r in body["relations"])
    assert body["neighbours"] and all(n["name"] != "Charles Darwin" for n in body["neighbours"])
    weights = [r["weight"] for r in body["relations"]]
    assert weights == sorted(weights, reverse=True)
    assert body["sources"] and any(s["doc"] == "darwin_and_wallace.txt" for s in body["sources"])
    # a source opens as its chunk's text
    source = next(s for s in body["sources"] if s["doc"] == "darwin_and_wallace.txt")
    status, chunk = http("GET", f"{server}/chunks/{source['chunk_id']}")
    assert status == 200 and chunk["doc"] == "darwin_and_wallace.txt" and "Charles Darwin" in chunk["text"]


def test_bad_requests_get_a_4xx_with_a_message(server):
    status, body = http("POST", f"{server}/query", {"question": QUESTION, "mode": "bogus"})
    assert status == 422 and "local" in body["detail"] and "naive" in body["detail"] and "bogus" in body["detail"]
    status, body = http("POST", f"{server}/query", {"question": "   "})
    assert status == 422 and "empty" in body["detail"]
    status, body = http("POST", f"{server}/query", {"mode": "local"})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "question"]
    status, body = http("POST", f"{server}/query", raw=b"{not json")
    assert status == 422 and body["detail"]
    status, body = http("POST", f"{server}/query", {"question": QUESTION, "params": {"nope": 1}})
    assert status == 422 and "nope" in body["detail"] and "ent_topn" in body["detail"]
    status, body = http("POST", f"{server}/query", {"question": QUESTION, "params": {"ent_topn": 1.5}})
    assert status == 422 and "ent_topn" in body["detail"]
    status, body = http("GET", f"{server}/entities/no%20such%20entity%20at%20all")
    assert status == 404 and "no such entity at all" in body["detail"]
    status, body = http("GET", f"{server}/chunks/chunk-0000")
    assert status == 404 and "chunk-0000" in body["detail"]
    status, body = http("GET", f"{server}/entities/darwin?neighbours=-1")
    assert status == 422
    # a question over the limit: which field and why, without the whole input said back
    status, body = http("POST", f"{server}/query", {"question": "q" * 4001})
    assert status == 422 and body["detail"][0]["loc"] == ["body", "question"]
    assert "4000" in json.dumps(body) and len(json.dumps(body)) < 1000, body


def test_a_too_large_body_gets_413(server):
    big = {"question": "x" * 100_000}
    status, body = http("POST", f"{server}/query", big)
    assert status == 413 and "larger than 65536 bytes" in body["detail"]
    status, body = http("POST", f"{server}/query", {"question": QUESTION})  # the server is fine afterwards
    assert status == 200


def test_page_and_openapi_docs_are_served(server):
    status, page = http("GET", f"{server}/")
    assert status == 200 and "cytoscape.min.js" in page and "app.js" in page
    status, js = http("GET", f"{server}/static/cytoscape.min.js")
    assert status == 200 and len(js) > 100_000
    status, spec = http("GET", f"{server}/openapi.json")
    assert status == 200 and {"/query", "/entities/{name}", "/chunks/{chunk_id}", "/health"} <= set(spec["paths"])
    status, docs = http("GET", f"{server}/docs")
    assert status == 200 and "swagger" in docs.lower()


def test_api_key_when_set(built, caplog):
    home, _ = built
    secret = "s3cret-key-for-the-test"
    app = create_app(home, api_key=secret, client=None)
    caplog.set_level(logging.INFO)
    with running(app, log_level="info") as base:
        body = {"question": QUESTION}
        assert http("POST", f"{base}/query", body)[0] == 401
        status, detail = http("POST", f"{base}/query", body, headers={"X-API-Key": "wrong"})
        assert status == 401 and "API key" in detail["detail"]
        assert http("GET", f"{base}/entities/charles%20darwin")[0] == 401
        assert http("GET", f"{base}/chunks/x")[0] == 401
        assert http("POST", f"{base}/query", body, headers={"X-API-Key": secret})[0] == 200
        assert http("POST", f"{base}/query", body, headers={"Authorization": f"Bearer {secret}"})[0] == 200
        assert http("GET", f"{base}/entities/charles%20darwin", headers={"X-API-Key": secret})[0] == 200
        status, health = http("GET", f"{base}/health")  # open: load balancers and the page ask it
        assert status == 200 and health["auth"] is True
        assert http("GET", f"{base}/")[0] == 200
    assert "POST /query" in caplog.text  # the access log ran, and never shows the key
    assert secret not in caplog.text


def test_a_query_over_its_time_gets_504_and_no_index_gets_503(built, tmp_path):
    home, _ = built
    with running(create_app(home, query_timeout_s=1e-6, client=None)) as base:
        status, body = http("POST", f"{base}/query", {"question": QUESTION})
        assert status == 504 and "did not finish" in body["detail"]
    with running(create_app(tmp_path / "empty-home", client=None)) as base:
        status, body = http("POST", f"{base}/query", {"question": QUESTION})
        assert status == 503 and "build" in body["detail"]
        status, body = http("GET", f"{base}/health")
        assert status == 503 and body["status"] == "no_index"


NEW_DOCUMENT = """Zebulon Quickfeather and the Lantern Society

Zebulon Quickfeather was an astronomer who founded the Lantern Society in Oxford in 1850. Zebulon Quickfeather
corresponded with Charles Darwin about the colours of beetles, and the Lantern Society met every month in Oxford to
read his letters.
"""


def test_a_new_publish_is_served_without_restart_and_without_errors(tmp_path, monkeypatch):
    home, corpus = build_home(tmp_path)
    monkeypatch.setenv("GRAPHRAG_HOME", str(home))
    question = "Who founded the Lantern Society in Oxford?"
    with running(create_app(home, client=None)) as base:
        before = http("GET", f"{base}/health")[1]["index"]
        assert http("GET", f"{base}/entities/zebulon%20quickfeather")[0] == 404

        # queries keep coming while the index is rebuilt and swapped: every one is answered
        stop, statuses = threading.Event(), []

        def hammer():
            while not stop.is_set():
                statuses.append(http("POST", f"{base}/query", {"question": QUESTION})[0])

        worker = threading.Thread(target=hammer)
        worker.start()
        try:
            (corpus / "quickfeather.txt").write_text(NEW_DOCUMENT, encoding="utf-8")
            code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
            assert code == 0, out
            time.sleep(0.3)
        finally:
            stop.set()
            worker.join(60)
        assert statuses and set(statuses) == {200}, statuses

        status, entity = http("GET", f"{base}/entities/zebulon%20quickfeather")
        assert status == 200 and entity["entity"]["name"] == "Zebulon Quickfeather"
        assert [s["doc"] for s in entity["sources"]] == ["quickfeather.txt"]
        status, served = http("POST", f"{base}/query", {"question": question, "mode": "local"})
        assert status == 200 and same_result(served, query_json(home, question))
        after = http("GET", f"{base}/health")[1]
        assert after["index"]["index_version"] > before["index_version"]
        assert after["index"]["index_id"] != before["index_id"] and after["reloads"] >= 1


def test_the_holder_keeps_a_leased_index_open_until_it_is_returned(built, tmp_path):
    """An in-flight request keeps the version it started with, even when a new one is published."""
    import shutil

    from graphrag_pipeline.index.live import IndexHolder
    from graphrag_pipeline.storage.layout import Paths

    home, _ = built
    copy = tmp_path / "home"
    (copy / "index").mkdir(parents=True)
    src = Paths(home).index_file
    dst = Paths(copy).index_file
    shutil.copyfile(src, dst)
    holder = IndexHolder(copy)
    old = holder.acquire()
    tmp = dst.with_suffix(".new")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)  # a publish: a whole file renamed over the old one
    new = holder.acquire()
    assert new is not old and old.retired
    assert old.index.relations_of("charles darwin", 1)  # still open and answering
    holder.release(old)
    with pytest.raises(Exception):  # noqa: B017 - closed now: any DuckDB error
        old.index.entity_sources("charles darwin")
    holder.release(new)
    holder.close()


def test_serve_help_lists_its_options():
    proc = subprocess.run(
        [sys.executable, "-m", "graphrag_pipeline.cli", "serve", "--help"], capture_output=True, text=True, check=True
    )
    for option in ("--host", "--port", "--timeout", "--max-body-bytes"):
        assert option in proc.stdout
    assert "127.0.0.1" in proc.stdout


def test_serving_from_elasticsearch(es_env, home, corpus):  # noqa: F811 - fixtures of test_elasticsearch
    """With GRAPHRAG_ES_URL set the service reads Elasticsearch, the graph lookups included."""
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    with running(create_app(home, client=None)) as base:
        status, health = http("GET", f"{base}/health")
        assert status == 200 and health["index"]["backend"] == "elasticsearch"
        status, body = http("POST", f"{base}/query", {"question": QUESTION})
        assert status == 200 and body["mode"] == "mix" and body["entities"]
        status, entity = http("GET", f"{base}/entities/charles%20darwin?neighbours=5")
        assert status == 200 and entity["entity"]["name"] == "Charles Darwin"
        assert 0 < len(entity["relations"]) <= 5 and entity["neighbours"]
        with DuckDBIndex(home / "index" / "search_index.duckdb") as local:  # the same lookups as DuckDB's
            assert entity["relations"] == [
                {k: r[k] for k in ("source", "target", "description", "weight")}
                for r in local.relations_of("charles darwin", 5)
            ]
            sources = local.chunk_texts(local.entity_sources("charles darwin"))
        assert [s["chunk_id"] for s in entity["sources"]] == [s["chunk_id"] for s in sources]
        status, chunk = http("GET", f"{base}/chunks/{sources[0]['chunk_id']}")
        assert status == 200 and chunk["text"] == sources[0]["text"]


def test_the_server_outlives_an_llm_outage_and_says_it_in_health(built, monkeypatch):
    """Found by an exploratory run: one query during an outage opened the LLM client's circuit
    breaker, and every later query got 502 until a restart, while /health said "ok". Now /health
    says the model is failing, and a query tries the endpoint again after SERVE_LLM_RETRY_S."""
    from graphrag_pipeline.serve import app as serve_app
    from graphrag_pipeline_tests.fake_llm import FakeLLM
    from graphrag_pipeline_tests.llm_server import Reply, ScriptedLLMServer

    home, _ = built
    fake = FakeLLM()
    state = {"down": True}

    def endpoint(body):
        return Reply(status=503, text="overloaded") if state["down"] else Reply(text=fake(body))

    with ScriptedLLMServer(endpoint) as llm:
        for k, v in {
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "k",
            "GRAPHRAG_LLM_MODEL": "fake-model",
            "GRAPHRAG_LLM_MAX_RETRIES": "0",
            "GRAPHRAG_LLM_BREAKER": "2",
        }.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr(serve_app, "SERVE_LLM_RETRY_S", 0.5)
        ask = {"question": "What are the main themes?", "mode": "global", "answer": True}
        with running(create_app(home)) as base:
            assert http("GET", f"{base}/health")[1]["llm"] == {"status": "ok"}
            status, body = http("POST", f"{base}/query", ask)
            assert status == 502 and "503" in body["detail"]
            health = http("GET", f"{base}/health")[1]
            assert health["status"] == "ok" and health["llm"]["status"] == "failing"
            assert "tries the endpoint again after 0.5 s" in health["llm"]["detail"]
            seen = llm.chat_count
            assert http("POST", f"{base}/query", ask)[0] == 502 and llm.chat_count == seen  # not called: open
            state["down"] = False
            time.sleep(0.6)
            status, body = http("POST", f"{base}/query", ask)
            assert status == 200 and body["answer"].startswith("GLOBAL ANSWER"), body
            assert http("GET", f"{base}/health")[1]["llm"] == {"status": "ok"}
