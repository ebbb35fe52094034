"""Checking what a home holds outside Dagster's records.

Dagster remembers which partitions were materialized, not whether their files are still there and
whole. `downstream_problems` is what every build checks before it says "up to date" (cheap: file
presence, Parquet footers, the index's meta table); `verify_home` is the `verify` command (every
file read, per-document checksums, the index compared with the graph). Every problem names the
file; a build repairs what these report (documents are extracted again from the extraction cache,
the graph and the index are rebuilt, a lost report is written again under a new key).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from graphrag_pipeline.index.duckdb_writer import SCHEMA_VERSION as INDEX_SCHEMA_VERSION
from graphrag_pipeline.index.duckdb_writer import check_index_file, read_meta
from graphrag_pipeline.storage.files import DamagedFileError, verify_parquet


def _graph_files(paths) -> list[Path]:
    return [
        paths.graph_dir / f"{name}.{part}.parquet"
        for name in ("knowledge_graph", "resolved_graph")
        for part in ("nodes", "edges")
    ] + [paths.graph_dir / "communities.parquet"]


def downstream_problems(paths, store, report_ids: list[str]) -> list[str]:
    """Problems with the whole-corpus outputs a build relies on (empty when fine, and on a new home)."""
    problems = []
    files = _graph_files(paths)
    if not any(f.exists() for f in files) and not paths.index_file.exists():
        return []  # nothing built yet
    for f in files:
        if not f.exists():
            problems.append(f"{f} is missing")
            continue
        try:
            verify_parquet(f)
        except DamagedFileError as exc:
            problems.append(str(exc))
    missing = [k for k in report_ids if not store.has_report(k)]
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


def verify_home(paths, store, doc_keys: list[str], method: str, report_ids: list[str]) -> list[str]:
    """Every check: each document's files and checksums, the graph tables read in full, every report
    parsed, the index complete for the graph. Returns the problems (empty when all is well)."""
    problems = []
    for key in doc_keys:
        problems.extend(store.document_problems(key, method))
    for f in _graph_files(paths):
        if not f.exists():
            problems.append(f"{f} is missing")
            continue
        try:
            pl.read_parquet(f)
        except (OSError, pl.exceptions.PolarsError) as exc:
            problems.append(f"{f} cannot be read ({type(exc).__name__}: {str(exc)[:120]})")
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
        problems.append(f"the search index {paths.index_file} does not match the graph: {verdict}")
    return problems
