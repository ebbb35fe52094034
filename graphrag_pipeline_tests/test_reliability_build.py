"""Crashes, signals, concurrent builds, damaged state and the home's own settings, through real
processes: a build killed twice, stopped by SIGTERM/SIGINT, started twice at once, or run against
another corpus never wedges or silently shrinks a knowledge base."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from graphrag_pipeline_tests.conftest import cli, cli_json
from graphrag_pipeline_tests.fake_llm import FakeLLM
from graphrag_pipeline_tests.llm_server import Reply, ScriptedLLMServer

REPO = Path(__file__).resolve().parents[1]


def _env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHRAG_", "OPENAI_", "DAGSTER_"))}
    env.update(GRAPHRAG_HOME=str(home), **extra)
    return env


def _spawn(home: Path, corpus: Path, *args: str, group: bool = False, **env: str) -> subprocess.Popen:
    """group: in a process group of its own, as a terminal's foreground job (a Ctrl-C signals the group)."""
    cmd = [sys.executable, "-m", "graphrag_pipeline.cli", "build", "--corpus", str(corpus), *args]
    return subprocess.Popen(
        cmd,
        env=_env(home, **env),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0 if group else None,
    )


def _wait_for(predicate, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


@pytest.fixture
def slow_llm(home, corpus, monkeypatch):
    """A chat model that takes 2 s per answer, so a build is surely in the middle of LLM calls."""
    fake = FakeLLM()
    with ScriptedLLMServer(lambda body: Reply(text=fake(body), delay_s=2.0)) as server:
        env = {
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "test-key",
            "GRAPHRAG_LLM_MODEL": "fake-model",
            "GRAPHRAG_LLM_TIMEOUT": "30",
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        yield server, env


def _instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home / "dagster"))


def _in_progress(inst) -> list:
    return list(
        inst.get_runs(
            filters=dg.RunsFilter(
                statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.CANCELING]
            )
        )
    )


def test_a_build_killed_twice_during_extraction_is_recovered_by_the_next(home, corpus, slow_llm):
    server, env = slow_llm
    for _ in range(2):
        seen = server.chat_count
        p = _spawn(home, corpus, "--method", "light", **env)
        _wait_for(lambda seen=seen: server.chat_count > seen)  # extraction has started: LLM calls are in flight
        p.kill()
        p.wait(timeout=30)
    inst = _instance(home)
    assert _in_progress(inst), "the killed builds left their runs in progress"
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    assert "recovered:" in out and "marked failed" in out
    inst = _instance(home)
    assert not _in_progress(inst)
    assert not inst.event_log_storage.get_concurrency_run_ids()  # no pool slot left held
    assert cli_json("stats", "--json")["community_reports"] > 0


@pytest.mark.parametrize(
    "signo,status,group", [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, False), (signal.SIGINT, 130, True)]
)
def test_a_signal_stops_the_build_quickly_and_the_next_build_completes(home, corpus, slow_llm, signo, status, group):
    server, env = slow_llm
    p = _spawn(home, corpus, "--method", "light", group=group, **env)
    _wait_for(lambda: server.chat_count - server.in_flight >= 3)  # some answers paid for, others in flight
    answered = server.chat_count - server.in_flight
    time.sleep(0.5)  # the client has read the answers the server counts as sent (the ledger's lower bound)
    started = time.monotonic()
    if group:  # Ctrl-C at a terminal: every process of the foreground group gets it
        os.killpg(p.pid, signo)
    else:
        p.send_signal(signo)
    out, err = p.communicate(timeout=60)
    assert time.monotonic() - started < 10, "the build did not stop within seconds"
    assert p.returncode == status, out + err
    assert f"stopped by {signal.Signals(signo).name}" in err
    # said in one line: no stack trace of the build, of Dagster or of a helper process it started
    assert "Traceback" not in out + err and "Stack Trace" not in out + err, out + err
    inst = _instance(home)
    assert not _in_progress(inst)
    runs = inst.get_runs(limit=1)
    assert runs[0].status == dg.DagsterRunStatus.CANCELED
    assert not inst.event_log_storage.get_concurrency_run_ids()
    # the answers paid for before the stop are in the ledger (the stopped step recorded none before)
    assert answered <= cli_json("stats", "--json")["llm"]["calls"] <= server.chat_count
    assert not list(home.rglob(".*.tmp")) or True  # leftovers are removed by the next build (below)
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 0, out
    assert not list(home.rglob(".*.tmp"))


def test_a_signal_as_a_run_starts_leaves_no_run_in_progress(home, corpus):
    # the signal lands while Dagster sets the run up (outside the handlers that end a run): the build
    # still stops in one line, and its run is canceled then, not left "in progress" until a later build
    (home / "dagster").mkdir(parents=True)
    p = _spawn(home, corpus, "--method", "fast", group=True)

    def a_run_exists() -> bool:
        try:
            return bool(_instance(home).get_runs(limit=1))
        except Exception:  # noqa: BLE001 - the instance's database is being created
            return False

    _wait_for(a_run_exists, timeout_s=60)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    if p.returncode == 0:
        pytest.skip("the build finished before the signal")  # a machine far faster than any seen
    assert p.returncode == 130, out + err
    assert "stopped by SIGINT" in err and "Traceback" not in out + err, out + err
    inst = _instance(home)
    assert not _in_progress(inst)
    assert {r.status for r in inst.get_runs()} <= {dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.SUCCESS}
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0 and "recovered:" not in out, out


def test_two_builds_at_once_on_a_new_home(home, corpus):
    first = _spawn(home, corpus, "--method", "fast")
    second = _spawn(home, corpus, "--method", "fast")
    outs = [p.communicate(timeout=300) for p in (first, second)]
    codes = sorted(p.returncode for p in (first, second))
    assert codes in ([0, 0], [0, 75]), outs
    if codes == [0, 75]:
        assert any("another build is running on this home" in err for _, err in outs)
    # with --wait both complete, one after the other, and the home stays usable
    both = [_spawn(home, corpus, "--method", "fast", "--wait") for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in both]
    assert [p.returncode for p in both] == [0, 0], outs
    stats = cli_json("stats", "--json")
    assert stats["documents"] == 7 and stats["community_reports"] > 0
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0 and "everything is up to date" in out, out


@pytest.fixture
def built(home, corpus):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    return cli_json("stats", "--json")


def _counts() -> dict:
    stats = cli_json("stats", "--json")
    return {k: stats[k] for k in ("documents", "entities", "relations", "community_reports")}


@pytest.mark.parametrize(
    "damage",
    [
        "delete index",
        "garble index",
        "delete graph",
        "truncate graph",
        "delete report",
        # the stages' working files: a state, a bundle's table, a bundle's manifest
        "empty resolution state",
        "truncate mention shard",
        "truncate clustering state",
        "garble chunk manifest",
    ],
)
def test_damaged_whole_corpus_outputs_are_repaired_by_the_next_build(built, home, corpus, damage):
    before = _counts()
    index = home / "index" / "search_index.duckdb"
    graph = next((home / "graph").glob("resolved_graph.nodes-*.parquet"))  # a slice (sliced_graph)
    working = {
        "empty resolution state": home / "graph" / "resolution.json",
        "truncate mention shard": max(
            (home / "graph").glob("mentions.entities-*.parquet"), key=lambda f: f.stat().st_size
        ),
        "truncate clustering state": next((home / "graph").glob("communities-state.table.*.parquet")),
        "garble chunk manifest": home / "graph" / "chunks.manifest.json",
    }.get(damage)
    if working is not None:
        working.write_bytes(b"" if working.suffix == ".json" and "state" in damage else working.read_bytes()[:100])
    elif damage == "delete index":
        index.unlink()
    elif damage == "garble index":
        index.write_bytes(b"not a database" * 100)
    elif damage == "delete graph":
        graph.unlink()
    elif damage == "truncate graph":
        graph.write_bytes(graph.read_bytes()[:100])
    else:
        next((home / "reports").glob("*.json")).unlink()
    code, out = cli("verify")
    assert code == 1 and "problem:" in out, out
    if "index" in damage:  # no zeros passed off as the counts of a built home
        code, out = cli("stats", "--json")
        assert code == 1 and "search_index.duckdb" in json.loads(out)["error"], out
    if working is not None:
        assert str(working) in out, out  # the problem names the file
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert "repairing:" in out and "everything is up to date" not in out
    assert _counts() == before
    code, out = cli("verify")
    assert code == 0 and "all good" in out, out
    if working is not None:  # rebuilt, not only removed: the state, or the bundle's manifest again
        bundle = working.name.split(".")[0]
        assert (working if bundle == "resolution" else home / "graph" / f"{bundle}.manifest.json").exists()
        code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
        assert code == 0 and "everything is up to date" in out, out
    assert cli_json("query", "Who sailed with Charles Darwin on HMS Beagle?", "--json")["entities"]


def test_verify_finds_vectors_that_are_not_numbers_and_a_rebuilt_index_has_none(built, home, corpus):
    # an older version published NaN vectors from a faulty embedding endpoint (they rank first in
    # every search): verify says so and how to repair; the index rebuilt has none
    import duckdb

    index = home / "index" / "search_index.duckdb"
    con = duckdb.connect(str(index))
    dim = con.execute("SELECT array_length(embedding) FROM chunks LIMIT 1").fetchall()[0][0]
    nan = ", ".join(["'NaN'::FLOAT"] * dim)
    con.execute(f"UPDATE chunks SET embedding = list_value({nan})::FLOAT[{dim}] WHERE rowid < 2")
    con.close()
    code, out = cli("verify")
    assert code == 1 and "vectors that are not numbers" in out and "2 chunks" in out, out
    index.unlink()
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0 and "repairing:" in out, out
    code, out = cli("verify")
    assert code == 0 and "all good" in out, out


def test_verify_names_what_the_index_lacks_in_words(built, home, corpus):
    # found by an exploratory run: verify printed the verdict's repr (IndexCompleteness(rows={...}))
    # and said "1 problems"
    import duckdb

    con = duckdb.connect(str(home / "index" / "search_index.duckdb"))
    (name,) = con.execute("SELECT name FROM entities ORDER BY key LIMIT 1").fetchone()
    con.execute("DELETE FROM entities WHERE rowid = (SELECT min(rowid) FROM entities)")
    con.close()
    code, out = cli("verify")
    assert code == 1 and "does not match the graph: 1 of " in out and "entities are missing" in out, out
    assert "IndexCompleteness(" not in out and "1 problem;" in out, out


def test_the_home_keeps_its_corpus_and_method(built, home, corpus, tmp_path, monkeypatch):
    other = tmp_path / "other"
    shutil.copytree(REPO / "data" / "corpus", other)
    (other / "darwin_and_wallace.txt").unlink()
    # another corpus on the command line is refused; from the environment it gives way to the home's
    code, out = cli("build", "--corpus", str(other), "--method", "fast")
    assert code == 2
    monkeypatch.setenv("GRAPHRAG_CORPUS", str(other))
    monkeypatch.setenv("GRAPHRAG_METHOD", "light")
    code, out = cli("build")
    assert code == 0 and "using this home's corpus" in out and "everything is up to date" in out, out
    assert _counts()["documents"] == 7
    # so does the sensor (what `dagster dev` without the build's environment would run)
    from graphrag_pipeline.definitions import defs

    inst = _instance(home)
    sensor = defs.resolve_sensor_def("corpus_sensor")
    with dg.build_sensor_context(instance=inst, resources={"settings": defs.resources["settings"]}) as ctx:
        result = sensor(ctx)
    removals = [
        r for r in (result.dynamic_partitions_requests or []) if isinstance(r, dg.DeleteDynamicPartitionsRequest)
    ]
    assert not removals
    # and the daily reconcile schedule
    schedule = defs.resolve_schedule_def("daily_reconcile")
    with dg.build_schedule_context(instance=inst, resources={"settings": defs.resources["settings"]}) as ctx:
        outcome = schedule.evaluate_tick(ctx)
    assert not outcome.run_requests and "up to date" in (outcome.skip_message or "")
    assert len(inst.get_dynamic_partitions("documents")) == 7
    # another method on the command line is refused too
    code, out = cli("build", "--corpus", str(corpus), "--method", "light")
    assert code == 2
    # switching is explicit
    code, out = cli("build", "--corpus", str(other), "--method", "fast", "--switch-corpus")
    assert code == 0, out
    assert _counts()["documents"] == 6


def test_an_empty_corpus_does_not_empty_a_built_home(built, home, corpus):
    for f in list(corpus.iterdir()):
        f.unlink()
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 2
    assert _counts()["documents"] == 7
    from graphrag_pipeline.definitions import defs

    inst = _instance(home)
    sensor = defs.resolve_sensor_def("corpus_sensor")
    with dg.build_sensor_context(instance=inst, resources={"settings": defs.resources["settings"]}) as ctx:
        result = sensor(ctx)
    assert not result.run_requests and "refusing" in (result.skip_reason.skip_message if result.skip_reason else "")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast", "--allow-empty")
    assert code == 0, out


def test_settings_are_checked_before_anything_runs(home, corpus, monkeypatch, capsys):
    monkeypatch.setenv("GRAPHRAG_METHOD", "bogus")
    monkeypatch.setenv("GRAPHRAG_MAX_CLUSTER_SIZE", "0")
    code, _ = cli("build", "--corpus", str(corpus))
    err = capsys.readouterr().err
    assert code == 2
    assert "GRAPHRAG_METHOD" in err and "GRAPHRAG_MAX_CLUSTER_SIZE" in err
    assert not (home / "dagster" / "runs.db").exists()


def test_leftovers_truncation_and_disk_errors_are_said_plainly(home, corpus, monkeypatch, capfd):
    big = "Ada Lovelace wrote notes on the Analytical Engine of Charles Babbage. " * 2000
    (corpus / "huge.txt").write_text(big, encoding="utf-8")
    (corpus / "sub").mkdir()
    (corpus / "sub" / "blob.txt").write_bytes(bytes(range(256)) * 20)
    monkeypatch.setenv("GRAPHRAG_MAX_DOCUMENT_BYTES", "50000")
    leftover = home / "tables" / "chunks" / ".darwin.parquet.a1b2c3d4.parquet.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half written")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert "removed a temporary file left by an interrupted build" in out and not leftover.exists()
    # the truncation is shown, not only logged: once, though each of the run's document partitions
    # records the batch's notices, and naming the file once ("huge.txt is 140,000 bytes; ...")
    assert "warning: huge.txt is 140,000 bytes" in out and "first 50,000 bytes" in out, out
    assert out.count("huge.txt") == 1 and "more skipped or truncated" not in out, out
    # named once, by its path in the corpus; and not again by Dagster's console logger
    assert "warning: sub/blob.txt skipped: binary content" in out, out
    err = capfd.readouterr().err
    assert "huge.txt" not in err and "blob.txt" not in err, err
    from graphrag_pipeline.cli import _plain_error

    assert _plain_error("OSError: [Errno 28] No space left on device").startswith("disk full")
    assert _plain_error("sqlite3.OperationalError: database or disk is full").startswith("disk full")
    assert "most often: it is full" in _plain_error("sqlite3.OperationalError: disk I/O error")


def test_waiting_for_a_pool_slot_is_bounded_and_slots_of_dead_runs_are_freed(home, corpus, instance):
    from graphrag_pipeline.defs.instance_ops import pool_holders, recover_dead_runs, wait_for_pool

    inst = instance()
    storage = inst.event_log_storage
    storage.set_concurrency_slots("llm", 1)
    from graphrag_pipeline.definitions import defs

    run = inst.create_run_for_job(
        defs.resolve_job_def("index_job"),
        tags={
            "graphrag/cli": "build",
            "graphrag/pid": "999999999",
            "graphrag/host": __import__("socket").gethostname(),
        },
    )
    inst.report_run_canceling(run)  # an in-progress status, as a killed build leaves it
    claim = storage.claim_concurrency_slot("llm", run.run_id, "doc_subgraph")
    assert claim.is_claimed and pool_holders(inst)[0] == 0
    said = []
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="held by run"):
        wait_for_pool(inst, timeout_s=1.5, say=said.append)
    assert 1.4 < time.monotonic() - started < 5 and len(said) == 1  # said once, then slept: no busy loop
    messages = recover_dead_runs(inst)
    assert any("marked failed" in m for m in messages)
    assert pool_holders(inst)[0] == 1
    wait_for_pool(inst, timeout_s=1.0)  # returns at once now


def test_a_stop_swallowed_while_polling_the_pool_still_stops_the_wait(monkeypatch):
    # SQLAlchemy catches an exception raised while it closes a connection: a SIGTERM landing in the
    # poll's query lost its Stop, and the build went on waiting (up to 10 min; a flaky CI failure)
    import signal

    from graphrag_pipeline import interrupts
    from graphrag_pipeline.defs import instance_ops

    polls = []

    def held_and_signalled(instance, pool="llm"):
        polls.append(1)
        if len(polls) == 2:
            try:  # as SQLAlchemy's pool does when the handler raises while it closes a connection
                signal.raise_signal(signal.SIGTERM)
            except Exception:  # noqa: BLE001
                pass
        return 0, ["other-run"]

    monkeypatch.setattr(instance_ops, "pool_holders", held_and_signalled)
    interrupts.install()
    try:
        started = time.monotonic()
        with pytest.raises(interrupts.Stop):
            instance_ops.wait_for_pool(None, timeout_s=5.0, say=lambda _m: None)
        assert time.monotonic() - started < 2.5 and len(polls) == 2
    finally:
        interrupts.uninstall()


@pytest.mark.parametrize("held", ["claimed", "assigned"])
def test_a_build_waiting_for_a_pool_slot_sleeps_and_stops_on_sigterm(home, corpus, instance, tmp_path, held):
    """`claimed`: another run holds the only `llm` slot, so the build waits before its run starts.
    `assigned`: another run's step was given the slot and has not claimed it yet, so the build's run
    starts and its doc_subgraph step waits inside Dagster's in-process executor (which, unpatched,
    polls at 100 % CPU and never looks at the signal)."""
    import psutil

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    (corpus / "new.txt").write_text("Ada Lovelace wrote about the Analytical Engine of Charles Babbage.\n")
    inst = instance()
    storage = inst.event_log_storage
    storage.set_concurrency_slots("llm", 1)
    from graphrag_pipeline.definitions import defs

    other = inst.create_run_for_job(defs.resolve_job_def("reports_job"))
    inst.report_run_canceling(other)  # in progress, in another process (the UI, the daemon)
    if held == "claimed":
        assert storage.claim_concurrency_slot("llm", other.run_id, "community_reports").is_claimed
    else:
        storage.add_pending_step("llm", other.run_id, "community_reports", priority=0, should_assign=True)
    log = tmp_path / "build.out"
    with log.open("w") as stdout:
        p = subprocess.Popen(
            [sys.executable, "-m", "graphrag_pipeline.cli", "build", "--corpus", str(corpus), "--method", "fast"],
            env=_env(home),
            cwd=REPO,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        _wait_for(lambda: "waiting for" in log.read_text() or p.poll() is not None)
        assert p.poll() is None, log.read_text() + p.stderr.read()
        expected = "the 'llm' pool" if held == "claimed" else "pool slot for step(s) doc_subgraph"
        assert expected in log.read_text()
        proc = psutil.Process(p.pid)
        before = proc.cpu_times()
        time.sleep(3.0)
        after = proc.cpu_times()
        used = (after.user - before.user) + (after.system - before.system)
        assert used < 0.5, f"the waiting build used {used:.2f}s of CPU in 3s"  # a busy loop uses ~3s
        p.send_signal(signal.SIGTERM)
        started = time.monotonic()
        err = p.communicate(timeout=30)[1]
        assert time.monotonic() - started < 10
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 143, log.read_text() + err
    assert "build stopped by SIGTERM" in err
    mine = [r for r in inst.get_runs() if r.run_id != other.run_id and r.tags.get("graphrag/pid") == str(p.pid)]
    assert all(r.status == dg.DagsterRunStatus.CANCELED for r in mine)
    assert len(mine) == (0 if held == "claimed" else 1)
    pending = storage.get_concurrency_info("llm").pending_steps
    assert {s.run_id for s in pending} <= {other.run_id}  # the build's own claim was withdrawn


def test_every_step_that_can_call_the_llm_is_in_the_llm_pool():
    from graphrag_pipeline.definitions import defs

    pools = {
        key: defs.resolve_assets_def(key).op.pool
        for key in (
            "chunks",
            "doc_subgraph",
            "knowledge_graph",
            "resolved_graph",
            "communities",
            "community_reports",
            "search_index",
            "elasticsearch_index",
        )
    }
    calling = {
        "doc_subgraph",
        "knowledge_graph",
        "resolved_graph",
        "community_reports",
        "search_index",
        "elasticsearch_index",
    }
    assert {k for k, pool in pools.items() if pool == "llm"} == calling
    assert all(pools[k] is None for k in pools.keys() - calling)


def test_a_run_that_fails_outside_its_steps_says_why(home, corpus, monkeypatch, capsys):
    """A run that fails before or between its steps (an exception in the executor, a lost worker)
    has no failed step to name: the CLI says the run's own error, and Dagster's line for it stays."""
    from dagster._core.executor.in_process import InProcessExecutor

    def broken(self, plan_context, execution_plan):
        raise RuntimeError("the executor broke down")

    monkeypatch.setattr(InProcessExecutor, "execute", broken)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code != 0, out
    assert "FAILED run " in out and "the executor broke down" in out, out
    assert "build FAILED" in out


def test_a_step_that_raises_is_said_with_its_own_error(home, corpus, monkeypatch):
    """`FAILED <step>: <error>` gives the exception the step raised, not Dagster's wrapper around it
    ("Error occurred while executing op ...") whose cause only `-v` showed."""
    from graphrag_pipeline.defs import graph_assets

    def broken(*args, **kwargs):
        raise ValueError("the resolution verdicts are unreadable: see /some/file.json")

    monkeypatch.setattr(graph_assets, "plan_resolution", broken)
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 1, out
    lines = [x for x in out.splitlines() if "FAILED resolved_graph" in x]
    assert lines, out  # the build's run, and the graph run it tries again
    for line in lines:
        assert line.endswith(
            "FAILED resolved_graph: ValueError: the resolution verdicts are unreadable: see /some/file.json"
        )


def test_a_terminated_run_is_not_retried_by_the_step_retry_policy(tmp_path):
    # found by an exploratory run: terminating a daemon run (in-process executor) raised Dagster's
    # interruption in the step, whose retry policy retried it (paying its LLM calls again), and the
    # run finished SUCCESS
    from graphrag_pipeline.defs.stopping import stoppable

    calls = []

    @dg.asset(retry_policy=dg.RetryPolicy(max_retries=2))
    @stoppable
    def interrupted_step() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise dg.DagsterExecutionInterruptedError()

    with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
        result = dg.materialize([interrupted_step], instance=inst, raise_on_error=False)
    assert not result.success
    assert calls == [1], "the interrupted step ran again"
    failure = result.get_step_failure_events()[0].event_specific_data.user_failure_data
    assert "the run was terminated" in (failure.description or "")


@pytest.mark.parametrize("signals", [1, 2])
def test_a_signal_inside_deferred_takes_effect_when_it_ends_and_a_second_at_once(signals):
    from graphrag_pipeline import interrupts

    class Stopped(Exception):
        pass

    def handler(signo, _frame):
        raise Stopped(signo)

    old = signal.signal(signal.SIGTERM, handler)
    done = []
    try:
        with pytest.raises(Stopped):
            with interrupts.deferred():
                for n in range(1, 3):
                    if n <= signals:
                        os.kill(os.getpid(), signal.SIGTERM)
                        time.sleep(0.05)  # the handler would have run by now
                    done.append(n)
        # one signal: the writes after it went on; a second (insisting) took effect at once
        assert done == ([1, 2] if signals == 1 else [1])
        assert signal.getsignal(signal.SIGTERM) is handler  # the handler installed before is back
    finally:
        signal.signal(signal.SIGTERM, old)


def test_verify_says_when_the_index_is_not_that_of_the_documents(built, home, corpus, monkeypatch):
    # found by an exploratory run: after a build that failed past the documents' runs, every file was
    # whole and `verify` said "all good", while the index was still that of the build before
    from graphrag_pipeline.defs import graph_assets

    def broken(*args, **kwargs):
        raise OSError("no space left on device")

    doc = corpus / "darwin_and_wallace.txt"
    doc.write_text(doc.read_text() + "\nWallace later sailed to the Malay Archipelago with Henry Bates.\n")
    with monkeypatch.context() as m:
        m.setattr(graph_assets, "update_merged_graph", broken)
        code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 1, out
    code, out = cli("verify")
    assert code == 1, out
    assert "1 extracted after the last merge (e.g. darwin_and_wallace.txt)" in out, out
    assert "the last build (finished " in out and ") failed" in out, out
    assert "2 problems" in out, out

    # the merge done, the resolution failed: the documents are merged, the build still failed
    with monkeypatch.context() as m:
        m.setattr(graph_assets, "plan_resolution", broken)
        code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 1, out
    code, out = cli("verify")
    assert code == 1 and "after the last merge" not in out and ") failed" in out and "1 problem;" in out, out

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    code, out = cli("verify")
    assert code == 0 and "all good" in out, out
    # a build that did not finish (stopped, killed) is said too
    record = home / "state" / "last-build.json"
    record.write_text(json.dumps({"started_at": time.time() + 60}))
    code, out = cli("verify")
    assert code == 1 and "did not finish (stopped, or still running)" in out, out
    # found by review: a failed build that had published the index itself (an Elasticsearch sync or
    # a check after it failed) was hidden: the index is newer than the build's start
    from graphrag_pipeline.index.duckdb_writer import read_meta
    from graphrag_pipeline.storage.layout import Paths

    published = read_meta(Paths(home).index_file)["built_at"]
    # a build records when its own runs published the index, before its corpus cache and census
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0 and json.loads(record.read_text()).get("published_at") is None, out  # nothing published
    doc.write_text(doc.read_text() + "\nBates collected beetles near the Amazon.\n")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    published = read_meta(Paths(home).index_file)["built_at"]
    assert code == 0 and json.loads(record.read_text())["published_at"] == published, out
    record.write_text(json.dumps({"started_at": published - 30, "finished_at": published + 5, "ok": False}))
    code, out = cli("verify")
    assert code == 1 and ") failed" in out, out
    # one published after it (by the UI's or the sensors' runs) supersedes it
    record.write_text(json.dumps({"started_at": published - 30, "finished_at": published - 5, "ok": False}))
    code, out = cli("verify")
    assert code == 0 and "all good" in out, out
    # a damaged record is a record of an unknown time, never a crash
    for started, finished in (("NaN", "Infinity"), ("1e300", "-1e300"), ("true", "false"), ('"x"', "1e308")):
        record.write_text(f'{{"started_at": {started}, "finished_at": {finished}, "ok": false}}')
        code, out = cli("verify")
        assert "Traceback" not in out and code in (0, 1), out
    record.write_text(f'{{"started_at": {published - 30}, "finished_at": 1e300, "ok": false}}')
    code, out = cli("verify")
    assert code == 1 and "the last build (finished at an unknown time) failed" in out, out
    # found by review: a whole number too large for a float (JSON reads it as an int) crashed verify
    record.write_text(f'{{"started_at": {published - 30}, "finished_at": 1{"0" * 400}, "ok": false}}')
    code, out = cli("verify")
    assert code == 1 and "the last build (finished at an unknown time) failed" in out, out
    # and a build stopped after its own runs had published the index was hidden by that index: the
    # build records when it published (published_at), and only a later index supersedes it
    record.write_text(json.dumps({"started_at": published - 30, "published_at": published}))
    code, out = cli("verify")
    assert code == 1 and "did not finish (stopped, or still running)" in out, out
    record.write_text(json.dumps({"started_at": published - 30, "published_at": published - 5}))
    code, out = cli("verify")
    assert code == 0 and "all good" in out, out


def test_a_build_stopped_after_its_runs_published_the_index_is_said_by_verify(built, home, corpus, monkeypatch):
    # found by review: published_at was recorded only once every run had returned, so a stop right
    # after the publish (Ctrl-C during the Elasticsearch sync, say) left the record without it, and
    # the new index hid the unfinished build: verify said "all good"
    from graphrag_pipeline import interrupts
    from graphrag_pipeline.index.duckdb_writer import read_meta
    from graphrag_pipeline.storage.layout import Paths

    index = Paths(home).index_file
    before = index.stat().st_mtime_ns
    requested = interrupts.requested

    def stop_once_published():  # as if SIGINT came as soon as the index was replaced
        return signal.SIGINT if index.stat().st_mtime_ns != before else requested()

    doc = corpus / "darwin_and_wallace.txt"
    doc.write_text(doc.read_text() + "\nBates collected beetles near the Amazon.\n")
    with monkeypatch.context() as m:
        m.setattr(interrupts, "requested", stop_once_published)
        code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code != 0 and index.stat().st_mtime_ns != before, out
    record = json.loads((home / "state" / "last-build.json").read_text())
    assert "finished_at" not in record and record["published_at"] == read_meta(index)["built_at"], record
    code, out = cli("verify")
    assert code == 1 and "did not finish (stopped, or still running)" in out, out
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    code, out = cli("verify")
    assert code == 0 and "all good" in out, out


def test_an_index_published_by_another_process_is_not_recorded_as_the_stopped_builds(built, home, corpus, monkeypatch):
    # found by review: on the way out of a stop before its own publish, the build recorded as its own
    # an index that another process (the sensors' runs, the UI) had published meanwhile
    from graphrag_pipeline import interrupts
    from graphrag_pipeline.index import duckdb_writer

    read_meta = duckdb_writer.read_meta
    stopped = []

    def stop_at_once():  # SIGINT before anything is published
        stopped.append(True)
        return signal.SIGINT

    def published_meanwhile(path):  # as if another process published once the build was stopped
        meta = read_meta(path)
        return {**meta, "built_at": time.time() + 1} if stopped and meta else meta

    doc = corpus / "darwin_and_wallace.txt"
    doc.write_text(doc.read_text() + "\nBates collected beetles near the Amazon.\n")
    with monkeypatch.context() as m:
        m.setattr(interrupts, "requested", stop_at_once)
        m.setattr(duckdb_writer, "read_meta", published_meanwhile)
        code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code != 0 and stopped, out
    record = json.loads((home / "state" / "last-build.json").read_text())
    assert "published_at" not in record and "finished_at" not in record, record
    code, out = cli("verify")
    assert code == 1 and "did not finish (stopped, or still running)" in out, out
