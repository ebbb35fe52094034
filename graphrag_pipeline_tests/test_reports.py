"""Tests for graphrag_pipeline.reports.offline (extractive community reports)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from graphrag_pipeline.extract.records import Entity, Extraction, Relation
from graphrag_pipeline.extract.subgraph import build_doc_subgraph
from graphrag_pipeline.graph.merge import merge_subgraphs
from graphrag_pipeline.reports.offline import EXTRACTIVE_NOTE, CommunityReport, Finding, extractive_report


@pytest.fixture(scope="module")
def graph():
    entities = [
        Entity("Isaac Newton", "PERSON", "Mathematician and physicist.", ""),
        Entity("Royal Society", "ORGANIZATION", "Learned society in London.", ""),
        Entity("Robert Hooke", "PERSON", "Curator of experiments.", ""),
        Entity("Edmond Halley", "PERSON", "Astronomer.", ""),
        Entity("Cambridge", "LOCATION", "University town.", ""),
        Entity("Outsider", "PERSON", "Not in the community.", ""),
    ]
    relations = [
        Relation("Isaac Newton", "Royal Society", "Newton was president of the Royal Society.\nMore.", [], 9.0, ""),
        Relation("Robert Hooke", "Isaac Newton", "Hooke quarrelled with Newton.", [], 4.0, ""),
        Relation("Edmond Halley", "Isaac Newton", "Halley paid for the Principia.", [], 6.0, ""),
        Relation("Robert Hooke", "Royal Society", "Hooke was curator of experiments.", [], 2.0, ""),
        Relation("Isaac Newton", "Cambridge", "Newton studied at Cambridge.", [], 1.0, ""),
        Relation("Outsider", "Isaac Newton", "An outside link that is strongest of all.", [], 50.0, ""),
    ]
    sub = build_doc_subgraph("doc", [(0, "chunk-1", Extraction(entities, relations))])
    merged = merge_subgraphs(sub.entities, sub.relations)
    return merged.nodes, merged.edges


MEMBERS = ["isaac newton", "royal society", "robert hooke", "edmond halley", "cambridge"]


def community(members=MEMBERS, weight=0.37, level=1, cid="L1-abc"):
    return {"community_id": cid, "level": level, "nodes": list(members), "weight": weight}


def test_title_from_most_connected_members(graph):
    nodes, edges = graph
    report = extractive_report(community(), nodes, edges)
    # degrees: newton 5 (incl. the outsider), hooke 2, society 2, halley 1, cambridge 1 -> ties by pagerank
    assert report.title.startswith("Isaac Newton, ")
    top = report.title.removeprefix("Isaac Newton, ").split(" and ")
    assert sorted(top) == ["Robert Hooke", "Royal Society"]
    assert report.entities[0] == "Isaac Newton"
    assert sorted(report.entities) == sorted(
        ["Isaac Newton", "Royal Society", "Robert Hooke", "Edmond Halley", "Cambridge"]
    )
    assert "Outsider" not in report.entities


def test_title_for_small_and_empty_communities(graph):
    nodes, edges = graph
    two = extractive_report(community(["royal society", "robert hooke"]), nodes, edges)
    assert set(two.title.split(" and ")) == {"Royal Society", "Robert Hooke"}
    one = extractive_report(community(["cambridge"]), nodes, edges)
    assert one.title == "Cambridge"
    none = extractive_report(community(["no such key"], cid="L0-x"), nodes, edges)
    assert none.title == "L0-x"


def test_summary_is_extractive_and_mentions_the_strongest_relation(graph):
    nodes, edges = graph
    report = extractive_report(community(), nodes, edges)
    assert report.extractive is True
    assert report.summary.startswith(EXTRACTIVE_NOTE)
    assert EXTRACTIVE_NOTE in report.rating_explanation
    strongest = "Isaac Newton - Royal Society: Newton was president of the Royal Society."
    assert strongest in report.summary
    assert "More." not in report.summary  # only the first line of a description
    # relations in order of weight: 9 (society), 6 (Halley), 4 (Hooke)
    assert (
        report.summary.index("Royal Society: Newton")
        < report.summary.index("Halley paid")
        < report.summary.index("Hooke quarrelled")
    )
    assert "Outsider" not in report.summary and "outside link" not in report.summary
    assert "5 entities" in report.summary


def test_findings_follow_relation_weight_and_end_with_types(graph):
    nodes, edges = graph
    report = extractive_report(community(), nodes, edges, max_findings=3)
    assert len(report.findings) == 4
    assert [f.explanation for f in report.findings[:3]] == [
        "Newton was president of the Royal Society.",
        "Halley paid for the Principia.",
        "Hooke quarrelled with Newton.",
    ]
    assert report.findings[-1].summary == "Entity types"
    assert report.findings[-1].explanation == "Most members are of type PERSON, LOCATION, ORGANIZATION."


def test_community_without_internal_relations(graph):
    nodes, edges = graph
    report = extractive_report(community(["cambridge", "edmond halley"]), nodes, edges)
    assert report.summary.startswith(EXTRACTIVE_NOTE)
    assert "Strongest relations" not in report.summary
    assert [f.summary for f in report.findings] == ["Entity types"]


@pytest.mark.parametrize("weight,rating", [(0.37, 3.7), (1.0, 10.0), (0.0, 0.0), (0.123456, 1.23)])
def test_rating_is_ten_times_weight(graph, weight, rating):
    nodes, edges = graph
    report = extractive_report(community(weight=weight), nodes, edges)
    assert report.rating == pytest.approx(rating)
    assert report.level == 1 and report.community_id == "L1-abc"


def test_round_trip_through_dict_and_json(graph):
    nodes, edges = graph
    report = extractive_report(community(), nodes, edges)
    data = report.to_dict()
    assert isinstance(data["findings"][0], dict)
    again = CommunityReport.from_dict(json.loads(json.dumps(data)))
    assert again == report
    assert isinstance(again.findings[0], Finding)
    assert again.text() == report.text()


def test_text_renders_markdown():
    report = CommunityReport(
        community_id="L0-1",
        level=0,
        title="Newton and the Royal Society",
        summary="A summary.",
        rating=3.7,
        rating_explanation="Why.",
        findings=[Finding("First", "Because."), Finding("Second", "So.")],
    )
    assert report.text() == (
        "# Newton and the Royal Society\n\nA summary.\n\nRating: 3.7 - Why.\n\n## First\n\nBecause.\n\n## Second\n\nSo."
    )


def test_long_descriptions_are_shortened(graph):
    nodes, edges = graph
    long_edges = edges.with_columns(pl.lit("x" * 1000).alias("description"))
    report = extractive_report(community(), nodes, long_edges)
    assert all(len(f.explanation) <= 400 for f in report.findings)
    assert report.findings[0].explanation.endswith("\u2026")
    assert len(report.summary) < 1000


def test_stored_report_ids_are_the_report_files_from_one_listing(tmp_path):
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import Store

    store = Store(Paths(tmp_path / "home"))
    assert store.stored_report_ids() == set()  # no reports folder yet
    for cid in ("L0-a", "L1-b.c"):
        store.write_report(CommunityReport(cid, 0, f"title {cid}", "summary", 5.0, "why", [], ["A"]))
    (store.paths.reports_dir / "notes.txt").write_text("not a report")
    ids = store.stored_report_ids()
    assert ids == {"L0-a", "L1-b.c"}
    assert all((store.paths.reports_dir / f"{k}.json").is_file() for k in ids) and "notes" not in ids
    (store.paths.reports_dir / "L0-a.json").unlink()
    assert store.stored_report_ids() == {"L1-b.c"}
