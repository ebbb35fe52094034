"""check_settings: one clear line per invalid variable, nothing for unset, empty or valid ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from graphrag_pipeline.settings_check import check_settings

REPO = Path(__file__).resolve().parents[1]


def only(env: dict, **kw) -> str:
    problems = check_settings(env, **kw)
    assert len(problems) == 1, problems
    assert "\n" not in problems[0]
    return problems[0]


def test_nothing_set_or_everything_empty_is_fine():
    assert check_settings({}) == []
    names = [
        "GRAPHRAG_METHOD",
        "GRAPHRAG_CHUNK_TOKENS",
        "GRAPHRAG_CHUNK_OVERLAP",
        "GRAPHRAG_MAX_DOCUMENT_BYTES",
        "GRAPHRAG_MAX_CLUSTER_SIZE",
        "GRAPHRAG_MAX_CONCURRENT_CHATS",
        "GRAPHRAG_LLM_TIMEOUT",
        "GRAPHRAG_LLM_MAX_RETRIES",
        "GRAPHRAG_LLM_BREAKER",
        "GRAPHRAG_MAX_GLEANINGS",
        "GRAPHRAG_LLM_RESOLUTION",
        "GRAPHRAG_LLM_REPORTS",
        "GRAPHRAG_ES_VERIFY_CERTS",
        "GRAPHRAG_ENTITY_TYPES",
        "GRAPHRAG_ES_URL",
        "GRAPHRAG_ES_INDEX",
        "GRAPHRAG_HOME",
        "GRAPHRAG_CORPUS",
        "GRAPHRAG_ES_CA_CERTS",
        "GRAPHRAG_LLM_MODEL",
        "GRAPHRAG_EMBEDDING_MODEL",
        "OPENAI_BASE_URL",
    ]
    assert check_settings({n: "" for n in names}) == []
    assert check_settings({n: "  " for n in names}) == []


def test_the_defaults_written_out_are_valid():
    from graphrag_pipeline.settings import SETTINGS, text

    env = {name: text(name, {}) for name in SETTINGS if text(name, {}) is not None}
    assert {
        "GRAPHRAG_HOME",
        "GRAPHRAG_CORPUS",
        "GRAPHRAG_METHOD",
        "GRAPHRAG_CHUNK_TOKENS",
        "GRAPHRAG_LLM_MODEL",
        "GRAPHRAG_ENTITY_TYPES",
        "GRAPHRAG_LLM_REPORTS",
        "GRAPHRAG_ES_INDEX",
    } <= set(env)
    assert check_settings(env) == []


def _readme_table() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Environment variables") :]
    return table[: table.index("\n## ")]


def test_every_variable_of_the_readme_table_is_known():
    from graphrag_pipeline.settings import SETTINGS

    table = _readme_table()
    documented = set(re.findall(r"`(GRAPHRAG_[A-Z_]+)`", table))
    assert documented and all(name in SETTINGS for name in documented), documented - set(SETTINGS)
    # and the other way round: every setting is documented, with the default the table gives it
    for s in SETTINGS.values():
        row = next((line for line in table.splitlines() if line.startswith(f"| `{s.name}`")), None)
        if row is None:  # a row naming two variables, e.g. `GRAPHRAG_ES_USERNAME` / `GRAPHRAG_ES_PASSWORD`
            row = next(
                line for line in table.splitlines() if line.startswith("| ") and f"`{s.name}`" in line.split("|")[1]
            )
        if s.default is not None:
            assert s.default in row.split("|")[2], (s.name, s.default, row)


@pytest.mark.parametrize("value", ["bogus", "LIGHTER", "fast,light"])
def test_method(value):
    line = only({"GRAPHRAG_METHOD": value})
    assert line.startswith(f"GRAPHRAG_METHOD='{value}'") and "fast, light, general" in line


@pytest.mark.parametrize("value", ["fast", "light", "general", " Light ", "GENERAL"])
def test_method_ok(value):
    assert check_settings({"GRAPHRAG_METHOD": value}) == []


@pytest.mark.parametrize(
    "name,bad,good",
    [
        ("GRAPHRAG_CHUNK_TOKENS", ["abc", "99", "0", "-5", "1.5", "2e3"], ["100", "2000", " 1200 "]),
        ("GRAPHRAG_CHUNK_OVERLAP", ["-1", "x", "1000", "1500"], ["0", "100", "999"]),
        ("GRAPHRAG_MAX_DOCUMENT_BYTES", ["0", "-1", "lots"], ["1", "20971520"]),
        ("GRAPHRAG_MAX_CLUSTER_SIZE", ["0", "1", "-3", "99999999999", "twelve"], ["2", "12", "1000"]),
        ("GRAPHRAG_MAX_CONCURRENT_CHATS", ["0", "-2", "ten"], ["1", "10", "64"]),
        ("GRAPHRAG_LLM_TIMEOUT", ["0", "-1", "1.5", "slow"], ["1", "120"]),
        ("GRAPHRAG_LLM_MAX_RETRIES", ["-1", "x"], ["0", "5"]),
        ("GRAPHRAG_LLM_BREAKER", ["-1", "three"], ["0", "3"]),
        ("GRAPHRAG_MAX_GLEANINGS", ["-2", "x"], ["-1", "0", "3"]),
    ],
)
def test_integers(name, bad, good):
    for value in bad:
        line = only({name: value})
        assert line.startswith(f"{name}='{value}': must be a whole number"), line
        assert "default" in line
    for value in good:
        assert check_settings({name: value}) == [], (name, value)


def test_overlap_is_checked_against_the_chunk_size_given():
    line = only({"GRAPHRAG_CHUNK_TOKENS": "300", "GRAPHRAG_CHUNK_OVERLAP": "150"})
    assert "GRAPHRAG_CHUNK_OVERLAP" in line and "(300)" in line and "at most 149" in line
    assert check_settings({"GRAPHRAG_CHUNK_TOKENS": "300", "GRAPHRAG_CHUNK_OVERLAP": "149"}) == []
    # an invalid chunk size is reported once; the overlap is then judged against the default
    assert len(check_settings({"GRAPHRAG_CHUNK_TOKENS": "abc", "GRAPHRAG_CHUNK_OVERLAP": "100"})) == 1


@pytest.mark.parametrize("name", ["GRAPHRAG_LLM_RESOLUTION", "GRAPHRAG_LLM_REPORTS", "GRAPHRAG_ES_VERIFY_CERTS"])
def test_booleans(name):
    for value in ["flase", "2", "enabled", "tru"]:
        line = only({name: value})
        assert line.startswith(f"{name}='{value}'") and "true or false" in line
    for value in ["true", "False", "1", "0", "yes", "NO", "on", "off"]:
        assert check_settings({name: value}) == []


def test_entity_types():
    line = only({"GRAPHRAG_ENTITY_TYPES": " , ,"})
    assert line.startswith("GRAPHRAG_ENTITY_TYPES=") and "at least one" in line
    assert check_settings({"GRAPHRAG_ENTITY_TYPES": "person, ship"}) == []


@pytest.mark.parametrize("value", ["ftp://es:9200", "127.0.0.1:9200", "localhost", "http://", "http://host:99999"])
def test_es_url(value):
    line = only({"GRAPHRAG_ES_URL": value})
    assert line.startswith("GRAPHRAG_ES_URL") and "http" in line


def test_urls_ok_and_credentials_never_shown():
    assert (
        check_settings(
            {"GRAPHRAG_ES_URL": "https://elastic:pw@es.internal:9243", "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}
        )
        == []
    )
    line = only({"GRAPHRAG_ES_URL": "ftp://user:s3cret@es"})
    assert "s3cret" not in line
    assert only({"OPENAI_BASE_URL": "127.0.0.1:8000/v1"}).startswith("OPENAI_BASE_URL")


@pytest.mark.parametrize("value", ["Upper", "-x", "a b", "a/b", "a*", ".."])
def test_es_index_names(value):
    assert only({"GRAPHRAG_ES_INDEX": value}).startswith("GRAPHRAG_ES_INDEX")


def test_es_password_needs_a_user():
    assert "GRAPHRAG_ES_USERNAME" in only({"GRAPHRAG_ES_PASSWORD": "pw"})
    assert check_settings({"GRAPHRAG_ES_PASSWORD": "pw", "GRAPHRAG_ES_USERNAME": "elastic"}) == []
    assert check_settings({"GRAPHRAG_ES_PASSWORD": "pw", "GRAPHRAG_ES_URL": "http://elastic@es:9200"}) == []
    assert "s3cret-pw" not in only({"GRAPHRAG_ES_PASSWORD": "s3cret-pw"})


def test_paths(tmp_path):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    assert "not a folder" in only({"GRAPHRAG_HOME": str(a_file)})
    assert "not a folder" in only({"GRAPHRAG_CORPUS": str(a_file)})
    assert check_settings({"GRAPHRAG_HOME": str(tmp_path / "new"), "GRAPHRAG_CORPUS": str(tmp_path)}) == []
    assert "no such file" in only({"GRAPHRAG_ES_CA_CERTS": str(tmp_path / "ca.pem")})
    assert check_settings({"GRAPHRAG_ES_CA_CERTS": str(a_file)}) == []
    # without the file system
    assert check_settings({"GRAPHRAG_HOME": str(a_file), "GRAPHRAG_ES_CA_CERTS": "/nope"}, check_paths=False) == []


def test_many_problems_one_line_each():
    env = {
        "GRAPHRAG_METHOD": "bogus",
        "GRAPHRAG_MAX_CLUSTER_SIZE": "0",
        "GRAPHRAG_CHUNK_TOKENS": "abc",
        "GRAPHRAG_LLM_REPORTS": "maybe",
        "GRAPHRAG_ES_URL": "es:9200",
    }
    problems = check_settings(env)
    assert len(problems) == 5
    for name in env:
        assert sum(p.startswith(name) for p in problems) == 1, (name, problems)


def test_no_dagster_import():
    import subprocess
    import sys

    code = (
        "import sys; from graphrag_pipeline.settings_check import check_settings; check_settings({}); "
        "print('dagster' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
