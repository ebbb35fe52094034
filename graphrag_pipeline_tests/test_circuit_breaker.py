"""The circuit breaker for a dead endpoint: consecutive failed calls open it, any success resets
it, a dead endpoint costs at most breaker x attempts requests however many calls are waiting,
extraction stops starting chunks, and a build fails at once (no step retries) with the documents
left for the next build, which extracts only those."""

from __future__ import annotations

import json
import threading
import time

import pytest

from graphrag_pipeline.extract.batch import ChunkTask, ExtractionStats, extract_tasks
from graphrag_pipeline.extract.llm import ExtractionSettings
from graphrag_pipeline.llm.cache import KVCache
from graphrag_pipeline.llm.client import LLMCancelled, LLMCircuitOpen, LLMClient, LLMError, forget_endpoint_health
from graphrag_pipeline_tests.conftest import cli
from graphrag_pipeline_tests.fake_llm import FakeLLM, classify
from graphrag_pipeline_tests.llm_server import TEST_API_KEY, Reply, ScriptedLLMServer, client_for

MSG = [{"role": "user", "content": "Darwin sailed on the Beagle."}]


@pytest.fixture(autouse=True)
def _fresh_process_state():
    """Each test starts like a new process: no endpoint is known to answer."""
    forget_endpoint_health()
    yield
    forget_endpoint_health()


def dead(_body) -> Reply:
    return Reply("overloaded", status=503)


def _msg(i) -> list[dict]:
    return [{"role": "user", "content": f"question {i}"}]


def _assert_breaker_message(err: LLMError, server, failures: int = 3) -> None:
    text = str(err)
    assert f"failed {failures} calls in a row" in text
    assert server.base_url in text and "HTTP 503" in text  # the endpoint and the last error
    assert "run the build again" in text and "resumes where it stopped" in text
    assert TEST_API_KEY not in text and TEST_API_KEY not in repr(err)


# -- the client --------------------------------------------------------------------------------------------


def test_dead_endpoint_costs_breaker_x_attempts_requests_however_many_calls_wait():
    with ScriptedLLMServer(dead) as server:
        client = client_for(server, max_retries=2, max_concurrent=10, breaker=3)
        t0 = time.monotonic()
        results = client.chat_many([{"messages": _msg(i)} for i in range(25)])
        elapsed = time.monotonic() - t0
        assert server.chat_count == 3 * 3  # breaker x (max_retries + 1), not 25 x 3
        assert server.max_in_flight == 1  # one call at a time while the endpoint has not answered
        assert all(isinstance(r, LLMError) for r in results)
        opened = [r for r in results if isinstance(r, LLMCircuitOpen)]
        assert len(opened) == 23  # the third failure and every call after it
        _assert_breaker_message(opened[0], server)
        assert opened[0].failures == 3 and "HTTP 503" in opened[0].last_error
        assert client.circuit_open and client.circuit_message == str(opened[0])
        assert elapsed < 5
        # every further call fails at once, without a request
        t0 = time.monotonic()
        with pytest.raises(LLMCircuitOpen):
            client.chat(MSG)
        assert time.monotonic() - t0 < 0.1 and server.chat_count == 9


def test_connection_refused_opens_the_breaker_too():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ScriptedLLMServer()
    server.base_url = f"http://127.0.0.1:{port}/v1"
    client = client_for(server, max_retries=1, breaker=2)
    results = client.chat_many([{"messages": _msg(i)} for i in range(6)])
    assert client.attempts == 2 * 2
    assert isinstance(results[-1], LLMCircuitOpen) and "connection error" in str(results[-1])


def test_any_success_resets_the_count():
    with ScriptedLLMServer() as server:
        client = client_for(server, max_retries=0, breaker=3)
        server.script(Reply(status=503), Reply(status=503), Reply("fine"), Reply(status=503), Reply(status=503))
        for _ in range(2):
            with pytest.raises(LLMError):
                client.chat(_msg("x"))
        assert client.consecutive_failures == 2
        assert client.chat(_msg("y")).text == "fine"
        assert client.consecutive_failures == 0
        for _ in range(2):
            with pytest.raises(LLMError) as info:
                client.chat(_msg("z"))
            assert not isinstance(info.value, LLMCircuitOpen)
        assert not client.circuit_open
        # a call that fails, then succeeds on a retry, also resets
        retrying = client_for(server, max_retries=1, breaker=2)
        server.script(Reply(status=503), Reply(status=503), Reply(status=503), Reply("ok"))
        with pytest.raises(LLMError):
            retrying.chat(_msg(1))
        assert retrying.chat(_msg(2)).text == "ok" and retrying.consecutive_failures == 0


def test_request_specific_rejections_do_not_count_but_auth_failures_do():
    with ScriptedLLMServer(lambda body: Reply("too long", status=400)) as server:
        client = client_for(server, breaker=2)
        for i in range(4):
            with pytest.raises(LLMError) as info:
                client.chat(_msg(i))
            assert info.value.status == 400 and not isinstance(info.value, LLMCircuitOpen)
        assert server.chat_count == 4 and not client.circuit_open
    with ScriptedLLMServer(lambda body: Reply("bad key", status=401)) as server:
        client = client_for(server, breaker=2)
        results = client.chat_many([{"messages": _msg(i)} for i in range(5)])
        assert server.chat_count == 2  # 401 is not retried; two in a row open the breaker
        assert isinstance(results[-1], LLMCircuitOpen) and "HTTP 401" in str(results[-1])


def test_cached_answers_are_served_while_open(tmp_path):
    with ScriptedLLMServer() as server:
        client = client_for(server, cache=KVCache(tmp_path / "c.sqlite", "llm"), max_retries=0, breaker=1)
        assert client.chat(MSG).text == "OK"
        server.responder = dead
        with pytest.raises(LLMCircuitOpen):
            client.chat(_msg(1))
        assert client.chat(MSG).cached  # no request needed
        with pytest.raises(LLMCircuitOpen):
            client.chat(_msg(2))
        assert server.chat_count == 2


def test_breaker_setting(monkeypatch):
    with ScriptedLLMServer(dead) as server:
        monkeypatch.setenv("GRAPHRAG_LLM_BREAKER", "0")  # never opens
        client = client_for(server, max_retries=0)
        assert client.breaker == 0
        results = client.chat_many([{"messages": _msg(i)} for i in range(6)])
        assert server.chat_count == 6 and not any(isinstance(r, LLMCircuitOpen) for r in results)
        monkeypatch.setenv("GRAPHRAG_LLM_BREAKER", "2")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        assert LLMClient.from_env().breaker == 2
        monkeypatch.delenv("GRAPHRAG_LLM_BREAKER")
        assert client_for(server).breaker == 3
        monkeypatch.setenv("GRAPHRAG_LLM_BREAKER", "many")
        with pytest.raises(ValueError, match="GRAPHRAG_LLM_BREAKER"):
            client_for(server)


def test_one_call_gives_up_at_its_retry_time_limit():
    with ScriptedLLMServer(lambda body: Reply(status=429, headers={"Retry-After": "0.4"})) as server:
        client = client_for(server, max_retries=20, backoff_max_s=5, max_call_s=1.0)
        t0 = time.monotonic()
        with pytest.raises(LLMError) as info:
            client.chat(MSG)
        elapsed = time.monotonic() - t0
        assert "retry time limit 1s" in str(info.value) and "HTTP 429" in str(info.value)
        assert 0.7 <= elapsed < 1.5 and server.chat_count == 3  # requests at 0, 0.4, 0.8 s; 1.2 s is past the limit
    assert client_for(server, timeout_s=120).max_call_s == 240  # default: max(60, 2 x timeout)
    assert client_for(server, timeout_s=2).max_call_s == 60


def test_calls_waiting_for_their_turn_are_cancelled_promptly():
    with ScriptedLLMServer(lambda body: Reply(status=503, headers={"Retry-After": "30"})) as server:
        client = client_for(server, backoff_max_s=60, max_call_s=120)
        outcomes: list = []

        def run(i):
            try:
                client.chat(_msg(i))
            except BaseException as exc:  # noqa: BLE001
                outcomes.append((exc, time.monotonic()))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 5
        while server.chat_count == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # one call backs off for 30 s; three wait for their turn
        t0 = time.monotonic()
        client.cancel()
        for t in threads:
            t.join(timeout=5)
        assert len(outcomes) == 4 and all(isinstance(e, LLMCancelled) and at - t0 < 1.0 for e, at in outcomes)
        assert server.chat_count == 1


def test_healthy_endpoint_keeps_full_concurrency_after_its_first_answer():
    forget_endpoint_health()
    with ScriptedLLMServer(lambda body: Reply("ok", delay_s=0.2)) as server:
        client = client_for(server, max_concurrent=4)
        t0 = time.monotonic()
        client.chat_many([{"messages": _msg(i)} for i in range(9)])
        assert server.max_in_flight == 4 and time.monotonic() - t0 < 1.5  # 0.2 (first) + 2 x 0.2, not 9 x 0.2
        # a second client of this process starts at full concurrency: the endpoint has answered
        server.max_in_flight = 0
        other = client_for(server, max_concurrent=4)
        threads = [threading.Thread(target=other.chat, args=(_msg(f"b{i}"),)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.max_in_flight == 4


# -- extraction ----------------------------------------------------------------------------------------------


def test_extraction_stops_starting_chunks_once_the_breaker_opens(tmp_path):
    tasks = [ChunkTask(f"doc{i // 3}", i % 3, f"chunk{i}", f"Text number {i} about Charles Darwin.") for i in range(15)]
    with ScriptedLLMServer(dead) as server:
        client = client_for(server, max_retries=1, max_concurrent=4, breaker=2)
        stats = ExtractionStats()
        out = extract_tasks(
            tasks,
            "light",
            KVCache(tmp_path / "c.sqlite", "extraction"),
            stats,
            client,
            ExtractionSettings(method="light"),
        )
        assert out == {} and server.chat_count == 2 * 2
        assert "failed 2 calls in a row" in stats.circuit_open
        assert stats.documents_left == [f"doc{i}" for i in range(5)]
        assert stats.not_attempted > 0  # pending chunks were never started
        assert stats.extracted == 0 and not stats.failed_chunks


def test_a_chunk_shared_by_two_documents_fails_or_is_cut_for_both(tmp_path):
    # found by review: the batch extracts a chunk once (its id is the hash of its text), and its
    # failure (endpoint error, unparsable or cut answer) was recorded for the first document only:
    # the second was stored as if whole, and never extracted again
    import polars as pl

    from graphrag_pipeline.extract.batch import extract_documents
    from graphrag_pipeline_tests.fake_llm import _text_of, records_for

    shared = {"down": "The lighthouse keeper at Dover wrote to Faraday.", "sorry": "Maxwell met Kelvin."}
    shared["cut"] = "Darwin corresponded with Wallace about Borneo."
    fake = FakeLLM()

    def override(prompt):
        if shared["sorry"] in prompt:
            return "Sorry, I cannot help with that."
        if shared["cut"] in prompt:
            whole = records_for(_text_of(prompt), True, False)
            return Reply(text=whole[: len(whole) // 2], finish_reason="length")
        return None

    fake.extract_override = override

    def responder(body):
        return dead(body) if shared["down"] in body["messages"][-1]["content"] else fake(body)

    rows = []
    for case, text in shared.items():
        for n, doc in enumerate((f"{case}-a", f"{case}-b")):
            rows.append((doc, 0, f"own-{doc}", f"Ada Lovelace wrote notes in {1840 + n} on case {case}."))
            rows.append((doc, 1, f"shared-{case}", text))
    chunks = pl.DataFrame(rows, schema=["doc_id", "position", "chunk_id", "text"], orient="row")
    keys = sorted(chunks["doc_id"].unique())
    with ScriptedLLMServer(responder) as server:
        client = client_for(server, max_retries=0, max_concurrent=2, breaker=50)
        result = extract_documents(
            keys, chunks, "light", KVCache(tmp_path / "c.sqlite", "extraction"), client, ExtractionSettings("light")
        )
        docs = {d.key: d for d in result.documents}
    assert server.chat_count < len(rows)  # the shared chunks were asked once each
    assert result.stats.documents_left == ["down-a", "down-b"]
    assert sorted(docs) == ["cut-a", "cut-b", "sorry-a", "sorry-b"]
    for doc in ("sorry-a", "sorry-b"):
        assert [(f["doc_id"], f["chunk_id"]) for f in docs[doc].failed_chunks] == [(doc, "shared-sorry")]
        assert not docs[doc].cut_chunks
    for doc in ("cut-a", "cut-b"):
        assert [(c["doc_id"], c["chunk_id"]) for c in docs[doc].cut_chunks] == [(doc, "shared-cut")]
        assert docs[doc].cut_chunks[0]["answers"] and not docs[doc].failed_chunks
    # the batch's own counts are per chunk
    assert len(result.stats.failed_chunks) == 1 and len(result.stats.cut_chunks) == 1


# -- a build against a dead endpoint --------------------------------------------------------------------------


@pytest.fixture
def switchable(home, corpus, monkeypatch):
    fake = FakeLLM()
    state = {"dead": False}

    def responder(body):
        return dead(body) if state["dead"] else fake(body)

    with ScriptedLLMServer(responder) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
        monkeypatch.setenv("GRAPHRAG_LLM_MODEL", "fake-model")
        monkeypatch.setenv("GRAPHRAG_LLM_MAX_RETRIES", "2")
        monkeypatch.setenv("GRAPHRAG_LLM_TIMEOUT", "5")
        monkeypatch.delenv("GRAPHRAG_LLM_BREAKER", raising=False)
        yield server, state


def test_a_build_against_a_dead_endpoint_stops_at_once_and_the_next_build_resumes(switchable, home, corpus, tmp_path):
    server, state = switchable
    # the first build extracts two documents; the others come later
    later = tmp_path / "later"
    later.mkdir()
    keep = ("darwin_and_wallace.txt", "curie_radioactivity.md")
    for p in list(corpus.iterdir()):
        if p.name not in keep:
            p.rename(later / p.name)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    stored = {name: (home / "tables" / "doc_subgraph" / f"{name}.json").stat().st_mtime_ns for name in keep}

    # the endpoint dies; five documents arrive
    for p in later.iterdir():
        p.rename(corpus / p.name)
    state["dead"] = True
    forget_endpoint_health()  # a new build process would not know the endpoint answered before
    start = server.chat_count
    t0 = time.monotonic()
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    elapsed = time.monotonic() - t0
    calls = server.chat_count - start
    print(f"dead endpoint: {calls} requests, {elapsed:.1f} s")
    assert code != 0
    assert "failed 3 calls in a row" in out and "resumes where it stopped" in out and "could not be extracted" in out, (
        out
    )
    assert TEST_API_KEY not in out
    assert calls <= 3 * 3  # breaker x attempts for the whole build
    assert elapsed < 90
    for name, mtime in stored.items():  # what was stored stays stored
        assert (home / "tables" / "doc_subgraph" / f"{name}.json").stat().st_mtime_ns == mtime
    left = sorted(p.name for p in corpus.iterdir() if p.name not in keep)
    for name in left:
        assert not (home / "tables" / "doc_subgraph" / f"{name}.json").exists()
        assert name in out  # the documents left are named

    # the endpoint is back: the next build extracts only what was left
    state["dead"] = False
    start = server.chat_count
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    extracted = [b for b in server.requests[start:] if classify(b["messages"]) == "light_extract"]
    left_chunks = sum(json.loads((home / "tables" / "chunks" / f"{name}.json").read_text())["chunks"] for name in left)
    assert len(extracted) == left_chunks
    for name in left:
        assert (home / "tables" / "doc_subgraph" / f"{name}.json").exists()


def test_an_embeddings_call_that_fails_after_its_retries_fails_the_index_step_once(home, corpus, monkeypatch, capsys):
    """A refused embeddings request (here 400: each request is refused) fails `search_index` after
    the client's own attempts, without Dagster's step retries (they sent the same requests again,
    3x in all: found by a sweep with an endpoint failing mid-build); the build exits non-zero and
    says the published index was left as it was."""
    with ScriptedLLMServer() as srv:
        srv.script_embeddings(*[Reply("input refused", status=400)] * 20)
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
        monkeypatch.setenv("GRAPHRAG_EMBEDDING_MODEL", "test-embed")
        code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
        assert code != 0, out
        assert "FAILED search_index" in out and "the published index was left untouched" in out, out
        assert "test-embed" in out  # the message names the embedding model
        assert len(srv.embedding_requests) == 1  # a 400 is not retried: one request, not one per step retry
        # the failure is said once, in the CLI's line; Dagster's traces (step, then run) only with -v
        assert "stack traces: run " in out and "build -v" in out
        err = capsys.readouterr().err
        assert "Stack Trace" not in err and "Not executing" not in err, err
        assert "STEP_FAILURE" not in err and "RUN_FAILURE" not in err, err


def test_a_refused_key_stops_the_build_with_a_message_about_the_key(home, corpus, monkeypatch, capsys):
    """Every call refused with 401: the breaker opens and the build stops; the last line tells the
    user to check the key (it said the endpoint was not answering, found by a sweep), never the key."""
    with ScriptedLLMServer(lambda _body: Reply("invalid api key", status=401)) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", TEST_API_KEY)
        monkeypatch.setenv("GRAPHRAG_LLM_MAX_RETRIES", "0")
        code, out = cli("build", "--corpus", str(corpus), "--method", "light")
        err = capsys.readouterr().err
        assert code == 1, out
        assert "build stopped: the LLM endpoint refused the API key (HTTP 401: check OPENAI_API_KEY)" in err, err
        assert TEST_API_KEY not in out + err


def test_a_long_lived_client_tries_the_endpoint_again_after_its_breaker_opened():
    """`serve` outlives an outage (found by an exploratory run: one failed global query left every
    later query at 502 until a restart). With retry_open_after_s set, an open breaker lets one call
    try the endpoint again after that time: a failure opens it again at once (one request, not
    breaker x attempts), a success ends the outage."""
    state = {"down": True}

    def endpoint(_body) -> Reply:
        return Reply("overloaded", status=503) if state["down"] else Reply("fine")

    with ScriptedLLMServer(endpoint) as server:
        client = client_for(server, max_retries=0, breaker=2)
        client.retry_open_after_s = 0.3
        client.resume_hint = "the server tries the endpoint again after 0.3 s"
        for _ in range(2):
            with pytest.raises(LLMError):
                client.chat(_msg("a"))
        with pytest.raises(LLMCircuitOpen) as info:
            client.chat(_msg("b"))
        assert "the server tries the endpoint again" in str(info.value) and "run the build" not in str(info.value)
        assert client.circuit_open and server.chat_count == 2
        time.sleep(0.35)
        with pytest.raises(LLMCircuitOpen):  # tried once, still down: open again after one request
            client.chat(_msg("c"))
        assert server.chat_count == 3 and client.circuit_open
        state["down"] = False
        with pytest.raises(LLMCircuitOpen):  # not before the time has passed again
            client.chat(_msg("d"))
        assert server.chat_count == 3
        time.sleep(0.35)
        assert client.chat(_msg("e")).text == "fine"
        assert not client.circuit_open and client.consecutive_failures == 0
        assert [client.chat(_msg(f"f{i}")).text for i in range(3)] == ["fine"] * 3


def test_a_build_client_keeps_its_breaker_open():
    with ScriptedLLMServer(dead) as server:
        client = client_for(server, max_retries=0, breaker=1)
        with pytest.raises(LLMError):
            client.chat(_msg("a"))
        time.sleep(0.2)
        with pytest.raises(LLMCircuitOpen):
            client.chat(_msg("b"))
        assert server.chat_count == 1
