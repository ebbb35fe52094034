"""Storage under parallel processes: two document runs and a graph run at once (multiprocess
executor, separate `dagster` processes), and readers of the index while it is republished."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import duckdb

from graphrag_pipeline.ingest.corpus_sync import range_tags
from graphrag_pipeline.llm.cache import KVCache
from graphrag_pipeline_tests.conftest import cli


def _dagster(env: dict, *args: str) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("dagster")
    return subprocess.Popen(
        [str(exe), "job", "execute", "-m", "graphrag_pipeline.definitions", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_parallel_runs_lose_nothing_and_never_lock(home, corpus, instance):
    for i in range(20):
        (corpus / f"extra_{i:02d}.txt").write_text(
            f"Report {i}: Charles Babbage met Ada Lovelace in London.\n\nThe Royal Society of London discussed "
            f"item {i} "
            f"with Michael Faraday and John Herschel.",
            encoding="utf-8",
        )
    inst = instance()  # the instance under this GRAPHRAG_HOME, prepared as a build does
    from graphrag_pipeline.ingest.documents import scan_corpus

    keys = [f.key for f in scan_corpus(corpus)]
    inst.add_dynamic_partitions("documents", keys)
    env = {**os.environ, "GRAPHRAG_METHOD": "fast", "DAGSTER_HOME": str(home / "dagster")}
    half = len(keys) // 2
    procs = [
        _dagster(env, "-j", "documents_job", "--tags", json.dumps(range_tags(keys[:half]))),
        _dagster(env, "-j", "documents_job", "--tags", json.dumps(range_tags(keys[half:]))),
        _dagster(env, "-j", "graph_job"),  # a run reading partial state beside the backfill
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for p, text in zip(procs, outputs):
        assert p.returncode == 0, text[-3000:]
        assert "database is locked" not in text and "Could not set lock" not in text
    for key in keys:
        assert (home / "tables" / "chunks" / f"{key}.parquet").exists(), key
        assert (home / "tables" / "doc_subgraph" / f"{key}.entities.parquet").exists(), key
    cache = KVCache(home / "cache" / "cache.sqlite", "extraction")
    info = [json.loads((home / "tables" / "chunks" / f"{k}.json").read_text()) for k in keys]
    assert len(cache) >= sum(i["chunks"] for i in info) - 2  # identical chunks share a cache entry
    assert not list((home / "tables").rglob(".*.tmp"))

    # the CLI then brings everything up to date from that state
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert "0 to process" in out


def test_readers_never_see_a_half_written_index(home, corpus):
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    index = home / "index" / "search_index.duckdb"
    errors: list[str] = []
    reads = 0
    stop = threading.Event()

    def reader():
        nonlocal reads
        while not stop.is_set():
            try:
                con = duckdb.connect(str(index), read_only=True)
                n = con.execute("SELECT count(*) FROM entities").fetchone()[0]
                con.execute("SELECT count(*) FROM community_reports").fetchone()
                con.close()
                assert n > 0
                reads += 1
            except Exception as exc:  # noqa: BLE001 - any failure is what we look for
                errors.append(repr(exc))

    t = threading.Thread(target=reader)
    t.start()
    try:
        env = {**os.environ, "GRAPHRAG_METHOD": "fast", "DAGSTER_HOME": str(home / "dagster")}
        for _ in range(2):
            p = _dagster(env, "-j", "index_job")
            text = p.communicate(timeout=600)[0]
            assert p.returncode == 0, text[-3000:]
    finally:
        stop.set()
        t.join()
    assert not errors, errors[:3]
    assert reads > 5
