"""The typed seams (index/protocol.py, llm/protocol.py): every implementation - both index readers,
both embedders, the LLM client and the tests' fake clients - satisfies its Protocol, with the
Protocol's own signatures, and the SearchIndex Protocol lists exactly what the query module uses."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

from graphrag_pipeline.index.duckdb_reader import DuckDBIndex
from graphrag_pipeline.index.embedding import EndpointEmbedder, HashingEmbedder
from graphrag_pipeline.index.es_reader import EsIndex
from graphrag_pipeline.index.protocol import Embedder, SearchIndex
from graphrag_pipeline.llm.client import LLMClient
from graphrag_pipeline.llm.protocol import ChatClient, EmbeddingClient, QueryClient
from graphrag_pipeline_tests.fake_llm import FakeChatClient
from graphrag_pipeline_tests.test_search import index  # noqa: F401 - a small published DuckDB index (fixture)


class FakeEmbeddingClient:
    """An embeddings endpoint in process: one fixed-length vector per text."""

    embedding_model: str | None = "fake-embed"

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.array([[len(t) + 1.0, 1.0, 0.0] for t in texts], dtype=np.float32).reshape(len(texts), 3)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True) if len(texts) else rows


def members(protocol) -> list[str]:
    """Methods, properties and annotated data members the Protocol declares itself."""
    declared = {n for n, v in vars(protocol).items() if callable(v) or isinstance(v, property)}
    return sorted(n for n in declared | set(vars(protocol).get("__annotations__", {})) if not n.startswith("_"))


def shape(fn) -> list[tuple]:
    """Parameter names, kinds and defaults (annotations are strings and may be spelled differently)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def signature_problems(protocol, cls, obj=None) -> list[str]:
    """What `cls` lacks or declares differently; a data member may be set on the instance `obj`."""
    problems = []
    for name in members(protocol):
        want = vars(protocol).get(name)  # None: an annotated data member
        have = inspect.getattr_static(cls, name, None)
        if want is None or isinstance(want, property):
            if have is None and name not in getattr(cls, "__annotations__", {}) and name not in vars(obj or cls):
                problems.append(f"{cls.__name__}.{name} missing")
            continue
        if have is None or not callable(have):
            problems.append(f"{cls.__name__}.{name} missing")
        elif shape(have) != shape(want):
            problems.append(
                f"{cls.__name__}.{name}{inspect.signature(have)} != {protocol.__name__}.{name}{inspect.signature(want)}"
            )
    return problems


@pytest.mark.parametrize("cls", [DuckDBIndex, EsIndex])
def test_both_index_readers_have_the_search_index_signatures(cls):
    assert issubclass(cls, SearchIndex)
    assert signature_problems(SearchIndex, cls) == []


def test_a_published_duckdb_index_is_a_search_index(index):  # noqa: F811 - the fixture
    assert isinstance(index, SearchIndex)
    assert isinstance(index.embedder(), Embedder)
    assert isinstance(object.__new__(EsIndex), SearchIndex)  # an unopened reader: the members are the class's


def test_the_search_index_protocol_lists_exactly_what_the_query_module_uses():
    import graphrag_pipeline.query.search as search

    tree = ast.parse(Path(search.__file__).read_text())
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "index"
    }
    assert used == set(members(SearchIndex))


def test_both_embedders_are_embedders_with_its_signatures():
    hashing = HashingEmbedder(dim=16)
    endpoint = EndpointEmbedder(FakeEmbeddingClient())
    for embedder in (hashing, endpoint):
        assert isinstance(embedder, Embedder)
        assert signature_problems(Embedder, type(embedder), embedder) == []
        vectors = embedder.embed(["a", "bb"])
        assert vectors.shape == (2, embedder.dim) and embedder.embed_one("a").shape == (embedder.dim,)
    assert endpoint.model_id == "endpoint:fake-embed"


def test_the_llm_client_and_the_fake_clients_satisfy_the_client_protocols():
    client = LLMClient(model="m", api_key="test-key", base_url="http://127.0.0.1:9/v1", embedding_model="e")
    try:
        for protocol in (ChatClient, EmbeddingClient, QueryClient):
            assert isinstance(client, protocol)
        assert (
            signature_problems(ChatClient, LLMClient) == []
            and signature_problems(EmbeddingClient, LLMClient, client) == []
        )
    finally:
        client.close()
    fake = FakeChatClient()
    assert isinstance(fake, ChatClient) and signature_problems(ChatClient, FakeChatClient) == []
    assert not isinstance(fake, EmbeddingClient)
    assert isinstance(FakeEmbeddingClient(), EmbeddingClient)
    assert signature_problems(EmbeddingClient, FakeEmbeddingClient) == []


def test_the_fake_chat_client_answers_like_the_scripted_endpoint():
    from graphrag_pipeline.llm import prompts

    fake = FakeChatClient()
    [one, two] = fake.chat_many(
        [
            {"messages": [{"role": "user", "content": prompts.GLOBAL_REDUCE.format(points="- [a] x", question="q")}]},
            {"messages": [{"role": "user", "content": "hello"}]},
        ]
    )
    assert one.text.startswith("GLOBAL ANSWER") and two.text == "OK"
    assert fake.llm.calls["global_reduce"] == 1 and fake.llm.calls["unknown"] == 1


def test_a_signature_that_differs_from_the_protocol_is_reported():
    class Renamed:
        def chat(
            self, msgs, *, temperature=0.0, max_tokens=None, logit_bias=None, response_format=None, use_cache=True
        ): ...

        def chat_many(self, calls): ...

    class OtherDefault(Renamed):
        def chat(
            self, messages, *, temperature=0.7, max_tokens=None, logit_bias=None, response_format=None, use_cache=True
        ): ...

    assert isinstance(Renamed(), ChatClient)  # runtime_checkable only sees the names ...
    assert signature_problems(Embedder, HashingEmbedder) == ["HashingEmbedder.dim missing"]  # set per instance
    assert signature_problems(ChatClient, Renamed) and signature_problems(
        ChatClient, OtherDefault
    )  # ... this sees the rest
    assert signature_problems(SearchIndex, Renamed)  # missing members
    assert signature_problems(EmbeddingClient, FakeChatClient) == [
        "FakeChatClient.embed missing",
        "FakeChatClient.embedding_model missing",
    ]
