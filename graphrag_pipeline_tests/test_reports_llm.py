"""Tests for graphrag_pipeline.reports.llm: context packing, JSON parsing and LLM reports
with retries and the extractive fallback. The LLM is a scripted fake client (no HTTP)."""

from __future__ import annotations

import csv
import io
import json

import polars as pl
import pytest

from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA, with_metrics
from graphrag_pipeline.ingest.tokens import count_tokens
from graphrag_pipeline.llm import prompts
from graphrag_pipeline.llm.client import ChatResult, LLMError
from graphrag_pipeline.reports.llm import (
    DEFAULT_RATING_NOTE,
    LLM_FALLBACK_NOTE,
    SUB_REPORTS_HEADING,
    ReportOutcome,
    llm_report,
    pack_community_context,
    parse_report_json,
)
from graphrag_pipeline.reports.offline import EXTRACTIVE_NOTE, CommunityReport, Finding


class FakeClient:
    """Answers with scripted texts (an Exception item is raised); records every call."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[tuple[list[dict], dict]] = []

    def chat(self, messages, **kw):
        self.calls.append((messages, kw))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return ChatResult(text=answer, cached=False, prompt_tokens=10, completion_tokens=5)

    def prompt(self, i: int = 0) -> str:
        return self.calls[i][0][0]["content"]


# -- a small graph ---------------------------------------------------------------------------------------

ENTITIES = {  # key: (name, type, description)
    "isaac newton": ("Isaac Newton", "PERSON", "Mathematician and physicist who wrote the Principia."),
    "royal society": ("Royal Society", "ORGANIZATION", "Learned society in London."),
    "robert hooke": ("Robert Hooke", "PERSON", "Curator of experiments at the Royal Society."),
    "edmond halley": ("Edmond Halley", "PERSON", "Astronomer who paid for the printing of the Principia."),
    "cambridge": ("Cambridge", "GEO", "University town on the Cam."),
    "trinity college": ("Trinity College", "ORGANIZATION", "College of the University of Cambridge."),
    "isaac barrow": ("Isaac Barrow", "PERSON", "First Lucasian professor, Newton's teacher."),
    "outsider": ("Outsider", "PERSON", "Not in the community."),
}
RELATIONS = [  # (a, b, description, weight)
    ("isaac newton", "royal society", "Newton was president of the Royal Society.", 9.0),
    ("isaac newton", "robert hooke", "Hooke quarrelled with Newton over optics and gravitation.", 4.0),
    ("isaac newton", "edmond halley", "Halley paid for the Principia.", 6.0),
    ("robert hooke", "royal society", "Hooke was curator of experiments.", 2.0),
    ("edmond halley", "royal society", "Halley was clerk of the Royal Society.", 3.0),
    ("isaac newton", "cambridge", "Newton studied and taught at Cambridge.", 1.0),
    ("cambridge", "trinity college", "Trinity College is a college of the University of Cambridge.", 5.0),
    ("isaac barrow", "trinity college", "Barrow was Master of Trinity College.", 5.0),
    ("isaac barrow", "cambridge", "Barrow held the Lucasian chair at Cambridge.", 4.0),
    ("isaac newton", "isaac barrow", "Barrow taught Newton and passed him the Lucasian chair.", 7.0),
    ("isaac newton", "outsider", "An outside link.", 50.0),
]
MEMBERS = [k for k in ENTITIES if k != "outsider"]
SOCIETY = ["isaac newton", "royal society", "robert hooke", "edmond halley"]
COLLEGE = ["cambridge", "trinity college", "isaac barrow"]


def make_graph(descriptions: dict[str, str] | None = None, long: int = 0) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Nodes and edges frames (NODE_SCHEMA / EDGE_SCHEMA) with degree and pagerank computed.
    ``long`` repeats each description that many extra times (to make a community large)."""
    descriptions = descriptions or {}
    nodes = []
    for key, (name, etype, desc) in ENTITIES.items():
        desc = descriptions.get(key, desc)
        desc = " ".join([desc] * (1 + long))
        nodes.append(
            {
                "key": key,
                "name": name,
                "type": etype,
                "description": desc,
                "descriptions": [desc],
                "source_ids": ["c1"],
                "doc_ids": ["d1"],
                "degree": 0,
                "pagerank": 0.0,
            }
        )
    edges = []
    for a, b, desc, w in RELATIONS:
        s, t = sorted((a, b))
        desc = " ".join([desc] * (1 + long))
        edges.append(
            {
                "source_key": s,
                "target_key": t,
                "source": ENTITIES[s][0],
                "target": ENTITIES[t][0],
                "description": desc,
                "descriptions": [desc],
                "keywords": [],
                "weight": w,
                "source_ids": ["c1"],
                "doc_ids": ["d1"],
            }
        )
    nodes_df = pl.DataFrame(nodes, schema=NODE_SCHEMA)
    edges_df = pl.DataFrame(edges, schema=EDGE_SCHEMA)
    return with_metrics(nodes_df, edges_df), edges_df


@pytest.fixture(scope="module")
def graph():
    return make_graph()


def community(members=MEMBERS, weight=0.42, level=0, cid="L0-abc"):
    return {
        "community_id": cid,
        "level": level,
        "parent_id": None,
        "nodes": list(members),
        "size": len(members),
        "weight": weight,
    }


def report_json(**over) -> str:
    body = {
        "title": "Newton and the Royal Society",
        "summary": "Newton presided over the Royal Society; Hooke and Halley were its officers.",
        "rating": 7.5,
        "rating_explanation": "Central to early modern science.",
        "findings": [
            {"summary": "Newton led the society", "explanation": "He was its president."},
            {"summary": "Halley financed the Principia", "explanation": "He paid for the printing."},
        ],
    }
    body.update(over)
    return json.dumps({k: v for k, v in body.items() if v is not None})


def rows(table: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(table)))


# -- valid answers ----------------------------------------------------------------------------------------


def test_valid_json_gives_an_llm_report(graph):
    nodes, edges = graph
    client = FakeClient(report_json())
    outcome = llm_report(client, community(), nodes, edges, language="English")
    assert isinstance(outcome, ReportOutcome)
    assert not outcome.fallback and outcome.error == "" and outcome.attempts == 1
    r = outcome.report
    assert (r.community_id, r.level, r.extractive) == ("L0-abc", 0, False)
    assert r.title == "Newton and the Royal Society"
    assert r.summary.startswith("Newton presided")
    assert r.rating == 7.5 and r.rating_explanation == "Central to early modern science."
    assert r.findings == [
        Finding("Newton led the society", "He was its president."),
        Finding("Halley financed the Principia", "He paid for the printing."),
    ]
    assert r.entities[0] == "Isaac Newton" and len(r.entities) == len(MEMBERS) and "Outsider" not in r.entities
    assert CommunityReport.from_dict(json.loads(json.dumps(r.to_dict()))) == r

    # one user message built from the template; temperature 0, no response_format, cache allowed
    [(messages, kwargs)] = client.calls
    assert len(messages) == 1 and messages[0]["role"] == "user"
    assert kwargs == {"temperature": 0.0}
    prompt = messages[0]["content"]
    assert prompt.startswith(prompts.COMMUNITY_REPORT.split("{", 1)[0])
    assert "id,entity,type,description,degree" in prompt and "id,source,target,description,weight" in prompt
    assert "Write in English." in prompt and "Outsider" not in prompt and "An outside link" not in prompt
    assert SUB_REPORTS_HEADING not in prompt


def test_language_reaches_the_prompt(graph):
    nodes, edges = graph
    client = FakeClient(report_json())
    llm_report(client, community(), nodes, edges, language="German")
    assert "Write in German." in client.prompt()


def test_json_in_a_code_fence_with_chatter():
    text = (
        "Sure! Here is the report you asked for:\n\n```json\n"
        + report_json(title="Fenced {title}")
        + "\n```\n\nLet me know if you need anything else {or more}."
    )
    parsed = parse_report_json(text)
    assert parsed["title"] == "Fenced {title}" and parsed["rating"] == 7.5 and len(parsed["findings"]) == 2


def test_json_with_chatter_and_no_fence():
    parsed = parse_report_json("Report: " + report_json() + " Hope this helps!")
    assert parsed["title"] == "Newton and the Royal Society"


def test_trailing_commas_single_quotes_and_unquoted_keys_are_repaired():
    text = """{
      'title': 'Repaired report',
      summary: 'Single quotes, unquoted keys and trailing commas.',
      "rating": 6,
      "findings": [{'summary': 'one', 'explanation': 'first',}, ],
    }"""
    parsed = parse_report_json(text)
    assert parsed == {
        "title": "Repaired report",
        "summary": "Single quotes, unquoted keys and trailing commas.",
        "rating": 6.0,
        "rating_explanation": "",
        "findings": [{"summary": "one", "explanation": "first"}],
    }


def test_json_written_with_curly_quotes_is_read():
    # a whole report quoted with typographic quotes (and some inside a text, which stay)
    text = json.dumps(json.loads(report_json(title="Newton and the \u201cRoyal\u201d Society")), ensure_ascii=False)
    curly = "".join(
        ("\u201c" if i % 2 == 0 else "\u201d") + part if i else part for i, part in enumerate(text.split('"'))
    )
    assert '"' not in curly
    parsed = parse_report_json(curly)
    assert parsed is not None and parsed["title"] == "Newton and the \u201cRoyal\u201d Society"
    assert parsed["rating"] == 7.5 and len(parsed["findings"]) == 2


def test_curly_quotes_inside_straight_json_are_left_alone():
    # straight JSON (cut, so repaired) whose texts quote with curly quotes: read as written
    full = report_json(
        findings=[
            {"summary": "The motto", "explanation": "Its motto is \u201cNullius in verba\u201d, take nobody's word."},
            {"summary": "Halley financed the Principia", "explanation": "He paid for the printing."},
        ]
    )
    full = json.dumps(json.loads(full), ensure_ascii=False)
    parsed = parse_report_json(full[: full.index("He paid for") + 6])
    assert parsed["findings"][0]["explanation"] == "Its motto is \u201cNullius in verba\u201d, take nobody's word."
    assert parsed["findings"][1]["summary"] == "Halley financed the Principia"


def test_truncated_json_is_completed():
    full = report_json()
    cut = full[: full.index("He paid for") + 6]  # cut inside the last finding's explanation
    parsed = parse_report_json(cut)
    assert parsed["title"] == "Newton and the Royal Society"
    assert parsed["findings"][0] == {"summary": "Newton led the society", "explanation": "He was its president."}
    assert parsed["findings"][1]["summary"] == "Halley financed the Principia"
    # truncated before the findings: still a report, without findings
    parsed = parse_report_json(full[: full.index('"findings"') + 5])
    assert parsed["title"] == "Newton and the Royal Society" and parsed["findings"] == []


@pytest.mark.parametrize(
    "rating, expected",
    [
        (8, 8.0),
        (7.5, 7.5),
        ("7.5", 7.5),
        ("8/10", 8.0),
        ("7 / 10", 7.0),
        ("4 out of 5", 8.0),
        ("80%", 8.0),
        ("about 6", 6.0),
        ("7,5", 7.5),
        (12, 10.0),
        (-3, 0.0),
        ("15", 10.0),
    ],
)
def test_rating_forms(rating, expected):
    assert parse_report_json(report_json(rating=rating))["rating"] == pytest.approx(expected)


@pytest.mark.parametrize("rating", ["high", "", [7], {"value": 7}, True, None])
def test_rating_without_a_number_keeps_the_report_valid(rating):
    # documented choice: no number -> rating None here, 10 x community weight in llm_report
    parsed = parse_report_json(report_json(rating=rating))
    assert parsed is not None and parsed["rating"] is None


def test_llm_report_defaults_a_missing_rating_to_ten_times_the_weight(graph):
    nodes, edges = graph
    outcome = llm_report(FakeClient(report_json(rating="high")), community(weight=0.42), nodes, edges)
    assert not outcome.fallback
    assert outcome.report.rating == pytest.approx(4.2)
    assert DEFAULT_RATING_NOTE in outcome.report.rating_explanation
    assert outcome.report.rating_explanation.startswith("Central to early modern science.")
    outcome = llm_report(FakeClient(report_json(rating="8/10")), community(), nodes, edges)
    assert outcome.report.rating == 8.0 and DEFAULT_RATING_NOTE not in outcome.report.rating_explanation


def test_findings_as_plain_strings_and_capped_at_ten():
    parsed = parse_report_json(report_json(findings=["Newton led the society", "Halley paid"]))
    assert parsed["findings"] == [
        {"summary": "Newton led the society", "explanation": ""},
        {"summary": "Halley paid", "explanation": ""},
    ]
    many = [{"summary": f"finding {i}", "explanation": f"because {i}"} for i in range(14)]
    parsed = parse_report_json(report_json(findings=many))
    assert [f["summary"] for f in parsed["findings"]] == [f"finding {i}" for i in range(10)]
    mixed = ["plain", {"explanation": "no summary: dropped"}, 42, {"Summary": "Keys", "Explanation": "any case"}]
    assert parse_report_json(report_json(findings=mixed))["findings"] == [
        {"summary": "plain", "explanation": ""},
        {"summary": "Keys", "explanation": "any case"},
    ]


def test_missing_optional_fields_default():
    parsed = parse_report_json('{"title": "T", "summary": "S", "rating": 3}')
    assert parsed == {"title": "T", "summary": "S", "rating": 3.0, "rating_explanation": "", "findings": []}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "I cannot write this report.",
        "[1, 2, 3]",
        "42",
        '"just a string"',
        '{"summary": "no title"}',
        '{"title": "", "summary": "empty title"}',
        '{"title": "no summary"}',
        '{"title": "T", "summary": ["not", 1]}',
        '{"title": 5, "summary": "numeric title"}',
    ],
)
def test_invalid_answers(text):
    assert parse_report_json(text) is None


# -- retries and fallback ---------------------------------------------------------------------------------


def test_invalid_twice_falls_back_to_the_extractive_report(graph):
    nodes, edges = graph
    client = FakeClient("I am sorry, I cannot help with that.", '{"summary": "still no title"}')
    outcome = llm_report(client, community(), nodes, edges)
    assert outcome.fallback and outcome.attempts == 2
    assert "could not be parsed after 2 attempts" in outcome.error and "title" in outcome.error
    assert outcome.raw == '{"summary": "still no title"}'
    r = outcome.report
    assert r.extractive and r.community_id == "L0-abc"
    assert r.summary.startswith(f"{EXTRACTIVE_NOTE} {LLM_FALLBACK_NOTE} ")
    assert LLM_FALLBACK_NOTE in r.rating_explanation and EXTRACTIVE_NOTE in r.rating_explanation
    assert r.rating == pytest.approx(4.2)
    assert r.entities[0] == "Isaac Newton"
    # the retry bypasses the cache, with the same prompt
    assert [kw for _, kw in client.calls] == [{"temperature": 0.0}, {"temperature": 0.0, "use_cache": False}]
    assert client.calls[0][0] == client.calls[1][0]


def test_invalid_then_valid_uses_the_second_answer(graph):
    nodes, edges = graph
    client = FakeClient("```json\n{oops", report_json(title="Second try"))
    outcome = llm_report(client, community(), nodes, edges)
    assert not outcome.fallback and outcome.attempts == 2 and outcome.report.title == "Second try"
    assert client.calls[1][1]["use_cache"] is False


def test_max_attempts_bounds_the_calls(graph):
    nodes, edges = graph
    client = FakeClient("nope", "nope", "nope", report_json())
    outcome = llm_report(client, community(), nodes, edges, max_attempts=3)
    assert outcome.fallback and len(client.calls) == 3
    assert all(kw.get("use_cache") is False for _, kw in client.calls[1:])
    client = FakeClient("nope", report_json())
    assert llm_report(client, community(), nodes, edges, max_attempts=1).fallback and len(client.calls) == 1


def test_llm_error_propagates(graph):
    nodes, edges = graph
    with pytest.raises(LLMError, match="HTTP 500"):
        llm_report(FakeClient(LLMError("chat request failed: HTTP 500", status=500)), community(), nodes, edges)


# -- context packing ----------------------------------------------------------------------------------------


def test_full_context_ordering(graph):
    nodes, edges = graph
    ent, rel, sub = pack_community_context(community(), nodes, edges)
    assert sub == ""
    e, r = rows(ent), rows(rel)
    assert e[0] == ["id", "entity", "type", "description", "degree"]
    assert r[0] == ["id", "source", "target", "description", "weight"]
    assert [x[0] for x in e[1:]] == [str(i) for i in range(len(MEMBERS))]
    assert e[1][1] == "Isaac Newton" and e[1][4] == "6"  # most connected (outside edge counts in degree)
    degrees = [int(x[4]) for x in e[1:]]
    assert degrees == sorted(degrees, reverse=True)
    # relations: inside the community only, by combined endpoint degree then weight
    assert len(r) - 1 == len(RELATIONS) - 1 and all("Outsider" not in x for x in r)
    deg = {x[1]: int(x[4]) for x in e[1:]}
    keys = [(-(deg[x[1]] + deg[x[2]]), -float(x[4])) for x in r[1:]]
    assert keys == sorted(keys)
    assert r[1][3] == "Newton was president of the Royal Society." and r[1][4] == "9"


def test_packing_respects_max_tokens_and_keeps_the_most_connected(graph):
    nodes, edges = graph
    full_ent, full_rel, _ = pack_community_context(community(), nodes, edges)
    full = count_tokens(full_ent) + count_tokens(full_rel)
    for budget in (full, full - 1, full // 2, 60, 30, 0):
        ent, rel, sub = pack_community_context(community(), nodes, edges, max_tokens=budget)
        e, r = rows(ent), rows(rel)
        if budget >= full:
            assert (ent, rel) == (full_ent, full_rel)
            continue
        assert sub == ""
        headers_only = count_tokens(rows_text(e[:1])) + count_tokens(rows_text(r[:1]))
        assert count_tokens(ent) + count_tokens(rel) <= max(budget, headers_only)
        assert len(e) + len(r) < len(rows(full_ent)) + len(rows(full_rel))
        # each table is a prefix of its full ordering
        assert e == rows(full_ent)[: len(e)] and r == rows(full_rel)[: len(r)]
        if len(e) > 1:
            assert e[1][1] == "Isaac Newton"
    ent, rel, _ = pack_community_context(community(), nodes, edges, max_tokens=60)
    assert 1 < len(rows(ent)) < len(MEMBERS) + 1 and 1 < len(rows(rel))  # both tables get rows
    ent, rel, _ = pack_community_context(community(), nodes, edges, max_tokens=0)
    assert rows(ent) == [["id", "entity", "type", "description", "degree"]]
    assert rows(rel) == [["id", "source", "target", "description", "weight"]]


def rows_text(table_rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(table_rows)
    return buf.getvalue().rstrip("\n")


def test_small_budget_reaches_the_prompt(graph):
    nodes, edges = graph
    client = FakeClient(report_json())
    llm_report(client, community(), nodes, edges, max_tokens=40)
    prompt = client.prompt()
    assert "Isaac Newton" in prompt and "Master of Trinity College" not in prompt


def test_csv_quoting_of_commas_quotes_and_newlines():
    tricky = 'Wrote "Principia", and Opticks;\nlater, Master of the Mint.\r\n  Second line, "quoted".'
    nodes, edges = make_graph({"isaac newton": tricky})
    ent, _, _ = pack_community_context(community(), nodes, edges)
    lines = ent.split("\n")
    assert len(lines) == len(MEMBERS) + 1  # one line per row: descriptions flattened
    newton = rows(ent)[1]
    assert newton[1] == "Isaac Newton" and len(newton) == 5
    assert newton[3] == 'Wrote "Principia", and Opticks; later, Master of the Mint. Second line, "quoted".'
    assert '"Wrote ""Principia"", and Opticks;' in lines[1]  # csv-quoted, quotes doubled


def _society_report() -> CommunityReport:
    return CommunityReport(
        community_id="L1-society",
        level=1,
        title="The Royal Society circle of Newton",
        summary="Newton, Hooke and Halley around the Royal Society.",
        rating=7.0,
        rating_explanation="Core.",
        findings=[Finding("Officers", "Hooke and Halley served the society.")],
        entities=["Isaac Newton", "Royal Society", "Robert Hooke", "Edmond Halley"],
        extractive=False,
    )


def _college_report() -> CommunityReport:
    return CommunityReport(
        community_id="L1-college",
        level=1,
        title="Cambridge and Trinity College",
        summary="Barrow, Trinity College and the town.",
        rating=5.0,
        rating_explanation="Local.",
        findings=[],
        entities=["Cambridge", "Trinity College", "Isaac Barrow"],
        extractive=False,
    )


def test_sub_community_reports_replace_raw_rows_when_too_large():
    nodes, edges = make_graph(long=6)  # long descriptions: the full context is large
    com = community()
    full_ent, full_rel, _ = pack_community_context(com, nodes, edges)
    full = count_tokens(full_ent) + count_tokens(full_rel)
    society, college = _society_report(), _college_report()
    budget = int(full * 0.6)
    assert count_tokens(society.text()) + count_tokens(college.text()) + 20 < budget // 2
    subs = {"L1-society": society, "L1-college": college, "L1-unrelated": _college_report()}

    ent, rel, sub = pack_community_context(
        com, nodes, edges, max_tokens=budget, sub_reports=subs, children=["L1-college", "L1-society"]
    )
    assert sub.lstrip().startswith(SUB_REPORTS_HEADING)
    assert sub.index(society.title) < sub.index(college.title)  # biggest sub-community first
    assert society.text() in sub and college.text() in sub
    assert count_tokens(ent) + count_tokens(rel) + count_tokens(sub) <= budget
    # every member is covered by an included sub-report: no raw entity rows; only the cross relation
    assert rows(ent) == [["id", "entity", "type", "description", "degree"]]
    r = rows(rel)
    # (equal combined degree: the heavier first; ids keep the rank in the full ordering)
    assert [x[:3] for x in r[1:]] == [["1", "Isaac Barrow", "Isaac Newton"], ["2", "Cambridge", "Isaac Newton"]]

    # only the society sub-report known: the college members stay as raw rows, fewer than before
    ent, rel, sub = pack_community_context(
        com, nodes, edges, max_tokens=budget, sub_reports={"L1-society": society}, children=["L1-college", "L1-society"]
    )
    names = [x[1] for x in rows(ent)[1:]]
    assert society.title in sub and college.title not in sub
    assert names and set(names) <= {"Cambridge", "Trinity College", "Isaac Barrow"}
    assert all(not {x[1], x[2]} <= set(society.entities) for x in rows(rel)[1:])  # no relation inside the society
    assert count_tokens(ent) + count_tokens(rel) + count_tokens(sub) <= budget

    # the prompt carries the sub-report and fewer raw entity rows than the plain packing
    client = FakeClient(report_json())
    outcome = llm_report(
        client,
        com,
        nodes,
        edges,
        max_tokens=budget,
        sub_reports={"L1-society": society},
        children=["L1-society", "L1-college"],
    )
    prompt = client.prompt()
    assert society.title in prompt and SUB_REPORTS_HEADING in prompt
    prompt_entities = rows(prompt[prompt.index("Entities\n") + 9 : prompt.index("\n\nRelations\n")])[1:]
    plain_entities = rows(pack_community_context(com, nodes, edges, max_tokens=budget)[0])[1:]
    assert 0 < len(prompt_entities) < len(plain_entities)
    assert "Isaac Newton" in [x[1] for x in plain_entities]
    assert not {x[1] for x in prompt_entities} & set(society.entities)
    assert len(outcome.report.entities) == len(MEMBERS)  # the report still lists every member


def test_sub_reports_are_ignored_when_the_full_context_fits_or_nothing_fits(graph):
    nodes, edges = graph
    subs = {"L1-society": _society_report()}
    ent, rel, sub = pack_community_context(community(), nodes, edges, sub_reports=subs, children=["L1-society"])
    assert sub == "" and len(rows(ent)) == len(MEMBERS) + 1
    # too large for half of a tiny budget: plain packing, no sub-report
    ent, rel, sub = pack_community_context(
        community(), nodes, edges, max_tokens=60, sub_reports=subs, children=["L1-society"]
    )
    assert sub == "" and rows(ent)[1][1] == "Isaac Newton"
    # children without reports, or reports without children: plain packing
    for kwargs in ({"sub_reports": subs}, {"children": ["L1-society"]}, {"sub_reports": subs, "children": ["L1-x"]}):
        assert pack_community_context(community(), nodes, edges, max_tokens=60, **kwargs)[2] == ""


def test_wrapped_and_differently_keyed_objects():
    assert parse_report_json('{"report": ' + report_json() + "}")["title"] == "Newton and the Royal Society"
    assert parse_report_json("[" + report_json() + "]")["rating"] == 7.5
    parsed = parse_report_json('{"Title": "T", "SUMMARY": "S", "ratingExplanation": "E", "Rating": "9"}')
    assert (parsed["title"], parsed["summary"], parsed["rating_explanation"], parsed["rating"]) == ("T", "S", "E", 9.0)


def test_a_stored_report_is_reused_only_by_the_same_model_prompt_and_language(monkeypatch):
    """A backfill after a new model, an edited report prompt or another language writes reports again."""
    from types import SimpleNamespace

    from graphrag_pipeline.llm import prompts
    from graphrag_pipeline.reports.llm import report_generator

    a, b = SimpleNamespace(model="model-a"), SimpleNamespace(model="model-b")
    assert report_generator(None) == "extractive"
    first = report_generator(a, "English")
    assert first.startswith("llm:model-a#") and first == report_generator(a, "English")
    assert report_generator(b, "English") != first and report_generator(a, "French") != first
    monkeypatch.setattr(prompts, "COMMUNITY_REPORT", prompts.COMMUNITY_REPORT + "\nBe brief.")
    assert report_generator(a, "English") != first
