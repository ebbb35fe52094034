"""Every setting of the pipeline, read from environment variables (no Dagster import: the CLI, the
LLM client, the Elasticsearch config and the query module use it too).

`SETTINGS` is the one table: each variable's name, default and help are written there once, and
everything else (the Dagster resources, the LLM client, the Elasticsearch config, the CLI and
`settings_check`) reads them from it::

    setting("GRAPHRAG_CHUNK_TOKENS")          # an int: the variable, else the default written below
    default("GRAPHRAG_LLM_MODEL")             # the chat model an unset variable stands for
    setting("GRAPHRAG_METHOD", {"OPENAI_API_KEY": "k"})   # "light": any mapping can stand for the environment

An unset or blank variable means its default. Nothing here writes the environment.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parents[1]
METHODS = ("fast", "light", "general")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
OFFLINE_EMBEDDER = "hashing"  # GRAPHRAG_EMBEDDING_MODEL naming the built-in embedder (no endpoint)
ES_INDEX_PREFIX = "graphrag-"
DEFAULT_KB = "default"  # the knowledge base whose instance-wide names are unscoped (homes built before GRAPHRAG_KB)
KB_PATTERN = r"[a-z][a-z0-9_]{0,39}"  # a Dagster name part and an Elasticsearch alias part, whatever the machine
EPHEMERAL = "ephemeral"  # GRAPHRAG_SCRATCH: a fresh working copy for each process or step

Env = Mapping[str, str]


@dataclass(frozen=True)
class Setting:
    """One environment variable. ``default`` is the text an unset variable stands for (None: unset,
    or computed by ``compute`` from the rest of the environment); ``kind`` says how the text is read
    and checked; ``note`` follows the default in messages; ``default_text`` describes a computed one."""

    name: str
    kind: str  # path home scratch method int usd bool name text secret list url pg_url es_index file kb
    default: str | None = None
    help: str = ""
    minimum: int | None = None  # int: the smallest allowed value
    note: str = ""
    default_text: str | None = None
    compute: Callable[[Env], Any] | None = None
    example: str = ""  # url: an example of a valid value

    def describe_default(self) -> str:
        """The default as messages show it, e.g. ``120 seconds``."""
        if self.default_text is not None:
            return self.default_text
        return f"{self.default}{self.note}"


def _home_default(env: Env) -> Path:
    """`.graphrag` inside the project checkout (git-ignored), else ~/.graphrag."""
    if (PROJECT_ROOT / "pyproject.toml").exists():
        return PROJECT_ROOT / ".graphrag"
    return Path.home() / ".graphrag"


def _scratch_default(env: Env) -> Path | None:
    """A remote home's working copy: ~/.cache/graphrag-pipeline/<kb>-<hash of the URL>; None for a local home."""
    home = setting("GRAPHRAG_HOME", env)
    if not isinstance(home, str):
        return None
    digest = hashlib.sha1(home.encode()).hexdigest()[:10]
    return Path.home() / ".cache" / "graphrag-pipeline" / f"{setting('GRAPHRAG_KB', env)}-{digest}"


def _method_default(env: Env) -> str:
    return "light" if _raw(env, "OPENAI_API_KEY") else "fast"


def _es_index_default(env: Env) -> str:
    kb = setting("GRAPHRAG_KB", env)
    return es_index_for(setting("GRAPHRAG_HOME", env)) if kb == DEFAULT_KB else ES_INDEX_PREFIX + kb


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting(
            "GRAPHRAG_HOME",
            "home",
            help="all state of one knowledge base: a folder, or object storage (s3://bucket/prefix, worked on "
            "through GRAPHRAG_SCRATCH)",
            default_text="`.graphrag` in the checkout",
            compute=_home_default,
        ),
        Setting(
            "GRAPHRAG_SCRATCH",
            "scratch",
            help=f"the local working copy of a home on object storage (ignored for a local home); {EPHEMERAL} = a "
            "fresh temporary folder for each process or step (as on separate machines)",
            default_text="~/.cache/graphrag-pipeline/<GRAPHRAG_KB>-<hash of GRAPHRAG_HOME>",
            compute=_scratch_default,
        ),
        Setting(
            "GRAPHRAG_KB",
            "kb",
            DEFAULT_KB,
            "the knowledge base's name, the same on every machine: it scopes every name several homes could share "
            "on one Dagster instance (partition sets, asset keys, run tags) and the default Elasticsearch alias; "
            f"{DEFAULT_KB} keeps the unscoped names of earlier versions",
        ),
        Setting(
            "GRAPHRAG_DAGSTER_HOME",
            "path",
            help="the Dagster instance (a folder with its dagster.yaml, e.g. for Postgres) builds use; its "
            "dagster.yaml is never written",
            default_text="DAGSTER_HOME when exported, else $GRAPHRAG_HOME/dagster (a private SQLite instance)",
        ),
        Setting(
            "GRAPHRAG_CACHE_URL",
            "pg_url",
            help="a postgresql://user:password@host:port/database URL: the LLM caches, the usage ledger and the build "
            "budget are kept there (safe from many machines); its password is never shown",
            default_text="the Dagster instance's database when it stores runs in Postgres, else "
            "$GRAPHRAG_HOME/cache/cache.sqlite",
        ),
        Setting(
            "GRAPHRAG_CORPUS",
            "path",
            help="the corpus folder of a new home",
            default_text="data/corpus",
            compute=lambda env: PROJECT_ROOT / "data" / "corpus",
        ),
        Setting(
            "GRAPHRAG_METHOD",
            "method",
            help="extraction method of a new home: " + ", ".join(METHODS),
            default_text="light when OPENAI_API_KEY is set, else fast",
            compute=_method_default,
        ),
        Setting("GRAPHRAG_CHUNK_TOKENS", "int", "2000", "maximum tokens per chunk", minimum=100),
        Setting("GRAPHRAG_CHUNK_OVERLAP", "int", "100", "tokens repeated from the previous chunk", minimum=0),
        Setting("GRAPHRAG_MAX_DOCUMENT_BYTES", "int", str(20 * 1024 * 1024), "larger files are truncated", minimum=1),
        Setting("GRAPHRAG_MAX_CLUSTER_SIZE", "int", "12", "Leiden's maximum cluster size", minimum=2),
        Setting(
            "GRAPHRAG_PROGRESS_INTERVAL",
            "int",
            "15",
            "`build` without a terminal: seconds between progress lines on stderr",
            minimum=0,
            note=" seconds; 0 = none",
        ),
        Setting(
            "GRAPHRAG_SENSOR_INTERVAL",
            "int",
            "10",
            "the daemon path: seconds between ticks of corpus_sensor and publish_sensor (read when the definitions "
            "load)",
            minimum=1,
            note=" seconds",
        ),
        Setting(
            "GRAPHRAG_DAEMON_IN_PROCESS",
            "bool",
            "true",
            "the daemon path: the sensors' runs execute their steps in the run's process (false: Dagster's "
            "multiprocess executor, a process per step)",
        ),
        Setting("OPENAI_API_KEY", "secret", help="the endpoint's key (never in config, logs or metadata)"),
        Setting("OPENAI_BASE_URL", "url", help="an OpenAI-compatible endpoint", example="http://127.0.0.1:8000/v1"),
        Setting("GRAPHRAG_LLM_MODEL", "name", "gpt-4o-mini", "chat model"),
        Setting(
            "GRAPHRAG_EMBEDDING_MODEL",
            "name",
            OFFLINE_EMBEDDER,
            f"{OFFLINE_EMBEDDER} = the offline embedder; anything else = that model on the endpoint",
        ),
        Setting(
            "GRAPHRAG_EMBEDDING_MAX_TOKENS",
            "int",
            "8191",
            "the most tokens (cl100k) of one text sent to the embeddings API; longer texts are cut",
            minimum=16,
        ),
        Setting("GRAPHRAG_MAX_CONCURRENT_CHATS", "int", "10", "chat calls in flight at once per process", minimum=1),
        Setting("GRAPHRAG_LLM_TIMEOUT", "int", "120", "seconds per call", minimum=1, note=" seconds"),
        Setting("GRAPHRAG_LLM_MAX_RETRIES", "int", "5", "retries of a failing call", minimum=0),
        Setting(
            "GRAPHRAG_LLM_BREAKER",
            "int",
            "3",
            "calls in a row that failed before the build stops",
            minimum=0,
            note="; 0 = never",
        ),
        Setting("GRAPHRAG_LANGUAGE", "name", "English", "language of descriptions and reports"),
        Setting("GRAPHRAG_ENTITY_TYPES", "list", "organization,person,geo,event,category", "entity types asked for"),
        Setting("GRAPHRAG_MAX_GLEANINGS", "int", "-1", "gleaning rounds", minimum=-1, note=" = the method's default"),
        Setting(
            "GRAPHRAG_MAX_COST_USD",
            "usd",
            help="the most one `build` may spend on LLM calls (USD); the build stops cleanly before it would "
            "spend more",
            default_text="unset = no limit",
        ),
        Setting(
            "GRAPHRAG_ESTIMATE_ON_BUILD",
            "bool",
            "false",
            "make the cost estimate (a dry run, see `build --estimate`) when a build with an LLM method starts "
            "(its cost grows with the corpus: off by default)",
        ),
        Setting(
            "GRAPHRAG_PRICE_INPUT_PER_MTOK",
            "usd",
            help="USD per million prompt tokens (with GRAPHRAG_PRICE_OUTPUT_PER_MTOK: wins over the price table)",
            default_text="the genai-prices table for the model and endpoint",
        ),
        Setting(
            "GRAPHRAG_PRICE_OUTPUT_PER_MTOK",
            "usd",
            help="USD per million completion tokens (with GRAPHRAG_PRICE_INPUT_PER_MTOK)",
            default_text="the genai-prices table for the model and endpoint",
        ),
        Setting("GRAPHRAG_LLM_RESOLUTION", "bool", "true", "judge resolution candidates with the LLM"),
        Setting("GRAPHRAG_LLM_REPORTS", "bool", "true", "write community reports with the LLM"),
        Setting(
            "GRAPHRAG_ES_URL", "url", help="Elasticsearch URL; unset: no Elasticsearch", example="http://127.0.0.1:9200"
        ),
        Setting(
            "GRAPHRAG_ES_INDEX",
            "es_index",
            help="the alias of this knowledge base",
            default_text=f"{ES_INDEX_PREFIX}<GRAPHRAG_KB> when GRAPHRAG_KB is set, else {ES_INDEX_PREFIX}<hash of "
            "GRAPHRAG_HOME>",
            compute=_es_index_default,
        ),
        Setting("GRAPHRAG_ES_API_KEY", "secret", help="API key authentication"),
        Setting("GRAPHRAG_ES_USERNAME", "text", help="basic authentication"),
        Setting("GRAPHRAG_ES_PASSWORD", "secret", help="basic authentication"),
        Setting("GRAPHRAG_ES_CA_CERTS", "file", help="CA bundle for https", default_text="the system store"),
        Setting("GRAPHRAG_ES_VERIFY_CERTS", "bool", "true", "TLS verification"),
        Setting(
            "GRAPHRAG_SERVE_API_KEY",
            "secret",
            help="`serve`: the key every API request must send (X-API-Key or Authorization: Bearer); unset: open",
        ),
    )
}


def _raw(env: Env, name: str) -> str | None:
    value = env.get(name)
    if value is None or not str(value).strip():
        return None
    return str(value)


def raw(name: str, env: Env | None = None) -> str | None:
    """The variable's text as given, or None when it is unset or blank (= its default)."""
    if name not in SETTINGS:
        raise KeyError(f"unknown setting {name}")
    return _raw(os.environ if env is None else env, name)


def parse_bool(text: str) -> bool:
    return text.strip().lower() not in FALSE_WORDS


def parse_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _parse(s: Setting, text: str) -> Any:
    if s.kind == "int":
        try:
            return int(text.strip())
        except ValueError:
            raise ValueError(
                f"{s.name} must be a whole number >= {s.minimum} (default {s.describe_default()}), got {text!r}"
            ) from None
    if s.kind == "usd":
        try:
            value = float(text.strip())
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):  # also refuses nan
            raise ValueError(f"{s.name} must be an amount in USD >= 0 (e.g. 2.50), got {text!r}")
        return value
    if s.kind == "bool":
        return parse_bool(text)
    if s.kind == "list":
        return parse_list(text)
    if s.kind == "path":
        return Path(text.strip()).expanduser().resolve()
    if s.kind == "home":  # a URL of object storage stays text (Path would fold its //)
        from graphrag_pipeline.storage.remote import is_remote, normalize_url

        return normalize_url(text) if is_remote(text) else Path(text.strip()).expanduser().resolve()
    if s.kind == "scratch":
        return EPHEMERAL if text.strip().lower() == EPHEMERAL else Path(text.strip()).expanduser().resolve()
    if s.kind == "method":
        method = text.strip().lower()
        if method not in METHODS:
            raise ValueError(f"{s.name} must be one of {', '.join(METHODS)}, got {method!r}")
        return method
    if s.kind in ("es_index", "url", "pg_url"):
        return text.strip()
    if s.kind == "kb":
        name = text.strip()
        if not re.fullmatch(KB_PATTERN, name):
            raise ValueError(
                f"{s.name} must be 1-40 lowercase letters, digits or _, starting with a letter, got {text!r}"
            )
        return name
    return text


def default(name: str, env: Env | None = None) -> Any:
    """The value the variable has when unset (typed: int, bool, list, Path or str; None: no default)."""
    s = SETTINGS[name]
    if s.compute is not None:
        return s.compute(os.environ if env is None else env)
    return None if s.default is None else _parse(s, s.default)


def setting(name: str, env: Env | None = None) -> Any:
    """The variable's value (typed as `default`), else its default. Raises ValueError for a value
    that cannot be read (`settings_check.check_settings` says the same up front, for all at once)."""
    text = raw(name, env)
    return default(name, env) if text is None else _parse(SETTINGS[name], text)


def text(name: str, env: Env | None = None) -> str | None:
    """The variable's text, else its default's (None when it has neither)."""
    given = raw(name, env)
    if given is not None:
        return given
    value = default(name, env)
    return None if value is None else str(value)


def es_index_for(home: str | os.PathLike) -> str:
    """The Elasticsearch alias of a home when GRAPHRAG_ES_INDEX is unset."""
    return ES_INDEX_PREFIX + hashlib.sha1(str(home).encode()).hexdigest()[:10]


def endpoint_embedding_model(name: str | None) -> str | None:
    """The embedding model to ask the endpoint for; None for the offline embedder."""
    return None if not name or name == OFFLINE_EMBEDDER else name


def default_home() -> Path | str:
    """`GRAPHRAG_HOME`, else `.graphrag` inside the project checkout (git-ignored), else ~/.graphrag.
    A home on object storage is its URL (text, ``s3://bucket/prefix``)."""
    return setting("GRAPHRAG_HOME")


def knowledge_base(env: Env | None = None) -> str:
    """GRAPHRAG_KB: the name that scopes this knowledge base's instance-wide names."""
    return setting("GRAPHRAG_KB", env)


def kb_scoped(name: str, env: Env | None = None, sep: str = "__") -> str:
    """``name`` for this knowledge base: unchanged for the default one (what earlier versions
    wrote stays valid), ``name__<kb>`` for any other."""
    kb = knowledge_base(env)
    return name if kb == DEFAULT_KB else f"{name}{sep}{kb}"


def default_corpus() -> Path:
    return setting("GRAPHRAG_CORPUS")


def default_method() -> str:
    """`GRAPHRAG_METHOD` wins; otherwise `light` when an OpenAI key is set, else the offline `fast`."""
    return setting("GRAPHRAG_METHOD")
