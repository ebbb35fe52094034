"""Community reports written by an LLM, with the extractive report as the fallback.

Context packing (``pack_community_context``)
    The prompt's data are two CSV tables (written with the csv module; descriptions flattened to
    one line):
      entities  ``id,entity,type,description,degree``   most connected first (degree desc,
                pagerank desc, key)
      relations ``id,source,target,description,weight`` the edges inside the community, ordered
                by the combined degree of their endpoints desc, then weight desc (then keys)
    ``id`` is the row's rank in that full ordering. ``max_tokens`` bounds the three prompt pieces
    (entities, relations, sub-reports; ``count_tokens`` of each, summed), not the prompt's fixed
    text. Rows are taken alternately from the two tables, each table in its order, while the
    running count stays within the budget; a table stops at its first row that does not fit, so
    each table is a prefix of its ordering (the most connected entities and relations are kept).
    The two header lines are always written.

    Sub-community substitution: when the full tables do not fit and ``children`` (ids of the
    sub-communities) have reports in ``sub_reports``, the sub-reports' texts (``report.text()``,
    biggest sub-community first, i.e. most ``report.entities``) are included as long as they fit
    in half the budget (one that does not fit is skipped, a smaller one may still fit), under the
    heading "Reports of sub-communities". The rest of the budget is filled as above with the
    entities that are not members of an included sub-community and the relations that do not lie
    inside one included sub-community (relations between two sub-communities are kept: no report
    describes them). Members are matched to a sub-report by display name. When no sub-report fits,
    the plain tables are packed. Without substitution ``sub_reports`` text is "".

Parsing (``parse_report_json``)
    Code fences and chatter around the object are dropped; the JSON is read with ``json_repair``
    (trailing commas, single quotes, unquoted keys, truncation). Keys are matched ignoring case and
    ``_``/``-``/blanks. A valid answer is a JSON object with a non-empty string ``title`` and a
    string ``summary``; ``rating_explanation`` defaults to ""; ``findings`` is a list of
    ``{summary, explanation}`` (a plain string item is a summary with an empty explanation; items
    without a summary are dropped; at most 10). ``rating`` accepts numbers and strings holding
    one ("7.5", "7/10", "4 out of 5" -> 8, "80%" -> 8), clamped to [0, 10].

    Decision on non-numeric ratings: a rating from which no number can be read ("high", missing,
    a list) does NOT make the report invalid - title, summary and findings are still good. The
    parsed dict then has ``rating: None`` and ``llm_report`` uses 10 x the community's weight (the
    extractive rating), saying so in ``rating_explanation``.

Retries and fallback (``llm_report``)
    One user message, ``temperature=0.0`` and no ``response_format`` (many local endpoints reject
    it). An invalid answer is asked again, up to ``max_attempts`` calls in all; every call after
    the first passes ``use_cache=False`` so a cached bad answer is not served again. If no answer
    is valid, the extractive report is returned with ``fallback=True``; its summary (which keeps
    ``EXTRACTIVE_NOTE``) and rating explanation say that the LLM report could not be parsed and
    that this extractive report replaces it. ``LLMError`` from the client propagates.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

import polars as pl

from graphrag_pipeline.ingest.tokens import count_tokens
from graphrag_pipeline.llm import prompts
from graphrag_pipeline.llm.json_answers import load_json
from graphrag_pipeline.llm.protocol import ChatClient
from graphrag_pipeline.reports.offline import (
    EXTRACTIVE_NOTE,
    CommunityReport,
    Finding,
    community_subgraph,
    extractive_report,
)

__all__ = [
    "LLM_FALLBACK_NOTE",
    "MAX_FINDINGS",
    "ReportOutcome",
    "SUB_REPORTS_HEADING",
    "llm_report",
    "pack_community_context",
    "parse_report_json",
]

MAX_FINDINGS = 10
SUB_REPORTS_HEADING = "Reports of sub-communities"
ENTITY_HEADER = ("id", "entity", "type", "description", "degree")
RELATION_HEADER = ("id", "source", "target", "description", "weight")
LLM_FALLBACK_NOTE = "The LLM report could not be parsed; this extractive report replaces it."
DEFAULT_RATING_NOTE = "The model gave no numeric rating; the rating is 10 x the community's weight."


@dataclass
class ReportOutcome:
    report: CommunityReport
    fallback: bool  # True when the LLM answer could not be used and the extractive report was returned
    error: str = ""
    attempts: int = 0  # chat calls made
    raw: str = ""  # the last answer when it could not be used (for inspection), else ""


# -- context packing ----------------------------------------------------------------------------------


def _flat(value) -> str:
    """One line: every run of whitespace (newlines included) becomes one blank."""
    return " ".join(str(value if value is not None else "").split())


def _csv_line(values) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue().rstrip("\n")


def _weight_text(value) -> str:
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return ""


@dataclass
class _Row:
    line: str
    tokens: int
    keys: tuple[str, ...]  # entity: (key,); relation: (source_key, target_key)


def _ordered_rows(
    members: list[str], nodes: pl.DataFrame, edges: pl.DataFrame
) -> tuple[list[_Row], list[_Row], dict[str, str]]:
    """All entity rows and relation rows of the community, in packing order, and key -> name."""
    sub_nodes, sub_edges = community_subgraph(members, nodes, edges)
    degree = dict(zip(sub_nodes["key"].to_list(), sub_nodes["degree"].to_list()))
    names = dict(zip(sub_nodes["key"].to_list(), sub_nodes["name"].to_list()))
    entity_rows = []
    for i, n in enumerate(sub_nodes.select("key", "name", "type", "description", "degree").iter_rows()):
        key, name, etype, description, deg = n
        line = _csv_line([i, _flat(name), _flat(etype), _flat(description), int(deg or 0)])
        entity_rows.append(_Row(line, count_tokens(line + "\n"), (key,)))
    rels = sub_edges.select("source_key", "target_key", "source", "target", "description", "weight").rows()
    rels.sort(key=lambda r: (-((degree.get(r[0]) or 0) + (degree.get(r[1]) or 0)), -(r[5] or 0.0), r[0], r[1]))
    relation_rows = []
    for i, (sk, tk, source, target, description, weight) in enumerate(rels):
        line = _csv_line([i, _flat(source), _flat(target), _flat(description), _weight_text(weight)])
        relation_rows.append(_Row(line, count_tokens(line + "\n"), (sk, tk)))
    return entity_rows, relation_rows, names


def _table(header, rows: list[_Row]) -> str:
    return "\n".join([_csv_line(header)] + [r.line for r in rows])


def _pack_tables(entity_rows: list[_Row], relation_rows: list[_Row], budget: int) -> tuple[str, str]:
    """Prefixes of both row lists, taken alternately, whose tables count at most ``budget`` tokens."""
    tables = [entity_rows, relation_rows]
    taken = [0, 0]
    order: list[int] = []
    used = count_tokens(_table(ENTITY_HEADER, [])) + count_tokens(_table(RELATION_HEADER, []))
    active = [True, True]
    while any(active):
        for i, rows in enumerate(tables):
            if not active[i]:
                continue
            if taken[i] >= len(rows) or used + rows[taken[i]].tokens > budget:
                active[i] = False
                continue
            used += rows[taken[i]].tokens
            taken[i] += 1
            order.append(i)

    def render() -> tuple[str, str]:
        return _table(ENTITY_HEADER, entity_rows[: taken[0]]), _table(RELATION_HEADER, relation_rows[: taken[1]])

    ent, rel = render()
    # per-row counts are a close estimate of the joined text's count; make the bound exact
    while order and count_tokens(ent) + count_tokens(rel) > budget:
        taken[order.pop()] -= 1
        ent, rel = render()
    return ent, rel


def _sub_reports_text(texts: list[str]) -> str:
    return f"\n{SUB_REPORTS_HEADING}\n\n" + "\n\n".join(texts) + "\n" if texts else ""


def fits_budget(community: dict, nodes: pl.DataFrame, edges: pl.DataFrame, max_tokens: int = 12000) -> bool:
    """Whether the community's whole entity and relation tables fit in the prompt budget
    (if not, its report is better written after the reports of its sub-communities)."""
    entity_rows, relation_rows, _ = _ordered_rows(list(community["nodes"]), nodes, edges)
    return (
        count_tokens(_table(ENTITY_HEADER, entity_rows)) + count_tokens(_table(RELATION_HEADER, relation_rows))
        <= max_tokens
    )


def pack_community_context(
    community: dict,
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    *,
    max_tokens: int = 12000,
    sub_reports: dict[str, CommunityReport] | None = None,
    children: list[str] | None = None,
) -> tuple[str, str, str]:
    """(entities_csv, relations_csv, sub_reports_text) for the prompt, within max_tokens."""
    entity_rows, relation_rows, names = _ordered_rows(list(community["nodes"]), nodes, edges)
    full_ent, full_rel = _table(ENTITY_HEADER, entity_rows), _table(RELATION_HEADER, relation_rows)
    if count_tokens(full_ent) + count_tokens(full_rel) <= max_tokens:
        return full_ent, full_rel, ""

    candidates = [
        (cid, sub_reports[cid]) for cid in dict.fromkeys(children or []) if sub_reports and cid in sub_reports
    ]
    if candidates:
        candidates.sort(key=lambda c: (-len(c[1].entities), c[0]))
        half = max_tokens // 2
        texts: list[str] = []
        included: list[CommunityReport] = []
        for _, report in candidates:
            text = report.text()
            if count_tokens(_sub_reports_text(texts + [text])) <= half:
                texts.append(text)
                included.append(report)
        if included:
            sub_text = _sub_reports_text(texts)
            keys_by_name: dict[str, list[str]] = {}
            for key, name in names.items():
                keys_by_name.setdefault(name, []).append(key)
            owner: dict[str, int] = {}  # member key -> index of the included sub-report covering it
            for idx, report in enumerate(included):
                for name in report.entities:
                    for key in keys_by_name.get(name, []):
                        owner.setdefault(key, idx)
            rest_entities = [r for r in entity_rows if r.keys[0] not in owner]
            rest_relations = [
                r for r in relation_rows if not (r.keys[0] in owner and owner.get(r.keys[0]) == owner.get(r.keys[1]))
            ]
            ent, rel = _pack_tables(rest_entities, rest_relations, max_tokens - count_tokens(sub_text))
            return ent, rel, sub_text

    ent, rel = _pack_tables(entity_rows, relation_rows, max_tokens)
    return ent, rel, ""


# -- parsing --------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[ \t]*\r?\n?(.*?)(?:```|\Z)", re.S)
_FRACTION = re.compile(r"(-?\d+(?:[.,]\d+)?)\s*(?:/|out\s+of)\s*(\d+(?:[.,]\d+)?)", re.I)
_NUMBER = re.compile(r"(-?\d+(?:[.,]\d+)?)\s*(%?)")
_MAX_STARTS = 8  # '{' positions tried in one answer


def _norm_key(key) -> str:
    return re.sub(r"[\s_\-]", "", str(key)).lower()


def _normalised(obj: dict) -> dict:
    out: dict = {}
    for k, v in obj.items():
        out.setdefault(_norm_key(k), v)
    return out


def _num(text: str) -> float:
    return float(text.replace(",", "."))


def _parse_rating(value) -> float | None:
    """A rating in [0, 10] from a number or a string holding one; None when there is none."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        x = float(value)
    elif isinstance(value, str):
        m = _FRACTION.search(value)
        if m and _num(m.group(2)) > 0:
            x = _num(m.group(1)) / _num(m.group(2)) * 10.0
        else:
            m = _NUMBER.search(value)
            if not m:
                return None
            x = _num(m.group(1)) / (10.0 if m.group(2) else 1.0)
    else:
        return None
    if not math.isfinite(x):
        return None
    return min(10.0, max(0.0, x))


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(v.strip() for v in value if v.strip())
    return ""


def _findings(value) -> list[dict]:
    if isinstance(value, (dict, str)):
        value = [value]
    if not isinstance(value, list):
        return []
    out: list[dict] = []
    for item in value:
        if isinstance(item, str):
            summary, explanation = item.strip(), ""
        elif isinstance(item, dict):
            d = _normalised(item)
            summary = next((_text(d[k]) for k in ("summary", "title", "finding", "insight") if _text(d.get(k))), "")
            explanation = next(
                (_text(d[k]) for k in ("explanation", "description", "details", "detail", "text") if _text(d.get(k))),
                "",
            )
        else:
            continue
        if summary:
            out.append({"summary": summary, "explanation": explanation})
        if len(out) >= MAX_FINDINGS:
            break
    return out


def _validate(data) -> tuple[dict | None, str]:
    if isinstance(data, list):  # e.g. the object followed by stray JSON, or the object inside a list
        data = next((x for x in data if isinstance(x, dict) and "title" in _normalised(x)), None)
    if not isinstance(data, dict):
        return None, "the answer is not a JSON object"
    d = _normalised(data)
    if "title" not in d and len(d) == 1 and isinstance(next(iter(d.values())), dict):  # {"report": {...}}
        d = _normalised(next(iter(d.values())))
    title = d.get("title")
    if not isinstance(title, str) or not title.strip():
        return None, "missing or empty title"
    summary = d.get("summary")
    if not isinstance(summary, str):
        return None, "missing summary" if summary is None else "summary is not a string"
    return {
        "title": " ".join(title.split()),
        "summary": summary.strip(),
        "rating": _parse_rating(d.get("rating")),
        "rating_explanation": _text(d.get("ratingexplanation")),
        "findings": _findings(d.get("findings")),
    }, ""


def _parse(text: str) -> tuple[dict | None, str]:
    s = (text or "").strip()
    m = _FENCE.search(s)
    if m and "{" in m.group(1):
        s = m.group(1).strip()
    starts = [i for i, ch in enumerate(s) if ch == "{"][:_MAX_STARTS]
    if not starts:
        return None, "no JSON object in the answer"
    reason = ""
    for start in starts:
        data = load_json(s[start:])
        if data is None:
            continue
        result, why = _validate(data)
        if result is not None:
            return result, ""
        reason = reason or why
    return None, reason or "no JSON object in the answer"


def parse_report_json(text: str) -> dict | None:
    """The report in an LLM answer as a validated dict (title, summary, rating (float in [0, 10],
    or None when no number could be read), rating_explanation, findings [{summary, explanation}]),
    or None when the answer holds no usable report."""
    return _parse(text)[0]


# -- the report --------------------------------------------------------------------------------------


def _fallback(community: dict, nodes: pl.DataFrame, edges: pl.DataFrame) -> CommunityReport:
    report = extractive_report(community, nodes, edges)
    rest = (
        report.summary[len(EXTRACTIVE_NOTE) :].lstrip()
        if report.summary.startswith(EXTRACTIVE_NOTE)
        else report.summary
    )
    report.summary = f"{EXTRACTIVE_NOTE} {LLM_FALLBACK_NOTE} {rest}".rstrip()
    report.rating_explanation = f"{LLM_FALLBACK_NOTE} {report.rating_explanation}"
    report.generator = "extractive-fallback"
    return report


def report_generator(client: ChatClient | None, language: str = prompts.DEFAULT_LANGUAGE) -> str:
    """What writes reports with this client (None: the extractive writer): the model, and a short hash
    of the report prompt's text and language. A stored report written by the same generator for the
    same community id is reused instead of being written again; one written with another model or
    an edited prompt is not (`llm:<model>`, without the hash, is how reports read before the hash)."""
    if client is None:
        return "extractive"
    model = getattr(client, "model", None) or "unknown model"
    return f"llm:{model}#{prompts.texts_digest(('COMMUNITY_REPORT',), extra=language)}"


def llm_report(
    client: ChatClient,
    community: dict,
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    *,
    language: str = prompts.DEFAULT_LANGUAGE,
    max_tokens: int = 12000,
    sub_reports: dict[str, CommunityReport] | None = None,
    children: list[str] | None = None,
    max_attempts: int = 2,
) -> ReportOutcome:
    """The community's report written by ``client``; the extractive report (fallback=True) when no
    answer in ``max_attempts`` calls could be parsed. LLMError from the client propagates."""
    entities, relations, sub_text = pack_community_context(
        community, nodes, edges, max_tokens=max_tokens, sub_reports=sub_reports, children=children
    )
    prompt = prompts.COMMUNITY_REPORT.format(
        language=language, entities=entities, relations=relations, sub_reports=sub_text
    )
    messages = [{"role": "user", "content": prompt}]
    attempts = max(1, int(max_attempts))
    reason, raw = "", ""
    for attempt in range(attempts):
        kwargs = {"temperature": 0.0}
        if attempt > 0:
            kwargs["use_cache"] = False  # a cached bad answer must not be served again
        raw = client.chat(messages, **kwargs).text
        parsed, reason = _parse(raw)
        if parsed is None:
            continue
        rating, explanation = parsed["rating"], parsed["rating_explanation"]
        if rating is None:
            rating = round(10.0 * float(community.get("weight") or 0.0), 2)
            explanation = f"{explanation} ({DEFAULT_RATING_NOTE})" if explanation else DEFAULT_RATING_NOTE
        sub_nodes, _ = community_subgraph(list(community["nodes"]), nodes, edges)
        report = CommunityReport(
            community_id=community["community_id"],
            level=int(community["level"]),
            title=parsed["title"],
            summary=parsed["summary"],
            rating=rating,
            rating_explanation=explanation,
            findings=[Finding(f["summary"], f["explanation"]) for f in parsed["findings"]],
            entities=sub_nodes["name"].to_list(),
            extractive=False,
            generator=report_generator(client, language),
        )
        return ReportOutcome(report, fallback=False, attempts=attempt + 1)
    return ReportOutcome(
        _fallback(community, nodes, edges),
        fallback=True,
        error=f"LLM report could not be parsed after {attempts} attempt{'s' if attempts > 1 else ''}: {reason}",
        attempts=attempts,
        raw=raw,
    )
