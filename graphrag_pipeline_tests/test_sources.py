"""Sources everywhere (issue 11): every item of every mode cites real corpus files and indexed chunks,
`--answer` cites only what was returned, DuckDB and Elasticsearch return the same sources; the CLI's
flags, trimmed output and "no results" exit status; global ranking by importance."""

from __future__ import annotations

import json
import unicodedata

import duckdb
import polars as pl

from graphrag_pipeline.query import DuckDBIndex, SearchParams, open_index, query
from graphrag_pipeline.query.search import MODES, citations, cite
from graphrag_pipeline_tests.conftest import cli, cli_json
from graphrag_pipeline_tests.fake_llm import FakeLLM
from graphrag_pipeline_tests.llm_server import ScriptedLLMServer
from graphrag_pipeline_tests.test_elasticsearch import es_env, es_up  # noqa: F401 - fixtures

QUESTIONS = [
    "Who sailed with Charles Darwin on HMS Beagle?",
    "What are the main themes?",
    "Enigma and the Bombe at Bletchley Park",
    "郑和下西洋从哪里出发",
    "What did the notes say about the lighthouse keeper?",
]
NOTE = (
    "The lighthouse keeper Agnes Marlow kept the Fastnet light in 1910. Agnes Marlow wrote to the Royal Society "
    "about storms, and the Royal Society published her notes in London.\n"
)


def _build(corpus) -> None:
    (corpus / "notes").mkdir()
    (corpus / "notes" / "lighthouse.txt").write_text(NOTE, encoding="utf-8")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out


def _indexed_chunks(home) -> dict[tuple[str, str], int]:
    con = duckdb.connect(str(home / "index" / "search_index.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT doc, chunk_id, min(position) FROM chunks GROUP BY doc, chunk_id").fetchall()
    finally:
        con.close()
    return {(doc, cid): pos for doc, cid, pos in rows}


def _items(result: dict):
    for kind in ("entities", "relations", "community_reports", "chunks"):
        for item in result[kind]:
            yield kind, item


def _check_sources(result: dict, corpus, chunks: dict) -> None:
    for kind, item in _items(result):
        assert item["sources"], (result["mode"], kind, item)
        for src in item["sources"]:
            assert (corpus / src["doc"]).is_file(), src
            if kind == "community_reports":
                assert src["chunk"] is None and src["chunk_id"] is None
            else:
                assert chunks[(src["doc"], src["chunk_id"])] + 1 == src["chunk"], src
            assert cite(src) in result["context"], (kind, src)


def test_every_item_of_every_mode_cites_real_files_and_indexed_chunks(home, corpus):
    _build(corpus)
    chunks = _indexed_chunks(home)
    assert ("notes/lighthouse.txt", next(c for d, c in chunks if d == "notes/lighthouse.txt")) in chunks
    seen_modes = set()
    for q in QUESTIONS:
        for mode in MODES:
            result = cli_json("query", q, "--mode", mode, "--json")
            assert result["mode"] == mode
            _check_sources(result, corpus, chunks)
            if any(True for _ in _items(result)):
                seen_modes.add(mode)
    assert seen_modes == set(MODES)
    # the document in a sub-folder is cited by its corpus path
    result = cli_json("query", "Agnes Marlow the lighthouse keeper", "--mode", "mix", "--json")
    assert "[doc: notes/lighthouse.txt, chunk 1]" in result["context"]
    assert any(s["doc"] == "notes/lighthouse.txt" for e in result["entities"] for s in e["sources"])
    # mix: graph context and chunks in one result; the chunks say where they came from
    assert result["entities"] and result["chunks"]
    assert {c["via"] for c in result["chunks"]} <= {"similarity", "graph", "both"}
    # the Python API gives the same
    with open_index(home) as index:
        api = query(index, "Agnes Marlow the lighthouse keeper", "mix").to_dict()
    assert api == result


def test_preloaded_and_scanned_duckdb_give_the_same_sources(home, corpus):
    _build(corpus)
    path = home / "index" / "search_index.duckdb"
    with DuckDBIndex(path) as scan, DuckDBIndex(path, preload=True) as mem:
        for q in QUESTIONS:
            for mode in MODES:
                assert query(scan, q, mode).to_dict() == query(mem, q, mode).to_dict(), (q, mode)
        ids = [r[0] for r in scan.con.execute("SELECT chunk_id FROM chunks").fetchall()]
        assert scan.chunks_by_ids(ids, text=True) == mem.chunks_by_ids(ids, text=True)
        assert scan.chunks_by_ids(ids[:2]) == mem.chunks_by_ids(ids[:2])


def test_answer_cites_only_returned_sources(home, corpus, monkeypatch):
    _build(corpus)
    with ScriptedLLMServer(FakeLLM()) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("GRAPHRAG_LLM_MODEL", "fake-model")
        for mode in ("mix", "local", "naive"):
            res = cli_json(
                "query", "Who sailed with Charles Darwin on HMS Beagle?", "--mode", mode, "--json", "--answer"
            )
            cited = citations(res["answer"])
            assert cited, res["answer"]  # the scripted answer cites, as the prompt asks
            returned = {(s["doc"], s["chunk"]) for _, item in _items(res) for s in item["sources"]}
            assert set(cited) <= returned, (mode, cited)
        prompt = next(r for r in srv.requests if "Answer the question using only" in json.dumps(r))
        assert "[doc: notes/a.txt, chunk 3]" in json.dumps(prompt)  # the format is asked for


def test_citations_parse_the_cite_format():
    text = "Darwin sailed [doc: notes/a, b.txt, chunk 3] and wrote [doc: x.md] [doc: y.txt, chunk 12]."
    assert citations(text) == [("notes/a, b.txt", 3), ("x.md", None), ("y.txt", 12)]
    assert cite({"doc": "a.txt", "chunk": 2, "chunk_id": "c"}) == "[doc: a.txt, chunk 2]"


def test_duckdb_and_elasticsearch_return_the_same_sources(es_env, home, corpus):  # noqa: F811
    _build(corpus)
    with open_index(home, backend="duckdb") as db, open_index(home) as es:
        assert type(es).__name__ == "EsIndex"
        for q in QUESTIONS:
            for mode in MODES:
                a, b = query(db, q, mode), query(es, q, mode)
                assert a.sources() == b.sources(), (q, mode)
                assert [i["sources"] for _, i in _items(a.to_dict())] == [i["sources"] for _, i in _items(b.to_dict())]
                assert a.context == b.context, (q, mode)
        v = db.embedder().embed_one("main themes")
        for k in (1, 3, 9, 20, 100):
            assert [r["community_id"] for r in db.reports_by_importance(v, k)] == [
                r["community_id"] for r in es.reports_by_importance(v, k)
            ], k
        ids = [r[0] for r in db.con.execute("SELECT chunk_id FROM chunks").fetchall()]
        assert db.chunks_by_ids(ids) == es.chunks_by_ids(ids)


def test_global_ranks_by_level_rating_and_weight_then_similarity(tmp_path):
    from graphrag_pipeline.index.duckdb_writer import write_duckdb_index
    from graphrag_pipeline.index.embedding import HashingEmbedder
    from graphrag_pipeline.index.records import build_index_tables
    from graphrag_pipeline.query import global_search
    from graphrag_pipeline.reports.offline import CommunityReport
    from graphrag_pipeline_tests.test_search import _graph

    nodes, edges = _graph()
    communities = pl.DataFrame(
        {
            "community_id": ["L0-a", "L0-b", "L0-c", "L1-d"],
            "level": [0, 0, 0, 1],
            "nodes": [["alice", "bob"], ["carol", "dave"], ["dave", "venice"], ["alice", "bob"]],
            "size": [2, 2, 2, 2],
            "weight": [0.5, 0.5, 0.9, 1.0],
        }
    )
    reports = [
        CommunityReport("L0-a", 0, "Oxford friends", "Alice and Bob in Oxford", 5.0, "r", [], []),
        CommunityReport("L0-b", 0, "Gondolas", "Carol and Dave ride gondolas in Venice", 5.0, "r", [], []),
        CommunityReport("L0-c", 0, "Dave abroad", "Dave lives abroad", 5.0, "r", [], []),
        CommunityReport("L1-d", 1, "Gondola detail", "Gondolas of Venice", 10.0, "r", [], []),
    ]
    chunks = pl.DataFrame(
        {"chunk_id": ["c1"], "doc_id": ["d1"], "doc": ["a.txt"], "position": [0], "text": ["Alice met Bob."]}
    )
    emb = HashingEmbedder()
    path = tmp_path / "i.duckdb"
    write_duckdb_index(
        build_index_tables(nodes, edges, communities, reports, chunks, emb),
        path,
        {"embedding_model": emb.model_id, "embedding_dim": emb.dim},
    )
    with DuckDBIndex(path) as index, DuckDBIndex(path, preload=True) as mem:
        for idx in (index, mem):

            def titles(q, idx=idx):
                return [c["title"] for c in global_search(idx, q, SearchParams(global_topn=4)).community_reports]

            # level 0 first; the heavier community first; equal rating and weight: the more similar first
            assert titles("gondolas in Venice") == ["Dave abroad", "Gondolas", "Oxford friends", "Gondola detail"]
            assert titles("Alice and Bob in Oxford") == ["Dave abroad", "Oxford friends", "Gondolas", "Gondola detail"]
            res = global_search(idx, "gondolas", SearchParams(global_topn=1))
            assert res.community_reports[0]["sources"] == [{"doc": "a.txt", "chunk": None, "chunk_id": None}]


def test_cli_flags_trimmed_output_and_no_results_exit_status(home, corpus, monkeypatch):
    _build(corpus)
    monkeypatch.setenv("COLUMNS", "60")
    code, out = cli("query", "Who sailed with Charles Darwin on HMS Beagle?", "--ent-topn", "2", "--rel-topn", "1")
    assert code == 0
    assert out.startswith("mode: mix (2 entities, 1 relations")
    assert all(
        sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line) <= 60 for line in out.splitlines()
    )
    assert "sources: [doc: darwin_and_wallace.txt, chunk 1]" in out
    res = cli_json("query", "Charles Darwin", "--mode", "naive", "--chunk-topn", "2", "--json")
    assert len(res["chunks"]) == 2
    full = cli_json("query", "Charles Darwin", "--mode", "local", "--json")
    small = cli_json("query", "Charles Darwin", "--mode", "local", "--max-tokens", "300", "--json")
    assert 0 < len(small["entities"]) + len(small["relations"]) < len(full["entities"]) + len(full["relations"])
    args = ("query", "zzqx vvbn", "--mode", "local", "--ent-sim-threshold", "0.99", "--rel-sim-threshold", "0.99")
    code, out = cli(*args)
    assert code == 3 and "Entities" not in out
    code, out = cli(*args, "--json")
    assert code == 3 and json.loads(out)["entities"] == []
