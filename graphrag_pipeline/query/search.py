"""Local, global and naive search over the published index.

Local search follows RAGFlow's KGSearch: entity recall by embedding similarity of the query's
entities, type recall from the query's answer types, relation recall by embedding similarity of the
question, n-hop paths whose similarity decays by 1/(2+i) along the path, ranking by similarity x
PageRank (x edge weight for relations), a token budget, and the best community report of the hit
entities. Global search ranks community reports by importance (level, rating, weight; similarity
breaks ties). Naive search ranks chunks. Mix search puts local search's graph context, the source
chunks of its hit entities and relations, and the chunks most similar to the question in one budget.

Every entity, relation, report and chunk of a result carries `sources`: dicts with `doc` (the
corpus path), `chunk` (its 1-based number in the document; None for a report's documents) and
`chunk_id`. The context cites them as `[doc: notes/a.txt, chunk 3]` (or `[doc: notes/a.txt]`), the
form the answer prompt asks the LLM to cite in; `citations()` parses them back.
"""

from __future__ import annotations

import logging
import math
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from graphrag_pipeline.index.protocol import SearchIndex
from graphrag_pipeline.ingest.tokens import count_tokens, head_tokens, truncate_tokens
from graphrag_pipeline.llm.protocol import ChatClient, QueryClient

log = logging.getLogger("graphrag_pipeline.query")

MODES = ("mix", "local", "global", "naive")
DEFAULT_MODE = "mix"
MAX_SOURCES = 5  # chunk references shown per entity or relation
_SOURCE_LOOKUP = 20  # chunk ids looked up per entity or relation (a hub names thousands)
# the description of one entity or relation in a result and its context, at most (as an LLM summary
# of MS GraphRAG is): `fast` joins every fragment, and a hub's description of thousands of fragments
# (megabytes) took the whole budget, so local and mix search returned nothing for the entities
# most worth asking about
DESCRIPTION_MAX_TOKENS = 500
_CITATION = re.compile(r"\[doc: (.+?)(?:, chunk (\d+))?(?:, pp?\. \d+(?:-\d+)?)?\]")

_TYPE_HINTS = {
    "PERSON": ("who", "whom", "whose", "person", "people", "scientist", "谁", "人物"),
    "GEO": ("where", "place", "city", "country", "location", "哪里", "地方", "何处", "地点"),
    "ORGANIZATION": ("organisation", "organization", "institution", "society", "company", "university", "组织", "机构"),
    "EVENT": ("when", "event", "war", "battle", "prize", "何时", "事件"),
}


@dataclass
class SearchParams:
    max_tokens: int = 8196
    ent_topn: int = 6
    rel_topn: int = 6
    comm_topn: int = 1
    ent_sim_threshold: float = 0.3
    rel_sim_threshold: float = 0.3
    ent_candidates: int = 56
    rel_candidates: int = 56
    global_topn: int = 3
    global_map_topn: int = 8
    global_min_score: float = 0.0
    chunk_topn: int = 5


def param_problem(name: str, value) -> str | None:
    """Why `value` cannot be SearchParams' `name` (None when it can): a finite number of the field's
    kind, a count from 0 to 1,000,000, a threshold or score from -1 to 1,000,000. Shared by the CLI's
    flags and the HTTP API."""
    default = getattr(SearchParams(), name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"search parameter {name} must be a finite number, got {value!r}"
    if isinstance(default, int):
        if value != int(value) or not 0 <= value <= 1_000_000:
            return f"search parameter {name} must be a whole number from 0 to 1000000, got {value!r}"
    elif not -1.0 <= value <= 1_000_000:
        return f"search parameter {name} must be from -1 to 1000000, got {value!r}"
    return None


# what each SearchParams field means (the CLI's flags are made from these)
PARAM_HELP = {
    "max_tokens": "token budget of the context",
    "ent_topn": "entities kept (local, mix)",
    "rel_topn": "relations kept (local, mix)",
    "comm_topn": "community reports of the hit entities (local, mix)",
    "ent_sim_threshold": "minimum similarity of a recalled entity",
    "rel_sim_threshold": "minimum similarity of a recalled relation",
    "ent_candidates": "entities recalled by similarity before ranking",
    "rel_candidates": "relations recalled by similarity before ranking",
    "global_topn": "community reports kept (global)",
    "global_map_topn": "community reports mapped by the LLM (global --answer)",
    "global_min_score": "minimum importance of a mapped point (global --answer)",
    "chunk_topn": "chunks kept (naive); chunks from each of similarity and the graph (mix)",
}


@dataclass
class QueryResult:
    mode: str
    entities: list[dict] = field(default_factory=list)
    relations: list[dict] = field(default_factory=list)
    community_reports: list[dict] = field(default_factory=list)
    chunks: list[dict] = field(default_factory=list)
    context: str = ""
    answer: str | None = None
    analysis: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("analysis")
        return d

    def is_empty(self) -> bool:
        return not (self.entities or self.relations or self.community_reports or self.chunks)

    def sources(self) -> list[dict]:
        """Every source of every item, once, in order of appearance."""
        seen, out = set(), []
        for items in (self.entities, self.relations, self.community_reports, self.chunks):
            for item in items:
                for src in item.get("sources", []):
                    key = (src["doc"], src.get("chunk"))
                    if key not in seen:
                        seen.add(key)
                        out.append(src)
        return out


def cite(source: dict) -> str:
    """A source as the context writes it and the answer should cite it."""
    if source.get("chunk") is None:
        return f"[doc: {source['doc']}]"
    pages = f", p. {source['pages']}" if source.get("pages") else ""
    return f"[doc: {source['doc']}, chunk {source['chunk']}{pages}]"


def citations(text: str) -> list[tuple[str, int | None]]:
    """The (document, chunk number or None) pairs cited in `text` in the `cite` format."""
    return [(m.group(1), int(m.group(2)) if m.group(2) else None) for m in _CITATION.finditer(text or "")]


def page_range(start: int | None, end: int | None) -> str | None:
    """Pages as a person cites them: "3", "3-4"; None without pages."""
    if start is None:
        return None
    return str(start) if end in (None, start) else f"{start}-{end}"


def page_fields(row: dict) -> dict:
    """A chunk's ``pages`` ("3-4": the pages of a PDF, slides of a PPTX) and ``section`` (an XLSX
    sheet, a DOCX heading), each only when it has one."""
    out = {}
    pages = page_range(row.get("page_start"), row.get("page_end"))
    if pages:
        out["pages"] = pages
    if row.get("section"):
        out["section"] = row["section"]
    return out


def _chunk_source(row: dict) -> dict:
    """A chunk as a source, with its pages and section where it has them."""
    return {"doc": row["doc"], "chunk": int(row["position"]) + 1, "chunk_id": row["chunk_id"], **page_fields(row)}


def _report_sources(row: dict) -> list[dict]:
    return [{"doc": d, "chunk": None, "chunk_id": None} for d in row.get("documents") or []]


def _source_lookup(items: list[tuple[list[str], list[str] | None]]) -> list[str]:
    """The chunk ids `_locate` needs of the chunks_by_ids lookup, for (chunk ids, document keys) items."""
    return sorted({cid for ids, _ in items for cid in (ids or [])[:_SOURCE_LOOKUP]})


def _locate(chunk_rows: list[dict], items: list[tuple[list[str], list[str] | None]]) -> list[list[dict]]:
    """For each (chunk ids, allowed document keys or None) the located chunk rows (from
    `chunk_rows`, the chunks_by_ids rows of `_source_lookup(items)`), ordered by document and position."""
    by_id: dict[str, list[dict]] = defaultdict(list)
    for row in chunk_rows:
        by_id[row["chunk_id"]].append(row)
    out = []
    for ids, docs in items:
        allowed = set(docs) if docs else None
        rows = [
            r
            for cid in (ids or [])[:_SOURCE_LOOKUP]
            for r in by_id.get(cid, [])
            if allowed is None or r["doc_id"] in allowed
        ]
        out.append(sorted(rows, key=lambda r: (r["doc"], r["position"], r["chunk_id"])))
    return out


@dataclass
class QueryAnalysis:
    """What the question asks for: answer types and the entities it names."""

    answer_types: list[str]
    entities: list[str]


def analyze_question(question: str, type_pool: dict[str, list[str]]) -> QueryAnalysis:
    """Offline query analysis: named phrases via the fast extractor; types from question words."""
    from graphrag_pipeline.extract.offline import extract_fast

    names = [e.name for e in extract_fast(question, "query").entities]
    names += [
        q
        for q in re.findall(r"[\"\u201c\u300c\u300a]([^\"\u201d\u300d\u300b]{2,60})[\"\u201d\u300d\u300b]", question)
        if q not in names
    ]
    words = set(re.findall(r"\w+", question.casefold()))
    types = []
    for t in type_pool:
        hints = _TYPE_HINTS.get(t, ())
        if t.casefold() in words or any((h in words) if h.isascii() else (h in question) for h in hints):
            types.append(t)
    return QueryAnalysis(types[:3], names[:5] or [question])


def _fit(rows: list[dict], render, budget: int) -> tuple[list[dict], int]:
    kept = []
    for row in rows:
        n = count_tokens(render(row))
        if n > budget:
            break
        kept.append(row)
        budget -= n
    return kept, budget


def analyze_question_llm(client: ChatClient, question: str, type_pool: dict[str, list[str]]) -> QueryAnalysis | None:
    """The seeds' query rewrite: answer types from the index's type pool and entities named in the question."""
    import json

    from graphrag_pipeline.llm import prompts
    from graphrag_pipeline.llm.json_answers import parse_json_reply

    pool_text = json.dumps({t: e[:5] for t, e in type_pool.items()}, ensure_ascii=False, indent=1)
    answer = client.chat(
        [{"role": "user", "content": prompts.QUERY_REWRITE.format(type_pool=pool_text, question=question)}]
    ).text
    data = parse_json_reply(answer)
    if not isinstance(data, dict):  # unparsable or not an object: offline analysis instead
        return None
    by_fold = {t.casefold(): t for t in type_pool}
    types = [by_fold[str(t).casefold()] for t in data.get("answer_type_keywords") or [] if str(t).casefold() in by_fold]
    ents = [str(e).strip() for e in data.get("entities_from_query") or [] if str(e).strip()]
    if not ents and not types:
        return None
    return QueryAnalysis(types[:3], ents[:5] or [question])


@dataclass
class _Recall:
    """What `_graph_recall` found: the ranked entities and relations (before the token budget), the
    analysis, the community reports of all ranked entities, and the results of the extra calls."""

    entities: list[dict]
    relations: list[dict]
    analysis: QueryAnalysis
    reports: list[dict]
    also: list


def _graph_recall(
    index: SearchIndex,
    question: str,
    p: SearchParams,
    analysis: QueryAnalysis | None,
    client: QueryClient | None,
    also: list[tuple] = (),
) -> _Recall:
    """KGSearch. Index calls that do not depend on each other go in one `index.batch` (one request
    to Elasticsearch): the entity and relation recall; the type recall and the n-hop relations; the
    sources of the ranked items, the community reports of the ranked entities and the `also` calls."""
    embedder = index.embedder(client)
    if analysis is None and client is not None:
        from graphrag_pipeline.llm.client import LLMCancelled, LLMError

        try:
            analysis = analyze_question_llm(client, question, index.type_pool())
        except LLMCancelled:
            raise
        except LLMError as exc:  # the endpoint is down or refuses: searched with the offline analysis
            log.warning("the question was analysed offline: %s", exc)
    analysis = analysis or analyze_question(question, index.type_pool())

    ent_vec = embedder.embed_one(", ".join(analysis.entities))
    ent_rows, rel_rows = index.batch(
        [
            (index.entities_by_vector, (ent_vec, p.ent_candidates, p.ent_sim_threshold)),
            (index.relations_by_vector, (embedder.embed_one(question), p.rel_candidates, p.rel_sim_threshold)),
        ]
    )
    ents = {r["key"]: dict(r) for r in ent_rows}
    rels = {(r["source_key"], r["target_key"]): dict(r) for r in rel_rows}
    for r in rels.values():
        r["pagerank"] = r["weight"]

    # n-hop paths from the recalled entities, similarity decaying with distance
    nhop: dict[tuple[str, str], dict] = defaultdict(lambda: {"sim": 0.0})
    # by entity (a stable sort keeps each entity's path order), so the sums are the same whatever
    # order a backend returns the entities in
    for row in sorted(index.nhop(list(ents)), key=lambda r: r["entity_key"]):
        sim = ents[row["entity_key"]]["sim"]
        path = row["path"]
        for i in range(len(path) - 1):
            pair = tuple(sorted((path[i], path[i + 1])))
            nhop[pair]["sim"] += sim / (2 + i)

    # type recall: the top entities (by PageRank) of the answer types; only membership matters
    candidates = set(ents) | {k for pair in rels for k in pair} | {k for pair in nhop for k in pair}
    # with the relations of the n-hop pairs that relation recall did not find
    type_keys, pair_rows = index.batch(
        [
            (index.keys_of_types, (analysis.answer_types, sorted(candidates), 10000)),
            (index.relations_by_pairs, ([pair for pair in nhop if pair not in rels],)),
        ]
    )
    for key in type_keys & set(ents):
        ents[key]["sim"] *= 2
    for pair, r in rels.items():
        boost = nhop.pop(pair, {"sim": 0.0})["sim"] + (pair[0] in type_keys) + (pair[1] in type_keys)
        r["sim"] *= boost + 1
    if nhop:
        found = {(r["source_key"], r["target_key"]): r for r in pair_rows}
        for pair, hop in nhop.items():
            if pair in found:
                r = dict(found[pair])
                r["sim"] = hop["sim"] * (1 + (pair[0] in type_keys) + (pair[1] in type_keys))
                r["pagerank"] = r["weight"]  # the edge's weight, as for a relation recalled by text
                rels[pair] = r

    ent_rank = sorted(ents.values(), key=lambda e: (-e["sim"] * e["pagerank"], e["key"]))[: p.ent_topn]
    rel_rank = sorted(rels.values(), key=lambda r: (-r["sim"] * r["pagerank"], r["source_key"], r["target_key"]))[
        : p.rel_topn
    ]
    # where they come from (one lookup for all of them), with the reports of the ranked entities
    items = [(e["source_ids"], e["doc_ids"]) for e in ent_rank] + [(r["source_ids"], None) for r in rel_rank]
    chunk_rows, reports, *also_results = index.batch(
        [
            (index.chunks_by_ids, (_source_lookup(items),)),
            (index.reports_for_entities, ([e["key"] for e in ent_rank], p.comm_topn)),
            *also,
        ]
    )
    for item, rows in zip(ent_rank + rel_rank, _locate(chunk_rows, items)):
        item["located"] = rows
        item["sources"] = [_chunk_source(r) for r in rows[:MAX_SOURCES]]
    return _Recall(ent_rank, rel_rank, analysis, reports, also_results)


def _entity_reports(index: SearchIndex, recall: _Recall, kept: list[dict], k: int) -> list[dict]:
    """The k community reports of the entities kept in the budget: those `_graph_recall` found when
    the budget kept all ranked entities, else asked again."""
    keys = [e["key"] for e in kept]
    rows = recall.reports if keys == [e["key"] for e in recall.entities] else index.reports_for_entities(keys, k)
    return [{**c, "sources": _report_sources(c)} for c in rows]


def _bounded(item: dict) -> dict:
    """`item` with its description cut to DESCRIPTION_MAX_TOKENS tokens (ending in "…" when cut)."""
    text, _ = head_tokens(item.get("description") or "", DESCRIPTION_MAX_TOKENS)
    if text == (item.get("description") or ""):
        return item
    return {**item, "description": text.rstrip() + " …"}


def _graph_budget(recall: _Recall, budget: int) -> tuple[list[dict], list[dict], int]:
    """The ranked entities and relations that fit in `budget` (descriptions bounded), and what is left."""
    entities, budget = _fit([_bounded(e) for e in recall.entities], _entity_line, budget)
    relations, budget = _fit([_bounded(r) for r in recall.relations], _relation_line, budget)
    return entities, relations, budget


def _entity_line(e: dict) -> str:
    return f"{e['name']},{e['type']},{_one_line(e['description'])},{_cites(e)}"


def _relation_line(r: dict) -> str:
    return f"{r['source']},{r['target']},{_one_line(r['description'])},{_cites(r)}"


def _report_block(c: dict) -> str:
    return c["text"] + ("\nSources: " + " ".join(map(cite, c["sources"])) if c.get("sources") else "")


def _chunk_block(c: dict) -> str:
    return f"{cite(c['sources'][0])}\n{c['text']}"


def _cites(item: dict) -> str:
    return " ".join(cite(s) for s in item.get("sources", []))


def _entity_item(e: dict) -> dict:
    return {
        "name": e["name"],
        "type": e["type"],
        "description": e["description"],
        "score": e["sim"] * e["pagerank"],
        "sources": e["sources"],
    }


def _relation_item(r: dict) -> dict:
    return {
        "source": r["source"],
        "target": r["target"],
        "description": r["description"],
        "score": r["sim"] * r["pagerank"],
        "sources": r["sources"],
    }


def _report_item(c: dict, score: float | None = None) -> dict:
    item = {"title": c["title"], "summary": c["summary"], "rating": c["rating"], "level": c["level"]}
    if score is not None:
        item["score"] = score
    item["sources"] = c["sources"]
    return item


def _chunk_item(c: dict, score: float, via: str | None = None) -> dict:
    item = {
        "doc": c["doc"],
        "chunk": int(c["position"]) + 1,
        "chunk_id": c["chunk_id"],
        "text": c["text"],
        "score": score,
    }
    if via:
        item["via"] = via
    item["sources"] = [_chunk_source(c)]
    return item


def local_search(
    index: SearchIndex,
    question: str,
    params: SearchParams | None = None,
    analysis: QueryAnalysis | None = None,
    client: QueryClient | None = None,
) -> QueryResult:
    p = params or SearchParams()
    recall = _graph_recall(index, question, p, analysis, client)
    analysis = recall.analysis
    ent_rank, rel_rank, budget = _graph_budget(recall, p.max_tokens)
    reports, budget = _fit(_entity_reports(index, recall, ent_rank, p.comm_topn), _report_block, budget)
    result = QueryResult(
        mode="local",
        entities=[_entity_item(e) for e in ent_rank],
        relations=[_relation_item(r) for r in rel_rank],
        community_reports=[_report_item(c) for c in reports],
        analysis=asdict(analysis),
    )
    result.context = _context(result, reports)
    return result


def mix_search(
    index: SearchIndex,
    question: str,
    params: SearchParams | None = None,
    analysis: QueryAnalysis | None = None,
    client: QueryClient | None = None,
) -> QueryResult:
    """Local search's entities and relations, then source chunks: the chunks most cited by the hit
    entities and relations (an item's weight is 1 / its rank) interleaved with the chunks most
    similar to the question, and the top community report, all in one token budget (the report
    is fitted first in up to half of what the entities and relations leave, the chunks in the rest;
    a report larger than that half is fitted in what the chunks leave)."""
    p = params or SearchParams()
    # the chunks most similar to the question come with the graph's sources
    question_vec = index.embedder(client).embed_one(question)
    recall = _graph_recall(
        index, question, p, analysis, client, also=[(index.chunks_by_vector, (question_vec, p.chunk_topn))]
    )
    analysis = recall.analysis
    ent_rank, rel_rank, budget = _graph_budget(recall, p.max_tokens)

    weight: dict[tuple[str, str], float] = defaultdict(float)
    for ranked in (ent_rank, rel_rank):
        for i, item in enumerate(ranked):
            for row in item["located"]:
                weight[(row["chunk_id"], row["doc_id"])] += 1.0 / (i + 1)
    graph_keys = sorted(weight, key=lambda k: (-weight[k], k))[: p.chunk_topn]
    texts = {
        (r["chunk_id"], r["doc_id"]): r for r in index.chunks_by_ids(sorted({cid for cid, _ in graph_keys}), text=True)
    }
    by_graph = [(texts[k], round(weight[k], 6)) for k in graph_keys if k in texts]
    by_sim = [(c, c["sim"]) for c in recall.also[0]]
    sim_keys = {(c["chunk_id"], c["doc_id"]) for c, _ in by_sim}
    graph_keys_set = {(c["chunk_id"], c["doc_id"]) for c, _ in by_graph}
    chunks, seen = [], set()
    for i in range(max(len(by_sim), len(by_graph))):
        for source, lst in (("similarity", by_sim), ("graph", by_graph)):
            if i < len(lst):
                c, score = lst[i]
                key = (c["chunk_id"], c["doc_id"])
                if key in seen:
                    continue
                seen.add(key)
                via = "both" if key in sim_keys and key in graph_keys_set else source
                chunks.append(_chunk_item(c, score, via))
    # the top report is fitted before the chunks, in at most half of what is left: chunks fill any
    # budget (large chunks took all of it, and mix answered without the report it promises)
    # (a report larger than that half is tried again in what the chunks leave)
    ranked_reports = _entity_reports(index, recall, ent_rank, p.comm_topn)
    half = budget // 2
    reports, unused = _fit(ranked_reports, _report_block, half)
    chunks, budget = _fit(chunks, _chunk_block, budget - (half - unused))
    if not reports:
        reports, budget = _fit(ranked_reports, _report_block, budget)
    result = QueryResult(
        mode="mix",
        entities=[_entity_item(e) for e in ent_rank],
        relations=[_relation_item(r) for r in rel_rank],
        community_reports=[_report_item(c) for c in reports],
        chunks=chunks,
        analysis=asdict(analysis),
    )
    result.context = _context(result, reports)
    return result


def global_search(
    index: SearchIndex, question: str, params: SearchParams | None = None, client: QueryClient | None = None
) -> QueryResult:
    """The most important community reports: the broadest level first, then the highest rating and
    community weight; similarity to the question breaks ties."""
    p = params or SearchParams()
    vec = index.embedder(client).embed_one(question)
    rows = [{**c, "sources": _report_sources(c)} for c in index.reports_by_importance(vec, p.global_topn)]
    rows, _ = _fit(rows, _report_block, p.max_tokens)
    result = QueryResult(mode="global", community_reports=[_report_item(c, c["sim"]) for c in rows])
    result.context = _context(result, rows)
    return result


def naive_search(
    index: SearchIndex, question: str, params: SearchParams | None = None, client: QueryClient | None = None
) -> QueryResult:
    p = params or SearchParams()
    vec = index.embedder(client).embed_one(question)
    rows = [_chunk_item(c, c["sim"]) for c in index.chunks_by_vector(vec, p.chunk_topn)]
    rows, _ = _fit(rows, _chunk_block, p.max_tokens)
    result = QueryResult(mode="naive", chunks=rows)
    result.context = _context(result, [])
    return result


def query(
    index: SearchIndex,
    question: str,
    mode: str = DEFAULT_MODE,
    params: SearchParams | None = None,
    client: QueryClient | None = None,
    answer: bool = False,
) -> QueryResult:
    """Retrieve for `question`; with a client, the query is rewritten by the LLM (local mode) and,
    with answer=True, an answer is generated (global mode: map-reduce over community reports)."""
    if not question or not question.strip():
        raise ValueError("the question is empty")
    lease = getattr(index, "lease", None)
    if lease is not None:  # a LiveIndex: the whole query reads one published version
        with lease() as version:
            return query(version, question, mode, params, client, answer)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    p = params or SearchParams()
    if mode == "global" and answer and client is not None:
        p = SearchParams(**{**p.__dict__, "global_topn": max(p.global_topn, p.global_map_topn)})
    search = {"mix": mix_search, "local": local_search, "global": global_search, "naive": naive_search}[mode]
    result = search(index, question, p, client=client)
    if answer and client is not None and mode == "global":
        result.answer = global_answer(client, index, result, question, p)
    elif answer and client is not None and result.context.strip():
        result.answer = local_answer(client, result, question)
    # nothing retrieved (or no context fits max_tokens): no call is paid for an answer from nothing
    return result


def local_answer(client: ChatClient, result: QueryResult, question: str) -> str:
    from graphrag_pipeline.llm import prompts

    return client.chat(
        [
            {
                "role": "user",
                "content": prompts.LOCAL_ANSWER.format(
                    context=result.context or "(no context found)", question=question
                ),
            }
        ]
    ).text.strip()


def global_answer(
    client: QueryClient, index: SearchIndex, result: QueryResult, question: str, params: SearchParams
) -> str:
    """Map: each report yields scored points; points scoring 0 are dropped. Reduce: one answer."""
    from graphrag_pipeline.llm import prompts
    from graphrag_pipeline.llm.json_answers import parse_json_reply

    reports = [
        {**r, "sources": _report_sources(r)}
        for r in index.reports_by_importance(index.embedder(client).embed_one(question), params.global_map_topn)
    ]
    calls = [
        {"messages": [{"role": "user", "content": prompts.GLOBAL_MAP.format(report=r["text"], question=question)}]}
        for r in reports
    ]
    points = []
    answers = client.chat_many(calls)
    failed = [res for res in answers if isinstance(res, Exception)]
    if failed and len(failed) == len(answers):
        # no report was read: "nothing answers this question" would be an answer made up
        raise failed[0]
    if failed:
        log.warning(
            "%d of %d map calls of the global answer failed (first: %s): the answer is written from the others",
            len(failed),
            len(answers),
            failed[0],
        )
    for report, res in zip(reports, answers):
        if isinstance(res, Exception):
            continue
        data = parse_json_reply(res.text)  # an unparsable map answer (None) contributes nothing
        items = data.get("points", []) if isinstance(data, dict) else data if isinstance(data, list) else []
        for item in items:
            if not isinstance(item, dict):
                continue
            try:
                score = float(item.get("score", 0))
            except (TypeError, ValueError):
                score = 0.0
            text = str(item.get("description", "")).strip()
            if score > params.global_min_score and text:
                points.append((score, report["title"], text, _cites(report)))
    points.sort(key=lambda x: -x[0])
    if not points:
        return "The community reports contain nothing that answers this question."
    listing = "\n".join(f"- [{t}] (importance {s:g}) {d} Sources: {c}" for s, t, d, c in points)
    listing = truncate_tokens(listing, params.max_tokens)
    return client.chat(
        [{"role": "user", "content": prompts.GLOBAL_REDUCE.format(points=listing, question=question)}]
    ).text.strip()


def _context(result: QueryResult, report_rows: list[dict]) -> str:
    """The text the answer is written from; every item with its sources in the `cite` format."""
    parts = []
    if result.entities:
        parts.append(
            "-----Entities-----\nentity,type,description,sources\n"
            + "\n".join(_entity_line(e) for e in result.entities)
        )
    if result.relations:
        parts.append(
            "-----Relations-----\nsource,target,description,sources\n"
            + "\n".join(_relation_line(r) for r in result.relations)
        )
    if report_rows:
        parts.append("-----Community Reports-----\n" + "\n\n".join(_report_block(c) for c in report_rows))
    if result.chunks:
        parts.append("-----Sources-----\n" + "\n\n".join(_chunk_block(c) for c in result.chunks))
    return "\n\n".join(parts)


def _one_line(text: str) -> str:
    return " ".join((text or "").split())
