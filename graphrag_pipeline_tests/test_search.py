"""Local search scoring (KGSearch) on a tiny hand-made index: recall, n-hop decay, boosts, ranking."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest

from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA, with_metrics
from graphrag_pipeline.index.duckdb_writer import _read_previous_vectors, write_duckdb_index
from graphrag_pipeline.index.embedding import HashingEmbedder
from graphrag_pipeline.index.records import build_index_tables, nhop_paths
from graphrag_pipeline.query import DuckDBIndex, SearchParams, global_search, local_search, naive_search, query
from graphrag_pipeline.query.search import QueryAnalysis
from graphrag_pipeline.reports.offline import CommunityReport

NAMES = {"alice": "Alice", "bob": "Bob", "carol": "Carol", "dave": "Dave", "venice": "Venice"}
TYPES = {"alice": "PERSON", "bob": "PERSON", "carol": "PERSON", "dave": "PERSON", "venice": "GEO"}
EDGES = [("alice", "bob", 1.0), ("bob", "carol", 4.0), ("carol", "dave", 1.0), ("dave", "venice", 2.0)]


def _graph():
    nodes = pl.DataFrame(
        [
            {
                "key": k,
                "name": n,
                "type": TYPES[k],
                "description": f"{n} is someone",
                "descriptions": [f"{n} is someone"],
                "source_ids": ["c1"],
                "doc_ids": ["d1"],
                "degree": 0,
                "pagerank": 0.0,
            }
            for k, n in NAMES.items()
        ],
        schema=NODE_SCHEMA,
    )
    edges = pl.DataFrame(
        [
            {
                "source_key": a,
                "target_key": b,
                "source": NAMES[a],
                "target": NAMES[b],
                "description": f"{NAMES[a]} knows {NAMES[b]}",
                "descriptions": [],
                "keywords": [],
                "weight": w,
                "source_ids": ["c1"],
                "doc_ids": ["d1"],
            }
            for a, b, w in EDGES
        ],
        schema=EDGE_SCHEMA,
    )
    return with_metrics(nodes, edges), edges


def _one_community(summary: str) -> tuple[pl.DataFrame, list[CommunityReport], pl.DataFrame]:
    """Alice and Bob in one community with its report, and one chunk: the inputs of a small index."""
    communities = pl.DataFrame(
        {"community_id": ["L0-x"], "level": [0], "nodes": [["alice", "bob"]], "size": [2], "weight": [1.0]}
    )
    reports = [CommunityReport("L0-x", 0, "Alice and Bob", summary, 8.0, "r", [], ["Alice", "Bob"])]
    chunks = pl.DataFrame(
        {"chunk_id": ["c1"], "doc_id": ["d1"], "doc": ["a.txt"], "position": [0], "text": ["Alice met Bob."]}
    )
    return communities, reports, chunks


def _write_index(path: Path, nodes, edges, communities, reports, chunks) -> Path:
    """A DuckDB index of these inputs at `path` (hashing embedder)."""
    emb = HashingEmbedder()
    tables = build_index_tables(nodes, edges, communities, reports, chunks, emb)
    write_duckdb_index(tables, path, {"embedding_model": emb.model_id, "embedding_dim": emb.dim})
    return path


@pytest.fixture
def index(tmp_path):
    nodes, edges = _graph()
    communities = pl.DataFrame(
        {
            "community_id": ["L0-x", "L0-y"],
            "level": [0, 0],
            "nodes": [["alice", "bob"], ["dave", "venice"]],
            "size": [2, 2],
            "weight": [1.0, 0.5],
        }
    )
    reports = [
        CommunityReport("L0-x", 0, "Alice and Bob", "Friends in Oxford", 8.0, "r", [], ["Alice", "Bob"]),
        CommunityReport(
            "L0-y", 0, "Dave in Venice", "Dave travels to Venice by gondola", 3.0, "r", [], ["Dave", "Venice"]
        ),
    ]
    chunks = pl.DataFrame(
        {
            "chunk_id": ["c1", "c2"],
            "doc_id": ["d1", "d2"],
            "doc": ["a.txt", "b.txt"],
            "position": [0, 0],
            "text": ["Alice met Bob in Oxford.", "Dave took a gondola in Venice."],
        }
    )
    emb = HashingEmbedder()
    tables = build_index_tables(nodes, edges, communities, reports, chunks, emb)
    path = tmp_path / "index.duckdb"
    write_duckdb_index(tables, path, {"embedding_model": emb.model_id, "embedding_dim": emb.dim})
    with DuckDBIndex(path) as idx:
        yield idx


def test_nhop_paths_are_ranked_two_edge_walks():
    nodes, edges = _graph()
    paths = nhop_paths(edges).filter(pl.col("entity_key") == "alice").to_dicts()
    assert paths == [{"entity_key": "alice", "path": ["alice", "bob", "carol"], "rank": 0}]
    # bob's two first hops, the strongest first (carol by 4, alice by 1), each walked on
    bob = nhop_paths(edges).filter(pl.col("entity_key") == "bob").to_dicts()
    assert [(p["path"][1], p["rank"]) for p in bob] == [("carol", 0), ("alice", 1)]


def test_nhop_similarity_decays_with_distance(index):
    params = SearchParams(rel_sim_threshold=2.0)  # no relation recall: relations come from n-hop paths only
    res = local_search(index, "Alice?", params, QueryAnalysis(answer_types=[], entities=["Alice"]))
    top = res.entities[0]
    assert top["name"] == "Alice"
    s_alice = top["score"] / index.entities_by_keys(["alice"])[0]["pagerank"]
    assert s_alice == pytest.approx(1.0, abs=1e-5)
    rels = {(r["source"], r["target"]): r["score"] for r in res.relations}
    # (alice, bob) is hop 0: sim/2 x weight 1 ; (bob, carol) is hop 1: sim/3 x weight 4
    assert rels[("Alice", "Bob")] == pytest.approx(s_alice / 2 * 1.0, rel=1e-5)
    assert rels[("Bob", "Carol")] == pytest.approx(s_alice / 3 * 4.0, rel=1e-5)
    assert list(rels) == [("Bob", "Carol"), ("Alice", "Bob")]  # ranked by sim x weight
    assert ("Carol", "Dave") not in rels  # three hops away
    assert res.community_reports[0]["title"] == "Alice and Bob"


def test_type_recall_boosts_entities_and_relations(index):
    params = SearchParams(rel_sim_threshold=2.0)
    plain = local_search(index, "Alice?", params, QueryAnalysis([], ["Alice"]))
    typed = local_search(index, "Alice?", params, QueryAnalysis(["PERSON"], ["Alice"]))
    assert typed.entities[0]["score"] == pytest.approx(2 * plain.entities[0]["score"])
    p = {(r["source"], r["target"]): r["score"] for r in plain.relations}
    t = {(r["source"], r["target"]): r["score"] for r in typed.relations}
    assert t[("Alice", "Bob")] == pytest.approx(3 * p[("Alice", "Bob")])  # both endpoints are PERSON: x (1 + 2)


def test_relation_recall_combines_with_nhop(index):
    res = local_search(index, "Alice knows Bob", SearchParams(rel_sim_threshold=0.3), QueryAnalysis([], ["Alice"]))
    rels = {(r["source"], r["target"]): r["score"] for r in res.relations}
    assert ("Alice", "Bob") in rels
    row = next(
        r
        for r in index.relations_by_vector(index.embedder().embed_one("Alice knows Bob"), 10, 0.3)
        if (r["source_key"], r["target_key"]) == ("alice", "bob")
    )
    # recalled by text AND on alice's n-hop path: sim_text x (1 + nhop sim) x weight
    assert rels[("Alice", "Bob")] == pytest.approx(row["sim"] * (1 + 0.5) * 1.0, rel=1e-4)


def test_token_budget_truncates(index):
    res = local_search(
        index, "Alice?", SearchParams(max_tokens=12, rel_sim_threshold=2.0), QueryAnalysis([], ["Alice"])
    )
    assert len(res.entities) < 5 and not res.community_reports


def test_global_and_naive(index):
    # global ranks by importance (issue 11): the report rated 8 comes before the one rated 3, even for a
    # question closer to the latter (it used to rank by similarity alone: "Dave in Venice" first)
    g = global_search(index, "gondola trips in Venice")
    assert [c["title"] for c in g.community_reports] == ["Alice and Bob", "Dave in Venice"]
    assert g.community_reports[1]["score"] > g.community_reports[0]["score"]
    n = naive_search(index, "gondola in Venice")
    assert n.chunks[0]["doc"] == "b.txt"
    with pytest.raises(ValueError):
        query(index, "  ", "local")
    with pytest.raises(ValueError):
        query(index, "x", "sideways")


def previous_vectors(path: Path, embedding_model: str) -> dict:
    """(text, embedding) per table of the published index, if it was built with the same embedder."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return {}
    try:
        rows = con.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchall()
        row = rows[0] if rows else None
        if not row or json.loads(row[0]) != embedding_model:
            return {}
        return _read_previous_vectors(con)
    except duckdb.Error:
        return {}
    finally:
        con.close()


def test_republishing_embeds_only_new_texts(tmp_path):
    class Counting(HashingEmbedder):
        def __init__(self):
            super().__init__()
            self.seen: list[str] = []

        def embed(self, texts):
            self.seen += list(texts)
            return super().embed(texts)

    nodes, edges = _graph()
    communities, reports, chunks = _one_community("Friends")
    first = Counting()
    path = tmp_path / "i.duckdb"
    tables = build_index_tables(nodes, edges, communities, reports, chunks, first)
    write_duckdb_index(tables, path, {"embedding_model": first.model_id, "embedding_dim": first.dim})

    chunks2 = pl.concat(
        [
            chunks,
            pl.DataFrame(
                {"chunk_id": ["c2"], "doc_id": ["d2"], "doc": ["b.txt"], "position": [0], "text": ["Carol met Dave."]}
            ),
        ]
    )
    second = Counting()
    again = build_index_tables(
        nodes, edges, communities, reports, chunks2, second, previous_vectors(path, first.model_id)
    )
    assert second.seen == ["Carol met Dave."]
    assert again.entities["embedding"].to_list() == tables.entities["embedding"].to_list()
    fresh = build_index_tables(nodes, edges, communities, reports, chunks2, HashingEmbedder())
    assert again.chunks["embedding"].to_list() == fresh.chunks["embedding"].to_list()
    assert previous_vectors(path, "another-model") == {}


def test_preloaded_vectors_give_the_same_results(index):
    from graphrag_pipeline.query import DuckDBIndex

    with DuckDBIndex(index.path, preload=True) as mem:
        for q in ("Alice?", "gondola trips in Venice", "Bob knows Carol"):
            for mode in ("local", "global", "naive"):
                assert query(mem, q, mode).to_dict() == query(index, q, mode).to_dict(), (q, mode)
        v = mem.embedder().embed_one("Alice")
        assert mem.entities_by_vector(v, 2, 0.0) == index.entities_by_vector(v, 2, 0.0)
        assert mem.entities_by_vector(v, 10, 0.99) == index.entities_by_vector(v, 10, 0.99)


def test_preloaded_type_recall_matches_sql_at_the_rank_cut(index):
    from graphrag_pipeline.query import DuckDBIndex

    keys = ["alice", "bob", "carol", "dave", "venice", "nobody"]
    with DuckDBIndex(index.path, preload=True) as mem:
        for types in (["PERSON"], ["PERSON", "GEO"], ["GEO"], ["NONE"]):
            for k in (1, 2, 3, 10):
                assert mem.keys_of_types(types, keys, k) == index.keys_of_types(types, keys, k), (types, k)
        assert mem.nhop(["alice"]) == index.nhop(["alice"])
        assert mem.relations_by_pairs([("alice", "bob")]) == index.relations_by_pairs([("alice", "bob")])
        assert mem.reports_for_entities(["alice", "dave"], 5) == index.reports_for_entities(["alice", "dave"], 5)


def test_an_index_whose_paths_carry_weights_is_still_read_in_their_order(index, tmp_path):
    """An index published before paths had a rank (schema < 6: paths with their edge weights) is
    read as it was ranked, by the weights, with and without preloading; the same for an
    Elasticsearch entity document synced before (RAGFlow's n_hop_with_weight)."""
    import shutil

    from graphrag_pipeline.index.es_reader import _n_hop_paths

    keys = ["alice", "bob", "carol", "dave", "venice"]
    expected = index.nhop(keys)
    assert [p["entity_key"] for p in expected].count("bob") == 2  # an entity with two ranked paths
    old = tmp_path / "old.duckdb"
    shutil.copy(index.path, old)
    weight = {(a, b): w for a, b, w in EDGES} | {(b, a): w for a, b, w in EDGES}
    con = duckdb.connect(str(old))
    rows = con.execute("SELECT entity_key, path FROM nhop ORDER BY entity_key DESC, rank DESC").fetchall()
    con.execute("DROP TABLE nhop")
    con.execute("CREATE TABLE nhop (entity_key VARCHAR, path VARCHAR[], weights DOUBLE[], row_hash UBIGINT)")
    for key, path in rows:  # stored against their order, as a delta publish may leave them
        ws = [weight[(path[i], path[i + 1])] for i in range(len(path) - 1)]
        con.execute("INSERT INTO nhop VALUES (?, ?, ?, 0)", [key, path, ws])
    con.close()
    for preload in (False, True):
        with DuckDBIndex(old, preload=preload) as legacy:
            assert legacy.nhop(keys) == expected, preload
    legacy_doc = {
        "n_hop_with_weight": [{"path": ["a", "b", "c"], "weights": [2.0, 1.0]}, {"path": ["a", "d"], "weights": [1.0]}]
    }
    assert _n_hop_paths(legacy_doc) == [["a", "b", "c"], ["a", "d"]]
    assert _n_hop_paths({"n_hop_paths": [["a", "b"]], "n_hop_with_weight": []}) == [["a", "b"]]
    assert _n_hop_paths({}) == []


def test_a_hub_description_is_bounded_not_dropped(tmp_path):
    # `fast` joins every fragment: a hub's description of thousands of fragments took the whole budget
    # (the first entity did not fit and none was kept), so local and mix search returned nothing for it
    from graphrag_pipeline.ingest.tokens import count_tokens
    from graphrag_pipeline.query.search import DESCRIPTION_MAX_TOKENS, mix_search

    nodes, edges = _graph()
    fragments = [f"In {1700 + i % 300}, Alice wrote letter number {i} to Bob about the weather." for i in range(3000)]
    nodes = nodes.with_columns(
        pl.when(pl.col("key") == "alice")
        .then(pl.lit("\n".join(fragments)))
        .otherwise(pl.col("description"))
        .alias("description")
    )
    communities, reports, chunks = _one_community("Friends in Oxford")
    path = _write_index(tmp_path / "index.duckdb", nodes, edges, communities, reports, chunks)
    assert count_tokens(nodes.filter(pl.col("key") == "alice")["description"][0]) > SearchParams().max_tokens
    with DuckDBIndex(path) as idx:
        for search in (local_search, mix_search):
            res = search(idx, "Alice?", SearchParams(), QueryAnalysis([], ["Alice"]))
            alice = next(e for e in res.entities if e["name"] == "Alice")
            assert alice["description"].startswith(fragments[0]) and alice["description"].endswith(" …")
            assert count_tokens(alice["description"]) <= DESCRIPTION_MAX_TOKENS + 2
            assert res.relations and res.community_reports[0]["title"] == "Alice and Bob"
            assert "Alice wrote letter number 0" in res.context and "letter number 2999" not in res.context
            assert count_tokens(res.context) <= SearchParams().max_tokens


def test_mix_keeps_the_top_report_when_chunks_could_fill_the_budget(tmp_path):
    # found by an exploratory run on Debian manuals: large chunks took the whole budget, fitted before
    # the report, and mix (the default mode) answered without a report
    from graphrag_pipeline.ingest.tokens import count_tokens
    from graphrag_pipeline.query.search import mix_search

    nodes, edges = _graph()
    communities, reports, _ = _one_community("Alice and Bob were friends in Oxford for many years. " * 12)
    texts = [" ".join(f"Alice met Bob in Oxford on day {i} of term {t}." for i in range(14)) for t in range(20)]
    chunks = pl.DataFrame(
        {
            "chunk_id": [f"c{t + 1}" for t in range(20)],
            "doc_id": [f"d{t + 1}" for t in range(20)],
            "doc": [f"{t + 1}.txt" for t in range(20)],
            "position": [0] * 20,
            "text": texts,
        }
    )
    path = _write_index(tmp_path / "index.duckdb", nodes, edges, communities, reports, chunks)
    params = SearchParams(max_tokens=count_tokens(texts[0]) * 5 + 150)  # 5 chunks, and not the report after them
    with DuckDBIndex(path) as idx:
        res = mix_search(idx, "Alice?", params, QueryAnalysis([], ["Alice"]))
    assert res.community_reports and res.community_reports[0]["title"] == "Alice and Bob"
    assert res.chunks and count_tokens(res.context) <= params.max_tokens


def test_mix_keeps_a_report_larger_than_half_the_budget_when_the_chunks_leave_room(tmp_path):
    # a report is fitted first in half of the budget; a longer one still fits in what the chunks leave
    from graphrag_pipeline.ingest.tokens import count_tokens
    from graphrag_pipeline.query.search import mix_search

    nodes, edges = _graph()
    summary = "Alice and Bob were friends in Oxford for many years. " * 40
    communities, reports, chunks = _one_community(summary)
    path = _write_index(tmp_path / "index.duckdb", nodes, edges, communities, reports, chunks)
    params = SearchParams(max_tokens=int(count_tokens(summary) * 1.6))
    with DuckDBIndex(path) as idx:
        res = mix_search(idx, "Alice?", params, QueryAnalysis([], ["Alice"]))
    assert res.community_reports and res.chunks
    assert count_tokens(res.context) <= params.max_tokens
