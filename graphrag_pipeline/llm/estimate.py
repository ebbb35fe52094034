"""What a build would send to the LLM, before it runs: calls, tokens and USD, with its assumptions.

Known exactly, from the corpus and the home (nothing is called, nothing is written):
- the documents the build would process (the same plan the build makes, ``plan_sync``);
- their chunks (chunking is offline and cheap) and which of them the extraction cache or the answer
  cache already holds (those cost nothing);
- each remaining chunk's extraction prompt, token for token.

What depends on the model's answers (gleaning prompts carry the first answer; how many descriptions
need a summary, how many resolution questions and reports there are, how large each report prompt
is) comes from a dry run of the build's own steps against a stand-in model answering from the
offline `fast` extractor (llm/dry_run.py). A real model finds other entities than the offline
extractor: each step's dry-run counts are scaled by what this home's previous build with the same
method used against its own dry run (``state/cost-profile.json``); without one they are taken as
they are, and the output says so.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from graphrag_pipeline.llm.pricing import Pricing
from graphrag_pipeline.llm.usage import LLMUsage

PROFILE_FILE = "cost-profile.json"
# completion tokens when no previous build of the method measured them (the stand-in's answers are short)
DEFAULT_SUMMARY_ANSWER_TOKENS = 200
DEFAULT_REPORT_ANSWER_TOKENS = 400
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
    cached_ids: set[str] = field(default_factory=set, repr=False)


@dataclass
class CostEstimate:
    method: str
    model: str | None
    documents: int  # documents the build would process
    base: ExtractionBase
    phases: list[Phase]
    pricing: Pricing | None
    assumptions: list[str] = field(default_factory=list)
    dry_run: dict[str, dict] = field(default_factory=dict)  # the dry run's counts per step, before scaling
    seconds: float = 0.0  # how long the estimate took

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
            "dry_run": self.dry_run,
            "seconds": round(self.seconds, 2),
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
    from graphrag_pipeline.ingest.tokens import count_tokens
    from graphrag_pipeline.llm.client import chat_cache_key

    unique = dict(chunks)
    base = ExtractionBase(chunks=len(unique))
    prefix = settings_fingerprint(method, _Model(model), xsettings)
    held = ext_cache.get_many(f"{prefix}:{cid}" for cid in unique) if ext_cache is not None else {}
    for cid, text in unique.items():
        if held.get(f"{prefix}:{cid}") is not None:
            base.cached_ids.add(cid)
            continue
        prompt = extraction_prompt(text, xsettings)
        if llm_cache is not None:
            key = chat_cache_key(model, [{"role": "user", "content": prompt}], 0.0, None, None, None)
            hit = llm_cache.get(key)
            if isinstance(hit, dict) and hit.get("text"):  # answered before: the calls are served from the cache
                base.cached_ids.add(cid)
                continue
        base.to_extract += 1
        base.chunk_tokens += count_tokens(text)
        base.first_prompt_tokens += count_tokens(prompt)
    base.cached = len(base.cached_ids)
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
    if not isinstance(profile, dict) or not isinstance(profile.get("dry_run"), dict) or not profile.get("steps"):
        return None
    return profile


def profile_entry(estimate: CostEstimate, steps: dict[str, LLMUsage]) -> dict | None:
    """What a finished build measured against its own dry run, to scale the next estimate: each
    step's usage and what the dry run predicted for it."""
    if not estimate.base.to_extract or not steps.get("doc_subgraph") or not steps["doc_subgraph"].calls:
        return None
    return {
        "to_extract": estimate.base.to_extract,
        "dry_run": estimate.dry_run,
        "steps": {k: _usage_dict(u) for k, u in steps.items() if k in STEPS},
    }


def _usage_dict(u: LLMUsage) -> dict:
    return {"calls": u.calls, "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens}


QUANTITIES = ("calls", "prompt_tokens", "completion_tokens")


def _ratios(profile: dict | None, step: str) -> dict[str, float] | None:
    """Actual / dry-run of each quantity of ``step`` in the previous build (None: not measured)."""
    if profile is None:
        return None
    actual, predicted = profile["steps"].get(step), profile["dry_run"].get(step)
    if not actual or not predicted or not predicted.get("calls"):
        return None
    return {q: actual.get(q, 0) / predicted[q] if predicted.get(q) else 1.0 for q in QUANTITIES}


def estimate_phases(
    base: ExtractionBase, dry: dict[str, dict], method: str, gleanings: int, profile: dict | None
) -> tuple[list[Phase], list[str]]:
    """The calls and tokens of each LLM step: the dry run's counts, scaled by the previous build's
    measured ratios when there is one (else completion tokens of summaries and reports by default)."""
    rounds, loops = gleanings, max(0, gleanings - 1)
    assumptions = [
        f"extraction with {rounds} gleaning round(s) and {loops} loop check(s) per chunk (GRAPHRAG_MAX_GLEANINGS / "
        "the method's default), every round running",
        "the graph is the one the offline `fast` extractor finds in the corpus, merged, summarised, resolved "
        "(by the offline rule) and clustered by the build's own code: it gives the summaries, resolution "
        "questions and reports to write, and each prompt's size",
    ]
    phases: list[Phase] = []
    scaled = []
    for step in STEPS:
        d = dry.get(step, {})
        ratio = _ratios(profile, step)
        calls, prompt, completion = (float(d.get(q, 0)) for q in QUANTITIES)
        hits = float(d.get("cache_hits", 0)) + (base.cached * (1 + rounds + loops) if step == "doc_subgraph" else 0)
        if ratio is not None:
            calls, prompt, completion = (
                calls * ratio["calls"],
                prompt * ratio["prompt_tokens"],
                completion * ratio["completion_tokens"],
            )
            scaled.append(f"{STEP_LABELS[step]} x{ratio['calls']:.2f} calls, x{ratio['prompt_tokens']:.2f} prompt")
            basis = "dry run x previous build"
        else:
            basis = "dry run"
            if step == "knowledge_graph":
                completion = calls * DEFAULT_SUMMARY_ANSWER_TOKENS
            elif step == "community_reports":
                completion = calls * DEFAULT_REPORT_ANSWER_TOKENS
        if step == "doc_subgraph" and ratio is None:
            basis = "exact calls and first prompts; answers by dry run"
        phases.append(Phase(step, calls, hits, prompt, completion, basis))
    if scaled:
        assumptions.append(
            f"a real model finds other entities and writes other answers than the offline extractor: each step is "
            f"scaled by what this home's previous {method} build used against its own dry run ("
            + "; ".join(scaled)
            + ")"
        )
    else:
        assumptions.append(
            f"no previous {method} build of this home to measure the model against: the model is assumed to find "
            f"what the offline extractor finds; summaries of ~{DEFAULT_SUMMARY_ANSWER_TOKENS} and reports of "
            f"~{DEFAULT_REPORT_ANSWER_TOKENS} completion tokens"
        )
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


def _chunks_of(keys, files, env) -> dict[str, list[tuple[int, str, str]]]:
    """(position, chunk_id, text) of each document, as the build chunks it."""
    from graphrag_pipeline.ingest.document_chunks import chunk_document
    from graphrag_pipeline.settings import setting

    out = {}
    for key in keys:
        doc = chunk_document(
            key,
            files.get(key),
            setting("GRAPHRAG_MAX_DOCUMENT_BYTES", env),
            setting("GRAPHRAG_CHUNK_TOKENS", env),
            setting("GRAPHRAG_CHUNK_OVERLAP", env),
        )
        if doc.chunks is not None and doc.chunks.height:
            out[key] = list(zip(*(doc.chunks[c].to_list() for c in ("position", "chunk_id", "text"))))
    return out


def estimate_home(
    paths, corpus: Path, method: str, env=None, stale: list[str] | None = None, files=None, remember: bool = False
) -> CostEstimate:
    """The estimate of a build of ``corpus`` with ``method`` into the home at ``paths``, reading
    only: the plan (or ``stale``/``files`` when the caller has made it), the chunks, the caches.
    ``remember`` (a build starting, not `build --estimate`): the dry run's extractions are kept in
    the home's cache database for the next estimate."""
    import time

    from graphrag_pipeline.llm.cache import open_cache_read_only
    from graphrag_pipeline.llm.dry_run import dry_run
    from graphrag_pipeline.llm.pricing import configured_pricing
    from graphrag_pipeline.settings import setting

    if stale is None:
        stale, files = plan_read_only(paths, corpus, method)
    model = setting("GRAPHRAG_LLM_MODEL", env) if method != "fast" else None
    if method == "fast":
        return CostEstimate(
            method, None, len(stale), ExtractionBase(), [], None, ["the fast method makes no LLM calls"]
        )
    started = time.perf_counter()
    todo = _chunks_of(stale, files, env)
    xsettings = extraction_settings_from_env(method, env)
    ext_cache, _ = open_cache_read_only(paths, "extraction")
    llm_cache, _ = open_cache_read_only(paths, "llm")
    base = extraction_base(
        [(cid, text) for chunks in todo.values() for _, cid, text in chunks],
        method,
        xsettings,
        model,
        ext_cache,
        llm_cache,
    )
    if not base.to_extract:
        phases = [Phase("doc_subgraph", 0, base.cached * (1 + xsettings.gleanings), 0, 0, "exact")]
        note = "nothing to extract: summaries, resolution and reports are assumed unchanged"
        return CostEstimate(method, model, len(stale), base, phases, configured_pricing(env), [note])
    kept = _chunks_of(sorted(set(files) - set(stale)), files, env)
    from graphrag_pipeline.llm.cache import open_cache

    memo = open_cache(paths, "dry_run") if remember else open_cache_read_only(paths, "dry_run")[0]
    run = dry_run(
        method,
        xsettings,
        kept,
        todo,
        base.cached_ids,
        language=setting("GRAPHRAG_LANGUAGE", env),
        resolution=setting("GRAPHRAG_LLM_RESOLUTION", env),
        reports=setting("GRAPHRAG_LLM_REPORTS", env),
        cluster_size=setting("GRAPHRAG_MAX_CLUSTER_SIZE", env),
        use_lcc=True,
        memo=memo,
    )
    dry = {step: {**_usage_dict(u), "cache_hits": u.cache_hits} for step, u in run.usage.items()}
    phases, assumptions = estimate_phases(base, dry, method, xsettings.gleanings, read_profile(paths.state_dir, method))
    seconds = time.perf_counter() - started
    assumptions.append(
        f"dry run: {run.entities} entities, {run.relations} relations, {run.communities} communities "
        f"({run.reports} reports to write), {len(kept)} documents kept; {seconds:.1f}s"
    )
    estimate = CostEstimate(method, model, len(stale), base, phases, configured_pricing(env), assumptions)
    estimate.dry_run = {step: _usage_dict(u) for step, u in run.usage.items()}
    estimate.seconds = seconds
    return estimate


def plan_read_only(paths, corpus: Path, method: str) -> tuple[list[str], dict]:
    """(the documents a build would process, the corpus files by key), reading the home only."""
    from graphrag_pipeline.ingest.corpus_sync import plan_sync
    from graphrag_pipeline.storage.files import read_json
    from graphrag_pipeline.storage.store import Store

    store = Store.reader(paths)
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
