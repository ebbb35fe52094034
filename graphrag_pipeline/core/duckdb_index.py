"""Writing the DuckDB search index: built in a temporary file, then renamed into place whole.

A reader that opened the previous index keeps reading it; the next reader sees the new one.
No process ever holds a write lock on the published file.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from .index_records import IndexTables
from .storage import atomic_path

SCHEMA_VERSION = 1


def write_duckdb_index(tables: IndexTables, target: Path, meta: dict) -> int:
    """Write all tables to a new DuckDB file and publish it at `target`; returns its size in bytes."""
    with atomic_path(Path(target), ".duckdb") as tmp:
        con = duckdb.connect(str(tmp))
        try:
            for name in ("entities", "relations", "community_reports", "chunks", "nhop", "ty2ents"):
                df = getattr(tables, name)
                con.register("_src", df.to_arrow())
                con.execute(f"CREATE TABLE {name} AS SELECT * FROM _src")
                con.unregister("_src")
            con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            full_meta = {"schema_version": SCHEMA_VERSION, **meta, "counts": tables.counts()}
            con.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v, ensure_ascii=False)) for k, v in full_meta.items()])
            con.execute("CHECKPOINT")
        finally:
            con.close()
        size = tmp.stat().st_size
    return size
