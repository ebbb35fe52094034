"""Local, global and naive search over the published index.

Local search follows RAGFlow's KGSearch: entity recall by embedding similarity of the query's
entities, type recall from the query's answer types, relation recall by embedding similarity of the
question, n-hop paths whose similarity decays by 1/(2+i) along the path, ranking by similarity x
PageRank (x edge weight for relations), a token budget, and the best community report of the hit
entities. Global search ranks community reports for the question. Naive search ranks chunks.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from graphrag_pipeline.index.protocol import SearchIndex
from graphrag_pipeline.ingest.tokens import count_tokens, truncate_tokens
from graphrag_pipeline.llm.protocol import ChatClient, QueryClient

MODES = ("local", "global", "naive")

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


def local_search(
    index: SearchIndex,
    question: str,
    params: SearchParams | None = None,
    analysis: QueryAnalysis | None = None,
    client: QueryClient | None = None,
) -> QueryResult:
    p = params or SearchParams()
    embedder = index.embedder(client)
    if analysis is None and client is not None:
        analysis = analyze_question_llm(client, question, index.type_pool())
    analysis = analysis or analyze_question(question, index.type_pool())

    ent_vec = embedder.embed_one(", ".join(analysis.entities))
    ents = {r["key"]: dict(r) for r in index.entities_by_vector(ent_vec, p.ent_candidates, p.ent_sim_threshold)}
    rels = {
        (r["source_key"], r["target_key"]): dict(r)
        for r in index.relations_by_vector(embedder.embed_one(question), p.rel_candidates, p.rel_sim_threshold)
    }
    for r in rels.values():
        r["pagerank"] = r["weight"]

    # n-hop paths from the recalled entities, similarity decaying with distance
    nhop: dict[tuple[str, str], dict] = defaultdict(lambda: {"sim": 0.0, "pagerank": 0.0})
    for row in index.nhop(list(ents)):
        sim = ents[row["entity_key"]]["sim"]
        path, weights = row["path"], row["weights"]
        for i in range(len(path) - 1):
            pair = tuple(sorted((path[i], path[i + 1])))
            nhop[pair]["sim"] += sim / (2 + i)
            nhop[pair]["pagerank"] = weights[i]

    # type recall: the top entities (by PageRank) of the answer types; only membership matters
    candidates = set(ents) | {k for pair in rels for k in pair} | {k for pair in nhop for k in pair}
    type_keys = index.keys_of_types(analysis.answer_types, sorted(candidates), 10000)
    for key in type_keys & set(ents):
        ents[key]["sim"] *= 2
    for pair, r in rels.items():
        boost = nhop.pop(pair, {"sim": 0.0})["sim"] + (pair[0] in type_keys) + (pair[1] in type_keys)
        r["sim"] *= boost + 1
    if nhop:
        found = {(r["source_key"], r["target_key"]): r for r in index.relations_by_pairs(list(nhop))}
        for pair, hop in nhop.items():
            if pair in found:
                r = dict(found[pair])
                r["sim"] = hop["sim"] * (1 + (pair[0] in type_keys) + (pair[1] in type_keys))
                r["pagerank"] = hop["pagerank"]
                rels[pair] = r

    ent_rank = sorted(ents.values(), key=lambda e: (-e["sim"] * e["pagerank"], e["key"]))[: p.ent_topn]
    rel_rank = sorted(rels.values(), key=lambda r: (-r["sim"] * r["pagerank"], r["source_key"], r["target_key"]))[
        : p.rel_topn
    ]

    budget = p.max_tokens
    ent_rank, budget = _fit(ent_rank, lambda e: f"{e['name']},{e['type']},{e['description']}", budget)
    rel_rank, budget = _fit(rel_rank, lambda r: f"{r['source']},{r['target']},{r['description']}", budget)
    reports = index.reports_for_entities([e["key"] for e in ent_rank], p.comm_topn)
    reports, budget = _fit(reports, lambda c: c["text"], budget)

    result = QueryResult(
        mode="local",
        entities=[
            {"name": e["name"], "type": e["type"], "description": e["description"], "score": e["sim"] * e["pagerank"]}
            for e in ent_rank
        ],
        relations=[
            {
                "source": r["source"],
                "target": r["target"],
                "description": r["description"],
                "score": r["sim"] * r["pagerank"],
            }
            for r in rel_rank
        ],
        community_reports=[{"title": c["title"], "summary": c["summary"], "rating": c["rating"]} for c in reports],
        analysis=asdict(analysis),
    )
    result.context = _context(result, reports)
    return result


def global_search(
    index: SearchIndex, question: str, params: SearchParams | None = None, client: QueryClient | None = None
) -> QueryResult:
    """Community reports ranked by similarity to the question (ties: higher rating first)."""
    p = params or SearchParams()
    vec = index.embedder(client).embed_one(question)
    rows = index.reports_by_vector(vec, p.global_topn)
    rows, _ = _fit(rows, lambda c: c["text"], p.max_tokens)
    result = QueryResult(
        mode="global",
        community_reports=[
            {"title": c["title"], "summary": c["summary"], "rating": c["rating"], "score": c["sim"]} for c in rows
        ],
    )
    result.context = _context(result, rows)
    return result


def naive_search(
    index: SearchIndex, question: str, params: SearchParams | None = None, client: QueryClient | None = None
) -> QueryResult:
    p = params or SearchParams()
    vec = index.embedder(client).embed_one(question)
    rows = index.chunks_by_vector(vec, p.chunk_topn)
    rows, _ = _fit(rows, lambda c: c["text"], p.max_tokens)
    result = QueryResult(mode="naive", chunks=[{"doc": c["doc"], "text": c["text"], "score": c["sim"]} for c in rows])
    result.context = _context(result, [])
    return result


def query(
    index: SearchIndex,
    question: str,
    mode: str = "local",
    params: SearchParams | None = None,
    client: QueryClient | None = None,
    answer: bool = False,
) -> QueryResult:
    """Retrieve for `question`; with a client, the query is rewritten by the LLM (local mode) and,
    with answer=True, an answer is generated (global mode: map-reduce over community reports)."""
    if not question or not question.strip():
        raise ValueError("the question is empty")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    p = params or SearchParams()
    if mode == "global" and answer and client is not None:
        p = SearchParams(**{**p.__dict__, "global_topn": max(p.global_topn, p.global_map_topn)})
    result = {"local": local_search, "global": global_search, "naive": naive_search}[mode](
        index, question, p, client=client
    )
    if answer and client is not None:
        result.answer = (
            global_answer(client, index, result, question, p)
            if mode == "global"
            else local_answer(client, result, question)
        )
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

    reports = [r for r in index.reports_by_vector(index.embedder(client).embed_one(question), params.global_map_topn)]
    calls = [
        {"messages": [{"role": "user", "content": prompts.GLOBAL_MAP.format(report=r["text"], question=question)}]}
        for r in reports
    ]
    points = []
    for report, res in zip(reports, client.chat_many(calls)):
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
                points.append((score, report["title"], text))
    points.sort(key=lambda x: -x[0])
    if not points:
        return "The community reports contain nothing that answers this question."
    listing = "\n".join(f"- [{t}] (importance {s:g}) {d}" for s, t, d in points)
    listing = truncate_tokens(listing, params.max_tokens)
    return client.chat(
        [{"role": "user", "content": prompts.GLOBAL_REDUCE.format(points=listing, question=question)}]
    ).text.strip()


def _context(result: QueryResult, report_rows: list[dict]) -> str:
    parts = []
    if result.entities:
        parts.append(
            "-----Entities-----\nentity,type,description\n"
            + "\n".join(f"{e['name']},{e['type']},{_one_line(e['description'])}" for e in result.entities)
        )
    if result.relations:
        parts.append(
            "-----Relations-----\nsource,target,description\n"
            + "\n".join(f"{r['source']},{r['target']},{_one_line(r['description'])}" for r in result.relations)
        )
    if report_rows:
        parts.append("-----Community Reports-----\n" + "\n\n".join(c["text"] for c in report_rows))
    if result.chunks:
        parts.append("-----Sources-----\n" + "\n\n".join(f"[{c['doc']}]\n{c['text']}" for c in result.chunks))
    return "\n\n".join(parts)


def _one_line(text: str) -> str:
    return " ".join((text or "").split())
