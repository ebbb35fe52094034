"""Dagster resources, configured from environment variables."""


import os
from pathlib import Path

import dagster as dg

from graphrag_pipeline.storage.layout import Paths
from graphrag_pipeline.settings import default_corpus, default_home, default_method
from graphrag_pipeline.llm.cache import KVCache
from graphrag_pipeline.storage.store import Store


ENV_DEFAULTS = {
    "GRAPHRAG_HOME": lambda: str(default_home()),
    "GRAPHRAG_CORPUS": lambda: str(default_corpus()),
    "GRAPHRAG_METHOD": default_method,
    "GRAPHRAG_CHUNK_TOKENS": lambda: "2000",
    "GRAPHRAG_CHUNK_OVERLAP": lambda: "100",
    "GRAPHRAG_MAX_DOCUMENT_BYTES": lambda: str(20 * 1024 * 1024),
    "GRAPHRAG_MAX_CLUSTER_SIZE": lambda: "12",
    "GRAPHRAG_LLM_MODEL": lambda: "gpt-4o-mini",
    "GRAPHRAG_EMBEDDING_MODEL": lambda: "hashing",
    "GRAPHRAG_MAX_CONCURRENT_CHATS": lambda: "10",
    "GRAPHRAG_LLM_TIMEOUT": lambda: "120",
    "GRAPHRAG_LLM_MAX_RETRIES": lambda: "5",
    "GRAPHRAG_LANGUAGE": lambda: "English",
    "GRAPHRAG_ENTITY_TYPES": lambda: "organization,person,geo,event,category",
    "GRAPHRAG_MAX_GLEANINGS": lambda: "-1",
    "GRAPHRAG_LLM_RESOLUTION": lambda: "true",
    "GRAPHRAG_LLM_REPORTS": lambda: "true",
}


def apply_env_defaults() -> None:
    """Give every optional setting its default in the environment, so EnvVar can always resolve it."""
    for name, default in ENV_DEFAULTS.items():
        if not os.environ.get(name):
            os.environ[name] = default()


class PipelineSettings(dg.ConfigurableResource):
    """Where the corpus and all state live, and how documents are processed."""

    home: str
    corpus_dir: str  # the corpus asked for (GRAPHRAG_CORPUS); a built home's own record wins, see `corpus`
    requested_method: str = "fast"  # GRAPHRAG_METHOD; a built home's own record wins, see `method`
    chunk_tokens: int = 2000
    chunk_overlap: int = 100
    max_document_bytes: int = 20 * 1024 * 1024
    max_cluster_size: int = 12
    use_lcc: bool = True

    @property
    def paths(self) -> Paths:
        return Paths(Path(self.home))

    def _record(self):
        from graphrag_pipeline.storage.home import read_home_record

        return read_home_record(Path(self.home))

    @property
    def corpus(self) -> Path:
        """The corpus this home was built from (its record), else the one asked for."""
        record = self._record()
        return Path(record.corpus) if record else Path(self.corpus_dir)

    @property
    def method(self) -> str:
        """The extraction method this home was built with (its record), else the one asked for."""
        record = self._record()
        return record.method if record else self.requested_method

    def store(self) -> Store:
        return Store(self.paths)

    def extraction_cache(self) -> KVCache:
        return KVCache(self.paths.cache_db, "extraction")


class LLMSettings(dg.ConfigurableResource):
    """The OpenAI-compatible endpoint and what the LLM is used for.

    The API key and base URL are the openai client's own variables (OPENAI_API_KEY,
    OPENAI_BASE_URL); they are read when the client is created and never enter Dagster config,
    logs or metadata.
    """

    model: str = "gpt-4o-mini"
    embedding_model: str = "hashing"
    max_concurrent_chats: int = 10
    timeout_s: int = 120
    max_retries: int = 5
    language: str = "English"
    entity_types: str = "organization,person,geo,event,category"
    max_gleanings: int = -1  # -1: the method's default (light 0, general 1)
    resolution: str = "true"  # judge resolution candidates with the LLM
    reports: str = "true"  # write community reports with the LLM

    @property
    def use_for_resolution(self) -> bool:
        return _truthy(self.resolution)

    @property
    def use_for_reports(self) -> bool:
        return _truthy(self.reports)

    def client(self, cache_path: Path):
        """An LLMClient, or None when no endpoint is configured."""
        from graphrag_pipeline.llm.client import LLMClient

        api_key = os.environ.get("OPENAI_API_KEY") or None
        base_url = os.environ.get("OPENAI_BASE_URL") or None
        if not api_key and not base_url:
            return None
        return LLMClient(
            model=self.model, api_key=api_key or "EMPTY", base_url=base_url,
            cache=KVCache(cache_path, "llm"), max_concurrent=self.max_concurrent_chats,
            timeout_s=float(self.timeout_s), max_retries=self.max_retries,
            embedding_model=None if self.embedding_model == "hashing" else self.embedding_model,
        )

    def extraction_settings(self, method: str):
        from graphrag_pipeline.extract.llm import ExtractionSettings

        types = [t.strip() for t in self.entity_types.split(",") if t.strip()]
        return ExtractionSettings(method=method, language=self.language, entity_types=types,
                                  max_gleanings=None if self.max_gleanings < 0 else self.max_gleanings)


def _truthy(value: str) -> bool:
    return str(value).strip().lower() not in ("0", "false", "no", "off", "")


def llm_settings_from_env() -> LLMSettings:
    apply_env_defaults()
    return LLMSettings(
        model=dg.EnvVar("GRAPHRAG_LLM_MODEL"),
        embedding_model=dg.EnvVar("GRAPHRAG_EMBEDDING_MODEL"),
        max_concurrent_chats=dg.EnvVar.int("GRAPHRAG_MAX_CONCURRENT_CHATS"),
        timeout_s=dg.EnvVar.int("GRAPHRAG_LLM_TIMEOUT"),
        max_retries=dg.EnvVar.int("GRAPHRAG_LLM_MAX_RETRIES"),
        language=dg.EnvVar("GRAPHRAG_LANGUAGE"),
        entity_types=dg.EnvVar("GRAPHRAG_ENTITY_TYPES"),
        max_gleanings=dg.EnvVar.int("GRAPHRAG_MAX_GLEANINGS"),
        resolution=dg.EnvVar("GRAPHRAG_LLM_RESOLUTION"),
        reports=dg.EnvVar("GRAPHRAG_LLM_REPORTS"),
    )


def settings_from_env() -> PipelineSettings:
    """Settings resolved from environment variables when a run starts (not when code loads)."""
    apply_env_defaults()
    return PipelineSettings(
        home=dg.EnvVar("GRAPHRAG_HOME"),
        corpus_dir=dg.EnvVar("GRAPHRAG_CORPUS"),
        requested_method=dg.EnvVar("GRAPHRAG_METHOD"),
        chunk_tokens=dg.EnvVar.int("GRAPHRAG_CHUNK_TOKENS"),
        chunk_overlap=dg.EnvVar.int("GRAPHRAG_CHUNK_OVERLAP"),
        max_document_bytes=dg.EnvVar.int("GRAPHRAG_MAX_DOCUMENT_BYTES"),
        max_cluster_size=dg.EnvVar.int("GRAPHRAG_MAX_CLUSTER_SIZE"),
    )


@dg.definitions
def resources() -> dg.Definitions:
    """The resources every asset, check, sensor and schedule of the defs folder asks for (found by
    `load_from_defs_folder`); their values are read from the environment when a run starts."""
    return dg.Definitions(resources={"settings": settings_from_env(), "llm": llm_settings_from_env()})
