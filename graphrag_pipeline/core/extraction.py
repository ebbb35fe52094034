"""Extraction of a document's chunks with the configured method, cached per chunk hash.

The cache key is (method, extractor version, chunk id); the chunk id is the hash of the chunk's
text, so an unchanged chunk is never extracted twice, whichever document it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from .cache import KVCache
from .records import Extraction
from .usage import LLMUsage

EXTRACTOR_VERSIONS = {"fast": "fast-v1", "light": "light-v1", "general": "general-v1"}


@dataclass
class ExtractionStats:
    extracted: int = 0
    cache_hits: int = 0
    llm: LLMUsage = field(default_factory=LLMUsage)


def cache_key(method: str, chunk_id: str) -> str:
    return f"{EXTRACTOR_VERSIONS[method]}:{chunk_id}"


def _extract_one(method: str, text: str, chunk_id: str) -> Extraction:
    if method == "fast":
        from .extract_fast import extract_fast

        return extract_fast(text, chunk_id)
    raise ValueError(f"extraction method {method!r} needs an LLM endpoint, which this build does not configure")


def extract_chunks(chunks: pl.DataFrame, method: str, cache: KVCache, stats: ExtractionStats) -> list[tuple[int, str, Extraction]]:
    """(position, chunk_id, extraction) for every chunk of one document, in chunk order."""
    if method not in EXTRACTOR_VERSIONS:
        raise ValueError(f"unknown extraction method {method!r}; expected one of {', '.join(EXTRACTOR_VERSIONS)}")
    rows = chunks.select("position", "chunk_id", "text").rows()
    cached = cache.get_many(cache_key(method, cid) for _, cid, _ in rows)
    out, fresh = [], {}
    for position, cid, text in rows:
        key = cache_key(method, cid)
        if key in cached:
            stats.cache_hits += 1
            out.append((position, cid, Extraction.from_dict(cached[key])))
            continue
        ext = _extract_one(method, text, cid)
        stats.extracted += 1
        fresh[key] = ext.to_dict()
        out.append((position, cid, ext))
    cache.put_many(fresh)
    return out
