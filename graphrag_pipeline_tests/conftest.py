"""Shared fixtures: a private GRAPHRAG_HOME and a copy of the bundled corpus for every test."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "data" / "corpus"
SETTINGS_ENV = (
    "GRAPHRAG_HOME",
    "GRAPHRAG_CORPUS",
    "GRAPHRAG_METHOD",
    "DAGSTER_HOME",
    "GRAPHRAG_CACHE_URL",
    "GRAPHRAG_MAX_DOCUMENT_BYTES",
    "GRAPHRAG_CHUNK_TOKENS",
    "GRAPHRAG_CHUNK_OVERLAP",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
)


@pytest.fixture(autouse=True)
def _dagster_home_kept_per_test():
    """A test that points this process at another Dagster instance (an in-process CLI build sets
    DAGSTER_HOME) does not leave it to the next test, which would take it for one the user exported."""
    saved = os.environ.get("DAGSTER_HOME")
    yield
    if saved is None:
        os.environ.pop("DAGSTER_HOME", None)
    else:
        os.environ["DAGSTER_HOME"] = saved


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    for name in SETTINGS_ENV:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "home"
    monkeypatch.setenv("GRAPHRAG_HOME", str(path))
    return path


@pytest.fixture
def corpus(tmp_path, monkeypatch) -> Path:
    dest = tmp_path / "corpus"
    shutil.copytree(SAMPLE_CORPUS, dest)
    monkeypatch.setenv("GRAPHRAG_CORPUS", str(dest))
    return dest


def cli(*args: str) -> tuple[int, str]:
    """Run the console script in-process; return (exit code, stdout)."""
    from graphrag_pipeline.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def cli_json(*args: str) -> dict:
    code, out = cli(*args)
    assert code == 0, out
    return json.loads(out)


@pytest.fixture
def instance(home, monkeypatch):
    """The Dagster instance of this GRAPHRAG_HOME (after a CLI call has created it)."""
    import dagster as dg

    def get():
        from graphrag_pipeline.cli import prepare_dagster_home
        from graphrag_pipeline.storage.layout import Paths

        prepare_dagster_home(Paths(home))
        return dg.DagsterInstance.get()

    return get


from graphrag_pipeline_tests.llm_server import llm_server  # noqa
from graphrag_pipeline_tests.pg_server import pg_server  # noqa
from graphrag_pipeline_tests.s3_server import s3_server, s3_env  # noqa
