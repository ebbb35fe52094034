"""Elasticsearch as the production index, against the real server `make es-start` runs.

These tests never skip: if the server is not reachable they fail and say how to start it."""

from __future__ import annotations

import json
import os
import urllib.request

import polars as pl
import pytest

from graphrag_pipeline.index import es_writer as es_index
from graphrag_pipeline.index.es_writer import EsConfig, EsIndexError, build_documents, publish, read_duckdb_tables
from graphrag_pipeline.query import open_index, query
from graphrag_pipeline_tests.conftest import cli

ES_URL = os.environ.get("GRAPHRAG_TEST_ES_URL", "http://127.0.0.1:9200")
QUESTIONS = [
    "Who sailed with Charles Darwin on HMS Beagle?",
    "Royal Society in London",
    "郑和下西洋从哪里出发",
    "Enigma at Bletchley Park",
]


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
            (abs(a[k] - b[k]) <= 1e-4 * max(1.0, abs(a[k])) if k == "score" else _same(a[k], b[k])) for k in a
        )
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
    doc.write_text(
        doc.read_text(encoding="utf-8").replace(
            "</body>",
            "<p>In 1991 the Science Museum completed Difference Engine No. 2 for the bicentenary of Charles "
            "Babbage.</p></body>",
        ),
        encoding="utf-8",
    )
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


def _built_documents(home, corpus) -> tuple[dict, dict]:
    """A fast build's index as Elasticsearch documents, and the index's meta."""
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    tables, meta = read_duckdb_tables(home / "index" / "search_index.duckdb")
    return build_documents(tables, meta), meta


def _bulk_cut_short(exc: BaseException):
    """A bulk load that writes 10 actions, then fails with `exc` (a node going away, a stop)."""
    real_bulk = es_index._bulk

    def bulk(client, actions):
        real_bulk(client, list(actions)[:10])
        raise exc

    return bulk


def test_full_rebuild_swaps_alias_and_a_failed_rebuild_keeps_the_old_index(es_env, home, corpus, monkeypatch):
    docs, meta = _built_documents(home, corpus)
    es = es_env.client()
    before = list(es.indices.get_alias(name=es_env.alias))
    stats = publish(es_env, docs, meta["embedding_dim"], full_rebuild=True)
    after = list(es.indices.get_alias(name=es_env.alias))
    assert stats.full_rebuild and after == [stats.index] and after != before
    assert not es.indices.exists(index=before[0])  # the old index was dropped after the switch

    monkeypatch.setattr(es_index, "_bulk", _bulk_cut_short(RuntimeError("node went away in the middle of the load")))
    with pytest.raises(EsIndexError) as err:
        publish(es_env, docs, meta["embedding_dim"], full_rebuild=True)
    assert "node went away" in str(err.value) and es_env.url in str(err.value)
    assert list(es.indices.get_alias(name=es_env.alias)) == after  # still serving the previous index
    assert len(es.indices.get(index=f"{es_env.alias}-*")) == 1  # the half-loaded index was removed
    with open_index(home) as idx:
        assert query(idx, QUESTIONS[0], "local").entities
    es.close()


def test_a_stopped_or_killed_load_leaves_no_index_behind(es_env, home, corpus, monkeypatch):
    # found by an exploratory run: Ctrl-C during a first load left the half-loaded index in the
    # cluster for good (Dagster's interruption is a BaseException; only Exception was cleaned up)
    docs, meta = _built_documents(home, corpus)
    es = es_env.client()
    serving = list(es.indices.get_alias(name=es_env.alias))
    real_bulk = es_index._bulk
    monkeypatch.setattr(es_index, "_bulk", _bulk_cut_short(KeyboardInterrupt()))  # what a stop raises there
    with pytest.raises(KeyboardInterrupt):
        publish(es_env, docs, meta["embedding_dim"], full_rebuild=True)
    monkeypatch.setattr(es_index, "_bulk", real_bulk)
    assert list(es.indices.get(index=f"{es_env.alias}-*")) == serving  # the half-loaded one is gone
    # a load killed outright (SIGKILL) names its index in a marker: the next sync deletes that index
    orphan = f"{es_env.alias}-20000101000000-000001"
    es.indices.create(index=orphan)
    state = home / "index" / "elasticsearch"
    state.mkdir(parents=True, exist_ok=True)
    (state / f"{es_env.alias}.loading.json").write_text(json.dumps({"index": orphan}))
    (corpus / "darwin_and_wallace.txt").write_text("Alfred Russel Wallace wrote to Charles Darwin from Ternate.\n")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert not es.indices.exists(index=orphan)
    assert list(es.indices.get(index=f"{es_env.alias}-*")) == serving  # the serving index is kept
    assert not (state / f"{es_env.alias}.loading.json").exists()
    es.close()


def test_verify_finds_elasticsearch_behind_the_graph(es_env, home, corpus, monkeypatch):
    # found by an exploratory run: a build run without GRAPHRAG_ES_URL left Elasticsearch behind,
    # and `verify` (with the setting) said "all good"
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    code, out = cli("verify")
    assert code == 0 and "all good" in out, out
    with open(corpus / "darwin_and_wallace.txt", "a", encoding="utf-8") as f:
        f.write("\nIgnatius Wolstenholme catalogued the beetles of the Beagle voyage in Shrewsbury.\n")
    monkeypatch.delenv("GRAPHRAG_ES_URL")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    monkeypatch.setenv("GRAPHRAG_ES_URL", es_env.url)
    code, out = cli("verify")
    assert code == 1 and "is behind the graph" in out and es_env.alias in out, out
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0 and "Elasticsearch is behind its inputs" in out, out
    code, out = cli("verify")
    assert code == 0 and "all good" in out, out


def test_vectors_are_rounded_exactly_as_round_does():
    import math
    import random

    import numpy as np

    from graphrag_pipeline.index.embedding import HashingEmbedder
    from graphrag_pipeline.index.es_writer import _vec

    rnd = random.Random(3)
    vectors = list(HashingEmbedder().embed(["Charles Darwin sailed on HMS Beagle", "郑和下西洋", ""]))
    vectors.append(
        np.array([rnd.uniform(-1, 1) for _ in range(300)] + [0.0, -0.0, 1e-9, -5e-8, 0.12345675], np.float32)
    )
    vectors.append([0.5, -0.0, 0.0, 0.5, float("inf")])
    for v in vectors:
        want = [round(float(x), 7) for x in v]
        got = _vec(v)
        assert json.dumps(got) == json.dumps(want)
        assert [math.copysign(1, x) for x in got] == [math.copysign(1, x) for x in want]


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


def _es_hashes(cfg: EsConfig) -> dict[str, str]:
    """Every record's content hash (which covers all of its document, vector included), but meta's:
    Elasticsearch's meta names its own versions."""
    from elasticsearch import helpers

    es = cfg.client()
    try:
        return {
            h["_id"]: h["_source"]["content_hash_kwd"]
            for h in helpers.scan(es, index=cfg.alias, query={"query": {"match_all": {}}}, _source=["content_hash_kwd"])
            if h["_id"] != "meta"
        }
    finally:
        es.close()


def _duckdb_hashes(path) -> dict[str, str]:
    """What the Elasticsearch index got when it was synced from the published DuckDB file (before it
    was built from its own inputs): the documents of every row of the DuckDB tables."""
    tables, meta = read_duckdb_tables(path)
    return {i: d["content_hash_kwd"] for i, d in build_documents(tables, meta).items() if i != "meta"}


def _latest(instance, asset: str) -> dict:
    import dagster as dg

    ev = instance.get_latest_materialization_event(dg.AssetKey(asset))
    return {k: v.value for k, v in ev.asset_materialization.metadata.items()}


def _append(doc, text: str) -> None:
    doc.write_text(doc.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_elasticsearch_publishes_from_its_inputs_by_delta_sync_or_rebuild(es_env, home, corpus, instance, monkeypatch):
    from graphrag_pipeline.definitions import defs

    index_file = home / "index" / "search_index.duckdb"
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert _es_metadata(instance())["es_path"] == "rebuild"  # first sync: a new index behind the alias
    assert _es_hashes(es_env) == _duckdb_hashes(index_file)  # the same records as the DuckDB index

    # one edit: only the records whose content changed are written
    _append(
        corpus / "curie_radioactivity.md", "\n\nIn 1921 Marie Curie visited President Warren Harding in Washington.\n"
    )
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    meta = _es_metadata(instance())
    assert meta["es_path"] == "delta" and meta["es_index_version"] == 2, meta
    assert 0 < meta["es_written"] < meta["es_unchanged"]
    assert _es_hashes(es_env) == _duckdb_hashes(index_file)
    with open_index(home) as es:
        assert es.meta["index_version"] == 2 and es.meta["embedding_model"] == "hashing-v2-512"
        assert any("Warren Harding" in e["name"] for e in es.entities_by_types(["PERSON"], 500))

    # builds while Elasticsearch is not configured: it catches up from its inputs (no DuckDB delta needed)
    monkeypatch.delenv("GRAPHRAG_ES_URL")
    _append(
        corpus / "darwin_and_wallace.txt",
        "\n\nIn 1882 Charles Darwin was buried in Westminster Abbey near Isaac Newton.\n",
    )
    assert cli("build", "--corpus", str(corpus), "--method", "fast")[0] == 0
    (corpus / "printing_and_paper_zh.md").unlink()
    assert cli("build", "--corpus", str(corpus), "--method", "fast")[0] == 0
    monkeypatch.setenv("GRAPHRAG_ES_URL", es_env.url)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")  # nothing new locally: ES is synced
    assert code == 0 and "Elasticsearch is behind its inputs" in out, out
    meta = _es_metadata(instance())
    assert meta["es_path"] == "delta" and meta["es_deleted"] > 0, meta
    assert _es_hashes(es_env) == _duckdb_hashes(index_file)

    # another machine (no state file here): every content hash is compared, only what differs is written
    for f in (home / "index" / "elasticsearch").glob("*.parquet"):
        f.unlink()
    _append(corpus / "darwin_and_wallace.txt", "\n\nDarwin's son George Darwin became an astronomer.\n")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    meta = _es_metadata(instance())
    assert meta["es_path"] == "sync" and 0 < meta["es_written"] < meta["es_unchanged"], meta
    assert _es_hashes(es_env) == _duckdb_hashes(index_file)

    # nothing new: nothing to write; asked for a full rebuild: a new index behind the alias
    job = defs.resolve_job_def("index_job")
    assert job.execute_in_process(instance=instance()).success
    assert _es_metadata(instance())["es_path"] == "current"
    assert job.execute_in_process(
        instance=instance(), run_config={"ops": {"elasticsearch_index": {"config": {"full_rebuild": True}}}}
    ).success
    meta = _es_metadata(instance())
    assert meta["es_path"] == "rebuild" and meta["es_full_rebuild"] is True
    assert _es_hashes(es_env) == _duckdb_hashes(index_file)


def test_elasticsearch_index_runs_without_the_duckdb_file(es_env, home, corpus, instance):
    """A machine that did not run search_index: the Elasticsearch asset reads only its inputs."""
    from graphrag_pipeline.definitions import defs

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    index_file = home / "index" / "search_index.duckdb"
    expected = _duckdb_hashes(index_file)
    es = es_env.client()
    try:
        es.options(ignore_status=404).indices.delete(index=f"{es_env.alias}-*")
    finally:
        es.close()
    index_file.unlink()
    job = defs.resolve_job_def("index_job")
    result = job.execute_in_process(
        instance=instance(),
        asset_selection=[k for k in job.asset_layer.executable_asset_keys if "elasticsearch_index" in k.path],
    )
    assert result.success
    assert not index_file.exists()  # it was neither read nor written
    assert _es_metadata(instance())["es_path"] == "rebuild"
    assert _es_hashes(es_env) == expected
    with open_index(home) as idx:
        assert query(idx, QUESTIONS[0], "local").entities


def _rows_of(inp: dict):
    from graphrag_pipeline.index.records import build_index_rows

    reportable = inp["communities"].filter(pl.col("size") >= 2)["community_id"].to_list()
    reports = [inp["reports"][c] for c in reportable if c in inp["reports"]]
    return build_index_rows(inp["nodes"], inp["edges"], inp["communities"], reports, inp["chunks"], nhop=False)


def test_every_kind_of_change_leaves_elasticsearch_with_the_duckdb_records(es_up, tmp_path, monkeypatch):
    import uuid

    from graphrag_pipeline.index.embedding import HashingEmbedder
    from graphrag_pipeline.index.es_writer import sync_records
    from graphrag_pipeline_tests.test_index_delta import _edit, _inputs, _publish

    cfg = EsConfig(url=es_up, alias=f"graphrag-test-delta-{uuid.uuid4().hex[:10]}")
    state = tmp_path / "es-state"
    path = tmp_path / "index.duckdb"
    emb = HashingEmbedder()
    info = {"method": "fast"}
    try:
        _publish(path, _inputs())
        assert sync_records(cfg, _rows_of(_inputs()), emb, info, state).path == "rebuild"
        assert _es_hashes(cfg) == _duckdb_hashes(path)
        assert sync_records(cfg, _rows_of(_inputs()), emb, info, state).path == "current"
        # removed / added / changed entities, relations, reports and chunks, new n-hop paths, a changed type pool
        assert _publish(path, _edit(_inputs()), max_fraction=1.0).mode == "delta"
        stats = sync_records(cfg, _rows_of(_edit(_inputs())), emb, info, state)
        assert stats.path == "delta" and stats.deleted >= 4 and 0 < stats.written < stats.unchanged, stats
        assert _es_hashes(cfg) == _duckdb_hashes(path)
        full = tmp_path / "full.duckdb"  # and what a DuckDB index built whole from the edited inputs holds
        assert _publish(full, _edit(_inputs())).mode == "full"
        assert _es_hashes(cfg) == _duckdb_hashes(full)

        # a sync that fails half-way leaves the meta record without a state id: the next one compares every hash
        calls = {"n": 0}
        real_bulk = es_index._bulk

        def failing_bulk(client, actions):
            calls["n"] += 1
            real_bulk(client, list(actions)[:3])
            raise RuntimeError("node went away")

        monkeypatch.setattr(es_index, "_bulk", failing_bulk)
        with pytest.raises(EsIndexError, match="node went away"):
            sync_records(cfg, _rows_of(_inputs()), emb, info, state)
        monkeypatch.setattr(es_index, "_bulk", real_bulk)
        stats = sync_records(cfg, _rows_of(_inputs()), emb, info, state)
        assert stats.path == "sync" and stats.deleted >= 1, stats
        _publish(path, _inputs(), max_fraction=1.0)
        assert _es_hashes(cfg) == _duckdb_hashes(path)
        assert sync_records(cfg, _rows_of(_inputs()), emb, info, state).path == "current"
    finally:
        es = cfg.client()
        try:
            es.options(ignore_status=404).indices.delete(index=f"{cfg.alias}-*")
        finally:
            es.close()


def test_pdf_pages_reach_elasticsearch_and_its_sources_match_duckdb(es_env, home, tmp_path, monkeypatch):
    from graphrag_pipeline_tests.test_formats import PAGE_TOPICS, _pdf

    corpus = tmp_path / "pdfs"
    corpus.mkdir()
    _pdf(corpus / "engines.pdf", paragraphs=8)
    (corpus / "plain.txt").write_text("Grace Hopper wrote the first compiler.\n", encoding="utf-8")
    monkeypatch.setenv("GRAPHRAG_CHUNK_TOKENS", "120")
    monkeypatch.setenv("GRAPHRAG_CHUNK_OVERLAP", "10")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    with open_index(home, backend="duckdb") as db, open_index(home) as es:
        assert type(es).__name__ == "EsIndex"
        hits = es.chunks_by_text(PAGE_TOPICS[2], 3)
        assert hits[0]["doc"] == "engines.pdf" and hits[0]["page_end"] == 3, hits[0]
        ids = [h["chunk_id"] for h in hits]
        assert es.chunks_by_ids(ids) == db.chunks_by_ids(ids)
        pages = {(r["page_start"], r["page_end"]) for r in es.chunks_by_ids(ids) if r["doc"] == "engines.pdf"}
        assert pages and all(1 <= a <= b <= 3 for a, b in pages)
        a, b = query(db, PAGE_TOPICS[2], "naive").to_dict(), query(es, PAGE_TOPICS[2], "naive").to_dict()
        assert _same(a, b)
        sources = [s for c in b["chunks"] for s in c["sources"] if s["doc"] == "engines.pdf"]
        assert sources and all(s["pages"] for s in sources), b["chunks"]
        txt = [s for c in b["chunks"] for s in c["sources"] if s["doc"] == "plain.txt"]
        assert all("pages" not in s for s in txt)
