"""What a build would send to the LLM, before it runs: calls, tokens and USD, with its assumptions.

Known exactly, from the corpus and the home (nothing is called, nothing is written):
- the documents the build would process (the same plan the build makes, ``plan_sync``);
- their chunks (chunking is offline and cheap) and which of them the extraction cache or the answer
  cache already holds (those cost nothing);
- each remaining chunk's extraction prompt, token for token, and the number of gleaning rounds and
  loop checks of the method (every round is assumed to run: an upper bound when the model may stop early).

Not known before the model answers: how long the answers are (and so the gleaning prompts, which
carry the first answer), how many descriptions need a summary, how many resolution questions and
communities there will be. These come from the previous build of this home that extracted with the
same method (its measured ratios to its own first-pass prompts, kept in ``state/cost-profile.json``),
else from the defaults below, which are stated in the output.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from graphrag_pipeline.llm.pricing import Pricing
from graphrag_pipeline.llm.usage import LLMUsage

PROFILE_FILE = "cost-profile.json"
# defaults for a home without a previous build of its method (per extracted chunk / per first-pass prompt token)
DEFAULT_ANSWER_RATIO = 0.5  # an extraction answer's completion tokens per token of chunk text
DEFAULT_GLEAN_ANSWER_TOKENS = 150  # completion tokens of a gleaning answer
DEFAULT_REPORTS_PER_CHUNK = 1.0  # community reports per extracted chunk
DEFAULT_REPORT_PROMPT_TOKENS = 1500  # prompt tokens of one report prompt
DEFAULT_REPORT_ANSWER_TOKENS = 400
DEFAULT_RESOLUTION_PER_CHUNK = 0.1  # resolution prompts (100 questions each) per extracted chunk
DEFAULT_RESOLUTION_PROMPT_TOKENS = 2500
STEPS = ("doc_subgraph", "knowledge_graph", "resolved_graph", "community_reports")
STEP_LABELS = {
    "doc_subgraph": "extraction (+ gleaning)",
    "knowledge_graph": "description summaries",
    "resolved_graph": "entity resolution",
    "community_reports": "community reports",
}


@dataclass
class Phase:
    step: str
    calls: float = 0.0
    cache_hits: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    basis: str = ""  # "exact", "previous build" or "default"


@dataclass
class ExtractionBase:
    """What is known exactly about the extraction: the chunks to extract and their first prompts."""

    chunks: int = 0  # unique chunks of the documents to process
    cached: int = 0  # of those, held by the extraction or answer cache
    to_extract: int = 0
    chunk_tokens: int = 0  # tokens of the text of the chunks to extract
    first_prompt_tokens: int = 0  # tokens of their extraction prompts
    # entities and relations the offline `fast` extractor finds in them: how much there is to find,
    # which drives answer lengths, gleaning prompts (they carry the answers) and the graph's size
    offline_records: int = 0


@dataclass
class CostEstimate:
    method: str
    model: str | None
    documents: int  # documents the build would process
    base: ExtractionBase
    phases: list[Phase]
    pricing: Pricing | None
    assumptions: list[str] = field(default_factory=list)

    def total(self) -> LLMUsage:
        u = LLMUsage()
        for p in self.phases:
            u.calls += round(p.calls)
            u.cache_hits += round(p.cache_hits)
            u.prompt_tokens += round(p.prompt_tokens)
            u.completion_tokens += round(p.completion_tokens)
        return u

    @property
    def cost_usd(self) -> float | None:
        """The estimated USD; None when the price is unknown (0.0 when no call is needed)."""
        total = self.total()
        if total.calls == 0:
            return 0.0
        if self.pricing is None or self.pricing.price is None:
            return None
        return self.pricing.price.cost(total.prompt_tokens, total.completion_tokens)

    def to_dict(self) -> dict:
        total = self.total()
        return {
            "method": self.method,
            "model": self.model,
            "documents": self.documents,
            "chunks": self.base.chunks,
            "chunks_cached": self.base.cached,
            "chunks_to_extract": self.base.to_extract,
            "calls": total.calls,
            "cache_hits": total.cache_hits,
            "prompt_tokens": total.prompt_tokens,
            "completion_tokens": total.completion_tokens,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "price": self.pricing.describe() if self.pricing else None,
            "phases": [
                {
                    **asdict(p),
                    **{k: round(getattr(p, k)) for k in ("calls", "cache_hits", "prompt_tokens", "completion_tokens")},
                }
                for p in self.phases
            ],
            "assumptions": self.assumptions,
        }

    def lines(self) -> list[str]:
        """The estimate as a table for a terminal, then the price and the assumptions."""
        out = [
            f"estimate: {self.documents} documents to process, {self.base.chunks} chunks "
            f"({self.base.cached} cached, {self.base.to_extract} to extract), method {self.method}"
            + (f", model {self.model}" if self.model else ""),
            f"  {'step':<26}{'calls':>8}{'cached':>8}{'prompt tok':>12}{'compl. tok':>12}  basis",
        ]
        for p in self.phases:
            out.append(
                f"  {STEP_LABELS.get(p.step, p.step):<26}{round(p.calls):>8}{round(p.cache_hits):>8}"
                f"{round(p.prompt_tokens):>12}{round(p.completion_tokens):>12}  {p.basis}"
            )
        t = self.total()
        out.append(f"  {'total':<26}{t.calls:>8}{t.cache_hits:>8}{t.prompt_tokens:>12}{t.completion_tokens:>12}")
        cost = self.cost_usd
        if self.pricing is not None:
            out.append(f"price: {self.pricing.describe()}")
        out.append("cost: " + ("unknown (no price for the model)" if cost is None else f"about ${cost:.4f}"))
        out += [f"assumes: {a}" for a in self.assumptions]
        return out


# -- the exact part: chunks, caches, first prompts ------------------------------------------------------
def extraction_base(chunks: list[tuple[str, str]], method: str, xsettings, model: str, ext_cache, llm_cache):
    """``chunks``: (chunk_id, text) of the documents to process. Caches may be None (nothing cached)."""
    from graphrag_pipeline.extract.batch import settings_fingerprint
    from graphrag_pipeline.extract.llm import extraction_prompt
    from graphrag_pipeline.extract.offline import extract_fast
    from graphrag_pipeline.ingest.tokens import count_tokens
    from graphrag_pipeline.llm.client import chat_cache_key

    unique = dict(chunks)
    base = ExtractionBase(chunks=len(unique))
    prefix = settings_fingerprint(method, _Model(model), xsettings)
    held = ext_cache.get_many(f"{prefix}:{cid}" for cid in unique) if ext_cache is not None else {}
    for cid, text in unique.items():
        if held.get(f"{prefix}:{cid}") is not None:
            base.cached += 1
            continue
        prompt = extraction_prompt(text, xsettings)
        if llm_cache is not None:
            key = chat_cache_key(model, [{"role": "user", "content": prompt}], 0.0, None, None, None)
            hit = llm_cache.get(key)
            if isinstance(hit, dict) and hit.get("text"):  # answered before: the calls are served from the cache
                base.cached += 1
                continue
        base.to_extract += 1
        base.chunk_tokens += count_tokens(text)
        base.first_prompt_tokens += count_tokens(prompt)
        found = extract_fast(text, cid)
        base.offline_records += len(found.entities) + len(found.relations)
    return base


@dataclass
class _Model:  # what settings_fingerprint reads of a client
    model: str


# -- the measured part: ratios of a previous build ------------------------------------------------------
def read_profile(state_dir: Path, method: str) -> dict | None:
    """The cost profile of this home's last build that extracted with ``method``, or None."""
    try:
        data = json.loads((Path(state_dir) / PROFILE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    profile = data.get(method) if isinstance(data, dict) else None
    if not isinstance(profile, dict) or not profile.get("to_extract") or not profile.get("first_prompt_tokens"):
        return None
    return profile


def profile_entry(base: ExtractionBase, steps: dict[str, LLMUsage]) -> dict | None:
    """What a finished build measured, to estimate the next one: its exact base and each step's usage."""
    if not base.to_extract or not steps.get("doc_subgraph") or not steps["doc_subgraph"].calls:
        return None
    return {
        "to_extract": base.to_extract,
        "chunk_tokens": base.chunk_tokens,
        "first_prompt_tokens": base.first_prompt_tokens,
        "offline_records": base.offline_records,
        "steps": {
            k: {"calls": u.calls, "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens}
            for k, u in steps.items()
            if k in STEPS
        },
    }


def _rounds(method: str, gleanings: int) -> tuple[int, int]:
    """(gleaning rounds, loop checks) per chunk when every round runs."""
    return gleanings, max(0, gleanings - 1)


def estimate_phases(
    base: ExtractionBase,
    method: str,
    gleanings: int,
    continue_tokens: int,
    loop_tokens: int,
    profile: dict | None,
    use_resolution: bool,
    use_reports: bool,
) -> tuple[list[Phase], list[str]]:
    """The calls and tokens of each LLM step, from the exact base and a profile (or the defaults)."""
    n, first = base.to_extract, base.first_prompt_tokens
    rounds, loops = _rounds(method, gleanings)
    calls = n * (1 + rounds + loops)
    hits = base.cached * (1 + rounds + loops)
    assumptions = [
        f"{rounds} gleaning round(s) and {loops} loop check(s) per chunk (GRAPHRAG_MAX_GLEANINGS / the method's "
        "default), every round running",
    ]
    phases: list[Phase] = []
    if profile is not None:
        # what the model answers scales with what there is to find (the offline extractor's count),
        # else with the first-pass prompts
        scale = (
            base.offline_records / profile["offline_records"]
            if profile.get("offline_records")
            else first / profile["first_prompt_tokens"]
        )
        per = profile["steps"]
        doc = per.get("doc_subgraph", {})
        follow_ups = max(0, doc.get("prompt_tokens", 0) - profile["first_prompt_tokens"])  # the gleaning prompts
        phases.append(
            Phase(
                "doc_subgraph",
                calls,
                hits,
                first + follow_ups * scale,
                doc.get("completion_tokens", 0) * scale,
                "exact calls and first prompts; the rest from previous build",
            )
        )
        for step, used in (
            ("knowledge_graph", True),
            ("resolved_graph", use_resolution),
            ("community_reports", use_reports),
        ):
            u = per.get(step, {}) if used else {}
            phases.append(
                Phase(
                    step,
                    u.get("calls", 0) * scale,
                    0,
                    u.get("prompt_tokens", 0) * scale,
                    u.get("completion_tokens", 0) * scale,
                    "previous build",
                )
            )
        assumptions.append(
            f"answer lengths, gleaning prompts, summaries, resolution and reports scale as in this home's previous "
            f"{method} build ({profile['to_extract']} chunks extracted), in proportion to the entities and "
            f"relations the offline extractor finds in the chunks (x{scale:.2f})"
        )
        return phases, assumptions
    answer = DEFAULT_ANSWER_RATIO * base.chunk_tokens  # all first answers
    glean_prompt = 0.0
    history = first + answer  # the conversation each gleaning round carries, summed over the chunks
    for r in range(rounds):
        glean_prompt += history + n * continue_tokens
        history += n * (continue_tokens + DEFAULT_GLEAN_ANSWER_TOKENS)
        if r < loops:
            glean_prompt += history + n * loop_tokens
    completion = answer + n * rounds * DEFAULT_GLEAN_ANSWER_TOKENS + n * loops
    phases.append(
        Phase(
            "doc_subgraph",
            calls,
            hits,
            first + glean_prompt,
            completion,
            "exact calls and first prompts; answers by default",
        )
    )
    phases.append(Phase("knowledge_graph", 0, 0, 0, 0, "default"))
    res = DEFAULT_RESOLUTION_PER_CHUNK * n if use_resolution else 0
    phases.append(
        Phase(
            "resolved_graph",
            res,
            0,
            res * DEFAULT_RESOLUTION_PROMPT_TOKENS,
            res * DEFAULT_RESOLUTION_PROMPT_TOKENS / 2,
            "default",
        )
    )
    rep = DEFAULT_REPORTS_PER_CHUNK * n if use_reports else 0
    phases.append(
        Phase(
            "community_reports",
            rep,
            0,
            rep * DEFAULT_REPORT_PROMPT_TOKENS,
            rep * DEFAULT_REPORT_ANSWER_TOKENS,
            "default",
        )
    )
    assumptions += [
        f"no previous {method} build of this home to measure from, so: extraction answers of "
        f"{DEFAULT_ANSWER_RATIO:g} x the chunk's tokens, gleaning answers of {DEFAULT_GLEAN_ANSWER_TOKENS} tokens",
        "no description summaries (descriptions merged from more than 12 fragments are summarised)",
        f"{DEFAULT_RESOLUTION_PER_CHUNK:g} resolution prompts per chunk of ~{DEFAULT_RESOLUTION_PROMPT_TOKENS} tokens",
        f"{DEFAULT_REPORTS_PER_CHUNK:g} community report per chunk, ~{DEFAULT_REPORT_PROMPT_TOKENS} prompt and "
        f"{DEFAULT_REPORT_ANSWER_TOKENS} completion tokens each",
    ]
    return phases, assumptions


# -- the whole estimate for a home ------------------------------------------------------------------------
def extraction_settings_from_env(method: str, env=None):
    """The extraction settings a run would use (as LLMSettings.extraction_settings makes them)."""
    from graphrag_pipeline.extract.llm import ExtractionSettings
    from graphrag_pipeline.settings import setting

    gleanings = setting("GRAPHRAG_MAX_GLEANINGS", env)
    return ExtractionSettings(
        method=method,
        language=setting("GRAPHRAG_LANGUAGE", env),
        entity_types=list(setting("GRAPHRAG_ENTITY_TYPES", env)),
        max_gleanings=None if gleanings < 0 else gleanings,
    )


def estimate_home(
    paths, corpus: Path, method: str, env=None, stale: list[str] | None = None, files=None
) -> CostEstimate:
    """The estimate of a build of ``corpus`` with ``method`` into the home at ``paths``, reading
    only: the plan (or ``stale``/``files`` when the caller has made it), the chunks, the caches."""
    from graphrag_pipeline.ingest.document_chunks import chunk_document
    from graphrag_pipeline.ingest.tokens import count_tokens
    from graphrag_pipeline.llm.cache import open_read_only
    from graphrag_pipeline.llm.pricing import configured_pricing
    from graphrag_pipeline.settings import setting

    if stale is None:
        stale, files = plan_read_only(paths, corpus, method)
    model = setting("GRAPHRAG_LLM_MODEL", env) if method != "fast" else None
    if method == "fast":
        return CostEstimate(
            method, None, len(stale), ExtractionBase(), [], None, ["the fast method makes no LLM calls"]
        )
    chunks: list[tuple[str, str]] = []
    for key in stale:
        doc = chunk_document(
            key,
            files.get(key),
            setting("GRAPHRAG_MAX_DOCUMENT_BYTES", env),
            setting("GRAPHRAG_CHUNK_TOKENS", env),
            setting("GRAPHRAG_CHUNK_OVERLAP", env),
        )
        if doc.chunks is not None and doc.chunks.height:
            chunks += list(zip(doc.chunks["chunk_id"].to_list(), doc.chunks["text"].to_list()))
    xsettings = extraction_settings_from_env(method, env)
    ext_cache, _ = open_read_only(paths.cache_db, "extraction")
    llm_cache, _ = open_read_only(paths.cache_db, "llm")
    base = extraction_base(chunks, method, xsettings, model, ext_cache, llm_cache)
    from graphrag_pipeline.extract.llm import follow_up_prompts

    cont, loop = follow_up_prompts(method)
    phases, assumptions = estimate_phases(
        base,
        method,
        xsettings.gleanings,
        count_tokens(cont),
        count_tokens(loop),
        read_profile(paths.state_dir, method),
        setting("GRAPHRAG_LLM_RESOLUTION", env),
        setting("GRAPHRAG_LLM_REPORTS", env),
    )
    if not base.to_extract:
        phases = [p for p in phases if p.step == "doc_subgraph"]
        assumptions.append("nothing to extract: summaries, resolution and reports are assumed unchanged")
    return CostEstimate(method, model, len(stale), base, phases, configured_pricing(env), assumptions)


def plan_read_only(paths, corpus: Path, method: str) -> tuple[list[str], dict]:
    """(the documents a build would process, the corpus files by key), reading the home only."""
    from graphrag_pipeline.ingest.corpus_sync import plan_sync
    from graphrag_pipeline.storage.files import read_json
    from graphrag_pipeline.storage.store import Store

    store = Store.__new__(Store)  # a reader: no folder of the home is created
    store.paths = paths
    cached = read_json(paths.state_dir / "corpus-files.json", {}) or {}
    plan = plan_sync(
        corpus, [], store, method, cache=cached.get("files") if cached.get("corpus") == str(corpus) else None
    )
    return plan.stale, plan.files


def write_profile(state_dir: Path, method: str, entry: dict) -> None:
    from graphrag_pipeline.storage.files import read_json, write_json

    path = Path(state_dir) / PROFILE_FILE
    try:
        data = read_json(path, {}) or {}
    except ValueError:
        data = {}
    data[method] = entry
    write_json(data, path)
