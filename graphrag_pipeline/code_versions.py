"""The code version of each asset: what, besides its inputs, decides what the asset writes.

Dagster compares an asset's code version with the one recorded on each partition's latest
materialization and shows the partitions that differ as stale ("has a new code version"). So
the versions are made of what changes an asset's output: the extraction method, the chat model,
the prompt texts, the chunking settings, and a hand-written number per asset (`LOGIC`) to bump
when its code changes what it writes. Nothing re-runs by itself when a version changes (a new
model or prompt is a paid decision): the UI shows the stale partitions and
`graphrag-pipeline build --refresh stale` (or a backfill from the UI) brings them up to date.

No Dagster here: the versions are computed from the settings (any mapping can stand for the
environment), when the definitions are loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from graphrag_pipeline import settings as s
from graphrag_pipeline.extract.batch import EXTRACTOR_VERSIONS
from graphrag_pipeline.llm import prompts

# bump an asset's number when its code changes what it writes (its partitions then show as stale)
LOGIC = {
    "chunks": 1,
    "doc_subgraph": 1,
    "knowledge_graph": 2,  # 2: descriptions cut to graph.tables.DESCRIPTION_BUDGET
    "resolved_graph": 2,
    "communities": 1,
    "community_reports": 1,
    "search_index": 1,
}

SUMMARY_PROMPTS = ("SUMMARIZE_DESCRIPTIONS",)
RESOLUTION_PROMPTS = ("ENTITY_RESOLUTION", "RESOLUTION_QUESTION", "RECORD_DELIMITER")
REPORT_PROMPTS = ("COMMUNITY_REPORT",)


def digest(value) -> str:
    """A short stable hash of any JSON-able value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:10]


def effective_method(env: Mapping[str, str] | None = None) -> str:
    """The method the runs will use: the home's record, else GRAPHRAG_METHOD (as PipelineSettings.method)."""
    from graphrag_pipeline.storage.home import read_home_record

    env = os.environ if env is None else env
    try:
        home = s.setting("GRAPHRAG_HOME", env)
        if isinstance(home, str):  # on object storage: its working copy (an ephemeral one holds no record yet)
            home = s.setting("GRAPHRAG_SCRATCH", env)
        record = read_home_record(home) if isinstance(home, Path) else None
    except (OSError, ValueError):
        record = None
    return record.method if record else s.setting("GRAPHRAG_METHOD", env)


def _version(asset: str, *parts) -> str:
    """`v<logic>|part|part...`: readable in the UI; long settings (prompts) enter as short hashes."""
    shown = [f"v{LOGIC[asset]}", *(str(p) for p in parts if p not in (None, "", False))]
    return "|".join(shown)


def code_versions(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The code version of each versioned asset under these settings.

    `fast` extraction calls no LLM, so no LLM step's version names a model under it: changing
    GRAPHRAG_LLM_MODEL leaves a `fast` home entirely fresh."""
    env = os.environ if env is None else env
    get = lambda name: s.setting(name, env)  # noqa: E731 - a local shorthand
    method = effective_method(env)
    llm = method != "fast"
    model = get("GRAPHRAG_LLM_MODEL") if llm else None
    language = get("GRAPHRAG_LANGUAGE")
    sizes = (get("GRAPHRAG_CHUNK_TOKENS"), get("GRAPHRAG_CHUNK_OVERLAP"), get("GRAPHRAG_MAX_DOCUMENT_BYTES"))
    chunking = "chunk=" + "/".join(map(str, sizes))
    extraction = None
    if llm:
        gleanings = get("GRAPHRAG_MAX_GLEANINGS")
        extraction = "settings=" + digest(
            {
                "prompts": prompts.extraction_digest(method),
                "language": language,
                "entity_types": get("GRAPHRAG_ENTITY_TYPES"),
                "gleanings": None if gleanings < 0 else gleanings,
            }
        )
    resolution = (model, "prompts=" + prompts.texts_digest(RESOLUTION_PROMPTS))
    if not (llm and get("GRAPHRAG_LLM_RESOLUTION")):
        resolution = ("offline",)
    reports = (model, "prompts=" + digest([prompts.texts_digest(REPORT_PROMPTS), language]))
    if not (llm and get("GRAPHRAG_LLM_REPORTS")):
        reports = ("extractive",)
    return {
        "chunks": _version("chunks", chunking),
        "doc_subgraph": _version("doc_subgraph", method, EXTRACTOR_VERSIONS[method], model, extraction),
        "knowledge_graph": _version(
            "knowledge_graph", model, llm and "prompts=" + digest([prompts.texts_digest(SUMMARY_PROMPTS), language])
        ),
        "resolved_graph": _version("resolved_graph", *resolution),
        "communities": _version("communities", f"max_cluster_size={get('GRAPHRAG_MAX_CLUSTER_SIZE')}"),
        "community_reports": _version("community_reports", *reports),
        "search_index": _version("search_index", f"embedding={get('GRAPHRAG_EMBEDDING_MODEL')}"),
    }
