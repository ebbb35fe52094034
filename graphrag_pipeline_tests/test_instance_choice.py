"""Which Dagster instance a build uses, and the names GRAPHRAG_KB scopes (no server needed)."""

from __future__ import annotations

import pytest

from graphrag_pipeline.cli import PRIVATE_INSTANCE, prepare_dagster_home, resolve_dagster_home
from graphrag_pipeline.index.es_writer import EsConfig
from graphrag_pipeline.settings import es_index_for, kb_scoped, setting
from graphrag_pipeline.settings_check import check_settings
from graphrag_pipeline.storage.layout import Paths
from graphrag_pipeline_tests.conftest import cli


def test_the_private_instance_is_the_default_and_gets_the_project_yaml(home):
    paths = Paths(home)
    folder, source = prepare_dagster_home(paths)
    assert (folder, source) == (home / "dagster", PRIVATE_INSTANCE)
    assert "telemetry" in (folder / "dagster.yaml").read_text()
    # what this process set itself is not taken for a user's export by the next home
    other = Paths(home.parent / "other")
    assert resolve_dagster_home(other) == (other.dagster_home, PRIVATE_INSTANCE)


def test_an_exported_dagster_home_wins_and_is_never_written(home, tmp_path, monkeypatch):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    monkeypatch.setenv("DAGSTER_HOME", str(folder))
    assert prepare_dagster_home(Paths(home)) == (folder, "DAGSTER_HOME")
    assert prepare_dagster_home(Paths(home)) == (folder, "DAGSTER_HOME")  # still the user's, a second time
    assert (folder / "dagster.yaml").read_text() == "telemetry:\n  enabled: true\n"
    assert not (home / "dagster").exists()
    # the project's own setting wins over DAGSTER_HOME
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    monkeypatch.setenv("GRAPHRAG_DAGSTER_HOME", str(chosen))
    assert prepare_dagster_home(Paths(home)) == (chosen, "GRAPHRAG_DAGSTER_HOME")
    assert not (chosen / "dagster.yaml").exists()


def test_a_missing_instance_folder_is_a_clear_error(home, corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit, match=r"DAGSTER_HOME=.*nowhere is not a folder"):
        cli("build", "--corpus", str(corpus), "--method", "fast")


def test_kb_scopes_names_and_the_default_keeps_the_old_ones(tmp_path):
    assert kb_scoped("documents", {}) == "documents"
    assert kb_scoped("documents", {"GRAPHRAG_KB": "default"}) == "documents"
    assert kb_scoped("communities", {"GRAPHRAG_KB": "legal_2"}) == "communities__legal_2"
    home = str(tmp_path / "h")
    # the alias: unchanged without a name (existing indexes stay), the name's on every machine with one
    assert setting("GRAPHRAG_ES_INDEX", {"GRAPHRAG_HOME": home}) == es_index_for(tmp_path / "h")
    assert setting("GRAPHRAG_ES_INDEX", {"GRAPHRAG_HOME": home, "GRAPHRAG_KB": "legal"}) == "graphrag-legal"
    assert setting("GRAPHRAG_ES_INDEX", {"GRAPHRAG_KB": "legal", "GRAPHRAG_ES_INDEX": "x"}) == "x"


def test_es_config_alias_follows_the_kb(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHRAG_ES_URL", "http://127.0.0.1:9200")
    monkeypatch.delenv("GRAPHRAG_ES_INDEX", raising=False)
    monkeypatch.delenv("GRAPHRAG_KB", raising=False)
    assert EsConfig.from_env(tmp_path / "a").alias == es_index_for(tmp_path / "a")
    monkeypatch.setenv("GRAPHRAG_KB", "legal")
    assert EsConfig.from_env(tmp_path / "a").alias == EsConfig.from_env(tmp_path / "b").alias == "graphrag-legal"


@pytest.mark.parametrize("value", ["Legal", "9lives", "a-b", "x" * 41, "a b"])
def test_bad_kb_names_are_refused_up_front(value):
    problems = check_settings({"GRAPHRAG_KB": value})
    assert len(problems) == 1 and problems[0].startswith("GRAPHRAG_KB=") and "lowercase letters" in problems[0]


def test_a_process_refuses_a_kb_other_than_the_one_it_loaded(home, corpus, monkeypatch, capsys):
    from graphrag_pipeline.defs import partitions  # loaded now (GRAPHRAG_KB unset) if not before

    assert partitions.documents_partitions.name == "documents" and partitions.KEY_PREFIX == []
    monkeypatch.setenv("GRAPHRAG_KB", "another_kb")
    code, out = cli("build", "--corpus", str(corpus), "--method", "fast")
    assert code == 2
    assert "start a new process for another knowledge base" in capsys.readouterr().err
