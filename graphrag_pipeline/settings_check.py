"""Every setting checked up front, one clear line per invalid variable (no Dagster import).
The variables, their defaults and smallest values come from the table in `settings`.

    problems = check_settings(os.environ)   # [] when everything is usable

An unset or empty variable means its default and is always fine. Each line names the variable,
the value given and what is allowed, e.g.
``GRAPHRAG_MAX_CLUSTER_SIZE='0': must be a whole number >= 2 (default 12)``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from graphrag_pipeline.settings import EPHEMERAL, FALSE_WORDS, METHODS, SETTINGS, TRUE_WORDS, parse_list
from graphrag_pipeline.settings import default as default_of
from graphrag_pipeline.settings import setting as parse_setting
from graphrag_pipeline.storage.remote import is_remote

_MAX_INT = 2**31 - 1  # native code (Leiden, SQLite busy timeouts...) takes 32-bit integers

# smallest allowed value and default (as messages show it) of each whole-number setting, from the one table
_INTS: dict[str, tuple[int, str]] = {
    s.name: (s.minimum, s.describe_default()) for s in SETTINGS.values() if s.kind == "int"
}
_BOOLS = {s.name: s.describe_default() for s in SETTINGS.values() if s.kind == "bool"}
# free text: any value is usable
FREE_TEXT = tuple(s.name for s in SETTINGS.values() if s.kind in ("name", "text", "secret"))


def _value(env: Mapping[str, str], name: str) -> str | None:
    """The value as given, or None when unset or blank (= the default)."""
    raw = env.get(name)
    if raw is None or not str(raw).strip():
        return None
    return str(raw)


def _show(raw: str) -> str:
    return repr(raw if len(raw) <= 80 else raw[:77] + "...")


def _parse_int(raw: str) -> int | None:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        return None
    return int(text)


def _check_int(
    env: Mapping[str, str], name: str, lo: int, default: str, hi: int | None = None, allowed: str | None = None
) -> tuple[str | None, int | None]:
    raw = _value(env, name)
    if raw is None:
        return None, None
    hi = _MAX_INT if hi is None else hi
    n = _parse_int(raw)
    if n is None or n < lo or n > hi:
        if allowed is None:
            allowed = f"a whole number >= {lo}" if hi == _MAX_INT else f"a whole number from {lo} to {hi}"
            if n is not None and n > hi == _MAX_INT:
                allowed = f"a whole number from {lo} to {hi}"
        return f"{name}={_show(raw)}: must be {allowed} (default {default})", None
    return None, n


def _check_url(name: str, raw: str, what: str) -> str | None:
    try:
        parts = urlsplit(raw.strip())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0-65535
    except ValueError as exc:
        return f"{name}: not a valid URL ({exc}); expected {what}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = (
            parts._replace(netloc=parts.hostname or "").geturl() if (parts.username or parts.password) else raw.strip()
        )
        return f"{name}={_show(shown)}: must be an http:// or https:// URL with a host, e.g. {what}"
    return None


def _es_index_problem(name: str) -> str | None:
    if name in (".", ".."):
        return "cannot be . or .."
    if name != name.lower():
        return "must be lower case"
    if name[0] in "-_+":
        return "cannot start with -, _ or +"
    bad = sorted(set(name) & set('\\/*?"<>| ,#:'))
    if bad:
        return "cannot contain " + " ".join(bad)
    if len(name.encode("utf-8")) > 255:
        return "is longer than 255 bytes"
    return None


# what a value of these kinds must be, said when it is not
_KIND_RULES = {
    "usd": "must be an amount in USD >= 0, e.g. 2.50 (default: {default})",
    "kb": "must be 1-40 lowercase letters, digits or _, starting with a letter (default {default})",
    "home": "must be a folder or an s3://bucket/prefix URL (default {default})",
}


def check_settings(env: Mapping[str, str] | None = None, *, check_paths: bool = True) -> list[str]:
    """One human-readable line per invalid variable (name, value, what is allowed); [] when all
    are usable. ``check_paths``: also look at the file system (GRAPHRAG_HOME and GRAPHRAG_CORPUS
    must be folders when they exist, GRAPHRAG_ES_CA_CERTS an existing file)."""
    env = os.environ if env is None else env
    problems: list[str] = []

    def add(line: str | None) -> None:
        if line:
            problems.append(line)

    method = _value(env, "GRAPHRAG_METHOD")
    if method is not None and method.strip().lower() not in METHODS:
        add(
            f"GRAPHRAG_METHOD={_show(method)}: must be one of {', '.join(METHODS)} "
            f"(default {SETTINGS['GRAPHRAG_METHOD'].describe_default()})"
        )

    values: dict[str, int | None] = {}
    for name, (lo, default) in _INTS.items():
        if name == "GRAPHRAG_CHUNK_OVERLAP":
            continue
        line, values[name] = _check_int(env, name, lo, default)
        add(line)
    tokens = values.get("GRAPHRAG_CHUNK_TOKENS") or default_of("GRAPHRAG_CHUNK_TOKENS")
    # overlap must stay below half a chunk (the chunker would silently cut a larger one down)
    most = max(0, (tokens - 1) // 2)
    line, _ = _check_int(
        env,
        "GRAPHRAG_CHUNK_OVERLAP",
        *_INTS["GRAPHRAG_CHUNK_OVERLAP"],
        hi=most,
        allowed=f"a whole number >= 0 and less than half of GRAPHRAG_CHUNK_TOKENS ({tokens}), so at most {most}",
    )
    add(line)

    for name, default in _BOOLS.items():
        raw = _value(env, name)
        if raw is not None and raw.strip().lower() not in TRUE_WORDS + FALSE_WORDS:
            add(f"{name}={_show(raw)}: must be true or false (also 1/0, yes/no, on/off; default {default})")

    for setting in (s for s in SETTINGS.values() if s.kind in _KIND_RULES):
        raw = _value(env, setting.name)
        if raw is not None:
            try:
                parse_setting(setting.name, env)
            except ValueError:
                rule = _KIND_RULES[setting.kind].format(default=setting.describe_default())
                add(f"{setting.name}={_show(raw)}: {rule}")
    prices = [_value(env, f"GRAPHRAG_PRICE_{kind}_PER_MTOK") is None for kind in ("INPUT", "OUTPUT")]
    if prices[0] != prices[1]:
        add("GRAPHRAG_PRICE_INPUT_PER_MTOK and GRAPHRAG_PRICE_OUTPUT_PER_MTOK must be set together (or neither)")

    types = _value(env, "GRAPHRAG_ENTITY_TYPES")
    if types is not None and not parse_list(types):
        add(
            f"GRAPHRAG_ENTITY_TYPES={_show(types)}: must name at least one entity type, comma-separated "
            f"(default {SETTINGS['GRAPHRAG_ENTITY_TYPES'].describe_default()})"
        )

    for name in (s.name for s in SETTINGS.values() if s.kind == "name"):
        raw = _value(env, name)
        if raw is not None and raw != raw.strip():
            add(f"{name}={_show(raw)}: has leading or trailing spaces")

    es_url = _value(env, "GRAPHRAG_ES_URL")
    if es_url is not None:
        add(_check_url("GRAPHRAG_ES_URL", es_url, SETTINGS["GRAPHRAG_ES_URL"].example))
    base_url = _value(env, "OPENAI_BASE_URL")
    if base_url is not None:
        add(_check_url("OPENAI_BASE_URL", base_url, SETTINGS["OPENAI_BASE_URL"].example))
    cache_url = _value(env, "GRAPHRAG_CACHE_URL")
    if cache_url is not None:
        from graphrag_pipeline.llm.pg_store import target_from_url

        try:
            target_from_url(cache_url)
        except ValueError as exc:  # says what is wrong without the value (it may carry a password)
            add(str(exc))
    alias = _value(env, "GRAPHRAG_ES_INDEX")
    if alias is not None:
        why = _es_index_problem(alias.strip())
        if why:
            add(
                f"GRAPHRAG_ES_INDEX={_show(alias)}: {why} (an Elasticsearch index/alias name; "
                f"default {SETTINGS['GRAPHRAG_ES_INDEX'].describe_default()})"
            )
    if _value(env, "GRAPHRAG_ES_PASSWORD") is not None and _value(env, "GRAPHRAG_ES_USERNAME") is None:
        user_in_url = (
            bool(es_url) and not _check_url("GRAPHRAG_ES_URL", es_url, "") and bool(urlsplit(es_url.strip()).username)
        )
        if not user_in_url:
            add("GRAPHRAG_ES_PASSWORD is set but GRAPHRAG_ES_USERNAME is not (nor a user in GRAPHRAG_ES_URL)")

    if check_paths:
        for name in (s.name for s in SETTINGS.values() if s.kind in ("path", "home", "scratch")):
            raw = _value(env, name)
            if raw is not None and not is_remote(raw) and raw.strip().lower() != EPHEMERAL:
                path = os.path.expanduser(raw.strip())
                if os.path.exists(path) and not os.path.isdir(path):
                    add(f"{name}={_show(raw)}: exists but is not a folder")
        ca = _value(env, "GRAPHRAG_ES_CA_CERTS")
        if ca is not None and not os.path.isfile(os.path.expanduser(ca.strip())):
            add(
                f"GRAPHRAG_ES_CA_CERTS={_show(ca)}: no such file (a CA bundle in PEM format; "
                f"default: {SETTINGS['GRAPHRAG_ES_CA_CERTS'].describe_default()})"
            )
    return problems


def describe_problems(problems: list[str]) -> str:
    """The lines as one message (for an exception or a log record)."""
    return "invalid settings:\n" + "\n".join(f"  {p}" for p in problems)
