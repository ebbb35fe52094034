"""Dagster resources, configured from environment variables."""


import os
from pathlib import Path

import dagster as dg

from ..config import Paths, default_corpus, default_home, default_method
from ..core.cache import KVCache
from ..core.store import Store


ENV_DEFAULTS = {
    "GRAPHRAG_HOME": lambda: str(default_home()),
    "GRAPHRAG_CORPUS": lambda: str(default_corpus()),
    "GRAPHRAG_METHOD": default_method,
    "GRAPHRAG_CHUNK_TOKENS": lambda: "1200",
    "GRAPHRAG_CHUNK_OVERLAP": lambda: "100",
    "GRAPHRAG_MAX_DOCUMENT_BYTES": lambda: str(20 * 1024 * 1024),
    "GRAPHRAG_MAX_CLUSTER_SIZE": lambda: "12",
}


def apply_env_defaults() -> None:
    """Give every optional setting its default in the environment, so EnvVar can always resolve it."""
    for name, default in ENV_DEFAULTS.items():
        if not os.environ.get(name):
            os.environ[name] = default()


class PipelineSettings(dg.ConfigurableResource):
    """Where the corpus and all state live, and how documents are processed."""

    home: str
    corpus_dir: str
    method: str = "fast"
    chunk_tokens: int = 1200
    chunk_overlap: int = 100
    max_document_bytes: int = 20 * 1024 * 1024
    max_cluster_size: int = 12
    use_lcc: bool = True

    @property
    def paths(self) -> Paths:
        return Paths(Path(self.home))

    @property
    def corpus(self) -> Path:
        return Path(self.corpus_dir)

    def store(self) -> Store:
        return Store(self.paths)

    def extraction_cache(self) -> KVCache:
        return KVCache(self.paths.cache_db, "extraction")


def settings_from_env() -> PipelineSettings:
    """Settings resolved from environment variables when a run starts (not when code loads)."""
    apply_env_defaults()
    return PipelineSettings(
        home=dg.EnvVar("GRAPHRAG_HOME"),
        corpus_dir=dg.EnvVar("GRAPHRAG_CORPUS"),
        method=dg.EnvVar("GRAPHRAG_METHOD"),
        chunk_tokens=dg.EnvVar.int("GRAPHRAG_CHUNK_TOKENS"),
        chunk_overlap=dg.EnvVar.int("GRAPHRAG_CHUNK_OVERLAP"),
        max_document_bytes=dg.EnvVar.int("GRAPHRAG_MAX_DOCUMENT_BYTES"),
        max_cluster_size=dg.EnvVar.int("GRAPHRAG_MAX_CLUSTER_SIZE"),
    )
