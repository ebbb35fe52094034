"""Cost before and after a build: prices, the estimate against what the build then sends to the
scripted server, the budget stopping a build cleanly and a larger one finishing it, cost in stats."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from graphrag_pipeline.ingest.tokens import count_tokens
from graphrag_pipeline_tests.conftest import cli, cli_json
from graphrag_pipeline_tests.fake_llm import FakeLLM, classify
from graphrag_pipeline_tests.llm_server import Reply, ScriptedLLMServer

IN_PRICE, OUT_PRICE = 2.0, 8.0  # USD per million tokens, set through the overrides


# -- prices -----------------------------------------------------------------------------------------
def test_price_from_the_table_overrides_and_unknown():
    from graphrag_pipeline.llm.pricing import pricing_for

    openai = pricing_for("gpt-4o-mini", None, {})
    assert openai.price is not None and "genai-prices" in openai.price.source
    assert openai.price.input_per_mtok > 0 and openai.price.output_per_mtok > openai.price.input_per_mtok
    assert openai.price.cost(1_000_000, 0) == pytest.approx(openai.price.input_per_mtok)
    local = pricing_for("qwen2.5:7b", "http://127.0.0.1:11434/v1", {})
    assert local.price is None and "GRAPHRAG_PRICE_INPUT_PER_MTOK" in local.unknown_reason
    env = {"GRAPHRAG_PRICE_INPUT_PER_MTOK": "0.5", "GRAPHRAG_PRICE_OUTPUT_PER_MTOK": "1.5"}
    over = pricing_for("qwen2.5:7b", "http://127.0.0.1:11434/v1", env)
    assert over.price.cost(2_000_000, 1_000_000) == pytest.approx(2.5)


def test_price_settings_are_checked():
    from graphrag_pipeline.settings_check import check_settings

    assert check_settings({"GRAPHRAG_MAX_COST_USD": "2.50"}) == []
    (line,) = check_settings({"GRAPHRAG_MAX_COST_USD": "-1"})
    assert line.startswith("GRAPHRAG_MAX_COST_USD='-1'") and "USD >= 0" in line
    (line,) = check_settings({"GRAPHRAG_PRICE_INPUT_PER_MTOK": "1"})
    assert "set together" in line


def test_budget_accountant_reserves_the_worst_case_and_settles():
    import threading
    import time

    from graphrag_pipeline.llm.budget import BudgetAccountant

    acc = BudgetAccountant(1.0)
    assert acc.reserve(0.6) is None
    # 0.6 held by a call in flight: the next call waits for it instead of being refused (a
    # reservation is a worst case, most of which comes back), and goes once it has settled
    got = []
    waiter = threading.Thread(target=lambda: got.append(acc.reserve(0.5, poll_s=0.05)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and not got
    acc.settle(0.6, 0.2)
    waiter.join(5)
    assert got == [None] and acc.spent_usd == pytest.approx(0.2) and acc.reserved_usd == pytest.approx(0.5)
    acc.settle(0.5, 0.3)
    # refused only when what was really spent and this call's worst case pass the limit
    refusal = acc.reserve(0.6)
    assert refusal is not None and refusal.spent_usd == pytest.approx(0.5) and acc.reserved_usd == 0
    # a stop (cancel) ends a wait for calls in flight
    assert acc.reserve(0.4) is None
    assert acc.reserve(0.4, stopped=lambda: True, poll_s=0.01) is not None


def test_only_pipeline_step_clients_are_held_to_a_build_budget(monkeypatch):
    """A query or `serve` client is not a build: GRAPHRAG_MAX_COST_USD does not stop it."""
    from graphrag_pipeline.llm import budget
    from graphrag_pipeline.llm.client import LLMClient
    from graphrag_pipeline.llm.pricing import Price, Pricing

    monkeypatch.setattr(budget, "_current", budget.BudgetAccountant(0.0))
    priced = Pricing("m", Price(1.0, 1.0, "test"))
    messages = [{"role": "user", "content": "hello"}]
    query = LLMClient(model="m", api_key="k", base_url="http://127.0.0.1:9", pricing=priced)
    assert query._reserve(messages, 10) is None  # nothing held, nothing refused
    step = LLMClient(model="m", api_key="k", base_url="http://127.0.0.1:9", pricing=priced, budgeted=True)
    with pytest.raises(Exception, match="budget"):
        step._reserve(messages, 10)


def test_an_old_ledger_gains_the_cost_columns(tmp_path):
    from graphrag_pipeline.llm.usage import LLMUsage, UsageLedger, read_usage_totals

    db = tmp_path / "cache.sqlite"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE llm_usage (at REAL, step TEXT, calls INT, cache_hits INT, prompt_tokens INT,"
        " completion_tokens INT)"
    )
    con.execute("INSERT INTO llm_usage VALUES (1, 'doc_subgraph', 3, 1, 300, 30)")
    con.commit()
    con.close()
    assert read_usage_totals(db) == LLMUsage(3, 1, 300, 30, 0.0, 0)  # read as it is, nothing written
    UsageLedger(db).record("community_reports", LLMUsage(1, 0, 100, 10, 0.25, 0))
    assert read_usage_totals(db) == LLMUsage(4, 1, 400, 40, 0.25, 0)


def test_a_previous_build_scales_each_step_by_what_it_measured_against_its_dry_run():
    from graphrag_pipeline.llm.estimate import ExtractionBase, estimate_phases

    dry = {
        "doc_subgraph": {"calls": 10, "prompt_tokens": 5000, "completion_tokens": 1000},
        "knowledge_graph": {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0},
        "resolved_graph": {"calls": 1, "prompt_tokens": 700, "completion_tokens": 50},
        "community_reports": {"calls": 20, "prompt_tokens": 30000, "completion_tokens": 2000},
    }
    base = ExtractionBase(chunks=6, to_extract=5, first_prompt_tokens=2000)
    phases, notes = estimate_phases(base, dry, "general", 1, None)  # a fresh home: the dry run as it is
    assert [round(p.calls) for p in phases] == [10, 0, 1, 20] and "no previous general build" in notes[-1]
    # the previous build: the model stopped gleaning early on 1 chunk in 5 and found more communities
    profile = {
        "dry_run": {
            "doc_subgraph": {"calls": 10, "prompt_tokens": 5000, "completion_tokens": 1000},
            "community_reports": {"calls": 10, "prompt_tokens": 15000, "completion_tokens": 1000},
        },
        "steps": {
            "doc_subgraph": {"calls": 9, "prompt_tokens": 4500, "completion_tokens": 2000},
            "community_reports": {"calls": 15, "prompt_tokens": 30000, "completion_tokens": 4000},
        },
    }
    phases, notes = estimate_phases(base, dry, "general", 1, profile)
    by = {p.step: p for p in phases}
    assert by["doc_subgraph"].calls == pytest.approx(9) and by["doc_subgraph"].completion_tokens == 2000
    assert by["community_reports"].calls == pytest.approx(30) and by["community_reports"].prompt_tokens == 60000
    assert by["resolved_graph"].calls == 1 and by["resolved_graph"].basis == "dry run"  # not measured: as it is
    assert "x1.50 calls" in notes[-1]


# -- against the scripted server --------------------------------------------------------------------
@pytest.fixture
def server(monkeypatch, home, corpus):
    """The fake model behind the scripted server, reporting real token counts in `usage` (as an
    endpoint does); `server.prompt_tokens` is what the build sent."""
    fake = FakeLLM()

    def respond(body):
        text = fake(body)
        prompt = count_tokens("\n".join(m["content"] for m in body["messages"]))
        with srv._lock:
            srv.prompt_tokens += prompt
        return Reply(text=text, prompt_tokens=prompt, completion_tokens=count_tokens(text))

    srv = ScriptedLLMServer(respond)
    srv.prompt_tokens = 0
    with srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("GRAPHRAG_LLM_MODEL", "fake-model")
        monkeypatch.setenv("GRAPHRAG_LLM_TIMEOUT", "10")
        monkeypatch.setenv("GRAPHRAG_PRICE_INPUT_PER_MTOK", str(IN_PRICE))
        monkeypatch.setenv("GRAPHRAG_PRICE_OUTPUT_PER_MTOK", str(OUT_PRICE))
        monkeypatch.setenv("GRAPHRAG_ESTIMATE_ON_BUILD", "true")  # the build's own estimate, tags and profile
        yield srv


def _files(home):
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else []


def _within_20_percent(estimate: dict, calls: int, prompt_tokens: int) -> None:
    """The acceptance bound: the whole build's calls and prompt tokens (extraction, gleaning, loop
    checks, summaries, resolution, reports), each within 20 % of what the estimate said."""
    assert calls > 0 and prompt_tokens > 0
    assert abs(estimate["calls"] - calls) <= 0.2 * calls, (estimate["phases"], calls)
    assert abs(estimate["prompt_tokens"] - prompt_tokens) <= 0.2 * prompt_tokens, (estimate["phases"], prompt_tokens)


@pytest.mark.parametrize("method", ["general", "light"])
def test_estimate_of_a_first_build_is_within_20_percent_of_the_whole_build(server, corpus, home, instance, method):
    estimate = cli_json("build", "--corpus", str(corpus), "--method", method, "--estimate", "--json")
    assert server.chat_count == 0 and _files(home) == []  # no call, nothing written
    assert any("no previous " + method in a for a in estimate["assumptions"])
    steps = {p["step"]: p for p in estimate["phases"]}
    assert steps["community_reports"]["calls"] > 0 and steps["resolved_graph"]["calls"] > 0
    code, out = cli("build", "--corpus", str(corpus), "--method", method)
    assert code == 0, out
    _within_20_percent(estimate, server.chat_count, server.prompt_tokens)
    # extraction, gleaning and loop checks: every call counted exactly
    chunks = sum(json.loads(p.read_text())["chunks"] for p in (home / "tables" / "chunks").glob("*.json"))
    extraction = [b for b in server.requests if classify(b["messages"]).endswith(("extract", "continue", "loop"))]
    assert estimate["chunks_to_extract"] == chunks
    assert steps["doc_subgraph"]["calls"] == len(extraction) == chunks * (2 if method == "general" else 1)
    # the build's runs carry the estimate made when it started; its last line says what it used and cost
    tagged = [r.tags for r in instance().get_runs() if "graphrag/estimated_cost_usd" in r.tags]
    assert tagged and float(tagged[0]["graphrag/estimated_cost_usd"]) > 0
    assert f"LLM: {server.chat_count} calls" in out and "$" in out.splitlines()[-1]
    # a rebuild of the unchanged corpus: nothing to extract, nothing to pay
    again = cli_json("build", "--corpus", str(corpus), "--method", method, "--estimate", "--json")
    assert again["calls"] == 0 and again["cost_usd"] == 0.0


@pytest.mark.parametrize("method", ["general", "light"])
def test_estimate_of_an_incremental_build_is_within_20_percent(server, corpus, home, method):
    # a first build of four documents, then the other three are added
    held_back = {}
    for p in sorted(corpus.iterdir())[1::2]:  # a sample like the rest: English and Chinese, every format
        held_back[p.name] = p.read_bytes()
        p.unlink()
    code, out = cli("build", "--corpus", str(corpus), "--method", method)
    assert code == 0, out
    for name, data in held_back.items():
        (corpus / name).write_bytes(data)

    # the build remembered its dry run's extractions: the next estimate does not extract the kept documents again
    from graphrag_pipeline.storage.layout import Paths

    with sqlite3.connect(Paths(home).cache_db) as con:
        remembered = con.execute("SELECT count(*) FROM dry_run WHERE key LIKE ?", (method + ":%",)).fetchone()[0]
    assert remembered == cli_json("stats", "--json")["chunks"]

    before, calls, tokens = _files(home), server.chat_count, server.prompt_tokens
    code, out = cli("build", "--corpus", str(corpus), "--method", method, "--estimate")
    assert code == 0, out
    assert "previous build" in out and "assumes:" in out and "cost: about $" in out
    estimate = cli_json("build", "--corpus", str(corpus), "--method", method, "--estimate", "--json")
    assert server.chat_count == calls and _files(home) == before  # no call, nothing written
    assert estimate["documents"] == len(held_back)

    code, out = cli("build", "--corpus", str(corpus), "--method", method)
    assert code == 0, out
    # the added documents' communities get new reports, the others keep theirs: the estimate
    # counts the reports of the communities whose content is new, not every community
    reports = sum(1 for b in server.requests[calls:] if classify(b["messages"]) == "report")
    assert 0 < reports < cli_json("stats", "--json")["community_reports"]
    _within_20_percent(estimate, server.chat_count - calls, server.prompt_tokens - tokens)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_budget_stops_the_build_cleanly_and_a_larger_one_finishes_without_redoing_work(
    server, corpus, home, monkeypatch, store, request
):
    if store == "postgres":  # the caches, the ledger and the build's account in the database (test_cache_postgres.py)
        import uuid

        pg = request.getfixturevalue("pg_server")
        db = pg.create_database(f"cost_{uuid.uuid4().hex[:10]}")
        monkeypatch.setenv("GRAPHRAG_CACHE_URL", f"postgresql://{pg.user}:{pg.password}@{pg.host}:{pg.port}/{db}")
    monkeypatch.setenv("GRAPHRAG_MAX_CONCURRENT_CHATS", "2")
    monkeypatch.setenv("GRAPHRAG_MAX_COST_USD", "0.5")
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 1, out
    message = err.getvalue()
    assert "GRAPHRAG_MAX_COST_USD=$0.5 would be exceeded" in message and "Left to do:" in message
    assert "larger budget" in message
    assert not (home / "index" / "search_index.duckdb").exists()  # nothing half-published
    first = list(server.requests)
    spent = cli_json("stats", "--json")["llm"]
    assert 0 < spent["cost_usd"] <= 0.5 and spent["calls"] == len(first)
    if store == "postgres":  # the build's account in the database says the same
        import psycopg2

        con = psycopg2.connect(os.environ["GRAPHRAG_CACHE_URL"])
        with con.cursor() as cur:
            cur.execute("SELECT spent_usd, refused FROM graphrag_budget")
            ((account_spent, refused),) = cur.fetchall()
        con.close()
        assert account_spent == pytest.approx(spent["cost_usd"], abs=1e-5) and refused >= 1

    monkeypatch.setenv("GRAPHRAG_MAX_COST_USD", "100")
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    bodies = [json.dumps(b["messages"], sort_keys=True) for b in server.requests]
    assert len(bodies) > len(first)
    assert len(set(bodies)) == len(bodies), "a call of the stopped build was paid for again"
    stats = cli_json("stats", "--json")
    assert stats["community_reports"] > 0
    expected = (stats["llm"]["prompt_tokens"] * IN_PRICE + stats["llm"]["completion_tokens"] * OUT_PRICE) / 1e6
    assert stats["llm"]["cost_usd"] == pytest.approx(expected, rel=1e-4)


def test_a_budget_with_an_unknown_price_is_refused(server, corpus, home, monkeypatch):
    monkeypatch.delenv("GRAPHRAG_PRICE_INPUT_PER_MTOK")
    monkeypatch.delenv("GRAPHRAG_PRICE_OUTPUT_PER_MTOK")
    monkeypatch.setenv("GRAPHRAG_MAX_COST_USD", "1")
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code, _ = cli("build", "--corpus", str(corpus), "--method", "light")
    assert (
        code == 2 and "cost of calls is unknown" in err.getvalue() and "GRAPHRAG_PRICE_INPUT_PER_MTOK" in err.getvalue()
    )
    assert server.chat_count == 0


def test_a_build_makes_no_dry_run_unless_asked(server, corpus, monkeypatch):
    """The dry run costs about three times the offline extraction: not paid before every update."""
    monkeypatch.delenv("GRAPHRAG_ESTIMATE_ON_BUILD")
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    assert "estimate:" not in out and "LLM: " in out.splitlines()[-1]


def test_materializations_from_before_code_versions_are_not_reported_stale():
    """An upgraded home: what settings its partitions were built under is not recorded."""
    from graphrag_pipeline.defs.staleness import _code_version_of

    assert _code_version_of("v1|light|m@3f2a-run") == "v1|light|m"
    assert _code_version_of("9c1e0b7d2a") is None and _code_version_of(None) is None
