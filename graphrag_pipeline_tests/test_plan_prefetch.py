"""The corpus survey a build starts in a second process (ingest.plan_prefetch) is the one the build
would make itself, and the build falls back to its own whenever the second one cannot be used."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphrag_pipeline_tests.conftest import cli


def _survey_both(corpus: Path, home: Path, method: str = "fast"):
    from graphrag_pipeline.ingest.plan_prefetch import Prefetch, survey_home

    child = Prefetch(corpus, home, method, True)
    here = survey_home(corpus, home, method, True)
    return here, child.take(corpus, home, method, True)


def _same(a, b) -> None:
    assert b is not None, "the second process gave no survey"
    assert a.plan.stale == b.plan.stale
    assert a.plan.errors == b.plan.errors
    assert a.plan.cache == b.plan.cache
    assert dict(a.plan.files) == dict(b.plan.files)
    assert list(a.plan.files) == list(b.plan.files)  # the order the partitions are added in
    assert dict(a.plan.states) == dict(b.plan.states)
    assert (a.cache_changed, a.fresh) == (b.cache_changed, b.fresh)


def test_the_second_process_surveys_what_the_build_would(home, corpus):
    from graphrag_pipeline.ingest.corpus_sync import remember_output_stats
    from graphrag_pipeline.storage.layout import Paths
    from graphrag_pipeline.storage.store import DOC_STATS, Store, sharing_doc_stats

    here, there = _survey_both(corpus, home)  # nothing built: every document is to process
    _same(here, there)
    assert len(there.plan.stale) == len(there.plan.files) > 3

    code, out = cli("build", "--method", "fast")
    assert code == 0, out
    docs = sorted(p for p in corpus.rglob("*") if p.is_file())
    edited, removed = docs[0], docs[1]
    edited.write_text(edited.read_text(encoding="utf-8") + "\n\nA paragraph added by the test.\n", encoding="utf-8")
    removed.unlink()
    (corpus / "added-by-the-test.txt").write_text("Ada Lovelace met Charles Babbage in London.\n", encoding="utf-8")
    (corpus / "unreadable.txt").write_text("x", encoding="utf-8")
    os.chmod(corpus / "unreadable.txt", 0)
    store = Store(Paths(home))
    key = next(k for k in there.plan.files if there.plan.files[k].relpath == docs[2].relative_to(corpus).as_posix())
    damaged = store.paths.doc_dir("chunks") / f"{key}.parquet"
    with open(damaged, "r+b") as f:  # damaged in place: the plan must find it
        f.seek(8)
        f.write(b"\0" * 16)

    here, there = _survey_both(corpus, home)
    _same(here, there)
    stale = {there.plan.files[k].relpath for k in there.plan.stale}
    assert {edited.name, "added-by-the-test.txt", docs[2].name} <= {Path(s).name for s in stale}
    assert there.cache_changed and there.fresh >= 3
    if os.geteuid() != 0:  # (root reads any file)
        assert any("unreadable.txt" in e for e in there.plan.errors.values())

    # the stats it took are given to the merge as this process's own would be (tables, not info files)
    with sharing_doc_stats():
        DOC_STATS.alone = lambda: True
        remember_output_stats(store, there.plan.cache, "fast")
        other = next(k for k in there.plan.cache if k not in there.plan.stale)
        for path in (
            store.paths.doc_dir("doc_subgraph") / f"{other}.entities.parquet",
            store.paths.doc_dir("chunks") / f"{other}.parquet",
        ):
            st = path.stat()
            assert DOC_STATS.known[os.fspath(path)] == f"{st.st_size}:{st.st_mtime_ns}"
        assert os.fspath(store.paths.doc_dir("chunks") / f"{other}.json") not in DOC_STATS.known


def test_a_survey_asked_for_something_else_or_failed_is_not_used(home, corpus, tmp_path, monkeypatch):
    import signal

    from graphrag_pipeline import interrupts
    from graphrag_pipeline.ingest import plan_prefetch
    from graphrag_pipeline.ingest.plan_prefetch import Prefetch

    def used(child: Prefetch, *asked) -> object:
        proc = child.proc
        assert proc is not None
        found = child.take(*asked)
        assert proc.returncode is not None and child.proc is None  # stopped and reaped, whatever the outcome
        return found

    assert used(Prefetch(corpus, home, "fast", True), corpus, home, "light", True) is None  # another method chosen
    assert used(Prefetch(corpus, home, "fast", True), corpus, home, "fast", False) is None  # no plan cache
    missing = tmp_path / "no-such-corpus"
    assert used(Prefetch(missing, home, "fast", True), missing, home, "fast", True) is None  # failed in the child
    child = Prefetch(corpus, home, "fast", True)
    child.close()  # a build that stopped early
    assert child.take(corpus, home, "fast", True) is None
    # file names decoded otherwise than here give other keys: not used
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_prefetch.sys, "getfilesystemencodeerrors", lambda: "strict")
        assert used(Prefetch(corpus, home, "fast", True), corpus, home, "fast", True) is None

    # a stop signal while the build waits goes on to the build, with the child stopped
    child = Prefetch(corpus, home, "fast", True)
    proc = child.proc

    class Stopped:
        def read(self):
            raise interrupts.Stop(signal.SIGINT)

        def close(self):
            pass

    real_stdout, proc.stdout = proc.stdout, Stopped()
    try:
        child.take(corpus, home, "fast", True)
    except interrupts.Stop:
        pass
    else:
        raise AssertionError("the stop was swallowed")
    finally:
        real_stdout.close()
    assert proc.returncode is not None


def test_the_second_process_does_not_import_from_the_current_folder(home, corpus, tmp_path, monkeypatch):
    from graphrag_pipeline.ingest.plan_prefetch import Prefetch

    here = tmp_path / "cwd"
    here.mkdir()
    marker = tmp_path / "imported"
    (here / "pickle.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n", encoding="utf-8")
    monkeypatch.chdir(here)
    found = Prefetch(corpus, home, "fast", True).take(corpus, home, "fast", True)
    assert found is not None and not marker.exists()


def test_a_build_takes_the_second_process_survey(home, corpus, monkeypatch):
    from graphrag_pipeline.ingest import plan_prefetch

    code, out = cli("build", "--method", "fast")
    assert code == 0, out
    taken = []
    real = plan_prefetch.Prefetch.take

    def take(self, *args):
        found = real(self, *args)
        taken.append(found)
        order.append("take")
        return found

    from graphrag_pipeline import cli as cli_module

    order, settings_check = [], cli_module._downstream_settings_changed

    def check(*args):
        order.append("settings")
        return settings_check(*args)

    monkeypatch.setattr(plan_prefetch, "PREFETCH_MIN_CACHE_BYTES", 0)
    monkeypatch.setattr(plan_prefetch.Prefetch, "take", take)
    monkeypatch.setattr(cli_module, "_downstream_settings_changed", check)
    doc = sorted(p for p in corpus.rglob("*") if p.is_file())[0]
    doc.write_text(doc.read_text(encoding="utf-8") + "\n\nGrace Hopper visited Paris.\n", encoding="utf-8")
    leftover = home / "tables" / "chunks" / ".some.json.a1b2c3d4.tmp"  # an interrupted write's
    leftover.write_text("{", encoding="utf-8")
    code, out = cli("build")
    assert code == 0, out
    assert len(taken) == 1 and taken[0] is not None
    assert order == ["settings", "take"]  # the instance's settings checked while the survey finishes, once
    assert taken[0].temps == [(str(leftover), False)]  # listed by the second process, removed by the build
    assert f"removed a temporary file left by an interrupted build: {leftover}" in out
    assert not leftover.exists()
    assert "0 new, 0 removed, 1 to process" in out
    code, out = cli("build")
    assert code == 0, out
    assert len(taken) == 2 and taken[1] is not None
    assert "everything is up to date" in out
    code, out = cli("verify")
    assert code == 0, out

    # a survey that cannot be used: the build cleans and surveys itself
    monkeypatch.setattr(plan_prefetch.Prefetch, "take", lambda self, *a: self.close())
    leftover.write_text("{", encoding="utf-8")
    code, out = cli("build")
    assert code == 0 and "everything is up to date" in out, out
    assert f"removed a temporary file left by an interrupted build: {leftover}" in out and not leftover.exists()
    # a build that ends before it takes the survey still removes them
    leftover.write_text("{", encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("graphrag_pipeline.defs.partitions.loaded_for_current_kb", lambda: "a problem of the test")
        code, out = cli("build")
    assert code == 2 and not leftover.exists(), out
    monkeypatch.setattr(plan_prefetch.Prefetch, "take", take)

    # a home below the size: the build surveys itself
    monkeypatch.setattr(plan_prefetch, "PREFETCH_MIN_CACHE_BYTES", 10**12)
    code, out = cli("build")
    assert code == 0 and "everything is up to date" in out, out
    assert len(taken) == 2


def test_the_second_process_imports_neither_dagster_nor_the_graph_algorithms(home, corpus):
    """What the survey's process imports is what it needs to stat and hash files: not Dagster, nor
    scipy and the Leiden core, which the build's stages import (0.15 s of the second process's start,
    on the path of an update at 50,000 documents, where the build waits for the survey)."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from graphrag_pipeline.ingest.plan_prefetch import child, survey_home\n"
        "found = survey_home(Path(sys.argv[1]), Path(sys.argv[2]), 'fast', True)\n"
        "assert len(found.plan.stale) > 3, found.plan.stale\n"
        "print(sorted(m for m in ('dagster', 'scipy', 'graspologic_native', 'networkx') if m in sys.modules))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(corpus), str(home)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
