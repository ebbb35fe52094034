"""The caches, the usage ledger and the build budget in PostgreSQL (a server the suite starts, see
pg_server.py): round trips, the choice of store, knowledge-base scoping, read-only semantics,
concurrent writers in separate processes, one budget across processes, and errors that name the
database but never its password."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg2
import pytest

from graphrag_pipeline.defs.resources import LLMSettings, PipelineSettings
from graphrag_pipeline.llm.cache import KVCache, open_cache, open_cache_read_only
from graphrag_pipeline.llm.pg_store import (
    CacheStoreError,
    PgBudget,
    PgKVCache,
    PgUsageLedger,
    cache_target,
    read_pg_usage_totals,
    target_from_url,
)
from graphrag_pipeline.llm.usage import LLMUsage, open_ledger, read_ledger_totals
from graphrag_pipeline.storage.layout import Paths
from graphrag_pipeline_tests.conftest import REPO, cli, cli_json
from graphrag_pipeline_tests.test_postgres import _instance_dir

EXAMPLE = REPO / "examples" / "dagster-postgres.yaml"


def _url(pg, db: str, password: str | None = None) -> str:
    return f"postgresql://{pg.user}:{password or pg.password}@{pg.host}:{pg.port}/{db}"


@pytest.fixture
def db_url(pg_server) -> str:
    """A URL of a new, empty database of the test server."""
    return _url(pg_server, pg_server.create_database(f"cache_{uuid.uuid4().hex[:10]}"))


def _tables(url: str) -> set[str]:
    con = psycopg2.connect(url)
    try:
        with con.cursor() as cur:
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            return {r[0] for r in cur.fetchall()}
    finally:
        con.close()


# -- round trips --------------------------------------------------------------------------------------
def test_cache_round_trip_scoped_by_knowledge_base_and_shared_llm_answers(db_url):
    target = target_from_url(db_url)
    cache = PgKVCache(target, "extraction", "legal")
    assert cache.get("k") is None and len(cache) == 0
    cache.put("k", {"entities": [1, 2], "text": "郑和 \x00 nul"})
    cache.put_many({f"k{i}": i for i in range(1200)})  # more than one batch of lookups
    assert cache.get("k") == {"entities": [1, 2], "text": "郑和 \x00 nul"}
    assert cache.get_many([f"k{i}" for i in range(1200)] + ["nope"]) == {f"k{i}": i for i in range(1200)}
    cache.put("k", "replaced")  # a fresh answer replaces the stored one, as in SQLite
    assert PgKVCache(target, "extraction", "legal").get("k") == "replaced" and len(cache) == 1201

    # another knowledge base does not see this one's extractions, nor another table's
    assert PgKVCache(target, "extraction", "medical").get("k") is None
    assert PgKVCache(target, "dry_run", "legal").get("k") is None
    # LLM answers are keyed by model, messages and parameters: every knowledge base shares them
    PgKVCache(target, "llm", "legal").put("answer-key", {"text": "an answer"})
    assert PgKVCache(target, "llm", "medical").get("answer-key") == {"text": "an answer"}


def test_connections_ended_by_the_server_are_replaced(db_url):
    cache = PgKVCache(target_from_url(db_url), "llm", "default")
    cache.put_many({"a": 1, "b": 2})
    assert cache.get("a") == 1  # its connection is idle in the pool now
    admin = psycopg2.connect(db_url)
    admin.autocommit = True
    with admin.cursor() as cur:  # what a server restart or a proxy's idle timeout does to them
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'graphrag-pipeline'"
        )
        assert cur.fetchall()
    admin.close()
    assert cache.get_many(["a", "b"]) == {"a": 1, "b": 2}
    cache.put("c", 3)
    assert len(cache) == 3


def test_read_only_cache_and_ledger_create_nothing(db_url):
    target = target_from_url(db_url)
    reader = PgKVCache(target, "llm", "default", read_only=True)
    assert reader.get("k") is None and reader.get_many(["k"]) == {} and len(reader) == 0
    reader.put("k", 1)  # a reader keeps what it has; nothing is stored
    assert read_pg_usage_totals(target, "default") == LLMUsage()
    assert _tables(db_url) == set()  # no table was created by reading

    PgKVCache(target, "llm", "default").put("k", "v")
    assert reader.get("k") == "v"  # the reader finds what a writer stored since
    with pytest.raises(psycopg2.errors.ReadOnlySqlTransaction):
        with reader._pool.connection() as con, con.cursor() as cur:  # its connections cannot write
            cur.execute("DELETE FROM graphrag_kv")


def test_ledger_round_trip_per_knowledge_base(db_url):
    target = target_from_url(db_url)
    legal, medical = PgUsageLedger(target, "legal"), PgUsageLedger(target, "medical")
    legal.record("doc_subgraph", LLMUsage(7, 2, 1000, 300, 0.25, 0))
    legal.record("community_reports", LLMUsage(3, 1, 500, 200, 0.0, 3))
    legal.record("nothing", LLMUsage())  # no work: no row
    medical.record("doc_subgraph", LLMUsage(1, 0, 10, 5, 0.01, 0))
    assert legal.totals() == LLMUsage(10, 3, 1500, 500, 0.25, 3)
    assert read_pg_usage_totals(target, "medical") == LLMUsage(1, 0, 10, 5, 0.01, 0)
    steps = legal.by_step_since(0)
    assert set(steps) == {"doc_subgraph", "community_reports"}
    assert steps["community_reports"] == LLMUsage(3, 1, 500, 200, 0.0, 3)
    import time

    assert legal.by_step_since(time.time() + 60) == {}


# -- which store ----------------------------------------------------------------------------------------
def test_the_store_is_the_setting_else_the_instance_database_else_sqlite(home, tmp_path, pg_server, monkeypatch):
    paths = Paths(home)
    monkeypatch.delenv("GRAPHRAG_CACHE_URL", raising=False)
    monkeypatch.delenv("GRAPHRAG_DAGSTER_HOME", raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert cache_target(paths) is None
    assert isinstance(open_cache(paths, "llm"), KVCache) and paths.cache_db.exists()

    # a Dagster instance storing its runs in Postgres: its database, `{env: X}` references resolved
    folder = _instance_dir(tmp_path, pg_server, monkeypatch)
    db = os.environ["DAGSTER_PG_DB"]
    monkeypatch.setenv("DAGSTER_HOME", str(folder))
    target = cache_target(paths)
    assert target.kwargs["dbname"] == db and target.kwargs["port"] == str(pg_server.port)
    assert pg_server.password not in target.describe() and str(folder) in target.source
    cache = open_cache(paths, "extraction")
    assert isinstance(cache, PgKVCache)
    cache.put("x", 1)
    assert open_cache_read_only(paths, "extraction")[0].get("x") == 1
    # the instance's legacy form (run_storage of dagster_postgres) is read too
    (folder / "dagster.yaml").write_text(
        "run_storage:\n  module: dagster_postgres.run_storage\n  class: PostgresRunStorage\n  config:\n"
        f"    postgres_url: postgresql+psycopg2://{pg_server.user}:{pg_server.password}@{pg_server.host}:"
        f"{pg_server.port}/{db}\n"
    )
    assert cache_target(paths).kwargs["dbname"] == db
    # an instance whose variables are missing says which
    monkeypatch.delenv("DAGSTER_PG_HOST")
    (folder / "dagster.yaml").write_bytes(EXAMPLE.read_bytes())
    with pytest.raises(CacheStoreError, match="DAGSTER_PG_HOST"):
        cache_target(paths)
    assert "DAGSTER_PG_HOST" in open_cache_read_only(paths, "llm")[1]

    # GRAPHRAG_CACHE_URL wins over the instance
    other = pg_server.create_database(f"url_{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("GRAPHRAG_CACHE_URL", _url(pg_server, other))
    assert cache_target(paths).kwargs["dbname"] == other and cache_target(paths).source == "GRAPHRAG_CACHE_URL"
    open_ledger(paths).record("doc_subgraph", LLMUsage(2, 1, 30, 4))
    assert read_ledger_totals(paths) == LLMUsage(2, 1, 30, 4)
    # a SQLite-stored instance (the home's private one, the project's dagster.yaml) keeps SQLite
    monkeypatch.delenv("GRAPHRAG_CACHE_URL")
    monkeypatch.delenv("DAGSTER_HOME")
    (paths.dagster_home).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", paths.dagster_home / "dagster.yaml")
    assert cache_target(paths) is None


def test_errors_name_the_database_never_the_password(home, db_url, pg_server, monkeypatch, corpus, capsys):
    wrong = "wrong-pass-SECRET-42"
    bad = _url(pg_server, db_url.rsplit("/", 1)[1], password=wrong)
    with pytest.raises(CacheStoreError) as info:
        PgKVCache(target_from_url(bad), "llm", "default")
    message = str(info.value)
    assert f"{pg_server.host}:{pg_server.port}" in message and "password authentication failed" in message
    assert wrong not in message and wrong not in repr(info.value.__cause__ or "") and info.value.__suppress_context__

    monkeypatch.setenv("GRAPHRAG_CACHE_URL", bad)
    cache, problem = open_cache_read_only(Paths(home), "llm")
    assert cache is None and wrong not in problem and pg_server.host in problem
    stats = cli_json("stats", "--json")
    assert stats["llm"].startswith("unavailable (the cache database") and wrong not in stats["llm"]
    # a build refuses to start (exit 2) and says where, before anything runs
    capsys.readouterr()
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    err = capsys.readouterr().err
    assert code == 2 and wrong not in out + err
    assert f"error: the cache database postgresql://{pg_server.user}@{pg_server.host}:{pg_server.port}/" in err
    assert not list((home / "tables").rglob("*.*"))  # nothing was built
    # a settings check of a malformed URL does not repeat it
    monkeypatch.setenv("GRAPHRAG_CACHE_URL", f"mysql://u:{wrong}@h/db")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    err = capsys.readouterr().err
    assert code == 2 and wrong not in out + err and "GRAPHRAG_CACHE_URL must be a postgresql://" in err


# -- many processes ------------------------------------------------------------------------------------
def _writer(url: str, worker: int, rounds: int) -> None:
    target = target_from_url(url)
    cache, ledger = PgKVCache(target, "extraction", "kb"), PgUsageLedger(target, "kb")
    for r in range(rounds):
        # overlapping keys in both writers (the same chunk extracted twice) and keys of its own
        cache.put_many({**{f"shared-{r}-{i}": i for i in range(20)}, **{f"w{worker}-{r}-{i}": i for i in range(20)}})
        cache.put(f"single-{worker}-{r}", r)
        ledger.record("doc_subgraph", LLMUsage(1, 2, 10, 5, 0.5, 0))


def test_two_processes_write_the_cache_and_ledger_at_once_and_lose_nothing(db_url):
    ctx = multiprocessing.get_context("spawn")
    rounds = 40
    procs = [ctx.Process(target=_writer, args=(db_url, w, rounds)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    target = target_from_url(db_url)
    cache = PgKVCache(target, "extraction", "kb", read_only=True)
    assert len(cache) == rounds * 20 + 2 * rounds * 20 + 2 * rounds
    assert cache.get_many([f"w2-{r}-19" for r in range(rounds)]) == {f"w2-{r}-19": 19 for r in range(rounds)}
    assert read_pg_usage_totals(target, "kb") == LLMUsage(2 * rounds, 4 * rounds, 20 * rounds, 10 * rounds, rounds, 0)


def _spender(home: str, run_id: str, calls: int, out, barrier) -> None:
    """A step process of the run ``run_id``: it joins the run's account as a step does (its environment
    names the cache database and the limit), then spends."""
    from graphrag_pipeline.llm import budget

    acc = budget.join_run(run_id, Paths(Path(home)))
    barrier.wait(60)  # both processes spend at the same time
    made = 0
    for _ in range(calls):
        if acc.reserve(0.08, poll_s=0.01) is not None:
            break
        acc.settle(0.08, 0.05)  # the answer cost less than its worst case
        made += 1
    out.put((made, type(acc).__name__))


def test_one_budget_across_two_processes_of_a_run(home, db_url, monkeypatch):
    monkeypatch.setenv("GRAPHRAG_CACHE_URL", db_url)
    monkeypatch.setenv("GRAPHRAG_MAX_COST_USD", "1.0")
    ctx = multiprocessing.get_context("spawn")  # a child reads the environment set above
    out, barrier = ctx.Queue(), ctx.Barrier(2)
    procs = [ctx.Process(target=_spender, args=(str(home), "r1", 40, out, barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    made = [m for m, _ in results]
    assert {kind for _, kind in results} == {"SharedBudgetAccountant"}
    # together as many calls as one budget allows (worst case 0.08 each, 0.05 spent each): 19 x 0.05 = 0.95,
    # and a 20th would reserve 0.08 over 1.0 (a budget per process would have allowed 19 each)
    assert sum(made) == 19
    budget = PgBudget(target_from_url(db_url), "default", "run:r1", 1.0)
    spent, reserved, refused = budget.state()
    assert spent == pytest.approx(0.95) and reserved == 0 and refused == 2
    # another run has its own account
    assert PgBudget(target_from_url(db_url), "default", "run:r2", 1.0).try_reserve(0.5)[0] == "held"


def test_a_step_joins_its_runs_account(home, db_url, monkeypatch):
    import dagster as dg

    from graphrag_pipeline.defs.llm_step import StepLLM
    from graphrag_pipeline.llm import budget

    monkeypatch.setattr(budget, "_current", None)  # restored afterwards: nothing leaks into other tests
    monkeypatch.setattr(budget, "_build_started", False)
    monkeypatch.setenv("GRAPHRAG_CACHE_URL", db_url)
    monkeypatch.setenv("GRAPHRAG_MAX_COST_USD", "2.5")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # a client is made; no call is
    seen = {}

    @dg.asset
    def llm_step(settings: PipelineSettings, llm: LLMSettings) -> None:
        StepLLM("doc_subgraph", settings, llm, used=True)
        seen["account"] = budget.current().account

    result = dg.materialize([llm_step], resources={"settings": PipelineSettings(), "llm": LLMSettings()})
    assert result.success
    assert seen["account"] == f"run:{result.run_id}"
    assert PgBudget(target_from_url(db_url), "default", f"run:{result.run_id}", 2.5).state() == (0.0, 0.0, 0)


def _reserve_and_die(url: str) -> None:
    import os

    budget = PgBudget(target_from_url(url), "kb", "run:dead", 1.0)
    assert budget.try_reserve(0.9)[0] == "held"
    os._exit(0)  # killed while its call is in flight: no settle


def test_a_dead_process_reservation_is_given_back(db_url):
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_reserve_and_die, args=(db_url,))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    from graphrag_pipeline.llm.budget import SharedBudgetAccountant

    acc = SharedBudgetAccountant(PgBudget(target_from_url(db_url), "kb", "run:dead", 1.0), 1.0)
    # the dead holder's 0.9 would make this wait; its connection is gone, so the hold is dropped
    # (the server may take a moment to notice the closed connection: the wait polls)
    assert acc.reserve(0.5, poll_s=0.05) is None
    assert acc.reserved_usd == pytest.approx(0.5) and acc.spent_usd == 0


def test_the_budget_refuses_what_could_pass_the_limit_and_waits_for_calls_in_flight(db_url):
    from graphrag_pipeline.llm.budget import SharedBudgetAccountant

    acc = SharedBudgetAccountant(PgBudget(target_from_url(db_url), "kb", "build:b", 1.0), 1.0)
    assert acc.reserve(0.7) is None
    stopped = []
    # only a call in flight stands in the way: wait (here stopped at once), never refuse for it
    refusal = acc.reserve(0.5, stopped=lambda: stopped.append(1) or True)
    assert refusal is not None and stopped and acc.refused == 0
    acc.settle(0.7, 0.6)
    refusal = acc.reserve(0.5)  # 0.6 spent + 0.5 > 1.0: refused, nothing held
    assert refusal.spent_usd == pytest.approx(0.6) and refusal.needed_usd == 0.5 and acc.refused == 1
    assert acc.reserve(0.4) is None and acc.reserved_usd == pytest.approx(0.4)


# -- a CLI build on a shared cache -----------------------------------------------------------------------
def _cli_process(env: dict, *args: str) -> str:
    """The CLI in its own process: the knowledge base is read when the definitions load, once a process."""
    exe = Path(sys.executable).with_name("graphrag-pipeline")
    done = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def test_a_second_knowledge_base_on_the_same_cache_database_makes_no_chat_calls(tmp_path, corpus, db_url, pg_server):
    from graphrag_pipeline_tests.fake_llm import FakeLLM
    from graphrag_pipeline_tests.llm_server import ScriptedLLMServer

    secret = "test-key-SECRET-do-not-leak"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHRAG_", "OPENAI_", "DAGSTER_"))}
    with ScriptedLLMServer(FakeLLM()) as srv:
        base.update(
            {
                "OPENAI_BASE_URL": srv.base_url,
                "OPENAI_API_KEY": secret,
                "GRAPHRAG_LLM_MODEL": "fake-model",
                "GRAPHRAG_LLM_MAX_RETRIES": "2",
                "GRAPHRAG_LLM_TIMEOUT": "5",
                "GRAPHRAG_CACHE_URL": db_url,
                "GRAPHRAG_PRICE_INPUT_PER_MTOK": "0.15",
                "GRAPHRAG_PRICE_OUTPUT_PER_MTOK": "0.60",
                "GRAPHRAG_MAX_COST_USD": "5",  # the build's account is kept in the database
            }
        )
        first = {**base, "GRAPHRAG_HOME": str(tmp_path / "home-a"), "GRAPHRAG_KB": "first_kb"}
        second = {**base, "GRAPHRAG_HOME": str(tmp_path / "home-b"), "GRAPHRAG_KB": "second_kb"}
        out = _cli_process(first, "build", "--corpus", str(corpus), "--method", "light")
        assert f"caches and LLM ledger: postgresql://{pg_server.user}@{pg_server.host}:{pg_server.port}/" in out
        assert pg_server.password not in out and secret not in out
        made = len(srv.requests)
        assert made > 0
        assert not (tmp_path / "home-a" / "cache" / "cache.sqlite").exists()  # nothing in the home's SQLite
        first_usage = json.loads(_cli_process(first, "stats", "--json"))["llm"]
        assert first_usage["calls"] == made

        # another home, another knowledge base, the same database: every answer is in the shared LLM
        # cache, so no chat call is made; its extraction cache and its ledger are its own
        out = _cli_process(second, "build", "--corpus", str(corpus), "--method", "light")
        assert len(srv.requests) == made and pg_server.password not in out
        second_usage = json.loads(_cli_process(second, "stats", "--json"))["llm"]
        assert second_usage["calls"] == 0 and second_usage["cache_hits"] > 0
        assert json.loads(_cli_process(first, "stats", "--json"))["llm"] == first_usage
        target = target_from_url(db_url)
        assert len(PgKVCache(target, "extraction", "second_kb")) == len(PgKVCache(target, "extraction", "first_kb")) > 0
        # the same answers for both
        question = ("query", "Who sailed with Charles Darwin?", "--mode", "local", "--json")
        assert (
            json.loads(_cli_process(first, *question))["entities"]
            == json.loads(_cli_process(second, *question))["entities"]
        )
    # each build's budget account is in the database, with what it spent
    con = psycopg2.connect(db_url)
    with con.cursor() as cur:
        cur.execute("SELECT kb, spent_usd FROM graphrag_budget ORDER BY created_at")
        rows = cur.fetchall()
    con.close()
    assert [r[0] for r in rows] == ["first_kb", "second_kb"]
    assert rows[0][1] == pytest.approx(first_usage["cost_usd"], abs=1e-5) and rows[0][1] > 0 and rows[1][1] == 0


def test_a_password_given_as_a_url_parameter_is_scrubbed_too():
    target = target_from_url("postgresql://app@db.internal:5432/graphrag?password=Param-SECRET-7&sslmode=require")
    assert target.kwargs["password"] == "Param-SECRET-7" and target.kwargs["sslmode"] == "require"
    scrubbed = target.scrub('connection to "db.internal" failed: password=Param-SECRET-7 rejected')
    assert "Param-SECRET-7" not in scrubbed and "***" in scrubbed
    assert "Param-SECRET-7" not in target.describe()
