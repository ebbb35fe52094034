"""Writing the DuckDB search index: every version is a whole file renamed into place.

A reader that opened the previous index keeps reading it; the next reader sees the new one.
No process ever holds a write lock on the published file.

`publish_index` makes a publish cost what changed, not what the corpus holds:

1. the new records are built without vectors, each row with a content hash (index_records);
2. their keys and hashes are compared with those of the published index (its `row_hash`
   column - vectors are never read for this); n-hop paths are re-computed only around edges
   that were added, removed or re-weighted;
3. vectors are computed for new or re-worded rows only; a row whose embedded text is unchanged
   keeps its vector (it is deleted and inserted again with it: DuckDB rewrites a whole column of
   a row group for an UPDATE of a few of its rows, a second per publish at 50,000 documents when
   the description of a hub entity changed);
4. the file the last delta publish replaced (the spare, see duckdb_spare) is caught up with the
   published `changes`; or, when there is none that can be used, the published file is copied
   beside itself (in a thread, while 1-3 run, and flushed to disk there: the checkpoint below then
   writes only what the patch changed, not the whole copy; a publish that ends unchanged or
   rebuilds whole stops the copy and removes it). The changed keys are deleted / inserted /
   updated, `meta` and `changes` are rewritten, the file is verified complete
   (`index_completeness`), checkpointed and renamed over the published file, whose file becomes
   the next spare.

A full rebuild is written instead when there is no previous index, when its schema, row-hash
scheme or embedder differ, when more than MAX_DELTA_FRACTION of the rows change, or when asked.
Either way the tables hold exactly what a full rebuild from the same inputs holds.

DuckDB re-uses the blocks that deleted rows free, so a file patched again and again grows little
(5 % over a compact copy after 27 one-document updates of 50,000 documents). When more than
COMPACT_FREE_FRACTION of the patched copy's blocks are free all the same (and at least
COMPACT_MIN_FREE_BLOCKS), its tables are copied
into a fresh file before it is published (COPY FROM DATABASE: no records, no vectors, same rows;
15 s and 3.5 GB at 50,000 documents, where a full rebuild takes 76 s and 9 GB).

Every publish gets a new `index_id` and `index_version`; `previous_index_id` names the index the
`changes` table (table_name, key, key2, op = upsert | delete) is relative to, so a follower
(Elasticsearch) that holds exactly that index can apply the changes alone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import duckdb
import polars as pl

from graphrag_pipeline.index.duckdb_reader import attach_read_only, release
from graphrag_pipeline.index.duckdb_spare import drop_spare, keep_as_spare, take_spare, usable_spare
from graphrag_pipeline.index.protocol import Embedder
from graphrag_pipeline.index.records import (
    COLUMNS,
    EMBED_TEXT_SCHEME,
    HASH,
    HASH_SCHEME,
    KEYS,
    NHOP_SCHEMA,
    TABLES,
    TEXT_COLUMNS,
    VECTOR_TABLES,
    IndexTables,
    RowHashMemo,
    SourcesMemo,
    add_vectors,
    build_index_rows,
    embed_texts,
    nhop_affected,
    nhop_paths,
    row_hashes,
    rows_with_keys,
    table_columns,
    with_hash,
    with_vectors,
)
from graphrag_pipeline.reports.offline import CommunityReport
from graphrag_pipeline.storage.files import atomic_path

SCHEMA_VERSION = 6  # 3: community_reports.documents (report sources); 4: chunks.page_start/page_end/section;
# 5: entities without community_ids; 6: nhop.rank for nhop.weights (the weights are the relations')
MAX_DELTA_FRACTION = 0.3
# a patched file with more than this share of its blocks free, and at least so many free blocks
# (of 256 KiB: 16 MiB), is compacted (copied) before it is published
COMPACT_FREE_FRACTION = 0.25
COMPACT_MIN_FREE_BLOCKS = 64
# how the file is laid out, its rows hashed and its vectors' texts made: in every index's meta,
# never compared as content
_FORMAT_META = {
    "schema_version": SCHEMA_VERSION,
    "row_hash_scheme": HASH_SCHEME,
    "embed_text_scheme": EMBED_TEXT_SCHEME,
}
CHANGES_SCHEMA = {"table_name": pl.Utf8, "key": pl.Utf8, "key2": pl.Utf8, "op": pl.Utf8}
# meta entries that describe the publish itself rather than the content
_VOLATILE_META = {
    "built_at",
    "index_id",
    "index_version",
    "previous_index_id",
    "previous_version",
    "build_mode",
    "build_reason",
    "rows_rewritten_since_full",  # (older indexes)
    "changed_keys",
    "counts",
}


# -- completeness -------------------------------------------------------------------------------
class IncompleteIndexError(RuntimeError):
    """What was about to be published (or what is published) lacks records; nothing was published."""

    def __init__(self, completeness: IndexCompleteness):
        self.completeness = completeness
        super().__init__(completeness.message())


@dataclass
class IndexCompleteness:
    """An index compared with the graph it must cover."""

    rows: dict[str, int] = field(default_factory=dict)  # rows per table in the index
    expected: dict[str, int] = field(default_factory=dict)  # graph entities, relations, reportable communities
    missing: dict[str, list[str]] = field(default_factory=dict)  # first few missing keys per table
    missing_count: dict[str, int] = field(default_factory=dict)
    extra_count: dict[str, int] = field(default_factory=dict)  # rows for keys the graph no longer has
    duplicate_count: dict[str, int] = field(default_factory=dict)
    without_vector: dict[str, int] = field(default_factory=dict)

    SHOWN = 5

    def problems(self) -> list[str]:
        what = {"entities": "entities", "relations": "relations", "community_reports": "reportable communities"}
        out = []
        for table, n in self.missing_count.items():
            if n:
                first = ", ".join(self.missing[table][: self.SHOWN])
                verb = "have no report" if table == "community_reports" else "are missing"
                out.append(f"{n} of {self.expected[table]} {what[table]} {verb} (first: {first})")
        for table, n in self.extra_count.items():
            if n:
                out.append(f"{n} {table} rows for keys the graph does not have")
        for table, n in self.duplicate_count.items():
            if n:
                out.append(f"{n} duplicate keys in {table}")
        for table, n in self.without_vector.items():
            if n:
                out.append(f"{n} {table} rows without a vector")
        return out

    @property
    def passed(self) -> bool:
        return not self.problems()

    def message(self) -> str:
        problems = self.problems()
        return "the search index is incomplete: " + "; ".join(problems) if problems else "the search index is complete"

    def to_metadata(self) -> dict:
        return {
            "entities": self.rows.get("entities", 0),
            "graph_entities": self.expected.get("entities", 0),
            "relations": self.rows.get("relations", 0),
            "graph_relations": self.expected.get("relations", 0),
            "reports": self.rows.get("community_reports", 0),
            "reportable_communities": self.expected.get("community_reports", 0),
            "rows_without_vector": sum(self.without_vector.values()),
            "missing_reports": self.missing_count.get("community_reports", 0),
            "first_missing_reports": ", ".join(self.missing.get("community_reports", [])[: self.SHOWN]),
            "problems": "; ".join(self.problems()) or "none",
        }


def missing_reports_completeness(missing: list[str], reportable: int) -> IndexCompleteness:
    """The verdict when report files are missing before anything is built."""
    return IndexCompleteness(
        expected={"community_reports": reportable},
        missing={"community_reports": list(missing)},
        missing_count={"community_reports": len(missing)},
    )


def index_completeness(
    con: duckdb.DuckDBPyConnection, nodes: pl.DataFrame, edges: pl.DataFrame, communities: pl.DataFrame
) -> IndexCompleteness:
    """Does the index open on `con` hold every entity and relation of the graph, one report for every
    community of 2+ members, no stale or duplicate keys, and a vector on every row? (The pre-publish
    verification of `publish_index` and the `search_index_is_complete` asset check.)"""
    expected = {
        "entities": nodes.select("key"),
        "relations": edges.select("source_key", "target_key"),
        "community_reports": communities.filter(pl.col("size") >= 2).select("community_id"),
    }
    out = IndexCompleteness()
    for table, want in expected.items():
        keys = list(KEYS[table])
        cols = ", ".join(keys)
        on = " AND ".join(f"w.{k} = t.{k}" for k in keys)
        label = " || ' -> ' || ".join(f"coalesce(w.{k}, '(no key)')" for k in keys)
        con.register("_want", want.to_arrow())
        try:
            # first the cheap test: as many keys on both sides, no key hash twice in the table, the same
            # sum of key hashes - then the sets of keys are equal (one aggregate per side instead of
            # three joins of 800,000 pairs of strings); else the joins below name what differs
            # (a key with a NULL part matches nothing in the joins: it goes to them too)
            null = " OR ".join(f"{k} IS NULL" for k in keys)
            (n, distinct, total, nulls), (wanted, wanted_total, wanted_nulls) = (
                con.execute(
                    f"SELECT count(*), count(DISTINCT hash({cols})), sum(hash({cols})::HUGEINT), "
                    f"count(*) FILTER (WHERE {null}) FROM {table}"
                ).fetchall()[0],
                con.execute(
                    f"SELECT count(*), sum(hash({cols})::HUGEINT), count(*) FILTER (WHERE {null}) FROM _want"
                ).fetchall()[0],
            )
            out.rows[table] = n
            out.expected[table] = want.height
            if n == wanted == distinct and total == wanted_total and nulls == wanted_nulls == 0:
                out.missing[table], out.missing_count[table] = [], 0
                out.extra_count[table] = out.duplicate_count[table] = 0
                continue
            missing = [
                r[0]
                for r in con.execute(
                    f"SELECT {label} FROM _want w WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {on}) ORDER BY 1"
                ).fetchall()
            ]
            out.missing[table] = missing[: IndexCompleteness.SHOWN]
            out.missing_count[table] = len(missing)
            out.extra_count[table] = con.execute(
                f"SELECT count(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM _want w WHERE {on})"
            ).fetchall()[0][0]
            out.duplicate_count[table] = con.execute(
                f"SELECT count(*) - count(DISTINCT ({cols})) FROM {table}"
            ).fetchall()[0][0]
        finally:
            con.unregister("_want")
    for table in VECTOR_TABLES:
        out.without_vector[table] = con.execute(f"SELECT count(*) FROM {table} WHERE embedding IS NULL").fetchall()[0][
            0
        ]
    return out


def check_index_file(
    path: Path, nodes: pl.DataFrame, edges: pl.DataFrame, communities: pl.DataFrame
) -> IndexCompleteness:
    con = attach_read_only(path)
    try:
        return index_completeness(con, nodes, edges, communities)
    finally:
        release(con)


# -- reading a published index ------------------------------------------------------------------
def read_meta(path: Path) -> dict | None:
    """The meta table of a published index (None when there is none or it cannot be read)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        con = attach_read_only(path)
    except duckdb.Error:
        return None
    try:
        return {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}
    except duckdb.Error:
        return None
    finally:
        release(con)


_TEXTS = {
    "entities": "SELECT name AS text, embedding FROM entities",
    "relations": "SELECT source || '->' || target || ': ' || description AS text, embedding FROM relations",
    "community_reports": "SELECT title || chr(10) || summary AS text, embedding FROM community_reports",
    "chunks": "SELECT text, embedding FROM chunks",
}


# a vector with a NaN or an infinity (an older version took them from a faulty embedding endpoint):
# every similarity with it is NaN, which sorts first in SQL
_NOT_FINITE = "NOT isfinite(list_sum(embedding::FLOAT[]))"


def _read_previous_vectors(con) -> dict:
    """The published (text, vector) pairs, without vectors that are not finite (embedded again)."""
    return {name: con.sql(f"SELECT * FROM ({sql}) WHERE NOT {_NOT_FINITE}").pl() for name, sql in _TEXTS.items()}


def nonfinite_vectors(con) -> dict[str, int]:
    """Per vector table, the rows whose vector holds a NaN or an infinity (a full scan: `verify`)."""
    out = {}
    for table in VECTOR_TABLES:
        n = con.execute(f"SELECT count(*) FROM {table} WHERE {_NOT_FINITE}").fetchall()[0][0]
        if n:
            out[table] = n
    return out


def _same_embedder(meta: dict, embedder: Embedder) -> bool:
    """Whether an index's meta names this embedder (model and dimension)."""
    return meta.get("embedding_model") == embedder.model_id and int(meta.get("embedding_dim") or 0) == embedder.dim


def _vectors_of_same_embedder(target: Path, prev: dict, embedder: Embedder) -> dict | None:
    """The published (text, vector) pairs when the published index was embedded by this embedder:
    an index rebuilt for another schema or row-hash scheme (a new version of this project or of
    polars) re-embeds nothing that it has. None when the embedder or the way texts are made for it
    (EMBED_TEXT_SCHEME) differs, or they cannot be read."""
    if not _same_embedder(prev, embedder) or prev.get("embed_text_scheme") != EMBED_TEXT_SCHEME:
        return None  # other vectors, or vectors of texts made another way (or by a version that did not say)
    try:
        con = attach_read_only(target)
    except (duckdb.Error, OSError):
        return None
    try:
        return _read_previous_vectors(con)
    except duckdb.Error:  # a layout too old to hold these columns
        return None
    finally:
        release(con)


# -- writing ------------------------------------------------------------------------------------
def _drop_wal(path: Path) -> None:
    Path(f"{path}.wal").unlink(missing_ok=True)


@contextlib.contextmanager
def _registered(con, name: str, df: pl.DataFrame):
    """`df` readable as the view `name` on `con` while the block runs. When the block fails inside
    a transaction, DuckDB refuses to unregister the view until a rollback ("Current transaction is
    aborted"): that refusal is dropped so that the block's own error is the one raised."""
    con.register(name, df.to_arrow())
    try:
        yield
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.unregister(name)
        raise
    con.unregister(name)


def _insert_frame(con, table: str, df: pl.DataFrame) -> None:
    if df.height == 0:
        return
    cols = table_columns(table)
    with _registered(con, "_src", df.select(cols)):
        con.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM _src")


def _write_meta(con, meta: dict, changes: pl.DataFrame | None) -> None:
    con.execute("DELETE FROM meta")
    con.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v, ensure_ascii=False)) for k, v in meta.items()])
    con.execute("DELETE FROM changes")
    if changes is not None and changes.height:
        with _registered(con, "_chg", changes.select(list(CHANGES_SCHEMA))):
            con.execute("INSERT INTO changes SELECT table_name, key, key2, op FROM _chg")


def _table_counts(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}


def write_duckdb_index(
    tables: IndexTables, target: Path, meta: dict, changes: pl.DataFrame | None = None, verify=None
) -> int:
    """Write all tables to a new DuckDB file and publish it at `target`; returns its size in bytes.

    verify(con) runs on the finished file before it is renamed into place; if it raises, nothing
    is published."""
    with atomic_path(Path(target), ".duckdb", free_old_later=True) as tmp:
        con = duckdb.connect(str(tmp))
        try:
            for name in TABLES:
                df = tables.get(name)
                if HASH not in df.columns:
                    df = df.with_columns(row_hashes(df, COLUMNS[name]).alias(HASH))
                con.register("_src", df.select(table_columns(name)).to_arrow())
                con.execute(f"CREATE TABLE {name} AS SELECT * FROM _src")
                con.unregister("_src")
            con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
            con.execute("CREATE TABLE changes (table_name VARCHAR, key VARCHAR, key2 VARCHAR, op VARCHAR)")
            full_meta = {
                **_FORMAT_META,
                "index_id": uuid.uuid4().hex,
                "index_version": 1,
                "previous_index_id": None,
                "previous_version": None,
                **meta,
                "counts": tables.counts(),
            }
            _write_meta(con, full_meta, changes)
            if verify is not None:
                verify(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()
            _drop_wal(tmp)
        size = tmp.stat().st_size
    return size


# -- the delta ----------------------------------------------------------------------------------
@dataclass
class TableDelta:
    inserted: int = 0  # rows written (new keys, and new versions of re-worded rows)
    updated: int = 0  # rows rewritten with their vector kept (same key and embedded text)
    deleted: int = 0  # rows removed (vanished keys, and old versions of re-worded rows)
    unchanged: int = 0

    @property
    def touched(self) -> int:
        return self.inserted + self.updated + self.deleted


@dataclass
class _TablePlan:
    table: str
    changed: pl.DataFrame  # keys of changed groups + old_rows, new_rows (null = absent)
    delete_keys: pl.DataFrame  # groups to delete (vanished, or replaced)
    insert_rows: pl.DataFrame  # new rows to insert (without vectors for VECTOR_TABLES)
    kept_vectors: pl.DataFrame | None  # (text, embedding) of the insert rows whose text is unchanged
    stats: TableDelta


@dataclass
class PublishResult:
    mode: str  # "delta", "full", or "unchanged" (nothing differed: the file was left as it was)
    reason: str
    tables: dict[str, TableDelta]
    seconds: float
    size: int
    meta: dict
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step
    compacted: bool = False  # the patched file was copied into a compact one before it was published
    verdict: IndexCompleteness | None = None  # what the verification before publishing found (it passed)

    def to_metadata(self) -> dict:
        totals = TableDelta()
        for d in self.tables.values():
            totals.inserted += d.inserted
            totals.updated += d.updated
            totals.deleted += d.deleted
            totals.unchanged += d.unchanged
        return {
            "mode": self.mode,
            "mode_reason": self.reason,
            "publish_seconds": round(self.seconds, 3),
            "rows_inserted": totals.inserted,
            "rows_updated": totals.updated,
            "rows_deleted": totals.deleted,
            "rows_unchanged": totals.unchanged,
            "row_changes": {t: asdict(d) for t, d in self.tables.items()},
            "index_version": self.meta.get("index_version"),
            "previous_version": self.meta.get("previous_version"),
            "changed_keys": 0 if self.mode == "unchanged" else self.meta.get("changed_keys") or 0,
            "phase_seconds": dict(self.phases),
            "compacted": self.compacted,
        }


def _key_cols(table: str) -> list[str]:
    return list(KEYS[table])


# tables whose published keys are unique (index_completeness refuses to publish duplicates)
_UNIQUE_KEYS = ("entities", "relations", "community_reports")


def _diff_unique_by_hash(con, table: str, new: pl.DataFrame) -> pl.DataFrame | None:
    """_diff_groups of a table whose keys are unique, compared by row hash first: a row hash covers
    the key columns, so a row whose hash is on both sides is the same row, and only the rows whose
    hash is on one side are matched by key (a join of integers, not of 800,000 pairs of strings:
    0.11-0.13 -> 0.04-0.05 s on 250,000 relations, guards included). None when the two sides do not
    pair up one to one - a key repeated, or two rows of different keys with one hash - and the
    caller compares by key."""
    keys = _key_cols(table)
    cols = ", ".join(keys)
    old_hashes = con.sql(f"SELECT {HASH} FROM {table}").pl()[HASH]
    new_hashes = new[HASH]
    new_only = new.filter(~new_hashes.is_in(old_hashes.implode())).select(*keys)
    gone_hashes = old_hashes.filter(~old_hashes.is_in(new_hashes.implode()))
    # the rows found on both sides pair up one to one (else a hash is repeated on a side)
    if new.height - new_only.height != old_hashes.len() - gone_hashes.len():
        return None
    if new_hashes.n_unique() != new.height:
        return None
    con.register("_gone", pl.DataFrame({"h": gone_hashes}).to_arrow())
    try:
        old_only = con.sql(f"SELECT {cols} FROM {table} WHERE {HASH} IN (SELECT h FROM _gone)").pl()
    finally:
        con.unregister("_gone")
    if new_only.is_duplicated().any() or old_only.is_duplicated().any():
        return None
    out = old_only.with_columns(pl.lit(1, pl.Int64).alias("old_rows")).join(
        new_only.with_columns(pl.lit(1, pl.Int64).alias("new_rows")), on=keys, how="full", coalesce=True
    )
    # a key only on one side of the changed rows is not among the other side's unchanged rows
    gone = out.filter(pl.col("new_rows").is_null()).select(keys)
    if gone.height and rows_with_keys(new.select(keys), gone, keys).height:
        return None
    added = out.filter(pl.col("old_rows").is_null()).select(keys)
    if added.height:
        con.register("_added", added.to_arrow())
        try:
            known = con.execute(f"SELECT count(*) FROM {table} t SEMI JOIN _added USING ({cols})").fetchall()[0][0]
        finally:
            con.unregister("_added")
        if known:
            return None
    return out.select(*keys, "old_rows", "new_rows")


def _diff_groups(con, table: str, new: pl.DataFrame, only: pl.DataFrame | None = None) -> pl.DataFrame:
    """Groups (by key) whose multiset of row hashes differs between `new` and the published table:
    keys, old_rows, new_rows (null where the group is absent). Reads only keys and hashes.
    only: restrict the comparison to these keys (both sides)."""
    keys = _key_cols(table)
    if only is None and table in _UNIQUE_KEYS:
        by_hash = _diff_unique_by_hash(con, table, new)
        if by_hash is not None:
            return by_hash
    cols = ", ".join(keys)
    con.register("_new", new.select(*keys, HASH).to_arrow())
    old_from = table
    try:
        if only is not None:
            con.register("_only", only.select(keys).to_arrow())
            old_from = f"(SELECT t.* FROM {table} t SEMI JOIN _only USING ({cols}))"
        if table in _UNIQUE_KEYS and not new.select(keys).is_duplicated().any():
            # one row per key on both sides: compare the hashes row to row (no lists to build)
            sql = f"""
                WITH n AS (SELECT {cols}, {HASH} AS h, 1 AS c FROM _new),
                     o AS (SELECT {cols}, {HASH} AS h, 1 AS c FROM {old_from})
                SELECT {cols}, o.c AS old_rows, n.c AS new_rows
                FROM n FULL OUTER JOIN o USING ({cols})
                WHERE n.h IS DISTINCT FROM o.h"""
        else:
            sql = f"""
            WITH n AS (SELECT {cols}, list({HASH} ORDER BY {HASH}) AS h, count(*) AS c FROM _new GROUP BY {cols}),
                 o AS (SELECT {cols}, list({HASH} ORDER BY {HASH}) AS h, count(*) AS c FROM {old_from} GROUP BY {cols})
            SELECT {cols}, o.c AS old_rows, n.c AS new_rows
            FROM n FULL OUTER JOIN o USING ({cols})
            WHERE n.h IS DISTINCT FROM o.h"""
        out = con.sql(sql).pl()
    finally:
        con.unregister("_new")
        if only is not None:
            con.unregister("_only")
    return out.with_columns(pl.col("old_rows").cast(pl.Int64), pl.col("new_rows").cast(pl.Int64))


def _row_ids(con, table: str, keys_df: pl.DataFrame) -> list[int]:
    """The row ids of the rows of `table` whose keys are among `keys_df`'s (a scan of the key
    columns only; a join on the keys reads every column of the table)."""
    keys = _key_cols(table)
    with _registered(con, "_k", keys_df.select(keys)):
        found = con.execute(f"SELECT t.rowid FROM {table} t SEMI JOIN _k USING ({', '.join(keys)})").fetchall()
    return [r[0] for r in found]


def _delete_keys(con, table: str, keys_df: pl.DataFrame) -> None:
    """Delete the rows of `table` whose keys are among `keys_df`'s."""
    if keys_df.height:
        with _registered(con, "_del", keys_df.select(_key_cols(table))):
            on = " AND ".join(f"{table}.{k} = _del.{k}" for k in _key_cols(table))
            con.execute(f"DELETE FROM {table} USING _del WHERE {on}")


def _old_vectors(con, table: str, keys_df: pl.DataFrame) -> pl.DataFrame:
    """The published rows of these keys (keys, the columns their embedded text is made of, vector),
    those whose vector is not finite left out (embedded again). The rows are found by their keys
    first (a scan of the key columns only), then read by row id: a join on the keys read every
    column of the table, vectors included (and an entity's description, megabytes for a hub)."""
    keys = _key_cols(table)
    ids = _row_ids(con, table, keys_df)
    cols = ", ".join(dict.fromkeys([*keys, *TEXT_COLUMNS[table], "embedding"]))
    return con.sql(
        f"SELECT {cols} FROM {table} WHERE rowid IN (SELECT unnest(?::BIGINT[])) AND NOT {_NOT_FINITE}", params=[ids]
    ).pl()


def _plan_table(con, table: str, new: pl.DataFrame, old_total: int, only: pl.DataFrame | None = None) -> _TablePlan:
    keys = _key_cols(table)
    changed = _diff_groups(con, table, new, only)
    replaced = changed.filter(pl.col("old_rows").is_not_null() & pl.col("new_rows").is_not_null())
    kept_vectors, kept = None, 0
    if table in VECTOR_TABLES and replaced.height:
        # one row before and after with the same embedded text: written again with its old vector
        single = replaced.filter((pl.col("old_rows") == 1) & (pl.col("new_rows") == 1)).select(keys)
        if single.height:
            old = _old_vectors(con, table, single)
            old = old.select(*keys, pl.Series("text", embed_texts(table, old), dtype=pl.Utf8), "embedding")
            cur = rows_with_keys(new, single, keys)
            cur = cur.select(*keys, pl.Series("text", embed_texts(table, cur), dtype=pl.Utf8))
            same = cur.join(old, on=[*keys, "text"], how="inner")
            kept_vectors, kept = same.select("text", "embedding"), same.height
    gone = changed.filter(pl.col("new_rows").is_null())
    added = changed.filter(pl.col("old_rows").is_null())
    delete_keys = pl.concat([gone.select(keys), replaced.select(keys)])
    insert_keys = pl.concat([added.select(keys), replaced.select(keys)])
    insert_rows = rows_with_keys(new, insert_keys, keys) if insert_keys.height else new.clear()
    n_deleted = int(gone["old_rows"].sum() or 0) + int(replaced["old_rows"].sum() or 0)
    stats = TableDelta(inserted=insert_rows.height - kept, updated=kept, deleted=n_deleted - kept)
    if table == "ty2ents" and changed.height:  # rewritten whole (see _apply)
        insert_rows, stats = new, TableDelta(inserted=new.height, deleted=old_total)
    stats.unchanged = old_total - stats.deleted - stats.updated
    return _TablePlan(table, changed, delete_keys, insert_rows, kept_vectors, stats)


def _changes_frame(plans: dict[str, _TablePlan]) -> pl.DataFrame:
    frames = []
    for table, plan in plans.items():
        keys = _key_cols(table)
        if not plan.changed.height:
            continue
        frames.append(
            plan.changed.select(
                pl.lit(table).alias("table_name"),
                pl.col(keys[0]).alias("key"),
                (pl.col(keys[1]) if len(keys) > 1 else pl.lit(None, pl.Utf8)).alias("key2"),
                pl.when(pl.col("new_rows").is_null()).then(pl.lit("delete")).otherwise(pl.lit("upsert")).alias("op"),
            )
        )
    return pl.concat(frames) if frames else pl.DataFrame(schema=CHANGES_SCHEMA)


def _apply(con, plans: dict[str, _TablePlan], inserts: dict[str, pl.DataFrame]) -> None:
    """Delete and insert the planned rows (inserts: the planned insert rows with their vectors)."""
    for table, plan in plans.items():
        if table == "ty2ents":
            if plan.changed.height:  # six-odd rows: rewritten whole, so the table keeps its order
                con.execute("DELETE FROM ty2ents")
                _insert_frame(con, "ty2ents", inserts["ty2ents"])
            continue
        _delete_keys(con, table, plan.delete_keys)
        _insert_frame(con, table, inserts[table])


# A table many of whose rows were replaced since it was written whole is written whole again after
# the patch's checkpoint, in a transaction of its own (same rows). DuckDB's checkpoint writes again
# every row appended to a row group since that group was written, and a patch appends the new version
# of each row it replaces: without this, each publish took longer than the one before (the entities'
# checkpoint at 50,000 documents: 0.08 s after a full build, 0.68 s some 60 updates later).
#
# When: the replaced rows still stored (the tail) cost each later checkpoint about what writing them
# costs, and the rewrite costs about what writing the live rows costs (measured at 50,000 documents:
# 0.27 ms per tail row at a checkpoint, 0.17 ms per row rewritten). A tail growing by `g` rows per
# patch and cleared by a rewrite of `L` rows costs least per patch, on average, when the rewrite comes
# once the tail reaches sqrt(2 L g) (the classic lot-size rule): rare rewrites of a large table whose
# patches replace few rows, never one per patch. Rows, not seconds: the same index decides alike on
# any machine (the earlier gate, a checkpoint of 0.1 s or more, let every publish of a 1,000-document
# index through on a slow machine: a rewrite per update, +0.3 s).
WORN_MIN_ROWS = 500  # a smaller tail is never worth a rewrite of its own
WORN_LOT = 2.0  # the rule's factor: sqrt(WORN_LOT x live rows x rows replaced per patch)


def worn_threshold(live: int, replaced: int) -> float:
    """The tail (replaced rows still stored) at which a table of `live` rows, `replaced` of which
    the current patch replaced, is written whole again (see above)."""
    return max(float(WORN_MIN_ROWS), math.sqrt(WORN_LOT * max(live, 0) * max(replaced, 1)))


def table_tails(con, replaced: Mapping[str, int] | None = None) -> dict[str, tuple[int, float]]:
    """Per table of the database open on `con` (checkpointed): its replaced rows still stored, and
    the `worn_threshold` they are held to (`replaced`: per table, the rows the patch just applied
    replaced)."""
    stored = dict(
        con.execute(
            "SELECT table_name, estimated_size FROM duckdb_tables() WHERE database_name = current_database()"
        ).fetchall()
    )
    live = _table_counts(con)
    replaced = replaced or {}
    return {t: (int(stored.get(t, 0) - live[t]), worn_threshold(live[t], replaced.get(t, 0))) for t in TABLES}


def worn_tables(con, replaced: Mapping[str, int] | None = None) -> list[str]:
    """The tables whose tail reaches its threshold (see table_tails)."""
    return [t for t, (tail, threshold) in table_tails(con, replaced).items() if tail >= threshold]


def rewrite_tables(con, tables: list[str], build_reason: str) -> None:
    """Write `tables` of the database open on `con` afresh (same rows, same order, new storage; in
    DuckDB, which spills what does not fit in memory) in a transaction of their own, which also
    sets the meta's `build_reason`. Raises (the file as it was) when a table comes out with other
    rows. The caller checkpoints."""
    before = content_sums(con, tables)
    con.execute("BEGIN TRANSACTION")
    try:
        for table in tables:
            con.execute(f"CREATE TEMP TABLE _rewrite AS SELECT * FROM {table}")
            con.execute(f"DELETE FROM {table}")
            con.execute(f"INSERT INTO {table} SELECT * FROM _rewrite")
            con.execute("DROP TABLE _rewrite")
        after = content_sums(con, tables)
        if after != before:
            raise RuntimeError(f"the tables {', '.join(tables)} came out of their rewrite with other rows")
        con.execute("INSERT OR REPLACE INTO meta VALUES ('build_reason', ?)", [json.dumps(build_reason)])
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


def content_sums(con, tables: Iterable[str] = TABLES) -> dict[str, tuple[int, int]]:
    """Per table (of `tables`): rows, and the sum of a hash of each row's hash (equal multisets of
    rows give equal sums)."""
    out = {}
    for table in tables:
        n, s = con.execute(f"SELECT count(*), coalesce(sum(hash({HASH})), 0) FROM {table}").fetchall()[0]
        out[table] = (int(n), int(s))
    return out


@dataclass
class CatchUp:
    """What turns the spare (version N-1, see duckdb_spare) into version N: per table, the keys to
    delete (None: every row) and the rows of version N to insert (every column, vectors included);
    and N's content sums."""

    keys: dict[str, pl.DataFrame | None]
    rows: dict[str, pl.DataFrame]
    sums: dict[str, tuple[int, int]]

    @classmethod
    def read(cls, con) -> CatchUp:
        """From the published index (version N) open on `con`: the keys its `changes` table names."""
        changes = con.sql("SELECT table_name, key, key2 FROM changes").pl()
        keys, rows = {}, {}
        for table in TABLES:
            cols = _key_cols(table)
            if table == "ty2ents":  # a few rows, rewritten whole (as _apply does)
                keys[table], rows[table] = None, con.sql(f"SELECT * FROM {table}").pl()
                continue
            keys[table] = (
                changes.filter(pl.col("table_name") == table)
                .select(pl.col("key").alias(cols[0]), *([pl.col("key2").alias(cols[1])] if len(cols) > 1 else []))
                .unique()
            )
            if not keys[table].height:
                rows[table] = con.sql(f"SELECT * FROM {table} LIMIT 0").pl()
                continue
            # read by row id (0.3 -> 0.01 s at 50k: a hub entity's row is megabytes)
            ids = _row_ids(con, table, keys[table])
            rows[table] = con.sql(
                f"SELECT * FROM {table} WHERE rowid IN (SELECT unnest(?::BIGINT[]))", params=[ids]
            ).pl()
        return cls(keys, rows, content_sums(con))

    def apply(self, con) -> None:
        for table in TABLES:
            if self.keys[table] is None:
                con.execute(f"DELETE FROM {table}")
            else:
                _delete_keys(con, table, self.keys[table])
            if self.rows[table].height:
                with _registered(con, "_rows", self.rows[table]):
                    names = ", ".join(self.rows[table].columns)
                    con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM _rows")

    def matches(self, con) -> bool:
        """Whether the file open on `con` now holds what version N holds."""
        return content_sums(con) == self.sums


def _compare(
    con, rows: IndexTables, edges: pl.DataFrame, old_counts: dict[str, int]
) -> tuple[dict[str, _TablePlan], int]:
    """What differs between the new rows and the published index on `con` (keys and hashes only)."""
    plans: dict[str, _TablePlan] = {}
    for table in ("entities", "relations", "community_reports", "chunks", "ty2ents"):
        plans[table] = _plan_table(con, table, rows.get(table), old_counts[table])
    # n-hop paths: re-computed only around edges that were added, removed or re-weighted (the
    # relations that differ in any column: a superset); of the published relations only those
    # touching their endpoints are read
    changed = plans["relations"].changed
    touched = pl.concat([changed["source_key"], changed["target_key"]]).unique().sort()
    if touched.len():
        con.register("_touched", pl.DataFrame({"k": touched}).to_arrow())
        try:
            old_edges = con.sql(
                "SELECT source_key, target_key, weight FROM relations "
                "WHERE source_key IN (SELECT k FROM _touched) OR target_key IN (SELECT k FROM _touched)"
            ).pl()
        finally:
            con.unregister("_touched")
        affected = sorted(nhop_affected(old_edges, edges, touched=touched.to_list()))
    else:
        affected = []
    only = pl.DataFrame({"entity_key": affected}, schema={"entity_key": pl.Utf8})
    local = nhop_paths(edges, only=affected) if affected else pl.DataFrame(schema=NHOP_SCHEMA)
    plans["nhop"] = _plan_table(con, "nhop", with_hash("nhop", local), old_counts["nhop"], only=only)
    return plans, len(affected)


def _compatibility_problem(prev: dict, embedder: Embedder) -> str | None:
    if prev.get("schema_version") != SCHEMA_VERSION:
        return f"schema version {prev.get('schema_version')} -> {SCHEMA_VERSION}"
    if prev.get("row_hash_scheme") != HASH_SCHEME:
        return f"row hash scheme {prev.get('row_hash_scheme')} -> {HASH_SCHEME}"
    if not _same_embedder(prev, embedder):
        return f"embedder {prev.get('embedding_model')} -> {embedder.model_id}"
    if not prev.get("index_id"):
        return "the previous index has no id"
    return None


def free_blocks(con) -> tuple[int, int]:
    """(free, total) blocks of the database file open on `con` (its default database)."""
    row = con.execute(
        "SELECT free_blocks, total_blocks FROM pragma_database_size() WHERE database_name = current_database()"
    ).fetchone()
    return int(row[0]), int(row[1])


_COMPACT_CHECKED = (*TABLES, "meta", "changes")  # the tables whose rows a compacted copy must hold


def _compact(path: Path, build_reason: str) -> None:
    """Replace the DuckDB file at `path` by a copy of its tables (schemas, constraints and rows)
    written afresh: what deleted rows left free is gone. The copy is renamed over `path` only once
    it is complete and holds as many rows per table; `build_reason` goes into its meta."""
    # DuckDB's temporary files go beside the index, under a name clean_temp_files knows
    spill = path.with_name(path.name + ".tmp")
    with atomic_path(path, ".duckdb") as fresh:
        con = duckdb.connect()
        try:
            con.execute("SET temp_directory = ?", [str(spill)])
            con.execute("ATTACH ? AS src (READ_ONLY)", [str(path)])
            con.execute("ATTACH ? AS dst", [str(fresh)])
            con.execute("COPY FROM DATABASE src TO dst")
            for table in _COMPACT_CHECKED:
                n = [con.execute(f"SELECT count(*) FROM {db}.{table}").fetchone()[0] for db in ("src", "dst")]
                if n[0] != n[1]:
                    raise RuntimeError(f"the compacted copy of {path.name} holds {n[1]} rows of {table}, not {n[0]}")
            con.execute("INSERT OR REPLACE INTO dst.meta VALUES ('build_reason', ?)", [json.dumps(build_reason)])
            con.execute("CHECKPOINT dst")
            con.execute("DETACH dst")
            con.execute("DETACH src")
        finally:
            con.close()
            _drop_wal(fresh)
            shutil.rmtree(spill, ignore_errors=True)


class _Copier:
    """A copy of `source` made beside it (under a temporary name, which clean_temp_files knows) and
    flushed to disk, in a thread; `take` waits for it and moves it to its destination, `discard`
    (always called, and before a publish that will not patch) stops it and removes what was not
    taken."""

    CHUNK = 64 << 20  # bytes copied between two looks at the stop flag

    def __init__(self, source: Path):
        fd, name = tempfile.mkstemp(prefix=f".{source.name}.", suffix=".copy.tmp", dir=source.parent)
        os.close(fd)
        os.unlink(name)  # made again by the copy, with the permissions any new file gets (mkstemp's are 0600)
        self.path = Path(name)
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._copy, args=(source,), name="index-copy", daemon=True)
        self._thread.start()

    def _copy(self, source: Path) -> None:
        try:
            with open(source, "rb", buffering=0) as src, open(self.path, "xb", buffering=0) as dst:
                in_kernel = hasattr(os, "sendfile")
                copied = 0
                while not self._stop.is_set():  # a chunk at a time, in the kernel where it can
                    if in_kernel:
                        try:
                            sent = os.sendfile(dst.fileno(), src.fileno(), None, self.CHUNK)
                        except OSError as exc:
                            # a file system without sendfile between files: copy through memory
                            if copied or exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.ENOSYS, errno.EXDEV):
                                raise
                            in_kernel = False
                            continue
                    else:
                        block = src.read(self.CHUNK)
                        sent = dst.write(block) if block else 0
                    if not sent:
                        break
                    copied += sent
                if not self._stop.is_set():
                    os.fsync(dst.fileno())
            if self._stop.is_set():
                self.path.unlink(missing_ok=True)
        except BaseException as exc:  # noqa: BLE001 - raised again by take()
            self._error = exc

    def take(self, dest: Path) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error
        os.replace(self.path, dest)

    def discard(self) -> None:
        self._stop.set()
        try:
            self._thread.join()
        finally:
            self.path.unlink(missing_ok=True)


def publish_index(
    target: Path,
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    communities: pl.DataFrame,
    reports: list[CommunityReport] | pl.DataFrame,
    chunks: pl.DataFrame,
    embedder: Embedder,
    meta: dict,
    *,
    full_rebuild: bool = False,
    max_fraction: float = MAX_DELTA_FRACTION,
    compact_above: float = COMPACT_FREE_FRACTION,
    compact_min_blocks: int = COMPACT_MIN_FREE_BLOCKS,
    log=None,
    sources: SourcesMemo | None = None,
    hashes: RowHashMemo | None = None,
) -> PublishResult:
    """Publish the index of these inputs at `target`, by delta when the published index allows it.

    Raises IncompleteIndexError (nothing published, the old index untouched) when the result would
    not cover the graph; see the module docstring for the rest. sources: the reports' documents as
    last computed (records.SourcesMemo), reused where their members' documents did not change;
    hashes: the relations' row hashes as last computed (records.RowHashMemo), reused likewise."""
    started = time.perf_counter()
    phases: dict[str, float] = {}
    clock = [started]

    def lap(name: str) -> None:
        now = time.perf_counter()
        phases[name] = round(phases.get(name, 0.0) + now - clock[0], 3)
        clock[0] = now

    target = Path(target)
    say = log or (lambda msg: None)
    try:
        stat = os.stat(target)  # before its meta is read: a file replaced after this is noticed
    except FileNotFoundError:
        stat = None
    prev = read_meta(target)
    # a patch is made on a copy of the published file, copied and flushed to disk beside the work
    # that decides what to patch: the checkpoint then writes what the patch changed, not the file
    problem = _compatibility_problem(prev, embedder) if prev is not None else None
    patchable = prev is not None and problem is None and not full_rebuild
    # the file the last delta publish replaced, when it can be caught up instead of copying (see
    # duckdb_spare); else the copy starts now
    spare = usable_spare(target, prev, read_meta) if patchable else None
    copier = _Copier(target) if patchable and spare is None else None
    try:
        rows = build_index_rows(nodes, edges, communities, reports, chunks, nhop=False, sources=sources, hashes=hashes)
        base_meta = {"embedding_model": embedder.model_id, "embedding_dim": embedder.dim, **meta}
        lap("records")

        verified: list[IndexCompleteness] = []

        def verify(con) -> None:
            verdict = index_completeness(con, nodes, edges, communities)
            if not verdict.passed:
                raise IncompleteIndexError(verdict)
            verified.append(verdict)

        def result(
            mode: str, reason: str, stats: dict[str, TableDelta], size: int, published: dict, compacted: bool = False
        ) -> PublishResult:
            lap("write")
            seconds = time.perf_counter() - started
            verdict = verified[-1] if verified else None
            return PublishResult(mode, reason, stats, seconds, size, published, phases, compacted, verdict)

        def full(
            reason: str, previous: dict | None, plans: dict[str, _TablePlan] | None, prev_meta: dict | None
        ) -> PublishResult:
            say(f"full rebuild: {reason}")
            if copier is not None:
                copier.discard()  # not needed: stop it before the new file needs the disk
            tables = add_vectors(replace(rows, nhop=with_hash("nhop", nhop_paths(edges))), embedder, previous)
            lap("vectors")
            changes = _changes_frame(plans) if plans is not None else None
            publish_meta = {
                **base_meta,
                "built_at": time.time(),
                "index_id": uuid.uuid4().hex,
                "index_version": int((prev_meta or {}).get("index_version") or 0) + 1,
                "previous_index_id": prev_meta.get("index_id") if plans is not None else None,
                "previous_version": prev_meta.get("index_version") if plans is not None else None,
                "build_mode": "full",
                "build_reason": reason,
                "changed_keys": changes.height if changes is not None else None,
            }
            size = write_duckdb_index(tables, target, publish_meta, changes, verify=verify)
            drop_spare(target)  # a full rebuild's `changes` cannot catch an older file up
            stats = (
                {t: p.stats for t, p in plans.items()}
                if plans is not None
                else {t: TableDelta(inserted=tables.get(t).height) for t in TABLES}
            )
            return result("full", reason, stats, size, {**publish_meta, "counts": tables.counts()})

        # can the published index be patched?
        if prev is None:
            return full("no previous index", None, None, None)
        if problem:
            return full(problem, _vectors_of_same_embedder(target, prev, embedder), None, prev)

        con = attach_read_only(target)
        try:
            old_counts = _table_counts(con)
            plans, n_affected = _compare(con, rows, edges, old_counts)
            lap("compare")
            # rows with vectors decide (they are what a full build costs); a row of the small vectorless
            # tables (n-hop paths, type pool) counts a tenth
            share = {t: (1.0 if t in VECTOR_TABLES else 0.1) for t in plans}
            touched = int(sum(share[t] * p.stats.touched for t, p in plans.items()))
            total = max(1, int(sum(share.get(t, 1.0) * n for t, n in old_counts.items())))
            say(
                f"compared with index version {prev.get('index_version')}: {touched} of {total} rows differ "
                f"({n_affected} entities with possibly new n-hop paths)"
            )
            reason = None
            if full_rebuild:
                reason = "full rebuild requested"
            elif touched > max_fraction * total:
                reason = f"{touched} of {total} rows change ({touched / total:.0%} > {max_fraction:.0%})"
            if reason:
                previous = _read_previous_vectors(con)  # the vectors of unchanged texts are reused
                release(con)
                con = None
                return full(reason, previous, plans, prev)

            content_meta = {k: v for k, v in base_meta.items() if k not in _VOLATILE_META}
            prev_content = {k: v for k, v in prev.items() if k not in _VOLATILE_META and k not in _FORMAT_META}
            if touched == 0 and content_meta == prev_content:
                if copier is not None:
                    copier.discard()
                verify(con)  # what stays published must be complete too
                return result(
                    "unchanged",
                    "nothing differs from the published index",
                    {t: p.stats for t, p in plans.items()},
                    stat.st_size,
                    prev,
                )
            catch_up = CatchUp.read(con) if spare is not None else None
        finally:
            if con is not None:
                release(con)

        # vectors for the rows to insert only (a text unchanged under the same key keeps its vector)
        inserts: dict[str, pl.DataFrame] = {}
        for table, plan in plans.items():
            rows_in = plan.insert_rows
            inserts[table] = (
                with_vectors(table, rows_in, embedder, plan.kept_vectors)
                if table in VECTOR_TABLES
                else rows_in.select(table_columns(table))
            )
        lap("vectors")
        changes = _changes_frame(plans)
        publish_meta = {
            **base_meta,
            "built_at": time.time(),
            "index_id": uuid.uuid4().hex,
            "index_version": int(prev.get("index_version") or 0) + 1,
            "previous_index_id": prev["index_id"],
            "previous_version": prev.get("index_version"),
            "build_mode": "delta",
            "build_reason": "incremental",
            "changed_keys": changes.height,
        }

        def still_published() -> None:
            now = os.stat(target)
            if (now.st_ino, now.st_size, now.st_mtime_ns) != (stat.st_ino, stat.st_size, stat.st_mtime_ns):
                raise RuntimeError(
                    f"{target} was replaced by another publish while this one compared with it; run again"
                )

        with atomic_path(target, ".duckdb", free_old_later=True) as tmp:
            con = None
            if spare is not None:
                still_published()  # (before the spare is used up)
                con = take_spare(spare, tmp, target, prev["previous_index_id"], catch_up, say)
            if con is None:
                if spare is not None:
                    spare, copier = None, _Copier(target)
                copier.take(tmp)
            try:
                still_published()
                lap("copy" if spare is None else "spare")
                if con is None:
                    con = duckdb.connect(str(tmp))
                    con.execute("BEGIN TRANSACTION")
                _apply(con, plans, inserts)
                counts = _table_counts(con)
                _write_meta(
                    con,
                    {**_FORMAT_META, **publish_meta, "counts": counts},
                    changes,
                )
                con.execute("COMMIT")
                lap("apply")
                verify(con)
                lap("verify")
                con.execute("CHECKPOINT")
                free, blocks = free_blocks(con)
                compact = free > compact_above * blocks and free >= compact_min_blocks
                # (a compaction writes every table afresh anyway; blocks a rewrite frees are used again)
                # the rows this patch replaced; on the spare also those its catch-up replaced (the
                # spare is patched every other publish, with two publishes' changes)
                replaced = {t: plan.stats.deleted + plan.stats.updated for t, plan in plans.items()}
                if spare is not None and catch_up is not None:
                    for t, rows in catch_up.rows.items():
                        replaced[t] = replaced.get(t, 0) + rows.height
                tails = table_tails(con, replaced) if not compact else {}
                worn = [t for t, (tail, threshold) in tails.items() if tail >= threshold]
                reason = f"incremental ({', '.join(worn)} written whole again)" if worn else "incremental"
                if worn:
                    lap("write")
                    why = ", ".join(f"{t} {tails[t][0]:,} (threshold {tails[t][1]:,.0f})" for t in worn)
                    say(f"writing {', '.join(worn)} whole again: replaced rows still stored: {why}")
                    try:
                        rewrite_tables(con, worn, reason)
                    except Exception as exc:  # noqa: BLE001 - the patched file is complete: publish it as it is
                        say(f"{', '.join(worn)} not written whole again ({type(exc).__name__}: {exc})")
                        reason = "incremental"
                    else:
                        publish_meta["build_reason"] = reason
                        con.execute("CHECKPOINT")  # (a failure here fails the publish: what is published stays)
                    lap("rewrite")
            finally:
                if con is not None:
                    con.close()
                _drop_wal(tmp)
            compacted = False
            if compact:
                lap("write")
                say(f"compacting the index file: {free} of {blocks} blocks are free")
                compact_reason = (
                    f"incremental, then compacted ({free} of {blocks} blocks of the patched file were free)"
                )
                try:
                    _compact(tmp, compact_reason)
                    reason, compacted = compact_reason, True
                except Exception as exc:  # noqa: BLE001 - the patched file is complete: publish it as it is
                    say(f"the index file was not compacted ({type(exc).__name__}: {exc}); publishing it as patched")
                    reason = f"incremental (not compacted: {type(exc).__name__}: {exc})"
                lap("compact")
            size = tmp.stat().st_size
            keep_as_spare(target)  # the published file becomes the next publish's spare
        return result(
            "delta",
            reason,
            {t: p.stats for t, p in plans.items()},
            size,
            {**publish_meta, "counts": counts},
            compacted,
        )
    finally:
        if copier is not None:
            copier.discard()
