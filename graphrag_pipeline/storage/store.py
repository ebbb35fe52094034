"""Where each stage's output lives under GRAPHRAG_HOME, and how it is read back.

Per-document outputs are one file per partition (written atomically), so parallel processes
working on different documents never share a file. Whole-graph outputs have a single writer.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import polars as pl

from graphrag_pipeline.extract.subgraph import ENTITY_ROWS, RELATION_ROWS
from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA
from graphrag_pipeline.index.records import (
    HASH,
    REPORT_ROWS_MEMO_SCHEMA,
    REPORT_ROWS_SCHEME,
    ROW_HASH_MEMO_SCHEME,
    SOURCES_MEMO_SCHEMA,
    SOURCES_MEMO_SCHEME,
    SOURCES_PATHS_SCHEMA,
    ReportRowsMemo,
    RowHashMemo,
    SourcesMemo,
)
from graphrag_pipeline.reports.offline import CommunityReport
from graphrag_pipeline.storage import sliced_graph
from graphrag_pipeline.storage.files import (
    TABLES,
    DamagedFileError,
    ParquetBundle,
    parquet_problem,
    read_json,
    read_parquet,
    stat_identity,
    verify_parquet,
    write_json,
    write_parquet,
)
from graphrag_pipeline.storage.layout import Paths

if TYPE_CHECKING:  # (imported where used: the corpus survey's process needs neither scipy nor the Leiden core)
    from graphrag_pipeline.graph.communities import CommunityState

CHUNK_ROWS = {
    "chunk_id": pl.Utf8,
    "doc_id": pl.Utf8,
    "doc": pl.Utf8,
    "position": pl.Int64,
    "text": pl.Utf8,
    "tokens": pl.Int64,
    # the 1-based pages (PDF) or slides (PPTX) a chunk spans, and its sheet (XLSX) or heading (DOCX);
    # null for formats without them. Chunk files written before these columns existed read with nulls.
    "page_start": pl.Int64,
    "page_end": pl.Int64,
    "section": pl.Utf8,
}
_CHUNK_ADDED = ("page_start", "page_end", "section")


def with_chunk_columns(df: pl.DataFrame) -> pl.DataFrame:
    """A chunk table in CHUNK_ROWS' columns; a table of an older home lacks the page columns: nulls."""
    missing = [pl.lit(None, dtype=CHUNK_ROWS[c]).alias(c) for c in _CHUNK_ADDED if c not in df.columns]
    return (df.with_columns(missing) if missing else df).select(list(CHUNK_ROWS)).cast(CHUNK_ROWS)


def extracted_from_other_chunks(subgraph_info: dict, chunk_info: dict) -> str | None:
    """What a document's stored subgraph (its info record) was extracted from when that is not the
    chunk table its chunk info describes; None when it is. Another content; or the same content
    chunked otherwise since (another chunk size, then an extraction that failed): the subgraph
    records the chunk table's checksum it read (subgraphs written before it did are judged by their
    content only)."""
    if subgraph_info.get("content_hash") != chunk_info.get("content_hash"):
        return f"content {subgraph_info.get('content_hash')} (the chunks: {chunk_info.get('content_hash')})"
    read = subgraph_info.get("chunks_checksum")
    checksums = chunk_info.get("checksums")
    now = checksums.get(".parquet") if isinstance(checksums, dict) else None
    if isinstance(read, str) and isinstance(now, str) and read != now:
        return f"an earlier chunk table of the same content (checksum {read[:12]}, now {now[:12]})"
    return None


class DocStats:
    """The stats of documents' output files (see Store.joint_signatures) taken once by a build and
    shared by its stages while `sharing_doc_stats` is on: the plan stats every document's outputs,
    and the merge, in the same process moments later, asks again for the subgraph files (100,000
    stats at 50,000 documents). A file a Store writes or removes is forgotten as it is written, so
    the next ask stats it again. Files another process writes (a run of the daemon or of the UI on
    the same home: the build lock keeps out only other builds) are not seen that way: `alone`, set
    by the build, says whether any other run has been in progress since the stats were taken; when
    one has, or when `alone` cannot tell, every file is stat'ed again, as without sharing."""

    def __init__(self) -> None:
        self.enabled = 0
        self.known: dict[str, str] = {}
        self.alone: Callable[[], bool] | None = None

    def usable(self) -> dict[str, str] | None:
        """The stats to use and fill (None: sharing is off); emptied first when another run may
        have written files since they were taken."""
        if not self.enabled:
            return None
        if self.known:
            try:
                alone = self.alone is not None and self.alone()
            except Exception:  # noqa: BLE001 - the instance cannot tell: stat everything again
                alone = False
            if not alone:
                self.known.clear()
        return self.known

    def forget(self, paths: Iterable[Path | str]) -> None:
        if self.enabled:
            for path in paths:
                self.known.pop(os.fspath(path), None)

    def forget_all(self) -> None:
        self.known.clear()


DOC_STATS = DocStats()


@contextmanager
def sharing_doc_stats() -> Iterator[DocStats]:
    """Turn DOC_STATS on for the duration (a build's); its stats are used only once the build sets
    its `alone` check (see DocStats). Emptied and off at the end."""
    DOC_STATS.enabled += 1
    try:
        yield DOC_STATS
    finally:
        DOC_STATS.enabled -= 1
        if not DOC_STATS.enabled:
            DOC_STATS.forget_all()
            DOC_STATS.alone = None


READ_BATCH = 2000  # files DuckDB reads in one query when many documents' tables are read

# the Parquet files of each per-document asset (each also has a `<key>.json` info file, written last)
DOC_TABLES = {"chunks": (".parquet",), "doc_subgraph": (".entities.parquet", ".relations.parquet")}

# A key is part of file names (the longest: "." + key + ".relations.parquet" + ".XXXXXXXX.parquet.tmp"
# while it is written), which most file systems limit to 255 bytes; partition_key makes at most 120.
MAX_KEY_BYTES = 200


class MissingInputError(Exception):
    """Outputs of documents a reader was asked for are missing (deleted, or written on another
    machine's disk): never read as an empty table. Not an OSError, so no fallback swallows it.
    `missing`: partition key -> its missing files."""

    def __init__(self, asset: str, missing: dict[str, list[Path]]):
        self.asset, self.missing = asset, missing
        shown = "; ".join(f"{k}: {', '.join(str(f) for f in files)}" for k, files in list(missing.items())[:5])
        more = f"; and {len(missing) - 5} more documents" if len(missing) > 5 else ""
        super().__init__(
            f"the `{asset}` files of {len(missing)} document(s) are missing (partition: missing files) - {shown}{more}"
        )


class InvalidPartitionKey(ValueError):
    """A document partition key that cannot name files inside the home (e.g. "../x", "/abs",
    "a/b", "." or a NUL byte): added by hand through Dagster's UI or API, never by a scan."""


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc, exactly


@lru_cache(maxsize=1 << 18)
def partition_key_problem(key: object) -> str | None:
    """Why `key` cannot be a document partition key (None when it can). Keys made by
    `partition_key` always can."""
    if not isinstance(key, str):
        return f"it is a {type(key).__name__}, not text"
    if not key:
        return "it is empty"
    if key in (".", ".."):
        return "it would name a folder, not a file"
    if "/" in key or "\\" in key:
        return "it contains a path separator"
    if "\0" in key:
        return "it contains a NUL byte"
    if key.startswith("."):
        return "it starts with '.' (hidden and temporary files do)"
    if _CONTROL.search(key):
        return "it contains a control character"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid Unicode text (a lone surrogate)"
    if size > MAX_KEY_BYTES:
        return f"it is {size} bytes long (at most {MAX_KEY_BYTES}: keys are part of file names)"
    return None


def check_partition_key(key: str) -> str:
    """`key`, when it can be a document partition key; else raise InvalidPartitionKey saying why."""
    problem = partition_key_problem(key)
    if problem is not None:
        shown = repr(key) if not isinstance(key, str) or len(key) <= 80 else repr(key[:77]) + "..."
        raise InvalidPartitionKey(
            f"invalid document partition key {shown}: {problem}. No corpus file has this key "
            "(it was added by hand?); delete this partition of `documents`"
        )
    return key


# the last orphan sweep (Store.sweep_orphans): which documents it kept, and when
ORPHAN_SWEEP_STATE = "orphan-sweep"
ORPHAN_SWEEP_MAX_AGE = 24 * 3600.0


@dataclass
class _OpenFolder:
    """A folder of per-document files as joint_signatures stats them: by name under an open
    descriptor `fd` where the system allows it (None: by full path, `prefix` + name)."""

    prefix: str
    fd: int | None
    suffixes: tuple[str, ...]

    @classmethod
    def of(cls, folder: Path, suffixes: tuple[str, ...], opened: ExitStack) -> _OpenFolder:
        prefix = os.fspath(folder) + os.sep
        fd = None
        if os.stat in os.supports_dir_fd and hasattr(os, "O_DIRECTORY"):
            try:
                fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:  # (missing, or not a folder: the stats by path say so, as before)
                fd = None
            else:
                opened.callback(os.close, fd)
        return cls(prefix, fd, suffixes)


# the segments file of a RowHashMemo (Store.read_row_hashes)
_ROW_HASH_SEGMENTS_SCHEMA = {"segment": pl.Utf8, "rows": pl.Int64, "scheme": pl.Utf8}


def _read_cache(*files: tuple[Path, dict]) -> list[pl.DataFrame] | None:
    """The tables of a cache's (path, schema) files, or None when one is missing, cannot be read or
    has another schema: a cache in doubt is rebuilt, never trusted."""
    tables = []
    for path, schema in files:
        try:
            table = pl.read_parquet(path, glob=False)  # (a home's path may hold `*` or `[`)
        except (OSError, pl.exceptions.PolarsError):  # (a missing file among them)
            return None
        if dict(table.schema) != schema:
            return None
        tables.append(table)
    return tables


def _of_scheme(table: pl.DataFrame, scheme: str) -> bool:
    """Every row of a cache table was made under `scheme` (its "scheme" column; a null is not)."""
    return not table["scheme"].ne_missing(scheme).any()


class Store:
    def __init__(self, paths: Paths):
        self.paths = paths.ensure()

    @classmethod
    def reader(cls, paths: Paths) -> Store:
        """A store that only reads: no folder of the home is created (read-only homes, mistyped paths)."""
        store = cls.__new__(cls)
        store.paths = paths
        return store

    # -- per document -------------------------------------------------------------------------
    def _doc_file(self, asset: str, key: str, suffix: str) -> Path:
        """The file of one document's output; raises InvalidPartitionKey for a key that would put
        it anywhere but directly inside the asset's folder."""
        check_partition_key(key)
        folder = self.paths.doc_dir(asset)
        path = folder / f"{key}{suffix}"
        if os.path.dirname(os.path.normpath(path)) != os.path.normpath(
            folder
        ):  # guaranteed by the check; kept as a guard
            raise InvalidPartitionKey(f"invalid document partition key {key!r}: {path} is outside {folder}")
        return path

    def write_chunks(self, key: str, chunks: pl.DataFrame, info: dict) -> None:
        table, info_file = self._doc_file("chunks", key, ".parquet"), self._doc_file("chunks", key, ".json")
        try:
            # a table without the page columns (a text document's, an older writer's) gets them as nulls
            digest = write_parquet(with_chunk_columns(chunks), table, checksum=True)
            write_json({**info, "checksums": {".parquet": digest}}, info_file)
        finally:
            DOC_STATS.forget((table, info_file))

    def chunk_info(self, key: str) -> dict | None:
        return read_json(self._doc_file("chunks", key, ".json"))

    def read_chunks(self, key: str) -> pl.DataFrame:
        return with_chunk_columns(read_parquet(self._doc_file("chunks", key, ".parquet"), CHUNK_ROWS))

    def write_subgraph(self, key: str, entities: pl.DataFrame, relations: pl.DataFrame, info: dict) -> None:
        ents, rels = (
            self._doc_file("doc_subgraph", key, ".entities.parquet"),
            self._doc_file("doc_subgraph", key, ".relations.parquet"),
        )
        info_file = self._doc_file("doc_subgraph", key, ".json")
        try:
            checksums = {
                ".entities.parquet": write_parquet(entities, ents, checksum=True),
                ".relations.parquet": write_parquet(relations, rels, checksum=True),
            }
            write_json({**info, "checksums": checksums}, info_file)
        finally:
            DOC_STATS.forget((ents, rels, info_file))

    def subgraph_info(self, key: str) -> dict | None:
        return read_json(self._doc_file("doc_subgraph", key, ".json"))

    def document_problems(self, key: str, method: str | None = None) -> list[str]:
        """What is wrong with one document's stored outputs, each problem naming its file (empty when
        all is well): an invalid key, a missing or unreadable info JSON, a missing, unreadable or
        altered Parquet file (against the checksum recorded when it was written; files written
        before checksums were recorded get their footer checked), chunks and subgraph made from
        different contents, or a subgraph extracted with another method than `method`. Never raises."""
        problem = partition_key_problem(key)
        if problem is not None:
            return [f"invalid document partition key {key!r}: {problem}"]
        problems: list[str] = []
        infos = {}
        for asset, suffixes in DOC_TABLES.items():
            info_file = self._doc_file(asset, key, ".json")
            try:
                info = read_json(info_file)
            except DamagedFileError as exc:
                info = None
                problems.append(str(exc))
            except OSError as exc:
                info = None
                problems.append(f"{info_file} cannot be read: {exc.strerror or exc}")
            else:
                if info is None:
                    problems.append(f"{info_file} is missing")
                elif not isinstance(info, dict):
                    problems.append(f"{info_file} does not hold a JSON object")
                    info = None
            infos[asset] = info
            checksums = (info or {}).get("checksums")
            checksums = checksums if isinstance(checksums, dict) else {}
            for suffix in suffixes:
                expected = checksums.get(suffix)
                found = parquet_problem(
                    self._doc_file(asset, key, suffix), expected if isinstance(expected, str) else None
                )
                if found:
                    problems.append(found)
        chunks, sub = infos["chunks"], infos["doc_subgraph"]
        if chunks is not None and sub is not None:
            other = extracted_from_other_chunks(sub, chunks)
            if other:
                problems.append(
                    f"{self._doc_file('doc_subgraph', key, '.json')} was extracted from {other}, not from the chunks "
                    f"{self._doc_file('chunks', key, '.json')} describes"
                )
            if method is not None and sub.get("method") != method:
                problems.append(
                    f"{self._doc_file('doc_subgraph', key, '.json')} was extracted with method "
                    f"{sub.get('method')!r}, not {method!r}"
                )
        return problems

    def _read_many(self, files: list[Path], schema: dict, select: bool = True) -> pl.DataFrame:
        files = [str(f) for f in files]
        if not files:
            return pl.DataFrame(schema=schema)
        frames = []
        # DuckDB reads thousands of small Parquet files far faster than a Python loop
        for start in range(0, len(files), READ_BATCH):
            part = files[start : start + READ_BATCH]
            try:
                rel = duckdb.sql(f"SELECT * FROM read_parquet({part!r}, union_by_name=true)")
                frames.append(pl.from_arrow(rel.to_arrow_table()))
            except duckdb.Error as exc:
                _raise_damaged(part, exc)
                raise
        # batches may differ in columns (an older home: chunk files without the page columns)
        rows = pl.concat(frames, how="diagonal_relaxed")
        return rows.select(list(schema)).cast(schema) if select else rows

    def _valid(self, keys: list[str]) -> list[str]:
        # a key that cannot name a file has no files: readers of many documents pass over it
        return [k for k in keys if partition_key_problem(k) is None]

    def _input_files(self, asset: str, keys: list[str], optional: Collection[str] = ()) -> tuple[list[Path], ...]:
        """Per Parquet table of `asset` (DOC_TABLES order), the files of documents `keys`.

        Every document not in `optional` must have all its tables: a missing one raises
        MissingInputError naming them (a reader never returns a silently smaller table; a document
        skipped as unreadable or empty has empty tables). A document in `optional` (not
        materialized yet, so it may have no output at all) gives the files it has."""
        suffixes = DOC_TABLES[asset]
        # `optional` is asked only of a document with a file missing (it may be costly to compute:
        # defs.partitions.NotMaterialized); anything but a set or a mapping is made a set first
        if not isinstance(optional, (AbstractSet, Mapping)):
            optional = set(optional)
        out: tuple[list[Path], ...] = tuple([] for _ in suffixes)
        missing: dict[str, list[Path]] = {}
        for key in self._valid(keys):
            tables = [self._doc_file(asset, key, suffix) for suffix in suffixes]
            present = [t.exists() for t in tables]
            if not all(present) and key not in optional:
                # a run writes a document's files before Dagster records it materialized: one that
                # ended while `optional` was asked has its files now
                present = [t.exists() for t in tables]
                if not all(present):
                    missing[key] = [t for t, ok in zip(tables, present) if not ok]
                    continue
            for files, table, ok in zip(out, tables, present):
                if ok:
                    files.append(table)
        if missing:
            raise MissingInputError(asset, missing)
        return out

    def read_subgraphs(self, keys: list[str], optional: Collection[str] = ()) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The entity and relation mentions of documents `keys`; see `_input_files` for `optional`."""
        ents, rels = self._input_files("doc_subgraph", keys, optional)
        return self._read_many(ents, ENTITY_ROWS), self._read_many(rels, RELATION_ROWS)

    def signatures(self, asset: str, keys: list[str], suffixes: tuple[str, ...]) -> dict[str, str]:
        """Per document, a signature of its output files of `asset` (size and modification time): a
        rewrite changes it."""
        return self.joint_signatures(keys, [(asset, suffixes)])

    def joint_signatures(
        self, keys: list[str], outputs: list[tuple[str, tuple[str, ...]]], tail: str = ""
    ) -> dict[str, str]:
        """Per document, its `signatures` of each (asset, suffixes) of `outputs` joined by "|", then
        `tail`: what joining the results of one `signatures` call per asset gives, in one pass. While
        DOC_STATS is on, a file's stat taken earlier in the build is used again."""
        # plain strings: this runs for every document; each file is stat'ed by its name in its folder
        # (an open descriptor: the kernel walks one name, not the whole path), where the system can
        known = DOC_STATS.usable()
        with ExitStack() as opened:
            folders = [_OpenFolder.of(self.paths.doc_dir(asset), suffixes, opened) for asset, suffixes in outputs]
            invalid = "|".join("invalid" for _ in outputs) + tail
            stat = os.stat
            out = {}
            for key in keys:
                if partition_key_problem(key) is not None:
                    out[key] = invalid
                    continue
                parts = []
                for folder in folders:
                    base, fd, sig = folder.prefix + key, folder.fd, []
                    for suffix in folder.suffixes:
                        one = known.get(base + suffix) if known is not None else None
                        if one is None:
                            try:
                                st = stat(key + suffix, dir_fd=fd) if fd is not None else stat(base + suffix)
                            except FileNotFoundError:
                                one = "missing"
                            else:
                                one = f"{st.st_size}:{st.st_mtime_ns}"
                            if known is not None:
                                known[base + suffix] = one
                        sig.append(one)
                    parts.append("/".join(sig))
                out[key] = "|".join(parts) + tail
        return out

    def subgraph_signatures(self, keys: list[str]) -> dict[str, str]:
        return self.signatures("doc_subgraph", keys, (".entities.parquet", ".relations.parquet"))

    def read_all_chunks(self, keys: list[str], optional: Collection[str] = ()) -> pl.DataFrame:
        """The chunk rows of documents `keys`; see `_input_files` for `optional`."""
        (files,) = self._input_files("chunks", keys, optional)
        return with_chunk_columns(self._read_many(files, CHUNK_ROWS, select=False))

    def scan_all_chunks(self, keys: list[str], optional: Collection[str] = ()) -> pl.DataFrame:
        """What read_all_chunks returns (same rows, same order), read by polars' parallel multi-file
        scan: about 5x faster on thousands of small files (the search index reads them all)."""
        (files,) = self._input_files("chunks", keys, optional)
        if not files:
            return pl.DataFrame(schema=CHUNK_ROWS)
        try:
            return pl.scan_parquet([str(f) for f in files]).select(list(CHUNK_ROWS)).collect().cast(CHUNK_ROWS)
        except (OSError, pl.exceptions.PolarsError):  # e.g. a file written with an older schema
            return self.read_all_chunks(keys, optional)

    def remove_orphans(self, live_keys: set[str]) -> int:
        """Delete per-document files of documents that are no longer partitions."""
        removed = 0
        live = pl.Series("k", sorted(live_keys), dtype=pl.Utf8).implode()
        # what follows a document's key in the names of its files: its info file and DOC_TABLES' tables
        # (the longest first, so `.entities.parquet` is not read as a key ending in `.entities`)
        suffixes = sorted({".json", *(x for tables in DOC_TABLES.values() for x in tables)}, key=len, reverse=True)
        suffix = "(" + "|".join(re.escape(x) for x in suffixes) + ")$"
        for asset in ("chunks", "doc_subgraph"):
            folder = self.paths.doc_dir(asset)
            if not folder.exists():
                continue
            # names only, matched in one vectorised pass: this runs on every build, over every file
            # (typed: a folder with no document's file yet is an empty column, not a null-typed one)
            listed = [n for n in os.listdir(folder) if not n.startswith(".")]
            names = pl.DataFrame({"name": listed}, schema={"name": pl.Utf8})
            orphans = names.filter(~pl.col("name").str.replace(suffix, "").is_in(live))["name"].to_list()
            for name in orphans:
                (folder / name).unlink(missing_ok=True)
                DOC_STATS.forget((folder / name,))
                removed += 1
        return removed

    def sweep_orphans(self, live_keys: set[str]) -> int | None:
        """remove_orphans, when the documents are not the ones the last sweep kept or that sweep is a
        day old; else None (nothing listed). The sweep lists every file of every document (250,000
        names at 50,000 documents, 0.3 s) and a document's files are orphaned when its partition is
        deleted, which changes the documents. Files written for a deleted partition by a run racing
        the deletion stay until a later sweep: the next one after the documents change again or a day
        on (`verify`, which finds documents by their info files, may name them until then)."""
        # (the tables' suffixes too: a version that names a document's files otherwise sweeps at once)
        listed = "\0".join([repr(sorted(DOC_TABLES.items())), *sorted(live_keys)])
        digest = hashlib.blake2b(listed.encode(), digest_size=16).hexdigest()
        try:
            last = self.read_state(ORPHAN_SWEEP_STATE)
            recent = 0 <= time.time() - float(last.get("at") or 0) < ORPHAN_SWEEP_MAX_AGE
            if last.get("documents") == digest and recent:
                return None
        except (OSError, ValueError, TypeError, AttributeError):  # a damaged record: swept again
            pass
        removed = self.remove_orphans(live_keys)
        try:
            self.write_state(ORPHAN_SWEEP_STATE, {"documents": digest, "at": time.time(), "removed": removed})
        except OSError:  # (a record not written: the next call sweeps again)
            pass
        return removed

    # -- whole graph ----------------------------------------------------------------------------
    # A graph ("knowledge_graph", "resolved_graph") is a bundle of key-range slices (see
    # sliced_graph); a home written before slicing has one file per table, read until rewritten.
    def _legacy_graph_files(self, name: str) -> tuple[Path, Path]:
        return self.paths.graph_dir / f"{name}.nodes.parquet", self.paths.graph_dir / f"{name}.edges.parquet"

    def _graph_bundle(self, name: str) -> ParquetBundle:
        return ParquetBundle(self.paths.graph_dir, name)

    def _graph_manifest(self, name: str) -> dict | None:
        manifest = self._graph_bundle(name).manifest()
        return manifest if manifest is not None and "metrics" in manifest["tables"] else None

    def write_graph(
        self, name: str, nodes: pl.DataFrame, edges: pl.DataFrame, *, files: dict[str, Path] | None = None
    ) -> None:
        """Write the graph's tables; with `files` (a bundle's graph tables holding exactly `nodes`
        and `edges`: the merge's), link them instead (only the tables that changed since get a new
        link): a graph of a million edges is encoded once per update, and only where it changed."""
        bundle = self._graph_bundle(name)
        previous = bundle.manifest()
        if files is not None:
            written = bundle.link(files, previous=previous)
        else:
            nodes = nodes.select(list(NODE_SCHEMA)).cast(NODE_SCHEMA)
            edges = edges.select(list(EDGE_SCHEMA)).cast(EDGE_SCHEMA)
            tables = sliced_graph.graph_tables(nodes, edges, [])  # one slice of each
            written = bundle.write(tables, previous=previous, drop=set((previous or {}).get("tables", {})))
        sliced_graph.remember(bundle, written, nodes, edges)
        self._drop_legacy_graph_files(name)

    def _drop_legacy_graph_files(self, name: str) -> None:
        """Remove the graph's files from before slicing (once it is written in slices)."""
        for legacy in self._legacy_graph_files(name):
            legacy.unlink(missing_ok=True)

    def copy_graph(self, source: str, target: str) -> None:
        """Graph `target` becomes graph `source` (hard links to its files: a stage that changed nothing)."""
        if self._graph_manifest(source) is None:  # written before slicing: written again, in slices
            nodes, edges = self.read_graph(source)
            self.write_graph(target, nodes, edges)
            return
        bundle = self._graph_bundle(target)
        # a file linked anew is checked first (a damaged file is named here, not passed on); one the
        # target links already was checked when it was linked
        bundle.link(self.graph_table_files(source), previous=bundle.manifest(), check=verify_parquet)
        self._drop_legacy_graph_files(target)

    def graph_table_files(self, name: str) -> dict[str, Path]:
        """Table -> file of the graph as built; FileNotFoundError when it has not been built. A home
        written before slicing gives its two files (under "nodes" and "edges")."""
        manifest = self._graph_manifest(name)
        if manifest is not None:
            bundle = self._graph_bundle(name)
            return {t: bundle.path(manifest, t) for t in sorted(manifest["tables"])}
        n, e = self._legacy_graph_files(name)
        if n.exists():
            return {"nodes": n, "edges": e}
        listed = self._listed_graph_files(name)
        if listed:
            missing = [str(f) for f in listed[1:] if not f.exists()]
            raise FileNotFoundError(
                f"{name} is incomplete: {', '.join(missing[:3]) or listed[0]} "
                f"{'is' if len(missing) == 1 else 'are'} missing or unreadable"
            )
        raise FileNotFoundError(
            f"{name} has not been materialized yet ({self._graph_bundle(name).manifest_path} is missing)"
        )

    def _listed_graph_files(self, name: str) -> list[Path]:
        """The manifest of graph `name` and every file it names (whether there or not); empty when
        there is no manifest that can be read."""
        bundle = self._graph_bundle(name)
        try:
            data = read_json(bundle.manifest_path)
        except (OSError, ValueError):
            return [bundle.manifest_path] if bundle.manifest_path.exists() else []
        if not isinstance(data, dict) or not isinstance(data.get("tables"), dict):
            return [bundle.manifest_path] if data is not None else []
        return [bundle.manifest_path, *(bundle.folder / f for _, f in sorted(data["tables"].items()))]

    def _read_part(self, name: str, part: str, columns: list[str] | None) -> pl.DataFrame:
        manifest = self._graph_manifest(name)
        if manifest is not None:
            return sliced_graph.read_part(self._graph_bundle(name), manifest, part, columns)
        files = self.graph_table_files(name)  # a home written before slicing (or not built: raises)
        schema = NODE_SCHEMA if part == "nodes" else EDGE_SCHEMA
        return read_parquet(files[part], schema, columns, remember=True)

    def read_graph(
        self, name: str, node_columns: list[str] | None = None, edge_columns: list[str] | None = None
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The graph's nodes and edges (only the columns named, when given: the checks and the
        clustering need a few columns of a table whose descriptions make most of its bytes)."""
        # side by side: polars decodes without holding the GIL, and the edges are most of the bytes
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="graph-read") as pool:
            edges = pool.submit(self._read_part, name, "edges", edge_columns)
            nodes = self._read_part(name, "nodes", node_columns)
            return nodes, edges.result()

    def read_graph_nodes(self, name: str, columns: list[str] | None = None) -> pl.DataFrame:
        """The graph's nodes alone (only `columns`, when given)."""
        return self._read_part(name, "nodes", columns)

    def read_graph_among(self, name: str, keys: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The nodes `keys` of graph `name` and the edges between two of them: what a few
        communities' reports read, without decoding every description of a million-edge graph."""
        wanted = pl.Series("k", sorted(set(keys)), dtype=pl.Utf8).implode()
        inside = pl.col("source_key").is_in(wanted) & pl.col("target_key").is_in(wanted)
        manifest = self._graph_manifest(name)
        out = []
        for part, where, schema in (
            ("nodes", pl.col("key").is_in(wanted), NODE_SCHEMA),
            ("edges", inside, EDGE_SCHEMA),
        ):
            if manifest is not None:
                files = sliced_graph.part_files(self._graph_bundle(name), manifest, part)
                key = sliced_graph.memo_key(part, files) if TABLES.enabled else None
                known = TABLES.get_key(key) if key is not None else None  # kept whole by an earlier stage
                out.append(
                    known.filter(where) if known is not None else sliced_graph.load_part_where(files, part, where)
                )
                continue
            path = self.graph_table_files(name)[part]
            known = TABLES.get(path)  # the whole table, when an earlier stage of this process had it
            if known is not None:
                out.append(known.filter(where))
                continue
            try:
                out.append(pl.scan_parquet(path).filter(where).collect())
            except pl.exceptions.PolarsError:  # read whole, to name the damage (DamagedFileError) or succeed
                out.append(read_parquet(path, schema).filter(where))
        return out[0], out[1]

    def graph_files(self, name: str) -> list[Path]:
        """The graph's files: its manifest and every table it names (some may be missing: a check
        names them), or a home's files from before slicing; empty when it has not been built."""
        listed = self._listed_graph_files(name)
        if listed:
            return listed
        return [f for f in self._legacy_graph_files(name) if f.exists()]

    def graph_edge_count(self, name: str) -> int:
        """The graph's number of edges (the table assembled in the memo, else the Parquet footers)."""
        files = [f for t, f in self.graph_table_files(name).items() if t == "edges" or t.startswith("edges-")]
        known = sliced_graph.remembered_rows("edges", files)
        if known is not None:
            return known
        return sum(pl.scan_parquet(str(f)).select(pl.len()).collect().item() for f in files)

    def communities_file(self) -> Path:
        return self.paths.graph_dir / "communities.parquet"

    def write_state(self, name: str, state: dict) -> None:
        write_json(state, self.paths.graph_dir / f"{name}.json")

    def read_state(self, name: str, default: dict | None = None) -> dict:
        return read_json(self.paths.graph_dir / f"{name}.json", default or {})

    def write_communities(self, df: pl.DataFrame) -> None:
        write_parquet(df, self.paths.graph_dir / "communities.parquet")

    # The clustering state (the table, the clustered edges, report bases, id history) is published
    # as one bundle; communities.parquet, which the other stages read, is written after it.
    def write_community_state(self, state: CommunityState) -> None:
        bundle = ParquetBundle(self.paths.graph_dir, "communities-state")
        bundle.write(
            {
                "table": state.table,
                "edges": state.edges,
                "bases": state.bases,
                "history": state.history,
                "nodes": state.nodes,
            },
            previous=bundle.manifest(),
            settings=state.settings,
            retired=sorted(state.retired),
            clustering_generation=state.generation,
            hash_scheme=state.hash_scheme,
        )
        self.write_communities(state.table)

    def read_community_state(self) -> CommunityState | None:
        """The last clustering's state, or None (first build, or state missing or damaged)."""
        from graphrag_pipeline.graph.communities import CommunityState

        bundle = ParquetBundle(self.paths.graph_dir, "communities-state")
        manifest = bundle.manifest()
        if manifest is None:
            return None
        try:
            return CommunityState(
                table=bundle.read(manifest, "table"),
                edges=bundle.read(manifest, "edges"),
                bases=bundle.read(manifest, "bases"),
                history=bundle.read(manifest, "history"),
                generation=int(manifest["clustering_generation"]),
                settings=manifest.get("settings", {}),
                retired=set(manifest.get("retired", [])),
                nodes=bundle.read(manifest, "nodes") if "nodes" in manifest["tables"] else pl.DataFrame(),
                hash_scheme=manifest.get("hash_scheme", ""),
            )
        except (OSError, ValueError, KeyError, pl.exceptions.PolarsError):
            return None

    def remember_partition(self, digest: str, structure: pl.DataFrame, keep: int = 10) -> None:
        """Remember how a graph (by digest) was clustered; the `keep` most recent graphs are kept."""
        folder = self.paths.graph_dir / "partition_memo"
        write_parquet(structure, folder / f"{digest}.parquet")
        files = sorted(folder.glob("*.parquet"), key=lambda f: f.stat().st_mtime_ns, reverse=True)
        for f in files[keep:]:
            f.unlink(missing_ok=True)

    def recall_partition(self, digest: str) -> pl.DataFrame | None:
        path = self.paths.graph_dir / "partition_memo" / f"{digest}.parquet"
        try:
            return pl.read_parquet(path) if path.exists() else None
        except (OSError, pl.exceptions.PolarsError):
            return None

    # the documents of each report under the signature of what they depend on (index/records.py
    # SourcesMemo): a cache the index stages read and replace; damaged, missing, of another
    # layout or scheme, it is not used (and rebuilt)
    def _report_sources_files(self, asset: str) -> tuple[Path, Path]:
        stem = self.paths.graph_dir / f"report-sources.{asset}"
        return Path(f"{stem}.parquet"), Path(f"{stem}.paths.parquet")

    def read_report_sources(self, asset: str) -> SourcesMemo:
        table_file, paths_file = self._report_sources_files(asset)
        read = _read_cache((table_file, {**SOURCES_MEMO_SCHEMA, "scheme": pl.Utf8}), (paths_file, SOURCES_PATHS_SCHEMA))
        if read is None or not _of_scheme(read[0], SOURCES_MEMO_SCHEME):
            return SourcesMemo()
        table, paths = read
        return SourcesMemo(table.drop("scheme"), paths)

    def write_report_sources(self, asset: str, memo: SourcesMemo) -> None:
        table_file, paths_file = self._report_sources_files(asset)
        if memo.table is None or memo.paths is None:
            table_file.unlink(missing_ok=True)
            paths_file.unlink(missing_ok=True)
            return
        # the lists first: lists newer than their paths are only discarded when a path moved
        write_parquet(memo.table.with_columns(pl.lit(SOURCES_MEMO_SCHEME).alias("scheme")), table_file)
        write_parquet(memo.paths, paths_file)

    def edge_segments(self, name: str, rows: Mapping[str, int]) -> list[tuple[str, int]] | None:
        """(identity, rows) of each file of graph `name`'s edges, in the order a reader puts them end
        to end (RowHashMemo.segments): the rows of an identity in `rows` are taken from there, the
        others' from the file's footer. None for a graph from before slicing or not built, or when a
        file cannot be stat'ed or its footer read."""
        bundle = self._graph_bundle(name)
        manifest = bundle.manifest(present=False)  # (a missing file cannot be stat'ed below)
        if manifest is None or "metrics" not in manifest["tables"]:
            return None
        out = []
        for path in sliced_graph.part_files(bundle, manifest, "edges"):
            identity = stat_identity(path)
            if identity is None:
                return None
            key = ":".join(str(v) for v in identity)
            n = rows.get(key)
            if n is None:
                import pyarrow.lib
                import pyarrow.parquet

                try:  # (the footer alone: a tenth of what a scan of the file costs polars)
                    n = pyarrow.parquet.read_metadata(path).num_rows
                except (OSError, pyarrow.lib.ArrowException):
                    return None
            out.append((key, n))
        return out

    def _row_hash_files(self, asset: str) -> tuple[Path, Path]:
        stem = self.paths.graph_dir / f"row-hashes.{asset}"
        return Path(f"{stem}.parquet"), Path(f"{stem}.segments.parquet")

    def read_row_hashes(self, asset: str) -> RowHashMemo:
        """The asset's RowHashMemo as last written (empty when missing, damaged or of another scheme),
        without segments (see edge_segments)."""
        hashes_file, segments_file = self._row_hash_files(asset)
        read = _read_cache((segments_file, _ROW_HASH_SEGMENTS_SCHEMA), (hashes_file, {HASH: pl.UInt64}))
        if read is None or not _of_scheme(read[0], ROW_HASH_MEMO_SCHEME):
            return RowHashMemo()
        segments, hashes = read
        if segments["rows"].sum() != hashes.height:
            return RowHashMemo()
        known, offset = {}, 0
        for segment, n in zip(segments["segment"], segments["rows"]):
            known[segment] = hashes[HASH].slice(offset, n)
            offset += n
        return RowHashMemo(known=known)

    def write_row_hashes(self, asset: str, memo: RowHashMemo) -> None:
        """Write `memo` back when it changed (its hashes first: segments that do not add up to them are
        not read)."""
        if not memo.changed:
            return
        hashes_file, segments_file = self._row_hash_files(asset)
        if not memo.known:
            segments_file.unlink(missing_ok=True)
            hashes_file.unlink(missing_ok=True)
            return
        series = list(memo.known.values())
        write_parquet(pl.DataFrame({HASH: pl.concat(series)}, schema={HASH: pl.UInt64}), hashes_file)
        segments = pl.DataFrame(
            {
                "segment": list(memo.known),
                "rows": [s.len() for s in series],
                "scheme": [ROW_HASH_MEMO_SCHEME] * len(series),
            },
            schema=_ROW_HASH_SEGMENTS_SCHEMA,
        )
        write_parquet(segments, segments_file)

    def _report_rows_file(self, asset: str) -> Path:
        return self.paths.graph_dir / f"report-rows.{asset}.parquet"

    def read_report_rows(self, asset: str) -> ReportRowsMemo:
        """The asset's ReportRowsMemo as last written (empty when missing, damaged or of another scheme)."""
        read = _read_cache((self._report_rows_file(asset), {**REPORT_ROWS_MEMO_SCHEMA, "scheme": pl.Utf8}))
        if read is None or not _of_scheme(read[0], REPORT_ROWS_SCHEME):
            return ReportRowsMemo()
        return ReportRowsMemo(read[0].drop("scheme"))

    def write_report_rows(self, asset: str, memo: ReportRowsMemo) -> None:
        """Write `memo` back when it changed."""
        if memo.changed and memo.rows is not None:
            write_parquet(
                memo.rows.with_columns(pl.lit(REPORT_ROWS_SCHEME).alias("scheme")), self._report_rows_file(asset)
            )

    def report_identity(self, community_id: str) -> str | None:
        """The identity (device, inode, size, modification time) of the community's report file, as
        text; None when it has none."""
        identity = stat_identity(self.paths.reports_dir / f"{community_id}.json")
        return None if identity is None else ":".join(str(v) for v in identity)

    def read_communities(self) -> pl.DataFrame:
        path = self.communities_file()
        if not path.exists():
            raise FileNotFoundError("communities have not been materialized yet")
        return read_parquet(path)

    # -- reports ---------------------------------------------------------------------------------
    def write_report(self, report: CommunityReport) -> None:
        write_json(report.to_dict(), self.paths.reports_dir / f"{report.community_id}.json")

    def read_report(self, community_id: str) -> CommunityReport | None:
        data = read_json(self.paths.reports_dir / f"{community_id}.json")
        return CommunityReport.from_dict(data) if data else None

    def stored_report_ids(self) -> set[str]:
        """The ids of the stored reports, from one listing of the reports folder (not one look per
        partition: a corpus of 50,000 documents has tens of thousands of report partitions)."""
        try:
            names = os.listdir(self.paths.reports_dir)
        except (FileNotFoundError, NotADirectoryError):
            return set()
        return {name[: -len(".json")] for name in names if name.endswith(".json")}

    def remove_reports_except(self, live: set[str]) -> int:
        removed = 0
        for f in self.paths.reports_dir.glob("*.json"):
            if f.stem not in live:
                f.unlink(missing_ok=True)
                removed += 1
        return removed


def _raise_damaged(files: list[str], cause: BaseException) -> None:
    """After a read of many Parquet files failed: raise DamagedFileError for the first damaged one
    (a slow look at each file, only on this error path); return when none is (e.g. a schema clash)."""
    for f in files:
        try:
            read_parquet(Path(f))
        except DamagedFileError as exc:
            raise exc from cause
        except FileNotFoundError:
            continue
