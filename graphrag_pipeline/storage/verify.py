"""Checking what a home holds outside Dagster's records.

Dagster remembers which partitions were materialized, not whether their files are still there and
whole. `downstream_problems` is what every build checks before it says "up to date" (cheap: file
presence, Parquet footers, the index's meta table); `verify_home` is the `verify` command (every
file read, per-document checksums, the index compared with the graph). Every problem names the
file; a build repairs what these report (documents are extracted again from the extraction cache,
the graph and the index are rebuilt, a lost report is written again under a new key).

`verify` also says when what queries read is whole but not current (`currency_problems`): documents
extracted after the last merge (a build that failed or was stopped after the documents' runs, or
the sensors' runs before the graph's), or a last build that failed or did not finish
(state/last-build.json, written by `graphrag-pipeline build`).
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from graphrag_pipeline.index.duckdb_reader import attach_read_only, release
from graphrag_pipeline.index.duckdb_writer import SCHEMA_VERSION as INDEX_SCHEMA_VERSION
from graphrag_pipeline.index.duckdb_writer import check_index_file, nonfinite_vectors, read_meta
from graphrag_pipeline.storage import sliced_graph
from graphrag_pipeline.storage.files import DamagedFileError, parquet_problem, read_json, verify_parquet, write_json
from graphrag_pipeline.storage.store import Store


def _graph_files(paths) -> list[Path]:
    """The files of the knowledge graph and the resolved graph (each: its manifest and the tables
    it names, see sliced_graph; the manifest alone when missing, so that it is reported) and of the
    communities."""
    store = Store.reader(paths)
    out = []
    for name in ("knowledge_graph", "resolved_graph"):
        out.extend(store.graph_files(name) or [paths.graph_dir / f"{name}.manifest.json"])
    return out + [paths.graph_dir / "communities.parquet"]


# The graph stages' working files: bundles of tables under a manifest (the merge's mention rows,
# the chunk shards, the clustering's state) and caches (resolution verdicts, report sources). A
# stage rebuilds one that is missing from the documents' outputs and the graph; removing a damaged
# one (a bundle: its manifest) is its repair.
_BUNDLES = ("mentions", "chunks", "communities-state")
_CACHES = ("resolution.json", "report-sources.search_index.parquet", "report-sources.search_index.paths.parquet")


def _parquet_problem(path: Path, full: bool) -> str | None:
    """What is wrong with a Parquet file: read whole (`full`), else its footer (files.parquet_problem)."""
    if not full:
        return parquet_problem(path)
    if not path.exists():
        return f"{path} is missing"
    try:
        pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        return f"{path} cannot be read ({type(exc).__name__}: {str(exc)[:120]})"
    return None


def _file_problem(path: Path) -> str | None:
    """What is wrong with a graph file (a manifest, or a table read whole)."""
    if path.suffix != ".json":
        return _parquet_problem(path, full=True)
    if not path.exists():
        return f"{path} is missing"
    try:
        read_json(path)
    except DamagedFileError as exc:
        return str(exc)
    return None


_TAIL = 1 << 16  # a table's end read ahead: its footer, for nearly every table


def _read_ends_ahead(files: list[Path]) -> None:
    """Ask the system to read the first page and the last `_TAIL` bytes of each file (what a footer
    check reads) now, all at once: on a cold disk, checking a hundred files one read after the other
    waits for every read in turn (a quarter of a second at 50,000 documents). Advice only: a file
    that cannot be opened is left to its check."""
    if not hasattr(os, "posix_fadvise"):
        return
    for f in files:
        try:
            fd = os.open(f, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            continue
        try:
            size = os.fstat(fd).st_size
            os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_WILLNEED)
            os.posix_fadvise(fd, max(0, size - _TAIL), 0, os.POSIX_FADV_WILLNEED)  # 0: to the end
        except OSError:
            pass
        finally:
            os.close(fd)


def working_file_problems(paths, *, full: bool = False) -> list[tuple[Path, str]]:
    """(the file whose removal repairs it, the problem) for each damaged working file of the graph
    stages. full: read every table whole (`verify`); else only the files' ends (every build)."""
    out: list[tuple[Path, str]] = []
    graph = paths.graph_dir
    for name in _BUNDLES:
        manifest_path = graph / f"{name}.manifest.json"
        if not manifest_path.exists():
            continue  # not written yet, or removed: the stage rebuilds it
        try:
            tables = read_json(manifest_path)["tables"]
            # (every build: the merge's graph slices are the knowledge graph's files, whose ends
            # downstream_problems checks; a merge that cannot read one merges from scratch)
            files = [graph / f for t, f in tables.items() if full or not sliced_graph.is_graph_table(t)]
        except DamagedFileError as exc:
            out.append((manifest_path, str(exc)))
            continue
        except (KeyError, TypeError, AttributeError):
            out.append((manifest_path, f"{manifest_path} does not name the tables of its bundle"))
            continue
        if not full:
            _read_ends_ahead(files)
        for f in files:
            problem = _parquet_problem(f, full)
            if problem:
                out.append((manifest_path, problem))
                break
    if not full:
        _read_ends_ahead([graph / name for name in _CACHES if name.endswith(".parquet")])
    for name in _CACHES:
        f = graph / name
        if not f.exists():
            continue
        if f.suffix == ".json":
            try:
                read_json(f)
            except DamagedFileError as exc:
                out.append((f, str(exc)))
        else:
            problem = _parquet_problem(f, full)
            if problem:
                out.append((f, problem))
    return out


# the graph's Parquet files whose footers downstream_problems found whole, by name, each with what
# identifies its bytes (device, inode, size, modification and status change times): the footer of a file
# with the same identity is not decoded again, only its ends are read (the markers and the footer's
# length: a file whose blocks came back zeroed after a crash fails there). The graphs are ~400 slices at
# 50,000 documents, nearly all unchanged by an update (0.09-0.31 s of footers per build); a slice is
# written once under a name of its own (sliced_graph)
VERIFIED_GRAPH_FILES = "verified-graph-files.json"


def _identity(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def downstream_problems(paths, store, report_ids: list[str]) -> list[str]:
    """Problems with the whole-corpus outputs a build relies on (empty when fine, and on a new home).
    A graph table found whole by an earlier call and not changed since (VERIFIED_GRAPH_FILES) has
    only its ends read."""
    problems = []
    files = _graph_files(paths)
    if not any(f.exists() for f in files) and not paths.index_file.exists():
        return []  # nothing built yet
    record = paths.state_dir / VERIFIED_GRAPH_FILES
    try:
        before = read_json(record, {})
    except (OSError, ValueError):  # a damaged record: every table is read
        before = {}
    before = before if isinstance(before, dict) else {}
    whole: dict[str, str] = {}
    checked = set()  # the resolved graph's tables are mostly hard links of the knowledge graph's
    for f in files:
        try:
            st = os.stat(f)
        except FileNotFoundError:
            problems.append(f"{f} is missing")
            continue
        if (st.st_dev, st.st_ino) in checked:
            continue
        checked.add((st.st_dev, st.st_ino))
        table = f.suffix == ".parquet"
        known = table and before.get(f.name) == _identity(st)
        try:
            read_json(f) if not table else verify_parquet(f, footer=not known)
        except DamagedFileError as exc:
            problems.append(str(exc))
            continue
        if table:
            whole[f.name] = _identity(st)
    if whole != before:
        try:
            write_json(whole, record)
        except OSError:  # (a home that cannot be written fails later, where it is written)
            pass
    present = store.stored_report_ids()
    missing = [k for k in report_ids if k not in present]
    if missing:
        problems.append(
            f"{len(missing)} community reports are missing from {paths.reports_dir} (e.g. {missing[0]}.json)"
        )
    meta = read_meta(paths.index_file)
    if report_ids and meta is None:
        problems.append(f"the search index {paths.index_file} is missing or cannot be read")
    elif meta is not None and meta.get("schema_version") != INDEX_SCHEMA_VERSION:
        problems.append(
            f"the search index {paths.index_file} has schema {meta.get('schema_version')}, this version writes "
            f"{INDEX_SCHEMA_VERSION}"
        )
    return problems


# under state/: {"started_at", then "published_at" (when its runs published the index, if they did),
# then "finished_at" and "ok"} of the CLI's last build
LAST_BUILD = "last-build.json"


def _seconds(t: object) -> float | None:
    """A time stamp read from a file (seconds since the epoch), or None for anything else: a bool,
    NaN, an infinity or a year no clock gives (the file was edited or damaged)."""
    # (a range test: NaN and the infinities fail it; math.isfinite of a 400-digit JSON integer raises)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < 1e11:
        return None
    return float(t)


def _when(t: object) -> str:
    import datetime as dt

    seconds = _seconds(t)
    if seconds is None:
        return "at an unknown time"
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def currency_problems(paths, store, doc_keys: list[str]) -> list[str]:
    """What keeps the graph, the reports and the index from being those of the documents stored
    (empty when they are): documents whose extraction changed, appeared or vanished since the last
    merge, and a last build that failed or did not finish - unless an index was published since
    (by the UI's or the sensors' runs)."""
    from graphrag_pipeline.graph.mentions import recorded_sources
    from graphrag_pipeline.storage.files import ParquetBundle

    problems = []
    bundle = ParquetBundle(paths.graph_dir, "mentions")
    manifest = bundle.manifest()
    if manifest is not None and "sources" in manifest.get("tables", {}):
        try:
            merged = recorded_sources(bundle, manifest)
        except (OSError, pl.exceptions.PolarsError) as exc:
            return [f"the merge's record of its documents in {paths.graph_dir} cannot be read ({exc})"]
        now = store.subgraph_signatures(doc_keys)
        changed = sorted(k for k, sig in now.items() if merged.get(k) != sig and sig != "missing/missing")
        gone = sorted(set(merged) - set(now))
        if changed or gone:
            what = []
            if changed:
                what.append(f"{len(changed)} extracted after the last merge (e.g. {changed[0]})")
            if gone:
                what.append(f"{len(gone)} merged but no longer stored (e.g. {gone[0]})")
            problems.append(
                f"the graph, the reports and the index are not those of the stored documents: {'; '.join(what)}; "
                "`graphrag-pipeline build` merges and publishes them"
            )
    try:
        last = read_json(paths.state_dir / LAST_BUILD, {})
    except (OSError, ValueError):
        last = {}
    last = last if isinstance(last, dict) else {}
    meta = read_meta(paths.index_file) if paths.index_file.exists() else None
    published, started = _seconds((meta or {}).get("built_at")), _seconds(last.get("started_at"))
    if started is None:
        return problems  # no build recorded
    # an index published since (by the UI's or the sensors' runs) supersedes the build; one that the
    # build published itself before it failed, or before it was stopped ("published_at", recorded
    # when its runs end), does not (nor, when that time cannot be read, any)
    if "finished_at" in last:
        since = _seconds(last.get("finished_at"))
    elif "published_at" in last:
        since = _seconds(last.get("published_at"))
    else:
        since = started
    if published is not None and since is not None and published > since:
        return problems
    if "finished_at" not in last:
        problems.append(
            f"the last build (started {_when(started)}) did not finish (stopped, or still running): what it had not "
            "finished is not in the index yet; `graphrag-pipeline build` continues it"
        )
    elif last.get("ok") is False:
        problems.append(
            f"the last build (finished {_when(last.get('finished_at'))}) failed: what it could not finish is not in "
            "the index yet (see its output); `graphrag-pipeline build` continues it"
        )
    return problems


def verify_home(paths, store, doc_keys: list[str], method: str, report_ids: list[str]) -> list[str]:
    """Every check: each document's files and checksums, the graph tables read in full, every report
    parsed, the index complete for the graph. Returns the problems (empty when all is well)."""
    problems = []
    for key in doc_keys:
        problems.extend(store.document_problems(key, method))
    problems.extend(problem for f in _graph_files(paths) if (problem := _file_problem(f)))
    problems.extend(problem for _, problem in working_file_problems(paths, full=True))
    for cid in report_ids:
        try:
            if store.read_report(cid) is None:
                problems.append(f"{paths.reports_dir / (cid + '.json')} is missing")
        except (DamagedFileError, TypeError, ValueError) as exc:
            problems.append(
                str(exc) if isinstance(exc, DamagedFileError) else f"{paths.reports_dir / (cid + '.json')}: {exc}"
            )
    if problems:
        return problems
    if not paths.index_file.exists():
        return [f"the search index {paths.index_file} is missing"] if report_ids else []
    try:
        nodes, edges = store.read_graph("resolved_graph")
        verdict = check_index_file(paths.index_file, nodes, edges, store.read_communities())
    except Exception as exc:  # noqa: BLE001 - a damaged index can fail in many ways; report it
        return [f"the search index {paths.index_file} cannot be checked ({type(exc).__name__}: {str(exc)[:160]})"]
    if not verdict.passed:
        problems.append(
            f"the search index {paths.index_file} does not match the graph: {'; '.join(verdict.problems())}"
        )
    try:
        con = attach_read_only(paths.index_file)
        try:
            bad = nonfinite_vectors(con)
        finally:
            release(con)
    except Exception as exc:  # noqa: BLE001 - replaced or damaged meanwhile: said like the check above
        problems.append(
            f"the search index {paths.index_file} cannot be checked ({type(exc).__name__}: {str(exc)[:160]})"
        )
        return problems
    if bad:
        problems.append(
            f"the search index {paths.index_file} has vectors that are not numbers (NaN or infinity, from a faulty "
            f"embedding endpoint): {', '.join(f'{n} {t}' for t, n in bad.items())}; they rank first in every search. "
            "Rebuild the index: materialize search_index with config full_rebuild: true in the Dagster UI, or "
            f"remove {paths.index_file} and run `graphrag-pipeline build`"
        )
    problems.extend(currency_problems(paths, store, doc_keys))
    return problems
