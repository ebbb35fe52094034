"""Summarising long merged descriptions with the LLM.

A node or edge whose description was merged from more than `max_fragments` fragments (or that
is longer than `max_tokens`) gets one LLM-written description; the prompt depends only on the
name and the fragments, so the LLM response cache makes a rebuild free.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from graphrag_pipeline.ingest.tokens import count_tokens, truncate_tokens
from graphrag_pipeline.llm import prompts
from graphrag_pipeline.llm.protocol import ChatClient

MAX_FRAGMENTS = 12
MAX_TOKENS = 600
MAX_INPUT_TOKENS = 6000


@dataclass
class SummaryStats:
    summarised_nodes: int = 0
    summarised_edges: int = 0
    failed: int = 0


def _needs_summary(fragments: list[str] | None, text: str, max_fragments: int, max_tokens: int) -> bool:
    return len(fragments or []) > max_fragments or (text is not None and count_tokens(text) > max_tokens)


def _prompt(kind: str, name: str, fragments: list[str], language: str) -> str:
    listing = "\n".join(f"- {' '.join(f.split())}" for f in fragments)
    listing = truncate_tokens(listing, MAX_INPUT_TOKENS)
    return prompts.SUMMARIZE_DESCRIPTIONS.format(
        kind=kind, kind_title=kind.capitalize(), name=name, description_list=listing, language=language, max_words=150
    )


def summarise_long_descriptions(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    client: ChatClient | None,
    *,
    language: str = prompts.DEFAULT_LANGUAGE,
    max_fragments: int = MAX_FRAGMENTS,
    max_tokens: int = MAX_TOKENS,
) -> tuple[pl.DataFrame, pl.DataFrame, SummaryStats]:
    """Replace `description` of long nodes/edges by an LLM summary (fragments are kept)."""
    stats = SummaryStats()
    if client is None:
        return nodes, edges, stats
    node_rows = [
        (i, r)
        for i, r in enumerate(nodes.select("name", "descriptions", "description").rows())
        if _needs_summary(r[1], r[2], max_fragments, max_tokens)
    ]
    edge_rows = [
        (i, r)
        for i, r in enumerate(edges.select("source", "target", "descriptions", "description").rows())
        if _needs_summary(r[2], r[3], max_fragments, max_tokens)
    ]
    calls = [
        {"messages": [{"role": "user", "content": _prompt("entity", r[0], r[1] or [r[2]], language)}]}
        for _, r in node_rows
    ]
    calls += [
        {"messages": [{"role": "user", "content": _prompt("relation", f"{r[0]} -> {r[1]}", r[2] or [r[3]], language)}]}
        for _, r in edge_rows
    ]
    if not calls:
        return nodes, edges, stats
    results = client.chat_many(calls)
    from graphrag_pipeline.llm.client import LLMCircuitOpen

    stopped = next((r for r in results if isinstance(r, LLMCircuitOpen)), None)
    if stopped is not None:  # the client makes no more calls (endpoint down, budget spent): finish later, not now
        raise stopped
    node_desc = nodes["description"].to_list()
    edge_desc = edges["description"].to_list()
    for k, (i, _) in enumerate(node_rows):
        res = results[k]
        if isinstance(res, Exception) or not res.text.strip():
            stats.failed += 1
            continue
        node_desc[i] = res.text.strip()
        stats.summarised_nodes += 1
    for k, (i, _) in enumerate(edge_rows):
        res = results[len(node_rows) + k]
        if isinstance(res, Exception) or not res.text.strip():
            stats.failed += 1
            continue
        edge_desc[i] = res.text.strip()
        stats.summarised_edges += 1
    return (
        nodes.with_columns(pl.Series("description", node_desc, dtype=pl.Utf8)),
        edges.with_columns(pl.Series("description", edge_desc, dtype=pl.Utf8)),
        stats,
    )
