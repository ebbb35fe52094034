"""LLM stages against the scripted server: the resolution judge and description summaries."""

from __future__ import annotations

import polars as pl

from graphrag_pipeline.graph.resolution import LLMJudge, resolve_incremental
from graphrag_pipeline.graph.summaries import summarise_long_descriptions
from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA, with_metrics
from graphrag_pipeline_tests.fake_llm import FakeLLM, classify
from graphrag_pipeline_tests.llm_server import ScriptedLLMServer, client_for


def _nodes(rows):
    return with_metrics(
        pl.DataFrame(
            [
                {
                    "key": n.casefold(),
                    "name": n,
                    "type": t,
                    "description": f"about {n}",
                    "descriptions": [f"about {n}"],
                    "source_ids": ["c"],
                    "doc_ids": ["d"],
                    "degree": 0,
                    "pagerank": 0.0,
                }
                for n, t in rows
            ],
            schema=NODE_SCHEMA,
        ),
        pl.DataFrame(schema=EDGE_SCHEMA),
    )


def test_llm_judge_merges_same_entities_and_refuses_others():
    nodes = _nodes(
        [
            ("HMS Beagle", "SHIP"),
            ("H.M.S. Beagle", "SHIP"),
            ("Royal Society", "ORGANIZATION"),
            ("Royal Societies", "ORGANIZATION"),
            ("Product 1", "PRODUCT"),
            ("Product 2", "PRODUCT"),
        ]
    )
    with ScriptedLLMServer(FakeLLM()) as srv:
        client = client_for(srv)
        judge = LLMJudge(client, batch_size=1)
        result = resolve_incremental(nodes, pl.DataFrame(schema=EDGE_SCHEMA), {}, judge=judge, judge_id="llm:test")
        asked = [b for b in srv.requests if classify(b["messages"]) == "resolution"]
    assert result.mapping == {"h.m.s. beagle": "hms beagle"} or result.mapping == {"hms beagle": "h.m.s. beagle"}
    assert result.candidates == 2  # Product 1/2 never reach the judge: digits differ
    assert len(asked) == 2 and judge.prompts == 2
    assert "television" in asked[0]["messages"][0]["content"]  # the examples ship with the prompt
    assert result.nodes.height == 5


def test_unparsable_answers_never_merge_and_pairs_are_batched():
    nodes = _nodes([(f"Alpha Centauri {c}", "STAR") for c in "ABCDE"] + [("Alpha Centauri", "STAR")])
    with ScriptedLLMServer(lambda body: "I am not sure about these.") as srv:
        judge = LLMJudge(client_for(srv), batch_size=100)
        result = resolve_incremental(nodes, pl.DataFrame(schema=EDGE_SCHEMA), {}, judge=judge, judge_id="llm:test")
        assert len(srv.requests) == 1  # all candidate pairs of the type in one prompt
    assert result.merged == 0 and judge.unparsed == result.candidates > 0


def test_resolution_only_asks_about_new_entities_and_replays_merges():
    nodes = _nodes([("HMS Beagle", "SHIP"), ("H.M.S. Beagle", "SHIP")])
    with ScriptedLLMServer(FakeLLM()) as srv:
        client = client_for(srv)
        first = resolve_incremental(
            nodes, pl.DataFrame(schema=EDGE_SCHEMA), {}, judge=LLMJudge(client), judge_id="llm:t"
        )
        n = len(srv.requests)
        more = pl.concat([nodes, _nodes([("Beagle Channel", "SHIP")])]).pipe(lambda df: df)
        second = resolve_incremental(
            more, pl.DataFrame(schema=EDGE_SCHEMA), first.state, judge=LLMJudge(client), judge_id="llm:t"
        )
        assert second.merged == 1  # the earlier merge is replayed without asking
        assert second.changed == {"beagle channel"}
        assert len(srv.requests) - n <= 1


def test_long_descriptions_are_summarised_once_and_cached(tmp_path):
    from graphrag_pipeline.llm.cache import KVCache

    frags = [f"Fact number {i} about Darwin." for i in range(13)]
    nodes = pl.DataFrame(
        [
            {
                "key": "darwin",
                "name": "Darwin",
                "type": "PERSON",
                "description": "\n".join(frags),
                "descriptions": frags,
                "source_ids": ["c"],
                "doc_ids": ["d"],
                "degree": 0,
                "pagerank": 0.0,
            },
            {
                "key": "kew",
                "name": "Kew",
                "type": "GEO",
                "description": "a garden",
                "descriptions": ["a garden"],
                "source_ids": ["c"],
                "doc_ids": ["d"],
                "degree": 0,
                "pagerank": 0.0,
            },
        ],
        schema=NODE_SCHEMA,
    )
    edges = pl.DataFrame(schema=EDGE_SCHEMA)
    with ScriptedLLMServer(FakeLLM()) as srv:
        client = client_for(srv, cache=KVCache(tmp_path / "c.sqlite", "llm"))
        out, _, stats = summarise_long_descriptions(nodes, edges, client)
        assert stats.summarised_nodes == 1 and len(srv.requests) == 1
        assert out.filter(pl.col("key") == "darwin")["description"][0] == "Merged description of Darwin."
        assert out.filter(pl.col("key") == "kew")["description"][0] == "a garden"
        summarise_long_descriptions(nodes, edges, client)
        assert len(srv.requests) == 1 and client.usage.cache_hits == 1
