"""Tests for graphrag_pipeline.extract.subgraph and graphrag_pipeline.graph.merge."""

from __future__ import annotations

import polars as pl
import pytest

from graphrag_pipeline.extract.records import Entity, Extraction, Relation
from graphrag_pipeline.extract.subgraph import ENTITY_ROWS, RELATION_ROWS, build_doc_subgraph
from graphrag_pipeline.graph.merge import merge_subgraphs
from graphrag_pipeline.graph.tables import DESCRIPTION_SEP, EDGE_SCHEMA, NODE_SCHEMA, with_metrics
from graphrag_pipeline.storage.files import ParquetBundle


def ent(name: str, etype: str = "PERSON", description: str = "") -> Entity:
    return Entity(name, etype, description, "")


def rel(source: str, target: str, weight: float = 1.0, description: str = "", keywords=()) -> Relation:
    return Relation(source, target, description, list(keywords), weight, "")


def merge_docs(*docs):
    """docs: (doc_id, [(position, chunk_id, Extraction)]) -> (MergeResult, [DocSubgraph])"""
    subs = [build_doc_subgraph(doc_id, exts) for doc_id, exts in docs]
    entities = pl.concat([s.entities for s in subs])
    relations = pl.concat([s.relations for s in subs])
    return merge_subgraphs(entities, relations), subs


def node(result, key: str) -> dict:
    rows = result.nodes.filter(pl.col("key") == key).to_dicts()
    assert len(rows) == 1, (key, result.nodes["key"].to_list())
    return rows[0]


# ---------------------------------------------------------------------------------------------
# build_doc_subgraph
# ---------------------------------------------------------------------------------------------


def test_subgraph_rows_and_schema():
    ext = Extraction(
        [ent(' "Isaac  Newton" ', "person", " Physicist. "), ent("Royal Society", "organization")],
        [rel("Isaac Newton", "royal society", 2, " president ", ["leads", ""])],
    )
    sub = build_doc_subgraph("doc1", [(3, "chunk-a", ext)])
    assert sub.entities.schema == pl.Schema(ENTITY_ROWS)
    assert sub.relations.schema == pl.Schema(RELATION_ROWS)
    assert sub.entities.select("doc_id", "position", "source_id", "key", "name", "type", "description").rows() == [
        ("doc1", 3, "chunk-a", "isaac newton", "Isaac Newton", "PERSON", "Physicist."),
        ("doc1", 3, "chunk-a", "royal society", "Royal Society", "ORGANIZATION", ""),
    ]
    r = sub.relations.to_dicts()[0]
    assert (r["source_key"], r["target_key"], r["source"], r["target"]) == (
        "isaac newton",
        "royal society",
        "Isaac Newton",
        "Royal Society",
    )
    assert r["description"] == "president" and r["keywords"] == ["leads"] and r["weight"] == 2.0
    assert sub.dropped_relations == 0


def test_subgraph_drops_and_counts_self_and_unknown_relations():
    ext = Extraction(
        [ent("Darwin"), ent("Wallace"), ent("   ")],  # a blank name is no entity
        [
            rel("Darwin", "Wallace"),
            rel("Darwin", "DARWIN"),  # self-relation (same key)
            rel("Darwin", "Lyell"),  # endpoint not extracted in this chunk
            rel("", "Wallace"),
        ],
        dropped_relations=2,  # already dropped by the extractor
    )
    sub = build_doc_subgraph("d", [(0, "c0", ext)])
    assert sub.relations.height == 1
    assert sub.entities["key"].to_list() == ["darwin", "wallace"]
    assert sub.dropped_relations == 2 + 3


def test_subgraph_relation_endpoints_must_be_in_the_same_chunk():
    sub = build_doc_subgraph(
        "d",
        [
            (0, "c0", Extraction([ent("Darwin")])),
            (1, "c1", Extraction([ent("Wallace")], [rel("Darwin", "Wallace")])),
        ],
    )
    assert sub.relations.height == 0 and sub.dropped_relations == 1


def test_subgraph_of_nothing_is_empty_with_schema():
    sub = build_doc_subgraph("d", [])
    assert sub.entities.height == 0 and sub.entities.schema == pl.Schema(ENTITY_ROWS)
    assert sub.relations.height == 0 and sub.relations.schema == pl.Schema(RELATION_ROWS)


# ---------------------------------------------------------------------------------------------
# merge_subgraphs: nodes
# ---------------------------------------------------------------------------------------------


def test_same_name_in_different_case_is_one_node_with_most_frequent_form():
    result, _ = merge_docs(
        ("doc1", [(0, "c1", Extraction([ent("royal society", "ORGANIZATION")]))]),
        (
            "doc2",
            [
                (0, "c2", Extraction([ent("Royal Society", "ORGANIZATION"), ent("ROYAL SOCIETY", "ORGANIZATION")])),
                (1, "c3", Extraction([ent("Royal Society", "ORGANIZATION")])),
            ],
        ),
    )
    assert result.nodes.height == 1
    assert node(result, "royal society")["name"] == "Royal Society"  # 2 of 4, though seen second


def test_display_name_tie_goes_to_the_first_seen_form():
    result, _ = merge_docs(
        ("doc1", [(0, "c1", Extraction([ent("Charles DARWIN"), ent("charles darwin")]))]),
        ("doc2", [(0, "c2", Extraction([ent("charles darwin"), ent("Charles DARWIN")]))]),
    )
    assert node(result, "charles darwin")["name"] == "Charles DARWIN"


def test_type_majority_vote_and_first_seen_tie_break():
    result, _ = merge_docs(
        ("doc1", [(0, "c1", Extraction([ent("Cambridge", "LOCATION"), ent("Trinity", "ORGANIZATION")]))]),
        ("doc2", [(0, "c2", Extraction([ent("Cambridge", "ORGANIZATION"), ent("Trinity", "LOCATION")]))]),
        ("doc3", [(0, "c3", Extraction([ent("cambridge", "organization")]))]),
    )
    assert node(result, "cambridge")["type"] == "ORGANIZATION"  # 2 votes to 1
    assert node(result, "trinity")["type"] == "ORGANIZATION"  # 1 to 1: first seen (doc1)


def test_descriptions_deduplicated_in_first_seen_order():
    result, _ = merge_docs(
        (
            "doc1",
            [
                (0, "c1", Extraction([ent("Newton", description="Physicist.")])),
                (1, "c2", Extraction([ent("Newton", description="")])),
            ],
        ),
        (
            "doc2",
            [
                (0, "c3", Extraction([ent("Newton", description="President of the Royal Society.")])),
                (1, "c4", Extraction([ent("Newton", description="Physicist.")])),
            ],
        ),
    )
    n = node(result, "newton")
    assert n["descriptions"] == ["Physicist.", "President of the Royal Society."]
    assert n["description"] == DESCRIPTION_SEP.join(n["descriptions"])


def test_node_without_any_description_has_empty_list():
    result, _ = merge_docs(("doc1", [(0, "c1", Extraction([ent("Newton")]))]))
    n = node(result, "newton")
    assert n["descriptions"] == [] and n["description"] == ""


def test_source_and_doc_ids_are_unioned():
    result, _ = merge_docs(
        ("doc-b", [(0, "c2", Extraction([ent("Newton")])), (1, "c1", Extraction([ent("Newton")]))]),
        ("doc-a", [(0, "c3", Extraction([ent("newton")])), (1, "c3", Extraction([ent("NEWTON")]))]),
    )
    n = node(result, "newton")
    assert n["source_ids"] == ["c1", "c2", "c3"]
    assert n["doc_ids"] == ["doc-a", "doc-b"]


# ---------------------------------------------------------------------------------------------
# merge_subgraphs: edges
# ---------------------------------------------------------------------------------------------


def test_relation_weights_summed_per_unordered_pair():
    result, _ = merge_docs(
        (
            "doc1",
            [
                (
                    0,
                    "c1",
                    Extraction(
                        [ent("Newton"), ent("Royal Society")],
                        [rel("Newton", "Royal Society", 2, "president", ["leads"])],
                    ),
                )
            ],
        ),
        (
            "doc2",
            [
                (
                    0,
                    "c2",
                    Extraction(
                        [ent("royal society"), ent("NEWTON")],
                        [rel("royal society", "NEWTON", 3, "elected him", ["member", "leads"])],
                    ),
                ),
                (
                    1,
                    "c3",
                    Extraction(
                        [ent("Newton"), ent("Royal Society")], [rel("Newton", "Royal Society", 0.5, "president")]
                    ),
                ),
            ],
        ),
    )
    assert result.edges.height == 1
    e = result.edges.to_dicts()[0]
    assert (e["source_key"], e["target_key"]) == ("newton", "royal society")
    assert (e["source"], e["target"]) == ("Newton", "Royal Society")
    assert e["weight"] == pytest.approx(5.5)
    assert e["descriptions"] == ["president", "elected him"]
    assert e["description"] == "president\nelected him"
    assert e["keywords"] == ["leads", "member"]
    assert e["source_ids"] == ["c1", "c2", "c3"] and e["doc_ids"] == ["doc1", "doc2"]
    assert result.dropped_relations == 0


def test_edges_are_canonical_and_schemas_hold():
    result, _ = merge_docs(
        (
            "d",
            [
                (
                    0,
                    "c",
                    Extraction(
                        [ent("Zeta"), ent("Alpha"), ent("Mu")],
                        [rel("Zeta", "Alpha"), rel("Mu", "Alpha"), rel("Zeta", "Mu")],
                    ),
                )
            ],
        ),
    )
    assert result.nodes.schema == pl.Schema(NODE_SCHEMA)
    assert result.edges.schema == pl.Schema(EDGE_SCHEMA)
    pairs = result.edges.select("source_key", "target_key").rows()
    assert pairs == sorted(pairs) and all(a < b for a, b in pairs)
    assert len(set(pairs)) == 3


def test_merge_drops_and_counts_self_and_unknown_relations():
    entities = pl.DataFrame(
        [("d", 0, "c", "newton", "Newton", "PERSON", ""), ("d", 0, "c", "hooke", "Hooke", "PERSON", "")],
        schema=ENTITY_ROWS,
        orient="row",
    )

    def r(s, t):
        return ("d", 0, "c", s, t, s.title(), t.title(), "", [], 1.0)

    relations = pl.DataFrame(
        [
            r("newton", "hooke"),
            r("hooke", "newton"),
            r("newton", "newton"),
            r("newton", "leibniz"),
            r("ghost", "hooke"),
        ],
        schema=RELATION_ROWS,
        orient="row",
    )
    result = merge_subgraphs(entities, relations)
    assert result.dropped_relations == 3
    assert result.edges.height == 1 and result.edges["weight"].to_list() == [2.0]


def test_merge_with_only_dropped_relations_has_no_edges():
    entities = pl.DataFrame([("d", 0, "c", "newton", "Newton", "PERSON", "")], schema=ENTITY_ROWS, orient="row")
    relations = pl.DataFrame(
        [("d", 0, "c", "newton", "newton", "Newton", "Newton", "", [], 1.0)], schema=RELATION_ROWS, orient="row"
    )
    result = merge_subgraphs(entities, relations)
    assert result.edges.height == 0 and result.dropped_relations == 1
    assert result.nodes["degree"].to_list() == [0]
    assert result.nodes["pagerank"].to_list() == [pytest.approx(1.0)]


def test_degree_and_pagerank():
    result, _ = merge_docs(
        (
            "d",
            [
                (
                    0,
                    "c",
                    Extraction(
                        [ent("Hub"), ent("A"), ent("B"), ent("C"), ent("Loner")],
                        [rel("Hub", "A"), rel("Hub", "B"), rel("Hub", "C"), rel("A", "B")],
                    ),
                )
            ],
        ),
    )
    nodes = {r["key"]: r for r in result.nodes.to_dicts()}
    assert {k: v["degree"] for k, v in nodes.items()} == {"hub": 3, "a": 2, "b": 2, "c": 1, "loner": 0}
    assert sum(v["pagerank"] for v in nodes.values()) == pytest.approx(1.0)
    assert nodes["hub"]["pagerank"] == max(v["pagerank"] for v in nodes.values())
    assert nodes["loner"]["pagerank"] < nodes["c"]["pagerank"]


def test_merge_of_empty_input():
    empty_e = pl.DataFrame(schema=ENTITY_ROWS)
    empty_r = pl.DataFrame(schema=RELATION_ROWS)
    result = merge_subgraphs(empty_e, empty_r)
    assert result.nodes.height == 0 and result.edges.height == 0 and result.dropped_relations == 0
    assert result.nodes.schema == pl.Schema(NODE_SCHEMA) and result.edges.schema == pl.Schema(EDGE_SCHEMA)
    # relations without any entity are all dropped and counted
    orphan = pl.DataFrame([("d", 0, "c", "a", "b", "A", "B", "", [], 1.0)], schema=RELATION_ROWS, orient="row")
    assert merge_subgraphs(empty_e, orphan).dropped_relations == 1


def test_subgraph_and_merge_drop_counts_are_separate():
    result, subs = merge_docs(
        ("d", [(0, "c", Extraction([ent("A"), ent("B")], [rel("A", "B"), rel("A", "a"), rel("A", "Z")]))]),
    )
    assert subs[0].dropped_relations == 2  # self + unknown, dropped before merging
    assert result.dropped_relations == 0  # nothing left to drop at merge level
    assert result.edges.height == 1


# ---------------------------------------------------------------------------------------------
# incremental merge: only the changed documents' mentions are read, the result equals a full merge
# ---------------------------------------------------------------------------------------------
def _doc_rows(doc: str, mentions: list[tuple[str, str]], pairs: list[tuple[str, str]]):
    """Entity rows (name, description) and relation rows (a, b) of one document, one chunk."""
    import polars as pl

    from graphrag_pipeline.extract.subgraph import ENTITY_ROWS, RELATION_ROWS

    ents = pl.DataFrame(
        [(doc, 0, f"{doc}-c0", n.casefold(), n, "person", d) for n, d in mentions], schema=ENTITY_ROWS, orient="row"
    )
    rels = pl.DataFrame(
        [
            (doc, 0, f"{doc}-c0", a.casefold(), b.casefold(), a, b, f"{a} and {b} in {doc}", ["k"], 1.0)
            for a, b in pairs
        ],
        schema=RELATION_ROWS,
        orient="row",
    )
    return ents, rels


def test_incremental_merge_equals_a_full_merge(tmp_path):
    import polars as pl

    from graphrag_pipeline.graph.mentions import update_merged_graph
    from graphrag_pipeline.graph.merge import merge_subgraphs
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    store = Store(Paths(tmp_path))
    people = [f"Person {i}" for i in range(40)]

    def write(doc: str, offset: int, extra: str = "") -> None:
        names = [people[(offset + j) % 40] for j in range(6)] + ([extra] if extra else [])
        ents, rels = _doc_rows(
            doc,
            [(n, f"{n} appears in {doc}") for n in names],
            [(names[j], names[j + 1]) for j in range(len(names) - 1)] + [(names[0], names[0])],
        )
        store.write_subgraph(doc, ents, rels, {"dropped_relations": 1})

    docs = [f"doc{i:02d}" for i in range(30)]
    for i, d in enumerate(docs):
        write(d, i)
    first = update_merged_graph(store, docs)
    assert first.full and first.documents_changed == 30
    again = update_merged_graph(store, docs)
    assert not again.full and again.documents_changed == 0 and again.nodes.equals(first.nodes)

    write("doc05", 5, extra="Newcomer")  # one document changes, one is deleted, one is added
    write("doc99", 17)
    live = [d for d in docs if d != "doc11"] + ["doc99"]
    delta = update_merged_graph(store, live)
    assert not delta.full and (delta.documents_changed, delta.documents_removed) == (2, 1)
    assert 0 < delta.affected_keys < 20
    ents, rels = store.read_subgraphs(live)
    full = merge_subgraphs(ents, rels)
    assert delta.nodes.equals(full.nodes) and delta.edges.equals(full.edges)
    assert delta.dropped_relations == full.dropped_relations + len(live)  # self-loops + each document's own count
    assert "newcomer" in delta.nodes["key"].to_list()
    # a damaged bundle is not trusted: everything is merged again from the per-document files
    for f in (tmp_path / "graph").glob("mentions.nodes-*.parquet"):
        f.write_bytes(b"garbage")
    healed = update_merged_graph(store, live)
    assert healed.full and healed.nodes.equals(full.nodes)
    stored = pl.read_parquet([str(f) for f in sorted((tmp_path / "graph").glob("mentions.nodes-*.parquet"))])
    assert stored.height == full.nodes.height


@pytest.mark.parametrize("slice_edges", [4096, 3])
def test_incremental_merge_equals_a_full_merge_over_random_edit_sequences(tmp_path, monkeypatch, slice_edges):
    """Edits that rename entities (another surface form becomes the most frequent), make keys
    appear and vanish (and with them relations dropped for a missing end), remove and add
    documents: after every step the incremental merge equals a full merge, dropped count included,
    and so does the graph stored in slices (sliced_graph) and the knowledge graph linked to them;
    with slices of a few edges, an update writes only some of them, and slices that outgrow their
    share are cut again."""
    import random

    from graphrag_pipeline.graph.mentions import update_merged_graph
    from graphrag_pipeline.graph.merge import merge_subgraphs
    from graphrag_pipeline.storage import sliced_graph
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    monkeypatch.setattr(sliced_graph, "SLICE_EDGES", slice_edges)
    monkeypatch.setattr(sliced_graph, "RECUT_FACTOR", 2)
    rng = random.Random(11)
    store = Store(Paths(tmp_path))
    base = [f"name{i}" for i in range(25)]
    forms = {b: [b, b.upper(), b.capitalize()] for b in base}
    rare = [f"rare{i}" for i in range(12)]

    def write(doc: str) -> None:
        names = [rng.choice(forms[b]) for b in rng.sample(base, rng.randint(2, 6))]
        pairs = [tuple(rng.sample(names, 2)) for _ in range(rng.randint(1, 6))]
        # rare names: named by few documents, so edits make them appear and vanish, while
        # relations of other documents point at them (kept or dropped with them)
        named_rare = rng.sample(rare, rng.randint(0, 1))
        names += named_rare
        pairs += [(names[0], r) for r in rng.sample(rare, 2)]
        pairs += [(names[1], names[1])] * rng.randint(0, 1)  # a self-loop
        ents, rels = _doc_rows(doc, [(n, f"{n} in {doc}") for n in names], pairs)
        store.write_subgraph(doc, ents, rels, {"dropped_relations": 0})

    live = [f"doc{i:03d}" for i in range(20)]
    for d in live:
        write(d)
    update_merged_graph(store, live)
    written = []
    for step in range(25):
        kind = rng.random()
        if kind < 0.6:
            for d in rng.sample(live, rng.randint(1, 2)):
                write(d)
        elif kind < 0.8 and len(live) > 3:
            live.remove(rng.choice(live))
        else:
            d = f"doc{100 + step:03d}"
            write(d)
            live.append(d)
        live.sort()
        delta = update_merged_graph(store, live)
        assert not delta.full, step
        full = merge_subgraphs(*store.read_subgraphs(live))
        assert delta.nodes.equals(full.nodes), step
        assert delta.edges.equals(full.edges), step
        assert delta.dropped_relations == full.dropped_relations, step
        store.write_graph("knowledge_graph", delta.nodes, delta.edges, files=delta.files)
        nodes, edges = store.read_graph("knowledge_graph")  # from disk (the memo is off)
        assert nodes.equals(full.nodes) and edges.equals(full.edges), step
        among = store.read_graph_among("knowledge_graph", full.nodes["key"].to_list()[::3])
        wanted = set(full.nodes["key"].to_list()[::3])
        assert among[0].equals(full.nodes.filter(pl.col("key").is_in(wanted))), step
        inside = pl.col("source_key").is_in(wanted) & pl.col("target_key").is_in(wanted)
        assert among[1].equals(full.edges.filter(inside)), step
        written.append((delta.slices_written, len(delta.files)))
    if slice_edges == 3:  # many slices, some written per update; all when a slice outgrew its share
        assert all(n > 20 for _, n in written) and sum(w for w, _ in written) < 0.75 * sum(n for _, n in written)
        assert min(w / n for w, n in written) < 0.3 and any(w == n for w, n in written)
    else:
        assert all(n == 3 for _, n in written)


def test_chunk_table_follows_changed_documents_only(tmp_path):
    import os

    import polars as pl

    from graphrag_pipeline.graph.mentions import all_chunks
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import CHUNK_ROWS, Store

    store = Store(Paths(tmp_path))

    def write(doc: str, n: int, tag: str = "") -> None:
        rows = [
            (f"{doc}-{i}{tag}", doc, f"{doc}.txt", i, f"text {i} of {doc}{tag}", 5, None, None, None) for i in range(n)
        ]
        store.write_chunks(doc, pl.DataFrame(rows, schema=CHUNK_ROWS, orient="row"), {})

    docs = [f"d{i:03d}" for i in range(60)]
    for i, d in enumerate(docs):
        write(d, 1 + i % 3)
    assert all_chunks(store, docs).equals(store.read_all_chunks(docs))
    write("d010", 4, "-v2")
    live = [d for d in docs if d != "d020"]
    reads = []
    original = store.read_all_chunks
    store.read_all_chunks = lambda keys, optional=(): reads.append(list(keys)) or original(keys, optional)
    out = all_chunks(store, live)
    assert reads == [["d010"]]  # only the changed document's file was read
    assert out.equals(original(live))
    os.utime(store._doc_file("chunks", "d030", ".parquet"))  # a rewrite with the same content
    assert all_chunks(store, live).equals(original(live))


def test_a_document_whose_extraction_is_behind_its_chunks_keeps_its_previous_chunk_rows(tmp_path):
    import shutil

    import polars as pl

    from graphrag_pipeline.graph.mentions import all_chunks
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import CHUNK_ROWS, ENTITY_ROWS, RELATION_ROWS, Store

    store = Store(Paths(tmp_path))

    def chunk(doc: str, content: str) -> None:
        rows = [(f"{doc}-{content}", doc, f"{doc}.txt", 0, f"text of {doc} {content}", 5, None, None, None)]
        store.write_chunks(doc, pl.DataFrame(rows, schema=CHUNK_ROWS, orient="row"), {"content_hash": content})

    def extract(doc: str, content: str) -> None:
        empty = pl.DataFrame(schema=ENTITY_ROWS), pl.DataFrame(schema=RELATION_ROWS)
        store.write_subgraph(doc, *empty, {"content_hash": content})

    docs = ["a", "b", "c"]
    for d in docs:
        chunk(d, "v1")
        extract(d, "v1")
    first = all_chunks(store, docs)
    chunk("b", "v2")  # chunked again; its extraction failed, so its subgraph is still of v1
    for _ in range(2):  # and looked at again by the next call
        held: set[str] = set()
        assert all_chunks(store, docs, held=held).equals(first) and held == {"b"}
    # the shards cannot be read: every document's current chunks are read, and none is said held
    shutil.rmtree(tmp_path / "graph")
    held = set()
    assert all_chunks(store, docs, held=held).equals(store.read_all_chunks(docs)) and held == set()
    extract("b", "v2")  # b is extracted: its new chunks are published
    assert all_chunks(store, docs, held=held).equals(store.read_all_chunks(docs)) and held == set()
    chunk("d", "v2")  # a document the shards have no rows of is read as it is
    extract("d", "v1")
    docs.append("d")
    assert all_chunks(store, docs, held=held).equals(store.read_all_chunks(docs)) and held == set()


def test_graph_check_finds_dangling_looped_unordered_and_duplicate_edges():
    from graphrag_pipeline.defs.checks import _graph_problems

    nodes = pl.DataFrame({"key": ["a", "b", "c", "c"]})
    edges = pl.DataFrame(
        {
            "source_key": ["a", "a", "a", "b", "c", "b"],
            "target_key": ["b", "b", "zz", "b", "a", "x"],
        }
    )
    problems = _graph_problems(nodes, edges)
    assert problems == [
        "duplicate node keys",
        "2 edges point to missing nodes",
        "1 self-loops",
        "1 edges not stored in canonical order",
        "1 duplicate edges",
    ]
    assert _graph_problems(nodes.unique(), edges.head(1)) == []


def test_metrics_count_edges_to_keys_missing_from_the_nodes_like_networkx():
    import networkx as nx

    nodes = pl.DataFrame({"key": ["a", "b", "c"]})
    edges = pl.DataFrame(
        {"source_key": ["a", "a", "b", "c"], "target_key": ["b", "q", "c", "c"], "weight": [2.0, 1.0, 3.0, 5.0]}
    )
    out = with_metrics(nodes.with_columns(pl.lit(0).alias("degree"), pl.lit(0.0).alias("pagerank")), edges)
    g = nx.Graph()
    g.add_nodes_from(["a", "b", "c"])
    g.add_weighted_edges_from([("a", "b", 2.0), ("a", "q", 1.0), ("b", "c", 3.0)])
    pr = nx.pagerank(g, weight="weight")
    assert out["degree"].to_list() == [g.degree("a"), g.degree("b"), g.degree("c")]
    assert out["pagerank"].to_list() == pytest.approx([pr["a"], pr["b"], pr["c"]], rel=1e-4)


def test_metrics_on_random_multigraphs_match_networkx_with_summed_weights():
    """Degree (distinct neighbours) and PageRank from one sparse matrix, on random graphs with a pair
    given twice (either way round), zero weights, missing weights (1.0) and nodes without edges:
    as networkx gives them for the graph whose pair weights are summed."""
    import random

    import networkx as nx

    rng = random.Random(3)
    for trial in range(40):
        keys = [f"n{i}" for i in range(rng.randint(2, 30))]
        rows = []
        for _ in range(rng.randint(1, 80)):
            a, b = rng.sample(keys, 2)
            rows.append((a, b, rng.choice([0.0, 0.5, 1.0, 2.0, 7.0, None])))
        if trial % 2:  # every pair once, as a merged graph has them (the CSR form without a sort)
            seen: set = set()
            rows = [r for r in rows if frozenset(r[:2]) not in seen and not seen.add(frozenset(r[:2]))]
        edges = pl.DataFrame(
            rows, schema={"source_key": pl.Utf8, "target_key": pl.Utf8, "weight": pl.Float64}, orient="row"
        )
        nodes = pl.DataFrame({"key": keys, "degree": [0] * len(keys), "pagerank": [0.0] * len(keys)})
        out = with_metrics(nodes, edges)
        g = nx.Graph()
        g.add_nodes_from(keys)
        for a, b, w in rows:
            w = 1.0 if w is None else w
            g.add_edge(a, b, weight=(g[a][b]["weight"] if g.has_edge(a, b) else 0.0) + w)
        pr = nx.pagerank(g, weight="weight", tol=1e-10, max_iter=1000)
        assert out["degree"].to_list() == [g.degree(k) for k in keys], trial
        assert out["pagerank"].to_list() == pytest.approx([pr[k] for k in keys], abs=1e-5), trial


def test_metrics_of_edges_in_the_merged_graphs_order_take_the_triangle_and_equal_the_full_matrix(monkeypatch):
    """Edges as a merged graph stores them (each pair once, source key before target key, sorted)
    over nodes sorted by key: degree and PageRank come from the upper triangle alone (no sort of
    both directions), equal to those of the full matrix and to networkx's; any other order takes
    the full matrix."""
    import random

    import networkx as nx
    import numpy as np

    from graphrag_pipeline.graph import tables

    calls = []
    full = tables._adjacency
    monkeypatch.setattr(tables, "_adjacency", lambda *a: calls.append(1) or full(*a))
    rng = random.Random(8)
    for trial in range(30):
        keys = sorted(f"n{i}" for i in range(rng.randint(2, 40)))
        pairs = {tuple(sorted(rng.sample(keys, 2))) for _ in range(rng.randint(1, 120))}
        rows = sorted((a, b, rng.choice([0.0, 0.5, 1.0, 3.0, None])) for a, b in pairs)
        edges = pl.DataFrame(
            rows, schema={"source_key": pl.Utf8, "target_key": pl.Utf8, "weight": pl.Float64}, orient="row"
        )
        nodes = pl.DataFrame({"key": keys, "degree": [0] * len(keys), "pagerank": [0.0] * len(keys)})
        calls.clear()
        out = with_metrics(nodes, edges)
        assert not calls, trial  # the triangle
        swapped = edges.with_columns(source_key=pl.col("target_key"), target_key=pl.col("source_key"))
        shuffled = with_metrics(nodes, edges.reverse() if edges.height > 1 else swapped)
        assert calls == [1], trial  # not in order: the full matrix
        assert out["degree"].equals(shuffled["degree"])
        assert np.allclose(out["pagerank"].to_numpy(), shuffled["pagerank"].to_numpy(), rtol=1e-12, atol=0)
        g = nx.Graph()
        g.add_nodes_from(keys)
        g.add_weighted_edges_from((a, b, 1.0 if w is None else w) for a, b, w in rows)
        pr = nx.pagerank(g, weight="weight", tol=1e-10, max_iter=1000)  # (ours stops at networkx's default tol)
        assert out["degree"].to_list() == [g.degree(k) for k in keys], trial
        assert out["pagerank"].to_list() == pytest.approx([pr[k] for k in keys], abs=5e-5), trial
    # a pair given twice, or an edge from a key to an earlier one, is not the triangle's order either
    nodes = pl.DataFrame({"key": ["a", "b", "c"], "degree": [0] * 3, "pagerank": [0.0] * 3})
    for src, dst in ((["a", "a"], ["b", "b"]), (["b"], ["a"])):
        calls.clear()
        out = with_metrics(nodes, pl.DataFrame({"source_key": src, "target_key": dst, "weight": [1.0] * len(src)}))
        assert calls == [1] and out["degree"].to_list() == [1, 1, 0]


def test_splice_sorted_equals_a_filter_and_a_sort():
    """Random removals and insertions (at both ends, keys that are prefixes of others, non-ASCII):
    the spliced table equals the kept rows and the fresh ones concatenated and sorted; so does the
    fallback for unsorted input and for keys holding the separator."""
    import random

    import numpy as np

    from graphrag_pipeline.graph.merge import splice_sorted

    rng = random.Random(5)
    alphabet = ["a", "ab", "abc", "b", "é", "ü", "z", "zz", "中"]

    def key() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3)))

    for trial in range(60):
        pairs = sorted({tuple(sorted((key(), key()))) for _ in range(rng.randint(0, 40))})
        prev = pl.DataFrame(
            {"source_key": [a for a, _ in pairs], "target_key": [b for _, b in pairs], "v": list(range(len(pairs)))},
            schema={"source_key": pl.Utf8, "target_key": pl.Utf8, "v": pl.Int64},
        )
        gone = np.array(sorted(rng.sample(range(prev.height), rng.randint(0, prev.height))), dtype=np.int64)
        kept = prev.filter(~pl.int_range(pl.len()).is_in(gone.tolist()))
        taken = set(kept.select("source_key", "target_key").iter_rows())
        new = {tuple(sorted((key(), key()))) for _ in range(rng.randint(0, 10))} - taken
        new |= {tuple(prev.row(int(i))[:2]) for i in gone[: rng.randint(0, len(gone))]}  # re-merged rows
        fresh = pl.DataFrame(
            {"source_key": [a for a, _ in new], "target_key": [b for _, b in new], "v": [-1] * len(new)},
            schema=prev.schema,
        )
        by = ["source_key", "target_key"]
        expected = pl.concat([kept, fresh]).sort(by)
        assert splice_sorted(prev, gone, fresh, by).equals(expected), trial
        one = prev.unique("source_key", keep="first").sort("source_key")
        g1 = np.array(sorted(rng.sample(range(one.height), rng.randint(0, one.height))), dtype=np.int64)
        k1 = one.filter(~pl.int_range(pl.len()).is_in(g1.tolist()))
        f1 = pl.DataFrame({"source_key": sorted({key() for _ in range(4)} - set(k1["source_key"]))}).with_columns(
            pl.lit("x").alias("target_key"), pl.lit(-2, pl.Int64).alias("v")
        )
        assert splice_sorted(one, g1, f1, ["source_key"]).equals(pl.concat([k1, f1]).sort("source_key")), trial

    # the fallbacks: unsorted rows, a key holding the separator
    prev = pl.DataFrame({"source_key": ["b", "a\x00", "c"], "target_key": ["x", "y", "z"], "v": [1, 2, 3]})
    fresh = pl.DataFrame({"source_key": ["a"], "target_key": ["q"], "v": [9]})
    out = splice_sorted(prev, np.array([2], dtype=np.int64), fresh, ["source_key", "target_key"])
    assert out.equals(pl.concat([prev.head(2), fresh]).sort("source_key", "target_key"))


def test_metrics_and_splice_survive_keys_a_valid_graph_has_not():
    """An edge with a missing end and a duplicated node key (not a valid graph: the checks name it)
    do not make the metrics fail; a separator inside a fresh key sends
    the splice to the sorting fallback (it looked at the previous keys only)."""
    import numpy as np

    from graphrag_pipeline.graph.merge import splice_sorted
    from graphrag_pipeline.graph.tables import with_metrics

    edges = pl.DataFrame(
        {"source_key": ["a", "b", None, "c"], "target_key": ["b", "c", "a", None], "weight": [1.0, 2.0, 1.0, None]}
    )
    nodes = pl.DataFrame({"key": ["a", "b", "c"], "degree": [0] * 3, "pagerank": [0.0] * 3})
    out = with_metrics(nodes, edges)
    assert out["degree"].to_list() == [1, 2, 1] and (out["pagerank"] > 0).all()
    doubled = with_metrics(pl.concat([nodes, nodes.head(1)]), edges)  # numbered as before (by joins)
    assert doubled.height == 4 and doubled["degree"].to_list()[2] == 1

    prev = pl.DataFrame({"source_key": ["a", "b"], "target_key": ["z", "c"], "v": [1, 2]})
    fresh = pl.DataFrame({"source_key": ["a\x00"], "target_key": ["q"], "v": [9]})
    out = splice_sorted(prev, np.array([], dtype=np.int64), fresh, ["source_key", "target_key"])
    assert out.equals(pl.concat([prev, fresh]).sort("source_key", "target_key"))


def test_an_update_takes_the_prefetched_merged_graph_and_drops_it_once_superseded(tmp_path, monkeypatch):
    """A build prefetches the merged graph (prefetch_graph: nodes and edges, each assembled from its
    slices) and the chunk shards (prefetch_paths) while it sets up its runs; the update of the
    merged graph then decodes neither nodes nor edges, gives the same graph as an update reading
    them itself, and keeps only the new version of each in the memo."""
    import polars as pl

    from graphrag_pipeline.graph.mentions import all_chunks, prefetch_graph, prefetch_paths, update_merged_graph
    from graphrag_pipeline.storage import sliced_graph
    from graphrag_pipeline.storage.files import ParquetBundle, remembering
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    def write(store, doc, names):
        ents, rels = _doc_rows(doc, [(n, f"{n} in {doc}") for n in names], list(zip(names, names[1:])))
        store.write_subgraph(doc, ents, rels, {"dropped_relations": 0})

    homes = [Store(Paths(tmp_path / "a")), Store(Paths(tmp_path / "b"))]
    docs = ["d0", "d1", "d2"]
    for store in homes:
        assert prefetch_paths(store.paths.graph_dir) == []  # nothing built yet
        for doc, names in zip(docs, (["Ann", "Bob"], ["Bob", "Cid"], ["Cid", "Dan"])):
            write(store, doc, names)
        first = update_merged_graph(store, docs)
        assert set(first.files) == {"metrics", "nodes-0000", "edges-0000"}
        write(store, "d1", ["Bob", "Eve", "Cid"])
    plain = update_merged_graph(homes[0], docs)  # memo off: read from disk
    store = homes[1]
    bundle = ParquetBundle(store.paths.graph_dir, "mentions")
    with remembering() as memo:
        manifest = bundle.manifest()
        old = [sliced_graph.memo_key(p, sliced_graph.part_files(bundle, manifest, p)) for p in ("nodes", "edges")]
        prefetch_graph(store.paths.graph_dir)
        for thread in memo._prefetchers:
            thread.join()
        assert all(k in memo._tables for k in old)
        prefetched = update_merged_graph(store, docs)
        assert memo.hits == 2  # nodes and edges came from the prefetch
        manifest = bundle.manifest()
        new = [sliced_graph.memo_key(p, sliced_graph.part_files(bundle, manifest, p)) for p in ("nodes", "edges")]
        assert all(k in memo._tables for k in new)  # the new graph, as written, for the later stages
        assert not any(k in memo._tables for k in old)  # the superseded one is not kept
        assert memo.get_key(new[0]).equals(prefetched.nodes) and memo.get_key(new[1]).equals(prefetched.edges)
        # the graphs linked to the merge's files count their edges from the memo (no footer read)
        store.write_graph("knowledge_graph", prefetched.nodes, prefetched.edges, files=prefetched.files)
        store.copy_graph("knowledge_graph", "resolved_graph")
        with monkeypatch.context() as m:
            m.setattr(pl, "scan_parquet", None)
            assert store.graph_edge_count("resolved_graph") == prefetched.edges.height
    assert store.graph_edge_count("resolved_graph") == prefetched.edges.height  # memo off: from the footers
    assert prefetched.nodes.equals(plain.nodes) and prefetched.edges.equals(plain.edges)
    assert "eve" in prefetched.nodes["key"].to_list() and not prefetched.full
    # the chunk shards, once written
    for doc in docs:
        store.write_chunks(
            doc,
            pl.DataFrame(
                {
                    "chunk_id": [f"{doc}-c0"],
                    "doc_id": [doc],
                    "doc": [doc],
                    "position": [0],
                    "text": [f"text of {doc}"],
                    "tokens": [3],
                }
            ),
            {},
        )
    all_chunks(store, docs)
    listed = [p.name for p in prefetch_paths(store.paths.graph_dir)]
    assert len(listed) == 32 and all(".chunks-" in n for n in listed)


def test_a_hub_keeps_the_first_descriptions_that_fit_the_budget_in_every_merge(tmp_path, monkeypatch):
    """An entity and a relation named by every document keep their distinct descriptions in
    first-seen order only while they fit DESCRIPTION_BUDGET joined (the first always): the row of a
    hub does not grow with the corpus. The incremental merge and entity resolution cut alike, and
    a bundle merged under the older rule is merged again from scratch."""
    from graphrag_pipeline.graph import mentions, tables
    from graphrag_pipeline.graph.mentions import update_merged_graph
    from graphrag_pipeline.graph.resolution import _merge_node_rows
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    monkeypatch.setattr(tables, "DESCRIPTION_BUDGET", 200)
    store = Store(Paths(tmp_path))

    def write(doc: str, note: str = "") -> None:
        text = f"Hub as {doc} tells it{note}, " + "x" * 30
        ents, rels = _doc_rows(doc, [("Hub", text), ("Spoke", f"Spoke in {doc}")], [("Hub", "Spoke")])
        store.write_subgraph(doc, ents, rels, {"dropped_relations": 0})

    docs = [f"doc{i:02d}" for i in range(20)]
    for d in docs:
        write(d)
    first = update_merged_graph(store, docs)
    hub = first.nodes.filter(pl.col("key") == "hub").row(0, named=True)
    assert hub["descriptions"] == [f"Hub as doc{i:02d} tells it, " + "x" * 30 for i in range(len(hub["descriptions"]))]
    assert len(hub["description"]) <= 200 < len(hub["description"]) + 1 + len(hub["descriptions"][0])
    edge = first.edges.row(0, named=True)
    assert len(edge["description"]) <= 200 and 1 < len(edge["descriptions"]) < 20
    assert len(hub["doc_ids"]) == 20  # the ids are all kept

    # an edit past what the budget keeps leaves the hub's text alone; one inside it changes it
    write("doc17", " again")
    later = update_merged_graph(store, docs)
    assert later.nodes.filter(pl.col("key") == "hub").row(0, named=True)["description"] == hub["description"]
    write("doc00", " again")
    later = update_merged_graph(store, docs)
    assert not later.full
    assert (
        later.nodes.filter(pl.col("key") == "hub").row(0, named=True)["descriptions"][0].endswith(" again, " + "x" * 30)
    )
    full = merge_subgraphs(*store.read_subgraphs(docs))
    assert later.nodes.equals(full.nodes) and later.edges.equals(full.edges)

    # one fragment longer than the budget is kept whole
    assert tables.capped_list(["y" * 500, "z"]) == ["y" * 500]
    # resolution merges the lists of the entities it joins under the same cut
    merged = _merge_node_rows([hub, {**hub, "descriptions": ["other " * 10], "description": "other " * 10}])
    assert merged["descriptions"] == hub["descriptions"] and len(merged["description"]) <= 200

    # a bundle written under another merge rule is merged again: from its shards' rows, and the
    # files of the documents changed since
    bundle = ParquetBundle(store.paths.graph_dir, "mentions")
    manifest = bundle.manifest()
    assert manifest["merge_rule"] == [mentions.MERGE_RULE, 200]
    monkeypatch.setattr(tables, "DESCRIPTION_BUDGET", 150)  # a budget changed alone is another rule too
    write("doc03", " once more")
    live = [d for d in docs if d != "doc07"]
    read, real_read = [], store.read_subgraphs
    monkeypatch.setattr(store, "read_subgraphs", lambda keys, *a: read.append(list(keys)) or real_read(keys, *a))
    again = update_merged_graph(store, live)
    assert again.full and read == [["doc03"]]
    full = merge_subgraphs(*real_read(live))
    assert again.nodes.equals(full.nodes) and again.edges.equals(full.edges)
    assert again.dropped_relations == full.dropped_relations and bundle.manifest()["merge_rule"] == [
        mentions.MERGE_RULE,
        150,
    ]
    assert not update_merged_graph(store, live).full
