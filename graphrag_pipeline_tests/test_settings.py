"""The settings module: one table, read without writing the environment; the resources read it at run time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphrag_pipeline import settings
from graphrag_pipeline.settings import SETTINGS, default, setting

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-test-never-shown-0123456789"


def test_importing_the_definitions_leaves_the_environment_unchanged():
    # polars sets its allocator's variable when it is first imported, whoever imports it: imported
    # before the snapshot, so that only what this project's code does is compared
    code = (
        "import os, json, polars, dagster; before = dict(os.environ); "
        "import graphrag_pipeline.definitions; "
        "print(json.dumps({k: [before.get(k), os.environ.get(k)] for k in set(before) | set(os.environ) "
        "if before.get(k) != os.environ.get(k)}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHRAG_", "OPENAI_", "DAGSTER_"))}
    for extra in ({}, {"GRAPHRAG_HOME": str(REPO / ".no-such-home"), "OPENAI_API_KEY": SECRET}):
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env={**env, **extra}, capture_output=True, text=True, check=True
        ).stdout
        assert json.loads(out.strip().splitlines()[-1]) == {}


def test_each_default_once_and_typed():
    assert default("GRAPHRAG_CHUNK_TOKENS") == 2000 and default("GRAPHRAG_CHUNK_OVERLAP") == 100
    assert default("GRAPHRAG_MAX_DOCUMENT_BYTES") == 20 * 1024 * 1024 and default("GRAPHRAG_MAX_CLUSTER_SIZE") == 12
    assert default("GRAPHRAG_LLM_MODEL") == "gpt-4o-mini" and default("GRAPHRAG_LLM_BREAKER") == 3
    assert default("GRAPHRAG_ENTITY_TYPES") == ["organization", "person", "geo", "event", "category"]
    assert default("GRAPHRAG_LLM_REPORTS") is True and default("GRAPHRAG_ES_URL") is None
    # the library's own defaults are the table's
    from graphrag_pipeline.graph.communities import DEFAULT_MAX_CLUSTER_SIZE
    from graphrag_pipeline.ingest.documents import DEFAULT_MAX_BYTES
    from graphrag_pipeline.llm.prompts import DEFAULT_ENTITY_TYPES

    assert DEFAULT_MAX_CLUSTER_SIZE == 12 and DEFAULT_MAX_BYTES == default("GRAPHRAG_MAX_DOCUMENT_BYTES")
    assert DEFAULT_ENTITY_TYPES == default("GRAPHRAG_ENTITY_TYPES")


def test_reading_values():
    env = {
        "GRAPHRAG_CHUNK_TOKENS": " 1200 ",
        "GRAPHRAG_LLM_REPORTS": "off",
        "GRAPHRAG_ENTITY_TYPES": "person, ship",
        "GRAPHRAG_METHOD": " General ",
        "GRAPHRAG_LLM_MODEL": "  ",
        "GRAPHRAG_HOME": "~/kb",
    }
    assert setting("GRAPHRAG_CHUNK_TOKENS", env) == 1200
    assert setting("GRAPHRAG_LLM_REPORTS", env) is False and setting("GRAPHRAG_LLM_RESOLUTION", env) is True
    assert setting("GRAPHRAG_ENTITY_TYPES", env) == ["person", "ship"]
    assert setting("GRAPHRAG_METHOD", env) == "general"
    assert setting("GRAPHRAG_LLM_MODEL", env) == "gpt-4o-mini"  # blank = the default
    assert setting("GRAPHRAG_HOME", env) == Path("~/kb").expanduser().resolve()
    assert setting("GRAPHRAG_METHOD", {}) == "fast" and setting("GRAPHRAG_METHOD", {"OPENAI_API_KEY": "k"}) == "light"
    assert setting("GRAPHRAG_ES_INDEX", {"GRAPHRAG_HOME": "/kb"}) == settings.es_index_for(Path("/kb"))
    with pytest.raises(ValueError, match="GRAPHRAG_METHOD"):
        setting("GRAPHRAG_METHOD", {"GRAPHRAG_METHOD": "bogus"})
    with pytest.raises(ValueError, match="GRAPHRAG_LLM_BREAKER"):
        setting("GRAPHRAG_LLM_BREAKER", {"GRAPHRAG_LLM_BREAKER": "many"})
    with pytest.raises(KeyError):
        setting("GRAPHRAG_NOT_A_SETTING", {})
    assert all(s.help for s in SETTINGS.values())


def test_resources_read_the_environment_when_set_up_not_when_loaded(monkeypatch, tmp_path):
    import dagster as dg

    from graphrag_pipeline.defs.resources import llm_settings_from_env, settings_from_env

    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    pipeline, llm = settings_from_env(), llm_settings_from_env()  # what loading the definitions does
    monkeypatch.setenv("GRAPHRAG_HOME", str(tmp_path / "kb"))
    monkeypatch.setenv("GRAPHRAG_CHUNK_TOKENS", "900")
    monkeypatch.setenv("GRAPHRAG_LLM_RESOLUTION", "no")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with dg.build_resources({"settings": pipeline, "llm": llm}) as res:
        assert res.settings.home == str(tmp_path / "kb") and res.settings.chunk_tokens == 900
        assert (res.settings.chunk_overlap, res.settings.max_cluster_size) == (100, 12)
        assert res.settings.requested_method == "light"  # a key is set
        assert res.llm.model == "gpt-4o-mini" and not res.llm.use_for_resolution and res.llm.use_for_reports
        assert res.llm.extraction_settings("light").entity_types == default("GRAPHRAG_ENTITY_TYPES")
    # run config still wins, and no secret is part of any resource's config
    with dg.build_resources(
        {"settings": pipeline}, resource_config={"settings": {"config": {"chunk_tokens": 300}}}
    ) as res:
        assert res.settings.chunk_tokens == 300
    from graphrag_pipeline.definitions import defs

    for key in ("settings", "llm"):
        resource = defs.resources[key]
        assert SECRET not in json.dumps(resource.model_dump())
        assert SECRET not in json.dumps(resource.resolved().model_dump())


def test_the_console_entry_point_leaves_its_objects_out_of_the_exit_collection():
    """run() freezes what is alive once main() returned, so the interpreter's last collection does
    not walk it (a second at 50,000 documents); exit handlers still run, and the exit code is main's."""
    import subprocess
    import sys

    script = (
        "import atexit, gc, sys\n"
        "from graphrag_pipeline import cli\n"
        "atexit.register(lambda: print('handler ran; frozen:', gc.get_freeze_count() > 0, flush=True))\n"
        "cli.main = lambda: int(sys.argv[1])\n"
        "cli.run()\n"
    )
    for code in (0, 3):
        proc = subprocess.run([sys.executable, "-c", script, str(code)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, proc.stderr
        assert proc.stdout.strip() == "handler ran; frozen: True", proc.stdout + proc.stderr
