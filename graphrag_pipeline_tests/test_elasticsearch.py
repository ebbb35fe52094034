"""Elasticsearch as the production index, against the real server `make es-start` runs.

These tests never skip: if the server is not reachable they fail and say how to start it."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

from graphrag_pipeline.core import es_index
from graphrag_pipeline.core.es_index import EsConfig, EsIndexError, build_documents, publish, read_duckdb_tables
from graphrag_pipeline.query import open_index, query
from graphrag_pipeline_tests.conftest import cli

ES_URL = os.environ.get("GRAPHRAG_TEST_ES_URL", "http://127.0.0.1:9200")
QUESTIONS = ["Who sailed with Charles Darwin on HMS Beagle?", "Royal Society in London", "郑和下西洋从哪里出发", "Enigma at Bletchley Park"]


@pytest.fixture(scope="module")
def es_up():
    try:
        with urllib.request.urlopen(f"{ES_URL}/_cluster/health?wait_for_status=yellow&timeout=30s", timeout=40) as r:
            assert json.loads(r.read())["status"] in ("green", "yellow")
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"Elasticsearch is not reachable at {ES_URL} ({exc}); start it with `make es-start`")
    return ES_URL


@pytest.fixture
def es_env(es_up, home, monkeypatch):
    monkeypatch.setenv("GRAPHRAG_ES_URL", es_up)
    cfg = EsConfig.from_env(home)
    yield cfg
    es = cfg.client()
    try:
        es.options(ignore_status=404).indices.delete(index=f"{cfg.alias}-*")
    finally:
        es.close()


def _same(a, b) -> bool:
    """Equal results; scores may differ in the 6th significant digit (Elasticsearch scores cosine in float32)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(
            (abs(a[k] - b[k]) <= 1e-4 * max(1.0, abs(a[k])) if k == "score" else _same(a[k], b[k])) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _kind_counts(cfg: EsConfig) -> dict[str, int]:
    es = cfg.client()
    try:
        res = es.search(index=cfg.alias, size=0, aggs={"k": {"terms": {"field": "knowledge_graph_kwd", "size": 20}}})
    finally:
        es.close()
    return {b["key"]: b["doc_count"] for b in res["aggregations"]["k"]["buckets"]}


def _es_metadata(instance) -> dict:
    import dagster as dg

    ev = instance.get_latest_materialization_event(dg.AssetKey("elasticsearch_index"))
    return {k: v.value for k, v in ev.asset_materialization.metadata.items()}


def test_build_indexes_elasticsearch_and_queries_match_duckdb(es_env, home, corpus):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    counts = _kind_counts(es_env)
    with open_index(home, backend="duckdb") as db:
        local = db.counts()
    assert counts["entity"] == local["entities"] and counts["relation"] == local["relations"]
    assert counts["community_report"] == local["community_reports"] and counts["chunk"] == local["chunks"]
    assert counts["ty2ents"] == 1 and counts["meta"] == 1

    with open_index(home, backend="duckdb") as db, open_index(home) as es:
        assert type(es).__name__ == "EsIndex"
        assert es.type_pool() == db.type_pool()
        for q in QUESTIONS:
            for mode in ("local", "global", "naive"):
                a, b = query(db, q, mode).to_dict(), query(es, q, mode).to_dict()
                assert _same(a, b), (q, mode)
        # type recall when the types hold more entities than the cut-off (the rank-bound path)
        keys = [e["key"] for e in db.entities_by_types(["PERSON", "GEO"], 50)]
        for k in (1, 5, 20):
            assert es.keys_of_types(["PERSON", "GEO"], keys, k) == db.keys_of_types(["PERSON", "GEO"], keys, k), k
        bm25 = es.chunks_by_text("Bletchley Park Enigma", 3)
        assert bm25[0]["doc"] == "turing_and_bletchley_park.txt"
    # the CLI queries Elasticsearch when GRAPHRAG_ES_URL is set
    code, out = cli("query", QUESTIONS[0], "--json")
    assert code == 0 and json.loads(out)["entities"]


def test_edit_writes_only_changed_records_and_delete_removes_them(es_env, home, corpus, instance):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    total = sum(_kind_counts(es_env).values())
    doc = corpus / "babbage_and_lovelace.html"
    doc.write_text(doc.read_text(encoding="utf-8").replace("</body>", "<p>In 1991 the Science Museum completed Difference Engine No. 2 for the bicentenary of Charles Babbage.</p></body>"), encoding="utf-8")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    meta = _es_metadata(instance())
    assert meta["es_full_rebuild"] is False
    assert 0 < meta["es_written"] < total / 3
    assert meta["es_unchanged"] > total / 2

    (corpus / "printing_and_paper_zh.md").unlink()
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    meta = _es_metadata(instance())
    assert meta["es_deleted"] > 0
    with open_index(home) as es:
        assert not es.entities_by_keys(["毕昇"])
        assert es.entities_by_keys(["郑和"])


def test_full_rebuild_swaps_alias_and_a_failed_rebuild_keeps_the_old_index(es_env, home, corpus, monkeypatch):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    tables, meta = read_duckdb_tables(home / "index" / "search_index.duckdb")
    docs = build_documents(tables, meta)
    es = es_env.client()
    before = list(es.indices.get_alias(name=es_env.alias))
    stats = publish(es_env, docs, meta["embedding_dim"], full_rebuild=True)
    after = list(es.indices.get_alias(name=es_env.alias))
    assert stats.full_rebuild and after == [stats.index] and after != before
    assert not es.indices.exists(index=before[0])  # the old index was dropped after the switch

    calls = {"n": 0}
    real_bulk = es_index._bulk

    def failing_bulk(client, actions):
        calls["n"] += 1
        real_bulk(client, list(actions)[:10])
        raise RuntimeError("node went away in the middle of the load")

    monkeypatch.setattr(es_index, "_bulk", failing_bulk)
    with pytest.raises(EsIndexError) as err:
        publish(es_env, docs, meta["embedding_dim"], full_rebuild=True)
    assert "node went away" in str(err.value) and es_env.url in str(err.value)
    assert list(es.indices.get_alias(name=es_env.alias)) == after  # still serving the previous index
    assert len(es.indices.get(index=f"{es_env.alias}-*")) == 1  # the half-loaded index was removed
    with open_index(home) as idx:
        assert query(idx, QUESTIONS[0], "local").entities
    es.close()


def test_outage_gives_a_clear_error_without_credentials(monkeypatch, home):
    monkeypatch.setenv("GRAPHRAG_ES_URL", "http://elastic:s3cret-pw@127.0.0.1:1")
    cfg = EsConfig.from_env(home)
    assert cfg.url == "http://127.0.0.1:1" and cfg.username == "elastic" and cfg.password == "s3cret-pw"
    cfg.request_timeout = 2
    with pytest.raises(EsIndexError) as err:
        publish(cfg, {"meta": {"knowledge_graph_kwd": "meta", "content_hash_kwd": "x"}}, 4)
    message = str(err.value)
    assert "http://127.0.0.1:1" in message and "s3cret-pw" not in message and "elastic:" not in message


def test_config_from_env_auth_and_tls(monkeypatch, home):
    monkeypatch.setenv("GRAPHRAG_ES_URL", "https://es.internal:9243")
    monkeypatch.setenv("GRAPHRAG_ES_API_KEY", "a2V5OnNlY3JldA==")
    monkeypatch.setenv("GRAPHRAG_ES_CA_CERTS", "/etc/ssl/ca.pem")
    cfg = EsConfig.from_env(home)
    assert cfg.verify_certs is True and cfg.ca_certs == "/etc/ssl/ca.pem" and cfg.api_key
    err = cfg.error("testing", RuntimeError("bad key a2V5OnNlY3JldA== rejected"))
    assert "a2V5OnNlY3JldA==" not in str(err)
    other = EsConfig.from_env(home / "other")
    assert other.alias != cfg.alias  # two GRAPHRAG_HOMEs never share an index
