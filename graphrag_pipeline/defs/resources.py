"""Dagster resources, configured from environment variables when a run starts.

Every field left unset takes its value from `graphrag_pipeline.settings` when the resource is set
up for a run, a sensor or a schedule: the variable named in the field's description, else its
default. Loading the definitions reads and writes no environment variable; a value given in run
config (the launchpad) wins over the environment.
"""

from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from pydantic import Field

from graphrag_pipeline import settings as env_settings
from graphrag_pipeline.llm.cache import KVCache, open_cache
from graphrag_pipeline.llm.pg_store import PgKVCache
from graphrag_pipeline.storage.layout import Paths
from graphrag_pipeline.storage.remote import RemoteHome, ephemeral_scratch, is_remote, remove_scratch
from graphrag_pipeline.storage.store import Store


def _from(name: str):
    """A field that, when unset, takes the value of the environment variable `name` at run time."""
    return Field(default=None, description=f"unset: ${name}, else its default", json_schema_extra={"env": name})


class _FromSettings(dg.ConfigurableResource):
    """Fills every unset field made with `_from` from the settings module when set up for execution."""

    def create_resource(self, context):  # noqa: ARG002 - Dagster's signature
        return self.resolved()

    def resolved(self):
        """A copy with every unset field read from its environment variable (or its default)."""
        values = {}
        for field, info in type(self).model_fields.items():
            value = getattr(self, field)
            extra = info.json_schema_extra
            name = extra.get("env") if isinstance(extra, dict) else None
            if value is None and name:
                value = env_settings.setting(name)
                value = str(value) if isinstance(value, Path) else value
            if field == "scratch" and value is not None and not is_remote(values.get("home")):
                value = None  # only a home on object storage has a working copy
            values[field] = value
        return type(self)(**values)


# the RemoteHome of each working copy a step of this process has open (yield_for_execution), for push_written
_STEP_SYNCS: dict[str, RemoteHome] = {}


class PipelineSettings(_FromSettings):
    """Where the corpus and all state live, and how documents are processed."""

    home: str | None = _from("GRAPHRAG_HOME")  # a folder, or s3://bucket/prefix (worked on in `scratch`)
    scratch: str | None = _from("GRAPHRAG_SCRATCH")  # a remote home's local working copy (ephemeral: per step)
    corpus_dir: str | None = _from(
        "GRAPHRAG_CORPUS"
    )  # the corpus asked for; a built home's own record wins, see `corpus`
    requested_method: str | None = _from("GRAPHRAG_METHOD")  # a built home's own record wins, see `method`
    chunk_tokens: int | None = _from("GRAPHRAG_CHUNK_TOKENS")
    chunk_overlap: int | None = _from("GRAPHRAG_CHUNK_OVERLAP")
    max_document_bytes: int | None = _from("GRAPHRAG_MAX_DOCUMENT_BYTES")
    max_cluster_size: int | None = _from("GRAPHRAG_MAX_CLUSTER_SIZE")
    use_lcc: bool = True

    @property
    def local_home(self) -> Path:
        """The folder the steps read and write: the home, or a remote home's working copy."""
        if not is_remote(self.home):
            return Path(self.home)
        if not self.scratch or self.scratch == env_settings.EPHEMERAL:
            raise RuntimeError(f"the home {self.home} has no working copy: the resource was not set up for a step")
        return Path(self.scratch)

    @property
    def paths(self) -> Paths:
        return Paths(self.local_home)

    @contextmanager
    def yield_for_execution(self, context):
        """A home on object storage: pull into the working copy before the step (or the sensor
        tick) computes, push what it wrote after it - also after a failed step, so the finished
        per-partition files of other documents are not lost. A local home: nothing happens."""
        resolved = self.resolved()
        if not is_remote(resolved.home):
            yield resolved
            return
        ephemeral = resolved.scratch == env_settings.EPHEMERAL
        scratch = ephemeral_scratch() if ephemeral else Path(resolved.scratch)
        is_step = getattr(context, "run", None) is not None  # a run's step; a sensor only reads
        try:
            sync = RemoteHome(resolved.home, scratch)
            sync.pull()
            if is_step:
                _STEP_SYNCS[str(scratch)] = sync
            try:
                values = {name: getattr(resolved, name) for name in type(self).model_fields}
                yield type(self)(**{**values, "scratch": str(scratch)})
            finally:
                if is_step:
                    if _STEP_SYNCS.get(str(scratch)) is sync:
                        del _STEP_SYNCS[str(scratch)]
                    sync.push()
        finally:
            if ephemeral:
                remove_scratch(scratch)

    def push_written(self) -> None:
        """A home on object storage: push what the step wrote now, when its asset body returns.
        Dagster reports a step done before it tears its resources down, and starts the next step
        (another process or machine, whose pull must find these files) as soon as it is; the push
        of yield_for_execution's teardown comes too late for that. A local home: nothing."""
        sync = _STEP_SYNCS.get(str(self.scratch)) if self.scratch and is_remote(self.home) else None
        if sync is not None:
            sync.push()

    def _record(self):
        from graphrag_pipeline.storage.home import read_home_record

        return read_home_record(self.local_home)

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

    def extraction_cache(self) -> KVCache | PgKVCache:
        """The extraction cache (SQLite in the home, or Postgres: `llm.cache.open_cache`)."""
        return open_cache(self.paths, "extraction")


class LLMSettings(_FromSettings):
    """The OpenAI-compatible endpoint and what the LLM is used for.

    The API key and base URL are the openai client's own variables (OPENAI_API_KEY,
    OPENAI_BASE_URL); they are read when the client is created and never enter Dagster config,
    logs or metadata.
    """

    model: str | None = _from("GRAPHRAG_LLM_MODEL")
    embedding_model: str | None = _from("GRAPHRAG_EMBEDDING_MODEL")
    embedding_max_tokens: int | None = _from("GRAPHRAG_EMBEDDING_MAX_TOKENS")
    max_concurrent_chats: int | None = _from("GRAPHRAG_MAX_CONCURRENT_CHATS")
    timeout_s: int | None = _from("GRAPHRAG_LLM_TIMEOUT")
    max_retries: int | None = _from("GRAPHRAG_LLM_MAX_RETRIES")
    language: str | None = _from("GRAPHRAG_LANGUAGE")
    entity_types: list[str] | None = _from("GRAPHRAG_ENTITY_TYPES")  # the variable: comma-separated
    max_gleanings: int | None = _from("GRAPHRAG_MAX_GLEANINGS")  # -1: the method's default (light 0, general 1)
    resolution: bool | None = _from("GRAPHRAG_LLM_RESOLUTION")  # judge resolution candidates with the LLM
    reports: bool | None = _from("GRAPHRAG_LLM_REPORTS")  # write community reports with the LLM

    @property
    def use_for_resolution(self) -> bool:
        return bool(self.resolution)

    @property
    def use_for_reports(self) -> bool:
        return bool(self.reports)

    def client(self, paths: Paths):
        """An LLMClient with the home's answer cache (`llm.cache.open_cache`), or None when no
        endpoint is configured."""
        from graphrag_pipeline.llm.client import LLMClient

        api_key = env_settings.raw("OPENAI_API_KEY")
        base_url = env_settings.setting("OPENAI_BASE_URL")
        if not api_key and not base_url:
            return None
        return LLMClient(
            model=self.model,
            api_key=api_key or "EMPTY",
            base_url=base_url,
            cache=open_cache(paths, "llm"),
            max_concurrent=self.max_concurrent_chats,
            timeout_s=float(self.timeout_s),
            max_retries=self.max_retries,
            embedding_model=env_settings.endpoint_embedding_model(self.embedding_model),
            embedding_max_tokens=self.embedding_max_tokens,
            budgeted=True,  # a pipeline step's client: a build's budget holds for it
        )

    def extraction_settings(self, method: str):
        from graphrag_pipeline.extract.llm import ExtractionSettings

        return ExtractionSettings(
            method=method,
            language=self.language,
            entity_types=list(self.entity_types),
            max_gleanings=None if self.max_gleanings < 0 else self.max_gleanings,
        )


def llm_settings_from_env() -> LLMSettings:
    """The LLM settings, each read from its environment variable when a run starts (not when code loads)."""
    return LLMSettings()


def settings_from_env() -> PipelineSettings:
    """Settings resolved from environment variables when a run starts (not when code loads)."""
    return PipelineSettings()


@dg.definitions
def resources() -> dg.Definitions:
    """The resources every asset, check, sensor and schedule of the defs folder asks for (found by
    `load_from_defs_folder`); their values are read from the environment when a run starts."""
    return dg.Definitions(resources={"settings": settings_from_env(), "llm": llm_settings_from_env()})
