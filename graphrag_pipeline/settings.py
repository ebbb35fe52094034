"""Settings read from environment variables (no Dagster import: the CLI and the query module use it too)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
METHODS = ("fast", "light", "general")


def default_home() -> Path:
    """`GRAPHRAG_HOME`, else `.graphrag` inside the project checkout (git-ignored), else ~/.graphrag."""
    env = os.environ.get("GRAPHRAG_HOME")
    if env:
        return Path(env).expanduser().resolve()
    if (PROJECT_ROOT / "pyproject.toml").exists():
        return PROJECT_ROOT / ".graphrag"
    return Path.home() / ".graphrag"


def default_corpus() -> Path:
    env = os.environ.get("GRAPHRAG_CORPUS")
    if env:
        return Path(env).expanduser().resolve()
    return PROJECT_ROOT / "data" / "corpus"


def default_method() -> str:
    """`GRAPHRAG_METHOD` wins; otherwise `light` when an OpenAI key is set, else the offline `fast`."""
    method = os.environ.get("GRAPHRAG_METHOD", "").strip().lower()
    if method:
        if method not in METHODS:
            raise ValueError(f"GRAPHRAG_METHOD must be one of {', '.join(METHODS)}, got {method!r}")
        return method
    return "light" if os.environ.get("OPENAI_API_KEY") else "fast"
