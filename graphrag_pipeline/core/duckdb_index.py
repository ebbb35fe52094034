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


_TEXTS = {
    "entities": "SELECT name AS text, embedding FROM entities",
    "relations": "SELECT source || '->' || target || ': ' || description AS text, embedding FROM relations",
    "community_reports": "SELECT title || chr(10) || summary AS text, embedding FROM community_reports",
    "chunks": "SELECT text, embedding FROM chunks",
}


def previous_vectors(path: Path, embedding_model: str) -> dict:
    """(text, embedding) per table of the published index, if it was built with the same embedder."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return {}
    try:
        rows = con.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchall()
        row = rows[0] if rows else None
        if not row or json.loads(row[0]) != embedding_model:
            return {}
        return {name: con.sql(sql).pl() for name, sql in _TEXTS.items()}
    except duckdb.Error:
        return {}
    finally:
        con.close()
