"""LLMClient against the scripted OpenAI-compatible server: caching, usage, retries, concurrency,
cancellation, embeddings, configuration and secret hygiene. All traffic is real HTTP to 127.0.0.1."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from email.utils import formatdate

import numpy as np
import pytest

from graphrag_pipeline.defs.llm_step import llm_metadata
from graphrag_pipeline.ingest.tokens import count_tokens
from graphrag_pipeline.llm.cache import KVCache
from graphrag_pipeline.llm.client import (
    ChatResult,
    LLMCancelled,
    LLMClient,
    LLMError,
    chat_cache_key,
    parse_retry_after,
    redact_url,
)
from graphrag_pipeline.llm.json_answers import parse_json_reply
from graphrag_pipeline.llm.usage import LLMUsage
from graphrag_pipeline_tests.llm_server import TEST_API_KEY, Reply, ScriptedLLMServer, client_for, embedding_vector

MSG = [
    {"role": "system", "content": "You extract entities."},
    {"role": "user", "content": "Darwin sailed on the Beagle."},
]


@pytest.fixture
def kv(tmp_path) -> KVCache:
    return KVCache(tmp_path / "cache.sqlite")


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _no_secret(*objs) -> None:
    for obj in objs:
        assert TEST_API_KEY not in str(obj)
        assert TEST_API_KEY not in repr(obj)


# -- caching and usage -------------------------------------------------------------------------------


def test_cache_hit_makes_no_request_and_survives_a_new_client(llm_server, kv):
    llm_server.script(Reply("Darwin|Beagle", prompt_tokens=20, completion_tokens=4))
    client = client_for(llm_server, cache=kv)
    first = client.chat(MSG)
    assert first == ChatResult(
        text="Darwin|Beagle", cached=False, prompt_tokens=20, completion_tokens=4, cache_key=first.cache_key
    )
    assert first.cache_key and kv.get(first.cache_key)["text"] == "Darwin|Beagle" and not first.truncated
    second = client.chat(MSG)
    assert second.cached and second.text == "Darwin|Beagle" and second.prompt_tokens == 20
    assert llm_server.chat_count == 1
    u = client.usage_snapshot()
    assert (u.calls, u.cache_hits, u.prompt_tokens, u.completion_tokens) == (1, 1, 20, 4)
    assert client.attempts == 1

    other = client_for(llm_server, cache=KVCache(kv.path))  # a new client (and connection) on the same file
    assert other.chat(MSG).cached
    assert llm_server.chat_count == 1
    assert other.usage_snapshot().to_dict() == {
        "calls": 0,
        "cache_hits": 1,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_usd": 0.0,  # a cached answer costs nothing
        "unpriced_calls": 0,
    }


def test_answers_cut_at_the_output_limit_are_counted_fresh_and_cached(llm_server, kv):
    llm_server.script(Reply('("entity"<|>"A"<|>"X"<|>"cut he', finish_reason="length"), Reply("whole"))
    client = client_for(llm_server, cache=kv)
    cut = client.chat(MSG)
    assert cut.text.endswith("cut he") and cut.truncated  # returned as it came: the parser takes what is whole
    assert client.usage_snapshot().truncated == 1
    again = client.chat(MSG)
    assert again.cached and again.truncated and client.usage_snapshot().truncated == 2  # served again: still cut
    assert again.cache_key == cut.cache_key
    assert client.chat([{"role": "user", "content": "other"}]).text == "whole"
    u = client.usage_snapshot()
    assert (u.calls, u.cache_hits, u.truncated) == (2, 1, 2)
    assert llm_metadata(u)["llm_truncated_answers"] == 2
    # cut at a limit the caller set (the loop check's single token) is not "cut short"
    llm_server.script(Reply("Y", finish_reason="length"))
    client.chat([{"role": "user", "content": "loop?"}], max_tokens=1)
    assert client.usage_snapshot().truncated == 2
    assert "llm_truncated_answers" not in llm_metadata(LLMUsage(calls=3))


def test_use_cache_false_and_empty_answers_are_not_cached(llm_server, kv):
    llm_server.script(Reply(""), Reply("x"), Reply("y"))
    client = client_for(llm_server, cache=kv)
    assert client.chat(MSG).text == ""  # empty answer: returned, not cached
    assert client.chat(MSG).text == "x"  # so this one goes to the server
    assert client.chat(MSG, use_cache=False).text == "y"  # no lookup...
    hit = client.chat(MSG)  # ...but the fresh answer replaces the cached one
    assert (hit.text, hit.cached, hit.prompt_tokens, hit.completion_tokens) == ("y", True, 11, 3)
    assert llm_server.chat_count == 3
    assert client.usage_snapshot().calls == 3 and client.usage_snapshot().cache_hits == 1
    # a key retired with an entry without text (what `build --refresh failed` writes over cut
    # answers) is a miss: asked again, and the new answer is kept
    kv.put(hit.cache_key, {"retired": "cut at the output limit"})
    llm_server.script(Reply("z"))
    assert client.chat(MSG).text == "z" and llm_server.chat_count == 4
    assert client.chat(MSG).cached


def test_params_are_part_of_the_cache_key_and_reach_the_server(llm_server, kv):
    client = client_for(llm_server, cache=kv)
    variants = [
        {},
        {"temperature": 0.7},
        {"logit_bias": {1234: -100}},
        {"max_tokens": 5},
        {"response_format": {"type": "json_object"}},
    ]
    for kw in variants:
        assert not client.chat(MSG, **kw).cached
    assert llm_server.chat_count == len(variants)
    for kw in variants:  # each variant is now its own cache hit
        assert client.chat(MSG, **kw).cached
    assert llm_server.chat_count == len(variants)
    keys = {
        chat_cache_key(
            "test-model",
            MSG,
            kw.get("temperature", 0.0),
            kw.get("max_tokens"),
            kw.get("logit_bias"),
            kw.get("response_format"),
        )
        for kw in variants
    }
    assert len(keys) == len(variants)

    bodies = llm_server.requests
    assert bodies[0]["model"] == "test-model" and bodies[0]["messages"] == MSG and bodies[0]["temperature"] == 0.0
    assert "max_tokens" not in bodies[0] and "logit_bias" not in bodies[0]
    assert bodies[1]["temperature"] == 0.7
    assert bodies[2]["logit_bias"] == {"1234": -100}
    assert bodies[3]["max_tokens"] == 5
    assert bodies[4]["response_format"] == {"type": "json_object"}
    assert llm_server.request_headers[0]["authorization"] == f"Bearer {TEST_API_KEY}"


def test_usage_from_response_or_tiktoken_fallback(llm_server):
    llm_server.script(
        Reply("alpha beta", prompt_tokens=123, completion_tokens=45), Reply("alpha beta gamma", include_usage=False)
    )
    client = client_for(llm_server)  # no cache
    a = client.chat(MSG)
    b = client.chat(MSG)
    assert (a.prompt_tokens, a.completion_tokens) == (123, 45)
    expected_prompt = count_tokens("\n".join(m["content"] for m in MSG))
    assert (b.prompt_tokens, b.completion_tokens) == (expected_prompt, count_tokens("alpha beta gamma"))
    u = client.usage_snapshot()
    assert (u.calls, u.prompt_tokens, u.completion_tokens) == (2, 123 + expected_prompt, 45 + b.completion_tokens)


# -- retries --------------------------------------------------------------------------------------------


def test_429_with_retry_after_is_honoured(llm_server, kv):
    llm_server.script(Reply(status=429, headers={"Retry-After": "0.3"}), Reply("fine"))
    client = client_for(llm_server, cache=kv, backoff_base_s=0.001, backoff_max_s=5)
    t0 = time.monotonic()
    assert client.chat(MSG).text == "fine"
    elapsed = time.monotonic() - t0
    assert 0.25 <= elapsed < 2.0  # waited for Retry-After, not the tiny exponential backoff
    assert client.attempts == 2 and client.usage_snapshot().calls == 1


def test_retry_after_is_capped_at_backoff_max(llm_server):
    llm_server.script(Reply(status=429, headers={"Retry-After": "30"}), Reply("fine"))
    client = client_for(llm_server, backoff_max_s=0.1)
    t0 = time.monotonic()
    assert client.chat(MSG).text == "fine"
    assert time.monotonic() - t0 < 1.0


def test_parse_retry_after_seconds_and_http_date():
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("-1") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    now = time.time()
    assert 9 <= parse_retry_after(formatdate(now + 10, usegmt=True), now=now) <= 10
    assert parse_retry_after(formatdate(now - 10, usegmt=True), now=now) == 0.0


def test_503_twice_then_success(llm_server, caplog):
    llm_server.script(Reply(status=503), Reply(status=503), Reply("up"))
    client = client_for(llm_server)
    with caplog.at_level(logging.WARNING, logger="graphrag_pipeline.llm"):
        assert client.chat(MSG).text == "up"
    assert client.attempts == 3 and client.usage_snapshot().calls == 1
    assert llm_server.chat_count == 3
    retries = [r for r in caplog.records if r.name == "graphrag_pipeline.llm"]
    assert len(retries) == 2 and "HTTP 503" in retries[0].getMessage()
    assert TEST_API_KEY not in caplog.text


def test_timeout_then_success(llm_server):
    llm_server.script(Reply("late", delay_s=1.0), Reply("on time"))
    client = client_for(llm_server, timeout_s=0.3)
    assert client.chat(MSG).text == "on time"
    assert client.attempts == 2 and client.usage_snapshot().calls == 1


def test_an_answer_sent_a_byte_at_a_time_is_bounded_by_the_timeout(llm_server):
    # every read comes well within the timeout, the whole answer does not: the call is timed out
    # at about timeout_s (a read timeout alone let it run for len(body) x 0.05 s, over 10 s)
    llm_server.script(Reply("slow " * 20, trickle_s=0.05), Reply("on time"))
    client = client_for(llm_server, timeout_s=1.0)
    started = time.monotonic()
    assert client.chat(MSG).text == "on time"
    assert client.attempts == 2 and time.monotonic() - started < 5
    llm_server.script(Reply("x" * 50, trickle_s=0.05))
    started = time.monotonic()
    with pytest.raises(LLMError, match="timeout after 0.5s"):
        client_for(llm_server, timeout_s=0.5, max_retries=0).chat(MSG)
    assert time.monotonic() - started < 3


def test_the_endpoint_is_reached_through_the_proxy_the_environment_names(llm_server, monkeypatch):
    # the scripted server stands in for the proxy: an HTTP proxy is sent the request for the
    # endpoint's URL, which it answers here (the bounded-answer client keeps the SDK's proxy rules)
    port = llm_server.base_url.split(":")[2].split("/")[0]
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    llm_server.script(Reply("via the proxy"))
    client = client_for(llm_server, base_url="http://llm.invalid/v1", max_retries=0)
    assert client.chat(MSG).text == "via the proxy"


def test_malformed_body_is_retried(llm_server):
    llm_server.script(Reply(raw_body='{"choices": [ truncated'), Reply(raw_body="{}"), Reply("good"))
    client = client_for(llm_server)
    assert client.chat(MSG).text == "good"
    assert client.attempts == 3


def test_persistent_500_fails_after_max_retries(llm_server):
    llm_server.responder = lambda body: Reply("boom", status=500)
    client = client_for(llm_server, max_retries=3)
    with pytest.raises(LLMError) as info:
        client.chat(MSG)
    err = info.value
    assert llm_server.chat_count == 4 and client.attempts == 4
    assert "500" in str(err) and "4 attempts" in str(err) and llm_server.base_url in str(err)
    assert err.status == 500 and err.attempts == 4
    assert err.__cause__ is None and err.__suppress_context__
    _no_secret(err, client)
    assert client.usage_snapshot().calls == 0


def test_401_is_not_retried_and_key_is_scrubbed(llm_server):
    # a server that echoes the key back in its error message must not leak it through our exception
    llm_server.script(Reply(f"Incorrect API key provided: {TEST_API_KEY}", status=401))
    client = client_for(llm_server)
    with pytest.raises(LLMError) as info:
        client.chat(MSG)
    assert llm_server.chat_count == 1 and client.attempts == 1
    assert "401" in str(info.value) and "not retried" in str(info.value)
    _no_secret(info.value)


@pytest.mark.parametrize("status", [400, 403, 404])
def test_other_4xx_fail_immediately(llm_server, status):
    llm_server.script(Reply(status=status))
    client = client_for(llm_server)
    with pytest.raises(LLMError) as info:
        client.chat(MSG)
    assert info.value.status == status and client.attempts == 1


def test_connection_refused():
    server = ScriptedLLMServer()
    server.base_url = f"http://127.0.0.1:{_closed_port()}/v1"  # never started: nothing listens
    client = client_for(server, max_retries=1)
    with pytest.raises(LLMError) as info:
        client.chat(MSG)
    assert not isinstance(info.value, LLMCancelled)
    assert "connection" in str(info.value).lower() and "2 attempts" in str(info.value)
    assert server.base_url in str(info.value)
    _no_secret(info.value)


# -- concurrency and cancellation ----------------------------------------------------------------------


def test_chat_many_bounded_concurrency_order_and_failures(kv):
    def responder(body):
        content = body["messages"][-1]["content"]
        if content == "bad":
            return Reply("rejected", status=400)
        return Reply(f"answer {content}", delay_s=0.25)

    with ScriptedLLMServer(responder) as server:
        client = client_for(server, cache=kv, max_concurrent=3)
        calls = [{"messages": [{"role": "user", "content": str(i) if i != 4 else "bad"}]} for i in range(9)]
        t0 = time.monotonic()
        results = client.chat_many(calls)
        elapsed = time.monotonic() - t0
        assert server.max_in_flight == 3  # concurrent, but never above max_concurrent
        assert elapsed < 8 * 0.25  # not sequential
    assert isinstance(results[4], LLMError) and results[4].status == 400
    for i, r in enumerate(results):
        if i != 4:
            assert isinstance(r, ChatResult) and r.text == f"answer {i}"
    assert client.usage_snapshot().calls == 8


def test_shared_client_limit_applies_across_threads():
    with ScriptedLLMServer(lambda body: Reply("ok", delay_s=0.2)) as server:
        client = client_for(server, max_concurrent=2)
        threads = [
            threading.Thread(target=client.chat, args=([{"role": "user", "content": str(i)}],)) for i in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.max_in_flight == 2 and server.chat_count == 6


def test_cancel_during_backoff_is_prompt(llm_server):
    llm_server.responder = lambda body: Reply(status=429, headers={"Retry-After": "30"})
    client = client_for(llm_server, backoff_max_s=60)
    outcome: dict = {}

    def run():
        try:
            client.chat(MSG)
        except BaseException as exc:  # noqa: BLE001
            outcome["exc"] = exc
        outcome["at"] = time.monotonic()

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 5
    while llm_server.chat_count == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # now sleeping on a 30 s Retry-After
    t0 = time.monotonic()
    client.cancel()
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert outcome["at"] - t0 < 1.0
    assert isinstance(outcome["exc"], LLMCancelled)
    with pytest.raises(LLMCancelled):  # new calls are refused
        client.chat([{"role": "user", "content": "another"}])
    with pytest.raises(LLMCancelled):
        client.chat_many([{"messages": MSG}, {"messages": MSG}])
    assert llm_server.chat_count == 1


def test_cancel_while_waiting_for_a_slot(llm_server):
    llm_server.responder = lambda body: Reply("slow", delay_s=0.6)
    client = client_for(llm_server, max_concurrent=1)
    results: dict = {}

    def run(name):
        try:
            results[name] = client.chat([{"role": "user", "content": name}])
        except LLMError as exc:
            results[name] = exc
        results[name + "_at"] = time.monotonic()

    first = threading.Thread(target=run, args=("first",))
    first.start()
    while llm_server.chat_count == 0:
        time.sleep(0.01)
    second = threading.Thread(target=run, args=("second",))  # waits for the only slot
    second.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    client.cancel()
    second.join(timeout=5)
    first.join(timeout=5)
    assert isinstance(results["second"], LLMCancelled) and results["second_at"] - t0 < 0.5
    assert isinstance(results["first"], ChatResult)  # the request already on the wire completes
    assert llm_server.chat_count == 1


# -- embeddings -------------------------------------------------------------------------------------------


def test_embed_normalised_rows_in_order_batched_and_cached(llm_server, kv):
    client = client_for(llm_server, cache=kv, embedding_model="test-embed")
    texts = [f"text number {i}" for i in range(70)] + ["text number 3"]  # 70 distinct -> batches of 64 + 6
    llm_server.script_embeddings(Reply(status=503))  # the first request is retried
    vecs = client.embed(texts)
    assert vecs.dtype == np.float32 and vecs.shape == (71, 16)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    for i, text in enumerate(texts):
        raw = np.asarray(embedding_vector(text), dtype=np.float32)
        assert np.allclose(vecs[i], raw / np.linalg.norm(raw), atol=1e-6)
    assert [len(r["input"]) for r in llm_server.embedding_requests] == [64, 64, 6]
    assert all(r["model"] == "test-embed" for r in llm_server.embedding_requests)
    assert client.attempts == 3 and client.usage_snapshot().calls == 2

    again = client_for(llm_server, cache=KVCache(kv.path), embedding_model="test-embed").embed(texts[::-1])
    assert len(llm_server.embedding_requests) == 3  # all from cache
    assert np.array_equal(again, vecs[::-1])
    other_model = client_for(llm_server, cache=kv, embedding_model="other-embed")
    other_model.embed(["text number 0"])
    assert len(llm_server.embedding_requests) == 4  # the model is part of the key


def test_embeddings_cost_nothing_on_a_server_declared_free_and_stay_unpriced_otherwise(llm_server):
    from graphrag_pipeline.llm.pricing import pricing_for

    free = {"GRAPHRAG_PRICE_INPUT_PER_MTOK": "0", "GRAPHRAG_PRICE_OUTPUT_PER_MTOK": "0"}
    client = client_for(llm_server, embedding_model="test-embed", pricing=pricing_for("test-model", None, free))
    client.embed(["one text", "another text"])
    usage = client.usage_snapshot()
    assert usage.calls == 1 and usage.unpriced_calls == 0 and usage.cost_usd == 0
    # a chat price that is not 0: the table or the overrides price the chat model only
    paid = {"GRAPHRAG_PRICE_INPUT_PER_MTOK": "0", "GRAPHRAG_PRICE_OUTPUT_PER_MTOK": "2"}
    for pricing in (pricing_for("test-model", None, paid), pricing_for("test-model", llm_server.base_url, {})):
        client = client_for(llm_server, embedding_model="test-embed", pricing=pricing)
        client.embed(["a third text"])
        assert client.usage_snapshot().unpriced_calls == 1


def test_embed_cuts_texts_and_requests_to_the_endpoint_limits(llm_server, kv):
    # the endpoint enforces OpenAI's limits: 8,191 tokens per input, 300,000 per request
    llm_server.embedding_input_limit, llm_server.embedding_request_limit = 8191, 300_000
    fragment = "The scheduler hands the runqueue lock to the idle task before it sleeps. "
    huge = "".join(f"{i}: {fragment}" for i in range(3000))  # a relation named in thousands of chunks
    assert count_tokens(huge) > 8191
    medium = [f"chunk {i} " + fragment * 400 for i in range(64)]  # ~6,000 tokens each: 64 make ~390,000
    texts = [huge, "short text", *medium]
    client = client_for(llm_server, cache=kv, embedding_model="test-embed")
    vecs = client.embed(texts)
    assert vecs.shape == (66, 16)
    # every request within both limits (the server refused any other), and the batches follow them
    sent = [t for r in llm_server.embedding_requests for t in r["input"]]
    assert len(sent) == 66 and all(count_tokens(t) <= 8191 for t in sent)
    assert all(sum(count_tokens(t) for t in r["input"]) <= 300_000 for r in llm_server.embedding_requests)
    # not 64 + 2 texts: the first 64 hold ~360,000 tokens, which the endpoint refuses
    assert [len(r["input"]) < 64 for r in llm_server.embedding_requests] == [True, True]
    # the long text is embedded by its start (its first 8,191 tokens); the others whole
    cut = next(t for t in sent if t.startswith("0: "))
    assert count_tokens(cut) == 8191 and huge.startswith(cut[:-20])
    raw = np.asarray(embedding_vector(cut), dtype=np.float32)
    assert np.allclose(vecs[0], raw / np.linalg.norm(raw), atol=1e-6)
    assert "short text" in sent and all(m in sent for m in medium)
    # cached under what was sent: a second client asks for nothing
    before = len(llm_server.embedding_requests)
    again = client_for(llm_server, cache=KVCache(kv.path), embedding_model="test-embed").embed([huge])
    assert len(llm_server.embedding_requests) == before and np.array_equal(again[0], vecs[0])

    # the endpoint's refusal is real: without the cut the same text fails the call
    uncut = client_for(llm_server, embedding_model="test-embed", embedding_max_tokens=1_000_000)
    with pytest.raises(LLMError, match="embedding request to model test-embed at .*maximum context length"):
        uncut.embed([huge + " once more"])


def test_embed_without_model_is_a_config_error(llm_server):
    with pytest.raises(ValueError):
        client_for(llm_server).embed(["x"])


# -- configuration and secrets ---------------------------------------------------------------------------

ENV = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GRAPHRAG_LLM_MODEL",
    "GRAPHRAG_EMBEDDING_MODEL",
    "GRAPHRAG_MAX_CONCURRENT_CHATS",
    "GRAPHRAG_LLM_TIMEOUT",
    "GRAPHRAG_LLM_MAX_RETRIES",
)


def test_from_env(monkeypatch, llm_server, kv):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    assert LLMClient.from_env() is None

    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.base_url)  # a local endpoint without a key
    client = LLMClient.from_env(cache=kv)
    assert client.model == "gpt-4o-mini" and client.embedding_model is None
    assert (client.max_concurrent, client.timeout_s, client.max_retries) == (10, 120.0, 5)
    assert client.chat(MSG).text == "OK"
    assert llm_server.request_headers[-1]["authorization"] == "Bearer EMPTY"
    assert client.cache is kv

    for name, value in [
        ("OPENAI_API_KEY", TEST_API_KEY),
        ("GRAPHRAG_LLM_MODEL", "qwen2.5"),
        ("GRAPHRAG_EMBEDDING_MODEL", "bge-m3"),
        ("GRAPHRAG_MAX_CONCURRENT_CHATS", "4"),
        ("GRAPHRAG_LLM_TIMEOUT", "30"),
        ("GRAPHRAG_LLM_MAX_RETRIES", "2"),
    ]:
        monkeypatch.setenv(name, value)
    client = LLMClient.from_env()
    assert (client.model, client.embedding_model) == ("qwen2.5", "bge-m3")
    assert (client.max_concurrent, client.timeout_s, client.max_retries) == (4, 30.0, 2)
    assert client.describe() == f"model qwen2.5 at {llm_server.base_url}"
    client.chat(MSG)
    assert llm_server.requests[-1]["model"] == "qwen2.5"
    assert llm_server.request_headers[-1]["authorization"] == f"Bearer {TEST_API_KEY}"
    _no_secret(client)

    monkeypatch.delenv("OPENAI_BASE_URL")  # key only: the default OpenAI endpoint (not contacted here)
    assert LLMClient.from_env().describe() == "model qwen2.5 at https://api.openai.com/v1"


def test_describe_and_repr_strip_credentials(llm_server):
    port = llm_server.base_url.split(":")[2].split("/")[0]
    client = client_for(llm_server, base_url=f"http://user:{TEST_API_KEY}@127.0.0.1:{port}/v1?api-key={TEST_API_KEY}")
    assert client.describe() == f"model test-model at http://127.0.0.1:{port}/v1"
    assert repr(client) == f"LLMClient(model test-model at http://127.0.0.1:{port}/v1)"
    _no_secret(client, vars(client).get("_key"))
    assert redact_url("https://a:b@[::1]:8000/v1/?k=v#f") == "https://[::1]:8000/v1"


def test_parse_json_reply():
    assert parse_json_reply('{"a": 1}') == {"a": 1}
    assert parse_json_reply('```json\n{"a": [1, 2,]}\n```') == {"a": [1, 2]}
    assert parse_json_reply("{'a': 'x', 'b': [1, 2") == {"a": "x", "b": [1, 2]}
    assert parse_json_reply("") is None


def test_a_reasoning_models_thinking_is_not_part_of_the_answer(llm_server, kv):
    """Qwen3 / DeepSeek-R1 behind vLLM or Ollama put their thinking in the content: its drafts
    were parsed as records (a sweep got a fake entity in). The answer is what follows the block,
    fresh or cached; a reply cut off while thinking has no answer; other text is untouched."""
    from graphrag_pipeline.llm.client import answer_text

    draft = '<think>Maybe ("entity"|FAKE PERSON|person|a draft)?</think>\n("entity"|CHARLES DARWIN|person|sailed)'
    llm_server.script(Reply(draft))
    client = client_for(llm_server, cache=kv)
    first = client.chat(MSG)
    assert first.text == '("entity"|CHARLES DARWIN|person|sailed)' and not first.cached
    again = client_for(llm_server, cache=KVCache(kv.path)).chat(MSG)
    assert again.cached and again.text == first.text
    assert answer_text("the template opened it</think>\n\nthe answer") == "the answer"
    assert answer_text("<think>cut off while still thinking") == ""
    assert answer_text("We think about it; no tags here.") == "We think about it; no tags here."


def test_vectors_of_another_dimension_are_fetched_again_not_kept(llm_server, kv):
    """An answer with vectors of the wrong dimension was cached, and every later build failed on
    it (found by a faulty-endpoint sweep). Once a fetched answer gave the model's dimension (the
    embedder's probe asks the endpoint, not the cache), a cached vector of another dimension is
    fetched again and replaced, and an answer of another dimension is malformed (retried)."""

    def short(n: int) -> Reply:
        data = [{"object": "embedding", "index": i, "embedding": [0.5] * 8} for i in range(n)]
        return Reply(raw_body=json.dumps({"object": "list", "data": data, "model": "m"}))

    llm_server.script_embeddings(short(2))
    first = client_for(llm_server, cache=kv, embedding_model="test-embed").embed(["a", "b"])
    assert first.shape == (2, 8)  # nothing to compare with yet: stored

    client = client_for(llm_server, cache=KVCache(kv.path), embedding_model="test-embed")
    assert client.probe_embedding_dim() == 16 and client.embedding_dim == 16
    vecs = client.embed(["a", "b", "c"])
    assert vecs.shape == (3, 16)
    assert llm_server.embedding_requests[-1]["input"] == ["a", "b", "c"]  # the stored two fetched again
    before = len(llm_server.embedding_requests)
    assert client_for(llm_server, cache=KVCache(kv.path), embedding_model="test-embed").embed(["a"]).shape == (1, 16)
    assert len(llm_server.embedding_requests) == before  # replaced in the cache

    llm_server.script_embeddings(short(1))  # a malformed answer now: retried, not kept
    assert client.embed(["d"]).shape == (1, 16)
    assert [r["input"] for r in llm_server.embedding_requests[before:]] == [["d"], ["d"]]


def test_vectors_that_are_not_finite_are_malformed_and_never_kept(llm_server, kv):
    """An endpoint answering NaN in some vectors (found by an exploratory run): those vectors were
    cached and published, ranked first in every search (NaN sorts first) and broke `--json`. Such
    an answer is malformed now (retried), and a NaN vector stored by an older version is fetched
    again."""

    def with_nan(n: int) -> Reply:
        data = [
            {"object": "embedding", "index": i, "embedding": [float("nan") if i == 1 else 0.5] * 16} for i in range(n)
        ]
        return Reply(raw_body=json.dumps({"object": "list", "data": data, "model": "m"}))  # NaN as Python writes it

    llm_server.script_embeddings(with_nan(2))
    client = client_for(llm_server, cache=kv, embedding_model="test-embed")
    vecs = client.embed(["a", "b"])
    assert np.isfinite(vecs).all() and vecs.shape == (2, 16)
    assert [r["input"] for r in llm_server.embedding_requests] == [["a", "b"], ["a", "b"]]  # retried
    # a NaN vector in the cache (written by an older version) is not used: fetched again
    from graphrag_pipeline.llm.client import embedding_cache_key

    kv.put_many({embedding_cache_key("test-embed", "c"): [float("nan")] * 16})
    before = len(llm_server.embedding_requests)
    assert np.isfinite(client.embed(["c"])).all()
    assert llm_server.embedding_requests[before:][0]["input"] == ["c"]
    # an endpoint that keeps answering NaN fails the call (its retries spent), it is never published
    llm_server.script_embeddings(*[with_nan(2) for _ in range(5)])
    with pytest.raises(LLMError, match="not finite"):
        client_for(llm_server, embedding_model="test-embed", max_retries=2).embed(["x", "y"])


def test_a_key_with_a_line_end_is_sent_without_it_and_never_shown(llm_server):
    # a key read from a .env file saved with Windows line ends carries "\r": blanks around a key are
    # not part of it
    client = client_for(llm_server, api_key=TEST_API_KEY + "\r\n")
    assert client.chat(MSG).text == "OK"
    assert llm_server.request_headers[-1]["authorization"] == f"Bearer {TEST_API_KEY}"
    _no_secret(client)


@pytest.mark.parametrize("odd", ["\r", "\x00", "\u00e9", "\u200b"])
def test_a_key_no_header_can_carry_is_refused_before_any_request_without_showing_it(llm_server, odd):
    # a line end, a non-ASCII letter or an invisible character inside the key: every request would
    # fail (the HTTP library names the header with the key escaped, or fails to encode it)
    head, tail = "sk-proj-ABCDEFGH", "IJKLMNOPQRST"
    with pytest.raises(ValueError) as info:
        client_for(llm_server, api_key=f"{head}{odd}{tail}")
    assert "OPENAI_API_KEY" in str(info.value)
    assert head not in str(info.value) and tail not in str(info.value)
    assert llm_server.chat_count == 0


def test_a_request_that_cannot_be_sent_fails_once_with_a_clear_message(llm_server, monkeypatch):
    # another header the SDK adds from the environment, holding a line end: not a connection error
    # to retry (and to trip the breaker with), the same request fails the same way
    monkeypatch.setenv("OPENAI_ORG_ID", "org-ABCDEFGH\rIJKL")
    client = client_for(llm_server, max_retries=3)
    with pytest.raises(LLMError) as info:
        client.chat(MSG)
    assert client.attempts == 1 and llm_server.chat_count == 0
    assert "not retried" in str(info.value) and "OPENAI_" in str(info.value)
    _no_secret(info.value, client)


def test_secret_forms_cover_the_escaped_forms_and_every_long_printable_run():
    from graphrag_pipeline.llm.client import secret_forms

    key = "sk-abcdefgh\r\nijklmnopq\x07z"
    forms = secret_forms(key)
    assert forms == sorted(forms, key=len, reverse=True)
    for shown in (key, repr(key)[1:-1], str(key.encode())[2:-1], "sk-abcdefgh", "ijklmnopq"):
        assert shown in forms
    assert secret_forms("abc") == [] and secret_forms(None) == []
