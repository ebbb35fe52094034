"""A long-lived reader of the DuckDB index (open_index) moves to a newly published file by itself.

A publish renames a whole new file over the old one, so a connection opened before keeps reading
the old inode: open_index's LiveIndex compares the file's identity before a query and reopens."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from graphrag_pipeline.index.live import LiveIndex
from graphrag_pipeline.query import open_index, query
from graphrag_pipeline.storage.layout import Paths
from graphrag_pipeline_tests.conftest import cli
from graphrag_pipeline_tests.serve_support import build_home
from graphrag_pipeline_tests.test_serve import NEW_DOCUMENT

QUESTION = "Who founded the Lantern Society in Oxford?"


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory):
    """The index files of a build of the bundled corpus and of the build after one new document."""
    root = tmp_path_factory.mktemp("live")
    home, corpus = build_home(root)
    old = root / "old.duckdb"
    shutil.copyfile(Paths(home).index_file, old)
    (corpus / "quickfeather.txt").write_text(NEW_DOCUMENT, encoding="utf-8")
    saved = os.environ.get("GRAPHRAG_HOME")
    os.environ["GRAPHRAG_HOME"] = str(home)
    try:
        code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
        assert code == 0, out
    finally:
        if saved is None:
            os.environ.pop("GRAPHRAG_HOME", None)
        else:
            os.environ["GRAPHRAG_HOME"] = saved
    new = root / "new.duckdb"
    shutil.copyfile(Paths(home).index_file, new)
    return old, new


def _publish(source, home) -> None:
    """What the writer does: a whole file renamed over the published one."""
    target = Paths(home).index_file
    tmp = target.with_name(target.name + ".publishing")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _names(result) -> set[str]:
    return {e["name"] for e in result.entities}


@pytest.mark.parametrize("preload", [False, True])
def test_the_same_reader_answers_from_a_newly_published_index(two_versions, tmp_path, preload):
    old, new = two_versions
    home = tmp_path / "home"
    (home / "index").mkdir(parents=True)
    _publish(old, home)
    with open_index(home, backend="duckdb", preload=preload, check_ms=0) as index:
        assert isinstance(index, LiveIndex)
        before = index.meta["index_version"]
        assert "Lantern Society" not in _names(query(index, QUESTION, "local"))
        assert not index.entities_by_keys(["zebulon quickfeather"])

        _publish(new, home)
        result = query(index, QUESTION, "local")
        assert "Lantern Society" in _names(result)
        assert index.entities_by_keys(["zebulon quickfeather"])  # the protocol's calls too
        assert index.meta["index_version"] > before and index.reloads == 1

        # a second reader opened now holds what the first one now serves
        with open_index(home, backend="duckdb", preload=preload) as fresh:
            assert query(fresh, QUESTION, "local").to_dict() == result.to_dict()


def test_the_file_is_looked_at_no_more_often_than_asked(two_versions, tmp_path):
    old, new = two_versions
    home = tmp_path / "home"
    (home / "index").mkdir(parents=True)
    _publish(old, home)
    with open_index(home, backend="duckdb", check_ms=3_600_000) as index:  # once an hour
        _publish(new, home)
        assert not index.entities_by_keys(["zebulon quickfeather"])  # still the version it opened
        assert index.reloads == 0


def test_concurrent_queries_during_swaps_all_succeed_on_one_whole_version(two_versions, tmp_path):
    old, new = two_versions
    home = tmp_path / "home"
    (home / "index").mkdir(parents=True)
    _publish(old, home)
    expected = {}
    for name, version in (("old", old), ("new", new)):
        _publish(version, home)
        with open_index(home, backend="duckdb") as index:
            expected[name] = query(index, QUESTION, "local").to_dict()
    assert expected["old"] != expected["new"]

    with open_index(home, backend="duckdb", check_ms=0) as index:
        stop, errors, seen = threading.Event(), [], []

        def reader():
            while not stop.is_set():
                try:
                    got = query(index, QUESTION, "local").to_dict()
                except Exception as exc:  # noqa: BLE001 - every failure is what the test looks for
                    errors.append(repr(exc))
                    return
                seen.append("new" if got == expected["new"] else "old" if got == expected["old"] else "mixed")

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            for i in range(20):  # publish the two versions in turn while the readers query
                version = "new" if i % 2 else "old"
                _publish(old if version == "old" else new, home)
                done = len(seen)
                # until a query that began after this publish has answered from it
                for _ in range(12_000):  # a bound, not a timing: a reader that never moves on fails the test
                    if errors or (len(seen) > done + 4 and seen[-1] == version):
                        break
                    stop.wait(0.005)
                else:
                    pytest.fail(f"publish {i}: no query answered from version {version!r}")
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        assert not errors, errors[:3]
        assert set(seen) <= {"old", "new"} and "mixed" not in seen  # each query read one whole version
        assert index.reloads >= 10 and {"old", "new"} <= set(seen)
        assert query(index, QUESTION, "local").to_dict() == expected["new"]  # the last one published
