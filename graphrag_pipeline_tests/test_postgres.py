"""Dagster's production instance: builds against a real PostgreSQL (started by the suite, see
pg_server.py) through examples/dagster-postgres.yaml, and two knowledge bases sharing it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg

from graphrag_pipeline_tests.conftest import REPO, cli, cli_json

EXAMPLE = REPO / "examples" / "dagster-postgres.yaml"


def _instance_dir(tmp_path: Path, pg_server, monkeypatch) -> Path:
    """A Dagster instance folder with the example dagster.yaml, on a new database of the server."""
    db = pg_server.create_database(f"kb_{uuid.uuid4().hex[:10]}")
    for name, value in pg_server.env(db).items():
        monkeypatch.setenv(name, value)
    folder = tmp_path / "instance"
    folder.mkdir()
    shutil.copyfile(EXAMPLE, folder / "dagster.yaml")
    return folder


def test_build_and_edit_on_a_postgres_instance(home, corpus, tmp_path, pg_server, monkeypatch):
    folder = _instance_dir(tmp_path, pg_server, monkeypatch)
    monkeypatch.setenv("DAGSTER_HOME", str(folder))  # exported, as for the daemon and the UI
    yaml_before = (folder / "dagster.yaml").read_bytes()

    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert f"Dagster instance {folder} (from DAGSTER_HOME; Postgres storage); knowledge base default" in out
    # the caches and the ledger go to the instance's database, not to the home's SQLite file
    assert f"caches and LLM ledger: postgresql://{pg_server.user}@{pg_server.host}:{pg_server.port}/kb_" in out
    assert not (home / "cache" / "cache.sqlite").exists()
    assert "GRAPHRAG_KB is not set" in out  # a shared instance with unscoped names is pointed out
    assert pg_server.password not in out
    assert (folder / "dagster.yaml").read_bytes() == yaml_before  # the user's instance is never rewritten
    assert not (home / "dagster").exists()  # no private instance beside it

    instance = dg.DagsterInstance.get()
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    keys = sorted(p.name for p in corpus.iterdir())
    assert sorted(instance.get_dynamic_partitions("documents")) == keys
    assert instance.get_dynamic_partitions("communities")
    assert {r.job_name for r in instance.get_runs()} == {"corpus_job", "publish_job"}
    stats = cli_json("stats", "--json")
    assert stats["documents"] == len(keys)

    doc = corpus / "curie_radioactivity.md"
    doc.write_text(
        doc.read_text(encoding="utf-8") + "\n\nIn 1921 Marie Curie toured the United States, where President "
        "Warren Harding presented her with a gram of radium.\n",
        encoding="utf-8",
    )
    (corpus / "new_note.txt").write_text("Lise Meitner worked with Otto Hahn in Berlin on nuclear fission.\n")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0, out
    assert "1 new, 0 removed, 2 to process" in out, out
    instance = dg.DagsterInstance.get()
    assert "new_note.txt" in instance.get_dynamic_partitions("documents")
    written = [r.partition_key for r in instance.fetch_materializations(dg.AssetKey("chunks"), limit=100).records]
    assert sorted(k for k in set(written) if written.count(k) > 1) == ["curie_radioactivity.md"]  # only the edit
    assert written.count("new_note.txt") == 1 and len(written) == len(keys) + 2
    result = cli_json("query", "Who presented Marie Curie with a gram of radium?", "--mode", "naive", "--json")
    assert result["chunks"][0]["doc"] == "curie_radioactivity.md"
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 0 and "everything is up to date" in out


def _cli_process(env: dict, *args: str) -> str:
    """The CLI in its own process: the knowledge base is read when the definitions load, once a process."""
    exe = Path(sys.executable).with_name("graphrag-pipeline")
    done = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_two_knowledge_bases_on_one_instance_keep_their_partitions_apart(tmp_path, corpus, pg_server, monkeypatch):
    folder = _instance_dir(tmp_path, pg_server, monkeypatch)
    small = tmp_path / "small"
    small.mkdir()
    shutil.copyfile(corpus / "darwin_and_wallace.txt", small / "darwin_and_wallace.txt")
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GRAPHRAG_HOME", "GRAPHRAG_CORPUS", "GRAPHRAG_KB", "DAGSTER_HOME", "GRAPHRAG_DAGSTER_HOME")
    }
    base["GRAPHRAG_DAGSTER_HOME"] = str(folder)  # the project's own setting chooses the instance
    first = {**base, "GRAPHRAG_HOME": str(tmp_path / "home-a")}  # the default knowledge base: unscoped names
    second = {**base, "GRAPHRAG_HOME": str(tmp_path / "home-b"), "GRAPHRAG_KB": "small_kb"}
    keys = sorted(p.name for p in corpus.iterdir())

    out = _cli_process(first, "build", "--corpus", str(corpus), "--method", "fast")
    assert f"{len(keys)} new, 0 removed" in out
    out = _cli_process(second, "build", "--corpus", str(small), "--method", "fast")
    assert "knowledge base small_kb" in out
    assert "1 new, 0 removed, 1 to process" in out  # the first home's documents are not its to remove

    monkeypatch.setenv("DAGSTER_HOME", str(folder))
    instance = dg.DagsterInstance.get()
    assert sorted(instance.get_dynamic_partitions("documents")) == keys
    assert instance.get_dynamic_partitions("documents__small_kb") == ["darwin_and_wallace.txt"]
    first_reports = set(instance.get_dynamic_partitions("communities"))
    second_reports = set(instance.get_dynamic_partitions("communities__small_kb"))
    assert first_reports and second_reports
    # materializations are apart too: the second home's assets carry its prefix
    small_chunks = instance.get_materialized_partitions(dg.AssetKey(["small_kb", "chunks"]))
    assert small_chunks == {"darwin_and_wallace.txt"}
    assert instance.get_materialized_partitions(dg.AssetKey("chunks")) == set(keys)
    assert instance.get_materialized_partitions(dg.AssetKey(["small_kb", "community_reports"])) == second_reports

    # each home still sees only its own knowledge base: nothing to do for either
    assert "everything is up to date" in _cli_process(first, "build", "--corpus", str(corpus), "--method", "fast")
    assert "everything is up to date" in _cli_process(second, "build", "--corpus", str(small), "--method", "fast")
    assert sorted(instance.get_dynamic_partitions("documents")) == keys
    first_stats = _cli_process(first, "stats", "--json")
    assert f'"documents": {len(keys)}' in first_stats
    assert '"documents": 1' in _cli_process(second, "stats", "--json")
