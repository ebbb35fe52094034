"""Reading needs no write access and never needs the cache: `stats`, `query` and the Python query
API on a home nobody may write (checked in real processes that the kernel refuses writes to), with
a damaged cache, with and without an LLM endpoint; and KVCache's read-only mode.

As root, chmod alone does not stop writes, so the commands run in a child process without the
capabilities that let root ignore file permissions (CAP_DAC_OVERRIDE and friends): the home made
read-only with `chmod -R a-w` then really is read-only for it. Not as root, chmod is enough.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from graphrag_pipeline.llm.cache import KVCache, connect_read_only, open_read_only
from graphrag_pipeline.llm.usage import LLMUsage, UsageLedger, read_usage_totals
from graphrag_pipeline_tests.llm_server import ScriptedLLMServer

REPO = Path(__file__).resolve().parents[1]
QUESTION = "Who sailed with Charles Darwin on HMS Beagle?"
_PR_CAPBSET_DROP = 24
_LAST_CAP = 40


def _drop_root_powers() -> None:
    """preexec_fn: as root, drop every capability from the bounding set, so the exec'd program
    runs as a root without CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER...: file permissions
    apply to it like to anyone else."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(_LAST_CAP + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)


def _clean_env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHRAG_", "OPENAI_", "DAGSTER_"))}
    env.update(GRAPHRAG_HOME=str(home), PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


def run_reader(home: Path, args: list[str], **env: str) -> subprocess.CompletedProcess:
    """Run ``python args...`` as a process that cannot write the read-only home."""
    return subprocess.run(
        [sys.executable, *args],
        env=_clean_env(home, **env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_drop_root_powers if os.geteuid() == 0 else None,
    )


def cli_reader(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return run_reader(home, ["-m", "graphrag_pipeline.cli", *args], **env)


def make_read_only(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            p = Path(dirpath, name)
            p.chmod(stat.S_IMODE(p.lstat().st_mode) & ~0o222)
    root.chmod(stat.S_IMODE(root.stat().st_mode) & ~0o222)


def make_writable(root: Path) -> None:
    root.chmod(stat.S_IMODE(root.stat().st_mode) | 0o200)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            p = Path(dirpath, name)
            p.chmod(stat.S_IMODE(p.lstat().st_mode) | 0o200)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file and folder under root: kind, size and modification time."""
    out = {".": ("dir", 0, root.stat().st_mtime_ns)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            p = Path(dirpath, name)
            st = p.lstat()
            out[str(p.relative_to(root))] = (
                "dir" if stat.S_ISDIR(st.st_mode) else "file",
                0 if stat.S_ISDIR(st.st_mode) else st.st_size,
                st.st_mtime_ns,
            )
    return out


@pytest.fixture(scope="module")
def built_home(tmp_path_factory) -> Path:
    """The sample corpus built once (fast) in a separate process; tests copy it."""
    base = tmp_path_factory.mktemp("built")
    home = base / "home"
    corpus = base / "corpus"
    shutil.copytree(REPO / "data" / "corpus", corpus)
    proc = subprocess.run(
        [sys.executable, "-m", "graphrag_pipeline.cli", "build", "--corpus", str(corpus), "--method", "fast"],
        env=_clean_env(home),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # usage the ledger reports: as if LLM steps had run
    UsageLedger(home / "cache" / "cache.sqlite").record("doc_subgraph", LLMUsage(7, 2, 1000, 300))
    UsageLedger(home / "cache" / "cache.sqlite").record("community_reports", LLMUsage(3, 1, 500, 200))
    return home


@pytest.fixture
def ro_home(built_home, tmp_path):
    """A copy of the built home, read-only for the reader processes; writable again afterwards."""
    home = tmp_path / "home"
    shutil.copytree(built_home, home)
    make_read_only(home)
    # the sandbox is real: the reader cannot create or change anything in the home
    probe = run_reader(
        home,
        [
            "-c",
            "import pathlib,sys; h = pathlib.Path(sys.argv[1])\n"
            "for act in (lambda: (h / 'x').write_text('x'), lambda: (h / 'cache' / 'cache.sqlite').open('ab')):\n"
            "    try:\n        act(); print('WROTE')\n    except PermissionError:\n        print('denied')",
            str(home),
        ],
    )
    assert probe.stdout.split() == ["denied", "denied"], probe.stdout + probe.stderr
    yield home
    make_writable(home)


def test_stats_and_query_on_a_read_only_home(ro_home):
    before = snapshot(ro_home)
    proc = cli_reader(ro_home, "stats", "--json")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["documents"] == 7 and stats["entities"] > 0 and stats["community_reports"] > 0
    assert stats["llm"] == {
        "calls": 10,
        "cache_hits": 3,
        "prompt_tokens": 1500,
        "completion_tokens": 500,
        "cost_usd": 0.0,
        "unpriced_calls": 0,
    }
    proc = cli_reader(ro_home, "stats")
    assert proc.returncode == 0 and "unavailable" not in proc.stdout, proc.stderr
    line = "llm: 10 calls (3 from the cache), 1,500 prompt + 500 completion tokens, $0.0000"
    assert line in proc.stdout, proc.stdout

    for mode in ("local", "global", "naive"):
        proc = cli_reader(ro_home, "query", QUESTION, "--mode", mode, "--json")
        assert proc.returncode == 0, proc.stderr
        res = json.loads(proc.stdout)
        assert res["entities"] or res["community_reports"] or res["chunks"]
        assert not proc.stderr.strip(), proc.stderr
    proc = cli_reader(ro_home, "query", QUESTION, "--answer")
    # "Entities": the CLI output format changed (issue 11), it was one "entity ..." line per entity
    assert proc.returncode == 0 and "Entities" in proc.stdout and "no LLM endpoint is set" in proc.stderr
    assert snapshot(ro_home) == before


def test_the_python_query_api_on_a_read_only_home(ro_home):
    before = snapshot(ro_home)
    script = (
        "import json\n"
        "from graphrag_pipeline.query import open_index, query\n"
        "out = {}\n"
        "for preload in (False, True):\n"
        "    with open_index(preload=preload) as index:\n"
        f"        out[str(preload)] = query(index, {QUESTION!r}, mode='local').to_dict()\n"
        "print(json.dumps(out))\n"
    )
    proc = run_reader(ro_home, ["-c", script])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert any("DARWIN" in e["name"].upper() for e in out["False"]["entities"])
    assert out["False"]["entities"] == out["True"]["entities"]
    assert snapshot(ro_home) == before


def test_a_damaged_cache_never_fails_reads(ro_home):
    cache_db = ro_home / "cache" / "cache.sqlite"
    make_writable(ro_home)
    for side in cache_db.parent.glob("cache.sqlite-*"):
        side.unlink()
    cache_db.write_bytes(os.urandom(3000))
    make_read_only(ro_home)
    before = snapshot(ro_home)

    proc = cli_reader(ro_home, "stats", "--json")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["documents"] == 7
    assert stats["llm"].startswith("unavailable (") and "not a database" in stats["llm"], stats["llm"]
    proc = cli_reader(ro_home, "stats")
    assert proc.returncode == 0 and "llm: unavailable (" in proc.stdout, proc.stdout

    # no endpoint configured: the cache is not even looked at
    proc = cli_reader(ro_home, "query", QUESTION, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["entities"], proc.stderr
    assert not proc.stderr.strip(), proc.stderr

    # an endpoint configured: no cache, one warning line, the question is still answered
    with ScriptedLLMServer() as server:
        proc = cli_reader(
            ro_home,
            "query",
            QUESTION,
            "--json",
            "--answer",
            OPENAI_BASE_URL=server.base_url,
            OPENAI_API_KEY="test-key",
            GRAPHRAG_LLM_MODEL="m",
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["answer"] == "OK"
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("warning:") and "cache" in lines[0], proc.stderr
        assert server.chat_count == 2  # the query rewrite and the answer
    assert snapshot(ro_home) == before


def test_query_answers_from_the_cache_read_only(built_home, tmp_path, monkeypatch):
    """Answers a writable client cached are served to a reader of the read-only home: no request."""
    from graphrag_pipeline.llm.client import LLMClient
    from graphrag_pipeline.query import open_index, query

    home = tmp_path / "home"
    shutil.copytree(built_home, home)
    with ScriptedLLMServer() as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test-key", "GRAPHRAG_LLM_MODEL": "m"}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        writer = LLMClient.from_env(cache=KVCache(home / "cache" / "cache.sqlite", "llm"))
        with open_index(home) as index:
            expected = query(index, QUESTION, "local", client=writer, answer=True).to_dict()
        writer.close()
        asked = server.chat_count
        assert asked == 2
        make_read_only(home)
        try:
            before = snapshot(home)
            # --mode local as `expected` (the default mode is now mix, issue 11)
            proc = cli_reader(home, "query", QUESTION, "--mode", "local", "--json", "--answer", **env)
            assert proc.returncode == 0, proc.stderr
            assert json.loads(proc.stdout) == json.loads(json.dumps(expected))
            assert server.chat_count == asked  # all from the cache
            assert not proc.stderr.strip(), proc.stderr
            assert snapshot(home) == before
        finally:
            make_writable(home)


# -- KVCache and the ledger, read-only -----------------------------------------------------------------


def test_read_only_kvcache_never_writes(tmp_path):
    path = tmp_path / "c.sqlite"
    with pytest.raises(FileNotFoundError):
        KVCache(path, "llm", read_only=True)
    assert not path.exists() and open_read_only(path, "llm") == (None, None)
    writer = KVCache(path, "llm")
    writer.put("k", {"v": 1})
    tables = lambda: sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall()  # noqa: E731
    before = tables()
    ro = KVCache(path, "llm", read_only=True)
    assert ro.get("k") == {"v": 1} and ro.get_many(["k", "x"]) == {"k": {"v": 1}}
    ro.put("k2", 2)  # dropped
    assert ro.get("k2") is None and len(ro) == 1
    other = KVCache(path, "extraction", read_only=True)  # no such table: nothing found, nothing created
    assert other.get("k") is None and other.get_many(["k"]) == {} and len(other) == 0
    assert tables() == before
    assert read_usage_totals(path) == LLMUsage()  # no ledger table yet: zeros
    assert tables() == before

    writer._con().close()  # as after the build that wrote it: no write-ahead log left
    for side in tmp_path.glob("c.sqlite-*"):
        side.unlink()
    path.write_bytes(b"garbage " * 500)
    cache, problem = open_read_only(path, "llm")
    assert cache is None and "not a database" in problem
    with pytest.raises(sqlite3.DatabaseError):
        read_usage_totals(path)
    assert read_usage_totals(tmp_path / "missing.sqlite") == LLMUsage()
    assert not (tmp_path / "missing.sqlite").exists()


def test_read_only_open_of_a_wal_database_in_a_read_only_folder(tmp_path):
    """A WAL database closed cleanly has no -shm file and SQLite's read-only mode wants to create
    one; in a folder nobody may write the cache is still read (immutable), and nothing appears."""
    folder = tmp_path / "cache"
    path = folder / "cache.sqlite"
    cache = KVCache(path, "llm")
    cache.put("k", "value")
    UsageLedger(path).record("s", LLMUsage(2, 1, 30, 4))
    cache._con().close()
    cache._local.con = None
    assert sorted(p.name for p in folder.iterdir()) == ["cache.sqlite"]
    make_read_only(folder)
    try:
        before = snapshot(folder)
        script = (
            "import sys\nfrom graphrag_pipeline.llm.cache import KVCache\n"
            "from graphrag_pipeline.llm.usage import read_usage_totals\n"
            "c = KVCache(sys.argv[1], 'llm', read_only=True)\n"
            "print(c.get('k'), c.get('nope'), KVCache(sys.argv[1], 'other', read_only=True).get('k'),"
            " read_usage_totals(sys.argv[1]).calls)\n"
        )
        proc = run_reader(tmp_path, ["-c", script, str(path)])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["value", "None", "None", "2"]
        assert snapshot(folder) == before
    finally:
        make_writable(folder)


def test_connect_read_only_sees_committed_wal_data(tmp_path):
    path = tmp_path / "c.sqlite"
    writer = KVCache(path, "llm")
    writer.put("a", 1)  # still in the write-ahead log: the writer's connection stays open
    con = connect_read_only(path)
    assert con.execute("SELECT count(*) FROM llm").fetchone() == (1,)
    with pytest.raises(sqlite3.OperationalError):
        con.execute("INSERT INTO llm VALUES ('b', '2')")
    con.close()
