"""A dry run of a build's LLM steps, to count what they would send: the real steps' core functions
(extraction with gleaning, description summaries, resolution, clustering, report prompts) run in
memory against a stand-in model that answers from the offline `fast` extractor, and count every
call and prompt token they make. Nothing is sent and nothing is written.

The stand-in answers as a cooperative model would in each prompt's format: an extraction answer
lists the entities and relations the offline extractor finds in the chunk; a gleaning round adds
nothing; a loop check says yes (so every configured gleaning round runs: an upper bound); the
resolution judge decides by the offline rule (`offline_same`); a summary is one sentence and a
report a small valid JSON object. So the graph the estimate sees is the offline extractor's graph,
merged, summarised, resolved and clustered by the same code and rules as the build; the calls of
the later steps follow from that graph. A real model finds other entities and writes longer
answers: the estimate scales each step by what this home's previous build measured against its
own dry run (see estimate.py).

An incremental build: the graph of the documents kept (their offline extraction) is dry-run first,
as the home's previous state; then the whole corpus. Summaries whose prompt is unchanged are
counted as answer-cache hits (as the build's cache serves them), resolution asks only about new
entities (the previous state's keys are known), and reports are written only for communities
whose id (its content) is new, as the build does.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field

import polars as pl

from graphrag_pipeline.extract.records import Extraction
from graphrag_pipeline.ingest.tokens import count_tokens
from graphrag_pipeline.llm import prompts
from graphrag_pipeline.llm.client import ChatResult
from graphrag_pipeline.llm.usage import LLMUsage

STEPS = ("doc_subgraph", "knowledge_graph", "resolved_graph", "community_reports")
_REPORT_ANSWER = json.dumps(
    {
        "title": "Community",
        "summary": "What the community's entities have in common.",
        "rating": 5,
        "rating_explanation": "Estimated.",
        "findings": [{"summary": "A finding", "explanation": "Why it matters."}],
    }
)


def render_records(ext: Extraction, light: bool) -> str:
    """An extraction answer in the prompts' record format, listing what ``ext`` holds."""
    d = prompts.TUPLE_DELIMITER
    lines = [f'("entity"{d}{e.name}{d}{e.type.lower()}{d}{e.description})' for e in ext.entities]
    for r in ext.relations:
        strength = min(10, 4 + int(r.weight))
        middle = f"{d}{', '.join(r.keywords) or 'related'}" if light else ""
        lines.append(f'("relationship"{d}{r.source}{d}{r.target}{d}{r.description}{middle}{d}{strength})')
    if light and ext.content_keywords:
        lines.append(f'("content_keywords"{d}{", ".join(ext.content_keywords[:3])})')
    return (prompts.RECORD_DELIMITER + "\n").join(lines) + prompts.COMPLETION_DELIMITER


class StandInModel:
    """A ChatClient answering from the offline extractor and counting, per step, what was asked.

    ``step`` says which step is running; ``counting`` off runs a step without counting (the previous
    build's state); ``seen`` holds the prompts answered before (the answer cache of the home)."""

    model = "dry-run"
    max_concurrent = 1

    def __init__(self, method: str):
        from graphrag_pipeline.extract.llm import follow_up_prompts

        self.light = method == "light"
        self.continue_prompt, self.loop_prompt = follow_up_prompts(method)
        self.step = "doc_subgraph"
        self.counting = True
        self.first_answer = prompts.COMPLETION_DELIMITER  # set per chunk before its extraction
        self.usage: dict[str, LLMUsage] = {s: LLMUsage() for s in STEPS}
        self.seen: set[str] = set()
        self._lock = threading.Lock()

    def _answer(self, messages: list[dict]) -> str:
        last = messages[-1]["content"]
        if self.step == "doc_subgraph":
            if len(messages) == 1:
                return self.first_answer
            if last == self.continue_prompt:
                return prompts.COMPLETION_DELIMITER
            return "yes" if self.light else "YES"
        if self.step == "knowledge_graph":
            return "A merged description of the entity or relation."
        if self.step == "community_reports":
            return _REPORT_ANSWER
        # resolution: one line a question (the verdicts themselves come from the offline rule, see _offline_judge)
        questions = last.count('" the same as "')
        return "\n".join(f"Question {i}: different entities." for i in range(1, questions + 1))

    def chat(self, messages, *, temperature=0.0, max_tokens=None, logit_bias=None, response_format=None, **_):
        text = self._answer(messages)
        prompt = "\n".join(m["content"] for m in messages)
        with self._lock:
            if self.counting:
                u = self.usage[self.step]
                if prompt in self.seen:
                    u.cache_hits += 1
                else:
                    u.calls += 1
                    u.prompt_tokens += count_tokens(prompt)
                    u.completion_tokens += count_tokens(text) if max_tokens is None else min(max_tokens, 1)
            self.seen.add(prompt)
        return ChatResult(text, False, 0, 0)

    def chat_many(self, calls: list[dict]) -> list:
        return [self.chat(**c) for c in calls]

    def cancel(self) -> None:
        pass


def _offline_judge(model: StandInModel):
    """An LLM judge whose prompts are counted (the same batches the build sends) and whose
    verdicts are the offline rule's."""
    from graphrag_pipeline.graph.resolution import LLMJudge, offline_same

    class _Judge(LLMJudge):
        def _ask(self, batch):
            super()._ask(batch)
            return [offline_same(a, b) for _, a, b in batch]

    return _Judge(model)


@dataclass
class DryRun:
    usage: dict[str, LLMUsage]
    entities: int = 0
    relations: int = 0
    communities: int = 0
    reports: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass
class _State:
    """What a dry run of one graph leaves for the next (the previous build, as the home keeps it)."""

    resolution: dict | None = None
    communities: object = None  # CommunityState


def _graph(docs: dict[str, list[tuple[int, str, Extraction]]]):
    from graphrag_pipeline.extract.subgraph import build_doc_subgraph
    from graphrag_pipeline.graph.merge import merge_subgraphs

    subgraphs = [build_doc_subgraph(key, exts) for key, exts in sorted(docs.items())]
    if not subgraphs:
        return None
    entities = pl.concat([s.entities for s in subgraphs])
    relations = pl.concat([s.relations for s in subgraphs])
    merged = merge_subgraphs(entities, relations)
    return merged.nodes, merged.edges


def _downstream(model: StandInModel, docs, state: _State, *, language, resolution, reports, cluster_size, use_lcc):
    """Summaries, resolution, clustering and reports of the graph of ``docs``; returns (entities,
    relations, communities, reports written) and updates ``state``."""
    from graphrag_pipeline.graph.communities import update_communities
    from graphrag_pipeline.graph.resolution import merge_entities, plan_resolution
    from graphrag_pipeline.graph.summaries import summarise_long_descriptions
    from graphrag_pipeline.reports.schedule import reportable_ids

    graph = _graph(docs)
    if graph is None:
        return 0, 0, 0, 0
    model.step = "knowledge_graph"
    nodes, edges, _ = summarise_long_descriptions(graph[0], graph[1], model, language=language)
    model.step = "resolved_graph"
    judge = _offline_judge(model) if resolution else None
    plan = plan_resolution(nodes, state.resolution, judge=judge, judge_id="llm" if resolution else "offline")
    state.resolution = plan.state
    if plan.pairs:
        nodes, edges, _ = merge_entities(nodes, edges, plan.pairs)
    before = set(state.communities.table["community_id"].to_list()) if state.communities is not None else set()
    update = update_communities(nodes, edges, state.communities, max_cluster_size=cluster_size, use_lcc=use_lcc)
    state.communities = update.state
    wanted = [k for k in reportable_ids(update.communities) if k not in before]
    written = 0
    if reports and model.counting:
        model.step = "community_reports"
        written = _reports(model, update.communities, wanted, nodes, edges, language)
    return nodes.height, edges.height, update.communities.height, written


def _reports(model: StandInModel, communities: pl.DataFrame, keys: list[str], nodes, edges, language) -> int:
    """The report prompts of ``keys``, in the build's waves (a large community after its parts)."""
    from graphrag_pipeline.reports.llm import llm_report
    from graphrag_pipeline.reports.schedule import report_waves

    table = {r["community_id"]: r for r in communities.to_dicts()}
    children: dict[str, list[str]] = {}
    for row in table.values():
        if row["parent_id"]:
            children.setdefault(row["parent_id"], []).append(row["community_id"])
    written = {}
    for wave in report_waves(keys, table, children, nodes, edges, True):
        for cid in wave:
            subs = {c: written[c] for c in children.get(cid, []) if c in written}
            outcome = llm_report(
                model, table[cid], nodes, edges, language=language, sub_reports=subs, children=children.get(cid, [])
            )
            written[cid] = outcome.report
    return len(written)


def dry_run(
    method: str,
    xsettings,
    kept: dict[str, list[tuple[int, str, str]]],
    todo: dict[str, list[tuple[int, str, str]]],
    skip_chunks: set[str],
    *,
    language: str,
    resolution: bool,
    reports: bool,
    cluster_size: int,
    use_lcc: bool,
    memo=None,
) -> DryRun:
    """Count the LLM work of a build processing the documents ``todo`` when the home holds
    ``kept``: each maps a document key to its chunks (position, chunk_id, text). The chunks in
    ``skip_chunks`` are served by the extraction cache (not counted). ``memo`` (a KVCache) keeps
    the stand-in's extraction of each chunk, so the documents kept are not extracted again by the
    next estimate: only the chunks a build adds cost offline extraction time."""
    from graphrag_pipeline.extract.llm import extract_chunk
    from graphrag_pipeline.extract.offline import extract_fast

    model = StandInModel(method)
    opts = {
        "language": language,
        "resolution": resolution,
        "reports": reports,
        "cluster_size": cluster_size,
        "use_lcc": use_lcc,
    }
    state = _State()
    done: dict[str, Extraction] = {}
    if memo is not None:  # the stand-in's extractions of chunks seen before (they depend on the text only)
        wanted = [f"{method}:{cid}" for chunks in kept.values() for _, cid, _ in chunks]
        done = {k.split(":", 1)[1]: Extraction.from_dict(v) for k, v in memo.get_many(wanted).items()}
    fresh: dict[str, dict] = {}
    counted_ids: set[str] = set()

    def extract(chunks, counted: bool) -> list[tuple[int, str, Extraction]]:
        """The stand-in's extraction of each chunk, through the build's extraction code (so its
        graph is the one the build would parse from such answers); counted unless cached."""
        out = []
        for pos, cid, text in chunks:
            count = counted and cid not in skip_chunks and cid not in counted_ids  # a chunk is extracted once
            if cid not in done or count:
                model.counting = count
                model.first_answer = render_records(extract_fast(text, cid), model.light)
                done[cid] = extract_chunk(model, text, cid, xsettings).extraction
                fresh[f"{method}:{cid}"] = done[cid].to_dict()
                if count:
                    counted_ids.add(cid)
            out.append((pos, cid, done[cid]))
        model.counting = True
        return out

    graph = {key: extract(chunks, False) for key, chunks in kept.items()}
    if graph:  # the home's previous state: not counted, but its summaries are in the answer cache
        model.counting = False
        _downstream(model, graph, state, **opts)
        model.counting = True
    model.step = "doc_subgraph"
    for key, chunks in todo.items():
        graph[key] = extract(chunks, True)
    if memo is not None:
        memo.put_many(fresh)  # a no-op when the cache is read-only (`build --estimate`)
    entities, relations, communities, written = _downstream(model, graph, state, **opts)
    return DryRun(model.usage, entities, relations, communities, written)
