"""Comparing the corpus directory with the `documents` partitions: what to add, delete and run.

Shared by the sensor (previous hashes from its cursor), the daily reconcile schedule and the CLI
(previous hashes from what the `chunks` asset stored). Stale documents are grouped into runs of
contiguous partition ranges, so a bulk drop of files becomes a few runs, never one per file.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from graphrag_pipeline.ingest.documents import CorpusFile, file_hash, scan_corpus
from graphrag_pipeline.storage.store import DOC_STATS, DOC_TABLES, Store

RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
DEFAULT_BATCH = 500


@dataclass(slots=True)  # one per corpus file
class FileState:
    hash: str
    size: int
    stamp: str  # see file_stamp

    def to_list(self) -> list:
        return [self.hash, self.size, self.stamp]


def file_stamp(st: os.stat_result) -> str:
    """What says a file may have changed besides its size: its modification time, and its status
    change time, which no tool sets back (`cp -p`, `rsync -t`, `tar x` or `touch -r` put an old
    modification time on new contents; any write, and a replacement, changes the ctime). Not the
    inode: some network and FUSE file systems give a file another one at each mount."""
    return f"{st.st_mtime_ns}:{st.st_ctime_ns}"


@dataclass
class SyncPlan:
    files: dict[str, CorpusFile]
    states: dict[str, FileState]
    to_add: list[str]
    to_delete: list[str]
    stale: list[str]
    order: list[str]  # partition keys in the order Dagster holds them, after adds and deletes
    errors: dict[str, str] = field(default_factory=dict)
    cache: dict[str, list] = field(default_factory=dict)  # see plan_sync's `cache`

    @property
    def changed(self) -> bool:
        return bool(self.to_add or self.to_delete or self.stale)

    def batches(self, max_per_run: int = DEFAULT_BATCH) -> list[list[str]]:
        return contiguous_batches(self.order, self.stale, max_per_run)


def contiguous_batches(order: list[str], selected: list[str], max_per_run: int = DEFAULT_BATCH) -> list[list[str]]:
    """Split `selected` keys into runs of keys that are contiguous in `order` (a partition range)."""
    wanted = set(selected)
    batches: list[list[str]] = []
    current: list[str] = []
    for key in order:
        if key in wanted and len(current) < max_per_run:
            current.append(key)
            continue
        if current:
            batches.append(current)
            current = []
        if key in wanted:
            current.append(key)
    if current:
        batches.append(current)
    return batches


def range_tags(batch: list[str]) -> dict[str, str]:
    return {RANGE_START_TAG: batch[0], RANGE_END_TAG: batch[-1]}


def scan_states(
    corpus: Path, known: Mapping[str, list] | None = None
) -> tuple[dict[str, CorpusFile], dict[str, FileState], dict[str, str]]:
    """Hash every corpus file, reusing a known hash when neither its size nor its stamp changed
    (`known`: key -> [hash, size, stamp, ...], as a cursor or a plan cache holds them)."""
    files = {f.key: f for f in scan_corpus(corpus)}
    states: dict[str, FileState] = {}
    errors: dict[str, str] = {}
    known = known or {}
    stat, get = os.stat, known.get
    for key, f in files.items():
        try:
            st = stat(f.fspath or f.path)
            size, stamp = st.st_size, file_stamp(st)
            prev = get(key)
            if prev and len(prev) >= 3 and prev[1] == size and prev[2] == stamp:
                states[key] = FileState(prev[0], size, stamp)
            else:
                states[key] = FileState(file_hash(f.path), size, stamp)
        except OSError as exc:
            errors[key] = f"{f.relpath}: {exc.strerror or exc}"
    return files, states, errors


def stored_hash(store: Store, key: str, method: str) -> str | None:
    """The content hash the last successful chunks + doc_subgraph materialization processed; None
    (the document is processed again) when its outputs are missing, damaged (see
    Store.document_problems), made from different contents or with another method."""
    if store.document_problems(key, method):
        return None
    try:
        return (store.chunk_info(key) or {}).get("content_hash")
    except (OSError, ValueError):  # changed since it was checked
        return None


# every output file of a document: when one of them changes (a rewrite, or damage), what its
# outputs say is read (and checked) again
OUTPUT_FILES = {asset: (".json", *tables) for asset, tables in DOC_TABLES.items()}


def _output_signature(store: Store, keys: list[str], method: str) -> dict[str, str]:
    """Per document, "<chunks' signatures>|<doc_subgraph's signatures>|<method>" (Store.signatures)."""
    outputs = [("chunks", OUTPUT_FILES["chunks"]), ("doc_subgraph", OUTPUT_FILES["doc_subgraph"])]
    return store.joint_signatures(keys, outputs, f"|{method}")


def remember_output_stats(store: Store, cache: Mapping[str, list], method: str) -> None:
    """Give DOC_STATS (storage.store) the output stats a survey made in another process took, read
    back from the signatures in its plan `cache` (see _output_signature): the merge asks for the
    subgraph files' stats again, and takes them from there as it would from this process's survey."""
    known = DOC_STATS.usable()
    if known is None:
        return
    # (not the info files: only the stages' tables are asked for again)
    folders = [
        (os.fspath(store.paths.doc_dir(asset)) + os.sep, OUTPUT_FILES[asset]) for asset in ("chunks", "doc_subgraph")
    ]
    tail = f"|{method}"
    for key, entry in cache.items():
        sig = entry[3] if len(entry) == 5 else None
        if not isinstance(sig, str) or not sig.endswith(tail):
            continue
        parts = sig[: -len(tail)].split("|")
        if len(parts) != len(folders):
            continue
        for (folder, suffixes), part in zip(folders, parts):
            stats = part.split("/")
            if len(stats) == len(suffixes):
                base = folder + key
                for suffix, one in zip(suffixes[1:], stats[1:]):
                    known.setdefault(base + suffix, one)


def refresh_cache(plan: SyncPlan, store: Store, method: str) -> dict[str, list]:
    """The plan's cache, with the entries of the documents the build processed brought up to date:
    what their outputs (written after the plan was made) now say. Without this, the first plan
    after a build would read and check the stored outputs of every document it built (12 s at
    50,000 documents); this reads those of the documents just built, which the build paid for."""
    cache = dict(plan.cache)
    keys = [k for k in plan.stale if k in cache and len(cache[k]) == 5]
    signatures = _output_signature(store, keys, method)
    for key in keys:
        cache[key] = [*cache[key][:3], signatures[key], stored_hash(store, key, method)]
    return cache


def plan_sync(
    corpus: Path,
    existing: list[str],
    store: Store,
    method: str,
    previous: Mapping[str, list] | None = None,
    cache: Mapping[str, list] | None = None,
) -> SyncPlan:
    """previous: key -> [hash, size, stamp] as seen last time (the sensor's cursor), or None:
    then a document is stale when its content differs from what its stored outputs say they
    processed. `cache` (the plan's `cache` from the last call) spares work on unchanged documents:
    a file with the same size and stamp (file_stamp) keeps its hash, and stored outputs whose files have the same
    size and mtime keep what they said; the result is the same as without it. Outputs whose files
    changed are checked (Store.document_problems): a damaged document is stale."""
    return with_partitions(survey(corpus, store, method, previous, cache), existing)


def survey(
    corpus: Path,
    store: Store,
    method: str,
    previous: Mapping[str, list] | None = None,
    cache: Mapping[str, list] | None = None,
) -> SyncPlan:
    """plan_sync's work that does not depend on the partitions Dagster holds (a plan with nothing to
    add, delete or order yet: see with_partitions). The build runs it in a second process beside its
    start-up (ingest.plan_prefetch)."""
    cache = cache or {}
    files, states, errors = scan_states(corpus, previous or cache)
    stale = []
    new_cache: dict[str, list] = {}
    previous = previous or {}
    unseen = [k for k in states if not previous.get(k)]  # judged by their stored outputs
    signatures = _output_signature(store, unseen, method)
    for key, state in states.items():
        prev = previous.get(key)
        if prev:
            before = prev[0]
        else:
            sig = signatures[key]
            entry = cache.get(key)
            before = entry[4] if entry and len(entry) == 5 and entry[3] == sig else stored_hash(store, key, method)
            new_cache[key] = [state.hash, state.size, state.stamp, sig, before]  # (to_list, inline)
        if before != state.hash:
            stale.append(key)
    return SyncPlan(files, states, [], [], stale, [], errors, new_cache)


def with_partitions(plan: SyncPlan, existing: list[str]) -> SyncPlan:
    """`plan` (a survey) with what to add to and delete from the `existing` partitions, and their order."""
    existing_set = set(existing)
    to_add = [k for k in plan.files if k not in existing_set and k in plan.states]
    to_delete = [k for k in existing if k not in plan.files]
    deleted = set(to_delete)
    order = [k for k in existing if k not in deleted] + to_add
    return SyncPlan(plan.files, plan.states, to_add, to_delete, plan.stale, order, plan.errors, plan.cache)
