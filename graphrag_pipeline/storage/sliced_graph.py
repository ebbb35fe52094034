"""A graph's tables stored in key-range slices, so that an update rewrites only the slices it changed.

The merged graph of 50,000 documents is 230 MB of Parquet (a hub's node lists tens of thousands of
chunk ids, 834,000 edges): written whole, every one-document update paid for encoding all of it. A
graph is stored instead as a `ParquetBundle` (one manifest, written last) of

- `nodes-NNNN`: the nodes whose key falls in slice NNNN, without their metrics, sorted by key;
- `edges-NNNN`: the edges whose `source_key` falls in slice NNNN, sorted by (source_key, target_key);
- `metrics`: every node's degree and PageRank (they move a little everywhere at each update: a
  small table of three columns, written whole).

Slice i holds the keys k with cuts[i-1] <= k < cuts[i]; the cuts are chosen where the graph is
merged from scratch, about SLICE_EDGES edges per slice, and kept (recorded in the merge's
manifest) until a slice has grown to RECUT_FACTOR times that. Read back, the slices are put end to
end in their order: the same rows in the same order as the whole table (sorted), whatever the
cuts. The knowledge graph's and the resolved graph's bundles hold hard links to the merge's files
(a table unchanged since the last build keeps its link), and a table assembled from them is kept
in the table memo under the identity of all its files (device, inode, size, modification time),
so a later stage of the same process gets it without decoding it again.

A graph written from tables (the resolution merged entities, or summaries changed descriptions)
is one slice of each. A home written before slicing has a single file per table
(`<name>.nodes.parquet`, `<name>.edges.parquet`): it is read as it is until the graph is written
again.
"""

from __future__ import annotations

import bisect
import math
from pathlib import Path

import polars as pl

from graphrag_pipeline.graph.tables import EDGE_SCHEMA, NODE_SCHEMA
from graphrag_pipeline.storage.files import TABLES, ParquetBundle, read_parquet, stat_identity

METRICS_SCHEMA = {"key": pl.Utf8, "degree": pl.Int64, "pagerank": pl.Float64}
METRICS = ("degree", "pagerank")
NODE_COLUMNS = [c for c in NODE_SCHEMA if c not in METRICS]  # a node slice's columns
SLICE_EDGES = 4096  # edges per slice where the cuts are chosen
RECUT_FACTOR = 4  # a slice holding this many times SLICE_EDGES gets the cuts chosen again
PARTS = ("nodes", "edges")
# the list columns, compacted in each slice written (see graph_tables)
LIST_COLUMNS = sorted({c for schema in (NODE_SCHEMA, EDGE_SCHEMA) for c, t in schema.items() if t == pl.List(pl.Utf8)})


def slice_name(part: str, i: int) -> str:
    return f"{part}-{i:04d}"


def part_tables(manifest: dict, part: str) -> list[str]:
    """The manifest's tables of `part` ("nodes" or "edges"), in slice order."""
    return sorted(t for t in manifest["tables"] if t.startswith(part + "-"))


def is_graph_table(table: str) -> bool:
    return table == "metrics" or any(table.startswith(p + "-") for p in PARTS)


def choose_cuts(source_keys: pl.Series) -> list[str]:
    """Cut keys for edges whose sorted `source_key`s are `source_keys`: about SLICE_EDGES edges per
    slice (a key's edges stay together, so a hub's slice is larger)."""
    n = len(source_keys)
    count = max(1, math.ceil(n / SLICE_EDGES))
    cuts: list[str] = []
    for i in range(1, count):
        key = source_keys[i * n // count]
        if key is not None and (not cuts or key > cuts[-1]) and key > source_keys[0]:
            cuts.append(key)
    return cuts


def slice_of(key: str, cuts: list[str]) -> int:
    return bisect.bisect_right(cuts, key)


def split(df: pl.DataFrame, column: str, cuts: list[str]) -> list[pl.DataFrame]:
    """`df` (sorted by `column`) cut into len(cuts) + 1 slices (views, no copy)."""
    if not cuts:
        return [df]
    starts = df[column].search_sorted(pl.Series(cuts, dtype=pl.Utf8), side="left").to_list()
    bounds = [0, *starts, df.height]
    return [df.slice(bounds[i], bounds[i + 1] - bounds[i]) for i in range(len(bounds) - 1)]


def graph_tables(
    nodes: pl.DataFrame,
    edges: pl.DataFrame,
    cuts: list[str],
    node_slices: set[int] | None = None,
    edge_slices: set[int] | None = None,
) -> dict[str, pl.DataFrame]:
    """The bundle tables of a graph (nodes with their metrics, both sorted by key) cut at `cuts`:
    every slice, or only those numbered in `node_slices` / `edge_slices`; `metrics` always."""
    out = {"metrics": nodes.select(list(METRICS_SCHEMA)).cast(METRICS_SCHEMA)}
    parts = (
        ("nodes", nodes.select(NODE_COLUMNS), "key", node_slices),
        ("edges", edges.select(list(EDGE_SCHEMA)), "source_key", edge_slices),
    )
    for part, df, column, only in parts:
        for i, piece in enumerate(split(df, column, cuts)):
            if only is None or i in only:
                # a slice's lists are taken out of the whole table's (a sliced list column keeps every
                # value of the table behind it: encoding 4,000 edges of the merged graph of 50,000
                # documents took 0.17 s instead of 0.01)
                out[slice_name(part, i)] = piece.with_columns(
                    pl.col(c).list.eval(pl.element()) for c in LIST_COLUMNS if c in piece.columns
                )
    return out


def oversized(nodes: pl.DataFrame, edges: pl.DataFrame, cuts: list[str], edge_slices: set[int]) -> bool:
    """Has one of the slices `edge_slices` grown past RECUT_FACTOR x SLICE_EDGES edges?"""
    pieces = split(edges.select("source_key"), "source_key", cuts)
    return any(pieces[i].height > RECUT_FACTOR * SLICE_EDGES for i in edge_slices if i < len(pieces))


# -- reading ----------------------------------------------------------------------------------
def _stamps(files: list[Path]) -> tuple | None:
    stamps = tuple(stat_identity(f) for f in files)
    return None if None in stamps else stamps


def memo_key(part: str, files: list[Path]) -> tuple | None:
    """The table memo's key of a table assembled from `files` (None when one is missing)."""
    stamps = _stamps(files)
    return ("sliced-graph", part, stamps) if stamps is not None else None


def _read_files(files: list[Path], schema: dict, columns: list[str] | None) -> pl.DataFrame:
    """The tables of `files` end to end (only `columns`, when given). A missing file raises
    FileNotFoundError, a damaged one DamagedFileError, each naming the file."""
    want = columns or list(schema)
    types = {c: schema[c] for c in want}
    if not files:
        return pl.DataFrame(schema=types)
    try:
        df = pl.read_parquet([str(f) for f in files], columns=want)
    except (OSError, pl.exceptions.PolarsError):
        frames = []
        for f in files:  # one at a time, to name the file at fault
            if not f.exists():
                raise FileNotFoundError(f"{f} is missing (a table of the graph)") from None
            frames.append(read_parquet(f, schema, want))
        df = pl.concat(frames, how="vertical_relaxed")
    return df.select(want).cast(types)


def part_files(bundle: ParquetBundle, manifest: dict, part: str) -> list[Path]:
    """The files a reader of `part` reads: its slices (and, for the nodes, the metrics)."""
    files = [bundle.path(manifest, t) for t in part_tables(manifest, part)]
    return files + [bundle.path(manifest, "metrics")] if part == "nodes" else files


def load_part(files: list[Path], part: str, columns: list[str] | None = None) -> pl.DataFrame:
    """Assemble `part` from its files (part_files): the nodes with their metrics, in NODE_SCHEMA."""
    if part == "edges":
        return _read_files(files, EDGE_SCHEMA, columns)
    want = columns or list(NODE_SCHEMA)
    base_columns = [c for c in NODE_COLUMNS if c in want or c == "key"]
    base = _read_files(files[:-1], {c: NODE_SCHEMA[c] for c in NODE_COLUMNS}, base_columns)
    if any(c in want for c in METRICS):
        metrics = read_parquet(files[-1], METRICS_SCHEMA)
        if metrics["key"].equals(base["key"]):
            base = base.with_columns(metrics["degree"], metrics["pagerank"])
        else:
            base = base.join(metrics, on="key", how="left", maintain_order="left")
    return base.select(want).cast({c: NODE_SCHEMA[c] for c in want})


def load_part_where(files: list[Path], part: str, where: pl.Expr) -> pl.DataFrame:
    """The rows of `part` (from its files, part_files) that match `where` (on the stored columns),
    without decoding the others whole: the few nodes and edges a community's report reads."""
    schema = EDGE_SCHEMA if part == "edges" else {c: NODE_SCHEMA[c] for c in NODE_COLUMNS}
    tables = files if part == "edges" else files[:-1]
    try:
        rows = pl.scan_parquet([str(f) for f in tables]).filter(where).collect() if tables else None
    except (OSError, pl.exceptions.PolarsError):
        rows = _read_files(tables, schema, None).filter(where)  # names the file at fault
    if rows is None:
        rows = pl.DataFrame(schema=schema)
    rows = rows.select(list(schema)).cast(schema)
    if part == "edges":
        return rows
    metrics = read_parquet(files[-1], METRICS_SCHEMA)
    return rows.join(metrics, on="key", how="left", maintain_order="left").select(list(NODE_SCHEMA)).cast(NODE_SCHEMA)


def read_part(bundle: ParquetBundle, manifest: dict, part: str, columns: list[str] | None = None) -> pl.DataFrame:
    """`part` of the bundle's graph (only `columns`, when given), through the table memo: the
    whole table assembled once per process (see the module's docstring)."""
    files = part_files(bundle, manifest, part)
    if TABLES.enabled and files:
        TABLES.await_prefetch(files[0])
        key = memo_key(part, files)
        known = TABLES.get_key(key) if key is not None else None
        if known is not None:
            return known.select(columns) if columns is not None else known
        if columns is None:
            df = load_part(files, part)
            if key is not None and memo_key(part, files) == key:
                TABLES.put(key, df)
            return df
    return load_part(files, part, columns)


def remembered_rows(part: str, files: list[Path]) -> int | None:
    """The rows of `part` assembled from `files` when the table memo holds it, else None."""
    if not TABLES.enabled or not files:
        return None
    key = memo_key(part, files)
    known = TABLES.get_key(key) if key is not None else None
    return known.height if known is not None else None


def remember(bundle: ParquetBundle, manifest: dict, nodes: pl.DataFrame, edges: pl.DataFrame) -> None:
    """Keep `nodes` and `edges` in the table memo as what the bundle's files (just written) hold."""
    if not TABLES.enabled:
        return
    for part, df in (("nodes", nodes), ("edges", edges)):
        key = memo_key(part, part_files(bundle, manifest, part))
        if key is not None:
            TABLES.put(key, df.select(list(NODE_SCHEMA if part == "nodes" else EDGE_SCHEMA)))


def memo_keys(bundle: ParquetBundle, manifest: dict) -> list[tuple]:
    """The table memo's keys of the nodes and edges assembled from the files `manifest` names (to
    forget them once superseded: take them before the files are replaced)."""
    keys = [memo_key(part, part_files(bundle, manifest, part)) for part in PARTS] if TABLES.enabled else []
    return [k for k in keys if k is not None]


def prefetch(bundle: ParquetBundle) -> None:
    """Assemble the bundle's nodes and edges into the table memo in background threads."""
    manifest = bundle.manifest()
    if manifest is None or "metrics" not in manifest["tables"]:
        return
    for part in ("nodes", "edges"):
        files = part_files(bundle, manifest, part)
        TABLES.prefetch_group(files, lambda fs, p=part: memo_key(p, fs), lambda fs, p=part: load_part(fs, p))
