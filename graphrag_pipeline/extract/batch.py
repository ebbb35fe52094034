"""Extraction of many chunks with the configured method, cached per chunk hash.

The cache key is (extractor version, LLM model, prompt texts and settings, chunk id); the chunk id is
the hash of the chunk's text, so an unchanged chunk is never extracted twice, whichever document
it belongs to. LLM chunks run concurrently (the client bounds in-flight calls); results are
cached as they arrive, so an interrupted run keeps what it already paid for.

When the client's circuit breaker opens (the endpoint failed several calls in a row), no further
chunk is started: the chunks not yet extracted are left for the next build, and the stats say
which documents are left (``circuit_open``, ``documents_left``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from graphrag_pipeline import progress as progress_events
from graphrag_pipeline.extract.records import Extraction
from graphrag_pipeline.extract.subgraph import DocSubgraph, build_doc_subgraph
from graphrag_pipeline.llm import prompts
from graphrag_pipeline.llm.cache import KVCache
from graphrag_pipeline.llm.usage import LLMUsage

# the parser is part of an LLM extractor: v2 reads more of what small models write, v3 a relation's
# keywords and strength written as a second group, and `<|` before a strength
EXTRACTOR_VERSIONS = {"fast": "fast-v2", "light": "light-v3", "general": "general-v3"}
METHODS = tuple(EXTRACTOR_VERSIONS)

log = logging.getLogger(__name__)


@dataclass
class ChunkTask:
    doc_id: str
    position: int
    chunk_id: str
    text: str


@dataclass
class ExtractionStats:
    extracted: int = 0
    cache_hits: int = 0
    failed_chunks: list[dict] = field(default_factory=list)  # {doc_id, chunk_id, error, raw}
    # {doc_id, chunk_id, answers}: chunks extracted from answers the endpoint cut at its output limit
    # (the cache keys of those answers); kept out of the extraction cache, so that the chunk is
    # read from its answers again, and `build --refresh failed` can ask them again
    cut_chunks: list[dict] = field(default_factory=list)
    failed_documents: dict[str, str] = field(default_factory=dict)  # doc_id -> endpoint error
    llm: LLMUsage = field(default_factory=LLMUsage)
    circuit_open: str = ""  # the breaker's message when it opened: the endpoint is down, stop retrying
    not_attempted: int = 0  # chunks never started because the breaker had opened
    budget_exceeded: bool = False  # the breaker "opened" because the build's budget would be passed

    @property
    def documents_left(self) -> list[str]:
        """Documents not fully extracted (their output is not written; the next build does them)."""
        return sorted(self.failed_documents)


def settings_fingerprint(method: str, llm=None, settings=None) -> str:
    if method == "fast":
        return EXTRACTOR_VERSIONS["fast"]
    payload = {
        "v": EXTRACTOR_VERSIONS[method],
        "model": getattr(llm, "model", ""),
        "settings": settings.__dict__ if settings is not None else {},
        # an edited prompt makes the cached extractions wrong (the LLM's own cache keys hold the texts too)
        "prompts": prompts.extraction_digest(method),
    }
    return (
        EXTRACTOR_VERSIONS[method] + "-" + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]
    )


def extract_tasks(
    tasks: list[ChunkTask],
    method: str,
    cache: KVCache,
    stats: ExtractionStats,
    llm=None,
    settings=None,
    progress: Callable[[int, int], None] | None = None,
    on_done: Callable[[str], None] | None = None,
) -> dict[str, Extraction]:
    """Extraction per chunk id. Chunks that failed (unparsable, or the endpoint failed) are absent.
    ``on_done(chunk_id)`` is called in this thread for every chunk that is over: found in the cache,
    extracted, or failed."""
    if method not in EXTRACTOR_VERSIONS:
        raise ValueError(f"unknown extraction method {method!r}; expected one of {', '.join(METHODS)}")
    if method != "fast" and llm is None:
        raise ValueError(
            f"extraction method {method!r} needs an LLM endpoint: set OPENAI_API_KEY "
            "(and OPENAI_BASE_URL for a local server), or use --method fast"
        )
    prefix = settings_fingerprint(method, llm, settings)
    unique: dict[str, ChunkTask] = {}
    for t in tasks:
        unique.setdefault(t.chunk_id, t)
    docs_of = _documents_of(tasks)
    cached = cache.get_many(f"{prefix}:{cid}" for cid in unique)
    out: dict[str, Extraction] = {}
    todo = []
    for cid, task in unique.items():
        hit = cached.get(f"{prefix}:{cid}")
        if hit is not None:
            out[cid] = Extraction.from_dict(hit)
        else:
            todo.append(task)
    stats.cache_hits += len(unique) - len(todo)
    done_cb = on_done or (lambda cid: None)
    for cid in out:
        done_cb(cid)
    progress_events.start("chunks", len(todo), "chunks", f"extracting ({len(out):,} cached)" if out else "extracting")
    try:
        return _extract_todo(todo, method, prefix, cache, stats, out, llm, settings, progress, done_cb, docs_of)
    finally:
        progress_events.finish("chunks")


# `fast` extractions are kept in the extraction cache this many at a time (and when the step ends)
FAST_CACHE_EVERY = 200


def _documents_of(tasks: list[ChunkTask]) -> dict[str, list[str]]:
    """chunk id -> the documents that have the chunk (its id is the hash of its text: two documents
    with the same paragraph share it, and it is extracted once for both)."""
    docs_of: dict[str, list[str]] = {}
    for t in tasks:
        docs = docs_of.setdefault(t.chunk_id, [])
        if t.doc_id not in docs:
            docs.append(t.doc_id)
    return docs_of


def _extract_todo(
    todo, method, prefix, cache, stats, out, llm, settings, progress, done_cb, docs_of
) -> dict[str, Extraction]:
    if method == "fast":
        from graphrag_pipeline.extract.offline import extract_fast

        fresh = {}
        try:
            for i, task in enumerate(todo, 1):
                out[task.chunk_id] = extract_fast(task.text, task.chunk_id)
                fresh[f"{prefix}:{task.chunk_id}"] = out[task.chunk_id].to_dict()
                stats.extracted += 1
                done_cb(task.chunk_id)
                if i % 50 == 0 or i == len(todo):
                    progress_events.advance("chunks", 50 if i % 50 == 0 else i % 50)
                if progress and i % 200 == 0:
                    progress(i, len(todo))
                if len(fresh) >= FAST_CACHE_EVERY:
                    cache.put_many(fresh)
                    fresh = {}
        except BaseException:
            # also when the step is stopped or fails half-way: what was extracted is not extracted
            # again; a cache that cannot be written then does not hide why the step stopped
            try:
                cache.put_many(fresh)
            except Exception as exc:
                log.warning("the extractions made before the step stopped could not be cached: %s", exc)
            raise
        cache.put_many(fresh)
        return out
    out.update(_extract_with_llm(todo, prefix, cache, stats, llm, settings, progress, done_cb, docs_of))
    return out


@dataclass
class DocumentExtraction:
    """One document's subgraph, ready to store, and what went into it."""

    key: str
    subgraph: DocSubgraph
    chunks: int
    failed_chunks: list[dict]  # {doc_id, chunk_id, error, raw}: chunks whose answer could not be used
    cut_chunks: list[dict] = field(default_factory=list)  # {doc_id, chunk_id, answers}: see ExtractionStats


@dataclass
class DocumentsExtraction:
    # in the order of the keys, built one at a time as they are read (so a large batch never holds
    # every subgraph at once); documents in stats.failed_documents are left out
    documents: Iterator[DocumentExtraction]
    stats: ExtractionStats


def extract_documents(
    keys: list[str],
    chunks,
    method: str,
    cache: KVCache,
    llm=None,
    settings=None,
    progress: Callable[[int, int], None] | None = None,
) -> DocumentsExtraction:
    """The subgraph of each document in ``keys`` from its chunks (a frame with doc_id, position,
    chunk_id, text). A document the endpoint failed on (``stats.failed_documents``) gets none: its
    previous output, if any, stays, and the next build tries it again."""
    tasks = [
        ChunkTask(key, pos, cid, text)
        for key, pos, cid, text in chunks.select("doc_id", "position", "chunk_id", "text")
        .sort("doc_id", "position")
        .rows()
    ]
    stats = ExtractionStats()
    on_done = _documents_counter(keys, tasks, stats)
    extracted = extract_tasks(tasks, method, cache, stats, llm, settings, progress, on_done)
    # the batch records a failed or cut chunk once, with its first document: every document that
    # has the chunk records it (a shared paragraph's cut answer is asked again for each of them)
    docs_of = _documents_of(tasks)
    failed_by_doc = _by_document(stats.failed_chunks, docs_of)
    cut_by_doc = _by_document(stats.cut_chunks, docs_of)
    tasks_by_doc: dict[str, list[ChunkTask]] = {}
    for t in tasks:
        tasks_by_doc.setdefault(t.doc_id, []).append(t)

    def documents() -> Iterator[DocumentExtraction]:
        for key in keys:
            if key in stats.failed_documents:
                continue
            doc_tasks = tasks_by_doc.get(key, [])
            triples = [(t.position, t.chunk_id, extracted[t.chunk_id]) for t in doc_tasks if t.chunk_id in extracted]
            yield DocumentExtraction(
                key,
                build_doc_subgraph(key, triples),
                len(doc_tasks),
                failed_by_doc.get(key, []),
                cut_by_doc.get(key, []),
            )

    return DocumentsExtraction(documents(), stats)


def _by_document(records: list[dict], docs_of: dict[str, list[str]]) -> dict[str, list[dict]]:
    """Chunk records ({doc_id, chunk_id, ...}) -> per document, one for each document with the chunk."""
    out: dict[str, list[dict]] = {}
    for record in records:
        for doc in docs_of.get(record["chunk_id"]) or [record["doc_id"]]:
            out.setdefault(doc, []).append({**record, "doc_id": doc})
    return out


def _documents_counter(keys: list[str], tasks: list[ChunkTask], stats: ExtractionStats) -> Callable[[str], None]:
    """The ``on_done`` of a batch: tells the progress listener (``documents``) each document whose
    chunks are all over, unless the endpoint failed it. A document with no chunk is over at once."""
    left = dict.fromkeys(keys, 0)
    docs_of: dict[str, list[str]] = {}
    for t in tasks:
        left[t.doc_id] = left.get(t.doc_id, 0) + 1
        docs_of.setdefault(t.chunk_id, []).append(t.doc_id)
    # (by name: a doc_subgraph step retried by Dagster tells its documents again, counted once)
    progress_events.done("documents", [k for k, n in left.items() if n == 0])

    def chunk_over(chunk_id: str) -> None:
        for doc in docs_of.pop(chunk_id, ()):  # a chunk shared by documents counts once for each
            left[doc] -= 1
            if left[doc] == 0 and doc not in stats.failed_documents:
                progress_events.done("documents", [doc])

    return chunk_over


def _extract_with_llm(todo, prefix, cache, stats, llm, settings, progress, done_cb, docs_of) -> dict[str, Extraction]:
    """The extractions of `todo` by chunk id (failed chunks absent); counts go to `stats`, the
    extraction stats of the whole batch. A chunk the endpoint failed on fails every document that
    has it (``docs_of``), not only the first."""
    from graphrag_pipeline.extract.llm import extract_chunk
    from graphrag_pipeline.llm.client import LLMBudgetExceeded, LLMCircuitOpen, LLMError

    before = llm.usage_snapshot()
    out: dict[str, Extraction] = {}
    pending_cache: dict[str, dict] = {}
    done = 0
    workers = max(1, getattr(llm, "max_concurrent", 4))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="extract")
    queue = iter(todo)
    futures: dict = {}

    def fail(task: ChunkTask, error: str) -> None:
        for doc in docs_of.get(task.chunk_id) or [task.doc_id]:
            stats.failed_documents.setdefault(doc, error)

    def breaker_open() -> bool:
        return bool(stats.circuit_open) or bool(getattr(llm, "circuit_open", False))

    def submit(n: int) -> None:
        # a few chunks beyond the workers, so no worker idles; the rest wait here, where an open
        # breaker can still stop them from being attempted
        for _ in range(n):
            if breaker_open():
                return
            task = next(queue, None)
            if task is None:
                return
            futures[pool.submit(extract_chunk, llm, task.text, task.chunk_id, settings)] = task

    try:
        submit(2 * workers)
        remaining = set(futures)
        while remaining:
            finished, remaining = wait(remaining, timeout=1.0, return_when=FIRST_COMPLETED)
            finished_ids = {fut: futures[fut].chunk_id for fut in finished}
            for fut in finished:
                task = futures.pop(fut)
                done += 1
                try:
                    outcome = fut.result()
                except LLMCircuitOpen as exc:
                    stats.circuit_open = stats.circuit_open or str(exc)
                    stats.budget_exceeded = stats.budget_exceeded or isinstance(exc, LLMBudgetExceeded)
                    fail(task, str(exc))
                    continue
                except LLMError as exc:
                    fail(task, str(exc))
                    continue
                if outcome.failed:
                    stats.failed_chunks.append(
                        {
                            "doc_id": task.doc_id,
                            "chunk_id": task.chunk_id,
                            "error": outcome.error,
                            "raw": outcome.raw[:4000],
                        }
                    )
                    continue
                stats.extracted += 1
                out[task.chunk_id] = outcome.extraction
                if outcome.cut:
                    stats.cut_chunks.append({"doc_id": task.doc_id, "chunk_id": task.chunk_id, "answers": outcome.cut})
                else:
                    pending_cache[f"{prefix}:{task.chunk_id}"] = outcome.extraction.to_dict()
            submit(len(finished))
            remaining = set(futures)
            if len(pending_cache) >= 20 or not remaining:
                cache.put_many(pending_cache)
                pending_cache = {}
            for chunk_id in finished_ids.values():  # after the outcome: a failed document is not counted as done
                done_cb(chunk_id)
            progress_events.advance("chunks", len(finished))
            if progress and finished:
                progress(done, len(todo))
        if breaker_open():
            if not stats.circuit_open:
                stats.circuit_open = getattr(llm, "circuit_message", "") or "the LLM endpoint's circuit breaker is open"
            stats.budget_exceeded = stats.budget_exceeded or bool(getattr(llm, "budget_exceeded", False))
            for task in queue:  # never started: left for the next build
                stats.not_attempted += 1
                fail(task, stats.circuit_open)
    except BaseException:
        # interrupted (run terminated) or crashed: stop LLM work now, keep what is cached; the calls
        # still on the wire end with the cancelled client, nobody waits for them
        llm.cancel()
        pool.shutdown(wait=False, cancel_futures=True)
        cache.put_many(pending_cache)
        raise
    else:
        pool.shutdown(wait=True, cancel_futures=True)
    finally:
        after = llm.usage_snapshot()
        stats.llm.add(after.minus(before))
    return out
