"""Tests for graphrag_pipeline.llm.cache (KVCache) and graphrag_pipeline.storage.files (atomic writes)."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import traceback
from pathlib import Path

import polars as pl
import pytest

from graphrag_pipeline.llm.cache import KVCache
from graphrag_pipeline.storage.files import atomic_path, read_json, read_parquet, write_json, write_parquet

# ---------------------------------------------------------------------------------------------
# KVCache
# ---------------------------------------------------------------------------------------------


def test_get_put_round_trip_with_unicode(tmp_path):
    cache = KVCache(tmp_path / "sub" / "cache.sqlite")
    value = {"text": "郑和下西洋 😀 é", "list": [1, 2.5, None, True], "nested": {"键": "值"}}
    assert cache.get("郑和") is None
    cache.put("郑和", value)
    assert cache.get("郑和") == value
    cache.put("郑和", "replaced")
    assert cache.get("郑和") == "replaced"
    assert len(cache) == 1
    # persisted: a new instance (new connection) sees it
    assert KVCache(tmp_path / "sub" / "cache.sqlite").get("郑和") == "replaced"


def test_get_many(tmp_path):
    cache = KVCache(tmp_path / "c.sqlite", table="extraction")
    items = {f"key-{i}-ü": {"i": i} for i in range(1200)}  # more than one 500-key batch
    cache.put_many(items)
    keys = list(items) + ["missing", "key-3-ü"]  # a duplicate and a missing key
    got = cache.get_many(keys)
    assert got == items
    assert cache.get_many([]) == {}
    assert len(cache) == 1200


def test_tables_are_separate(tmp_path):
    a = KVCache(tmp_path / "c.sqlite", table="a")
    b = KVCache(tmp_path / "c.sqlite", table="b")
    a.put("k", 1)
    assert b.get("k") is None and a.get("k") == 1


def test_invalid_table_name(tmp_path):
    with pytest.raises(ValueError):
        KVCache(tmp_path / "c.sqlite", table="x; DROP TABLE y")


def test_failed_put_many_writes_nothing(tmp_path):
    cache = KVCache(tmp_path / "c.sqlite")
    with pytest.raises(TypeError):
        cache.put_many({"good": 1, "bad": object()})  # not JSON serialisable
    assert cache.get("good") is None and len(cache) == 0
    cache.put("after", 2)  # the connection is still usable
    assert cache.get("after") == 2


def _writer(path: str, n: int, worker: int, barrier, errors) -> None:
    try:
        barrier.wait(timeout=60)  # open the (new) database at the same moment
        cache = KVCache(Path(path), timeout_s=60)
        for start in range(0, n, 3):
            cache.put_many(
                {f"w{worker}-{i}": {"worker": worker, "i": i, "s": "写入"} for i in range(start, min(start + 3, n))}
            )
            if start % 30 == 0:  # readers in the mix too
                cache.get(f"w{(worker + 1) % 4}-{start}")
                len(cache)
    except BaseException:
        errors.put(traceback.format_exc())
        barrier.abort()  # do not leave the other workers waiting


def _run_workers(target, args) -> None:
    # fork is fast; the workers open their own caches, so no SQLite state is inherited
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    barrier, errors = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, w, barrier, errors)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    failures.sort(key=lambda f: "BrokenBarrierError" in f)  # the root cause first
    assert not failures, failures[0]
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "concurrent.sqlite"
    _run_workers(_writer, (str(path), 300))
    cache = KVCache(path)
    assert len(cache) == 1200
    got = cache.get_many([f"w{w}-{i}" for w in range(4) for i in range(300)])
    assert len(got) == 1200
    assert all(v == {"worker": int(k[1]), "i": int(k.split("-")[1]), "s": "写入"} for k, v in got.items())


# ---------------------------------------------------------------------------------------------
# storage
# ---------------------------------------------------------------------------------------------


def test_atomic_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "out" / "data.json"
    write_json({"b": 1, "a": "中文"}, target)
    assert read_json(target) == {"a": "中文", "b": 1}
    write_json({"v": 2}, target)  # replacing an existing file
    assert read_json(target) == {"v": 2}
    df = pl.DataFrame({"x": [1, 2], "y": ["a", "b"]})
    write_parquet(df, tmp_path / "out" / "t.parquet")
    assert read_parquet(tmp_path / "out" / "t.parquet").equals(df)
    assert sorted(os.listdir(tmp_path / "out")) == ["data.json", "t.parquet"]


def test_atomic_path_keeps_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "data.json"
    write_json({"version": 1}, target)
    with pytest.raises(RuntimeError):
        with atomic_path(target, ".json") as tmp:
            tmp.write_text("{half a fi", encoding="utf-8")
            assert tmp.parent == target.parent and tmp != target
            raise RuntimeError("writer crashed")
    assert read_json(target) == {"version": 1}
    assert os.listdir(tmp_path) == ["data.json"]


def test_atomic_path_failure_without_previous_file_leaves_nothing(tmp_path):
    target = tmp_path / "new.parquet"
    with pytest.raises(ValueError):
        with atomic_path(target, ".parquet") as tmp:
            tmp.write_bytes(b"partial")
            raise ValueError("boom")
    assert os.listdir(tmp_path) == []


def test_atomic_path_yields_a_path_that_does_not_exist_yet(tmp_path):
    with atomic_path(tmp_path / "db.duckdb", ".duckdb") as tmp:
        assert not tmp.exists()  # DuckDB refuses to open an existing empty file
        tmp.write_bytes(b"db")
    assert (tmp_path / "db.duckdb").read_bytes() == b"db"
    assert os.listdir(tmp_path) == ["db.duckdb"]


def test_a_replaced_file_is_freed_in_the_background_only_inside_a_build(tmp_path, monkeypatch):
    """free_old_later: inside freeing_replaced_files_later the replaced file gets a temporary name
    (removed by a thread; all such removals are waited for on leaving); outside, or on a failed
    rename, nothing of the kind is left; a leftover of a killed process is a temporary file."""
    from graphrag_pipeline.storage import files

    target = tmp_path / "index.duckdb"
    target.write_bytes(b"v1")
    reader = open(target, "rb")  # a reader of the old version keeps reading it
    started, looked = [], threading.Event()
    real_thread = files.threading.Thread

    def held(*args, target, **kwargs):  # the removal waits until the test has looked
        thread = real_thread(*args, target=lambda *a: (looked.wait(5), target(*a)), **kwargs)
        started.append(thread)
        return thread

    with files.freeing_replaced_files_later():
        monkeypatch.setattr(files.threading, "Thread", held)
        with atomic_path(target, ".duckdb", free_old_later=True) as tmp:
            tmp.write_bytes(b"v2")
        monkeypatch.undo()
        assert target.read_bytes() == b"v2" and reader.read() == b"v1"
        (old,) = [n for n in os.listdir(tmp_path) if n != "index.duckdb"]
        assert files.is_temp_file_name(old) and (tmp_path / old).read_bytes() == b"v1"
        assert len(started) == 1
        looked.set()
    reader.close()
    assert os.listdir(tmp_path) == ["index.duckdb"]  # the removal was waited for
    # outside a build: replaced at once, no thread
    with atomic_path(target, ".duckdb", free_old_later=True) as tmp:
        tmp.write_bytes(b"v3")
    assert os.listdir(tmp_path) == ["index.duckdb"] and len(started) == 1
    # the rename fails: the second name is taken back, the published file stays
    real_replace = files.os.replace

    def refused(src, dst):
        raise OSError(13, "Permission denied")

    with files.freeing_replaced_files_later():
        monkeypatch.setattr(files.os, "replace", refused)
        with pytest.raises(OSError):
            with atomic_path(target, ".duckdb", free_old_later=True) as tmp:
                tmp.write_bytes(b"v4")
        monkeypatch.setattr(files.os, "replace", real_replace)
    assert os.listdir(tmp_path) == ["index.duckdb"] and target.read_bytes() == b"v3"
    # what a killed process would leave is an atomic_path temporary file
    leftover = files._keep_old(target)
    assert files.is_temp_file_name(os.path.basename(leftover))
    assert [p.name for p in files.clean_temp_files(tmp_path)] == [os.path.basename(leftover)]
    assert os.listdir(tmp_path) == ["index.duckdb"]


def test_readers_of_missing_files(tmp_path):
    assert read_json(tmp_path / "missing.json") is None
    assert read_json(tmp_path / "missing.json", default={"d": 1}) == {"d": 1}
    empty = read_parquet(tmp_path / "missing.parquet", {"a": pl.Utf8, "n": pl.Int64})
    assert empty.height == 0 and empty.schema == pl.Schema({"a": pl.Utf8, "n": pl.Int64})
    assert read_parquet(tmp_path / "missing.parquet").shape == (0, 0)


def _opener(folder: str, rounds: int, worker: int, barrier, errors) -> None:
    try:
        for r in range(rounds):
            barrier.wait(timeout=60)  # all four open the same new file at once
            cache = KVCache(Path(folder) / f"{r}.sqlite", timeout_s=60)
            for i in range(3):
                cache.put(f"w{worker}-{i}", i)
                cache.get(f"w{(worker + 1) % 4}-{i}")
                len(cache)
    except BaseException:
        errors.put(traceback.format_exc())
        barrier.abort()  # do not leave the other workers waiting


def test_processes_opening_a_new_cache_together_do_not_fail(tmp_path):
    # switching a new database to WAL used to fail with "database is locked" in this race
    _run_workers(_opener, (str(tmp_path), 60))
    for r in range(60):
        assert len(KVCache(tmp_path / f"{r}.sqlite")) == 12
