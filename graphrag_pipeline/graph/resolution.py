"""Entity resolution: find near-duplicate entities of one type and merge them.

Modelled on RAGFlow's entity resolution, in three steps:

1. ``candidate_pairs``: a cheap pre-filter (``is_similar``) proposes pairs of entities of the same
   type where at least one side is new or changed;
2. a judge decides which candidates name the same entity. Offline (no LLM) that is
   ``offline_same``; an LLM judge can be passed to ``resolve`` instead;
3. ``merge_entities`` merges the accepted pairs and recomputes the graph metrics.
"""

from __future__ import annotations

import re
import string
import threading
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from graphrag_pipeline.graph.tables import DESCRIPTION_SEP, EDGE_SCHEMA, NODE_SCHEMA, capped_list, with_metrics
from graphrag_pipeline.llm.protocol import ChatClient

Judge = Callable[[str, list[tuple[str, str]]], list[bool]]
"""An entity-resolution judge: (entity_type, [(name_a, name_b), ...]) -> one verdict per pair."""

_ENGLISH_CHARS = frozenset(string.ascii_letters + string.digits + string.punctuation)
_LEADING_ARTICLE = re.compile(r"^(?:the|a|an)\s+")
# Upper bound on the cells of one rapidfuzz score matrix (queries x choices), to cap memory.
_CDIST_MAX_CELLS = 8_000_000


# --------------------------------------------------------------------------------------------
# Pre-filter
# --------------------------------------------------------------------------------------------


def is_english(s: str) -> bool:
    """True if ``s`` has non-space characters and more than 80% of them are ASCII
    letters, digits or punctuation."""
    chars = [c for c in s if not c.isspace()]
    if not chars:
        return False
    ascii_count = sum(c in _ENGLISH_CHARS for c in chars)
    return 5 * ascii_count > 4 * len(chars)  # ascii_count / len(chars) > 0.8, in integers


def _bigrams(s: str) -> set[str]:
    return {s[i : i + 2] for i in range(len(s) - 1)}


def _digit_in_bigram_diff(a: str, b: str) -> bool:
    """Rule 1: a character 2-gram present in only one of the names contains a digit."""
    return any(ch.isdigit() for gram in _bigrams(a) ^ _bigrams(b) for ch in gram)


def _char_sets_similar(set_a: frozenset[str], set_b: frozenset[str]) -> bool:
    """Rule 3: overlap of the two names' character sets."""
    shared = len(set_a & set_b)
    max_l = max(len(set_a), len(set_b))
    if max_l < 4:
        return shared > 1
    return 5 * shared >= 4 * max_l  # shared / max_l >= 0.8, exact in integers


def _min_shared_chars(n_chars: int) -> int:
    """A lower bound on the shared characters rule 3 needs, given one side has ``n_chars``.

    Below 4 characters a pair needs 2 shared ones (a partner with 4+ characters would need at
    least 4, more than this side has); from 4 on it needs ceil(0.8 * max_l) >= ceil(0.8 * n).
    """
    return 2 if n_chars < 4 else (4 * n_chars + 4) // 5


def _similar_folded(a: str, b: str) -> bool:
    """``is_similar`` on names that are already case-folded."""
    if _digit_in_bigram_diff(a, b):
        return False
    if is_english(a) and is_english(b):
        return Levenshtein.distance(a, b) <= min(len(a), len(b)) // 2
    return _char_sets_similar(frozenset(a), frozenset(b))


def is_similar(a: str, b: str) -> bool:
    """Cheap pre-filter: could the names ``a`` and ``b`` denote the same entity?

    Compares the case-folded names. Rule 1: a 2-gram in only one name containing a digit ->
    False. Rule 2 (both English): Levenshtein distance <= min length // 2. Rule 3 (otherwise):
    character-set overlap (more than 1 shared if both sets are under 4, else >= 80%).
    """
    return _similar_folded(a.casefold(), b.casefold())


# --------------------------------------------------------------------------------------------
# Candidate pairs
# --------------------------------------------------------------------------------------------


def _type_groups(nodes: pl.DataFrame, changed_keys: set[str]) -> Iterator[tuple[list[str], list[str], list[int]]]:
    """Per entity type that has changed nodes: (keys, case-folded names, changed positions)."""
    if nodes.height == 0 or not changed_keys:
        return
    groups: dict[object, tuple[list[str], list[str], list[int]]] = defaultdict(lambda: ([], [], []))
    for key, name, etype in nodes.select("key", "name", "type").iter_rows():
        keys, names, changed = groups[etype]
        if key in changed_keys:
            changed.append(len(keys))
        keys.append(key)
        names.append((name if name is not None else key).casefold())
    for keys, names, changed in groups.values():
        if changed:
            yield keys, names, changed


def _english_pairs(names: list[str], english: list[bool], changed: list[int]) -> Iterator[tuple[int, int]]:
    """Rules 2 + 1 for pairs of English names, via batched rapidfuzz ``cdist``.

    Queries are grouped by length L so that L // 2 is a valid ``score_cutoff`` (it bounds
    min(L, len(choice)) // 2). Since Levenshtein distance >= the length difference, only choices
    with length in [2L // 3, L + L // 2] can pass; the exact bound is then applied with numpy.
    """
    lengths = np.fromiter((len(n) for n in names), dtype=np.int64, count=len(names))
    choices = np.flatnonzero(english)
    choices = choices[np.argsort(lengths[choices], kind="stable")]
    choice_lengths = lengths[choices]
    choice_names = [names[i] for i in choices]

    queries_by_length: dict[int, list[int]] = defaultdict(list)
    for i in changed:
        if english[i]:
            queries_by_length[int(lengths[i])].append(i)

    for length, queries in queries_by_length.items():
        lo = int(np.searchsorted(choice_lengths, (2 * length) // 3, side="left"))
        hi = int(np.searchsorted(choice_lengths, length + length // 2, side="right"))
        if lo >= hi:
            continue
        window = choices[lo:hi]
        bound = np.minimum(choice_lengths[lo:hi], length) // 2  # per-choice threshold
        rows_per_block = max(1, _CDIST_MAX_CELLS // (hi - lo))
        for start in range(0, len(queries), rows_per_block):
            block = queries[start : start + rows_per_block]
            dist = process.cdist(
                [names[i] for i in block],
                choice_names[lo:hi],
                scorer=Levenshtein.distance,
                score_cutoff=length // 2,
                dtype=np.int32,
                workers=-1,
            )
            rows, cols = np.nonzero(dist <= bound)
            for r, j in zip(rows.tolist(), window[cols].tolist()):
                i = block[r]
                if i != j and not _digit_in_bigram_diff(names[i], names[j]):
                    yield (i, j) if i < j else (j, i)


def _char_index(char_sets: list[frozenset[str]], members: Iterable[int]) -> dict[str, list[int]]:
    """Inverted index: character -> positions of the member names containing it."""
    index: dict[str, list[int]] = defaultdict(list)
    for i in members:
        for ch in char_sets[i]:
            index[ch].append(i)
    return index


def _probe(chars: frozenset[str], index: dict[str, list[int]]) -> set[int]:
    """Names in ``index`` that may share enough characters with ``chars`` for rule 3.

    Prefix filter: a partner sharing at least t of the n characters must share one of any
    n - t + 1 of them, so only the n - t + 1 rarest characters are looked up.
    """
    need = _min_shared_chars(len(chars))
    if len(chars) < need:
        return set()
    rarest = sorted(chars, key=lambda ch: len(index.get(ch, ())))[: len(chars) - need + 1]
    found: set[int] = set()
    for ch in rarest:
        found.update(index.get(ch, ()))
    return found


def _mixed_pairs(names: list[str], english: list[bool], changed: list[int]) -> Iterator[tuple[int, int]]:
    """Rules 1 + 3 for pairs where at least one name is not English, via an inverted index
    character -> names."""
    non_english = [i for i, en in enumerate(english) if not en]
    if not non_english:
        return
    char_sets = [frozenset(n) for n in names]
    english_queries = [i for i in changed if english[i]]
    other_queries = [i for i in changed if not english[i]]
    # An English name pairs through rule 3 only with non-English names; others with any name.
    for queries, members in ((english_queries, non_english), (other_queries, range(len(names)))):
        if not queries:
            continue
        index = _char_index(char_sets, members)
        for i in queries:
            for j in _probe(char_sets[i], index):
                if (
                    i != j
                    and _char_sets_similar(char_sets[i], char_sets[j])
                    and not _digit_in_bigram_diff(names[i], names[j])
                ):
                    yield (i, j) if i < j else (j, i)


def candidate_pairs(nodes: pl.DataFrame, changed_keys: set[str]) -> list[tuple[str, str]]:
    """Sorted key pairs (each pair sorted) of same-type nodes, at least one of them in
    ``changed_keys``, whose names pass ``is_similar``.

    Gives exactly what ``_candidate_pairs_bruteforce`` gives, without comparing all pairs.
    """
    pairs: set[tuple[str, str]] = set()
    for keys, names, changed in _type_groups(nodes, set(changed_keys)):
        english = [is_english(n) for n in names]
        for i, j in _english_pairs(names, english, changed):
            pairs.add(tuple(sorted((keys[i], keys[j]))))
        for i, j in _mixed_pairs(names, english, changed):
            pairs.add(tuple(sorted((keys[i], keys[j]))))
    return sorted(pairs)


# --------------------------------------------------------------------------------------------
# Offline judge
# --------------------------------------------------------------------------------------------


def normalize_for_offline_match(name: str) -> str:
    """Case-folded name without a leading article (the/a/an), punctuation or whitespace."""
    folded = _LEADING_ARTICLE.sub("", name.casefold().strip())
    return "".join(ch for ch in folded if not ch.isspace() and unicodedata.category(ch)[0] not in ("P", "Z"))


def offline_same(a: str, b: str) -> bool:
    """The no-LLM judge: both names normalize to the same non-empty string."""
    norm_a = normalize_for_offline_match(a)
    return bool(norm_a) and norm_a == normalize_for_offline_match(b)


# --------------------------------------------------------------------------------------------
# Merging
# --------------------------------------------------------------------------------------------


def _conform(df: pl.DataFrame, schema: dict) -> pl.DataFrame:
    """Exactly the schema's columns, in its order and with its dtypes."""
    return df.select([pl.col(name).cast(dtype) for name, dtype in schema.items()])


def _unique(items: Iterable) -> list:
    """De-duplicated in first-seen order, without nulls."""
    return list(dict.fromkeys(x for x in items if x is not None))


def _sorted_union(rows: list[dict], column: str) -> list[str]:
    return sorted({x for row in rows for x in (row[column] or ()) if x is not None})


def _descriptions_of(row: dict) -> list[str]:
    """A row's description list (falling back to its joined description if the list is empty)."""
    if row["descriptions"]:
        return list(row["descriptions"])
    return [row["description"]] if row["description"] else []


def _merged_descriptions(rows: list[dict]) -> list[str]:
    return capped_list(_unique(d for row in rows for d in _descriptions_of(row)))


def _edge_degree(edges: pl.DataFrame) -> dict[str, int]:
    degree: Counter[str] = Counter()
    for source_key, target_key in edges.select("source_key", "target_key").iter_rows():
        degree[source_key] += 1
        if target_key != source_key:
            degree[target_key] += 1
    return degree


def _merge_groups(nodes: pl.DataFrame, pairs: list[tuple[str, str]]) -> list[list[str]]:
    """Connected components (of 2+ existing node keys) of the merge pairs."""
    known = set(nodes["key"].to_list())
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        if a in known and b in known:
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[str]] = defaultdict(list)
    for x in parent:
        groups[root(x)].append(x)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def _merge_node_rows(ranked: list[dict]) -> dict:
    """One node row from a group of rows, the representative first."""
    rep = ranked[0]
    votes = Counter(row["type"] for row in ranked)
    top = max(votes.values())
    winners = {t for t, n in votes.items() if n == top}
    # Ties go to the representative's type (or, if it is not tied, the best-ranked tied type).
    etype = next(row["type"] for row in ranked if row["type"] in winners)
    descriptions = _merged_descriptions(ranked)
    return {
        **rep,
        "type": etype,
        "description": DESCRIPTION_SEP.join(descriptions),
        "descriptions": descriptions,
        "source_ids": _sorted_union(ranked, "source_ids"),
        "doc_ids": _sorted_union(ranked, "doc_ids"),
    }


def _merge_edge_rows(rows: list[dict]) -> dict:
    """One edge row from edges between the same two nodes, in priority order."""
    descriptions = _merged_descriptions(rows)
    return {
        **rows[0],
        "description": DESCRIPTION_SEP.join(descriptions),
        "descriptions": descriptions,
        "keywords": _unique(k for row in rows for k in (row["keywords"] or ())),
        "weight": float(sum(row["weight"] or 0.0 for row in rows)),
        "source_ids": _sorted_union(rows, "source_ids"),
        "doc_ids": _sorted_union(rows, "doc_ids"),
    }


def _merge_nodes(
    nodes: pl.DataFrame, edges: pl.DataFrame, groups: list[list[str]]
) -> tuple[pl.DataFrame, dict[str, str]]:
    """Replace each group by one row at its representative's position."""
    members = [k for group in groups for k in group]
    indexed = nodes.with_row_index("_i").with_columns(pl.col("_i").cast(pl.Int64))
    rows = {row["key"]: row for row in indexed.filter(pl.col("key").is_in(members)).to_dicts()}
    degree = _edge_degree(edges)

    merged, mapping = [], {}
    for group in groups:
        ranked = sorted(
            (rows[k] for k in group),
            key=lambda r: (-degree.get(r["key"], 0), -len(r["description"] or ""), r["key"]),
        )
        merged.append(_merge_node_rows(ranked))
        mapping.update({row["key"]: ranked[0]["key"] for row in ranked[1:]})

    merged_df = pl.DataFrame(merged, schema={"_i": pl.Int64, **NODE_SCHEMA})
    out = (
        pl.concat([indexed.filter(~pl.col("key").is_in(members)), merged_df.select(indexed.columns)])
        .sort("_i")
        .drop("_i")
    )
    return out, mapping


def _repoint_edges(edges: pl.DataFrame, mapping: dict[str, str], names: dict[str, str]) -> pl.DataFrame:
    """Re-point edges to representatives, drop self-loops and combine coinciding edges.

    ``names`` maps representative keys to their display names.
    """
    if edges.height == 0 or not mapping:
        return edges
    source_key, target_key = pl.col("source_key"), pl.col("target_key")
    new_s, new_t = pl.col("_s"), pl.col("_t")
    swap = new_s > new_t
    reps = list(names)
    edges = (
        edges.with_row_index("_i")
        .with_columns(
            source_key.replace(mapping).alias("_s"),
            target_key.replace(mapping).alias("_t"),
        )
        .with_columns(((new_s != source_key) | (new_t != target_key)).alias("_moved"))
        .filter(new_s != new_t)
        .with_columns(
            pl.when(swap).then(new_t).otherwise(new_s).alias("source_key"),
            pl.when(swap).then(new_s).otherwise(new_t).alias("target_key"),
            pl.when(swap).then(pl.col("target")).otherwise(pl.col("source")).alias("source"),
            pl.when(swap).then(pl.col("source")).otherwise(pl.col("target")).alias("target"),
        )
        .with_columns(
            pl.when(pl.col("_moved") & source_key.is_in(reps))
            .then(source_key.replace(names))
            .otherwise(pl.col("source"))
            .alias("source"),
            pl.when(pl.col("_moved") & target_key.is_in(reps))
            .then(target_key.replace(names))
            .otherwise(pl.col("target"))
            .alias("target"),
        )
        .with_columns(pl.len().over("source_key", "target_key").alias("_n"))
    )

    # Coinciding edges: the one already between the representatives first, then the moved ones.
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in edges.filter(pl.col("_n") > 1).sort("_moved", "_i").to_dicts():
        grouped[(row["source_key"], row["target_key"])].append(row)
    combined = [{**_merge_edge_rows(rows), "_i": min(r["_i"] for r in rows)} for rows in grouped.values()]
    columns = ["_i", *EDGE_SCHEMA]
    single = edges.filter(pl.col("_n") == 1).select(columns).with_columns(pl.col("_i").cast(pl.Int64))
    combined_df = pl.DataFrame(combined, schema={"_i": pl.Int64, **EDGE_SCHEMA}).select(columns)
    return pl.concat([single, combined_df]).sort("_i").drop("_i")


def merge_entities(
    nodes: pl.DataFrame, edges: pl.DataFrame, pairs_to_merge: list[tuple[str, str]]
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, str]]:
    """Merge the connected components of ``pairs_to_merge`` into one node each.

    The representative is the node with the highest degree (counted on ``edges``), then the
    longest description, then the smallest key. Edges are re-pointed to representatives,
    self-loops dropped and coinciding edges combined; degree and PageRank are recomputed.
    Keys absent from ``nodes`` are ignored. Returns (nodes, edges, old key -> representative key).
    """
    nodes, edges = _conform(nodes, NODE_SCHEMA), _conform(edges, EDGE_SCHEMA)
    groups = _merge_groups(nodes, pairs_to_merge)
    mapping: dict[str, str] = {}
    if groups:
        nodes, mapping = _merge_nodes(nodes, edges, groups)
        rep_keys = set(mapping.values())
        rep_names = {
            key: name
            for key, name in nodes.filter(pl.col("key").is_in(list(rep_keys))).select("key", "name").iter_rows()
        }
        edges = _repoint_edges(edges, mapping, rep_names)
    nodes = with_metrics(nodes, edges)
    return _conform(nodes, NODE_SCHEMA), _conform(edges, EDGE_SCHEMA), mapping


# --------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------


@dataclass
class ResolutionResult:
    nodes: pl.DataFrame
    edges: pl.DataFrame
    candidates: int  # candidate pairs proposed by the pre-filter
    merged: int  # nodes merged into another (= len(mapping))
    mapping: dict[str, str] = field(default_factory=dict)  # old key -> representative key
    merged_pairs: list[tuple[str, str]] = field(default_factory=list)  # pairs the judge accepted


def judge_pairs(nodes: pl.DataFrame, pairs: list[tuple[str, str]], judge: Judge | None = None) -> list[tuple[str, str]]:
    """The candidate key pairs the judge accepts (sorted).

    ``judge`` is called once per entity type with the pairs' display names and must return one
    bool per pair; ``None`` uses ``offline_same``.
    """
    info = {
        key: (name if name is not None else key, etype)
        for key, name, etype in nodes.select("key", "name", "type").iter_rows()
    }
    if judge is None:
        return sorted(p for p in pairs if offline_same(info[p[0]][0], info[p[1]][0]))

    if hasattr(judge, "judge_all"):
        # a judge that batches across types answers all pairs in as few prompts as possible
        typed = [(info[a][1], info[a][0], info[b][0]) for a, b in pairs]
        verdicts = list(judge.judge_all(typed))
        if len(verdicts) != len(pairs):
            raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(pairs)} pairs")
        return sorted(pair for pair, same in zip(pairs, verdicts) if same)

    by_type: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for pair in pairs:
        by_type[info[pair[0]][1]].append(pair)
    accepted = []
    for etype, typed_pairs in by_type.items():
        verdicts = list(judge(etype, [(info[a][0], info[b][0]) for a, b in typed_pairs]))
        if len(verdicts) != len(typed_pairs):
            raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(typed_pairs)} pairs of type {etype!r}")
        accepted.extend(pair for pair, same in zip(typed_pairs, verdicts) if same)
    return sorted(accepted)


def resolve(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    changed_keys: set[str],
    judge: Judge | None = None,
) -> ResolutionResult:
    """Find candidates among the changed nodes, let ``judge`` (default: ``offline_same``)
    decide, and merge the accepted pairs (``resolve_incremental`` with every other node known)."""
    known = sorted(set(nodes["key"].to_list()) - set(changed_keys))
    return resolve_incremental(nodes, edges, {"judge": "once", "known_keys": known, "accepted": []}, judge, "once")


# --------------------------------------------------------------------------------------------
# Incremental resolution across builds
# --------------------------------------------------------------------------------------------


@dataclass
class IncrementalResolution(ResolutionResult):
    changed: set[str] = field(default_factory=set)  # node keys not seen by the previous resolution
    state: dict = field(default_factory=dict)  # to store and pass to the next resolution


@dataclass
class ResolutionPlan:
    """What an incremental resolution decides before touching edges (see resolve_incremental)."""

    candidates: int  # candidate pairs proposed by the pre-filter
    accepted: list[tuple[str, str]]  # pairs the judge accepted now
    pairs: list[tuple[str, str]]  # every pair to merge: accepted now or earlier, both nodes still present
    changed: set[str]
    state: dict


def _signatures(nodes: pl.DataFrame) -> dict[str, str]:
    """Per node key, what the pre-filter and the judge read of it: its type and display name."""
    return {
        key: f"{etype}\x1f{name if name is not None else key}"
        for key, name, etype in nodes.select("key", "name", "type").iter_rows()
    }


def plan_resolution(
    nodes: pl.DataFrame, state: dict | None, judge: Judge | None = None, judge_id: str = "offline"
) -> ResolutionPlan:
    """The pairs to merge: earlier accepted pairs whose two nodes are still present and unchanged,
    and the judge's verdicts on candidate pairs involving nodes that are new or whose type or
    display name changed since the last resolution (so the result does not depend on the order of
    the builds: a pair becomes or stops being a candidate when either side changes, as in a fresh
    resolution). Needs only the nodes: when nothing is to be merged, the edges pass through
    untouched (and need not be read)."""
    state = state or {}
    if state.get("judge") != judge_id:
        state = {}
    signed = _signatures(nodes)
    keys = set(signed)
    before = state.get("signatures")
    if not isinstance(before, dict):
        # a state written before signatures were kept: its keys count as unchanged (as they did then)
        before = {k: signed[k] for k in state.get("known_keys", []) if k in signed}
    changed = {k for k, sig in signed.items() if before.get(k) != sig}
    pairs = candidate_pairs(nodes, changed)
    accepted = judge_pairs(nodes, pairs, judge)
    previous = [
        tuple(p)
        for p in state.get("accepted", [])
        if p[0] in keys and p[1] in keys and p[0] not in changed and p[1] not in changed
    ]
    all_pairs = sorted(set(previous) | set(accepted))
    return ResolutionPlan(
        candidates=len(pairs),
        accepted=accepted,
        pairs=all_pairs,
        changed=changed,
        state={"judge": judge_id, "signatures": signed, "accepted": [list(p) for p in all_pairs]},
    )


def resolve_incremental(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    state: dict | None,
    judge: Judge | None = None,
    judge_id: str = "offline",
) -> IncrementalResolution:
    """Resolve only pairs involving nodes new since the last resolution, replaying earlier merges.

    `state` is what the previous call returned: the node keys it saw and the pairs it accepted.
    Earlier accepted pairs whose two nodes still exist are merged again without asking the judge;
    a different judge (e.g. offline -> LLM) invalidates the state and everything is judged anew.
    """
    plan = plan_resolution(nodes, state, judge, judge_id)
    new_nodes, new_edges, mapping = merge_entities(nodes, edges, plan.pairs)
    return IncrementalResolution(
        nodes=new_nodes,
        edges=new_edges,
        candidates=plan.candidates,
        merged=len(mapping),
        mapping=mapping,
        merged_pairs=plan.accepted,
        changed=plan.changed,
        state=plan.state,
    )


# --------------------------------------------------------------------------------------------
# The LLM judge
# --------------------------------------------------------------------------------------------


class LLMJudge:
    """Judges candidate pairs with the LLM: `batch_size` questions a prompt, `concurrency` prompts at once.

    Answers are parsed per question; a missing, unclear or contradictory answer never merges.
    An endpoint failure (LLMError) propagates: resolution must not silently skip pairs.
    """

    def __init__(self, client: ChatClient, batch_size: int = 100, concurrency: int = 5):
        self.client = client
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.prompts = 0
        self.unparsed = 0
        self._lock = threading.Lock()

    def _ask(self, batch: list[tuple[str, str, str]]) -> list[bool]:
        from graphrag_pipeline.extract.parsing import parse_numbered_answers
        from graphrag_pipeline.llm import prompts

        types = {t.lower() for t, _, _ in batch}
        kind = next(iter(types)) if len(types) == 1 else "entity"
        questions = "\n".join(
            prompts.RESOLUTION_QUESTION.format(index=i, entity_type=t.lower(), a=a, b=b)
            for i, (t, a, b) in enumerate(batch, 1)
        )
        text = prompts.ENTITY_RESOLUTION.format(
            entity_type=kind, example_type="product", questions=questions, record_delimiter=prompts.RECORD_DELIMITER
        )
        answer = self.client.chat([{"role": "user", "content": text}]).text
        verdicts = parse_numbered_answers(answer, len(batch), prompts.RECORD_DELIMITER)
        with self._lock:
            self.prompts += 1
            self.unparsed += sum(1 for v in verdicts if v is None)
        return [v is True for v in verdicts]

    def judge_all(self, pairs: list[tuple[str, str, str]]) -> list[bool]:
        """(entity type, name a, name b) -> same?; `batch_size` questions a prompt, across types."""
        from concurrent.futures import ThreadPoolExecutor

        ordered = sorted(range(len(pairs)), key=lambda i: (pairs[i][0], i))  # keep a type's pairs together
        batches = [
            [pairs[i] for i in ordered[j : j + self.batch_size]] for j in range(0, len(ordered), self.batch_size)
        ]
        with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
            answers = [v for part in pool.map(self._ask, batches) for v in part]
        out = [False] * len(pairs)
        for pos, i in enumerate(ordered):
            out[i] = answers[pos]
        return out

    def __call__(self, entity_type: str, pairs: list[tuple[str, str]]) -> list[bool]:
        return self.judge_all([(entity_type, a, b) for a, b in pairs])
